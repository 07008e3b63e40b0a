// The INT8 GEMM kernel and host call (int8.cu registers cuda.int8_gemm.<out>;
// the GPU mutants of impls/mutants/cuda_int8.cu instantiate it with one
// bug).  docs/int8.md holds the formula and the budget: acc exact, y from
// acc * s_a * s_b in double, one rounding.
//
// Integer tensor cores (mma.sync m16n8k32 s8 x s8 -> s32): a block of four
// warps computes a 64 x 32 tile of acc, each warp 16 rows x 4 fragments of
// 8 columns.  K advances by 32: the block stages a 64 x 32 tile of a
// (row-major: four consecutive k of a row are one 32-bit word) and a 32 x 32
// tile of b transposed (column-major words: four consecutive k of a column)
// in shared memory, zero outside the matrices, so every fragment register
// is one aligned word; the tiles load a word at a time where the shapes
// allow (b's 4 x 4 byte blocks transposed by byte permutes).  The INT32
// accumulator is exact for K <= 2^17 (|acc| <= K 2^14); the epilogue writes
// acc and y.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/int8_gemm.hpp"  // check_gemm: the call's shapes, shared
#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/mma.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernel.
struct Int8NoBug {
    static constexpr bool kUnsignedA = false;  // mma .u8.s8: a's negative codes read as 256 + q
    static constexpr bool kInt16Acc = false;   // each k tile's sums added into a wrapping INT16 accumulator
};

constexpr int kGemmTm = 64, kGemmTn = 32, kGemmTk = 32, kGemmWords = kGemmTk / 4;

struct GemmArgs {
    int m, n, k;
    int per_row_a, per_col_b;  // scale_a per row (else [1]), scale_b per column (else [1])
};

// Stages rows [row0, row0 + 64) x k [k0, k0 + 32) of a (row-major) as
// words of four consecutive k, zero outside: a whole word per load where K
// is a multiple of 4 (every row then starts 4-byte aligned), else bytes.
__device__ __forceinline__ void stage_a_words(const std::int8_t* a, const GemmArgs& g, int row0, int k0,
                                              std::uint32_t (*as)[kGemmWords + 1]) {
    if (g.k % 4 == 0) {
        for (int e = threadIdx.x; e < kGemmTm * kGemmWords; e += blockDim.x) {
            const int r = e / kGemmWords, w = e % kGemmWords, row = row0 + r, k = k0 + 4 * w;
            const bool in = row < g.m && k < g.k;
            as[r][w] = in ? *reinterpret_cast<const std::uint32_t*>(a + static_cast<long long>(row) * g.k + k) : 0;
        }
        return;
    }
    auto* bytes = reinterpret_cast<std::int8_t*>(&as[0][0]);
    for (int e = threadIdx.x; e < kGemmTm * kGemmTk; e += blockDim.x) {  // coalesced along k
        const int r = e / kGemmTk, kk = e % kGemmTk, row = row0 + r, k = k0 + kk;
        bytes[r * (kGemmWords + 1) * 4 + kk] = row < g.m && k < g.k ? a[static_cast<long long>(row) * g.k + k] : 0;
    }
}

// Stages k [k0, k0 + 32) x columns [col0, col0 + 32) of b (row-major)
// transposed, as words of four consecutive k of a column, zero outside.
// Where N and K are multiples of 4, a thread loads one word (four columns)
// from each of four consecutive k rows and transposes the 4 x 4 bytes with
// byte permutes; else byte by byte.
__device__ __forceinline__ void stage_b_words(const std::int8_t* b, const GemmArgs& g, int col0, int k0,
                                              std::uint32_t (*bs)[kGemmWords + 1]) {
    if (g.n % 4 == 0 && g.k % 4 == 0) {
        for (int e = threadIdx.x; e < kGemmWords * (kGemmTn / 4); e += blockDim.x) {
            const int w = e / (kGemmTn / 4), cg = e % (kGemmTn / 4), k = k0 + 4 * w, col = col0 + 4 * cg;
            std::uint32_t row[4] = {0, 0, 0, 0};  // k + j's bytes of columns col .. col + 3
            if (k < g.k && col < g.n) {
                CONFORM_UNROLL
                for (int j = 0; j < 4; ++j)
                    row[j] = *reinterpret_cast<const std::uint32_t*>(b + static_cast<long long>(k + j) * g.n + col);
            }
            // Byte c of each row into column c's word: pairs of rows interleaved, then the pairs joined.
            const std::uint32_t lo01 = __byte_perm(row[0], row[1], 0x5140), lo23 = __byte_perm(row[2], row[3], 0x5140);
            const std::uint32_t hi01 = __byte_perm(row[0], row[1], 0x7362), hi23 = __byte_perm(row[2], row[3], 0x7362);
            bs[4 * cg + 0][w] = __byte_perm(lo01, lo23, 0x5410);
            bs[4 * cg + 1][w] = __byte_perm(lo01, lo23, 0x7632);
            bs[4 * cg + 2][w] = __byte_perm(hi01, hi23, 0x5410);
            bs[4 * cg + 3][w] = __byte_perm(hi01, hi23, 0x7632);
        }
        return;
    }
    auto* bytes = reinterpret_cast<std::int8_t*>(&bs[0][0]);
    for (int e = threadIdx.x; e < kGemmTk * kGemmTn; e += blockDim.x) {  // coalesced along n
        const int kk = e / kGemmTn, cn = e % kGemmTn, col = col0 + cn, k = k0 + kk;
        bytes[cn * (kGemmWords + 1) * 4 + kk] = col < g.n && k < g.k ? b[static_cast<long long>(k) * g.n + col] : 0;
    }
}

template <class Out, class Bug>
__global__ void int8_gemm_tc(const std::int8_t* __restrict__ a, const std::int8_t* __restrict__ b,
                             const float* __restrict__ sa, const float* __restrict__ sb, GemmArgs g,
                             std::int32_t* __restrict__ acc, Out* __restrict__ y) {
    // +1 word per row: a fragment's 8 groups read 8 different banks.
    __shared__ std::uint32_t as[kGemmTm][kGemmWords + 1], bs[kGemmTn][kGemmWords + 1];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, t = lane % 4;
    const int tiles_n = (g.n + kGemmTn - 1) / kGemmTn, tiles_m = (g.m + kGemmTm - 1) / kGemmTm;
    for (long long tile = blockIdx.x; tile < static_cast<long long>(tiles_m) * tiles_n; tile += gridDim.x) {
        const int row0 = static_cast<int>(tile / tiles_n) * kGemmTm, col0 = static_cast<int>(tile % tiles_n) * kGemmTn;
        int c[4][4] = {};
        short c16[4][4] = {};
        for (int k0 = 0; k0 < g.k; k0 += kGemmTk) {
            stage_a_words(a, g, row0, k0, as);
            stage_b_words(b, g, col0, k0, bs);
            __syncthreads();
            const int r = warp * 16 + group;
            const std::uint32_t af[4] = {as[r][t], as[r + 8][t], as[r][4 + t], as[r + 8][4 + t]};
            CONFORM_UNROLL
            for (int j = 0; j < 4; ++j) {
                const std::uint32_t bf[2] = {bs[8 * j + group][t], bs[8 * j + group][4 + t]};
                if constexpr (Bug::kInt16Acc) {
                    int part[4] = {};
                    const int zero[4] = {};
                    mma16832_s8<Bug::kUnsignedA>(part, af, bf, zero);
                    for (int i = 0; i < 4; ++i) c16[j][i] = static_cast<short>(c16[j][i] + part[i]);
                } else {
                    mma16832_s8<Bug::kUnsignedA>(c[j], af, bf, c[j]);
                }
            }
            __syncthreads();  // the tiles are the next k step's after this
        }
        CONFORM_UNROLL
        for (int j = 0; j < 4; ++j)
            for (int i = 0; i < 4; ++i) {
                const int row = row0 + warp * 16 + group + (i >= 2 ? 8 : 0), col = col0 + 8 * j + 2 * t + (i & 1);
                if (row >= g.m || col >= g.n) continue;
                const int v = Bug::kInt16Acc ? c16[j][i] : c[j][i];
                acc[static_cast<long long>(row) * g.n + col] = v;
                // In double: acc * s_a * s_b neither overflows nor underflows (2^31 2^128 2^128), so a
                // huge scale times a zero one is 0, not inf * 0; one rounding into y's format.
                const double yv = static_cast<double>(v) * sa[g.per_row_a ? row : 0] * sb[g.per_col_b ? col : 0];
                y[static_cast<long long>(row) * g.n + col] = store<Out>(yv);
            }
    }
}

inline GemmArgs gemm_args(const KernelCall& c, const char* kernel) {
    const std::string who = kernel;
    if (c.in.size() != 4 || c.out.size() != 2) throw std::invalid_argument(who + ": expects a, b, scale_a, scale_b -> acc, y");
    std::int64_t m, k, n;
    cpu::check_gemm(c, m, k, n);
    GemmArgs g{static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 0, 0};
    g.per_row_a = c.in[2].numel() != 1, g.per_col_b = c.in[3].numel() != 1;
    return g;
}

// Four warps a block (the tile's 64 rows); lc.max_blocks caps the grid,
// which strides over the tiles beyond it.  On device memory (the host call
// below, and the benchmarks).
template <class Out, class Bug = Int8NoBug>
void launch_int8_gemm(const std::int8_t* a, const std::int8_t* b, const float* sa, const float* sb, const GemmArgs& g,
                      std::int32_t* acc, Out* y, const Launch& lc, cudaStream_t s) {
    const long long tiles = static_cast<long long>((g.m + kGemmTm - 1) / kGemmTm) * ((g.n + kGemmTn - 1) / kGemmTn);
    auto* kernel_fn = int8_gemm_tc<Out, Bug>;
    CONFORM_LAUNCH(kernel_fn, dim3(static_cast<unsigned>(std::min<long long>(tiles, lc.max_blocks))), dim3(128), 0, s)(
        a, b, sa, sb, g, acc, y);
}

template <class Out, class Bug = Int8NoBug>
void run_int8_gemm_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const GemmArgs g = gemm_args(c, kernel);
    Stream s(kernel);
    DeviceBuffer a(static_cast<std::size_t>(c.in[0].numel()), kernel), b(static_cast<std::size_t>(c.in[1].numel()), kernel);
    DeviceBuffer sa(static_cast<std::size_t>(c.in[2].numel()) * 4, kernel), sb(static_cast<std::size_t>(c.in[3].numel()) * 4, kernel);
    for (int i = 0; i < 4; ++i) upload(c.in[i], i == 0 ? a : i == 1 ? b : i == 2 ? sa : sb, s.get(), kernel);
    const std::size_t mn = static_cast<std::size_t>(g.m) * static_cast<std::size_t>(g.n);
    DeviceBuffer acc(mn * 4, kernel), y(mn * sizeof(Out), kernel);
    poison(acc, s.get(), kernel), poison(y, s.get(), kernel);
    if (mn > 0) {
        launch_int8_gemm<Out, Bug>(a.as<std::int8_t>(), b.as<std::int8_t>(), sa.as<float>(), sb.as<float>(), g,
                                   acc.as<std::int32_t>(), y.as<Out>(), lc, s.get());
        check_launch(s.get(), kernel);
    }
    // acc is stored as fp64 (exact integers): through the host.
    std::vector<std::int32_t> host(mn);
    if (mn > 0) {
        check(cudaMemcpyAsync(host.data(), acc.as<void>(), mn * 4, cudaMemcpyDeviceToHost, s.get()), "cudaMemcpyAsync", kernel);
        check(cudaStreamSynchronize(s.get()), "cudaStreamSynchronize", kernel);
    }
    for (std::size_t i = 0; i < mn; ++i) c.out[0].set_bits(static_cast<std::int64_t>(i), encode(Format::fp64, host[i]));
    download(y, c.out[1], s.get(), kernel);
}

}  // namespace conform::CONFORM_CUDA_NS

namespace conform::CONFORM_CUDA_NS {

// k.fn and the determinism property's other launch (one block: every tile
// by the grid-stride loop).
template <class Bug = Int8NoBug>
void with_gemm_launches(KernelInfo& k, Format out) {
    auto make = [out, kernel = k.name](Launch l) -> KernelFn {
        return [out, kernel, l](const KernelCall& c) {
            if (out == Format::fp16) run_int8_gemm_as<__half, Bug>(c, kernel.c_str(), l);
            else run_int8_gemm_as<float, Bug>(c, kernel.c_str(), l);
        };
    };
    k.fn = make(Launch{});
    k.launches = {{"one block of four warps", make(Launch{1, 128})}};
}

// The registry entry of cuda.int8_gemm.<out> (or a mutant's, from `base`).
inline KernelInfo int8_gemm_info(KernelInfo k, Format out) {
    k.in = Format::int8;
    k.out = out;
    k.acc = Format::fp64;  // the dequantization; the product is exact INT32
    k.out_formats = {Format::fp64, out};
    return k;
}

}  // namespace conform::CONFORM_CUDA_NS
