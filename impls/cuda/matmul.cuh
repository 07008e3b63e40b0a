// The matrix product's CUDA kernels and host calls (matmul.cu registers
// cuda.matmul.<fmt>[.fp32]; the GPU mutants of impls/mutants/cuda_matmul.cu
// instantiate them with one bug).  docs/matmul.md holds the formula, the
// budget and, under "CUDA kernels", what these compute.
//
// * FP16/BF16 on tensor cores (matmul_tc): a block of four warps computes a
//   64 x 64 tile of y, each warp 32 rows x 32 columns (2 x 4 fragments of
//   mma.sync m16n8k16, FP32 accumulators in registers).  K advances by 32:
//   the block stages a 64 x 32 tile of a (row-major) and a 32 x 64 tile of b
//   transposed ([n][k], so that a B fragment's two k are one 32-bit word) in
//   shared memory, zero outside the matrices, in 16-byte packs where K (for
//   a) or N (for b) is a multiple of 8.  Each y_ij is then a chain of
//   ceil(K/16) block FMAs from +0, k ascending: what the kernels declare
//   (mma_k = 16) and the bound assumes.
// * FP32 without tensor cores (matmul_fp32): 256 threads compute a 64 x 64
//   tile, 4 x 4 outputs each, K by 16 through shared memory; each y_ij is
//   the chain acc = fmaf(a_ik, b_kj, acc) from +0, k ascending -- the CPU
//   kernels' chain, so the same bits as cpu.scalar.matmul.fp32.
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "impls/cuda/device_io.cuh"
#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/mma.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct MatmulNoBug {
    static constexpr bool kKTailDropped = false;        // the last partial K tile never loaded
    static constexpr bool kBFragmentSwapped = false;    // B fragment with k and n roles swapped
    static constexpr bool kF16Accumulator = false;      // the accumulator rounded to FP16 after every mma
    static constexpr bool kNTailDropped = false;        // the grid covers whole 64-column tiles only
    static constexpr bool kTf32Operands = false;        // FP32 operands rounded to TF32 (10-bit fractions)
};

struct MatmulArgs {
    int m, n, k;
};

constexpr int kMmTile = 64, kMmTk = 32, kMmPitch = kMmTk + 8;  // pitch: 80-byte rows, 16-byte aligned
constexpr int kMmFp32Tk = 16;

__device__ __forceinline__ int tiles_along(int extent, bool drop_tail) {
    return drop_tail ? extent / kMmTile : (extent + kMmTile - 1) / kMmTile;
}

// The identity conversion of 16-bit operands (raw bits).
struct Bits16 {
    __device__ __forceinline__ unsigned short operator()(unsigned short x) const { return x; }
};

// A 64 x 32 tile [rows, k] of a row-major operand into t[r][kk] as 16-bit
// bits by cvt: src's rows [row0, row0 + 64) (below `rows`) and columns
// [k0, k_hi) of its `ld`, zero outside.  16-byte packs when the operand is
// 16-bit and ld, k0 and k_hi are multiples of 8 (every row then starts
// aligned, and a pack lies wholly inside or outside the columns).
template <class T, class Cvt>
__device__ __forceinline__ void stage_rows(const T* src, int rows, int ld, int row0, int k0, int k_hi, Cvt cvt,
                                           unsigned short (*t)[kMmPitch]) {
    using Pack8 = Pack<unsigned short>;
    if constexpr (sizeof(T) == 2)
        if (ld % 8 == 0 && k0 % 8 == 0 && k_hi % 8 == 0) {
            for (int e = threadIdx.x; e < kMmTile * kMmTk / 8; e += blockDim.x) {
                const int r = e / (kMmTk / 8), kk = e % (kMmTk / 8) * 8, row = row0 + r, k = k0 + kk;
                Pack8 p{};
                if (row < rows && k < k_hi) p = *reinterpret_cast<const Pack8*>(src + static_cast<long long>(row) * ld + k);
                *reinterpret_cast<Pack8*>(&t[r][kk]) = p;
            }
            return;
        }
    for (int e = threadIdx.x; e < kMmTile * kMmTk; e += blockDim.x) {  // coalesced along k
        const int r = e / kMmTk, kk = e % kMmTk, row = row0 + r, k = k0 + kk;
        t[r][kk] = row < rows && k < k_hi ? cvt(src[static_cast<long long>(row) * ld + k]) : 0;
    }
}

// A 32 x 64 tile [k, cols] of a row-major operand (rows [k0, k_hi), columns
// [col0, col0 + 64) below `cols`) transposed into t[n][kk] by cvt, zero
// outside; 16-byte packs along n when the operand is 16-bit and cols is a
// multiple of 8.
template <class T, class Cvt>
__device__ __forceinline__ void stage_columns(const T* src, int cols, int col0, int k0, int k_hi, Cvt cvt,
                                              unsigned short (*t)[kMmPitch]) {
    using Pack8 = Pack<unsigned short>;
    if constexpr (sizeof(T) == 2)
        if (cols % 8 == 0) {
            for (int e = threadIdx.x; e < kMmTk * kMmTile / 8; e += blockDim.x) {
                const int kk = e / (kMmTile / 8), c = e % (kMmTile / 8) * 8, k = k0 + kk, col = col0 + c;
                Pack8 p{};
                if (k < k_hi && col < cols) p = *reinterpret_cast<const Pack8*>(src + static_cast<long long>(k) * cols + col);
                CONFORM_UNROLL
                for (int x = 0; x < 8; ++x) t[c + x][kk] = p.v[x];
            }
            return;
        }
    for (int e = threadIdx.x; e < kMmTk * kMmTile; e += blockDim.x) {  // coalesced along n
        const int kk = e / kMmTile, c = e % kMmTile, k = k0 + kk, col = col0 + c;
        t[c][kk] = k < k_hi && col < cols ? cvt(src[static_cast<long long>(k) * cols + col]) : 0;
    }
}

// The BFragmentSwapped mutant's B fragment of columns [c0, c0 + 8) and k
// [ks, ks + 16): (k group, columns 2t, 2t+1), the k-major reading of the
// transposed tile, where the kernel's is (k 2t, 2t+1; column group).
__device__ __forceinline__ void swapped_b_fragment(const unsigned short (*bs)[kMmPitch], int c0, int ks, int group,
                                                   int t, std::uint32_t bf[2]) {
    for (int h = 0; h < 2; ++h)
        bf[h] = static_cast<std::uint32_t>(bs[c0 + 2 * t][ks + group + 8 * h]) |
                static_cast<std::uint32_t>(bs[c0 + 2 * t + 1][ks + group + 8 * h]) << 16;
}

// The staged tiles of one block: a [64 rows][k], b transposed [64 columns][k].
struct alignas(16) MmaTiles {
    unsigned short a[kMmTile][kMmPitch], b[kMmTile][kMmPitch];
};

// One warp's share of the staged tiles: its 32 x 32 corner of c (2 x 4
// fragments) += the tiles' first `kn` k, 16 at a time; a 16-step of padding
// alone is skipped.  kn is the same for the whole block.
template <class S, class Bug>
__device__ __forceinline__ void mma_tiles(const MmaTiles& tiles, int kn, float (&c)[2][4][4]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, t = lane % 4;
    const int wr = warp / 2 * 32, wc = warp % 2 * 32;  // the warp's corner of the tile
    const int lm = lane / 8, lr = lane % 8;              // the matrix and row this lane addresses in ldmatrix_x4
    for (int ks = 0; ks < kMmTk && ks < kn; ks += 16) {
        std::uint32_t af[2][4], bf[4][2];
        // A's fragment of rows wr + 16 i .. + 15 by ldmatrix: matrix m holds rows + 8 (m % 2), k + 8 (m / 2).
        CONFORM_UNROLL
        for (int i = 0; i < 2; ++i) ldmatrix_x4<false>(af[i], &tiles.a[wr + 16 * i + lm % 2 * 8 + lr][ks + lm / 2 * 8]);
        if constexpr (Bug::kBFragmentSwapped) {
            CONFORM_UNROLL
            for (int j = 0; j < 4; ++j) swapped_b_fragment(tiles.b, wc + 8 * j, ks, group, t, bf[j]);
        } else {
            // B's of two column blocks per ldmatrix from the transposed tile: matrix m holds columns
            // wc + 8 (j + m / 2) .. + 7, k + 8 (m % 2).
            CONFORM_UNROLL
            for (int j = 0; j < 4; j += 2) {
                std::uint32_t r[4];
                ldmatrix_x4<false>(r, &tiles.b[wc + 8 * (j + lm / 2) + lr][ks + lm % 2 * 8]);
                bf[j][0] = r[0], bf[j][1] = r[1], bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
            }
        }
        CONFORM_UNROLL
        for (int i = 0; i < 2; ++i)
            CONFORM_UNROLL
            for (int j = 0; j < 4; ++j) {
                mma16816<S>(c[i][j], af[i], bf[j], c[i][j]);
                if constexpr (Bug::kF16Accumulator)
                    for (int x = 0; x < 4; ++x) c[i][j][x] = __half2float(__float2half_rn(c[i][j][x]));
            }
    }
}

// fn(i, j, x, row, col) for each accumulator c[i][j][x] of this thread's
// warp corner in the tile at (row0, col0), (row, col) by the C layout.
template <class Fn>
__device__ __forceinline__ void for_each_accumulator(int row0, int col0, Fn&& fn) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, t = lane % 4;
    CONFORM_UNROLL
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j)
            for (int x = 0; x < 4; ++x)
                fn(i, j, x, row0 + warp / 2 * 32 + 16 * i + group + (x >= 2 ? 8 : 0),
                   col0 + warp % 2 * 32 + 8 * j + 2 * t + (x & 1));
}

template <class S, class Out, class Bug>
__global__ void matmul_tc(const unsigned short* __restrict__ a, const unsigned short* __restrict__ b, MatmulArgs g,
                          Out* __restrict__ y) {
    __shared__ MmaTiles tiles;
    const int tiles_n = tiles_along(g.n, Bug::kNTailDropped), tiles_m = tiles_along(g.m, false);
    const int k_end = Bug::kKTailDropped ? g.k / kMmTk * kMmTk : g.k;
    for (long long tile = blockIdx.x; tile < static_cast<long long>(tiles_m) * tiles_n; tile += gridDim.x) {
        const int row0 = static_cast<int>(tile / tiles_n) * kMmTile, col0 = static_cast<int>(tile % tiles_n) * kMmTile;
        float c[2][4][4] = {};
        for (int k0 = 0; k0 < k_end; k0 += kMmTk) {
            stage_rows(a, g.m, g.k, row0, k0, g.k, Bits16{}, tiles.a);
            stage_columns(b, g.n, col0, k0, g.k, Bits16{}, tiles.b);
            __syncthreads();
            mma_tiles<S, Bug>(tiles, g.k - k0, c);
            __syncthreads();  // the tiles are the next k step's after this
        }
        for_each_accumulator(row0, col0, [&](int i, int j, int x, int row, int col) {
            if (row < g.m && col < g.n) y[static_cast<long long>(row) * g.n + col] = store<Out>(c[i][j][x]);
        });
    }
}

// x rounded to TF32 (cvt.rna.tf32.f32: 10-bit fraction, ties away from
// zero), the mutant kTf32Operands' operands.
__device__ __forceinline__ float tf32(float x) {
    if (!isfinite(x)) return x;
    return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}

template <class Bug>
__global__ void matmul_fp32(const float* __restrict__ a, const float* __restrict__ b, MatmulArgs g,
                            float* __restrict__ y) {
    __shared__ float as[kMmFp32Tk][kMmTile + 4], bs[kMmFp32Tk][kMmTile + 4];  // [k][m], [k][n]
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // outputs (ty + 16 i, tx + 16 j)
    const int tiles_n = tiles_along(g.n, Bug::kNTailDropped), tiles_m = tiles_along(g.m, false);
    const int k_end = Bug::kKTailDropped ? g.k / kMmFp32Tk * kMmFp32Tk : g.k;
    for (long long tile = blockIdx.x; tile < static_cast<long long>(tiles_m) * tiles_n; tile += gridDim.x) {
        const int row0 = static_cast<int>(tile / tiles_n) * kMmTile, col0 = static_cast<int>(tile % tiles_n) * kMmTile;
        float c[4][4] = {};
        for (int k0 = 0; k0 < k_end; k0 += kMmFp32Tk) {
            for (int e = threadIdx.x; e < kMmTile * kMmFp32Tk; e += blockDim.x) {
                const int r = e / kMmFp32Tk, kk = e % kMmFp32Tk, row = row0 + r, k = k0 + kk;  // coalesced along k
                as[kk][r] = row < g.m && k < g.k ? a[static_cast<long long>(row) * g.k + k] : 0.0f;
                const int kb = e / kMmTile, cb = e % kMmTile, kr = k0 + kb, col = col0 + cb;  // along n
                bs[kb][cb] = kr < g.k && col < g.n ? b[static_cast<long long>(kr) * g.n + col] : 0.0f;
            }
            __syncthreads();
            // Only k < K: the padding would add nothing.
            const int kn = g.k - k0 < kMmFp32Tk ? g.k - k0 : kMmFp32Tk;
            for (int kk = 0; kk < kn; ++kk) {
                float av[4], bv[4];
                CONFORM_UNROLL
                for (int i = 0; i < 4; ++i) {
                    av[i] = as[kk][ty + 16 * i], bv[i] = bs[kk][tx + 16 * i];
                    if constexpr (Bug::kTf32Operands) av[i] = tf32(av[i]), bv[i] = tf32(bv[i]);
                }
                CONFORM_UNROLL
                for (int i = 0; i < 4; ++i)
                    CONFORM_UNROLL
                    for (int j = 0; j < 4; ++j) c[i][j] = fmaf(av[i], bv[j], c[i][j]);
            }
            __syncthreads();
        }
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
                const int row = row0 + ty + 16 * i, col = col0 + tx + 16 * j;
                if (row < g.m && col < g.n) y[static_cast<long long>(row) * g.n + col] = c[i][j];
            }
    }
}

inline MatmulArgs matmul_args(const KernelCall& c, const char* kernel) {
    const std::string who = kernel;
    if (c.in.size() != 2 || c.out.size() != 1) throw std::invalid_argument(who + ": expects a [M, K], b [K, N] -> y");
    const TensorView &a = c.in[0], &b = c.in[1], &y = c.out[0];
    if (a.rank != 2 || b.rank != 2 || b.shape[0] != a.shape[1])
        throw std::invalid_argument(who + ": a must be [M, K] and b [K, N] with the same K");
    if (y.rank != 2 || y.shape[0] != a.shape[0] || y.shape[1] != b.shape[1])
        throw std::invalid_argument(who + ": y must be [M, N]");
    for (std::int64_t d : {a.shape[0], a.shape[1], b.shape[1]})
        if (d >= (std::int64_t{1} << 31)) throw std::invalid_argument(who + ": a dimension of 2^31 or more");
    return {static_cast<int>(a.shape[0]), static_cast<int>(b.shape[1]), static_cast<int>(a.shape[1])};
}

// On device memory (the host call below, and the benchmarks).  lc.max_blocks
// caps the grid, which strides over the tiles beyond it.
template <class S, class Out, class Bug = MatmulNoBug>
void launch_matmul(const void* a, const void* b, const MatmulArgs& g, Out* y, const Launch& lc, cudaStream_t s) {
    const long long tiles = static_cast<long long>((g.m + kMmTile - 1) / kMmTile) * ((g.n + kMmTile - 1) / kMmTile);
    const dim3 grid(static_cast<unsigned>(std::min<long long>(tiles, lc.max_blocks)));
    if constexpr (std::is_same_v<S, float>) {
        auto* kernel_fn = matmul_fp32<Bug>;
        CONFORM_LAUNCH(kernel_fn, grid, dim3(256), 0, s)(static_cast<const float*>(a), static_cast<const float*>(b), g, y);
    } else {
        auto* kernel_fn = matmul_tc<S, Out, Bug>;
        CONFORM_LAUNCH(kernel_fn, grid, dim3(128), 0, s)(static_cast<const unsigned short*>(a),
                                                         static_cast<const unsigned short*>(b), g, y);
    }
}

template <class S, class Out, class Bug = MatmulNoBug>
void run_matmul_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const MatmulArgs g = matmul_args(c, kernel);
    Stream s(kernel);
    DeviceBuffer a(static_cast<std::size_t>(c.in[0].numel()) * sizeof(S), kernel);
    DeviceBuffer b(static_cast<std::size_t>(c.in[1].numel()) * sizeof(S), kernel);
    upload(c.in[0], a, s.get(), kernel), upload(c.in[1], b, s.get(), kernel);
    DeviceBuffer y(static_cast<std::size_t>(g.m) * static_cast<std::size_t>(g.n) * sizeof(Out), kernel);
    poison(y, s.get(), kernel);
    if (static_cast<long long>(g.m) * g.n > 0) {
        launch_matmul<S, Out, Bug>(a.as<void>(), b.as<void>(), g, y.as<Out>(), lc, s.get());
        check_launch(s.get(), kernel);
    }
    download(y, c.out[0], s.get(), kernel);
}

// k.fn and the determinism property's other launch (one block: every tile
// by the grid-stride loop), for inputs in S and y in Out.
template <class S, class Out, class Bug = MatmulNoBug>
void with_matmul_launches(KernelInfo& k) {
    auto make = [kernel = k.name](Launch l) -> KernelFn {
        return [kernel, l](const KernelCall& c) { run_matmul_as<S, Out, Bug>(c, kernel.c_str(), l); };
    };
    k.fn = make(Launch{});
    k.launches = {{"one block", make(Launch{1, 256})}};
}

// The registry entry of cuda.matmul.<in>[.<out>] (or a mutant's, from
// `base`): acc FP32; the 16-bit kernels declare their tensor cores' block
// FMAs of 16 products (oracle/matmul.cpp reads declared.mma_k).
inline KernelInfo matmul_info(KernelInfo k, Format in, Format out) {
    if (out != in) k.name += std::string(".") + name(out);
    k.in = in, k.out = out, k.acc = Format::fp32;
    if (in != Format::fp32) k.declared = {{"mma_k", 16}};
    return k;
}

}  // namespace conform::CONFORM_CUDA_NS
