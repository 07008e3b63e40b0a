#include "numerics/round.hpp"

#include <algorithm>
#include <cmath>

namespace conform {
namespace {

struct Mpfr {
    mpfr_t v;
    explicit Mpfr(mpfr_prec_t p) { mpfr_init2(v, p); }
    ~Mpfr() { mpfr_clear(v); }
};

std::uint64_t round_int8(mpfr_srcptr x) {
    if (mpfr_nan_p(x)) return 0;
    Mpfr r(mpfr_get_prec(x) + 2);
    mpfr_rint(r.v, x, MPFR_RNDN);  // ties to even
    long i = mpfr_fits_slong_p(r.v, MPFR_RNDN) ? mpfr_get_si(r.v, MPFR_RNDN) : (mpfr_sgn(r.v) < 0 ? -128 : 127);
    i = std::clamp(i, -128L, 127L);
    return static_cast<std::uint8_t>(static_cast<std::int8_t>(i));
}

}  // namespace

std::uint64_t round_to_format(mpfr_srcptr x, Format f) {
    if (f == Format::int8) return round_int8(x);
    if (mpfr_nan_p(x)) return encode(f, NAN);
    if (mpfr_inf_p(x)) return encode(f, mpfr_sgn(x) < 0 ? -INFINITY : INFINITY);
    if (mpfr_zero_p(x)) return encode(f, mpfr_signbit(x) ? -0.0 : 0.0);
    const FormatInfo& fi = info(f);
    const bool neg = mpfr_signbit(x);
    // x = m 2^E with m in [1/2, 1): binade exponent E-1.  Clamp far-out
    // exponents so the scaled value fits comfortably (it then rounds to 0 or
    // overflows, as it must).
    long e = static_cast<long>(mpfr_get_exp(x)) - 1;
    long q = std::max<long>(e, fi.emin) - (fi.precision - 1);
    if (e > fi.emax + 2) return encode(f, neg ? -INFINITY : INFINITY);
    if (e < fi.emin - fi.precision - 2) return encode(f, neg ? -0.0 : 0.0);
    Mpfr t(std::max<mpfr_prec_t>(mpfr_get_prec(x), fi.precision + 2));
    mpfr_abs(t.v, x, MPFR_RNDN);             // exact: same or larger precision
    mpfr_mul_2si(t.v, t.v, -q, MPFR_RNDN);   // exact: power of two
    mpfr_rint(t.v, t.v, MPFR_RNDN);          // the one rounding, ties to even
    return assemble_rounded(f, neg, mpfr_get_d(t.v, MPFR_RNDN), static_cast<int>(q));
}

std::optional<std::uint64_t> round_if_determined(mpfr_srcptr x, mpfr_srcptr err, Format f) {
    if (mpfr_nan_p(x) || mpfr_inf_p(x)) return round_to_format(x, f);
    if (mpfr_zero_p(err)) return round_to_format(x, f);
    const mpfr_prec_t p = mpfr_get_prec(x) + 2;
    Mpfr lo(p), hi(p);
    mpfr_sub(lo.v, x, err, MPFR_RNDD);
    mpfr_add(hi.v, x, err, MPFR_RNDU);
    std::uint64_t a = round_to_format(lo.v, f), b = round_to_format(hi.v, f);
    // -0 and +0 are the same value: an interval around zero that rounds to
    // zero on both sides is determined up to the sign of zero, which x gives.
    if (a == b) return a;
    if (is_float(f) && decode(f, a) == 0 && decode(f, b) == 0) return round_to_format(x, f);
    return std::nullopt;
}

}  // namespace conform
