// Packing of the INT8 GEMM's b into the quad layout of vpdpbusd and tdpbssd
// (impls/cpu/int8_vnni.cpp, int8_amx.cpp): row q of a panel holds, for each
// of its columns, the four bytes b[4q .. 4q + 3][column].  SSE2 only (the
// x86-64 baseline), so any target region may inline it.
#pragma once
#include <emmintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace conform::cpu {

// Four rows (src, row stride n) x 16 columns to their 16 quads at dst (64
// bytes), each byte XOR `flip` (0x80: the u8 shift of vpdpbusd's b; 0: none).
inline void pack16(const std::int8_t* src, std::int64_t n, std::uint8_t* dst, std::uint8_t flip) {
    const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + n));
    const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * n));
    const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 3 * n));
    const __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
    const __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
    const __m128i f = _mm_set1_epi8(static_cast<char>(flip));
    __m128i* d = reinterpret_cast<__m128i*>(dst);
    _mm_storeu_si128(d + 0, _mm_xor_si128(_mm_unpacklo_epi16(lo01, lo23), f));
    _mm_storeu_si128(d + 1, _mm_xor_si128(_mm_unpackhi_epi16(lo01, lo23), f));
    _mm_storeu_si128(d + 2, _mm_xor_si128(_mm_unpacklo_epi16(hi01, hi23), f));
    _mm_storeu_si128(d + 3, _mm_xor_si128(_mm_unpackhi_epi16(hi01, hi23), f));
}

// Quads [q0, q1) of b [k, n], columns [0, np) (np a multiple of `panel`, a
// multiple of 16), in panels of `panel` columns: panel p's quad q at
// out[(p (q1 - q0) + q - q0) panel 4].  Bytes past K or N are 0 (then XOR
// flip).  The ragged edges go through a zero-padded copy.
inline void pack_quads(const std::int8_t* b, std::int64_t k, std::int64_t n, std::int64_t q0, std::int64_t q1,
                       std::int64_t np, std::int64_t panel, std::uint8_t flip, std::uint8_t* out) {
    const std::int64_t quads = q1 - q0;
    alignas(16) std::int8_t edge[4 * 16];
    for (std::int64_t q = q0; q < q1; ++q) {
        const std::int64_t rows = std::clamp<std::int64_t>(k - 4 * q, 0, 4);
        for (std::int64_t c = 0; c < np; c += 16) {
            std::uint8_t* dst = out + ((c / panel * quads + q - q0) * panel + c % panel) * 4;
            if (rows == 4 && c + 16 <= n) {
                pack16(b + 4 * q * n + c, n, dst, flip);
                continue;
            }
            std::memset(edge, 0, sizeof edge);
            const std::int64_t width = std::clamp<std::int64_t>(n - c, 0, 16);
            for (std::int64_t t = 0; t < rows; ++t)
                std::memcpy(edge + t * 16, b + (4 * q + t) * n + c, static_cast<std::size_t>(width));
            pack16(edge, 16, dst, flip);
        }
    }
}

}  // namespace conform::cpu
