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
// except at fp32's overflow threshold T = 2^128 (1 - 2^-25), where FLT_MAX
// and +inf are different classes.  Both that case and the underflow case
// show in the rounded output (>= FLT_MAX in magnitude, +-inf, or NaN without
// a NaN input), so kScalarAtExtremes has the driver recompute such blocks
// by the scalar path (elementwise.hpp), never ordinary ones.
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
    // fp32, geglu only, 16 lanes (AVX-512; docs/gated.md §4): g u (h + l)
    // with g u = ph + pl exactly and h + l = Phi(g) from vff::phi16, rounded
    // once; the sign of g u is set explicitly (a zero product keeps it).
    // Lanes: |g| < 3.9, and |g u| >= 2^-100 or g u = 0 (below 2^-100 the
    // product's error term pl is no longer exact).  The driver sends other
    // lanes, and results >= FLT_MAX in magnitude or NaN, to vec8.
    CONFORM_AVX512 __mmask16 ok16(__m512 g, __m512 u) const
        requires std::same_as<Act, GeluErfFn>
    {
        const __m512 a = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), _mm512_mul_ps(g, u));
        const __mmask16 prod = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p-100f), _CMP_GE_OQ) |
                               _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_EQ_OQ);
        return vff::gelu_erf16_ok(g) & prod;
    }
    CONFORM_AVX512 __m512 lanes16(__m512 g, __m512 u) const
        requires std::same_as<Act, GeluErfFn>
    {
        using L = F16;
        const vff::FFT<__m512> f = vff::phi16(g);
        const __m512 ph = L::mul(g, u), pl = L::fmsub(g, u, ph);
        const __m512 y = L::fmadd(ph, f.hi, L::fmadd(ph, f.lo, L::mul(pl, f.hi)));
        const __m512 sign = L::set(-0.0f);
        return L::or_(L::andnot(sign, y), L::and_(L::xor_(g, u), sign));
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
struct SituGluFn {
    SoftcapFn cap1, cap2;
    SigmoidFn sig;
    double beta12;
    explicit SituGluFn(const Params& p)
        : cap1(p.get("beta1", 4)), cap2(p.get("beta2", 25)), sig(p), beta12(cap1.beta * cap2.beta) {}
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
    CONFORM_AVX2 bool float_ok(__m256 g) const { return gate_in_float_range(g, SigmoidFn::kFloatGateMin); }
    static constexpr bool kTabulateUp = true;  // the up factor is a softcap, worth a table
    CONFORM_AVX2 __m256 gate_f(__m256 g) const { return _mm256_mul_ps(cap1.vecf(g), sig.vecf(g)); }
    CONFORM_AVX2 __m256 up_f(__m256 u) const { return cap2.vecf(u); }
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
