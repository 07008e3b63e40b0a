#include "oracle/real.hpp"

namespace conform::oracle {
namespace {
unsigned bits_to_digits10(unsigned bits) { return static_cast<unsigned>(bits * 0.30103) + 2; }
}  // namespace

PrecisionScope::PrecisionScope(unsigned bits) : saved_digits10_(Real::thread_default_precision()) {
    // The widest exponent range MPFR has (thread-local): tails such as
    // erfc(4e4) ~ 2^-2.3e9 must not underflow to 0.
    mpfr_set_emin(mpfr_get_emin_min());
    mpfr_set_emax(mpfr_get_emax_max());
    Real::thread_default_precision(bits_to_digits10(bits));
}
PrecisionScope::~PrecisionScope() { Real::thread_default_precision(saved_digits10_); }

unsigned current_bits() {
    Real r;
    return static_cast<unsigned>(mpfr_get_prec(r.backend().data()));
}

Real from_double(double v) {
    Real r;
    mpfr_set_d(r.backend().data(), v, MPFR_RNDN);  // exact: precision >= 53
    return r;
}

double to_double(const Real& v) { return mpfr_get_d(v.backend().data(), MPFR_RNDN); }

Real pi() {
    Real r;
    mpfr_const_pi(r.backend().data(), MPFR_RNDN);
    return r;
}

}  // namespace conform::oracle
