// The oracle's number type: MPFR through Boost.Multiprecision, with the
// precision chosen per evaluation (Ziv's strategy re-evaluates at higher
// precision near rounding boundaries, so the precision cannot be a template
// constant).  Transcendentals call MPFR directly: they are correctly rounded
// at the working precision.
#pragma once
#include <boost/multiprecision/mpfr.hpp>
#include <cmath>
#include <cstdlib>

namespace conform::oracle {

using Real = boost::multiprecision::number<boost::multiprecision::mpfr_float_backend<0>,
                                           boost::multiprecision::et_off>;

constexpr unsigned kDefaultBits = 128;

// Working precision of this thread, in bits; restored on scope exit.
class PrecisionScope {
public:
    explicit PrecisionScope(unsigned bits);
    ~PrecisionScope();
    PrecisionScope(const PrecisionScope&) = delete;
    PrecisionScope& operator=(const PrecisionScope&) = delete;

private:
    unsigned saved_digits10_;
};

unsigned current_bits();

// Exact conversion from double (the working precision is always >= 53 bits).
Real from_double(double v);
double to_double(const Real& v);  // round to nearest

using Mpfr1 = int (*)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t);
inline Real apply(Mpfr1 f, const Real& x) {
    Real r;
    f(r.backend().data(), x.backend().data(), MPFR_RNDN);
    return r;
}
inline Real exp(const Real& x) { return apply(mpfr_exp, x); }
inline Real log1p(const Real& x) { return apply(mpfr_log1p, x); }
inline Real tanh(const Real& x) { return apply(mpfr_tanh, x); }
inline Real erfc(const Real& x) { return apply(mpfr_erfc, x); }
inline Real sqrt(const Real& x) { return apply(mpfr_sqrt, x); }
inline Real abs(const Real& x) { return apply(mpfr_abs, x); }
Real pi();
// A decimal constant such as 0.044715, exact to the working precision
// (never through a binary double literal).
inline Real decimal(const char* s) { return Real(s); }

// double overloads so the same templates also run on the FP64 tier.
inline double exp(double x) { return std::exp(x); }
inline double log1p(double x) { return std::log1p(x); }
inline double tanh(double x) { return std::tanh(x); }
inline double erfc(double x) { return std::erfc(x); }
inline double sqrt(double x) { return std::sqrt(x); }
inline double abs(double x) { return std::fabs(x); }
inline bool isnan(double x) { return std::isnan(x); }
inline bool isinf(double x) { return std::isinf(x); }
inline bool signbit(double x) { return std::signbit(x); }
template <class R> R pi_of();
template <> inline Real pi_of<Real>() { return pi(); }
template <> inline double pi_of<double>() { return 3.14159265358979323846; }
template <class R> R decimal_of(const char* s);
template <> inline Real decimal_of<Real>(const char* s) { return decimal(s); }
template <> inline double decimal_of<double>(const char* s) { return std::strtod(s, nullptr); }
// acc += a b rounded once (MPFR's fma), in place: the oracles' dot products
// and weighted sums allocate no temporary per term.  The FP64 tier keeps
// its two roundings.
inline void add_product(Real& acc, const Real& a, const Real& b) {
    mpfr_fma(acc.backend().data(), a.backend().data(), b.backend().data(), acc.backend().data(), MPFR_RNDN);
}
inline void add_product(double& acc, double a, double b) { acc += a * b; }
// x = v exactly (v a double; the working precision is >= 53 bits), in place.
inline void set_exact(Real& x, double v) { mpfr_set_d(x.backend().data(), v, MPFR_RNDN); }
inline bool isnan(const Real& x) { return mpfr_nan_p(x.backend().data()); }
inline bool isinf(const Real& x) { return mpfr_inf_p(x.backend().data()); }
inline bool signbit(const Real& x) { return mpfr_signbit(x.backend().data()); }

}  // namespace conform::oracle
