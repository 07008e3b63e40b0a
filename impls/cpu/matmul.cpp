// CPU kernels of the matrix product (docs/matmul.md, "Kernels").  A GotoBLAS
// blocking: for each block of K, B is packed into panels of NR columns; for
// each block of MC rows, A is packed into panels of MR rows; a register-tile
// micro-kernel (MR x NR FP32 accumulators) runs over every (row panel,
// column panel) pair and parks its partial sums in an FP32 scratch C, which
// is rounded once into y at the end.
#include "impls/cpu/matmul.hpp"

#include "impls/cpu/x86_intrinsics.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "impls/cpu/convert.hpp"
#include "impls/cpu/isa.hpp"
#include "impls/cpu/scratch.hpp"

namespace conform::cpu {
namespace {

constexpr std::int64_t kKc = 256;  // products per K block (dpbf16: 256 pairs)
constexpr std::int64_t kMc = 96;   // rows per A block

struct Dims {
    std::int64_t m, k, n;
};

Dims check(const KernelCall& c) {
    const TensorView &a = c.in.at(0), &b = c.in.at(1), &y = c.out.at(0);
    if (a.rank != 2 || b.rank != 2 || b.shape[0] != a.shape[1] || a.format != b.format)
        throw std::invalid_argument("matmul kernel: expects a [M, K] and b [K, N] of one format");
    if (a.strides[1] != 1 || b.strides[1] != 1 || y.strides[1] != 1)
        throw std::invalid_argument("matmul kernel: rows must be contiguous");
    return {a.shape[0], a.shape[1], b.shape[1]};
}

// The chain's order over k: ascending, or for BF16 operands with pairs
// swapped (1, 0, 3, 2, ...: vdpbf16ps's order) on every path, so that the
// bits do not depend on the path (or on whether this CPU has AVX512_BF16).
struct Order {
    std::int64_t k;
    bool swapped;
    std::int64_t at(std::int64_t p) const {
        if (!swapped) return p;
        return p % 2 ? p - 1 : (p + 1 < k ? p + 1 : p);
    }
};

Order order_of(const KernelCall& c, const Dims& d) { return {d.k, c.in[0].format == Format::bf16}; }

// One element widened to float (exact).  F16C where the caller's target has it.
template <Format F>
CONFORM_AVX2 inline float widen1(storage_t<F> v) {
    if constexpr (F == Format::fp32) return v;
    else if constexpr (F == Format::fp16) return _cvtsh_ss(v);
    else return bf16_to_f32(v);
}
template <Format F>
float widen1_portable(storage_t<F> v) {
    return Storage<F>::load(&v, 0);
}

template <Format F>
const storage_t<F>* row_of(const TensorView& t, std::int64_t r) {
    return t.row<const storage_t<F>>(r);
}

// Row i of y from c's row, rounded once into y's format.
template <Format F>
void store_row(const float* c, std::int64_t n, storage_t<F>* y) {
    for (std::int64_t j = 0; j < n; ++j) Storage<F>::store(y, j, c[j]);
}
// The same 16 lanes at a time (narrow16: the scalar rounding's bits).
template <Format F>
CONFORM_AVX512 void store_row512(const float* c, std::int64_t n, storage_t<F>* y) {
    std::int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        if constexpr (F == Format::fp32) _mm512_storeu_ps(y + j, _mm512_loadu_ps(c + j));
        else _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + j), narrow16(_mm512_loadu_ps(c + j), F));
    }
    store_row<F>(c + j, n - j, y + j);
}

// y = c (row-major, ldc) rounded once into y's format.
template <Format F>
void store_as(const float* c, std::int64_t ldc, const Dims& d, const TensorView& y) {
    for (std::int64_t i = 0; i < d.m; ++i) {
        if (has_avx512()) store_row512<F>(c + i * ldc, d.n, y.row<storage_t<F>>(i));
        else store_row<F>(c + i * ldc, d.n, y.row<storage_t<F>>(i));
    }
}
void store_output(const float* c, std::int64_t ldc, const Dims& d, const TensorView& y) {
    switch (y.format) {
        case Format::fp32: return store_as<Format::fp32>(c, ldc, d, y);
        case Format::bf16: return store_as<Format::bf16>(c, ldc, d, y);
        case Format::fp16: return store_as<Format::fp16>(c, ldc, d, y);
        default: throw std::invalid_argument("matmul kernel: y must be fp32, fp16 or bf16");
    }
}

// The scalar chain, one row of accumulators at a time.
template <Format F>
void scalar_gemm(const KernelCall& c, const Dims& d, float* acc) {
    const Order o = order_of(c, d);
    for (std::int64_t i = 0; i < d.m; ++i) {
        float* row = acc + i * d.n;
        std::fill(row, row + d.n, 0.0f);
        for (std::int64_t p = 0; p < d.k; ++p) {
            const std::int64_t q = o.at(p);
            const float a = widen1_portable<F>(row_of<F>(c.in[0], i)[q]);
            const storage_t<F>* b = row_of<F>(c.in[1], q);
            for (std::int64_t j = 0; j < d.n; ++j) row[j] = std::fma(a, widen1_portable<F>(b[j]), row[j]);
        }
    }
}

// ---- packing ---------------------------------------------------------------

template <Format F>
CONFORM_AVX512 inline __m512 load16_masked(const storage_t<F>* p, __mmask16 m) {
    if constexpr (F == Format::fp32) return _mm512_maskz_loadu_ps(m, p);
    else return widen16(_mm256_maskz_loadu_epi16(m, p), F);
}

// B rows k0 .. k0 + kc (chain order) as panels of 32 (AVX-512) or 16
// (AVX2) columns, [panel][kk][NR] floats, zero past N.
template <Format F>
CONFORM_AVX512 void pack_b_512(const TensorView& b, Order o, std::int64_t k0, std::int64_t kc, std::int64_t n, float* bp) {
    const std::int64_t full = n / 32, panels = (n + 31) / 32;
    for (std::int64_t kk = 0; kk < kc; ++kk) {
        const storage_t<F>* row = row_of<F>(b, o.at(k0 + kk));
        for (std::int64_t p = 0; p < full; ++p) {
            float* dst = bp + (p * kc + kk) * 32;
            _mm512_store_ps(dst, load16_as<F>(row + p * 32));
            _mm512_store_ps(dst + 16, load16_as<F>(row + p * 32 + 16));
        }
        for (std::int64_t jj = 0; full < panels && jj < 32; ++jj)
            bp[(full * kc + kk) * 32 + jj] = full * 32 + jj < n ? widen1<F>(row[full * 32 + jj]) : 0.0f;
    }
}

template <Format F>
CONFORM_AVX2 void pack_b_256(const TensorView& b, Order o, std::int64_t k0, std::int64_t kc, std::int64_t n, float* bp) {
    const std::int64_t full = n / 16, panels = (n + 15) / 16;
    for (std::int64_t kk = 0; kk < kc; ++kk) {
        const storage_t<F>* row = row_of<F>(b, o.at(k0 + kk));
        for (std::int64_t p = 0; p < full; ++p) {
            float* dst = bp + (p * kc + kk) * 16;
            _mm256_store_ps(dst, load8_as<F>(row + p * 16));
            _mm256_store_ps(dst + 8, load8_as<F>(row + p * 16 + 8));
        }
        for (std::int64_t jj = 0; full < panels && jj < 16; ++jj)
            bp[(full * kc + kk) * 16 + jj] = full * 16 + jj < n ? widen1<F>(row[full * 16 + jj]) : 0.0f;
    }
}

// A rows [i0, i0 + mr), chain positions [k0, k0 + kc) as [kk][mr] floats.
template <Format F>
CONFORM_AVX2 void pack_a_f32(const TensorView& a, Order o, std::int64_t i0, int mr, std::int64_t k0, std::int64_t kc, float* ap) {
    for (int r = 0; r < mr; ++r) {
        const storage_t<F>* row = row_of<F>(a, i0 + r);
        for (std::int64_t kk = 0; kk < kc; ++kk) ap[kk * mr + r] = widen1<F>(row[o.at(k0 + kk)]);
    }
}

// B pairs: [panel][kk][32] of (b[k][j] | b[k+1][j] << 16), k = k0 + 2 kk,
// 0 past K (the odd K's padding) and past N.
CONFORM_AVX512 void pack_b_pairs(const TensorView& b, std::int64_t k0, std::int64_t kc2, const Dims& d, std::uint32_t* bp) {
    const std::int64_t full = d.n / 32, panels = (d.n + 31) / 32;
    static const std::uint16_t zeros[32] = {};
    for (std::int64_t kk = 0; kk < kc2; ++kk) {
        const std::int64_t k = k0 + 2 * kk;
        const std::uint16_t* r0 = b.row<const std::uint16_t>(k);
        const std::uint16_t* r1 = k + 1 < d.k ? b.row<const std::uint16_t>(k + 1) : nullptr;
        for (std::int64_t p = 0; p < full; ++p)
            for (int h = 0; h < 2; ++h) {
                const std::int64_t j = p * 32 + h * 16;
                const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + j)));
                const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 ? r1 + j : zeros)));
                _mm512_store_si512(bp + (p * kc2 + kk) * 32 + h * 16, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
        for (std::int64_t jj = 0; full < panels && jj < 32; ++jj) {
            const std::int64_t j = full * 32 + jj;
            bp[(full * kc2 + kk) * 32 + jj] = j < d.n ? r0[j] | (r1 ? std::uint32_t{r1[j]} << 16 : 0u) : 0u;
        }
    }
}

// A pairs: [kk][mr] of (a[i][k] | a[i][k+1] << 16), k = k0 + 2 kk.
void pack_a_pairs(const TensorView& a, std::int64_t i0, int mr, std::int64_t k0, std::int64_t kc2, std::int64_t k,
                  std::uint32_t* ap) {
    for (int r = 0; r < mr; ++r) {
        const std::uint16_t* row = a.row<const std::uint16_t>(i0 + r);
        for (std::int64_t kk = 0; kk < kc2; ++kk) {
            const std::int64_t col = k0 + 2 * kk;
            ap[kk * mr + r] = row[col] | (col + 1 < k ? std::uint32_t{row[col + 1]} << 16 : 0u);
        }
    }
}

// ---- micro-kernels: an MR x (2 vectors) tile of FP32 accumulators -----------

template <int MR>
CONFORM_AVX2 void micro_fma256(const float* ap, const float* bp, std::int64_t kc, float* c, std::int64_t ldc, bool first) {
    __m256 acc[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r)
        for (int h = 0; h < 2; ++h) acc[r][h] = first ? _mm256_setzero_ps() : _mm256_load_ps(c + r * ldc + 8 * h);
    for (std::int64_t kk = 0; kk < kc; ++kk) {
        const __m256 b0 = _mm256_load_ps(bp + kk * 16), b1 = _mm256_load_ps(bp + kk * 16 + 8);
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            const __m256 a = _mm256_broadcast_ss(ap + kk * MR + r);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r)
        for (int h = 0; h < 2; ++h) _mm256_store_ps(c + r * ldc + 8 * h, acc[r][h]);
}

template <int MR>
CONFORM_AVX512 void micro_fma512(const float* ap, const float* bp, std::int64_t kc, float* c, std::int64_t ldc, bool first) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r)
        for (int h = 0; h < 2; ++h) acc[r][h] = first ? _mm512_setzero_ps() : _mm512_load_ps(c + r * ldc + 16 * h);
    for (std::int64_t kk = 0; kk < kc; ++kk) {
        const __m512 b0 = _mm512_load_ps(bp + kk * 32), b1 = _mm512_load_ps(bp + kk * 32 + 16);
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            const __m512 a = _mm512_set1_ps(ap[kk * MR + r]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r)
        for (int h = 0; h < 2; ++h) _mm512_store_ps(c + r * ldc + 16 * h, acc[r][h]);
}

// vdpbf16ps: acc += a_hi b_hi, then acc += a_lo b_lo (measured on Zen 5, as
// Intel's pseudocode), each product exact in FP32 and each addition rounded
// to nearest; subnormal inputs, accumulators and results are flushed.
template <int MR>
CONFORM_AVX512_BF16 void micro_dpbf16(const std::uint32_t* ap, const std::uint32_t* bp, std::int64_t kc2, float* c,
                                      std::int64_t ldc, bool first) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r)
        for (int h = 0; h < 2; ++h) acc[r][h] = first ? _mm512_setzero_ps() : _mm512_load_ps(c + r * ldc + 16 * h);
    for (std::int64_t kk = 0; kk < kc2; ++kk) {
        const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(bp + kk * 32));
        const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(bp + kk * 32 + 16));
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(ap[kk * MR + r])));
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r)
        for (int h = 0; h < 2; ++h) _mm512_store_ps(c + r * ldc + 16 * h, acc[r][h]);
}

// The micro-kernel for mr <= MR rows (the tail panel has fewer).
template <class T>
using Micro = void (*)(const T*, const T*, std::int64_t, float*, std::int64_t, bool);

template <class T, template <int> class Table, int... R>
Micro<T> pick(int mr, std::integer_sequence<int, R...>) {
    static constexpr Micro<T> t[] = {Table<R + 1>::f...};
    return t[mr - 1];
}
template <int MR> struct Fma256 { static constexpr auto f = micro_fma256<MR>; };
template <int MR> struct Fma512 { static constexpr auto f = micro_fma512<MR>; };
template <int MR> struct Dpbf16 { static constexpr auto f = micro_dpbf16<MR>; };

// ---- the blocked driver -------------------------------------------------------

// One path's shape: its register tile, its packed element (a float, or a
// pair of BF16 bits), products per packed element, and its micro-kernels.
struct Tile {
    int mr, nr, step;
};

template <class T, class PackA, class PackB, class MicroOf>
void blocked(const Dims& d, Tile t, float* c, std::int64_t ldc, PackA pack_a, PackB pack_b, MicroOf micro) {
    static thread_local std::vector<T, AlignedAllocator<T, 64>> a_buf, b_buf;
    const std::int64_t panels = (d.n + t.nr - 1) / t.nr;
    for (std::int64_t k0 = 0; k0 < d.k; k0 += kKc * t.step) {
        const std::int64_t kcp = (std::min(kKc * t.step, d.k - k0) + t.step - 1) / t.step;  // packed elements
        T* bp = grown(b_buf, panels * kcp * t.nr);
        pack_b(k0, kcp, bp);
        for (std::int64_t i0 = 0; i0 < d.m; i0 += kMc) {
            const std::int64_t mc = std::min(kMc, d.m - i0);
            T* ap = grown(a_buf, mc * kcp);
            for (std::int64_t q = 0; q < mc; q += t.mr)
                pack_a(i0 + q, static_cast<int>(std::min<std::int64_t>(t.mr, mc - q)), k0, kcp, ap + q * kcp);
            for (std::int64_t p = 0; p < panels; ++p)
                for (std::int64_t q = 0; q < mc; q += t.mr) {
                    const int mr = static_cast<int>(std::min<std::int64_t>(t.mr, mc - q));
                    micro(mr)(ap + q * kcp, bp + p * kcp * t.nr, kcp, c + (i0 + q) * ldc + p * t.nr, ldc, k0 == 0);
                }
        }
    }
}

template <Format F>
void fma_gemm(const KernelCall& c, const Dims& d, float* acc, std::int64_t ldc, bool wide) {
    const Tile t{wide ? 12 : 6, wide ? 32 : 16, 1};
    const Order o = order_of(c, d);
    auto pack_a = [&](std::int64_t i0, int mr, std::int64_t k0, std::int64_t kc, float* ap) {
        pack_a_f32<F>(c.in[0], o, i0, mr, k0, kc, ap);
    };
    if (wide)
        blocked<float>(d, t, acc, ldc, pack_a,
                       [&](std::int64_t k0, std::int64_t kc, float* bp) { pack_b_512<F>(c.in[1], o, k0, kc, d.n, bp); },
                       [](int mr) { return pick<float, Fma512>(mr, std::make_integer_sequence<int, 12>{}); });
    else
        blocked<float>(d, t, acc, ldc, pack_a,
                       [&](std::int64_t k0, std::int64_t kc, float* bp) { pack_b_256<F>(c.in[1], o, k0, kc, d.n, bp); },
                       [](int mr) { return pick<float, Fma256>(mr, std::make_integer_sequence<int, 6>{}); });
}

void dpbf16_gemm(const KernelCall& c, const Dims& d, float* acc, std::int64_t ldc) {
    const Tile t{12, 32, 2};
    auto pack_a = [&](std::int64_t i0, int mr, std::int64_t k0, std::int64_t kc2, std::uint32_t* ap) {
        pack_a_pairs(c.in[0], i0, mr, k0, kc2, d.k, ap);
    };
    auto pack_b = [&](std::int64_t k0, std::int64_t kc2, std::uint32_t* bp) { pack_b_pairs(c.in[1], k0, kc2, d, bp); };
    blocked<std::uint32_t>(d, t, acc, ldc, pack_a, pack_b,
                           [](int mr) { return pick<std::uint32_t, Dpbf16>(mr, std::make_integer_sequence<int, 12>{}); });
}

// Few rows (decode): no packing.  B is streamed row by row in chain order,
// each row's 16-lane vectors multiplied into up to four rows of FP32
// accumulators held in c: the same chain per element, B read once.
constexpr std::int64_t kRowsPathMax = 4;

template <Format F>
CONFORM_AVX512 void rows_fma512(const KernelCall& c, const Dims& d, float* acc, std::int64_t ldc) {
    const Order o = order_of(c, d);
    const std::int64_t full = d.n / 16;
    const __mmask16 tail = static_cast<__mmask16>((1u << (d.n % 16)) - 1);
    for (std::int64_t i0 = 0; i0 < d.m; i0 += kRowsPathMax) {
        const std::int64_t mr = std::min(kRowsPathMax, d.m - i0);
        for (std::int64_t r = 0; r < mr; ++r) std::fill(acc + (i0 + r) * ldc, acc + (i0 + r) * ldc + d.n, 0.0f);
        for (std::int64_t p = 0; p < d.k; ++p) {
            const std::int64_t q = o.at(p);
            const storage_t<F>* b = row_of<F>(c.in[1], q);
            __m512 a[kRowsPathMax];
            for (std::int64_t r = 0; r < mr; ++r) a[r] = _mm512_set1_ps(widen1<F>(row_of<F>(c.in[0], i0 + r)[q]));
            for (std::int64_t v = 0; v <= full; ++v) {
                if (v == full && !tail) break;
                const __mmask16 m = v < full ? __mmask16(0xFFFF) : tail;
                const __m512 bv = load16_masked<F>(b + v * 16, m);
                for (std::int64_t r = 0; r < mr; ++r) {
                    float* dst = acc + (i0 + r) * ldc + v * 16;
                    _mm512_mask_storeu_ps(dst, m, _mm512_fmadd_ps(a[r], bv, _mm512_maskz_loadu_ps(m, dst)));
                }
            }
        }
    }
}

template <Format F>
void run_path(const KernelCall& c, const Dims& d, MatmulPath p, float* acc, std::int64_t ldc) {
    if (p == MatmulPath::scalar) return scalar_gemm<F>(c, d, acc);  // ldc = N
    if (p == MatmulPath::dpbf16) return dpbf16_gemm(c, d, acc, ldc);
    if (p == MatmulPath::fma512 && d.m <= kRowsPathMax) return rows_fma512<F>(c, d, acc, ldc);
    fma_gemm<F>(c, d, acc, ldc, p == MatmulPath::fma512);
}

// The smallest exponent field of the nonzero finite BF16 entries (zeros,
// infinities and NaNs count as the largest field, 0x7F80), and whether one
// is subnormal (a nonzero entry with field 0).
struct FieldScan {
    unsigned lo = 0x7F80;
    bool subnormal = false, infinite = false;
    void add(const std::uint16_t* row, std::int64_t begin, std::int64_t end) {
        for (std::int64_t j = begin; j < end; ++j) {
            if ((row[j] & 0x7FFFu) == 0) continue;
            infinite = infinite || (row[j] & 0x7FFFu) == 0x7F80u;
            subnormal = subnormal || (row[j] & 0x7F80u) == 0;
            lo = std::min(lo, row[j] & 0x7F80u);
        }
    }
    // -1000 when an entry is subnormal, +1000 when there is none, else the exponent.
    int exponent() const { return subnormal ? -1000 : lo == 0x7F80u ? 1000 : static_cast<int>(lo >> 7) - 127; }
};

// The scan 32 lanes at a time, the row tails entry by entry.
CONFORM_AVX512 FieldScan scan_fields(const TensorView& t) {
    const __m512i expo = _mm512_set1_epi16(0x7F80), mag = _mm512_set1_epi16(0x7FFF);
    __m512i lo = expo;
    FieldScan s;
    for (std::int64_t r = 0; r < t.shape[0]; ++r) {
        const std::uint16_t* row = t.row<const std::uint16_t>(r);
        std::int64_t j = 0;
        for (; j + 32 <= t.shape[1]; j += 32) {
            const __m512i h = _mm512_loadu_si512(row + j), e = _mm512_and_si512(h, expo);
            const __mmask32 nonzero = _mm512_test_epi16_mask(h, mag), zero_field = _mm512_testn_epi16_mask(e, expo);
            s.subnormal = s.subnormal || (nonzero & zero_field);
            s.infinite = s.infinite || _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, mag), expo);
            lo = _mm512_min_epu16(lo, _mm512_mask_blend_epi16(nonzero, expo, e));  // 0x7F80 (inf/NaN) never lowers it
        }
        s.add(row, j, t.shape[1]);
    }
    alignas(64) std::uint16_t lanes[32];
    _mm512_store_si512(lanes, lo);
    const bool infinite = s.infinite;
    s.add(lanes, 0, 32);  // exponent fields or 0x7F80; a 0 lane is a subnormal, already flagged
    s.infinite = infinite;  // a 0x7F80 lane is "no entry", not an infinity
    return s;
}

// The same, one entry at a time (CPUs without AVX-512).
FieldScan scan_fields_scalar(const TensorView& t) {
    FieldScan s;
    for (std::int64_t r = 0; r < t.shape[0]; ++r) s.add(t.row<const std::uint16_t>(r), 0, t.shape[1]);
    return s;
}

}  // namespace

bool dpbf16_exact_range(const TensorView& a, const TensorView& b) {
    // No input subnormal (vdpbf16ps reads it as 0).  A product of normal
    // BF16 entries with exponents ea, eb is a multiple of 2^(ea + eb - 14);
    // so is every sum of such products and every rounding of one to FP32
    // above that spacing: nonzero, each is at least 2^-126 when the smallest
    // exponents sum to -112 or more.
    // And no subnormal facing an infinity: read as 0, their product would be
    // NaN where the exact one is infinite.
    auto scan = [](const TensorView& t) { return has_avx512() ? scan_fields(t) : scan_fields_scalar(t); };
    const FieldScan sa = scan(a), sb = scan(b);
    if ((sa.subnormal && sb.infinite) || (sb.subnormal && sa.infinite)) return false;
    const int ea = sa.exponent(), eb = sb.exponent();
    return ea >= 1000 || eb >= 1000 || ea + eb >= -112;
}

const char* name(MatmulPath p) {
    switch (p) {
        case MatmulPath::scalar: return "scalar";
        case MatmulPath::fma256: return "fma256";
        case MatmulPath::fma512: return "fma512";
        default: return "dpbf16";
    }
}

MatmulPath best_matmul_path(Format f) {
    if (f == Format::bf16 && has_avx512_bf16()) return MatmulPath::dpbf16;
    if (has_avx512()) return MatmulPath::fma512;
    if (has_avx2()) return MatmulPath::fma256;
    return MatmulPath::scalar;
}

void matmul_into(const TensorView& a, const TensorView& b, const TensorView& y, MatmulPath p) {
    const Params none;
    matmul_call(KernelCall{none, {a, b}, {y}}, p);
}

void matmul_call(const KernelCall& c, MatmulPath p, bool guard) {
    const Dims d = check(c);
    const Format f = c.in[0].format;
    if (f != Format::fp32 && f != Format::fp16 && f != Format::bf16)
        throw std::invalid_argument("matmul kernel: inputs must be fp32, fp16 or bf16");
    if (p == MatmulPath::dpbf16 && (f != Format::bf16 || !has_avx512_bf16()))
        throw std::invalid_argument("matmul kernel: the dpbf16 path needs bf16 inputs and AVX512_BF16");
    if (p == MatmulPath::dpbf16 && guard && (d.m <= kRowsPathMax || !dpbf16_exact_range(c.in[0], c.in[1])))
        p = MatmulPath::fma512;  // the same chain order (Order), so the same bits
    static thread_local std::vector<float, AlignedAllocator<float, 64>> c_buf;
    const std::int64_t ldc = p == MatmulPath::scalar ? d.n : (d.n + 31) / 32 * 32;
    float* acc = grown(c_buf, d.m * ldc);
    if (d.k == 0) std::fill(acc, acc + d.m * ldc, 0.0f);
    else if (f == Format::fp32) run_path<Format::fp32>(c, d, p, acc, ldc);
    else if (f == Format::fp16) run_path<Format::fp16>(c, d, p, acc, ldc);
    else run_path<Format::bf16>(c, d, p, acc, ldc);
    store_output(acc, ldc, d, c.out[0]);
}

}  // namespace conform::cpu

namespace conform {
namespace {

// The same-precision baseline: every product and every addition rounded to
// the storage format (what plain arithmetic in the dtype does).
void naive_matmul(const KernelCall& c) {
    const TensorView &a = c.in.at(0), &b = c.in.at(1), &y = c.out.at(0);
    const Format f = y.format;
    const std::int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
    auto round = [f](double v) { return decode(f, encode(f, v)); };
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (std::int64_t kk = 0; kk < k; ++kk) acc = round(acc + round(a.value(i * k + kk) * b.value(kk * n + j)));
            y.set_bits(i * n + j, encode(f, acc));
        }
}

KernelInfo matmul_info(const std::string& variant, const std::string& tail, Format in, Format out, Format acc, Role role,
                       std::string description, KernelFn fn) {
    KernelInfo k;
    k.name = "cpu." + variant + tail;
    k.op = "matmul";
    k.variant = variant;
    k.in = in, k.out = out, k.acc = acc;
    k.role = role;
    k.description = std::move(description);
    k.fn = std::move(fn);
    return k;
}

void add_matmul(Registry& r, Format in, Format out) {
    const std::string tail = std::string(".matmul.") + name(in) + (out == in ? "" : std::string(".") + name(out));
    const std::string contract = std::string("y_ij = fma chain over k ") +
                                 (in == Format::bf16 ? "in vdpbf16ps's pair order 1, 0, 3, 2, ..." : "ascending") +
                                 " in FP32 from +0, rounded once to " + name(out);
    const std::string dp = in == Format::bf16 ? "AVX512_BF16 vdpbf16ps (pairs k+1, k; the FMA path where a subnormal "
                                                "product or partial sum is possible), else "
                                              : "";
    r.add(matmul_info("simd", tail, in, out, Format::fp32, Role::kernel,
                      dp + "AVX-512 12x32 / AVX2 6x16 FMA register tiles over packed panels, B streamed unpacked "
                           "for M <= 4 on AVX-512 (bit-identical to cpu.scalar); " + contract,
                      [in](const KernelCall& c) { cpu::matmul_call(c, cpu::best_matmul_path(in)); }));
    r.add(matmul_info("scalar", tail, in, out, Format::fp32, Role::kernel,
                      "portable loop; " + contract,
                      [](const KernelCall& c) { cpu::matmul_call(c, cpu::MatmulPath::scalar); }));
    if (out == in)
        r.add(matmul_info("naive", tail, in, out, in, Role::baseline,
                          std::string("plain ") + name(in) + " arithmetic: every product and addition rounded to " + name(in),
                          naive_matmul));
}

}  // namespace

void register_cpu_matmul(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) add_matmul(r, f, f);
    add_matmul(r, Format::fp16, Format::fp32);
    add_matmul(r, Format::bf16, Format::fp32);
}

}  // namespace conform
