// The FP8 GEMM's CUDA kernel and host call (fp8_gemm.cu registers
// cuda.fp8_gemm.<codes>[.<out>]; the GPU mutants of impls/mutants/cuda_fp8.cu
// instantiate it with one bug).  docs/fp8.md holds the formula, the budget
// and, under "CUDA kernels", what this computes.
//
// DeepSeek-V3's recipe on the matrix product's tensor-core tiles
// (matmul.cuh): per K block of `block` products the codes are widened to
// BF16 -- exactly: FP8 values have at most 4 significant bits and
// exponents inside BF16's normal range -- as they are staged in shared
// memory, the block sum P is a chain of ceil(block/16) block FMAs (mma.sync
// m16n8k16 bf16, FP32 accumulators) from +0, and P is promoted into an FP32
// accumulator as acc + (P * scale_a) * scale_b (the CPU kernels'
// expression).  No native FP8 mma: its accumulation has not been measured
// (DeepSeek-V3 reports about 14 bits on Hopper), and the BF16 one has.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "impls/cuda/matmul.cuh"
#include "numerics/fp8.hpp"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernel.
struct Fp8NoBug : MatmulNoBug {
    static constexpr bool kBlockSumCarried = false;   // P not reset at a K block's start
    static constexpr bool kScaleBByRow = false;       // scale_b's column block taken from the row index
    static constexpr bool kLastBlockDropped = false;  // K / block whole blocks only: a partial last block never added
};

struct Fp8GemmArgs {
    int m, n, k, block, nb, sbn;  // nb = ceil(K / block) (scale_a's columns), sbn = ceil(N / block)
};

// A code's value as BF16 bits, exactly.  E5M2 is the top byte of an FP16;
// E4M3 (no infinities; S.1111.111 is NaN) by its fields.
template <bool kE5m2>
__device__ __forceinline__ unsigned short fp8_to_bf16(std::uint8_t code) {
    if constexpr (kE5m2) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(__half2float(__ushort_as_half(static_cast<unsigned short>(code << 8)))));
    } else {
        const unsigned sign = (code & 0x80u) << 8, e = (code >> 3) & 15u, m = code & 7u;
        if (e == 15 && m == 7) return static_cast<unsigned short>(sign | 0x7fc0u);
        if (e == 0)  // m 2^-9: at most 3 significant bits, so the top half of the float is exact
            return static_cast<unsigned short>(sign | __float_as_uint(static_cast<float>(m) * 0x1p-9f) >> 16);
        return static_cast<unsigned short>(sign | (e + 120) << 7 | m << 4);  // 2^(e - 7) (1 + m/8)
    }
}

template <class Out, bool kE5m2, class Bug>
__global__ void fp8_gemm_tc(const std::uint8_t* __restrict__ a, const float* __restrict__ sa,
                            const std::uint8_t* __restrict__ b, const float* __restrict__ sb, Fp8GemmArgs g,
                            Out* __restrict__ y) {
    __shared__ MmaTiles tiles;
    const auto cvt = [](std::uint8_t code) { return fp8_to_bf16<kE5m2>(code); };
    const int tiles_n = tiles_along(g.n, false), tiles_m = tiles_along(g.m, false);
    const int blocks = Bug::kLastBlockDropped ? g.k / g.block : g.nb;
    for (long long tile = blockIdx.x; tile < static_cast<long long>(tiles_m) * tiles_n; tile += gridDim.x) {
        const int row0 = static_cast<int>(tile / tiles_n) * kMmTile, col0 = static_cast<int>(tile % tiles_n) * kMmTile;
        float acc[2][4][4] = {}, p[2][4][4] = {};
        for (int kb = 0; kb < blocks; ++kb) {
            const int lo = kb * g.block, hi = g.k - lo < g.block ? g.k : lo + g.block;
            if (!Bug::kBlockSumCarried)
                for_each_accumulator(0, 0, [&](int i, int j, int x, int, int) { p[i][j][x] = 0; });
            for (int k0 = lo; k0 < hi; k0 += kMmTk) {
                stage_rows(a, g.m, g.k, row0, k0, hi, cvt, tiles.a);
                stage_columns(b, g.n, col0, k0, hi, cvt, tiles.b);
                __syncthreads();
                mma_tiles<__nv_bfloat16, MatmulNoBug>(tiles, hi - k0, p);
                __syncthreads();  // the tiles are the next k step's after this
            }
            for_each_accumulator(row0, col0, [&](int i, int j, int x, int row, int col) {
                if (row >= g.m || col >= g.n) return;
                const int cb = Bug::kScaleBByRow ? (row / g.block < g.sbn ? row / g.block : g.sbn - 1) : col / g.block;
                acc[i][j][x] = acc[i][j][x] + (p[i][j][x] * sa[static_cast<long long>(row) * g.nb + kb]) * sb[kb * g.sbn + cb];
            });
        }
        for_each_accumulator(row0, col0, [&](int i, int j, int x, int row, int col) {
            if (row < g.m && col < g.n) y[static_cast<long long>(row) * g.n + col] = store<Out>(acc[i][j][x]);
        });
    }
}

inline Fp8GemmArgs fp8_gemm_args(const KernelCall& c, const char* kernel, bool e5m2) {
    const std::string who = kernel;
    if (c.in.size() != 4 || c.out.size() != 1) throw std::invalid_argument(who + ": expects a, scale_a, b, scale_b -> y");
    const Fp8GemmDims d = fp8_gemm_dims(c.in, c.params);  // names the input and dimension that is wrong
    const Format codes = e5m2 ? Format::fp8_e5m2 : Format::fp8_e4m3;
    if (c.in[0].format != codes || c.in[2].format != codes)
        throw std::invalid_argument(who + ": a and b must be " + name(codes) + " codes");
    for (std::int64_t v : {d.m, d.k, d.n})
        if (v >= (std::int64_t{1} << 31)) throw std::invalid_argument(who + ": a dimension of 2^31 or more");
    return {static_cast<int>(d.m), static_cast<int>(d.n), static_cast<int>(d.k), static_cast<int>(std::min<std::int64_t>(d.block, 1 << 30)),
            static_cast<int>(ceil_div(d.k, d.block)), static_cast<int>(ceil_div(d.n, d.block))};
}

template <class Out, bool kE5m2, class Bug = Fp8NoBug>
void run_fp8_gemm_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const Fp8GemmArgs g = fp8_gemm_args(c, kernel, kE5m2);
    Stream s(kernel);
    DeviceBuffer a(static_cast<std::size_t>(c.in[0].numel()), kernel), b(static_cast<std::size_t>(c.in[2].numel()), kernel);
    DeviceBuffer sa(static_cast<std::size_t>(c.in[1].numel()) * 4, kernel), sb(static_cast<std::size_t>(c.in[3].numel()) * 4, kernel);
    upload(c.in[0], a, s.get(), kernel), upload(c.in[1], sa, s.get(), kernel);
    upload(c.in[2], b, s.get(), kernel), upload(c.in[3], sb, s.get(), kernel);
    DeviceBuffer y(static_cast<std::size_t>(g.m) * static_cast<std::size_t>(g.n) * sizeof(Out), kernel);
    poison(y, s.get(), kernel);
    if (static_cast<long long>(g.m) * g.n > 0) {
        const long long tiles = static_cast<long long>((g.m + kMmTile - 1) / kMmTile) * ((g.n + kMmTile - 1) / kMmTile);
        auto* kernel_fn = fp8_gemm_tc<Out, kE5m2, Bug>;
        CONFORM_LAUNCH(kernel_fn, dim3(static_cast<unsigned>(std::min<long long>(tiles, lc.max_blocks))), dim3(128), 0,
                       s.get())(a.as<std::uint8_t>(), sa.as<float>(), b.as<std::uint8_t>(), sb.as<float>(), g, y.as<Out>());
        check_launch(s.get(), kernel);
    }
    download(y, c.out[0], s.get(), kernel);
}

// k.fn and the determinism property's other launch (one block: every tile
// by the grid-stride loop); the entry of cuda.fp8_gemm.<codes>[.<out>] or
// of a mutant (from `base`): acc FP32, block sums on tensor cores (declared
// mma_k 16, read by oracle/fp8.cpp).
template <class Bug = Fp8NoBug>
KernelInfo fp8_gemm_info(KernelInfo k, Format codes, Format out) {
    if (out != Format::bf16) k.name += std::string(".") + name(out);
    k.in = codes, k.out = out, k.acc = Format::fp32;
    k.declared = {{"mma_k", 16}};
    const bool e5m2 = codes == Format::fp8_e5m2;
    auto make = [kernel = k.name, e5m2, out](Launch l) -> KernelFn {
        return [kernel, e5m2, out, l](const KernelCall& c) {
            if (out == Format::fp32) {
                if (e5m2) run_fp8_gemm_as<float, true, Bug>(c, kernel.c_str(), l);
                else run_fp8_gemm_as<float, false, Bug>(c, kernel.c_str(), l);
            } else {
                if (e5m2) run_fp8_gemm_as<__nv_bfloat16, true, Bug>(c, kernel.c_str(), l);
                else run_fp8_gemm_as<__nv_bfloat16, false, Bug>(c, kernel.c_str(), l);
            }
        };
    };
    k.fn = make(Launch{});
    k.launches = {{"one block", make(Launch{1, 128})}};
    return k;
}

}  // namespace conform::CONFORM_CUDA_NS
