// Elementary functions for the activation and gated kernels: in double, as
// 4-lane AVX2 polynomials (namespace vm) and as portable scalar code (libm),
// and in float as 8-lane AVX2 code (namespace vf) for fp16/bf16 outputs only.
// Double serves every format: a relative error of a few 2^-53 is far below
// half an ulp of fp32/fp16/bf16, so the one final rounding to the storage
// format lands on the correctly rounded result (or, for values within ~2^-45
// of a rounding midpoint, its neighbour).  The float functions keep ~2^-21
// relative error (see vf below): enough for 1 ulp in fp16/bf16, not in fp32,
// so fp32 stays on the double path.
//
// Every formula is written in a form without cancellation so the relative
// accuracy holds in the tails as well (see the oracle/activation.hpp forms):
//   silu(x) = x / (1 + e^-x),   gelu_tanh(x) = x / (1 + e^-2z) = x sigmoid(2z),
//   gelu_erf(x) = x/2 erfc(-x/sqrt2),   softplus(x) = max(x,0) + log1p(e^-|x|),
//   tanh(a) = E / (E + 2) with E = expm1(2a) (no 1 - e^-2a for small a).
// No function here handles NaN: the drivers in elementwise.hpp map a NaN input
// to a NaN output after the fact, so the math may clamp NaNs freely.
#pragma once
#include <immintrin.h>

#include <bit>
#include <cfloat>
#include <cmath>

#include "impls/cpu/convert.hpp"  // CONFORM_AVX2
#include "numerics/op.hpp"

namespace conform::cpu {

// ---- constants ----------------------------------------------------------

inline constexpr double kLn2Hi = 0x1.62e42fee00000p-1;  // 32 significant bits: k*kLn2Hi exact for |k| < 2^21
inline constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;  // ln2 - kLn2Hi
inline constexpr double kLn2 = 0x1.62e42fefa39efp-1;
inline constexpr double kLog2e = 0x1.71547652b82fep+0;
inline constexpr double kSqrt1_2 = 0x1.6a09e667f3bcdp-1;  // 1/sqrt(2)
inline constexpr double kSqrt2OverPi = 0x1.9884533d43651p-1;  // sqrt(2/pi)
inline constexpr double kGeluTanhCubic = 0.044715;

namespace vm {

CONFORM_AVX2 inline __m256d set(double v) { return _mm256_set1_pd(v); }

// c[0] + c[1] r + ... + c[N-1] r^(N-1) by Estrin's scheme: pairs
// c[2j] + c[2j+1] r, then pairs of those in r^2, and so on.  The dependency
// chain is ~log2(N) FMAs instead of Horner's N-1, which lets the out-of-order
// core overlap neighbouring 8-element blocks (the kernels are latency-bound
// otherwise); every term is still formed with one FMA per level, and the
// series here decrease fast enough that the rounding error stays a few 2^-53.
// c[Off .. Off+N-1] with pw[k] = r^(2^k): low half + r^H * high half, H the
// largest power of two below N.
template <int Off, int N, int M>
CONFORM_AVX2 inline __m256d estrin(const double (&c)[M], const __m256d* pw) {
    if constexpr (N == 1) {
        return set(c[Off]);
    } else {
        constexpr int H = static_cast<int>(std::bit_floor(static_cast<unsigned>(N - 1)));
        return _mm256_fmadd_pd(estrin<Off + H, N - H>(c, pw), pw[std::countr_zero(static_cast<unsigned>(H))],
                               estrin<Off, H>(c, pw));
    }
}
template <int N>
CONFORM_AVX2 inline __m256d poly(__m256d r, const double (&c)[N]) {
    __m256d pw[4] = {r};
    for (int k = 1; k < 4 && (1 << k) < N; ++k) pw[k] = _mm256_mul_pd(pw[k - 1], pw[k - 1]);
    return estrin<0, N>(c, pw);
}

// 2^k for integral k in [-1022, 1023], given as doubles.
CONFORM_AVX2 inline __m256d pow2i(__m256d k) {
    __m256i ki = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k));
    ki = _mm256_slli_epi64(_mm256_add_epi64(ki, _mm256_set1_epi64x(1023)), 52);
    return _mm256_castsi256_pd(ki);
}

// Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2; k is a double.
CONFORM_AVX2 inline __m256d reduce_ln2(__m256d x, __m256d& k) {
    k = _mm256_round_pd(_mm256_mul_pd(x, set(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(k, set(kLn2Hi), x);  // exact
    return _mm256_fnmadd_pd(k, set(kLn2Lo), r);
}

// Taylor coefficients 1/i!, i = 0..13; |r| <= 0.347 truncates below 2^-56.
inline constexpr double kInvFact[14] = {1.0,
                                        1.0,
                                        1.0 / 2,
                                        1.0 / 6,
                                        1.0 / 24,
                                        1.0 / 120,
                                        1.0 / 720,
                                        1.0 / 5040,
                                        1.0 / 40320,
                                        1.0 / 362880,
                                        1.0 / 3628800,
                                        1.0 / 39916800,
                                        1.0 / 479001600,
                                        1.0 / 6227020800};

// e^x, relative error ~2^-51 over the whole range; +inf above ~709.8, 0 or
// correctly scaled subnormals below -708.  The scale 2^k is applied in two
// halves so that k up to +-1587 never builds an invalid exponent field.
CONFORM_AVX2 inline __m256d exp(__m256d x) {
    x = _mm256_min_pd(_mm256_max_pd(x, set(-1100.0)), set(1100.0));
    __m256d k;
    __m256d r = reduce_ln2(x, k);
    __m256d p = poly(r, kInvFact);
    __m256d k1 = _mm256_round_pd(_mm256_mul_pd(k, set(0.5)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m256d k2 = _mm256_sub_pd(k, k1);
    return _mm256_mul_pd(_mm256_mul_pd(p, pow2i(k1)), pow2i(k2));
}

// e^y - 1 for y in [-700, 700] (clamped), relative error ~2^-50: for |y| <=
// ln2/2 (k = 0) it is r*q(r) with no subtraction at all; otherwise
// 2^k (e^r - 1) + (2^k - 1), whose cancellation costs at most ~2 bits (k = -1).
CONFORM_AVX2 inline __m256d expm1(__m256d y) {
    static constexpr double q[13] = {1.0,           1.0 / 2,        1.0 / 6,        1.0 / 24,
                                     1.0 / 120,     1.0 / 720,      1.0 / 5040,     1.0 / 40320,
                                     1.0 / 362880,  1.0 / 3628800,  1.0 / 39916800, 1.0 / 479001600,
                                     1.0 / 6227020800};
    y = _mm256_min_pd(_mm256_max_pd(y, set(-700.0)), set(700.0));
    __m256d k;
    __m256d r = reduce_ln2(y, k);
    __m256d p = _mm256_mul_pd(r, poly(r, q));  // e^r - 1
    __m256d s = pow2i(k);
    return _mm256_fmadd_pd(s, p, _mm256_sub_pd(s, set(1.0)));
}

// log1p(t) for t in [0, 1], relative error ~2^-51 (t may be tiny: softplus
// of a very negative x is log1p(e^x) ~ e^x).  For t > 1/2 use
// log1p(t) = ln2 + log1p((t-1)/2), where t - 1 is exact (Sterbenz), so the
// series argument s = f/(2+f) satisfies |s| <= 0.2; log1p(f) = 2 atanh(s).
CONFORM_AVX2 inline __m256d log1p_unit(__m256d t) {
    static constexpr double c[12] = {1.0,      1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11,
                                     1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21, 1.0 / 23};
    __m256d big = _mm256_cmp_pd(t, set(0.5), _CMP_GT_OQ);
    __m256d f = _mm256_blendv_pd(t, _mm256_mul_pd(_mm256_sub_pd(t, set(1.0)), set(0.5)), big);
    __m256d s = _mm256_div_pd(f, _mm256_add_pd(set(2.0), f));
    __m256d l = _mm256_mul_pd(_mm256_add_pd(s, s), poly(_mm256_mul_pd(s, s), c));
    return _mm256_add_pd(l, _mm256_and_pd(big, set(kLn2)));
}

// tanh(z), relative error ~2^-50 for all z, +-1 exactly for |z| >= 20
// (tanh(20) = 1 - 8.5e-18 rounds to 1 in double); sign-symmetric, tanh(-0) = -0.
CONFORM_AVX2 inline __m256d tanh(__m256d z) {
    const __m256d sign = _mm256_and_pd(z, set(-0.0));
    __m256d a = _mm256_min_pd(_mm256_andnot_pd(set(-0.0), z), set(20.0));
    __m256d e = expm1(_mm256_add_pd(a, a));
    __m256d t = _mm256_div_pd(e, _mm256_add_pd(e, set(2.0)));
    return _mm256_or_pd(t, sign);
}

// x with -inf replaced by -DBL_MAX, so that x / (1 + e^-x) is -0 at -inf
// instead of -inf/inf = NaN (the oracle's limit), while +inf stays +inf.
CONFORM_AVX2 inline __m256d floor_neg_inf(__m256d x) { return _mm256_max_pd(x, set(-DBL_MAX)); }

// Lane-wise erfc through libm: no vector erfc with ~2^-45 relative accuracy
// over [-inf, 27] here yet, so gelu_erf/geglu pay a scalar call per element.
CONFORM_AVX2 inline __m256d erfc_lanes(__m256d t) {
    alignas(32) double v[4];
    _mm256_store_pd(v, t);
    for (double& e : v) e = std::erfc(e);
    return _mm256_load_pd(v);
}

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

// e^(hi + lo) for hi + lo <= 0, lo in [-2, 0] (lo = 0 for a plain e^hi).
// hi is clamped at -105 (e^-105 < FLT_TRUE_MIN / 2, so the result is 0 there);
// the reduction hi - k*C1 is exact, the scale 2^k is applied as 2^(k+100) (a
// normal number for k >= -160) and then 2^-100, so a subnormal result is
// rounded once.  Cephes expf polynomial; relative error ~2^-23.
template <bool kHasLo = true>
CONFORM_AVX2 inline __m256 exp_neg(__m256 hi, __m256 lo) {
    hi = _mm256_max_ps(hi, set(-105.0f));
    const __m256 sum = kHasLo ? _mm256_add_ps(hi, lo) : hi;
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(sum, set(0x1.715476p+0f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, set(0.693359375f), hi);
    if constexpr (kHasLo) r = _mm256_add_ps(r, lo);
    r = _mm256_fnmadd_ps(k, set(-2.12194440e-4f), r);
    __m256 p = _mm256_fmadd_ps(set(1.9875691500E-4f), r, set(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, set(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, set(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, set(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, set(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, set(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127 + 100)), 23);
    return _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), set(0x1p-100f));
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

// ---- the activation functions, as scalar and vector functors ------------
// Each functor is built from the call's Params (so a parameter can never be
// silently dropped) and offers scalar(double) and vec(__m256d).

struct SigmoidFn {
    static constexpr float kFloatGateMin = -80.0f;  // sigmoid(-80) ~ 2^-115.4, a normal float
    explicit SigmoidFn(const Params&) {}
    static double scalar(double x) { return 1.0 / (1.0 + std::exp(-x)); }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        return _mm256_div_pd(vm::set(1.0), _mm256_add_pd(vm::set(1.0), vm::exp(_mm256_sub_pd(vm::set(0.0), x))));
    }
    CONFORM_AVX2 __m256 vecf(__m256 x) const { return vf::sigmoid(x); }
};

struct SiluFn {
    static constexpr float kFloatGateMin = -80.0f;  // silu(-80) ~ -2^-109, a normal float
    explicit SiluFn(const Params&) {}
    static double scalar(double x) { return std::fmax(x, -DBL_MAX) / (1.0 + std::exp(-x)); }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        __m256d d = _mm256_add_pd(vm::set(1.0), vm::exp(_mm256_sub_pd(vm::set(0.0), x)));
        return _mm256_div_pd(vm::floor_neg_inf(x), d);
    }
    CONFORM_AVX2 __m256 vecf(__m256 x) const { return vf::x_sigmoid(x, x); }
};

struct GeluErfFn {
    static constexpr float kFloatGateMin = -12.0f;  // gelu_erf(-12) ~ -2^-105, a normal float
    explicit GeluErfFn(const Params&) {}
    static double scalar(double x) { return std::fmax(x, -DBL_MAX) * 0.5 * std::erfc(-x * kSqrt1_2); }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        __m256d e = vm::erfc_lanes(_mm256_mul_pd(x, vm::set(-kSqrt1_2)));
        return _mm256_mul_pd(_mm256_mul_pd(vm::floor_neg_inf(x), vm::set(0.5)), e);
    }
    CONFORM_AVX2 __m256 vecf(__m256 x) const { return vf::gelu_erf(x); }
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
        __m256d mz2 = _mm256_mul_pd(z, vm::set(-2.0 * kSqrt2OverPi));
        return _mm256_div_pd(vm::floor_neg_inf(x), _mm256_add_pd(vm::set(1.0), vm::exp(mz2)));
    }
    // 2z = x (2c + 2ck x^2): relative error ~2^-22 in 2z, i.e. ~|2z| 2^-22 in
    // e^-|2z|, below 2^-15 down to bf16's underflow (|2z| < ~100).
    CONFORM_AVX2 __m256 vecf(__m256 x) const {
        const float c2 = static_cast<float>(2.0 * kSqrt2OverPi);
        const float c2k = static_cast<float>(2.0 * kSqrt2OverPi * kGeluTanhCubic);
        const __m256 z2 = _mm256_mul_ps(x, _mm256_fmadd_ps(vf::set(c2k), _mm256_mul_ps(x, x), vf::set(c2)));
        return vf::x_sigmoid(x, z2);
    }
};

struct SoftplusFn {
    explicit SoftplusFn(const Params&) {}
    static double scalar(double x) { return std::fmax(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        __m256d t = vm::exp(_mm256_or_pd(x, vm::set(-0.0)));  // e^-|x| in [0, 1]
        return _mm256_add_pd(_mm256_max_pd(x, vm::set(0.0)), vm::log1p_unit(t));
    }
    CONFORM_AVX2 __m256 vecf(__m256 x) const {
        const __m256 t = vf::exp_neg(_mm256_or_ps(x, vf::set(-0.0f)));
        return _mm256_add_ps(_mm256_max_ps(x, _mm256_setzero_ps()), vf::log1p_unit(t));
    }
};

// beta tanh(x / beta); also the SiTU-GLU caps.
struct SoftcapFn {
    double beta;
    float beta_f, inv_beta_f;  // the float path's beta and 1/beta (relative error 2^-24 each)
    explicit SoftcapFn(const Params& p) : SoftcapFn(p.get("beta", 30)) {}
    explicit SoftcapFn(double b)
        : beta(b), beta_f(static_cast<float>(b)), inv_beta_f(static_cast<float>(1.0 / b)) {}
    double scalar(double x) const { return beta * std::tanh(x / beta); }
    CONFORM_AVX2 __m256d vec(__m256d x) const {
        return _mm256_mul_pd(vm::set(beta), vm::tanh(_mm256_div_pd(x, vm::set(beta))));
    }
    CONFORM_AVX2 __m256 vecf(__m256 x) const { return vf::softcap(x, beta_f, inv_beta_f); }
};

}  // namespace conform::cpu
