// CPU kernels of the gated family (swiglu, geglu, situ_glu, swiglu_clamp):
// h from (gate, up), as cpu.simd / cpu.scalar (<= 1 ulp, internal double) and
// cpu.naive baselines, for fp32, fp16 and bf16.  The activation factors are
// the activation family's functors; the product is taken in double (exact
// range for any pair of fp32 inputs), then rounded once.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <concepts>

#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/simd_math.hpp"

namespace conform {
namespace {

using namespace cpu;

// False where some lane's gate is below gmin (NaN lanes pass: the driver
// makes them NaN).  Below gmin the activation factor is no longer a normal
// float, and its absolute error (~2^-150) times |up| (up to 2^128 in bf16)
// would not stay within the ulp of the product.
CONFORM_AVX2 inline bool gate_in_float_range(__m256 g, float gmin) {
    return _mm256_movemask_ps(_mm256_cmp_ps(g, _mm256_set1_ps(gmin), _CMP_LT_OQ)) == 0;
}

// ---- fp32 float-float path (swiglu, swiglu_clamp; docs/gated.md §4) ----
// silu(g) as a float-float hi + lo for |g| <= 64: hi = RN(g q0) plus its
// exact error and RN(g corr), from vff::sigmoid's q0 + corr.  Written once
// over the lane type (simd_lanes.hpp: the same bits in 8 or 16 lanes).
template <class L, class R = typename L::R>
CONFORM_LANES vff::FFT<R> silu_ff_l(R g) {
    const vff::SplitT<R> q = vff::sigmoid_l<L, false>(g, L::zero());
    const R hi = L::mul(g, q.q0);
    return {hi, L::fmadd(g, q.corr, L::fmsub(g, q.q0, hi))};
}

// Gates silu_ff is accurate for as a factor of any up: g = 0 or 2^-100 <=
// |g| <= 64 (false for NaN).  Below 2^-100 the error terms of g q0 and
// g corr fall under float's subnormal grid: an absolute 2^-150 that a large
// up would turn into a relative 2^-149 / |g| (docs/gated.md §4).
CONFORM_AVX2 inline bool silu_ff_gate_ok(__m256 g) {
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), g);
    const __m256 normal = _mm256_and_ps(_mm256_cmp_ps(a, _mm256_set1_ps(vff::kMaxAbs), _CMP_LE_OQ),
                                        _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-100f), _CMP_GE_OQ));
    const __m256 ok = _mm256_or_ps(normal, _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_EQ_OQ));
    return _mm256_movemask_ps(ok) == 0xFF;
}
CONFORM_AVX512 inline bool silu_ff_gate_ok(__m512 g) {
    const __m512 a = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), g);
    const __mmask16 normal = _mm512_cmp_ps_mask(a, _mm512_set1_ps(vff::kMaxAbs), _CMP_LE_OQ) &
                             _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p-100f), _CMP_GE_OQ);
    return (normal | _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_EQ_OQ)) == 0xFFFF;
}

// (a.hi + a.lo) * u rounded once: u a.hi is exact inside the FMA, u a.lo is
// rounded first.  The sign of the IEEE product g * u (that of act(g) * u) is
// or-ed in, so that a zero result keeps it.
template <class L, class R = typename L::R>
CONFORM_LANES R times_ff_l(vff::FFT<R> a, R g, R u) {
    const R y = L::fmadd(u, a.hi, L::mul(u, a.lo));
    return L::or_(y, L::and_(L::xor_(g, u), L::set(-0.0f)));
}

// ---- fp32 16-lane float-float products (geglu, situ_glu; AVX-512) -------
// Lanes where g u = ph + pl is exact: |g u| >= 2^-100, or g u = 0 (below
// 2^-100 the error term pl would be rounded on the subnormal grid).
CONFORM_AVX512 inline __mmask16 product_ok16(__m512 g, __m512 u) {
    const __m512 a = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), _mm512_mul_ps(g, u));
    return _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p-100f), _CMP_GE_OQ) |
           _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_EQ_OQ);
}

// g u (hi + lo) rounded once, with g u = ph + pl exactly: ph hi is exact
// inside the outer FMA, the inner one rounds ph lo + RN(pl hi)
// (docs/gated.md §4).  The sign of g u is set explicitly, so a zero result
// keeps the IEEE product's sign.
CONFORM_AVX512 inline __m512 times_product16(__m512 g, __m512 u, __m512 hi, __m512 lo) {
    using L = F16;
    const __m512 ph = L::mul(g, u), pl = L::fmsub(g, u, ph);
    const __m512 y = L::fmadd(ph, hi, L::fmadd(ph, lo, L::mul(pl, hi)));
    const __m512 sign = L::set(-0.0f);
    return L::or_(L::andnot(sign, y), L::and_(L::xor_(g, u), sign));
}

// act(gate) * up; the IEEE product keeps the oracle's limits (silu(-inf) * u
// = -0 * u, and 0 * inf = NaN).  The scalar path keeps two details exact:
// where act(g) underflows double to 0 for a finite g != 0 (gelu_erf below
// about -38.6) although the true value is nonzero, it is kept as
// copysign(DBL_TRUE_MIN, g) so that act(g) * +-inf is the signed infinity
// (a finite u still rounds the product to a signed zero); and for large
// g > 0, where act(g) rounds to g itself in double while the true value is
// a hair below, it steps act(g) one double ulp down, so that an exact
// product g * u sitting on an output midpoint is rounded like the true value.
//
// The vector path is the plain product; its ~2^-32 relative error makes the
// midpoint step moot (the budget is 1 ulp, which a tie met either way keeps)
// except at the output format's overflow threshold (fp32's 2^128 (1 - 2^-25),
// fp16's 65520, bf16's 0x1.ffp+127), where its largest finite value and
// +inf are different classes.  Both that case and the underflow case show in
// the rounded output (at least the format's largest finite value in
// magnitude, +-inf, or NaN without a NaN input), so kScalarAtExtremes has the
// driver recompute such lanes by the scalar path (elementwise.hpp, finish8;
// the fp16/bf16 float paths send such blocks to the double path first),
// never ordinary ones.
template <class Act>
struct GluFn {
    static constexpr bool kScalarAtExtremes = true;
    Act act;
    explicit GluFn(const Params& p) : act(p) {}
    double scalar(double g, double u) const {
        double a = act.scalar(g);
        if (a == g && g > 0 && std::isfinite(g)) a = std::nextafter(a, 0.0);
        if (a == 0 && g != 0 && std::isfinite(g)) a = std::copysign(DBL_TRUE_MIN, g);
        return a * u;
    }
    CONFORM_AVX2 __m256d vec(__m256d g, __m256d u) const { return _mm256_mul_pd(act.vec(g), u); }
    [[gnu::always_inline]] CONFORM_AVX512 __m512d vec8(__m512d g, __m512d u) const
        requires requires(__m512d x) { act.vec8(x); }
    {
        return _mm512_mul_pd(act.vec8(g), u);
    }
    // fp32 float-float path, swiglu only (gates: silu_ff_gate_ok); the
    // driver sends results >= FLT_MAX in magnitude or NaN to vec above.
    CONFORM_AVX2 bool fp32_ok(__m256 g) const
        requires std::same_as<Act, SiluFn>
    {
        return silu_ff_gate_ok(g);
    }
    CONFORM_AVX2 __m256 vec32(__m256 g, __m256 u) const
        requires std::same_as<Act, SiluFn>
    {
        return times_ff_l<F8>(silu_ff_l<F8>(g), g, u);
    }
    // The same 16 lanes at a time (AVX-512; the same bits).
    CONFORM_AVX512 bool fp32_ok16(__m512 g) const
        requires std::same_as<Act, SiluFn>
    {
        return silu_ff_gate_ok(g);
    }
    CONFORM_AVX512 __m512 vec32_16(__m512 g, __m512 u) const
        requires std::same_as<Act, SiluFn>
    {
        return times_ff_l<F16>(silu_ff_l<F16>(g), g, u);
    }
    // fp32, geglu only, 16 lanes (AVX-512; docs/gated.md §4): g u Phi(g),
    // Phi(g) = h + l from vff::phi16, for |g| < 3.9 and product_ok16.  The
    // driver sends other lanes, and results >= FLT_MAX in magnitude or NaN,
    // to vec8.
    CONFORM_AVX512 __mmask16 ok16(__m512 g, __m512 u) const
        requires std::same_as<Act, GeluErfFn>
    {
        return vff::gelu_erf16_ok(g) & product_ok16(g, u);
    }
    CONFORM_AVX512 __m512 lanes16(__m512 g, __m512 u) const
        requires std::same_as<Act, GeluErfFn>
    {
        const auto f = vff::phi16(g);
        return times_product16(g, u, f.hi, f.lo);
    }
    // Float path (fp16/bf16): the same step below g; gates below Act::kFloatGateMin
    // (where act(g) leaves float's normal range) go to the double path.
    CONFORM_AVX2 bool float_ok(__m256 g) const { return gate_in_float_range(g, Act::kFloatGateMin); }
    CONFORM_AVX2 __m256 gate_f(__m256 g) const {
        const __m256 a = act.vecf(g);
        __m256 below = _mm256_and_ps(_mm256_cmp_ps(a, g, _CMP_EQ_OQ), _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_GT_OQ));
        below = _mm256_and_ps(below, _mm256_cmp_ps(g, _mm256_set1_ps(FLT_MAX), _CMP_LE_OQ));
        return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(a), _mm256_castps_si256(below)));
    }
    CONFORM_AVX2 __m256 up_f(__m256 u) const { return u; }
    CONFORM_AVX2 __m256 vecf(__m256 g, __m256 u) const { return _mm256_mul_ps(gate_f(g), up_f(u)); }
};

// [beta1 tanh(g/beta1) sigmoid(g)] * [beta2 tanh(u/beta2)]; at g = -inf the
// gate factor is -beta1 * 0 = -0, the oracle's limit.
// The vector path takes one division for the three factors:
// h = sign(g u) beta1 beta2 E1 E2 / ((E1 + 2)(E2 + 2)(1 + e^-g)), with
// E1 = expm1(2|g|/beta1), E2 = expm1(2|u|/beta2) (tanh = E / (E + 2)).  The
// denominator overflows only for g < ~-630, where h underflows fp32 anyway
// (and with e^-g capped at e^664 for g < -664, |h| <= 2^122 / 2^959 is 0 in
// fp32 too, so g = -inf needs no +inf there).
// fp32 on AVX-512 at the default caps beta1 = 4, beta2 = 25 (docs/gated.md
// §4, "FP32 situ_glu in float-float"): h = g u H(g) (1 + m(u^2)) with
// H(g) = 4 tanh(g/4) sigmoid(g) / g from a table of 32 intervals of
// degree-6 polynomials in g - round(4g)/4, and 25 tanh(u/25) = u (1 + m),
// m(s) = s Q(s) of degree 5 for |u| < 8.75 (python/fits/situ_glu_table.py).
alignas(64) inline constexpr float kSituGateTable[9][32] = {  // [row][k]
    // p0h
    {0x1.0p-1f, 0x1.1f75cep-1f, 0x1.3d0cb2p-1f, 0x1.57b88ep-1f, 0x1.6eb1b6p-1f, 0x1.818264p-1f, 0x1.900548p-1f, 0x1.9a58d2p-1f,
     0x1.a0ccdap-1f, 0x1.a3cf92p-1f, 0x1.a3dd14p-1f, 0x1.a172f4p-1f, 0x1.9d080ap-1f, 0x1.9707bcp-1f, 0x1.8fcfe4p-1f, 0x1.87b074p-1f,
     0x1.c0dcc4p-7f, 0x1.26c5d4p-6f, 0x1.82584cp-6f, 0x1.f90864p-6f, 0x1.490498p-5f, 0x1.aafc68p-5f, 0x1.13b74cp-4f, 0x1.61fb5ep-4f,
     0x1.c3431ep-4f, 0x1.1d3afep-3f, 0x1.6506d4p-3f, 0x1.b9cd16p-3f, 0x1.0dcc6ap-2f, 0x1.44b97cp-2f, 0x1.8099cp-2f, 0x1.bfbf98p-2f},
    // p0l
    {-0x1.18b572p-43f, -0x1.82e056p-27f, 0x1.121ca8p-27f, 0x1.c4133ep-27f, -0x1.576194p-26f, 0x1.86205ap-27f, 0x1.c481fp-28f, -0x1.629942p-27f,
     -0x1.508988p-27f, 0x1.c93f68p-26f, 0x1.050658p-27f, -0x1.0144e4p-26f, -0x1.c61a5cp-27f, -0x1.02457ap-27f, -0x1.e76f8cp-26f, 0x1.d6c8a8p-27f,
     0x1.66e872p-34f, -0x1.2946fp-33f, -0x1.b60f76p-31f, -0x1.737b04p-31f, 0x1.b8acb8p-30f, 0x1.e4221ep-30f, 0x1.e4cb98p-29f, -0x1.76ba6cp-29f,
     0x1.3162fp-30f, -0x1.115ec2p-28f, -0x1.175b9ep-32f, -0x1.83ed74p-28f, 0x1.552dc6p-29f, -0x1.b01592p-27f, 0x1.df10ccp-27f, -0x1.0a2a58p-28f},
    // p1h
    {0x1.0p-2f, 0x1.eb78b8p-3f, 0x1.c4912ap-3f, 0x1.8ed24ap-3f, 0x1.4f191ap-3f, 0x1.0a9cdap-3f, 0x1.8c2bccp-4f, 0x1.0a6ad6p-4f,
     0x1.29d78cp-5f, 0x1.72f79ep-7f, -0x1.42e3ecp-7f, -0x1.bebd9ep-6f, -0x1.519a82p-5f, -0x1.aaa31ap-5f, -0x1.edf536p-5f, -0x1.0f7d92p-4f,
     0x1.eb1fd4p-7f, 0x1.404fe8p-6f, 0x1.a02d68p-6f, 0x1.0d0f14p-5f, 0x1.59d384p-5f, 0x1.b943fcp-5f, 0x1.170772p-4f, 0x1.5d182cp-4f,
     0x1.af1bap-4f, 0x1.06150ep-3f, 0x1.38d3ecp-3f, 0x1.6d6a5p-3f, 0x1.a05242p-3f, 0x1.cd0f24p-3f, 0x1.eeb496p-3f, 0x1.005e84p-2f},
    // p1l
    {-0x1.eaa892p-34f, 0x1.23529cp-31f, 0x1.11262cp-28f, 0x1.6e4968p-28f, -0x1.db963p-28f, -0x1.957caap-31f, -0x1.f4522cp-30f, -0x1.bcb5e8p-29f,
     0x1.c81198p-30f, 0x1.0e8ba8p-33f, 0x1.bcd3fcp-36f, -0x1.05f5f4p-33f, 0x1.69bbb2p-30f, 0x1.97a88p-31f, -0x1.a45704p-30f, -0x1.e567d4p-33f,
     0x1.9ebbfp-33f, 0x1.39118ap-31f, -0x1.6de7e2p-34f, -0x1.4e9cfep-34f, 0x1.f01ebp-30f, 0x1.c0a024p-34f, -0x1.2e2742p-29f, 0x1.ae38d8p-29f,
     0x1.7b3d04p-30f, -0x1.1a68ep-28f, -0x1.6f5248p-29f, 0x1.49c0bp-29f, -0x1.24a3b4p-28f, 0x1.bbf402p-28f, -0x1.0f25bep-28f, -0x1.5278f4p-27f},
    // p2
    {-0x1.555556p-7f, -0x1.e26268p-6f, -0x1.787462p-5f, -0x1.dcdaaap-5f, -0x1.0bd316p-4f, -0x1.14e03p-4f, -0x1.0cde62p-4f, -0x1.f1004ep-5f,
     -0x1.b9357cp-5f, -0x1.7aa5ccp-5f, -0x1.3b8424p-5f, -0x1.ffcd78p-6f, -0x1.943dfp-6f, -0x1.365fa4p-6f, -0x1.ccf6a6p-7f, -0x1.479e36p-7f,
     0x1.06b2c2p-7f, 0x1.52258ep-7f, 0x1.b01706p-7f, 0x1.119122p-6f, 0x1.56822ep-6f, 0x1.a6d3a4p-6f, 0x1.007168p-5f, 0x1.304c3ep-5f,
     0x1.5f3e16p-5f, 0x1.878092p-5f, 0x1.a145c2p-5f, 0x1.a3681p-5f, 0x1.850976p-5f, 0x1.4016aap-5f, 0x1.a82d08p-6f, 0x1.207a16p-7f},
    // p3
    {-0x1.aaaa6ep-6f, -0x1.8be9f2p-6f, -0x1.3f03d4p-6f, -0x1.aae722p-7f, -0x1.92803ep-8f, 0x1.057596p-14f, 0x1.406062p-8f, 0x1.09975ep-7f,
     0x1.4219a2p-7f, 0x1.53b662p-7f, 0x1.4a1756p-7f, 0x1.2fc898p-7f, 0x1.0d0392p-7f, 0x1.cf0b5cp-8f, 0x1.85da64p-8f, 0x1.42818ap-8f,
     0x1.662812p-9f, 0x1.c1331p-9f, 0x1.159db4p-8f, 0x1.50c442p-8f, 0x1.8ea216p-8f, 0x1.c8b816p-8f, 0x1.f45d02p-8f, 0x1.00fbeap-7f,
     0x1.dd4268p-8f, 0x1.6f9fdap-8f, 0x1.4b2de2p-9f, -0x1.109624p-9f, -0x1.05767ap-7f, -0x1.da99dap-7f, -0x1.4f8d26p-6f, -0x1.946148p-6f},
    // p4
    {0x1.112096p-12f, 0x1.c04f2ep-9f, 0x1.7ae5c2p-8f, 0x1.c2d9f2p-8f, 0x1.b7268ep-8f, 0x1.6e5bbcp-8f, 0x1.07cf16p-8f, 0x1.3e87cap-9f,
     0x1.190504p-10f, 0x1.0b58d4p-14f, -0x1.38a97ap-11f, -0x1.fb19ecp-11f, -0x1.271cfcp-10f, -0x1.2bfccp-10f, -0x1.1af2cep-10f, -0x1.fd4744p-11f,
     0x1.4d49c2p-11f, 0x1.8ae92ap-11f, 0x1.c3a354p-11f, 0x1.ea602ap-11f, 0x1.eafcc8p-11f, 0x1.a839d2p-11f, 0x1.fa3a88p-12f, -0x1.f7bcdp-14f,
     -0x1.15bc1ap-10f, -0x1.327bccp-9f, -0x1.f8850cp-9f, -0x1.5d256ep-8f, -0x1.a0951cp-8f, -0x1.a78a78p-8f, -0x1.5bea38p-8f, -0x1.7da436p-9f},
    // p5
    {0x1.5a119p-9f, 0x1.2c8bccp-9f, 0x1.7295a6p-10f, 0x1.6743dcp-12f, -0x1.2c491p-11f, -0x1.28564p-10f, -0x1.56f96cp-10f, -0x1.3bb952p-10f,
     -0x1.f331b4p-11f, -0x1.5b5b44p-11f, -0x1.a6913ep-12f, -0x1.a7be6p-13f, -0x1.06a3bep-14f, 0x1.9e2e4p-16f, 0x1.334aa2p-14f, 0x1.902104p-14f,
     0x1.87aae6p-14f, 0x1.8446b6p-14f, 0x1.4196aap-14f, 0x1.2d0fdap-15f, -0x1.63d3ccp-15f, -0x1.683f66p-13f, -0x1.7be746p-12f, -0x1.40b958p-11f,
     -0x1.d3f828p-11f, -0x1.2a6a94p-10f, -0x1.44dab6p-10f, -0x1.1680a8p-10f, -0x1.0b9fccp-11f, 0x1.9da13cp-12f, 0x1.7c543p-10f, 0x1.2f16c4p-9f},
    // p6
    {-0x1.2f11e6p-17f, -0x1.d00fe2p-12f, -0x1.69da94p-11f, -0x1.6d27c8p-11f, -0x1.f65782p-12f, -0x1.eb0b52p-13f, 0x1.f6ad9p-20f, 0x1.0a2d84p-13f,
     0x1.9e5b8ep-13f, 0x1.76bf2ep-13f, 0x1.347f24p-13f, 0x1.cf1632p-14f, 0x1.1de4e6p-14f, 0x1.89fdd6p-15f, 0x1.aaa7ap-16f, 0x1.a310f6p-18f,
     0x1.9495f4p-18f, -0x1.beef3cp-20f, -0x1.52e192p-16f, -0x1.3a9e68p-15f, -0x1.222cdp-14f, -0x1.a0ca34p-14f, -0x1.2976f4p-13f, -0x1.6674acp-13f,
     -0x1.74f216p-13f, -0x1.154088p-13f, 0x1.0689dep-16f, 0x1.faf86ap-13f, 0x1.03eb6p-11f, 0x1.6940fep-11f, 0x1.665adep-11f, 0x1.c0049ap-12f},
};
inline constexpr float kSituUpQ[5] = {-0x1.179ecap-11f, 0x1.6e8116p-22f, -0x1.e617d8p-33f, 0x1.41887cp-43f, -0x1.7e5386p-54f};
inline constexpr float kSituGateMin = -4.125f, kSituGateEnd = 3.875f;  // gates in [min, end): 4g rounds to -16..15
inline constexpr float kSituUpMax = 8.75f;                              // |u/25| < 0.35

// Q(s) by Horner, over the lane type.
template <class L, class R = typename L::R>
CONFORM_LANES R situ_up_q(R s) {
    R q = L::fmadd(L::set(kSituUpQ[4]), s, L::set(kSituUpQ[3]));
    q = L::fmadd(q, s, L::set(kSituUpQ[2]));
    q = L::fmadd(q, s, L::set(kSituUpQ[1]));
    return L::fmadd(q, s, L::set(kSituUpQ[0]));
}

// The 16-bit paths' float up factor at beta2 = 25 for |u| < 8.75:
// u (1 + s Q(s)), s = RN(u^2), relative error < 2^-22.5 (docs/gated.md §4);
// the sign of u is or-ed in, so u = -0 gives -0.  The same bits in 8 or 16
// lanes.
template <class L, class R = typename L::R>
CONFORM_LANES R situ_up_float(R u) {
    const R s = L::mul(u, u);
    const R y = L::fmadd(u, L::mul(s, situ_up_q<L>(s)), u);
    return L::or_(y, L::and_(u, L::set(-0.0f)));
}

struct SituGluFn {
    SoftcapFn cap1, cap2;
    SigmoidFn sig;
    double beta12;
    bool lanes16_on;  // the caps the fp32 tables were fitted for
    bool up_poly;     // beta2 = 25: the 16-bit paths' up factor by situ_up_float where |u| < 8.75
    explicit SituGluFn(const Params& p)
        : cap1(p.get("beta1", 4)),
          cap2(p.get("beta2", 25)),
          sig(p),
          beta12(cap1.beta * cap2.beta),
          lanes16_on(cap1.beta == 4 && cap2.beta == 25),
          up_poly(cap2.beta == 25) {}
    double scalar(double g, double u) const { return cap1.scalar(g) * sig.scalar(g) * cap2.scalar(u); }
    template <class D, class R = typename D::R>
    CONFORM_LANES R vec_l(R g, R u) const {
        const vm::FracT<R> t1 = vm::tanh_abs_frac_l<D>(D::mul(g, D::set(cap1.inv_beta)));
        const vm::FracT<R> t2 = vm::tanh_abs_frac_l<D>(D::mul(u, D::set(cap2.inv_beta)));
        const R s = D::add(D::set(1.0), vm::exp_neg_l<D, false>(g));
        const R num = D::mul(D::mul(t1.num, t2.num), D::set(beta12));
        const R den = D::mul(D::mul(t1.den, t2.den), s);
        const R sign = D::and_(D::xor_(g, u), D::set(-0.0));
        return D::or_(D::div(num, den), sign);
    }
    CONFORM_AVX2 __m256d vec(__m256d g, __m256d u) const { return vec_l<D4>(g, u); }
    [[gnu::always_inline]] CONFORM_AVX512 __m512d vec8(__m512d g, __m512d u) const { return vec_l<D8>(g, u); }  // the same bits per lane
    // fp32, 16 lanes (when lanes16_on): the lanes with g in [-4.125, 3.875),
    // |u| < 8.75 and product_ok16; the driver sends the others to vec8.
    CONFORM_AVX512 __mmask16 ok16(__m512 g, __m512 u) const {
        const __mmask16 gate = _mm512_cmp_ps_mask(g, _mm512_set1_ps(kSituGateMin), _CMP_GE_OQ) &
                               _mm512_cmp_ps_mask(g, _mm512_set1_ps(kSituGateEnd), _CMP_LT_OQ);
        return gate & vff::abs_below16(u, kSituUpMax) & product_ok16(g, u);
    }
    // H (1 + m) = hi + (hi m + lo (1 + m)) with u^2 = sh + sl exactly and
    // m = sh Q(sh) + sl q0 (the rest of sl's share is < 2^-28 of m).
    CONFORM_AVX512 __m512 lanes16(__m512 g, __m512 u) const {
        using L = F16;
        const auto h = vff::table_poly16<4>(kSituGateTable, g);
        const __m512 sh = L::mul(u, u), sl = L::fmsub(u, u, sh);
        const __m512 m = L::fmadd(sh, situ_up_q<L>(sh), L::mul(sl, L::set(kSituUpQ[0])));
        return times_product16(g, u, h.hi, L::fmadd(h.hi, m, L::fmadd(h.lo, m, h.lo)));
    }
    CONFORM_AVX2 bool float_ok(__m256 g) const { return gate_in_float_range(g, SigmoidFn::kFloatGateMin); }
    static constexpr bool kTabulateUp = true;  // the up factor is a softcap, worth a table
    CONFORM_AVX2 __m256 gate_f(__m256 g) const { return _mm256_mul_ps(cap1.vecf(g), sig.vecf(g)); }
    CONFORM_AVX2 __m256 up_f(__m256 u) const {
        const __m256 v = cap2.vecf(u);
        if (!up_poly) return v;
        const __m256 au = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), u);
        return _mm256_blendv_ps(v, situ_up_float<F8>(u), _mm256_cmp_ps(au, _mm256_set1_ps(kSituUpMax), _CMP_LT_OQ));
    }
    // up_f 16 lanes at a time where every |u| < 8.75 (AVX-512: computed
    // instead of read from the up table, the same bits).
    CONFORM_AVX512 bool up16_ok(__m512 u) const { return up_poly && vff::abs_below16(u, kSituUpMax) == 0xFFFF; }
    CONFORM_AVX512 __m512 up16(__m512 u) const { return situ_up_float<F16>(u); }
    CONFORM_AVX2 __m256 vecf(__m256 g, __m256 u) const { return _mm256_mul_ps(gate_f(g), up_f(u)); }
};

// silu(min(g, L)) * clamp(u, -L, L): the gate is capped above only.
struct SwigluClampFn {
    double limit;
    float limit_f;
    bool limit_is_float;  // a float > 0: the fp32 float-float path clamps exactly like vec
    SiluFn silu;
    explicit SwigluClampFn(const Params& p)
        : limit(p.get("limit", 10)),
          limit_f(static_cast<float>(limit)),
          limit_is_float(limit_f == limit && limit > 0),
          silu(p) {}
    double scalar(double g, double u) const {
        return silu.scalar(std::min(g, limit)) * std::clamp(u, -limit, limit);
    }
    CONFORM_AVX2 __m256d vec(__m256d g, __m256d u) const {
        const __m256d l = _mm256_set1_pd(limit);
        __m256d uc = _mm256_min_pd(_mm256_max_pd(u, _mm256_sub_pd(_mm256_setzero_pd(), l)), l);
        return _mm256_mul_pd(silu.vec(_mm256_min_pd(g, l)), uc);
    }
    CONFORM_AVX2 bool float_ok(__m256 g) const { return gate_in_float_range(g, SiluFn::kFloatGateMin); }
    CONFORM_AVX2 __m256 gate_f(__m256 g) const { return silu.vecf(_mm256_min_ps(g, _mm256_set1_ps(limit_f))); }
    CONFORM_AVX2 __m256 up_f(__m256 u) const {
        const __m256 l = _mm256_set1_ps(limit_f);
        return _mm256_min_ps(_mm256_max_ps(u, _mm256_sub_ps(_mm256_setzero_ps(), l)), l);
    }
    CONFORM_AVX2 __m256 vecf(__m256 g, __m256 u) const { return _mm256_mul_ps(gate_f(g), up_f(u)); }
    // fp32 float-float path: the capped gate within vff's range (a NaN gate
    // passes as the cap, and the driver's NaN policy makes the result NaN).
    CONFORM_AVX2 bool fp32_ok(__m256 g) const {
        return limit_is_float && silu_ff_gate_ok(_mm256_min_ps(g, _mm256_set1_ps(limit_f)));
    }
    CONFORM_AVX2 __m256 vec32(__m256 g, __m256 u) const {
        const __m256 gc = _mm256_min_ps(g, _mm256_set1_ps(limit_f));
        return times_ff_l<F8>(silu_ff_l<F8>(gc), gc, up_f(u));
    }
    // The same 16 lanes at a time (AVX-512; vminps/vmaxps at either width
    // return the second operand for a NaN, so the same bits).
    CONFORM_AVX512 bool fp32_ok16(__m512 g) const {
        return limit_is_float && silu_ff_gate_ok(_mm512_maskz_min_ps(0xFFFF, g, _mm512_set1_ps(limit_f)));
    }
    CONFORM_AVX512 __m512 vec32_16(__m512 g, __m512 u) const {
        const __m512 l = _mm512_set1_ps(limit_f);
        const __m512 gc = _mm512_maskz_min_ps(0xFFFF, g, l);
        const __m512 uc = _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, u, _mm512_sub_ps(_mm512_setzero_ps(), l)), l);
        return times_ff_l<F16>(silu_ff_l<F16>(gc), gc, uc);
    }
};

// Naive baselines: every intermediate rounded to the storage format.
struct NaiveSwiglu {
    NaiveMath m;
    NaiveSwiglu(const Params&, Format f) : m{f} {}
    double scalar(double g, double u) const { return m.r(m.silu(g) * u); }
};
struct NaiveGeglu {
    NaiveMath m;
    NaiveGeglu(const Params&, Format f) : m{f} {}
    double scalar(double g, double u) const { return m.r(m.gelu_erf(g) * u); }
};
struct NaiveSituGlu {
    NaiveMath m;
    double beta1, beta2;
    NaiveSituGlu(const Params& p, Format f) : m{f}, beta1(p.get("beta1", 4)), beta2(p.get("beta2", 25)) {}
    double scalar(double g, double u) const {
        const double gate = m.r(m.softcap(g, beta1) * m.sigmoid(g));
        return m.r(gate * m.softcap(u, beta2));
    }
};
struct NaiveSwigluClamp {
    NaiveMath m;
    double limit;
    NaiveSwigluClamp(const Params& p, Format f) : m{f}, limit(p.get("limit", 10)) {}
    double scalar(double g, double u) const {
        const double l = m.r(limit);
        return m.r(m.silu(std::min(g, l)) * std::clamp(u, -l, l));
    }
};

}  // namespace

void register_cpu_gated(Registry& r) {
    register_op<2, GluFn<SiluFn>, NaiveSwiglu>(r, "swiglu");
    register_op<2, GluFn<GeluErfFn>, NaiveGeglu>(r, "geglu");
    register_op<2, SituGluFn, NaiveSituGlu>(r, "situ_glu");
    register_op<2, SwigluClampFn, NaiveSwigluClamp>(r, "swiglu_clamp");
}

}  // namespace conform
