// Elementary functions for the activation and gated kernels: in double, as
// 4-lane AVX2 polynomials (namespace vm) and as portable scalar code (libm),
// and in float as 8-lane AVX2 code (namespace vf) for fp16/bf16 outputs only.
// The double functions keep a relative error below 2^-30.2 (libm: a few
// 2^-53), and any error below 2^-25 leaves the one final rounding to fp32,
// fp16 or bf16 within 1 ulp of the correctly rounded result (proof in
// docs/activation.md §4).  The float functions keep ~2^-21 relative error
// (see vf below): enough for 1 ulp in fp16/bf16, not in fp32, so fp32 stays
// on the double path, except sigmoid, silu, gelu_tanh, softcap and softplus,
// which have an 8-lane float-float form below 2^-26.7 (namespace vff).
//
// Every formula is written in a form without cancellation so the relative
// accuracy holds in the tails as well (see the oracle/activation.hpp forms):
//   silu(x) = x / (1 + e^-x),   gelu_tanh(x) = x / (1 + e^-2z) = x sigmoid(2z),
//   gelu_erf(x) = x/2 erfc(-x/sqrt2),   softplus(x) = max(x,0) + log1p(e^-|x|),
//   tanh(a) = E / (E + 2) with E = expm1(2a) (no 1 - e^-2a for small a).
// No function here handles NaN: the drivers in elementwise.hpp map a NaN input
// to a NaN output after the fact, so the math may clamp NaNs freely.
#pragma once
#include "impls/cpu/x86_intrinsics.hpp"

#include <bit>
#include <cfloat>
#include <cmath>

#include "impls/cpu/convert.hpp"  // CONFORM_AVX2
#include "impls/cpu/simd_lanes.hpp"
#include "numerics/op.hpp"

namespace conform::cpu {

// ---- constants ----------------------------------------------------------

inline constexpr double kLn2 = 0x1.62e42fefa39efp-1;
inline constexpr double kLog2e = 0x1.71547652b82fep+0;
inline constexpr double kSqrt1_2 = 0x1.6a09e667f3bcdp-1;  // 1/sqrt(2)
inline constexpr double kSqrt2OverPi = 0x1.9884533d43651p-1;  // sqrt(2/pi)
inline constexpr double kGeluTanhCubic = 0.044715;

// ---- 4-lane double functions for fp32 outputs ------------------------------
// Error model (docs/activation.md §4): every function below has a relative
// error of at most ~2^-32 (the polynomial or rational fit dominates; each
// fit's bound is stated beside it), i.e. far above double's 2^-53 but far
// below the 2^-26 that the final rounding to fp32 can absorb while staying
// within 1 ulp.  They are deliberately no more accurate than that: the
// budget is 1 ulp, not correct rounding, and every halving of the error
// costs polynomial terms on the fp32 kernels' critical resource.
namespace vm {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wignored-attributes"  // __m256d's may_alias, as a template argument

CONFORM_AVX2 inline __m256d set(double v) { return _mm256_set1_pd(v); }

// c[0] + c[1] r + ... + c[N-1] r^(N-1) by Estrin's scheme: pairs
// c[2j] + c[2j+1] r, then pairs of those in r^2, and so on.  The dependency
// chain is ~log2(N) FMAs instead of Horner's N-1, and chain length is what
// limits these kernels: the out-of-order window holds only a few 8-element
// blocks of ~25-cycle-deep FMA chains at a time.  Every term is still formed
// by one FMA per level, so the rounding error stays a few 2^-53 (the series
// here have terms of one sign or decreasing fast).
// c[Off .. Off+N-1] with pw[k] = r^(2^k): low half + r^H * high half, H the
// largest power of two below N.
// Written once over the double lane type D (simd_lanes.hpp: D4 for AVX2,
// D8 for AVX-512, the same bits per lane); the AVX2 names below follow.
template <class D, int Off, int N, int M, class R = typename D::R>
CONFORM_LANES R estrin_l(const double (&c)[M], const R* pw) {
    if constexpr (N == 1) {
        return D::set(c[Off]);
    } else {
        constexpr int H = static_cast<int>(std::bit_floor(static_cast<unsigned>(N - 1)));
        return D::fmadd(estrin_l<D, Off + H, N - H>(c, pw), pw[std::countr_zero(static_cast<unsigned>(H))],
                        estrin_l<D, Off, H>(c, pw));
    }
}
template <class D, int N, class R = typename D::R>
CONFORM_LANES R poly_l(R r, const double (&c)[N]) {
    R pw[4] = {r, r, r, r};
    for (int k = 1; k < 4 && (1 << k) < N; ++k) pw[k] = D::mul(pw[k - 1], pw[k - 1]);
    return estrin_l<D, 0, N>(c, pw);
}
template <int N>
CONFORM_AVX2 inline __m256d poly(__m256d r, const double (&c)[N]) {
    return poly_l<D4>(r, c);
}

// Round-to-integer by the 1.5*2^52 shifter: fma(y, log2e, S) rounds
// y*log2e (formed exactly inside the FMA) to the nearest integer k, and the
// low bits of the result's encoding hold k itself.
inline constexpr double kShifter = 0x1.8p52;

// 2^(k + bias) from the shifter's encoding S + k: (bits + bias) << 52 drops
// S's own bits (its low 52 bits are 2^51, which the shift pushes out).
// (D::pow2_shifted, simd_lanes.hpp.)

// Degree-7 interpolant of e^r at the 8 Chebyshev nodes of [-h, h],
// h = 0.3466 > ln2/2 (the reduction's range plus its rounding).  The
// interpolation remainder is at most e^h h^8 / (8! 2^7) = 5.7e-11 absolute,
// 2^-33.5 relative to e^r >= e^-h (measured: 2^-34.1).
inline constexpr double kExpPoly[8] = {0x1.ffffffffa7056p-1, 0x1.fffffffff61e4p-1, 0x1.0000005c94bcap-1,
                                       0x1.5555557e75f6cp-3, 0x1.5554648e21d60p-5, 0x1.1110a619d432dp-7,
                                       0x1.6da762c0bbd6bp-10, 0x1.a17e00d4cc8d1p-13};

// e^-x with relative error < 2^-33.5, for callers that never need a result
// below e^-708 (2^-1021, a normal double): x is clamped to [-664, 708], so
// one multiply by 2^k scales.  Reduction -x = k ln2 + r by the shifter with
// the negation folded in: s = RN(-x log2e) + S, r = -x - k ln2 by one FMA;
// |k| <= 1022 times ln2's rounding error (2^-55.6) moves r by < 2^-45.5, and
// |r| <= 0.34657 + 2^-42 < h.  x > 708 gives e^-708, which none of the
// callers can tell from the true value after their final rounding (sigmoid,
// silu, gelu_tanh: 1 + e^-708 = 1; softplus and gelu_erf: a float 0 however
// it is scaled, docs/activation.md §4).  x < -664 gives e^664, "huge";
// kInfAtNegInf makes x = -inf give +inf, as silu and gelu_tanh need (their
// -inf numerator is floored to -DBL_MAX: -DBL_MAX / inf = -0), the others
// skip those two instructions; kNonNegative (x >= 0 known) skips the lower clamp.
template <class D, bool kInfAtNegInf = true, bool kNonNegative = false, class R = typename D::R>
CONFORM_LANES R exp_neg_l(R x) {
    const R lo = kNonNegative ? x : D::max(x, D::set(-664.0));
    const R xc = D::min(lo, D::set(708.0));
    const R s = D::fmadd(xc, D::set(-kLog2e), D::set(kShifter));
    const R k = D::sub(s, D::set(kShifter));
    const R r = D::fnmsub(k, D::set(kLn2), xc);
    const R e = D::mul(poly_l<D>(r, kExpPoly), D::pow2_shifted(s, 0));
    if constexpr (kInfAtNegInf) return D::max(e, D::xor_(x, D::set(-0.0)));
    else return e;
}
template <bool kInfAtNegInf = true, bool kNonNegative = false>
CONFORM_AVX2 inline __m256d exp_neg(__m256d x) {
    return exp_neg_l<D4, kInfAtNegInf, kNonNegative>(x);
}

// (e^r - 1) / r, degree-7 interpolant at the Chebyshev nodes of [-h, h]:
// remainder <= max|q^(8)| h^8 / (8! 2^7) < 2^-37 relative (measured 2^-37.5).
inline constexpr double kExpm1Poly[8] = {0x1.fffffffff61e4p-1, 0x1.fffffffffe064p-2, 0x1.5555557e75f6cp-3,
                                         0x1.55555565c746ep-5, 0x1.1110a619d432dp-7, 0x1.6c166be0ac9c4p-10,
                                         0x1.a17e00d4cc8d1p-13, 0x1.a136bb8abfb74p-16};

// e^y - 1 for y in [0, 664], relative error < 2^-36: 2^k (e^r - 1) + (2^k - 1)
// with e^r - 1 = r q(r).  For k = 0 that is r q(r) itself (no subtraction;
// r = y exactly), so tiny y keep full relative accuracy; for k >= 1 the
// terms' cancellation magnifies q's error by at most 1.5 (k = 1, r = -h).
template <class D, class R = typename D::R>
CONFORM_LANES R expm1_pos_l(R y) {
    const R s = D::fmadd(y, D::set(kLog2e), D::set(kShifter));
    const R k = D::sub(s, D::set(kShifter));
    const R r = D::fnmadd(k, D::set(kLn2), y);
    const R p = D::mul(r, poly_l<D>(r, kExpm1Poly));
    const R two_k = D::pow2_shifted(s, 0);
    return D::fmadd(two_k, p, D::sub(two_k, D::set(1.0)));
}

// log1p(t) / t on [0, 1]: the degree-13 interpolant at the 14 Chebyshev nodes
// of [0, 1].  q(t) = log1p(t)/t = int_0^1 ds / (1 + ts) has
// |q^(n)| <= n! / (n + 1) there, so the remainder theorem bounds the error by
// 14!/15 / 14! * 2 (1/4)^14 = 5.0e-10, 2^-30.4 relative to q >= ln 2
// (measured on 20001 points: 2^-38.1).  Coefficients alternate in sign with
// sum |c_i| < 3, so evaluation adds < 2^-48.
inline constexpr double kLog1pPoly[14] = {
    0x1.fffffffff86b5p-1,  -0x1.ffffffe8bacf7p-2, 0x1.55554f5aec742p-2,  -0x1.fffec73566609p-3, 0x1.9988bae7eb3b2p-3,
    -0x1.54c7d9de59bf1p-3, 0x1.21836b26cd460p-3,  -0x1.e870cfc7ed6d1p-4, 0x1.857d9d16e5e46p-4,  -0x1.115728ff5bd10p-4,
    0x1.35d69718ccfc3p-5,  -0x1.00956662644b7p-6, 0x1.0d9c076349fafp-8,  -0x1.0a0f7d8e09539p-11};

// log1p(t) for t in [0, 1] as t q(t), relative error < 2^-30.3 (t may be
// tiny: softplus of a very negative x is log1p(e^x) ~ e^x), no division.
CONFORM_AVX2 inline __m256d log1p_unit(__m256d t) { return _mm256_mul_pd(t, poly(t, kLog1pPoly)); }

// |tanh(a)| as a fraction E / (E + 2), E = expm1(2|a|) with |a| clamped at
// 20 (tanh(20) = 1 - 8.5e-18 rounds to 1 in double): num = E, den = E + 2,
// so callers can merge the division with others.  0 <= num <= den.
template <class R>
struct FracT {
    R num, den;
};
using Frac = FracT<__m256d>;
template <class D, class R = typename D::R>
CONFORM_LANES FracT<R> tanh_abs_frac_l(R a) {
    const R aa = D::min(D::andnot(D::set(-0.0), a), D::set(20.0));
    const R e = expm1_pos_l<D>(D::add(aa, aa));
    return {e, D::add(e, D::set(2.0))};
}
CONFORM_AVX2 inline Frac tanh_abs_frac(__m256d a) { return tanh_abs_frac_l<D4>(a); }

// tanh(z), relative error < 2^-35 for all z, +-1 exactly for |z| >= 20;
// sign-symmetric, tanh(-0) = -0.
CONFORM_AVX2 inline __m256d tanh(__m256d z) {
    const Frac f = tanh_abs_frac(z);
    return _mm256_or_pd(_mm256_div_pd(f.num, f.den), _mm256_and_pd(z, set(-0.0)));
}

// x with -inf replaced by -DBL_MAX, so that x / (1 + e^-x) is -0 at -inf
// (exp gives +inf there) instead of -inf/inf = NaN (the oracle's limit),
// while +inf stays +inf.
CONFORM_AVX2 inline __m256d floor_neg_inf(__m256d x) { return _mm256_max_pd(x, set(-DBL_MAX)); }

// erfcx(t) = e^(t^2) erfc(t) ~ P(t) / Q(t) on [0, 14.2]: a (5, 6) rational
// fit to the relative error (linearised least squares with Lawson
// reweighting, mpmath at 160 bits; docs/activation.md §4), max relative error
// 2^-32.49 on 20001 points of [0, 14.2] with the coefficients as rounded
// here.  Every coefficient is positive, so with t >= 0 Horner or Estrin
// evaluates both without cancellation (relative error <= 7 * 2^-53 each).
// The range covers every gate whose geglu product can be a nonzero fp32:
// |gelu_erf(x)| ~ e^(-t^2) / sqrt(2 pi) must reach 2^-150 / 2^128, i.e.
// t <= 13.85; beyond t = 14.2 the callers clamp t (the value then
// overestimates by at most t / 14.2 a result that rounds to 0 anyway).
inline constexpr double kErfcxP[6] = {0x1.fffffffe975e9p-1, 0x1.766703680d783p+0, 0x1.095ef36c8b77fp+0,
                                      0x1.b24e2b2d31808p-2, 0x1.98ea891c96a00p-4, 0x1.6a9160a8a8027p-7};
inline constexpr double kErfcxQ[7] = {0x1.0000000000000p+0, 0x1.4ba23c08263c2p+1, 0x1.7ae4e3a3eb54ep+1,
                                      0x1.ecf502ade69ecp+0, 0x1.85ebb7e92ccd8p-1, 0x1.6a642ed061bf0p-3,
                                      0x1.41514d46fa539p-6};
inline constexpr double kErfcxMaxT = 14.2;

// gelu_erf(x) = x/2 erfc(-x/sqrt2) with one division: for t = |x|/sqrt2,
// erfc(t) = e^(-x^2/2) P(t)/Q(t) (x^2/2 is exact for a float x, so the
// exponential sees the exact argument), and for x >= 0 erfc(-t) = 2 - erfc(t)
// = (2Q - e^(-x^2/2) P) / Q, where the subtraction cancels at most a factor 3
// on an error of erfc(t) <= 1, i.e. adds at most ~2 eps to a result >= x/2.
// For x^2/2 > 708 the exponential stays at e^-708 and the value at about
// |x| 2^-1026: 0 in fp32 even times |up| <= 2^128 (geglu); x = -inf is
// floored to -FLT_MAX (not -DBL_MAX), so gelu_erf(-inf) is -2^-899, a float
// -0 (geglu(-inf, +-inf) then is an infinity, which the driver's extremes
// check hands to the scalar path: NaN, as the oracle says).
template <class D, class R = typename D::R>
CONFORM_LANES R gelu_erf_l(R x) {
    const R t = D::min(D::mul(D::andnot(D::set(-0.0), x), D::set(kSqrt1_2)), D::set(kErfcxMaxT));
    const R e = exp_neg_l<D, false, true>(D::mul(D::mul(x, x), D::set(0.5)));
    const R q = poly_l<D>(t, kErfcxQ);
    const R ep = D::mul(e, poly_l<D>(t, kErfcxP));
    const R num = D::blend_sign(D::fmsub(q, D::set(2.0), ep), ep, x);  // sign bit of x selects e P
    const R xf = D::max(x, D::set(-FLT_MAX));
    return D::div(D::mul(D::mul(xf, D::set(0.5)), num), q);
}
CONFORM_AVX2 inline __m256d gelu_erf(__m256d x) { return gelu_erf_l<D4>(x); }

#pragma GCC diagnostic pop
}  // namespace vm

// ---- 8-lane float versions, for fp16 and bf16 outputs ---------------------
// Half an ulp of fp16 is 2^-11 relative and of bf16 2^-8; the float functions
// below keep a relative error of a few 2^-22 (ln-scale arguments up to ~100
// cost a few bits more in gelu_tanh), so the one final rounding from float to
// the 16-bit format gives the correctly rounded value or its neighbour.  Where
// a result is a float subnormal (bf16 tails below 2^-126) its absolute error
// stays a few 2^-150, far below bf16's smallest ulp 2^-133.  Inputs are
// exact 16-bit values widened to float, which the gelu_erf form relies on
// (x*x is exact in float for 8- and 11-bit significands).
namespace vf {

CONFORM_AVX2 inline __m256 set(float v) { return _mm256_set1_ps(v); }
CONFORM_AVX2 inline __m256 abs(__m256 x) { return _mm256_andnot_ps(set(-0.0f), x); }

// e^(hi + lo) for hi + lo <= 0, lo in [-2, 0] (lo = 0 for a plain e^hi), in
// 8 (F8) or 16 (F16) lanes, the same operations per lane.
// hi is clamped at -105 (e^-105 < FLT_TRUE_MIN / 2, so the result is 0 there);
// the reduction hi - k*C1 is exact, the scale 2^k is applied as 2^(k+100) (a
// normal number for k >= -160) and then 2^-100, so a subnormal result is
// rounded once.  Cephes expf polynomial; relative error ~2^-23.
template <class L, bool kHasLo = true, class R = typename L::R>
CONFORM_LANES R exp_neg_l(R hi, R lo) {
    hi = L::max(hi, L::set(-105.0f));
    const R sum = kHasLo ? L::add(hi, lo) : hi;
    const R k = L::round_even(L::mul(sum, L::set(0x1.715476p+0f)));
    R r = L::fnmadd(k, L::set(0.693359375f), hi);
    if constexpr (kHasLo) r = L::add(r, lo);
    r = L::fnmadd(k, L::set(-2.12194440e-4f), r);
    R p = L::fmadd(L::set(1.9875691500E-4f), r, L::set(1.3981999507E-3f));
    p = L::fmadd(p, r, L::set(8.3334519073E-3f));
    p = L::fmadd(p, r, L::set(4.1665795894E-2f));
    p = L::fmadd(p, r, L::set(1.6666665459E-1f));
    p = L::fmadd(p, r, L::set(5.0000001201E-1f));
    p = L::fmadd(p, L::mul(r, r), L::add(r, L::set(1.0f)));
    return L::mul(L::mul(p, L::pow2(k, 100)), L::set(0x1p-100f));
}
template <bool kHasLo = true>
CONFORM_AVX2 inline __m256 exp_neg(__m256 hi, __m256 lo) {
    return exp_neg_l<F8, kHasLo>(hi, lo);
}
CONFORM_AVX2 inline __m256 exp_neg(__m256 x) { return exp_neg<false>(x, x); }

// x * sigmoid(a) = x * (a >= 0 ? 1 : t) / (1 + t), t = e^-|a| (no
// cancellation anywhere).  -inf in x is taken as -FLT_MAX so that the limit
// at a = -inf is -0 (as in the double path); x = +inf stays +inf.
CONFORM_AVX2 inline __m256 x_sigmoid(__m256 x, __m256 a) {
    const __m256 t = exp_neg(_mm256_or_ps(a, set(-0.0f)));
    const __m256 num = _mm256_blendv_ps(set(1.0f), t, a);  // sign bit of a selects t
    return _mm256_div_ps(_mm256_mul_ps(_mm256_max_ps(x, set(-FLT_MAX)), num), _mm256_add_ps(set(1.0f), t));
}

CONFORM_AVX2 inline __m256 sigmoid(__m256 a) {
    const __m256 t = exp_neg(_mm256_or_ps(a, set(-0.0f)));
    return _mm256_div_ps(_mm256_blendv_ps(set(1.0f), t, a), _mm256_add_ps(set(1.0f), t));
}

// log1p(t) for t in [0, 1]: for t > 1/2, ln2 + log1p((t-1)/2) (t - 1 exact);
// log1p(f) = 2 atanh(s), s = f / (2 + f), |s| <= 0.2, series to s^9
// (truncation < 2^-26 relative).
CONFORM_AVX2 inline __m256 log1p_unit(__m256 t) {
    const __m256 big = _mm256_cmp_ps(t, set(0.5f), _CMP_GT_OQ);
    const __m256 f = _mm256_blendv_ps(t, _mm256_mul_ps(_mm256_sub_ps(t, set(1.0f)), set(0.5f)), big);
    const __m256 s = _mm256_div_ps(f, _mm256_add_ps(set(2.0f), f));
    const __m256 s2 = _mm256_mul_ps(s, s);
    __m256 p = _mm256_fmadd_ps(set(1.0f / 9), s2, set(1.0f / 7));
    p = _mm256_fmadd_ps(p, s2, set(1.0f / 5));
    p = _mm256_fmadd_ps(p, s2, set(1.0f / 3));
    p = _mm256_mul_ps(p, s2);
    const __m256 s2x = _mm256_add_ps(s, s);
    const __m256 l = _mm256_fmadd_ps(s2x, p, s2x);
    return _mm256_add_ps(l, _mm256_and_ps(big, set(0x1.62e430p-1f)));
}

// beta tanh(x / beta) with a = x / beta: for |a| < 0.625 as x (1 + a^2 P(a^2))
// (Cephes tanhf polynomial; no underflow of a matters since x carries the
// magnitude), else beta (1 - t) / (1 + t), t = e^-2|a| <= 0.29, sign of x.
CONFORM_AVX2 inline __m256 softcap(__m256 x, float beta, float inv_beta) {
    const __m256 a = _mm256_mul_ps(x, set(inv_beta));
    const __m256 z = _mm256_mul_ps(a, a);
    __m256 q = _mm256_fmadd_ps(set(-5.70498872745E-3f), z, set(2.06390887954E-2f));
    q = _mm256_fmadd_ps(q, z, set(-5.37397155531E-2f));
    q = _mm256_fmadd_ps(q, z, set(1.33314422036E-1f));
    q = _mm256_fmadd_ps(q, z, set(-3.33332819422E-1f));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(x, z), q, x);
    const __m256 aa = abs(a);
    const __m256 t = exp_neg(_mm256_mul_ps(aa, set(-2.0f)));
    const __m256 th = _mm256_div_ps(_mm256_sub_ps(set(1.0f), t), _mm256_add_ps(set(1.0f), t));
    const __m256 large = _mm256_or_ps(_mm256_mul_ps(th, set(beta)), _mm256_and_ps(x, set(-0.0f)));
    return _mm256_blendv_ps(large, small, _mm256_cmp_ps(aa, set(0.625f), _CMP_LT_OQ));
}

// x/2 erfc(-x/sqrt2).  erfc(z) for z = |x|/sqrt2 >= 0 is t e^(-z^2 + P(t)),
// t = 1 / (1 + z/2) (Numerical Recipes' erfcc, relative error < 1.2e-7 for
// all z >= 0); -z^2 = -x*x/2 is exact and enters the exponential as the exact
// high part, so large z costs no accuracy.  For x > 0, erfc(-z) = 2 - erfc(z).
CONFORM_AVX2 inline __m256 gelu_erf(__m256 x) {
    const __m256 z = _mm256_mul_ps(abs(x), set(0x1.6a09e6p-1f));
    const __m256 t = _mm256_div_ps(set(1.0f), _mm256_fmadd_ps(z, set(0.5f), set(1.0f)));
    __m256 p = _mm256_fmadd_ps(set(0.17087277f), t, set(-0.82215223f));
    p = _mm256_fmadd_ps(p, t, set(1.48851587f));
    p = _mm256_fmadd_ps(p, t, set(-1.13520398f));
    p = _mm256_fmadd_ps(p, t, set(0.27886807f));
    p = _mm256_fmadd_ps(p, t, set(-0.18628806f));
    p = _mm256_fmadd_ps(p, t, set(0.09678418f));
    p = _mm256_fmadd_ps(p, t, set(0.37409196f));
    p = _mm256_fmadd_ps(p, t, set(1.00002368f));
    p = _mm256_fmadd_ps(p, t, set(-1.26551223f));
    const __m256 hi = _mm256_mul_ps(_mm256_mul_ps(x, x), set(-0.5f));
    const __m256 e = _mm256_mul_ps(t, exp_neg(hi, p));
    const __m256 c = _mm256_blendv_ps(_mm256_sub_ps(set(2.0f), e), e, x);  // sign bit of x selects e
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_max_ps(x, set(-FLT_MAX)), set(0.5f)), c);
}

}  // namespace vf

// ---- 8-lane float-float path for fp32 sigmoid, silu, gelu_tanh, softcap,
// softplus (and swiglu, swiglu_clamp in gated.cpp) -------------------------
// Plain float has ~2^-21 relative error, too much for 1 ulp of fp32 (< 2^-25
// needed, docs/activation.md §4); doing only the steps that carry the error
// in double-word (float-float) arithmetic keeps the total below 2^-27.2
// (sigmoid, silu), 2^-26.7 (gelu_tanh) and 2^-26.8 (softcap, softplus) at 8 lanes per
// instruction (proof in docs/activation.md §4, "float-float").  Valid for
// |x| <= 64 (gelu_tanh: 4.5; softcap: |x/beta| <= 32; every quantity stays a
// normal float or its underflow is bounded); blocks with any other lane
// (larger |x|, infinities, NaN) take the double path (vm), which also applies
// the NaN policy.
namespace vff {

using vf::set;

inline constexpr float kMaxAbs = 64.0f;
inline constexpr float kShifter = 0x1.8p23f;     // ulp 1: RN(S + v) - S = nearest integer to v
inline constexpr float kLog2e = 0x1.715476p+0f;
inline constexpr float kLn2Hi = 0x1.62e430p-1f;   // RN(ln 2): k*kLn2Hi is formed exactly inside an FMA
inline constexpr float kLn2Lo = -0x1.05c610p-29f; // RN(ln 2 - kLn2Hi)
// (e^r - 1 - r - r^2/2) / r^3 on [-h, h], h = 0.3466: degree 4, float
// coefficients refitted one at a time after rounding (weighted minimax,
// mpmath): 1 + r + r^2/2 + r^3 Q(r) is within 2^-33.2 of e^r relatively.
inline constexpr float kExpQ[5] = {0x1.555554p-3f, 0x1.5554e8p-5f, 0x1.11130ep-7f, 0x1.6d4cbcp-10f,
                                   0x1.9dfbaep-13f};

// The float-float core below is written once over the lane type L
// (simd_lanes.hpp: F8 for AVX2, F16 for AVX-512, the same bits per lane);
// the AVX2 names the rest of this file and gated.cpp use follow it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wignored-attributes"  // __m256's may_alias, as a template argument

// All lanes have |x| <= limit (false for NaN).
CONFORM_AVX2 inline bool in_range(__m256 x, float limit = kMaxAbs) { return F8::all_abs_le(x, limit); }

// A double-word (float-float) value hi + lo, |lo| <= ulp(hi)/2 unless stated.
template <class R>
struct FFT {
    R hi, lo;
};
using FF = FFT<__m256>;

// A value q0 + corr with |corr| much smaller than |q0|.
template <class R>
struct SplitT {
    R q0, corr;
};
using Split = SplitT<__m256>;

// e^-|y| as t = th + tl = (eh + el) 2^k, for y = yh + yl (kLow) or a float
// y (yl ignored); |yh| <= 64.  -|y| = k ln2 + r: rh is exact (Sterbenz-type,
// docs/activation.md §4), rl = -k ln2_lo plus the argument's low part with
// the sign of -|y| (-yl for yh >= 0); e^rh by a degree-4 polynomial after
// 1 + rh + rh^2/2, e^rl to first order.
template <class R>
struct ExpNegT {
    R eh, el, two_k, th, tl;
};
using ExpNeg = ExpNegT<__m256>;
template <class L, bool kLow, class R = typename L::R>
CONFORM_LANES ExpNegT<R> exp_neg_abs_l(R yh, R yl) {
    const R one = L::set(1.0f);
    const R na = L::or_(yh, L::set(-0.0f));  // -|yh|
    const R s = L::fmadd(na, L::set(kLog2e), L::set(kShifter));
    const R k = L::sub(s, L::set(kShifter));
    const R rh = L::fnmadd(k, L::set(kLn2Hi), na);
    R rl;
    if constexpr (kLow) rl = L::fmadd(k, L::set(-kLn2Lo), L::xor_(yl, L::andnot(yh, L::set(-0.0f))));
    else rl = L::mul(k, L::set(-kLn2Lo));
    // e^rh = (1 + rh) + rh^2/2 + rh^3 Q(rh): 1 + rh exactly as sh + lo0 (Fast2Sum).
    const R sh = L::add(one, rh);
    const R lo0 = L::add(L::sub(one, sh), rh);
    // Q = c0 + r (c1 + c2 r + r^2 (c3 + c4 r)): 3 FMAs deep, and only the
    // last rounding is not damped by a factor r.
    const R r2 = L::mul(rh, rh);
    const R r3 = L::mul(r2, rh);
    const R q12 = L::fmadd(L::set(kExpQ[2]), rh, L::set(kExpQ[1]));
    const R q34 = L::fmadd(L::set(kExpQ[4]), rh, L::set(kExpQ[3]));
    const R q = L::fmadd(L::fmadd(q34, r2, q12), rh, L::set(kExpQ[0]));
    const R w = L::fmadd(r3, q, lo0);
    const R tail = L::fmadd(L::mul(rh, L::set(0.5f)), rh, w);  // rh^2/2 exact inside
    // e^r = eh + el: Fast2Sum of sh + tail, then e^rh * rl to first order.
    const R eh = L::add(sh, tail);
    const R el = L::fmadd(rl, eh, L::add(L::sub(sh, eh), tail));
    // 2^k from the shifter's low bits (k in [-93, 0]); exact scaling.
    const R two_k = L::pow2_shifted(s);
    return {eh, el, two_k, L::mul(eh, two_k), L::mul(el, two_k)};
}
template <bool kLow>
CONFORM_AVX2 inline ExpNeg exp_neg_abs(__m256 yh, __m256 yl) {
    return exp_neg_abs_l<F8, kLow>(yh, yl);
}

// n/d for n = nh + nl, d = dh + dl (dh > 0) as q0 + corr: q0 = RN(nh/dh),
// nh - q0 dh exact (FMA), n/d - q0 = (rho + nl - q0 dl) / d with the
// division by d replaced by rcp(dh) (2^-11.4 relative, on a small term).
template <class L, class R = typename L::R>
CONFORM_LANES SplitT<R> quotient_l(R nh, R nl, R dh, R dl) {
    const R q0 = L::div(nh, dh);
    const R rho = L::fnmadd(q0, dh, nh);
    const R c = L::fnmadd(q0, dl, L::add(rho, nl));
    return {q0, L::mul(c, L::rcp(dh))};
}
CONFORM_AVX2 inline Split quotient(__m256 nh, __m256 nl, __m256 dh, __m256 dl) {
    return quotient_l<F8>(nh, nl, dh, dl);
}

// c + t as dh + dl for 0 <= t <= c (Fast2Sum; dh = RN(c + th) straight
// from eh 2^k, one step shorter), dl = RN((c - dh) + th + tl).
template <class L, class R = typename L::R>
CONFORM_LANES FFT<R> plus_t_l(R c, const ExpNegT<R>& t) {
    const R dh = L::fmadd(t.eh, t.two_k, c);
    return {dh, L::add(L::add(L::sub(c, dh), t.th), t.tl)};
}
CONFORM_AVX2 inline FF plus_t(__m256 c, const ExpNeg& t) { return plus_t_l<F8>(c, t); }

// sigmoid(y) as q0 + corr, relative error < 2^-27.2 for a float y (kLow
// false, |corr| < 2^-20.4 q0) and < 2^-26.78 for y = yh + yl (kLow true,
// gelu_tanh's 2z: |yh| <= 13.7, |yl| < 2^-18.4, |corr| < 2^-17.1 q0);
// |yh| <= 64.  t = e^-|y| in float-float, then
// (y >= 0 ? 1 : t) / (1 + t) with one residual correction of the rounded
// quotient.
template <class L, bool kLow, class R = typename L::R>
CONFORM_LANES SplitT<R> sigmoid_l(R yh, R yl) {
    const R one = L::set(1.0f);
    const ExpNegT<R> t = exp_neg_abs_l<L, kLow>(yh, yl);
    // d = 1 + t; n = 1 for y >= 0, t for y < 0 (sign bit of yh).
    const FFT<R> d = plus_t_l<L>(one, t);
    const R nh = L::blend_sign(one, t.th, yh);
    const R nl = L::blend_sign(L::zero(), t.tl, yh);
    return quotient_l<L>(nh, nl, d.hi, d.lo);  // corr < 2^-17.1 q0: rcp's error stays < 2^-28.5
}
CONFORM_AVX2 inline Split sigmoid(__m256 x) { return sigmoid_l<F8, false>(x, _mm256_setzero_ps()); }
CONFORM_AVX2 inline Split sigmoid(FF y) { return sigmoid_l<F8, true>(y.hi, y.lo); }

// x * (q0 + corr) rounded once: x q0 + RN(x corr), x q0 exact inside the
// FMA.  The sign of x is or-ed in so that x = -0 gives -0 (x corr may be +0).
template <class L, class R = typename L::R>
CONFORM_LANES R times_l(R x, SplitT<R> q) {
    const R y = L::fmadd(x, q.q0, L::mul(x, q.corr));
    return L::or_(y, L::and_(x, L::set(-0.0f)));
}
CONFORM_AVX2 inline __m256 times(__m256 x, Split q) { return times_l<F8>(x, q); }

// 2z = x (A + B x^2) for gelu_tanh, A = 2 sqrt(2/pi), B = 0.044715 A, in
// float-float: relative error < 2^-43 for |x| <= 4.5 (docs/activation.md
// §4), where |2z| <= 13.7.  e^-|2z| turns the absolute error of 2z into its
// relative error, which is why 2z cannot be a plain float (2^-24 |2z|).
// yh = RN(x v), v = RN(A + B x^2); yl = the rest: x v - yh exactly (FMA),
// plus x times the rounding error of v (exact by Sterbenz: v is in [A, 2A]
// for |x| <= 4.5), A's and B's low parts and x^2's.
inline constexpr float kGeluTanhMaxAbs = 4.5f;
inline constexpr float kGeluA[2] = {0x1.988454p+0f, -0x1.857936p-25f};
inline constexpr float kGeluB[2] = {0x1.2444f2p-4f, 0x1.49b16ap-29f};
template <class L, class R = typename L::R>
CONFORM_LANES FFT<R> gelu_tanh_arg_l(R x) {
    const R p = L::mul(x, x), pl = L::fmsub(x, x, p);  // x^2 = p + pl
    const R v = L::fmadd(L::set(kGeluB[0]), p, L::set(kGeluA[0]));
    const R yh = L::mul(x, v);
    const R ev = L::fmadd(L::set(kGeluB[0]), p, L::sub(L::set(kGeluA[0]), v));  // A_h + B_h p - v
    const R lo = L::fmadd(L::set(kGeluB[0]), pl, L::fmadd(L::set(kGeluB[1]), p, L::add(ev, L::set(kGeluA[1]))));
    return {yh, L::fmadd(x, lo, L::fmsub(x, v, yh))};
}
CONFORM_AVX2 inline FF gelu_tanh_arg(__m256 x) { return gelu_tanh_arg_l<F8>(x); }

// softcap(x) = beta tanh(x / beta) for beta in [2^-60, 2^60] and
// |x / beta| <= 32, relative error < 2^-26.8 before its one final rounding
// (docs/activation.md §4).  beta = bh + bl and ib = RN(1/beta) are floats
// (SoftcapFn).  tanh is odd: a = |x| / beta, the sign of x is or-ed in at
// the end.  w = a in float-float: wh = RN(|x| ib), wl = (|x| - wh beta) ib
// from two FMAs.  a < 0.35: beta tanh(a) = |x| (1 + g), g = tanh(a)/a - 1
// = z P(z), z = w^2 -- no exponential, no cancellation; else
// beta (1 - t)/(1 + t), t = e^-2a from the float-float core, 1 - t and 1 + t
// by Fast2Sum, the quotient with a residual correction as in sigmoid_ff.
inline constexpr float kSoftcapMaxW = 32.0f;   // |x/beta| beyond: the double path
inline constexpr float kSoftcapSmall = 0.35f;  // wh below: the polynomial branch
// P(z) = (tanh(sqrt z)/sqrt z - 1)/z on [0, 0.35^2]: degree 4, float
// coefficients refitted one at a time after rounding (mpmath, minimax of the
// absolute error of z P relative to 1 + z P): |z (P^ - P)| / (1 + zP) < 2^-34.3.
inline constexpr float kTanhP[5] = {-0x1.555556p-2f, 0x1.11116cp-3f, -0x1.ba36b6p-5f, 0x1.673f92p-6f,
                                    -0x1.12810ep-7f};

// The value a b + c before the final rounding: the caller's one FMA rounds it.
struct Fma3 {
    __m256 a, b, c;
};
// beta tanh(ax / beta) for ax = |x| >= 0 as a b + c (ax/beta <= 32).
CONFORM_AVX2 inline Fma3 softcap_abs(__m256 ax, float bh, float bl, float ib) {
    // w = ax / beta = wh + wl: ax - wh bh and the next step are each rounded
    // once (they are < 2^-22.4 ax); the quotient by RN(1/beta) is a relative
    // 2^-23 on a term < 2^-22.9 wh.
    const __m256 wh = _mm256_mul_ps(ax, set(ib));
    const __m256 rem = _mm256_fnmadd_ps(wh, set(bl), _mm256_fnmadd_ps(wh, set(bh), ax));
    const __m256 wl = _mm256_mul_ps(rem, set(ib));
    // Small a: z = w^2 rounded once (2 wh wl carried), m = RN(z P(z)), value
    // ax + ax m.
    const __m256 z = _mm256_fmadd_ps(wh, wh, _mm256_mul_ps(_mm256_add_ps(wh, wh), wl));
    __m256 p = _mm256_fmadd_ps(set(kTanhP[4]), z, set(kTanhP[3]));
    p = _mm256_fmadd_ps(p, z, set(kTanhP[2]));
    p = _mm256_fmadd_ps(p, z, set(kTanhP[1]));
    p = _mm256_fmadd_ps(p, z, set(kTanhP[0]));
    const __m256 m = _mm256_mul_ps(z, p);
    const __m256 small = _mm256_cmp_ps(wh, set(kSoftcapSmall), _CMP_LT_OQ);
    if (_mm256_movemask_ps(small) == 0xFF) return {ax, m, ax};
    // Large a: t = e^-2a = th + tl, n = 1 - t, d = 1 + t (Fast2Sum each).
    const __m256 one = set(1.0f);
    const ExpNeg t = exp_neg_abs<true>(_mm256_add_ps(wh, wh), _mm256_add_ps(wl, wl));
    const __m256 nh = _mm256_fnmadd_ps(t.eh, t.two_k, one);  // RN(1 - th)
    const __m256 nl = _mm256_sub_ps(_mm256_sub_ps(_mm256_sub_ps(one, nh), t.th), t.tl);
    const FF d = plus_t(one, t);
    const auto [q0, corr] = quotient(nh, nl, d.hi, d.lo);
    // beta (q0 + corr) = bh q0 + (bh corr + bl q0), bl corr dropped.
    const __m256 lo = _mm256_fmadd_ps(set(bh), corr, _mm256_mul_ps(set(bl), q0));
    return {_mm256_blendv_ps(set(bh), ax, small), _mm256_blendv_ps(q0, m, small), _mm256_blendv_ps(lo, ax, small)};
}

// softplus(x) = max(x, 0) + log1p(t), t = e^-|x| = th + tl, as hi + lo
// (relative error < 2^-26.8 before the caller's one rounding RN(hi + lo);
// docs/activation.md §4), |x| <= 64.  log1p(t) = 2 atanh(s), s = t/(t + 2),
// for |x| > 0.69, and ln 2 + 2 atanh(s), s = (t - 1)/(t + 3), for
// |x| <= 0.69 (t > 0.5015: th - 1 exact by Sterbenz): s in [-0.1424, 0.2006].
// s = q0 + corr by quotient (n = th - [1] + tl exactly, d = [2|3] + t by
// Fast2Sum), then 2 atanh(s) = 2 q0 + 2 q0^3 P(q0^2) + corr 2/(1 - q0^2):
// the tail 2 q0^3 P is < 1.36 % of it and so in plain float, 2/(1 - u) is
// 2 + 2u + 2u^2.  The high parts max(x, 0) + [ln2_hi] + 2 q0 by two
// Fast2Sums (each with the larger exponent first, or a zero).
// P(u) = (atanh(sqrt u)/sqrt u - 1)/u on [0, 0.0403]: degree 3, float
// coefficients refitted one at a time after rounding, minimax of u (g - P):
// 2s + 2s^3 P(s^2) is within 2^-35.16 of 2 atanh(s) relatively (mpmath).
inline constexpr float kSoftplusBig = 0.69f;
inline constexpr float kAtanhP[4] = {0x1.555554p-2f, 0x1.999c0cp-3f, 0x1.23e042p-3f, 0x1.ee9fe6p-4f};
template <class L, class R = typename L::R>
CONFORM_LANES FFT<R> softplus_ff_l(R x) {
    const ExpNegT<R> t = exp_neg_abs_l<L, false>(x, x);
    const R one = L::set(1.0f), two = L::set(2.0f);
    // |x| <= 0.69 (t > 0.5015, from x: off the exponential's chain) or not.
    const R big = L::ge_mask(L::or_(x, L::set(-0.0f)), L::set(-kSoftplusBig));
    const R b1 = L::and_(big, one);
    // nh = th - b1 (exact) and dh = RN(c + th) straight from eh 2^k = th.
    const R nh = L::fmsub(t.eh, t.two_k, b1);
    const FFT<R> d = plus_t_l<L>(L::add(b1, two), t);
    const SplitT<R> s = quotient_l<L>(nh, t.tl, d.hi, d.lo);
    const R u = L::mul(s.q0, s.q0);
    R p = L::fmadd(L::set(kAtanhP[3]), u, L::set(kAtanhP[2]));
    p = L::fmadd(p, u, L::set(kAtanhP[1]));
    p = L::fmadd(p, u, L::set(kAtanhP[0]));
    const R q2 = L::add(s.q0, s.q0);
    const R xp = L::max(x, L::zero());
    const R ah = L::and_(big, L::set(kLn2Hi));
    const R v = L::add(ah, xp);  // xp < 1 where ah != 0
    const R ve = L::sub(xp, L::sub(v, ah));
    const R w = L::add(v, q2);  // v = 0 or v >= 1/2 > |q2|
    const R we = L::add(L::sub(v, w), q2);
    // Low parts: the small ones first, then the tail 2 q0 u P with one rounding.
    const R k = L::fmadd(L::fmadd(u, two, two), u, two);  // 2 + 2u + 2u^2 ~ 2/(1 - u)
    const R small = L::add(L::add(we, ve), L::and_(big, L::set(kLn2Lo)));
    const R lo = L::fmadd(L::mul(q2, u), p, L::fmadd(s.corr, k, small));
    return {w, lo};
}
CONFORM_AVX2 inline FF softplus_ff(__m256 x) { return softplus_ff_l<F8>(x); }

// gelu_erf(x) = x Phi(x) for |x| < 3.9, 16 lanes (AVX-512: each table read
// is one vpermi2ps), relative error < 2^-26 before the one final rounding
// (docs/activation.md §4, "FP32 gelu_erf in float-float").  No exponential
// and no division: with a = |x|, Phi(-a) = erfc(a/sqrt2)/2 comes from a
// degree-6 polynomial in u = a - k/8 on interval k = round(8a) (0..31,
// |u| <= 1/16), its coefficients fitted to the relative error
// (python/fits/gelu_erf_table.py): p0 and p1 as float pairs, p2..p6
// floats.  Then Phi(x) = Phi(-a) for x < 0, 1 - Phi(-a) for x >= 0
// (Phi(-a) <= 1/2, so the subtraction does not magnify its error).
inline constexpr float kGeluErfFastMax = 3.9f;  // |x| below: the table (8 * 3.9 < 31.5: k <= 31)
alignas(64) inline constexpr float kPhiTable[9][32] = {  // [row][k]
    // p0h
    {0x1.0p-1f, 0x1.cd116cp-2f, 0x1.9aecbap-2f, 0x1.6a527ap-2f, 0x1.3bf144p-2f, 0x1.105e82p-2f, 0x1.d022p-3f, 0x1.86bb5p-3f,
     0x1.44ed0cp-3f, 0x1.0ad7dap-3f, 0x1.b0bdd2p-4f, 0x1.5a6196p-4f, 0x1.11a46ep-4f, 0x1.aaa65cp-5f, 0x1.482a24p-5f, 0x1.f20394p-6f,
     0x1.74bcf8p-6f, 0x1.13243cp-6f, 0x1.90925p-7f, 0x1.1f85a2p-7f, 0x1.96f4e6p-8f, 0x1.1bee6cp-8f, 0x1.869044p-9f, 0x1.08c89p-9f,
     0x1.61de2p-10f, 0x1.d21af4p-11f, 0x1.2e86fep-11f, 0x1.8301bep-12f, 0x1.e7dbcap-13f, 0x1.2eff8p-13f, 0x1.72d956p-14f, 0x1.bf3766p-15f},
    // p0l
    {0x1.3e39d8p-51f, 0x1.dfcb34p-29f, 0x1.3a449ep-27f, -0x1.fc2fbcp-27f, -0x1.19563ep-28f, 0x1.63c996p-27f, 0x1.5acea8p-29f, -0x1.4feb58p-28f,
     -0x1.20d354p-29f, 0x1.f362d8p-32f, -0x1.a8ac4ep-29f, 0x1.ee49a6p-31f, -0x1.da6dc4p-30f, -0x1.6c19d4p-35f, 0x1.45577ep-33f, 0x1.d97ecap-31f,
     0x1.64eb8p-33f, -0x1.019044p-31f, -0x1.bc59f4p-32f, -0x1.b26e52p-34f, -0x1.036dep-33f, 0x1.f79b06p-38f, -0x1.6c2924p-34f, 0x1.cf99e8p-34f,
     -0x1.9e96b2p-36f, 0x1.5c197ep-36f, -0x1.05fa14p-36f, 0x1.02611ap-38f, -0x1.a90abap-38f, -0x1.e753c6p-40f, 0x1.2cd686p-40f, 0x1.d2cba8p-42f},
    // p1h
    {-0x1.988454p-2f, -0x1.95567ap-2f, -0x1.8bf2bap-2f, -0x1.7cc794p-2f, -0x1.6883dp-2f, -0x1.50096ep-2f, -0x1.345d5ep-2f, -0x1.169596p-2f,
     -0x1.ef8e58p-3f, -0x1.b1ec62p-3f, -0x1.7610bap-3f, -0x1.3d7712p-3f, -0x1.094086p-3f, -0x1.b46178p-4f, -0x1.616454p-4f, -0x1.19bfa4p-4f,
     -0x1.ba4b44p-5f, -0x1.55c74p-5f, -0x1.0402ep-5f, -0x1.857a94p-6f, -0x1.1f2f06p-6f, -0x1.a0f22cp-7f, -0x1.29fa54p-7f, -0x1.a34ea6p-8f,
     -0x1.227214p-8f, -0x1.8c2226p-9f, -0x1.09f38ep-9f, -0x1.5f90f6p-10f, -0x1.c9897ep-11f, -0x1.251bf8p-11f, -0x1.71b92ep-12f, -0x1.cb2208p-13f},
    // p1l
    {0x1.8571a6p-27f, 0x1.00a2a8p-27f, -0x1.031072p-30f, -0x1.d80682p-27f, -0x1.0ff89ap-29f, 0x1.880ef4p-29f, -0x1.f5ba22p-27f, 0x1.cefb48p-30f,
     -0x1.c6babp-28f, -0x1.aa30c2p-34f, 0x1.7964c2p-28f, -0x1.5231cp-31f, 0x1.257c8ap-28f, -0x1.2ceb6p-29f, 0x1.27f2d6p-29f, 0x1.5d20acp-29f,
     0x1.232e3p-30f, 0x1.3178dcp-30f, 0x1.62fe62p-32f, -0x1.3db602p-33f, 0x1.51042p-31f, 0x1.6facdep-35f, -0x1.8b211ap-32f, 0x1.06c072p-33f,
     0x1.90ae42p-39f, -0x1.ae1856p-34f, -0x1.86fc4ap-37f, -0x1.9d7eeap-35f, 0x1.d49c34p-36f, 0x1.6ee0eep-37f, -0x1.9c1deep-37f, 0x1.98d0dep-38f},
    // p2
    {0x1.e1a544p-33f, 0x1.95567ap-6f, 0x1.8bf2bap-5f, 0x1.1d95bp-4f, 0x1.6883dp-4f, 0x1.a40bcap-4f, 0x1.ce8c0ep-4f, 0x1.e785c6p-4f,
     0x1.ef8e58p-4f, 0x1.e829eep-4f, 0x1.d394e8p-4f, 0x1.b483b8p-4f, 0x1.8de0c8p-4f, 0x1.628f32p-4f, 0x1.3537c8p-4f, 0x1.0823aap-4f,
     0x1.ba4b44p-5f, 0x1.6b23b4p-5f, 0x1.24833cp-5f, 0x1.ce819p-6f, 0x1.66fac6p-6f, 0x1.119eecp-6f, 0x1.99b834p-7f, 0x1.2d6086p-7f,
     0x1.b3ab1ep-8f, 0x1.357aaep-8f, 0x1.b02bc6p-9f, 0x1.28a25p-9f, 0x1.90584ep-10f, 0x1.09a158p-10f, 0x1.5a9d9cp-11f, 0x1.bcc8f6p-12f},
    // p3
    {0x1.105832p-4f, 0x1.0a00bcp-4f, 0x1.eeef62p-5f, 0x1.b44f56p-5f, 0x1.6883cep-5f, 0x1.1107aap-5f, 0x1.67c24ap-6f, 0x1.5c3b0cp-7f,
     0x1.5ff2b6p-27f, -0x1.335caep-7f, -0x1.188c8p-6f, -0x1.78fd5cp-6f, -0x1.ba162cp-6f, -0x1.dd4a96p-6f, -0x1.e5e9fp-6f, -0x1.d8841p-6f,
     -0x1.ba4b46p-6f, -0x1.908582p-6f, -0x1.60193ep-6f, -0x1.2d3cd2p-6f, -0x1.f6925p-7f, -0x1.995872p-7f, -0x1.45e9d2p-7f, -0x1.fbc144p-8f,
     -0x1.8342cap-8f, -0x1.215cf4p-8f, -0x1.a7dc2cp-9f, -0x1.306a84p-9f, -0x1.acf0ep-10f, -0x1.288b46p-10f, -0x1.927586p-11f, -0x1.0c2052p-11f},
    // p4
    {0x1.f000ep-21f, -0x1.933fbep-8f, -0x1.83b242p-7f, -0x1.10362ep-6f, -0x1.4a774cp-6f, -0x1.6d62b2p-6f, -0x1.77cc6ep-6f, -0x1.6b16dap-6f,
     -0x1.4a54c4p-6f, -0x1.1a353ap-6f, -0x1.c023p-7f, -0x1.42c30ep-7f, -0x1.8dda7p-8f, -0x1.53cb78p-9f, 0x1.9f1fa2p-12f, 0x1.6adffap-9f,
     0x1.26cfeep-8f, 0x1.6eddaep-8f, 0x1.92301p-8f, 0x1.971948p-8f, 0x1.84ecbap-8f, 0x1.62e366p-8f, 0x1.3791fap-8f, 0x1.0882c8p-8f,
     0x1.b3ab0cp-9f, 0x1.5cfa46p-9f, 0x1.105e2cp-9f, 0x1.9ed456p-10f, 0x1.3497dp-10f, 0x1.c0f3cap-11f, 0x1.3f88e4p-11f, 0x1.bd5fe6p-12f},
    // p5
    {-0x1.478674p-7f, -0x1.39ebf6p-7f, -0x1.155e5p-7f, -0x1.b99eaap-8f, -0x1.2c4a4p-8f, -0x1.21fb86p-9f, 0x1.2eec9ep-13f, 0x1.2ae0bcp-9f,
     0x1.07f3ep-8f, 0x1.59d606p-8f, 0x1.8806c4p-8f, 0x1.9372d4p-8f, 0x1.805ed6p-8f, 0x1.5569d8p-8f, 0x1.1a720ap-8f, 0x1.aed79p-9f,
     0x1.26ffb2p-9f, 0x1.51e8d8p-10f, 0x1.e649c2p-12f, -0x1.908474p-13f, -0x1.5c86a8p-11f, -0x1.fb338ap-11f, -0x1.2600dep-10f, -0x1.2f6fe4p-10f,
     -0x1.224c06p-10f, -0x1.0687dcp-10f, -0x1.c5c3e2p-11f, -0x1.7967bp-11f, -0x1.2f6fbcp-11f, -0x1.d93a28p-12f, -0x1.66c98ap-12f, -0x1.08ed14p-12f},
    // p6
    {0x1.0bec02p-12f, 0x1.1a8eeap-10f, 0x1.f5d486p-10f, 0x1.6c1cfap-9f, 0x1.8a3346p-9f, 0x1.d0c2b4p-9f, 0x1.71b4aep-9f, 0x1.4521f2p-9f,
     0x1.a470d4p-10f, 0x1.363504p-10f, 0x1.94a896p-11f, -0x1.05466p-11f, -0x1.7a4644p-11f, -0x1.142cd2p-10f, -0x1.cfe13cp-10f, -0x1.021deap-10f,
     -0x1.3f6c3ap-10f, -0x1.14e52p-10f, -0x1.f0860cp-11f, -0x1.860806p-11f, -0x1.36410cp-11f, -0x1.9b5e4ap-12f, -0x1.3f94b6p-13f, -0x1.3f7988p-15f,
     0x1.d173bcp-14f, 0x1.490902p-13f, 0x1.7688aep-13f, 0x1.8f628ep-13f, 0x1.830a62p-13f, 0x1.458e82p-13f, 0x1.16e42ep-13f, 0x1.b748c2p-14f},
};

// gelu_tanh's T(-a) = sigmoid(-2z(a)), the same intervals (python/fits/gelu_tanh_table.py).
alignas(64) inline constexpr float kGeluTanhTable[9][32] = {  // [row][k]
    // p0h
    {0x1.0p-1f, 0x1.cd1196p-2f, 0x1.9aee04p-2f, 0x1.6a5698p-2f, 0x1.3bfa4cp-2f, 0x1.106e68p-2f, 0x1.d0523p-3f, 0x1.86fc76p-3f,
     0x1.453d22p-3f, 0x1.0b3234p-3f, 0x1.b1795ep-4f, 0x1.5b13b6p-4f, 0x1.123c8ep-4f, 0x1.ab859p-5f, 0x1.48a34ap-5f, 0x1.f215p-6f,
     0x1.73ef8ap-6f, 0x1.118edep-6f, 0x1.8c25e8p-7f, 0x1.1a396ep-7f, 0x1.8b6cccp-8f, 0x1.103a64p-8f, 0x1.701acep-9f, 0x1.e87a7ep-10f,
     0x1.3dd716p-10f, 0x1.95510ap-11f, 0x1.fa1996p-12f, 0x1.352504p-12f, 0x1.71379ap-13f, 0x1.aebd2cp-14f, 0x1.ea7566p-15f, 0x1.104e78p-15f},
    // p0l
    {0x1.4d2e94p-51f, 0x1.cf1e44p-27f, 0x1.f70178p-27f, 0x1.16e5aap-30f, -0x1.df7dp-27f, -0x1.b48414p-28f, -0x1.e0076ap-32f, 0x1.fef82p-29f,
     0x1.ab8a96p-30f, 0x1.4fead2p-28f, 0x1.327132p-29f, 0x1.be853ap-29f, 0x1.68e85cp-30f, -0x1.4eacdcp-30f, -0x1.c981aep-32f, -0x1.2ecc5ap-32f,
     -0x1.3c6accp-31f, -0x1.b656dap-31f, 0x1.07921ap-32f, -0x1.cd3ab2p-34f, -0x1.78461cp-35f, 0x1.3ee106p-33f, -0x1.77c346p-39f, 0x1.5c4748p-35f,
     -0x1.3e2b72p-35f, -0x1.2c413ap-36f, -0x1.cbe0cp-37f, 0x1.ab43ap-39f, -0x1.352b64p-38f, 0x1.8c653p-39f, -0x1.0822dcp-41f, -0x1.4f0a66p-46f},
    // p1h
    {-0x1.988454p-2f, -0x1.95528p-2f, -0x1.8be3b2p-2f, -0x1.7ca8dp-2f, -0x1.685438p-2f, -0x1.4fcc06p-2f, -0x1.341904p-2f, -0x1.1653f8p-2f,
     -0x1.ef2636p-3f, -0x1.b1b33ap-3f, -0x1.7614e2p-3f, -0x1.3dbe86p-3f, -0x1.09c7aep-3f, -0x1.b5d622p-4f, -0x1.6318e4p-4f, -0x1.1b86dcp-4f,
     -0x1.bda58p-5f, -0x1.58a198p-5f, -0x1.06289cp-5f, -0x1.882992p-6f, -0x1.20431p-6f, -0x1.a03e66p-7f, -0x1.26ffdap-7f, -0x1.9a2f3ep-8f,
     -0x1.178bf2p-8f, -0x1.753c28p-9f, -0x1.e7bfcap-10f, -0x1.37b01ap-10f, -0x1.8546c2p-11f, -0x1.dab3b8p-12f, -0x1.1a5e3cp-12f, -0x1.477186p-13f},
    // p1l
    {0x1.85714ap-27f, -0x1.a74f7ap-27f, 0x1.d45518p-28f, -0x1.d05adp-28f, 0x1.5cc2aap-30f, 0x1.3cd978p-27f, -0x1.74faf4p-27f, 0x1.c56c06p-30f,
     0x1.e6f828p-28f, 0x1.3d0c6ap-28f, 0x1.49c2c8p-29f, 0x1.73141ep-28f, 0x1.c45b24p-28f, -0x1.a88782p-29f, -0x1.164162p-30f, -0x1.db9496p-29f,
     0x1.c49742p-31f, 0x1.746aeap-34f, 0x1.da594ep-30f, -0x1.e01436p-33f, 0x1.e82214p-31f, 0x1.3cd0bp-32f, -0x1.99e5c6p-32f, -0x1.2e2ffap-33f,
     -0x1.cd41dcp-37f, 0x1.ff78e4p-38f, 0x1.32d3ep-36f, -0x1.c30a0ap-37f, 0x1.a6616p-36f, 0x1.76b9aep-37f, -0x1.1990c8p-37f, 0x1.139cf2p-39f},
    // p2
    {0x1.f875ccp-33f, 0x1.974992p-6f, 0x1.8db006p-5f, 0x1.1ea4dp-4f, 0x1.6983fep-4f, 0x1.a4bb24p-4f, 0x1.ceb342p-4f, 0x1.e703eep-4f,
     0x1.ee6106p-4f, 0x1.e66f1ap-4f, 0x1.d1860ap-4f, 0x1.b26aeap-4f, 0x1.8c0a74p-4f, 0x1.613bc4p-4f, 0x1.349094p-4f, 0x1.083538p-4f,
     0x1.bbc05cp-5f, 0x1.6d9e14p-5f, 0x1.279b5ep-5f, 0x1.d5115ap-6f, 0x1.6d254cp-6f, 0x1.16d006p-6f, 0x1.a178fp-7f, 0x1.3249cep-7f,
     0x1.b82b76p-8f, 0x1.358f96p-8f, 0x1.a9d882p-9f, 0x1.1e3fd4p-9f, 0x1.77c7e4p-10f, 0x1.e15266p-11f, 0x1.2c81c4p-11f, 0x1.6d7f78p-12f},
    // p3
    {0x1.11b146p-4f, 0x1.0b34f6p-4f, 0x1.f0869p-5f, 0x1.b4b08p-5f, 0x1.6780dap-5f, 0x1.0eb5f6p-5f, 0x1.6135bcp-6f, 0x1.4d961ap-7f,
     -0x1.af3a52p-12f, -0x1.3d145cp-7f, -0x1.1a932cp-6f, -0x1.77c6a2p-6f, -0x1.b5d8aap-6f, -0x1.d6c9a4p-6f, -0x1.de4518p-6f, -0x1.d0f686p-6f,
     -0x1.b3ec7ap-6f, -0x1.8c1954p-6f, -0x1.5df834p-6f, -0x1.2d5596p-6f, -0x1.fa6c92p-7f, -0x1.9fab6ap-7f, -0x1.4d6832p-7f, -0x1.055ceep-7f,
     -0x1.906db6p-8f, -0x1.2ba596p-8f, -0x1.b5de9ap-9f, -0x1.382eb2p-9f, -0x1.b212fcp-10f, -0x1.260e68p-10f, -0x1.83e91ap-11f, -0x1.f1d788p-12f},
    // p4
    {0x1.48425p-20f, -0x1.9c4df2p-8f, -0x1.8c0a12p-7f, -0x1.158bf6p-6f, -0x1.501644p-6f, -0x1.72121p-6f, -0x1.7a9a3cp-6f, -0x1.6b49f8p-6f,
     -0x1.47e058p-6f, -0x1.1563c4p-6f, -0x1.b38842p-7f, -0x1.35de64p-7f, -0x1.782da8p-8f, -0x1.38020ap-9f, 0x1.de530cp-12f, 0x1.6084ccp-9f,
     0x1.19cf46p-8f, 0x1.5d5d9cp-8f, 0x1.7fa162p-8f, 0x1.8690b4p-8f, 0x1.786f1ep-8f, 0x1.5b9ac6p-8f, 0x1.355e4ap-8f, 0x1.0a8474p-8f,
     0x1.bd86cep-9f, 0x1.69bccp-9f, 0x1.1d783ap-9f, 0x1.b60beep-10f, 0x1.46bcb2p-10f, 0x1.d9a1bep-11f, 0x1.4d6822p-11f, 0x1.c7add8p-12f},
    // p5
    {-0x1.4f33eep-7f, -0x1.40cba8p-7f, -0x1.1a7c86p-7f, -0x1.be532ap-8f, -0x1.2a2cb4p-8f, -0x1.0fa5b6p-9f, 0x1.83f732p-12f, 0x1.4e2532p-9f,
     0x1.18cdbap-8f, 0x1.663d2ep-8f, 0x1.8d49d2p-8f, 0x1.90a18cp-8f, 0x1.766b6ap-8f, 0x1.46c9aep-8f, 0x1.0a7112p-8f, 0x1.928972p-9f,
     0x1.133602p-9f, 0x1.403ae8p-10f, 0x1.f54956p-12f, -0x1.d3cfp-14f, -0x1.1e94c4p-11f, -0x1.b7a10cp-11f, -0x1.078c44p-10f, -0x1.18768ep-10f,
     -0x1.147a08p-10f, -0x1.019482p-10f, -0x1.ca2a6cp-11f, -0x1.871c48p-11f, -0x1.418278p-11f, -0x1.fdf12cp-12f, -0x1.8673cep-12f, -0x1.20c816p-12f},
    // p6
    {0x1.3dc55cp-12f, 0x1.0fc12p-10f, 0x1.0137f4p-9f, 0x1.500f18p-9f, 0x1.d29376p-9f, 0x1.d3a4eep-9f, 0x1.842a2ap-9f, 0x1.2f60a8p-9f,
     0x1.3651b4p-9f, 0x1.9c3b34p-10f, 0x1.6a95e6p-12f, -0x1.abcd3ep-12f, -0x1.1c44b2p-11f, -0x1.089f7p-10f, -0x1.3af5dp-10f, -0x1.9ae5a8p-10f,
     -0x1.4190fcp-10f, -0x1.157692p-10f, -0x1.e6dc44p-11f, -0x1.9fa98p-11f, -0x1.a27318p-12f, -0x1.7921ecp-12f, -0x1.d30eecp-14f, 0x1.ff7f44p-17f,
     0x1.04827cp-14f, 0x1.ab6e34p-14f, 0x1.4e2f38p-13f, 0x1.88e5c8p-13f, 0x1.684bb4p-13f, 0x1.4ca518p-13f, 0x1.2da2fap-13f, 0x1.ec39acp-14f},
};

// softplus's L(a) = log1p(e^-a): k = round(4a), |u| <= 1/8, a < 7.875 (python/fits/softplus_table.py).
alignas(64) inline constexpr float kSoftplusTable[9][32] = {  // [row][k]
    // p0h
    {0x1.62e43p-1f, 0x1.26e188p-1f, 0x1.e5747p-2f, 0x1.8c27eap-2f, 0x1.40c7acp-2f, 0x1.01f9b2p-2f, 0x1.9c7e9p-3f, 0x1.48239ap-3f,
     0x1.03f2d6p-3f, 0x1.9a7232p-4f, 0x1.4321e2p-4f, 0x1.fba374p-5f, 0x1.8e071p-5f, 0x1.37a28ap-5f, 0x1.e76e4cp-6f, 0x1.7cda8cp-6f,
     0x1.295e5p-6f, 0x1.d01bbp-7f, 0x1.6a0334p-7f, 0x1.1a4788p-7f, 0x1.b818dap-8f, 0x1.57009p-8f, 0x1.0b48ecp-8f, 0x1.a082cep-9f,
     0x1.447e36p-9f, 0x1.f991b2p-10f, 0x1.89d254p-10f, 0x1.32c27p-10f, 0x1.dddef4p-11f, 0x1.74342ap-11f, 0x1.21e534p-11f, 0x1.c391acp-12f},
    // p0l
    {-0x1.05c618p-29f, 0x1.9b6cd4p-29f, -0x1.251dacp-29f, -0x1.0f7348p-28f, -0x1.04f0a4p-32f, 0x1.d4a2e2p-28f, 0x1.1ea83p-28f, -0x1.1d6cfp-28f,
     -0x1.79fcacp-28f, -0x1.537452p-29f, -0x1.9c995cp-31f, 0x1.720054p-35f, -0x1.fdd644p-32f, -0x1.6979a4p-33f, 0x1.85f1b4p-32f, -0x1.5ebbb2p-31f,
     0x1.6a76d6p-31f, 0x1.46c7b4p-34f, -0x1.2e449p-32f, -0x1.f83316p-32f, 0x1.22d536p-35f, -0x1.ab9ad4p-36f, 0x1.dcdf1cp-34f, 0x1.14d448p-34f,
     -0x1.316934p-34f, 0x1.ea508p-35f, 0x1.2d15e4p-40f, -0x1.1916dp-35f, 0x1.c40b12p-36f, -0x1.526df2p-37f, 0x1.a85cb8p-36f, 0x1.801b64p-37f},
    // p1h
    {-0x1.0p-1f, -0x1.c054cep-2f, -0x1.829a06p-2f, -0x1.488562p-2f, -0x1.136562p-2f, -0x1.c81702p-3f, -0x1.759b84p-3f, -0x1.2f335ep-3f,
     -0x1.e84152p-4f, -0x1.868d2ap-4f, -0x1.36b712p-4f, -0x1.ec3ad6p-5f, -0x1.848344p-5f, -0x1.31c828p-5f, -0x1.e04068p-6f, -0x1.787614p-6f,
     -0x1.26afa2p-6f, -0x1.ccd642p-7f, -0x1.680528p-7f, -0x1.19112ap-7f, -0x1.b69f68p-8f, -0x1.561b2ep-8f, -0x1.0abd94p-8f, -0x1.9fd992p-9f,
     -0x1.441778p-9f, -0x1.f914fap-10f, -0x1.8986a2p-10f, -0x1.329482p-10f, -0x1.dda738p-11f, -0x1.74125ap-11f, -0x1.21d0b2p-11f, -0x1.c378cap-12f},
    // p1l
    {0x1.40ca66p-41f, 0x1.5cc15cp-28f, 0x1.33b64ap-27f, 0x1.e7ad2ep-27f, 0x1.749b46p-27f, -0x1.51df7p-28f, 0x1.54b3e6p-28f, -0x1.1c8c42p-28f,
     -0x1.745252p-29f, 0x1.d35542p-29f, 0x1.b68e88p-29f, -0x1.59b644p-30f, 0x1.bb739cp-32f, -0x1.95e28ep-34f, -0x1.c8a298p-34f, 0x1.d84508p-31f,
     0x1.bbeb9ep-34f, 0x1.c8f53ep-32f, 0x1.6f28d4p-33f, 0x1.544f2ep-33f, 0x1.4b4a3p-35f, 0x1.ba4faap-33f, -0x1.863858p-34f, -0x1.9942d6p-37f,
     0x1.9feda2p-34f, 0x1.0f0798p-35f, -0x1.96886p-35f, 0x1.455bfp-35f, -0x1.5d20dcp-36f, 0x1.83d334p-36f, 0x1.511696p-36f, 0x1.53fab8p-37f},
    // p2
    {0x1.0p-3f, 0x1.f81526p-4f, 0x1.e149ap-4f, 0x1.be3fbap-4f, 0x1.92a946p-4f, 0x1.6284c4p-4f, 0x1.3173b2p-4f, 0x1.02500ap-4f,
     0x1.ae0dcp-5f, 0x1.615002p-5f, 0x1.1f2514p-5f, 0x1.cea744p-6f, 0x1.721652p-6f, 0x1.265e34p-6f, 0x1.d22ca2p-7f, 0x1.6fcfa6p-7f,
     0x1.2162c2p-7f, 0x1.c65b1cp-8f, 0x1.64108ap-8f, 0x1.16a7fcp-8f, 0x1.b3afe2p-9f, 0x1.5452p-9f, 0x1.09a7a6p-9f, 0x1.9e87dp-10f,
     0x1.434a52p-10f, 0x1.f81bd8p-11f, 0x1.88ef68p-11f, 0x1.3238b8p-11f, 0x1.dd37d2p-12f, 0x1.73cecp-12f, 0x1.21a7aep-12f, 0x1.c34706p-13f},
    // p3
    {-0x1.e4c07ap-32f, -0x1.4e50a2p-8f, -0x1.3a5618p-7f, -0x1.aa719ap-7f, -0x1.f0343cp-7f, -0x1.06278cp-6f, -0x1.02ad38p-6f, -0x1.e4dfcp-7f,
     -0x1.b4b3b8p-7f, -0x1.7d3f9ap-7f, -0x1.44c618p-7f, -0x1.0f5eb6p-7f, -0x1.bea528p-8f, -0x1.6b3096p-8f, -0x1.24903ep-8f, -0x1.d3e0c4p-9f,
     -0x1.73f7c4p-9f, -0x1.266252p-9f, -0x1.d05214p-10f, -0x1.6d2af2p-10f, -0x1.1e91ecp-10f, -0x1.c105e2p-11f, -0x1.5f52b6p-11f, -0x1.12999ep-11f,
     -0x1.acec06p-12f, -0x1.4ec704p-12f, -0x1.052b94p-12f, -0x1.97571ep-13f, -0x1.3d90cap-13f, -0x1.ef0a2ep-14f, -0x1.81c794p-14f, -0x1.2c97acp-14f},
    // p4
    {-0x1.55555cp-8f, -0x1.407e4p-8f, -0x1.071a9p-8f, -0x1.6dae1p-9f, -0x1.81ad1p-10f, -0x1.24b628p-12f, 0x1.567a68p-11f, 0x1.4f16ep-10f,
     0x1.a8736cp-10f, 0x1.c69bdap-10f, 0x1.bb8ffep-10f, 0x1.97e218p-10f, 0x1.67b7ccp-10f, 0x1.33dadp-10f, 0x1.01b8a6p-10f, 0x1.a8655p-11f,
     0x1.58f96ep-11f, 0x1.15b2cap-11f, 0x1.bbd436p-12f, 0x1.609904p-12f, 0x1.16df3p-12f, 0x1.b7a534p-13f, 0x1.5995ep-13f, 0x1.0f1f22p-13f,
     0x1.a8a6cp-14f, 0x1.4c34eap-14f, 0x1.0394d6p-14f, 0x1.95699ap-15f, 0x1.3c6622p-15f, 0x1.eda8e6p-16f, 0x1.80efd4p-16f, 0x1.2c14p-16f},
    // p5
    {0x1.9c4864p-23f, 0x1.048d26p-11f, 0x1.c89464p-11f, 0x1.12e1fap-10f, 0x1.0d651ep-10f, 0x1.c380b6p-11f, 0x1.46dcdap-11f, 0x1.8ecf7ep-12f,
     0x1.6c779ap-13f, 0x1.605eep-16f, -0x1.47efe8p-14f, -0x1.17243cp-13f, -0x1.46c80ap-13f, -0x1.4a4608p-13f, -0x1.342622p-13f, -0x1.116bfcp-13f,
     -0x1.d5008ep-14f, -0x1.88b1c6p-14f, -0x1.431b6p-14f, -0x1.066cb8p-14f, -0x1.a618fap-15f, -0x1.50fdcp-15f, -0x1.0b87c6p-15f, -0x1.a6e818p-16f,
     -0x1.4d3056p-16f, -0x1.05c8dap-16f, -0x1.9a9b34p-17f, -0x1.417deap-17f, -0x1.f6e3bp-18f, -0x1.88e4eep-18f, -0x1.32c57p-18f, -0x1.decd9ep-19f},
    // p6
    {0x1.6a5ea2p-12f, 0x1.504228p-12f, 0x1.7711e6p-13f, 0x1.48bd22p-16f, -0x1.9e8f4ep-14f, -0x1.f9e3b2p-14f, -0x1.5966acp-13f, -0x1.436f1ap-13f,
     -0x1.1a90b4p-13f, -0x1.8510a6p-14f, -0x1.38e9b8p-15f, -0x1.089e4p-15f, -0x1.65a58cp-17f, 0x1.9c376cp-18f, 0x1.5f7c08p-17f, 0x1.2ca6acp-17f,
     0x1.7234a4p-17f, 0x1.96e232p-17f, 0x1.352a9ap-17f, 0x1.184a56p-17f, 0x1.f419d2p-18f, 0x1.7b0fa6p-18f, 0x1.553a6ep-18f, 0x1.f5cd38p-19f,
     0x1.c9eecap-19f, 0x1.41d58cp-19f, 0x1.259216p-19f, 0x1.c1503cp-20f, 0x1.56736ep-20f, 0x1.e2a59ap-21f, 0x1.871a76p-21f, 0x1.38628ep-21f},
};

// sigmoid(-a) for sigmoid and silu, softplus's intervals (python/fits/sigmoid_table.py).
alignas(64) inline constexpr float kSigmoidTable[9][32] = {  // [row][k]
    // p0h
    {0x1.0p-1f, 0x1.c054cep-2f, 0x1.829a06p-2f, 0x1.488562p-2f, 0x1.136562p-2f, 0x1.c81702p-3f, 0x1.759b84p-3f, 0x1.2f335ep-3f,
     0x1.e84152p-4f, 0x1.868d2ap-4f, 0x1.36b712p-4f, 0x1.ec3ad6p-5f, 0x1.848344p-5f, 0x1.31c828p-5f, 0x1.e04068p-6f, 0x1.787614p-6f,
     0x1.26afa2p-6f, 0x1.ccd642p-7f, 0x1.680528p-7f, 0x1.19112ap-7f, 0x1.b69f68p-8f, 0x1.561b2ep-8f, 0x1.0abd94p-8f, 0x1.9fd992p-9f,
     0x1.441778p-9f, 0x1.f914fap-10f, 0x1.8986a2p-10f, 0x1.329482p-10f, 0x1.dda738p-11f, 0x1.74125ap-11f, 0x1.21d0b2p-11f, 0x1.c378cap-12f},
    // p0l
    {0x1.c25616p-47f, -0x1.5e26eep-28f, -0x1.34d0f2p-27f, -0x1.e8c884p-27f, -0x1.7567f4p-27f, 0x1.511d82p-28f, -0x1.54bb94p-28f, 0x1.1cf86cp-28f,
     0x1.758644p-29f, -0x1.d2271ep-29f, -0x1.b5978cp-29f, 0x1.5b1a6cp-30f, -0x1.b7d976p-32f, 0x1.9e2e2p-34f, 0x1.cca6c8p-34f, -0x1.d81c38p-31f,
     -0x1.bc3f6cp-34f, -0x1.c93f5ep-32f, -0x1.6fe91p-33f, -0x1.5516c6p-33f, -0x1.4e378p-35f, -0x1.baf5b2p-33f, 0x1.851c88p-34f, 0x1.91dd48p-37f,
     -0x1.a0afa6p-34f, -0x1.1041b4p-35f, 0x1.958c7p-35f, -0x1.46249ep-35f, 0x1.5be2d4p-36f, -0x1.84ce36p-36f, -0x1.51dc1ap-36f, -0x1.5530d6p-37f},
    // p1h
    {-0x1.0p-2f, -0x1.f81526p-3f, -0x1.e149ap-3f, -0x1.be3fbcp-3f, -0x1.92a946p-3f, -0x1.6284c4p-3f, -0x1.3173b2p-3f, -0x1.02500ap-3f,
     -0x1.ae0dcp-4f, -0x1.615002p-4f, -0x1.1f2514p-4f, -0x1.cea744p-5f, -0x1.721652p-5f, -0x1.265e34p-5f, -0x1.d22ca2p-6f, -0x1.6fcfa6p-6f,
     -0x1.2162c2p-6f, -0x1.c65b1cp-7f, -0x1.64108ap-7f, -0x1.16a7fcp-7f, -0x1.b3afe2p-8f, -0x1.5452p-8f, -0x1.09a7a6p-8f, -0x1.9e87dp-9f,
     -0x1.434a52p-9f, -0x1.f81bd8p-10f, -0x1.88ef68p-10f, -0x1.3238b8p-10f, -0x1.dd37d2p-11f, -0x1.73cecp-11f, -0x1.21a7aep-11f, -0x1.c34706p-12f},
    // p1l
    {-0x1.560e36p-37f, 0x1.481a78p-28f, -0x1.47b55cp-29f, 0x1.fbdbb8p-28f, -0x1.f7979ep-28f, 0x1.8e0f5p-28f, 0x1.e47fa4p-32f, -0x1.52d1d4p-32f,
     -0x1.f3ae3p-29f, -0x1.4c3f38p-29f, 0x1.c49512p-29f, -0x1.ede9aep-30f, -0x1.03c986p-30f, 0x1.4c7ea6p-31f, 0x1.f499dcp-33f, -0x1.b2d428p-31f,
     -0x1.8a5634p-32f, 0x1.fbe566p-34f, -0x1.497f12p-32f, -0x1.360062p-33f, 0x1.0d86b4p-38f, -0x1.067256p-33f, 0x1.1a389p-35f, -0x1.1259fcp-34f,
     0x1.07e762p-34f, -0x1.0fd49ep-35f, 0x1.bce248p-35f, 0x1.e63f96p-36f, 0x1.911e98p-37f, -0x1.26f616p-36f, -0x1.e101bp-38f, -0x1.48c20ep-39f},
    // p2
    {0x1.541a32p-30f, 0x1.f57936p-7f, 0x1.d78158p-6f, 0x1.3fd54ep-5f, 0x1.74274p-5f, 0x1.893b5ap-5f, 0x1.8403d4p-5f, 0x1.6ba7ccp-5f,
     0x1.4786c2p-5f, 0x1.1defacp-5f, 0x1.e72918p-6f, 0x1.970e08p-6f, 0x1.4efbd8p-6f, 0x1.10646ep-6f, 0x1.b6d85ap-7f, 0x1.5ee892p-7f,
     0x1.16f9d2p-7f, 0x1.b9937cp-8f, 0x1.5c3d9p-8f, 0x1.11e038p-8f, 0x1.addae6p-9f, 0x1.50c46ep-9f, 0x1.077e0cp-9f, 0x1.9be672p-10f,
     0x1.41b10ap-10f, 0x1.f62a8cp-11f, 0x1.87c164p-11f, 0x1.31815ap-11f, 0x1.dc5938p-12f, 0x1.7347a8p-12f, 0x1.2155b4p-12f, 0x1.c2e38ap-13f},
    // p3
    {0x1.555516p-6f, 0x1.4076eep-6f, 0x1.071e34p-6f, 0x1.6dc50ep-7f, 0x1.81d9e2p-8f, 0x1.24287p-10f, -0x1.567fbcp-9f, -0x1.4f1504p-8f,
     -0x1.a85d1ap-8f, -0x1.c68cfap-8f, -0x1.bba41ep-8f, -0x1.97d70ep-8f, -0x1.67b204p-8f, -0x1.33de84p-8f, -0x1.01ba0ap-8f, -0x1.a85b9cp-9f,
     -0x1.58f504p-9f, -0x1.15b43p-9f, -0x1.bbccdap-10f, -0x1.609592p-10f, -0x1.16df44p-10f, -0x1.b79f5ap-11f, -0x1.599776p-11f, -0x1.0f1c12p-11f,
     -0x1.a8acaap-12f, -0x1.4c31dep-12f, -0x1.0399cep-12f, -0x1.956f02p-13f, -0x1.3c6866p-13f, -0x1.eda24ep-14f, -0x1.80ed26p-14f, -0x1.2c131ep-14f},
    // p4
    {0x1.687eaep-20f, -0x1.469004p-9f, -0x1.1e0adep-8f, -0x1.584b82p-8f, -0x1.513c3ep-8f, -0x1.1a69d4p-8f, -0x1.98970ep-9f, -0x1.f2105p-10f,
     -0x1.c5f586p-11f, -0x1.ac4672p-14f, 0x1.9c5884p-12f, 0x1.5dd71ap-11f, 0x1.991b78p-11f, 0x1.9d1daap-11f, 0x1.8157fcp-11f, 0x1.55d354p-11f,
     0x1.25294cp-11f, 0x1.eacbeap-12f, 0x1.93d11p-12f, 0x1.47e782p-12f, 0x1.07b2cep-12f, 0x1.a50144p-13f, 0x1.4e3bf4p-13f, 0x1.082e1ep-13f,
     0x1.a037a6p-14f, 0x1.470fa8p-14f, 0x1.007938p-14f, 0x1.91aa94p-15f, 0x1.3a159p-15f, 0x1.ead17ap-16f, 0x1.7f3496p-16f, 0x1.2b0ebp-16f},
    // p5
    {-0x1.13213cp-9f, -0x1.db1f62p-10f, -0x1.27da62p-10f, -0x1.331b5cp-12f, 0x1.bacf4ep-12f, 0x1.c2167ep-11f, 0x1.05af56p-10f, 0x1.e17c08p-11f,
     0x1.7b3654p-11f, 0x1.060508p-11f, 0x1.3b0242p-12f, 0x1.3495fep-13f, 0x1.600f64p-15f, -0x1.7d68bep-16f, -0x1.e2c556p-15f, -0x1.2f1a02p-14f,
     -0x1.390a5cp-14f, -0x1.261532p-14f, -0x1.0554b4p-14f, -0x1.bff3b6p-15f, -0x1.768f78p-15f, -0x1.33b4eep-15f, -0x1.f31ebap-16f, -0x1.90e3d8p-16f,
     -0x1.3fbe4p-16f, -0x1.fb372ep-17f, -0x1.909ccep-17f, -0x1.3b6ep-17f, -0x1.ef72cep-18f, -0x1.846922p-18f, -0x1.300c6p-18f, -0x1.db7932p-19f},
    // p6
    {0x1.80be72p-14f, 0x1.662e1ep-12f, 0x1.17df48p-11f, 0x1.1bc476p-11f, 0x1.8e53fep-12f, 0x1.8f98b6p-13f, 0x1.58fae6p-17f, -0x1.8fdc5ap-14f,
     -0x1.428a4cp-13f, -0x1.2daaf6p-13f, -0x1.db65b4p-14f, -0x1.6955bcp-14f, -0x1.066f64p-14f, -0x1.d8a304p-16f, -0x1.046c1ap-16f, -0x1.18ca9p-18f,
     -0x1.86f51p-20f, 0x1.3acf8ap-18f, 0x1.12b984p-18f, 0x1.8f4654p-18f, 0x1.9438a2p-18f, 0x1.815b1ep-18f, 0x1.1d4a4cp-18f, 0x1.d890c6p-19f,
     0x1.93c274p-19f, 0x1.3012aep-19f, 0x1.f91062p-20f, 0x1.6365b8p-20f, 0x1.51c34p-20f, 0x1.02e696p-20f, 0x1.a4ce94p-21f, 0x1.210dd6p-21f},
};

// A table of 32 intervals of degree-6 polynomials (rows p0h p0l p1h p1l
// p2..p6, as python/fits/piecewise.py writes them).
using PolyTable = float[9][32];

// Coefficient row j of interval idx (the low 5 bits of each lane).
CONFORM_AVX512 inline __m512 table_coef(const PolyTable& t, int j, __m512i idx) {
    return _mm512_permutex2var_ps(_mm512_loadu_ps(t[j]), idx, _mm512_loadu_ps(t[j] + 16));
}

// P_k(u) as hi + lo for interval k = round(kScale x) (its low 5 bits index
// the table), u = x - k/kScale, kScale a power of 2.  k is in the low bits
// of s = RN(kScale x + 1.5 2^23); u is exact (k = 0: u = x; else |x| >=
// 1/(2 kScale), so x and k/kScale are multiples of ulp(x) >= 2^-24/kScale
// and |u| <= 1/(2 kScale) needs at most 23 bits).  q = p2 + ... + p6 u^4 in
// float (the tail u^2 q is a few % of the value at most: the fit scripts
// bound it); u p1h exactly as ph + pl; p0h + ph by Fast2Sum (|ph| < p0h);
// the rest in lo.
template <int kScale>
CONFORM_AVX512 inline FFT<__m512> table_poly16(const PolyTable& tb, __m512 x) {
    using L = F16;
    const __m512 s = L::fmadd(x, L::set(static_cast<float>(kScale)), L::set(kShifter));
    const __m512i k = _mm512_castps_si512(s);
    const __m512 u = L::fnmadd(L::sub(s, L::set(kShifter)), L::set(1.0f / kScale), x);
    __m512 q = L::fmadd(table_coef(tb, 8, k), u, table_coef(tb, 7, k));
    q = L::fmadd(q, u, table_coef(tb, 6, k));
    q = L::fmadd(q, u, table_coef(tb, 5, k));
    q = L::fmadd(q, u, table_coef(tb, 4, k));
    const __m512 t = L::mul(u, q);
    const __m512 p1h = table_coef(tb, 2, k), p0h = table_coef(tb, 0, k);
    const __m512 ph = L::mul(u, p1h), pl = L::fmsub(u, p1h, ph);
    const __m512 sh = L::add(p0h, ph);
    const __m512 e0 = L::add(L::sub(p0h, sh), ph);
    const __m512 lo = L::fmadd(u, L::add(table_coef(tb, 3, k), t), L::add(L::add(e0, pl), table_coef(tb, 1, k)));
    return {sh, lo};
}

// C(x) as h + l from a table of C(-a), a = |x| (kScale = 8: k = round(8a),
// |x| < 3.9; kScale = 4: k = round(4a), |x| < 7.875), for a C with
// C(x) = 1 - C(-x): C(-a) for x < 0, 1 - C(-a) = nh + nl for x >= 0 (1 - hi
// exactly as nh + ((1 - nh) - hi) by Fast2Sum, since 1 > hi).  Phi
// (kPhiTable), gelu_tanh's sigmoid(2z) (kGeluTanhTable) and sigmoid
// (kSigmoidTable).
template <int kScale = 8>
CONFORM_AVX512 inline FFT<__m512> cdf16(const PolyTable& tb, __m512 x) {
    using L = F16;
    const FFT<__m512> p = table_poly16<kScale>(tb, L::andnot(L::set(-0.0f), x));
    const __m512 one = L::set(1.0f);
    const __m512 nh = L::sub(one, p.hi);
    const __m512 nl = L::sub(L::sub(L::sub(one, nh), p.hi), p.lo);
    const __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(x));
    return {_mm512_mask_blend_ps(neg, nh, p.hi), _mm512_mask_blend_ps(neg, nl, p.lo)};
}
CONFORM_AVX512 inline FFT<__m512> phi16(__m512 x) { return cdf16(kPhiTable, x); }

// x C(x) = x (h + l) rounded once, in cdf16's range.  The sign of x is or-ed
// in so that x = -0 gives -0 whatever the sign of l.
template <int kScale = 8>
CONFORM_AVX512 inline __m512 times_cdf16(const PolyTable& tb, __m512 x) {
    using L = F16;
    const FFT<__m512> p = cdf16<kScale>(tb, x);
    const __m512 y = L::fmadd(x, p.hi, L::mul(x, p.lo));
    return L::or_(y, L::and_(x, L::set(-0.0f)));
}
CONFORM_AVX512 inline __m512 gelu_erf16(__m512 x) { return times_cdf16(kPhiTable, x); }
CONFORM_AVX512 inline __m512 gelu_tanh16(__m512 x) { return times_cdf16(kGeluTanhTable, x); }

// sigmoid(x) = RN(h + l) and silu(x) = x sigmoid(x) for |x| < 7.875
// (kSigmoidTable: sigmoid(-a), k = round(4a)).
CONFORM_AVX512 inline __m512 sigmoid16(__m512 x) {
    const FFT<__m512> p = cdf16<4>(kSigmoidTable, x);
    return _mm512_add_ps(p.hi, p.lo);
}
CONFORM_AVX512 inline __m512 silu16(__m512 x) { return times_cdf16<4>(kSigmoidTable, x); }

// The lanes with |x| < limit (not NaN).
CONFORM_AVX512 inline __mmask16 abs_below16(__m512 x, float limit) {
    return _mm512_cmp_ps_mask(_mm512_andnot_ps(_mm512_set1_ps(-0.0f), x), _mm512_set1_ps(limit), _CMP_LT_OQ);
}

// softplus(x) = max(x, 0) + L(|x|) for |x| < 7.875, L = hi + lo from
// kSoftplusTable: max(x, 0) + hi exactly as s + e (TwoSum), then
// RN(s + RN(e + lo)); both terms are >= 0, so L's relative error bounds y's.
inline constexpr float kTable4Max = 7.875f;  // tables with k = round(4a) (softplus, sigmoid, silu): k <= 31 below it
CONFORM_AVX512 inline __m512 softplus16(__m512 x) {
    using L = F16;
    const FFT<__m512> l = table_poly16<4>(kSoftplusTable, L::andnot(L::set(-0.0f), x));
    const __m512 xp = L::max(x, L::zero());
    const __m512 s = L::add(xp, l.hi);
    const __m512 b = L::sub(s, xp);
    const __m512 e = L::add(L::sub(xp, L::sub(s, b)), L::sub(l.hi, b));
    return L::add(s, L::add(e, l.lo));
}

// The lanes of gelu_erf16 and gelu_tanh16 (|x| < 3.9, not NaN).
CONFORM_AVX512 inline __mmask16 gelu_erf16_ok(__m512 x) { return abs_below16(x, kGeluErfFastMax); }

#pragma GCC diagnostic pop
}  // namespace vff

// ---- the activation functions, as scalar and vector functors ------------
// Each functor is built from the call's Params (so a parameter can never be
// silently dropped) and offers scalar(double) and vec(__m256d).

struct SigmoidFn {
    static constexpr float kFloatGateMin = -80.0f;  // sigmoid(-80) ~ 2^-115.4, a normal float
    explicit SigmoidFn(const Params&) {}
    static double scalar(double x) { return 1.0 / (1.0 + std::exp(-x)); }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        return _mm256_div_pd(vm::set(1.0), _mm256_add_pd(vm::set(1.0), vm::exp_neg<false>(x)));
    }
    CONFORM_AVX2 __m256 vecf(__m256 x) const { return vf::sigmoid(x); }
    CONFORM_AVX2 bool fp32_ok(__m256 x) const { return vff::in_range(x); }
    CONFORM_AVX2 __m256 vec32(__m256 x) const {
        const vff::Split q = vff::sigmoid(x);
        return _mm256_add_ps(q.q0, q.corr);  // the one final rounding
    }
    // fp32, 16 lanes (AVX-512): the table of sigmoid(-|x|) for |x| < 7.875
    // (vff::sigmoid16); other lanes take the double path.
    CONFORM_AVX512 __mmask16 ok16(__m512 x) const { return vff::abs_below16(x, vff::kTable4Max); }
    CONFORM_AVX512 __m512 lanes16(__m512 x) const { return vff::sigmoid16(x); }
};

struct SiluFn {
    static constexpr float kFloatGateMin = -80.0f;  // silu(-80) ~ -2^-109, a normal float
    explicit SiluFn(const Params&) {}
    static double scalar(double x) { return std::fmax(x, -DBL_MAX) / (1.0 + std::exp(-x)); }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        __m256d d = _mm256_add_pd(vm::set(1.0), vm::exp_neg(x));
        return _mm256_div_pd(vm::floor_neg_inf(x), d);
    }
    CONFORM_AVX2 __m256 vecf(__m256 x) const { return vf::x_sigmoid(x, x); }
    CONFORM_AVX2 bool fp32_ok(__m256 x) const { return vff::in_range(x); }
    CONFORM_AVX2 __m256 vec32(__m256 x) const { return vff::times(x, vff::sigmoid(x)); }
    // fp32, 16 lanes (AVX-512): x times the sigmoid table's value (vff::silu16).
    CONFORM_AVX512 __mmask16 ok16(__m512 x) const { return vff::abs_below16(x, vff::kTable4Max); }
    CONFORM_AVX512 __m512 lanes16(__m512 x) const { return vff::silu16(x); }
};

struct GeluErfFn {
    static constexpr float kFloatGateMin = -12.0f;  // gelu_erf(-12) ~ -2^-105, a normal float
    explicit GeluErfFn(const Params&) {}
    static double scalar(double x) { return std::fmax(x, -DBL_MAX) * 0.5 * std::erfc(-x * kSqrt1_2); }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        return vm::gelu_erf(x);
    }
    // The same 8 lanes at a time (AVX-512; the same bits per lane).
    [[gnu::always_inline]] CONFORM_AVX512 __m512d vec8(__m512d x) const { return vm::gelu_erf_l<D8>(x); }
    CONFORM_AVX2 __m256 vecf(__m256 x) const { return vf::gelu_erf(x); }
    // fp32, 16 lanes in float (AVX-512, the lanes of ok16; vff::gelu_erf16).
    CONFORM_AVX512 __mmask16 ok16(__m512 x) const { return vff::gelu_erf16_ok(x); }
    CONFORM_AVX512 __m512 lanes16(__m512 x) const { return vff::gelu_erf16(x); }
};

// x / (1 + e^-2z), z = sqrt(2/pi) (x + 0.044715 x^3) = x (c + c k x^2).
struct GeluTanhFn {
    explicit GeluTanhFn(const Params&) {}
    static double scalar(double x) {
        const double z2 = 2.0 * kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x);
        return std::fmax(x, -DBL_MAX) / (1.0 + std::exp(-z2));
    }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        __m256d x3 = _mm256_mul_pd(_mm256_mul_pd(x, x), x);
        __m256d z = _mm256_fmadd_pd(vm::set(kGeluTanhCubic), x3, x);
        __m256d z2 = _mm256_mul_pd(z, vm::set(2.0 * kSqrt2OverPi));
        return _mm256_div_pd(vm::floor_neg_inf(x), _mm256_add_pd(vm::set(1.0), vm::exp_neg(z2)));
    }
    // 2z = x (2c + 2ck x^2): relative error ~2^-22 in 2z, i.e. ~|2z| 2^-22 in
    // e^-|2z|, below 2^-15 down to bf16's underflow (|2z| < ~100).
    CONFORM_AVX2 __m256 vecf(__m256 x) const {
        const float c2 = static_cast<float>(2.0 * kSqrt2OverPi);
        const float c2k = static_cast<float>(2.0 * kSqrt2OverPi * kGeluTanhCubic);
        const __m256 z2 = _mm256_mul_ps(x, _mm256_fmadd_ps(vf::set(c2k), _mm256_mul_ps(x, x), vf::set(c2)));
        return vf::x_sigmoid(x, z2);
    }
    // float-float: x sigmoid(2z) with 2z in float-float (|x| <= 4.5, |2z| <= 13.7).
    CONFORM_AVX2 bool fp32_ok(__m256 x) const { return vff::in_range(x, vff::kGeluTanhMaxAbs); }
    CONFORM_AVX2 __m256 vec32(__m256 x) const { return vff::times(x, vff::sigmoid(vff::gelu_tanh_arg(x))); }
    // fp32, 16 lanes (AVX-512): the table of sigmoid(-2z(|x|)) for |x| < 3.9
    // (vff::gelu_tanh16); other lanes take the double path.
    CONFORM_AVX512 __mmask16 ok16(__m512 x) const { return vff::gelu_erf16_ok(x); }
    CONFORM_AVX512 __m512 lanes16(__m512 x) const { return vff::gelu_tanh16(x); }
};

struct SoftplusFn {
    explicit SoftplusFn(const Params&) {}
    static double scalar(double x) { return std::fmax(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        __m256d t = vm::exp_neg<false, true>(_mm256_andnot_pd(vm::set(-0.0), x));  // e^-|x| in [e^-708, 1]
        return _mm256_add_pd(_mm256_max_pd(x, vm::set(0.0)), vm::log1p_unit(t));
    }
    CONFORM_AVX2 __m256 vecf(__m256 x) const {
        const __m256 t = vf::exp_neg(_mm256_or_ps(x, vf::set(-0.0f)));
        return _mm256_add_ps(_mm256_max_ps(x, _mm256_setzero_ps()), vf::log1p_unit(t));
    }
    // float-float: |x| <= 64 (beyond: x + a tiny t, or e^x, on the double path).
    CONFORM_AVX2 bool fp32_ok(__m256 x) const { return vff::in_range(x); }
    CONFORM_AVX2 __m256 vec32(__m256 x) const {
        const vff::FF y = vff::softplus_ff(x);
        return _mm256_add_ps(y.hi, y.lo);  // the one final rounding
    }
    // fp32, 16 lanes (AVX-512): the table of log1p(e^-|x|) for |x| < 7.875
    // (vff::softplus16); other lanes take the double path.
    CONFORM_AVX512 __mmask16 ok16(__m512 x) const { return vff::abs_below16(x, vff::kTable4Max); }
    CONFORM_AVX512 __m512 lanes16(__m512 x) const { return vff::softplus16(x); }
};

// beta tanh(x / beta); also the SiTU-GLU caps.
struct SoftcapFn {
    static constexpr bool kFfOneBlock = true;  // vec32 branches per block (run_ff32: one block per step)
    double beta, inv_beta;  // x * inv_beta: relative error 2^-53 in x/beta, which tanh does not magnify
    float beta_f, inv_beta_f;  // the float path's beta and 1/beta (relative error 2^-24 each)
    explicit SoftcapFn(const Params& p) : SoftcapFn(p.get("beta", 30)) {}
    explicit SoftcapFn(double b)
        : beta(b), inv_beta(1.0 / b), beta_f(static_cast<float>(b)), inv_beta_f(static_cast<float>(1.0 / b)) {}
    double scalar(double x) const { return beta * std::tanh(x / beta); }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        return _mm256_mul_pd(vm::set(beta), vm::tanh(_mm256_mul_pd(x, vm::set(inv_beta))));
    }
    CONFORM_AVX2 __m256 vecf(__m256 x) const { return vf::softcap(x, beta_f, inv_beta_f); }
    // float-float (fp32): blocks with every |x * RN(1/beta)| <= 32, for beta in
    // [2^-60, 2^60] with RN(beta_f + beta_lo_f) = beta_f (else ff_limit < 0
    // sends every block to the double path; the last condition, false only
    // for a beta within 2^-48 of a float midpoint, keeps |y| <= RN(beta)).
    CONFORM_AVX2 bool fp32_ok(__m256 x) const { return vff::in_range(_mm256_mul_ps(x, vf::set(inv_beta_f)), ff_limit); }
    CONFORM_AVX2 __m256 vec32(__m256 x) const {
        const __m256 sign = _mm256_and_ps(x, vf::set(-0.0f));
        const vff::Fma3 v = vff::softcap_abs(_mm256_xor_ps(x, sign), beta_f, beta_lo_f, inv_beta_f);
        return _mm256_or_ps(_mm256_fmadd_ps(v.a, v.b, v.c), sign);  // the one final rounding
    }
    // beta - beta_f rounded to float (b - beta_f is exact in double), and the
    // float-float path's limit on |x / beta|.
    float beta_lo_f = static_cast<float>(beta - static_cast<double>(beta_f));
    float ff_limit = beta >= 0x1p-60 && beta <= 0x1p60 &&
                             static_cast<float>(static_cast<double>(beta_f) + static_cast<double>(beta_lo_f)) == beta_f
                         ? vff::kSoftcapMaxW
                         : -1.0f;
};

}  // namespace conform::cpu
