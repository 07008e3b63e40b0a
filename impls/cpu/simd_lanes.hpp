// Lane types for code written once over the vector width: F8 (AVX2, 8
// lanes of __m256) and F16 (AVX-512, 16 lanes of __m512) for float, D4
// (AVX2, __m256d) and D8 (AVX-512, __m512d) for double.  Each operation
// is one instruction of the same IEEE operation at either width, so a
// function template over L computes the same bits in every lane whichever L
// it runs on; the one exception, the reciprocal estimate (rcpps is not
// specified to the bit), is made identical by F16 running rcpps on its two
// halves.
//
// Such templates carry no target attribute: they are [[gnu::always_inline]]
// (CONFORM_LANES), so they are compiled inside their caller, which has the
// target attribute of its L (CONFORM_AVX2 or CONFORM_AVX512).  GCC warns
// (-Wpsabi) that a vector return "changes the ABI" of such a template; it is
// never called out of line, so impls/ builds with -Wno-psabi.  Some F16
// operations use the zero-masked intrinsic with an all-ones mask (the same
// instruction and result): GCC 12 warns of "uninitialized" values inside the
// unmasked ones (its _mm512_undefined_*; fixed in GCC 13).
#pragma once
#include "impls/cpu/x86_intrinsics.hpp"

#include <cstdint>

#include "impls/cpu/convert.hpp"  // CONFORM_AVX2, CONFORM_AVX512

#define CONFORM_LANES [[gnu::always_inline]] inline

namespace conform::cpu {

// The operations that are the same-named intrinsic at either width (MM is
// _mm256 or _mm512; SFX ps for float lanes, pd for double lanes, T the
// scalar); andnot(a, b) = ~a & b.
#define CONFORM_SAME_NAMED_OPS(TARGET, MM, SFX, T)                                  \
    TARGET static R set(T v) { return MM##_set1_##SFX(v); }                           \
    TARGET static R zero() { return MM##_setzero_##SFX(); }                           \
    TARGET static R add(R a, R b) { return MM##_add_##SFX(a, b); }                    \
    TARGET static R sub(R a, R b) { return MM##_sub_##SFX(a, b); }                    \
    TARGET static R mul(R a, R b) { return MM##_mul_##SFX(a, b); }                    \
    TARGET static R div(R a, R b) { return MM##_div_##SFX(a, b); }                    \
    TARGET static R fmadd(R a, R b, R c) { return MM##_fmadd_##SFX(a, b, c); }        \
    TARGET static R fnmadd(R a, R b, R c) { return MM##_fnmadd_##SFX(a, b, c); }      \
    TARGET static R fmsub(R a, R b, R c) { return MM##_fmsub_##SFX(a, b, c); }        \
    TARGET static R fnmsub(R a, R b, R c) { return MM##_fnmsub_##SFX(a, b, c); }      \
    TARGET static R or_(R a, R b) { return MM##_or_##SFX(a, b); }                     \
    TARGET static R and_(R a, R b) { return MM##_and_##SFX(a, b); }                   \
    TARGET static R xor_(R a, R b) { return MM##_xor_##SFX(a, b); }                   \
    TARGET static R andnot(R a, R b) { return MM##_andnot_##SFX(a, b); }

struct F8 {
    using R = __m256;
    static constexpr int kWidth = 8;
    CONFORM_SAME_NAMED_OPS(CONFORM_AVX2, _mm256, ps, float)
    // Lanes of `sel` with the sign bit set take b, the others a.
    CONFORM_AVX2 static R blend_sign(R a, R b, R sel) { return _mm256_blendv_ps(a, b, sel); }
    CONFORM_AVX2 static R max(R a, R b) { return _mm256_max_ps(a, b); }
    CONFORM_AVX2 static R rcp(R a) { return _mm256_rcp_ps(a); }
    // All ones in the lanes where a >= b (ordered), zeros elsewhere.
    CONFORM_AVX2 static R ge_mask(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
    // 2^k from s = shifter + k (k in the low bits of s's encoding, |k| < 127).
    CONFORM_AVX2 static R pow2_shifted(R s) {
        const __m256i k = _mm256_add_epi32(_mm256_castps_si256(s), _mm256_set1_epi32(127));
        return _mm256_castsi256_ps(_mm256_slli_epi32(k, 23));
    }
    // x rounded to the nearest integer, ties to even (x's format).
    CONFORM_AVX2 static R round_even(R x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    // 2^(k + bias) for integer-valued k with k + bias + 127 in [1, 254].
    CONFORM_AVX2 static R pow2(R k, int bias) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127 + bias)), 23));
    }
    // Every lane has |x| <= limit (false for NaN).
    CONFORM_AVX2 static bool all_abs_le(R x, float limit) {
        const R ok = _mm256_cmp_ps(_mm256_or_ps(x, set(-0.0f)), set(-limit), _CMP_GE_OQ);
        return _mm256_movemask_ps(ok) == 0xFF;
    }
};

struct F16 {
    using R = __m512;
    static constexpr int kWidth = 16;
    CONFORM_SAME_NAMED_OPS(CONFORM_AVX512, _mm512, ps, float)
    CONFORM_AVX512 static R blend_sign(R a, R b, R sel) {
        return _mm512_mask_blend_ps(_mm512_movepi32_mask(_mm512_castps_si512(sel)), a, b);
    }
    // rcpps on each half: the very bits F8::rcp gives (vrcp14ps differs).
    CONFORM_AVX512 static R rcp(R a) {
        const __m256 lo = _mm256_rcp_ps(lo8(a));
        const __m256 hi = _mm256_rcp_ps(hi8(a));
        return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    }
    CONFORM_AVX512 static R max(R a, R b) { return _mm512_maskz_max_ps(0xFFFF, a, b); }
    CONFORM_AVX512 static R ge_mask(R a, R b) {
        return _mm512_castsi512_ps(_mm512_movm_epi32(_mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)));
    }
    CONFORM_AVX512 static R pow2_shifted(R s) {
        const __m512i k = _mm512_add_epi32(_mm512_castps_si512(s), _mm512_set1_epi32(127));
        return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, k, 23));
    }
    CONFORM_AVX512 static R round_even(R x) {
        return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    CONFORM_AVX512 static R pow2(R k, int bias) {
        const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127 + bias));
        return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, e, 23));
    }
};

// Double lane types for the double path (simd_math.hpp, namespace vm): D4
// (AVX2, 4 lanes of __m256d) and D8 (AVX-512, 8 lanes of __m512d), each
// operation the same IEEE operation at either width.
struct D4 {
    using R = __m256d;
    static constexpr int kWidth = 4;
    CONFORM_SAME_NAMED_OPS(CONFORM_AVX2, _mm256, pd, double)
    CONFORM_AVX2 static void storeu(double* p, R v) { _mm256_storeu_pd(p, v); }
    // kWidth int32 or floats, widened exactly.
    CONFORM_AVX2 static R from_i32(const std::int32_t* p) {
        return _mm256_cvtepi32_pd(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    CONFORM_AVX2 static R from_f32(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
    // Rounded to float (vcvtpd2ps, the MXCSR's rounding), NaN lanes as `nan`.
    CONFORM_AVX2 static void store_f32(float* p, R v, float nan) {
        const __m128 t = _mm256_cvtpd_ps(v);
        _mm_storeu_ps(p, _mm_blendv_ps(t, _mm_set1_ps(nan), _mm_cmpunord_ps(t, t)));
    }
    CONFORM_AVX2 static R min(R a, R b) { return _mm256_min_pd(a, b); }
    CONFORM_AVX2 static R max(R a, R b) { return _mm256_max_pd(a, b); }
    // Lanes of `sel` with the sign bit set take b, the others a.
    CONFORM_AVX2 static R blend_sign(R a, R b, R sel) { return _mm256_blendv_pd(a, b, sel); }
    // 2^(k + bias) from s = shifter + k (k in the low bits of s's encoding).
    CONFORM_AVX2 static R pow2_shifted(R s, int bias) {
        const __m256i b = _mm256_add_epi64(_mm256_castpd_si256(s), _mm256_set1_epi64x(1023 + bias));
        return _mm256_castsi256_pd(_mm256_slli_epi64(b, 52));
    }
};

struct D8 {
    using R = __m512d;
    static constexpr int kWidth = 8;
    CONFORM_SAME_NAMED_OPS(CONFORM_AVX512, _mm512, pd, double)
    CONFORM_AVX512 static void storeu(double* p, R v) { _mm512_storeu_pd(p, v); }
    CONFORM_AVX512 static R from_i32(const std::int32_t* p) {
        return _mm512_cvtepi32_pd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    CONFORM_AVX512 static R from_f32(const float* p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
    CONFORM_AVX512 static void store_f32(float* p, R v, float nan) {
        const __m256 t = _mm512_cvtpd_ps(v);
        _mm256_storeu_ps(p, _mm256_blendv_ps(t, _mm256_set1_ps(nan), _mm256_cmp_ps(t, t, _CMP_UNORD_Q)));
    }
    CONFORM_AVX512 static R min(R a, R b) { return _mm512_maskz_min_pd(0xFF, a, b); }
    CONFORM_AVX512 static R max(R a, R b) { return _mm512_maskz_max_pd(0xFF, a, b); }
    CONFORM_AVX512 static R blend_sign(R a, R b, R sel) {
        return _mm512_mask_blend_pd(_mm512_movepi64_mask(_mm512_castpd_si512(sel)), a, b);
    }
    CONFORM_AVX512 static R pow2_shifted(R s, int bias) {
        const __m512i b = _mm512_add_epi64(_mm512_castpd_si512(s), _mm512_set1_epi64(1023 + bias));
        return _mm512_castsi512_pd(_mm512_maskz_slli_epi64(0xFF, b, 52));
    }
};


#undef CONFORM_SAME_NAMED_OPS

}  // namespace conform::cpu
