// FP8 quantization kernels (docs/fp8.md "Kernels"): per block the amax, the
// FP32 scale, then q = RN_fp8(x / s) by an FP32 division whose rounding is
// corrected where it lands on an FP8 midpoint (the residual x - q s, exact
// by an FMA, says on which side the true quotient lies).
#include "impls/cpu/fp8.hpp"

#include "impls/cpu/x86_intrinsics.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/convert.hpp"
#include "impls/cpu/isa.hpp"
#include "numerics/fp8.hpp"

namespace conform::cpu {

Fp8Codec fp8_codec(Format f) {
    if (f == Format::fp8_e4m3) return fp8::kE4m3;
    if (f == Format::fp8_e5m2) return fp8::kE5m2;
    throw std::invalid_argument(std::string("not an FP8 format: ") + name(f));
}

namespace {

struct Block {
    std::int64_t r0, r1, c0, c1;
};

// The kernel's own scale (not the oracle's formula): one FP32 division;
// the power of two from amax's exponent, one exact comparison deciding
// between the two candidates 2^(e - emax) and 2^(e - emax + 1).
float block_scale(float amax, bool nonfinite, const Fp8QuantParams& qp) {
    if (qp.static_scale > 0) return static_cast<float>(qp.static_scale);
    if (nonfinite) return NAN;
    const float fmax = static_cast<float>(max_finite(qp.format)), floor = 0x1p-126f;
    if (!qp.pow2) return std::max(amax / fmax, floor);
    if (amax == 0) return floor;
    const int e = std::ilogb(amax), emax = std::ilogb(fmax);
    double s = std::ldexp(1.0, e - emax);
    if (static_cast<double>(amax) > static_cast<double>(fmax) * s) s *= 2;
    return static_cast<float>(std::max(s, 0x1p-126));
}

using fp8::kBigX, fp8::kLift, fp8::kTinyScale;

std::uint8_t quantize_one(float x, float s, const Fp8Codec& c, bool saturate, const Fp8Flaws& f) {
    if (f.reciprocal) return fp8_from_float(x * (1.0f / s), 0, c, saturate);
    if (!f.truncate && !f.overflow_nan) return fp8::quantize(x, s, c, saturate);
    fp8::lift(x, s);
    const float q = x / s;
    return fp8_from_float(q, f.truncate ? 0 : fp8::residual_dir(x, s, q), c, saturate && !f.overflow_nan, f.truncate);
}

// ---- AVX2: the same arithmetic in 8 lanes ------------------------------

CONFORM_AVX2 __m256i codes8(__m256 x, __m256 s, const Fp8Codec& c, bool saturate) {
    const __m256i one = _mm256_set1_epi32(1), zero = _mm256_setzero_si256();
    // The lift of quantize_one, lane by lane (NaN and Inf lanes stay).
    const __m256 ax = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
    const __m256 lift = _mm256_and_ps(_mm256_cmp_ps(s, _mm256_set1_ps(kTinyScale), _CMP_LT_OQ),
                                      _mm256_cmp_ps(ax, _mm256_set1_ps(kBigX), _CMP_LT_OQ));
    const __m256 k = _mm256_blendv_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(kLift), lift);
    x = _mm256_mul_ps(x, k), s = _mm256_mul_ps(s, k);
    const __m256 q = _mm256_div_ps(x, s), r = _mm256_fnmadd_ps(q, s, x);
    const __m256i b = _mm256_castps_si256(q);
    // dir: 0 where the residual is 0, else +1 when it has q's sign, -1 otherwise
    const __m256i differ = _mm256_srli_epi32(_mm256_xor_si256(b, _mm256_castps_si256(r)), 31);
    __m256i dir = _mm256_sub_epi32(one, _mm256_slli_epi32(differ, 1));
    dir = _mm256_andnot_si256(_mm256_castps_si256(_mm256_cmp_ps(r, _mm256_setzero_ps(), _CMP_EQ_OQ)), dir);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(b, 24), _mm256_set1_epi32(0x80));
    const __m256i a = _mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(a, 23), _mm256_set1_epi32(127));
    const __m256i mant = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0x7FFFFF)), _mm256_set1_epi32(0x800000));
    const __m256i extra = _mm256_max_epi32(_mm256_sub_epi32(_mm256_set1_epi32(c.emin), e), zero);
    const __m256i shift = _mm256_min_epi32(_mm256_add_epi32(_mm256_set1_epi32(23 - (c.p - 1)), extra), _mm256_set1_epi32(31));
    __m256i rq = _mm256_srlv_epi32(mant, shift);
    const __m256i rem = _mm256_and_si256(mant, _mm256_sub_epi32(_mm256_sllv_epi32(one, shift), one));
    const __m256i half = _mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one));
    const __m256i odd = _mm256_cmpeq_epi32(_mm256_and_si256(rq, one), one);
    const __m256i tie_up = _mm256_or_si256(_mm256_cmpgt_epi32(dir, zero), _mm256_and_si256(_mm256_cmpeq_epi32(dir, zero), odd));
    const __m256i up = _mm256_or_si256(_mm256_cmpgt_epi32(rem, half), _mm256_and_si256(_mm256_cmpeq_epi32(rem, half), tie_up));
    rq = _mm256_sub_epi32(rq, up);  // up is all ones (-1) where it rounds up
    const __m256i normal = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(c.emin - 1));
    const __m256i field = _mm256_sllv_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(c.bias - 1)), _mm256_set1_epi32(c.p - 1));
    __m256i code = _mm256_add_epi32(rq, _mm256_and_si256(normal, field));
    const __m256i special = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F7FFFFF));  // +-Inf or NaN
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    const __m256i over = _mm256_or_si256(_mm256_cmpgt_epi32(code, _mm256_set1_epi32(static_cast<int>(c.max_code))), special);
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(static_cast<int>(saturate ? c.max_code : c.overflow_code)), over);
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(static_cast<int>(c.nan_code)), nan);
    return _mm256_or_si256(code, sign);
}

CONFORM_AVX2 __m256 load_row8(const TensorView& x, std::int64_t i, std::int64_t j) {
    if (x.format == Format::fp32) return _mm256_loadu_ps(x.row<float>(i) + j);
    return load8(x.row<std::uint16_t>(i) + j, Format::bf16);
}

float load_one(const TensorView& x, std::int64_t i, std::int64_t j) {
    return x.format == Format::fp32 ? x.row<float>(i)[j] : bf16_to_f32(x.row<std::uint16_t>(i)[j]);
}

// amax of a block and whether it holds NaN or +-Inf.
CONFORM_AVX2 float block_amax_simd(const TensorView& x, const Block& b, bool* nonfinite) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F7FFFFF);
    __m256i m = _mm256_setzero_si256(), bad = _mm256_setzero_si256();
    float tail = 0;
    bool tail_bad = false;
    for (std::int64_t i = b.r0; i < b.r1; ++i) {
        std::int64_t j = b.c0;
        for (; j + 8 <= b.c1; j += 8) {
            const __m256i a = _mm256_and_si256(_mm256_castps_si256(load_row8(x, i, j)), abs_mask);
            m = _mm256_max_epi32(m, a);  // magnitudes order like their bit patterns
            bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(a, inf));
        }
        for (; j < b.c1; ++j) {
            const float v = std::fabs(load_one(x, i, j));
            tail_bad = tail_bad || !std::isfinite(v);
            tail = std::max(tail, v);
        }
    }
    alignas(32) std::int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), m);
    float amax = tail;
    for (std::int32_t l : lanes) {
        float f;
        std::memcpy(&f, &l, 4);
        amax = std::max(amax, f);
    }
    *nonfinite = tail_bad || !_mm256_testz_si256(bad, bad);
    return amax;
}

float block_amax_scalar(const TensorView& x, const Block& b, bool* nonfinite) {
    float amax = 0;
    *nonfinite = false;
    for (std::int64_t i = b.r0; i < b.r1; ++i)
        for (std::int64_t j = b.c0; j < b.c1; ++j) {
            const float v = std::fabs(load_one(x, i, j));
            *nonfinite = *nonfinite || !std::isfinite(v);
            amax = std::max(amax, v);
        }
    return amax;
}

CONFORM_AVX2 void codes_simd(const TensorView& x, const TensorView& q, const Block& b, float s, const Fp8Codec& c,
                             bool saturate) {
    const __m256 sv = _mm256_set1_ps(s);
    alignas(32) std::int32_t lanes[8];
    for (std::int64_t i = b.r0; i < b.r1; ++i) {
        std::uint8_t* out = q.row<std::uint8_t>(i);
        std::int64_t j = b.c0;
        for (; j + 8 <= b.c1; j += 8) {
            _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), codes8(load_row8(x, i, j), sv, c, saturate));
            for (int l = 0; l < 8; ++l) out[j + l] = static_cast<std::uint8_t>(lanes[l]);
        }
        for (; j < b.c1; ++j) out[j] = quantize_one(load_one(x, i, j), s, c, saturate, {});
    }
}

void codes_scalar(const TensorView& x, const TensorView& q, const Block& b, float s, const Fp8Codec& c, bool saturate,
                  const Fp8Flaws& f) {
    for (std::int64_t i = b.r0; i < b.r1; ++i)
        for (std::int64_t j = b.c0; j < b.c1; ++j) q.row<std::uint8_t>(i)[j] = quantize_one(load_one(x, i, j), s, c, saturate, f);
}

bool any_flaw(const Fp8Flaws& f) { return f.overflow_nan || f.truncate || f.reciprocal; }

}  // namespace

void fp8_quantize_call(const KernelCall& call, bool simd, const Fp8Flaws& f) {
    const TensorView &x = call.in.at(0), &q = call.out.at(0), &sc = call.out.at(1);
    if (x.format != Format::fp32 && x.format != Format::bf16)
        throw std::invalid_argument(std::string("fp8_quantize: input 'x' must be fp32 or bf16, is ") + name(x.format));
    const Fp8QuantParams qp = fp8_quant_params(call.params, q.format);
    const Fp8Codec c = fp8_codec(qp.format);
    const std::int64_t rows = x.shape[0], cols = x.shape[1], sr = ceil_div(rows, qp.br), scn = ceil_div(cols, qp.bc);
    const bool lanes = simd && has_avx2() && !any_flaw(f);
    bool whole_bad = false;
    const float whole = f.per_tensor_scale ? block_amax_scalar(x, {0, rows, 0, cols}, &whole_bad) : 0;
    for (std::int64_t bi = 0; bi < sr; ++bi)
        for (std::int64_t bj = 0; bj < scn; ++bj) {
            const Block b{bi * qp.br, std::min(rows, (bi + 1) * qp.br), bj * qp.bc, std::min(cols, (bj + 1) * qp.bc)};
            bool bad = whole_bad;
            const float amax = f.per_tensor_scale ? whole : lanes ? block_amax_simd(x, b, &bad) : block_amax_scalar(x, b, &bad);
            const float s = block_scale(amax, bad, qp);
            sc.set_bits(bi * scn + bj, float_bits(s));
            if (std::isnan(s)) {
                for (std::int64_t i = b.r0; i < b.r1; ++i)
                    for (std::int64_t j = b.c0; j < b.c1; ++j) q.row<std::uint8_t>(i)[j] = static_cast<std::uint8_t>(c.nan_code);
            } else if (lanes) {
                codes_simd(x, q, b, s, c, qp.saturate);
            } else {
                codes_scalar(x, q, b, s, c, qp.saturate, f);
            }
        }
}

}  // namespace conform::cpu
