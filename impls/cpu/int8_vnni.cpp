// The INT8 GEMM's VNNI paths (docs/int8.md "Kernels"): vpdpbusd on 512-bit
// vectors (AVX-512 VNNI, 4 rows x 96 columns per register tile) and on
// 256-bit vectors (AVX-VNNI, the VEX form on AVX2-only CPUs that have it:
// 6 x 16 in its 16 registers).  One body (int8_vnni_body.inc) is compiled
// twice, each copy inside its own `#pragma GCC target` region and namespace,
// so that neither instruction set leaks into code the other CPU runs; the
// buffers are allocated here, outside both regions.
#include "impls/cpu/x86_intrinsics.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "impls/cpu/int8_gemm.hpp"
#include "impls/cpu/int8_pack.hpp"
#include "impls/cpu/isa.hpp"
#include "impls/cpu/scratch.hpp"

namespace conform::cpu {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
namespace vnni512 {
using V = __m512i;
constexpr int L = 16, NR = 6, MR = 4;  // 24 accumulators + 6 b vectors + 1 broadcast of 32 registers
inline V zero() { return _mm512_setzero_si512(); }
inline V set1(std::int32_t x) { return _mm512_set1_epi32(x); }
inline V load(const void* p) { return _mm512_loadu_si512(p); }
inline void store(void* p, V v) { _mm512_storeu_si512(p, v); }
inline V load_cols(const std::int32_t* p, std::int64_t cols) {
    return _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << cols) - 1), p);
}
inline void store_cols(std::int32_t* p, V v, std::int64_t cols) {
    _mm512_mask_storeu_epi32(p, static_cast<__mmask16>((1u << cols) - 1), v);
}
inline V dot(V c, V u8, V s8) { return _mm512_dpbusd_epi32(c, u8, s8); }
// c + u8 times the quad at p in every lane.  A vpbroadcastd shared by the
// row's NR products: the embedded {1to16} form, one load per product, made
// the tile load-bound (628 against 755 GOP/s in L1 on Zen 5).
inline V dot_bcast(V c, V u8, const std::int8_t* p) {
    std::int32_t x;
    std::memcpy(&x, p, 4);
    return dot(c, u8, _mm512_set1_epi32(x));
}
// Four rows x 64 columns (src, row stride n) to the quads of the first
// `groups` of their four 16-column groups, shifted to u8, at out(c + 16 g):
// byte and word unpacks interleave the rows within each 128-bit lane (lane l
// of x_j: the quads of columns 16l + 4j .. 16l + 4j + 3), then a 4 x 4
// transpose of 128-bit lanes gathers group l.
constexpr std::int64_t kPackCols = 64;
template <class Out>
inline void pack_columns(const std::int8_t* src, std::int64_t n, Out out, std::int64_t c, std::int64_t groups) {
    const V r0 = load(src), r1 = load(src + n), r2 = load(src + 2 * n), r3 = load(src + 3 * n);
    const V lo01 = _mm512_unpacklo_epi8(r0, r1), hi01 = _mm512_unpackhi_epi8(r0, r1);
    const V lo23 = _mm512_unpacklo_epi8(r2, r3), hi23 = _mm512_unpackhi_epi8(r2, r3);
    const V x0 = _mm512_unpacklo_epi16(lo01, lo23), x1 = _mm512_unpackhi_epi16(lo01, lo23);
    const V x2 = _mm512_unpacklo_epi16(hi01, hi23), x3 = _mm512_unpackhi_epi16(hi01, hi23);
    const V t0 = _mm512_shuffle_i64x2(x0, x1, 0x44), t1 = _mm512_shuffle_i64x2(x2, x3, 0x44);
    const V t2 = _mm512_shuffle_i64x2(x0, x1, 0xEE), t3 = _mm512_shuffle_i64x2(x2, x3, 0xEE);
    const V flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const V g[4] = {_mm512_shuffle_i64x2(t0, t1, 0x88), _mm512_shuffle_i64x2(t0, t1, 0xDD),
                    _mm512_shuffle_i64x2(t2, t3, 0x88), _mm512_shuffle_i64x2(t2, t3, 0xDD)};
    for (std::int64_t j = 0; j < groups; ++j) store(out(c + 16 * j), _mm512_xor_si512(g[j], flip));
}
#include "impls/cpu/int8_vnni_body.inc"
}  // namespace vnni512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,avxvnni")
namespace vnni256 {
using V = __m256i;
constexpr int L = 8, NR = 2, MR = 6;  // 12 accumulators + 2 b vectors + 1 broadcast of 16 registers
inline V zero() { return _mm256_setzero_si256(); }
inline V set1(std::int32_t x) { return _mm256_set1_epi32(x); }
inline V load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void store(void* p, V v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
inline V load_cols(const std::int32_t* p, std::int64_t cols) {
    alignas(32) std::int32_t lanes[L] = {};
    std::memcpy(lanes, p, static_cast<std::size_t>(cols) * 4);
    return load(lanes);
}
inline void store_cols(std::int32_t* p, V v, std::int64_t cols) {
    alignas(32) std::int32_t lanes[L];
    store(lanes, v);
    std::memcpy(p, lanes, static_cast<std::size_t>(cols) * 4);
}
inline V dot(V c, V u8, V s8) { return _mm256_dpbusd_avx_epi32(c, u8, s8); }
inline V dot_bcast(V c, V u8, const std::int8_t* p) {  // VEX has no embedded broadcast: the compiler shares one
    std::int32_t x;
    std::memcpy(&x, p, 4);
    return dot(c, u8, _mm256_set1_epi32(x));
}
// Four rows x 16 columns to their quads, shifted to u8 (`groups` is
// always 1 here).
constexpr std::int64_t kPackCols = 16;
template <class Out>
inline void pack_columns(const std::int8_t* src, std::int64_t n, Out out, std::int64_t c, std::int64_t /*groups*/) {
    pack16(src, n, out(c), 0x80);
}
#include "impls/cpu/int8_vnni_body.inc"
}  // namespace vnni256
#pragma GCC pop_options

// a with rows padded to whole quads (zeros past K) when K is not a multiple
// of 4; a itself otherwise.
struct QuadRows {
    const std::int8_t* data;
    std::int64_t lda;
    std::vector<std::int8_t> copy;
    QuadRows(const std::int8_t* a, std::int64_t m, std::int64_t k) : data(a), lda(k) {
        if (k % 4 == 0) return;
        lda = (k + 3) / 4 * 4;
        copy.assign(static_cast<std::size_t>(m * lda), 0);
        for (std::int64_t i = 0; i < m; ++i) std::copy(a + i * k, a + i * k + k, copy.data() + i * lda);
        data = copy.data();
    }
};

template <class Body>
void run_vnni(Body body, std::int64_t nc, std::int64_t kc_quads, const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m,
              std::int64_t k, std::int64_t n) {
    const QuadRows rows(a, m, k);
    thread_local std::vector<std::uint8_t> bp;
    thread_local std::vector<std::int32_t> rs;
    const std::int64_t np = (n + nc - 1) / nc * nc;
    body(rows.data, rows.lda, b, acc, m, k, n, grown(bp, std::min(kc_quads, (k + 3) / 4 + 1) * 4 * np), grown(rs, m));
}

}  // namespace

void int8_matmul_vnni512(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                         std::int64_t n) {
    run_vnni(vnni512::matmul, vnni512::NC, vnni512::kKcQuads, a, b, acc, m, k, n);
}

void int8_matmul_vnni256(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                         std::int64_t n) {
    run_vnni(vnni256::matmul, vnni256::NC, vnni256::kKcQuads, a, b, acc, m, k, n);
}

}  // namespace conform::cpu
