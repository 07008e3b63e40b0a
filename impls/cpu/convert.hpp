// Element loads and stores between storage formats and fp32 registers, for
// the kernels.  Scalar versions are exact (widening) or correctly rounded
// (narrowing, RNE with subnormals and overflow).  The AVX2 versions are
// compiled for the avx2/fma/f16c target and must only be called after
// cpu::has_avx2(); F16C's vcvtps2ph with imm 0 rounds to nearest even, and
// the bf16 narrowing uses the same add-0x7FFF-plus-lsb rule, NaN kept quiet.
#pragma once
#include "impls/cpu/x86_intrinsics.hpp"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "numerics/format.hpp"

namespace conform::cpu {

// ---- scalar -------------------------------------------------------------

inline float bf16_to_f32(std::uint16_t h) {
    std::uint32_t b = std::uint32_t{h} << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

inline std::uint16_t f32_to_bf16(float f) {
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((b >> 16) | 0x40);  // quiet NaN
    b += 0x7FFFu + ((b >> 16) & 1);  // round to nearest, ties to even (overflow carries into Inf)
    return static_cast<std::uint16_t>(b >> 16);
}

// Portable versions (no F16C), used by the scalar path.
float f16_to_f32_portable(std::uint16_t h);
std::uint16_t f32_to_f16_portable(float f);

// Load element i of a row stored in format F as float; store likewise.
template <Format F> struct Storage;
template <> struct Storage<Format::fp32> {
    using T = float;
    static float load(const T* p, long i) { return p[i]; }
    static void store(T* p, long i, float v) { p[i] = v; }
};
template <> struct Storage<Format::fp16> {
    using T = std::uint16_t;
    static float load(const T* p, long i) { return f16_to_f32_portable(p[i]); }
    static void store(T* p, long i, float v) { p[i] = f32_to_f16_portable(v); }
};
template <> struct Storage<Format::bf16> {
    using T = std::uint16_t;
    static float load(const T* p, long i) { return bf16_to_f32(p[i]); }
    static void store(T* p, long i, float v) { p[i] = f32_to_bf16(v); }
};

// ---- AVX2 (8 lanes) -----------------------------------------------------

#define CONFORM_AVX2 __attribute__((target("avx2,fma,f16c")))
// For the few AVX-512 paths; call such a function only when cpu::has_avx512().
#define CONFORM_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

CONFORM_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
CONFORM_AVX2 inline __m256 load8(const std::uint16_t* p, Format f) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if (f == Format::fp16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
CONFORM_AVX2 inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
// 8 floats -> 8 16-bit values (RNE), in a 128-bit register.
CONFORM_AVX2 inline __m128i narrow8(__m256 v, Format f) {
    __m128i h;
    if (f == Format::fp16) {
        h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    } else {
        __m256i b = _mm256_castps_si256(v);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
        __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        __m256i q = _mm256_or_si256(b, _mm256_set1_epi32(0x00400000));  // quiet NaN, keep sign/payload
        r = _mm256_blendv_epi8(r, q, nan);
        r = _mm256_srli_epi32(r, 16);
        // pack 8 x u32 (< 2^16) to 8 x u16 without saturation surprises
        __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
        h = _mm_packus_epi32(lo, hi);
    }
    return h;
}
// The bf16 rounding above in one instruction where the CPU has AVX512_BF16
// (call only when cpu::has_avx512_bf16()).  vcvtneps2bf16 rounds to nearest
// even and quiets NaNs exactly as narrow8 does (bits 31..16 of the float,
// quiet bit set), but treats float subnormal inputs as zero: a block with a
// subnormal lane takes narrow8.  Bit-identical to narrow8(v, bf16) for every
// input (tests/avx512_test.cpp checks every float exponent and the NaNs).
#define CONFORM_AVX512_BF16 \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
CONFORM_AVX512_BF16 inline __m128i narrow8_bf16(__m256 v) {
    if (_mm256_fpclass_ps_mask(v, 0x20) != 0) [[unlikely]]  // 0x20: denormal
        return narrow8(v, Format::bf16);
    return reinterpret_cast<__m128i>(_mm256_cvtneps_pbh(v));
}
// store8 / stream8_as (streaming.hpp) for bf16 with narrow8_bf16.
CONFORM_AVX512_BF16 inline void store8_bf16(std::uint16_t* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), narrow8_bf16(v));
}
CONFORM_AVX512_BF16 inline void stream8_bf16(std::uint16_t* p, __m256 v) {  // p 16-byte aligned
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), narrow8_bf16(v));
}

// narrow8 16 lanes at a time (AVX-512): the same instructions per lane
// (vcvtps2ph with the same rounding; bf16 by the same integer rounding and
// NaN quieting), so the same bits.
CONFORM_AVX512 inline __m256i narrow16(__m512 v, Format f) {
    if (f == Format::fp16) return _mm512_maskz_cvtps_ph(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT);
    const __m512i b = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(0xFFFF, b, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i q = _mm512_or_si512(b, _mm512_set1_epi32(0x00400000));
    return _mm512_maskz_cvtepi32_epi16(0xFFFF, _mm512_maskz_srli_epi32(0xFFFF, _mm512_mask_blend_epi32(nan, r, q), 16));
}
// 16 16-bit values -> 16 floats, as load8 on each half.
CONFORM_AVX512 inline __m512 widen16(__m256i h, Format f) {
    if (f == Format::fp16) return _mm512_maskz_cvtph_ps(0xFFFF, h);
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
}

// Lanes 0-7 and 8-15 of a 16-lane vector.  Zero-masked extracts with
// all-ones masks: the plain cast and extract draw false GCC 12 warnings.
CONFORM_AVX512 inline __m256 lo8(__m512 v) { return _mm512_maskz_extractf32x8_ps(0xFF, v, 0); }
CONFORM_AVX512 inline __m256 hi8(__m512 v) { return _mm512_maskz_extractf32x8_ps(0xFF, v, 1); }
// [lo | hi] as one 16-lane vector (zero-masked inserts, as concat256 below).
CONFORM_AVX512 inline __m512 join16(__m256 lo, __m256 hi) {
    return _mm512_maskz_insertf32x8(0xFFFF, _mm512_maskz_insertf32x8(0xFFFF, _mm512_setzero_ps(), lo, 0), hi, 1);
}

// narrow8_bf16 16 lanes at a time: the same bits as narrow16(v, bf16).
CONFORM_AVX512_BF16 inline __m256i narrow16_bf16(__m512 v) {
    if (_mm512_fpclass_ps_mask(v, 0x20) != 0) [[unlikely]]
        return narrow16(v, Format::bf16);
    return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
}

// [lo | hi] as one vector (zero-masked inserts: the plain forms draw false
// GCC 12 warnings, as the extracts above).
CONFORM_AVX512 inline __m512i concat256(__m256i lo, __m256i hi) {
    return _mm512_maskz_inserti64x4(0xFF, _mm512_maskz_inserti64x4(0xFF, _mm512_setzero_si512(), lo, 0), hi, 1);
}

// narrow16_bf16 of a (words 0-15) and of b (words 16-31) in one vector, by
// one vcvtne2ps2bf16 (same rounding as vcvtneps2bf16; a pair holding a
// subnormal takes narrow16).
CONFORM_AVX512_BF16 inline __m512i narrow32_bf16(__m512 a, __m512 b) {
    if (_kortestz_mask16_u8(_mm512_fpclass_ps_mask(a, 0x20), _mm512_fpclass_ps_mask(b, 0x20)) == 0) [[unlikely]]
        return concat256(narrow16(a, Format::bf16), narrow16(b, Format::bf16));
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
}

CONFORM_AVX2 inline void store8(std::uint16_t* p, __m256 v, Format f) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), narrow8(v, f));
}

// The same, dispatched on the storage format at compile time.
template <Format F>
using storage_t = std::conditional_t<F == Format::fp32, float, std::uint16_t>;
template <Format F>
CONFORM_AVX2 inline __m256 load8_as(const storage_t<F>* p) {
    if constexpr (F == Format::fp32) return load8(p);
    else return load8(p, F);
}
template <Format F>
CONFORM_AVX2 inline void store8_as(storage_t<F>* p, __m256 v) {
    if constexpr (F == Format::fp32) store8(p, v);
    else store8(p, v, F);
}
// 16 elements stored in format F as floats (exact), AVX-512.
template <Format F>
CONFORM_AVX512 inline __m512 load16_as(const storage_t<F>* p) {
    if constexpr (F == Format::fp32) return _mm512_loadu_ps(p);
    else return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), F);
}

}  // namespace conform::cpu
