// Packing of the INT8 GEMM's b into the quad layout of vpdpbusd and tdpbssd
// (impls/cpu/int8_vnni.cpp, int8_amx.cpp): row q of a panel holds, for each
// of its columns, the four bytes b[4q .. 4q + 3][column].  SSE2 only (the
// x86-64 baseline), so any target region may inline it.
#pragma once
#include <emmintrin.h>
#include <xmmintrin.h>  // _mm_prefetch

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

// Quads [q0, q1) of b [k, n], columns [0, np) (np a multiple of `panel`,
// itself a multiple of 16), laid out panel by panel: panel p's quad q at
// out[(p (q1 - q0) + q - q0) panel 4], column c of it at + 4c, row 4q + t at
// + t.  `columns(src, stride, at, c, groups)` packs four rows x W columns
// of src (the first `groups` of their 16-column groups) to at(c),
// at(c + 16), ... (16-column groups never straddle a panel).  b is read row
// by row, four rows at a time left to right: sequential streams the hardware
// prefetchers follow, each 4 KiB row of b (N = 4096) read whole at once,
// and the next quad's four rows prefetched a quad ahead (the hardware's
// streams stop at each page's end).  The ragged edges (the last columns, a
// last quad past K) go through a zero-padded copy and take the same path:
// bytes past K or N are 0 before the packer's shift.  Always inlined, so
// that `columns` inlines into the caller's target region.
template <std::int64_t W, class Columns>
[[gnu::always_inline]] inline void pack_quads(const std::int8_t* b, std::int64_t k, std::int64_t n, std::int64_t q0,
                                              std::int64_t q1, std::int64_t np, std::int64_t panel, std::uint8_t* out,
                                              Columns columns) {
    const std::int64_t quads = q1 - q0;
    alignas(64) std::int8_t edge[4 * W];
    for (std::int64_t q = q0; q < q1; ++q) {
        std::uint8_t* row = out + (q - q0) * panel * 4;
        auto at = [&](std::int64_t c) { return row + (c / panel * quads * panel + c % panel) * 4; };
        const std::int64_t rows = std::clamp<std::int64_t>(k - 4 * q, 0, 4);
        const std::int8_t* next = 4 * q + 8 <= k ? b + (4 * q + 4) * n : nullptr;
        std::int64_t c = 0;
        if (rows == 4)
            for (; c + W <= n; c += W) {
                if (next)
                    for (std::int64_t t = 0; t < 4; ++t) _mm_prefetch(reinterpret_cast<const char*>(next + t * n + c), _MM_HINT_T0);
                columns(b + 4 * q * n + c, n, at, c, W / 16);
            }
        for (; c < np; c += W) {
            std::memset(edge, 0, sizeof edge);
            const std::int64_t width = std::clamp<std::int64_t>(n - c, 0, W);
            for (std::int64_t t = 0; t < rows; ++t)
                std::memcpy(edge + t * W, b + (4 * q + t) * n + c, static_cast<std::size_t>(width));
            columns(edge, W, at, c, std::min(W, np - c) / 16);  // 16 | np - c
        }
    }
}

}  // namespace conform::cpu
