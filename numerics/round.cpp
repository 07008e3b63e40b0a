#include "numerics/round.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

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

namespace conform {

namespace {
// 2^k for normal-range k, built from the bits (ldexp is a library call and
// this sits in the 2^32-pair sweep's inner loop).
inline double pow2(int k) {
    const std::uint64_t b = static_cast<std::uint64_t>(k + 1023) << 52;
    double d;
    std::memcpy(&d, &b, 8);
    return d;
}
}  // namespace

std::optional<std::uint64_t> round_dd(Format f, double hi, double lo, double tol_rel) {
    if (!std::isfinite(hi) || !is_float(f)) return std::nullopt;
    const FormatInfo& fi = info(f);
    const int p = fi.precision;
    const bool neg = std::signbit(hi);
    const double a = std::fabs(hi), la = neg ? -lo : lo;
    const double slack = std::fabs(la) + tol_rel * a;  // how far x may be from |hi|
    // Far below half the smallest subnormal (including a product whose hi
    // underflowed double while lo did not): a signed zero.
    const double half_min = pow2(fi.emin - p);
    if (a + slack < half_min) return encode(f, (hi != 0 || lo == 0 ? neg : std::signbit(lo)) ? -0.0 : 0.0);
    if (a == 0) return std::nullopt;
    if (a < pow2(-1000)) return std::nullopt;  // near double's subnormals: leave it to MPFR
    std::uint64_t b;
    std::memcpy(&b, &a, 8);
    const int E = static_cast<int>(b >> 52) - 1023;
    const std::uint64_t m = (b & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1} << 52);
    const int e = std::max(E, fi.emin);
    const int shift = 52 - (p - 1) + (e - E);  // significand bits below the target's last place
    if (shift >= 63) return std::nullopt;
    std::uint64_t q = m >> shift;
    const std::int64_t rem = static_cast<std::int64_t>(m & ((std::uint64_t{1} << shift) - 1));
    const std::int64_t half = std::int64_t{1} << (shift - 1);
    // Signed distance of |x| above the midpoint between q and q + 1: exact
    // for |hi|, then lo added (relative rounding error 2^-53, covered below).
    const double dist = static_cast<double>(rem - half) * pow2(E - 52) + la;
    if (std::fabs(dist) <= tol_rel * a + std::fabs(dist) * 0x1p-50) return std::nullopt;
    if (dist > 0) ++q;
    return assemble_rounded(f, neg, static_cast<double>(q), e - (p - 1));
}

}  // namespace conform
