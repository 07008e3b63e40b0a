// CPU kernels of the matrix product (docs/matmul.md, "Kernels").  A GotoBLAS
// blocking: for each block of K, B is packed into panels of NR columns; for
// each block of MC rows, A is packed into panels of MR rows; a register-tile
// micro-kernel (MR x NR FP32 accumulators) runs over every (row panel,
// column panel) pair and parks its partial sums in an FP32 scratch C, which
// is rounded once into y at the end.
#include "impls/cpu/matmul.hpp"

#include <immintrin.h>

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

// Element j of row r of t, as float (exact: every input format widens exactly).
float load(const TensorView& t, std::int64_t r, std::int64_t j) {
    switch (t.format) {
        case Format::fp32: return t.row<const float>(r)[j];
        case Format::bf16: return Storage<Format::bf16>::load(t.row<const std::uint16_t>(r), j);
        case Format::fp16: return Storage<Format::fp16>::load(t.row<const std::uint16_t>(r), j);
        default: throw std::invalid_argument("matmul kernel: inputs must be fp32, fp16 or bf16");
    }
}

// y = c (row-major, ldc) rounded once into y's format.
void store_output(const float* c, std::int64_t ldc, const Dims& d, const TensorView& y) {
    for (std::int64_t i = 0; i < d.m; ++i) {
        const float* row = c + i * ldc;
        switch (y.format) {
            case Format::fp32: std::memcpy(y.row<float>(i), row, static_cast<std::size_t>(d.n) * 4); break;
            case Format::bf16:
                for (std::int64_t j = 0; j < d.n; ++j) Storage<Format::bf16>::store(y.row<std::uint16_t>(i), j, row[j]);
                break;
            case Format::fp16:
                for (std::int64_t j = 0; j < d.n; ++j) Storage<Format::fp16>::store(y.row<std::uint16_t>(i), j, row[j]);
                break;
            default: throw std::invalid_argument("matmul kernel: y must be fp32, fp16 or bf16");
        }
    }
}

// The scalar chain, k ascending, one row of accumulators at a time.
void scalar_gemm(const KernelCall& c, const Dims& d, float* acc) {
    for (std::int64_t i = 0; i < d.m; ++i) {
        float* row = acc + i * d.n;
        std::fill(row, row + d.n, 0.0f);
        for (std::int64_t k = 0; k < d.k; ++k) {
            const float a = load(c.in[0], i, k);
            for (std::int64_t j = 0; j < d.n; ++j) row[j] = std::fma(a, load(c.in[1], k, j), row[j]);
        }
    }
}

// ---- packing ---------------------------------------------------------------

// B rows [k0, k0 + kc) as panels of NR columns, [panel][kk][NR] floats, zero past N.
void pack_b_f32(const TensorView& b, std::int64_t k0, std::int64_t kc, std::int64_t n, int nr, float* bp) {
    const std::int64_t panels = (n + nr - 1) / nr;
    for (std::int64_t p = 0; p < panels; ++p)
        for (std::int64_t kk = 0; kk < kc; ++kk) {
            float* dst = bp + (p * kc + kk) * nr;
            for (int jj = 0; jj < nr; ++jj) {
                const std::int64_t j = p * nr + jj;
                dst[jj] = j < n ? load(b, k0 + kk, j) : 0.0f;
            }
        }
}

// A rows [i0, i0 + mr), columns [k0, k0 + kc) as [kk][mr] floats.
void pack_a_f32(const TensorView& a, std::int64_t i0, int mr, std::int64_t k0, std::int64_t kc, float* ap) {
    for (int r = 0; r < mr; ++r)
        for (std::int64_t kk = 0; kk < kc; ++kk) ap[kk * mr + r] = load(a, i0 + r, k0 + kk);
}

// BF16 bits of element j of row r, 0 past the end of K (the pair's padding).
std::uint32_t bf16_bits(const TensorView& t, std::int64_t r, std::int64_t rows, std::int64_t j, std::int64_t cols) {
    return r < rows && j < cols ? t.row<const std::uint16_t>(r)[j] : 0u;
}

// B pairs: [panel][kk][32] of (b[k0+2kk][j] | b[k0+2kk+1][j] << 16).
void pack_b_pairs(const TensorView& b, std::int64_t k0, std::int64_t kc2, const Dims& d, std::uint32_t* bp) {
    const std::int64_t panels = (d.n + 31) / 32;
    for (std::int64_t p = 0; p < panels; ++p)
        for (std::int64_t kk = 0; kk < kc2; ++kk) {
            std::uint32_t* dst = bp + (p * kc2 + kk) * 32;
            const std::int64_t k = k0 + 2 * kk;
            for (int jj = 0; jj < 32; ++jj) {
                const std::int64_t j = p * 32 + jj;
                dst[jj] = bf16_bits(b, k, d.k, j, d.n) | bf16_bits(b, k + 1, d.k, j, d.n) << 16;
            }
        }
}

// A pairs: [kk][mr] of (a[i][k0+2kk] | a[i][k0+2kk+1] << 16).
void pack_a_pairs(const TensorView& a, std::int64_t i0, int mr, std::int64_t k0, std::int64_t kc2, std::int64_t k,
                  std::uint32_t* ap) {
    for (int r = 0; r < mr; ++r)
        for (std::int64_t kk = 0; kk < kc2; ++kk) {
            const std::int64_t col = k0 + 2 * kk;
            ap[kk * mr + r] = bf16_bits(a, i0 + r, i0 + r + 1, col, k) | bf16_bits(a, i0 + r, i0 + r + 1, col + 1, k) << 16;
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

void fma_gemm(const KernelCall& c, const Dims& d, float* acc, std::int64_t ldc, bool wide) {
    const Tile t{wide ? 12 : 6, wide ? 32 : 16, 1};
    auto pack_a = [&](std::int64_t i0, int mr, std::int64_t k0, std::int64_t kc, float* ap) { pack_a_f32(c.in[0], i0, mr, k0, kc, ap); };
    auto pack_b = [&](std::int64_t k0, std::int64_t kc, float* bp) { pack_b_f32(c.in[1], k0, kc, d.n, t.nr, bp); };
    if (wide)
        blocked<float>(d, t, acc, ldc, pack_a, pack_b,
                       [](int mr) { return pick<float, Fma512>(mr, std::make_integer_sequence<int, 12>{}); });
    else
        blocked<float>(d, t, acc, ldc, pack_a, pack_b,
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

// The exponent of the smallest nonzero finite BF16 entry: -1000 when one is
// subnormal, +1000 when there is none.
int min_exponent(const TensorView& t) {
    int e_min = 1000;
    for (std::int64_t r = 0; r < t.shape[0]; ++r) {
        const std::uint16_t* row = t.row<const std::uint16_t>(r);
        for (std::int64_t j = 0; j < t.shape[1]; ++j) {
            const int field = (row[j] >> 7) & 0xFF, mant = row[j] & 0x7F;
            if (field == 0xFF || (field == 0 && mant == 0)) continue;
            e_min = std::min(e_min, field ? field - 127 : -1000);  // a subnormal input is flushed whatever its partner
        }
    }
    return e_min;
}

}  // namespace

bool dpbf16_exact_range(const TensorView& a, const TensorView& b) {
    // No input subnormal (vdpbf16ps reads it as 0).  A product of normal
    // BF16 entries with exponents ea, eb is a multiple of 2^(ea + eb - 14);
    // so is every sum of such products and every rounding of one to FP32
    // above that spacing: nonzero, each is at least 2^-126 when the smallest
    // exponents sum to -112 or more.
    const int ea = min_exponent(a), eb = min_exponent(b);
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

void matmul_call(const KernelCall& c, MatmulPath p, bool guard) {
    const Dims d = check(c);
    if (p == MatmulPath::dpbf16 && (c.in[0].format != Format::bf16 || !has_avx512_bf16()))
        throw std::invalid_argument("matmul kernel: the dpbf16 path needs bf16 inputs and AVX512_BF16");
    if (p == MatmulPath::dpbf16 && guard && !dpbf16_exact_range(c.in[0], c.in[1])) p = MatmulPath::fma512;
    static thread_local std::vector<float, AlignedAllocator<float, 64>> c_buf;
    if (p == MatmulPath::scalar || d.k == 0) {
        float* acc = grown(c_buf, d.m * d.n);
        if (d.k == 0) std::fill(acc, acc + d.m * d.n, 0.0f);
        else scalar_gemm(c, d, acc);
        store_output(acc, d.n, d, c.out[0]);
        return;
    }
    const std::int64_t ldc = (d.n + 31) / 32 * 32;
    float* acc = grown(c_buf, d.m * ldc);
    if (p == MatmulPath::dpbf16) dpbf16_gemm(c, d, acc, ldc);
    else fma_gemm(c, d, acc, ldc, p == MatmulPath::fma512);
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
    const std::string contract = std::string("y_ij = fma chain over k in FP32 from +0, rounded once to ") + name(out);
    const std::string dp = in == Format::bf16 ? "AVX512_BF16 vdpbf16ps (pairs k+1, k; the FMA path where a subnormal "
                                                "product or partial sum is possible), else "
                                              : "";
    r.add(matmul_info("simd", tail, in, out, Format::fp32, Role::kernel,
                      dp + "AVX-512 12x32 / AVX2 6x16 FMA register tiles over packed panels (bit-identical to "
                           "cpu.scalar); " + contract,
                      [in](const KernelCall& c) { cpu::matmul_call(c, cpu::best_matmul_path(in)); }));
    r.add(matmul_info("scalar", tail, in, out, Format::fp32, Role::kernel, "portable loop, k ascending; " + contract,
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
