// The residual reads on the GPU (residual.cu registers the kernels; the GPU
// mutants of impls/mutants/cuda_residual.cu instantiate them with one bug).
// docs/residual.md holds the formulas, special values and the bounds.
//
// Both ops take one block per token (grid-stride), FP32 arithmetic as the
// CPU kernels (declared acc fp32), each output rounded once into storage:
// * block_attn_res: per source a block reduction of the squares, the root
//   1/sqrt(fl(fl(sum)/d + eps)) (the exact eps added in double, rounded
//   once, as the CPU), a block reduction of the logit w . ((g v)(1/r)); the
//   softmax over the N sources by one thread in source order (expf within
//   the bound's 2 ulps); h = sum_i alpha_i v_i left to right per channel.
// * gated_residual: z_i = (g_i H_i)(1/r_i) into the block's workspace
//   (n d floats a block, reused token after token), y = z A by r
//   block reductions, l = y B per element left to right, the gate
//   (l >= 0 ? 1 : t)/(1 + t), t = e^-|l| (never overflows), h = sum_i
//   gate_i z_i left to right.
// The sums of squares and dots are block reductions, the CPU's are left to
// right: the bound's gamma_d covers any order.  No atomics.
#pragma once
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "impls/cpu/attn_res.hpp"        // attn_res_geometry: the shapes' validation, shared
#include "impls/cpu/gated_residual.hpp"  // gated_geometry
#include "impls/cuda/device_io.cuh"
#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/hc_residual.cuh"  // hc_sigmoid
#include "impls/cuda/reduce.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels (and NoBug's block
// reduction flags, which block_reduce reads).
struct ResidualNoBug : NoBug {
    static constexpr bool kSourcesTransposed = false;  // block_attn_res: v read as [T, N, d], not [N, T, d]
    static constexpr bool kPlainSigmoid = false;       // gated_residual: 1 / (1 + e^-l), e^-l overflowing for l < -88
    static constexpr bool kRankTailDropped = false;    // gated_residual: y_j for j past the last multiple of 4 left 0
};

// 1 / r of a row of d values (every thread gets it), r as the CPU's
// residual_inv_rms: sqrt of the mean square plus the exact eps rounded once.
template <class Bug, class S>
__device__ float row_inv_rms(const S* __restrict__ x, int d, double eps) {
    float ss = 0.0f;
    for (int k = threadIdx.x; k < d; k += blockDim.x) {
        const float v = static_cast<float>(load(x[k]));
        ss = ss + v * v;
    }
    ss = block_reduce<Bug>(ss, Add{}, 0.0f);
    const float mean = ss / static_cast<float>(d);
    return 1.0f / sqrtf(static_cast<float>(static_cast<double>(mean) + eps));
}

struct AttnResArgs {
    long long tokens = 0;
    int n = 0, d = 0;
    bool has_g = false;
    double eps = 1e-6;
};

template <class S, class Bug>
__global__ void attn_res_rows(const S* __restrict__ v, const S* __restrict__ w, const S* __restrict__ g,
                              S* __restrict__ h, AttnResArgs a) {
    float* logit = dynamic_shared<float>();  // [N], then alpha [N]
    float* alpha = logit + a.n;
    __shared__ bool finite;
    for (long long t = blockIdx.x; t < a.tokens; t += gridDim.x) {
        for (int i = 0; i < a.n; ++i) {
            const long long row = Bug::kSourcesTransposed ? t * a.n + i : i * a.tokens + t;
            const S* x = v + row * a.d;
            const float inv = row_inv_rms<Bug>(x, a.d, a.eps);
            float acc = 0.0f;
            for (int k = threadIdx.x; k < a.d; k += blockDim.x) {
                const float nw = a.has_g ? static_cast<float>(load(g[k])) : 1.0f;
                const float key = (nw * static_cast<float>(load(x[k]))) * inv;
                acc = acc + static_cast<float>(load(w[k])) * key;
            }
            acc = block_reduce<Bug>(acc, Add{}, 0.0f);
            if (threadIdx.x == 0) logit[i] = acc;
        }
        if (threadIdx.x == 0) {  // the CPU kernel's softmax, in source order
            bool ok = true;
            float m = logit[0], sum = 0.0f;
            for (int i = 0; i < a.n; ++i) ok = ok && isfinite(logit[i]), m = logit[i] > m ? logit[i] : m;
            for (int i = 0; i < a.n; ++i) sum = sum + (alpha[i] = expf(logit[i] - m));
            for (int i = 0; i < a.n; ++i) alpha[i] = alpha[i] / sum;
            finite = ok;
        }
        __syncthreads();
        for (int k = threadIdx.x; k < a.d; k += blockDim.x) {
            float acc = 0.0f;
            for (int i = 0; i < a.n; ++i) {
                const long long row = Bug::kSourcesTransposed ? t * a.n + i : i * a.tokens + t;
                const float p = alpha[i] * static_cast<float>(load(v[row * a.d + k]));
                acc = i == 0 ? p : acc + p;
            }
            h[t * a.d + k] = store<S>(finite ? static_cast<double>(acc) : NAN);
        }
        __syncthreads();  // the next token's thread 0 writes logit and alpha
    }
}

inline AttnResArgs attn_res_args(const KernelCall& c) {
    const cpu::AttnResGeometry g = cpu::attn_res_geometry(c);  // the CPU kernels' validation
    AttnResArgs a;
    a.n = static_cast<int>(g.n), a.tokens = g.tokens, a.d = static_cast<int>(g.d), a.has_g = g.has_g;
    a.eps = c.params.get("eps", 1e-6);
    return a;
}

template <class S, class Bug = ResidualNoBug>
void run_attn_res_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const AttnResArgs a = attn_res_args(c);
    Stream s(kernel);
    DeviceBuffer v(static_cast<std::size_t>(c.in[0].numel()) * sizeof(S), kernel),
        w(static_cast<std::size_t>(a.d) * sizeof(S), kernel), g(a.has_g ? static_cast<std::size_t>(a.d) * sizeof(S) : 0, kernel),
        h(static_cast<std::size_t>(a.tokens * a.d) * sizeof(S), kernel);
    upload(c.in[0], v, s.get(), kernel);
    upload(c.in[1], w, s.get(), kernel);
    if (a.has_g) upload(c.in[2], g, s.get(), kernel);
    poison(h, s.get(), kernel);
    if (a.tokens > 0 && a.d > 0) {
        auto* fn = attn_res_rows<S, Bug>;
        CONFORM_LAUNCH(fn, dim3(static_cast<unsigned>(std::min<long long>(a.tokens, lc.max_blocks))), dim3(lc.threads),
                       static_cast<std::size_t>(a.n) * 8, s.get())(v.as<S>(), w.as<S>(), g.as<S>(), h.as<S>(), a);
        check_launch(s.get(), kernel);
    }
    download(h, c.out[0], s.get(), kernel);
}

template <class Bug = ResidualNoBug>
void run_attn_res(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_attn_res_as<decltype(s), Bug>(c, kernel, lc); });
}

struct GatedResArgs {
    long long tokens = 0;
    int n = 0, d = 0, rank = 0;
    double eps = 1e-6;
};

// sigma(l) without overflow: (l >= 0 ? 1 : t) / (1 + t), t = e^-|l| (the
// CPU kernel's and hc_residual's); the mutant's plain form overflows.
template <class Bug>
__device__ __forceinline__ float gate_sigmoid(float l) {
    if constexpr (Bug::kPlainSigmoid) return 1.0f / (1.0f + expf(-l));
    else return hc_sigmoid(l);
}

template <class S, class Bug>
__global__ void gated_res_rows(const S* __restrict__ x, const S* __restrict__ g, const S* __restrict__ A,
                               const S* __restrict__ B, S* __restrict__ h, S* __restrict__ gate, float* __restrict__ zw,
                               float* __restrict__ ww, GatedResArgs a) {
    float* y = dynamic_shared<float>();  // [rank]
    const long long nd = static_cast<long long>(a.n) * a.d;
    for (long long t = blockIdx.x; t < a.tokens; t += gridDim.x) {
        float* z = zw + blockIdx.x * nd;  // the block's workspace, reused token after token
        float* wv = ww + blockIdx.x * nd;
        for (int i = 0; i < a.n; ++i) {
            const S* row = x + (static_cast<long long>(i) * a.tokens + t) * a.d;
            const float inv = row_inv_rms<Bug>(row, a.d, a.eps);
            for (int k = threadIdx.x; k < a.d; k += blockDim.x)
                z[i * a.d + k] = (static_cast<float>(load(g[i * a.d + k])) * static_cast<float>(load(row[k]))) * inv;
        }
        __syncthreads();  // z is the block's: every thread reads all of it
        const int ranks = Bug::kRankTailDropped ? a.rank / 4 * 4 : a.rank;
        for (int j = 0; j < a.rank; ++j) {
            float acc = 0.0f;
            if (j < ranks)
                for (long long m = threadIdx.x; m < nd; m += blockDim.x) acc = acc + z[m] * static_cast<float>(load(A[m * a.rank + j]));
            acc = block_reduce<Bug>(acc, Add{}, 0.0f);
            if (threadIdx.x == 0) y[j] = acc;
        }
        __syncthreads();
        for (long long m = threadIdx.x; m < nd; m += blockDim.x) {
            float l = 0.0f;
            for (int j = 0; j < a.rank; ++j) {
                const float p = y[j] * static_cast<float>(load(B[j * nd + m]));
                l = j == 0 ? p : l + p;
            }
            wv[m] = gate_sigmoid<Bug>(l);
            gate[t * nd + m] = store<S>(static_cast<double>(wv[m]));
        }
        __syncthreads();  // channel k's gates come from other threads
        for (int k = threadIdx.x; k < a.d; k += blockDim.x) {
            float acc = 0.0f;
            for (int i = 0; i < a.n; ++i) {
                const float p = wv[i * a.d + k] * z[i * a.d + k];
                acc = i == 0 ? p : acc + p;
            }
            h[t * a.d + k] = store<S>(static_cast<double>(acc));
        }
        __syncthreads();  // y is rewritten by the next token
    }
}

inline GatedResArgs gated_res_args(const KernelCall& c) {
    const cpu::GatedGeometry g = cpu::gated_geometry(c);  // the CPU kernels' validation
    GatedResArgs a;
    a.n = static_cast<int>(g.n), a.tokens = g.tokens, a.d = static_cast<int>(g.d), a.rank = static_cast<int>(g.rank);
    a.eps = c.params.get("eps", 1e-6);
    return a;
}

template <class S, class Bug = ResidualNoBug>
void run_gated_res_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const GatedResArgs a = gated_res_args(c);
    const auto nd = static_cast<std::size_t>(a.n) * static_cast<std::size_t>(a.d), tokens = static_cast<std::size_t>(a.tokens);
    const auto blocks = static_cast<unsigned>(std::min<long long>(std::max<long long>(a.tokens, 1), lc.max_blocks));
    Stream s(kernel);
    DeviceBuffer x(static_cast<std::size_t>(c.in[0].numel()) * sizeof(S), kernel), g(nd * sizeof(S), kernel),
        A(nd * static_cast<std::size_t>(a.rank) * sizeof(S), kernel), B(nd * static_cast<std::size_t>(a.rank) * sizeof(S), kernel),
        h(tokens * static_cast<std::size_t>(a.d) * sizeof(S), kernel), gate(tokens * nd * sizeof(S), kernel),
        zw(blocks * nd * 4, kernel), ww(blocks * nd * 4, kernel);
    for (int i = 0; i < 4; ++i) upload(c.in[i], i == 0 ? x : i == 1 ? g : i == 2 ? A : B, s.get(), kernel);
    poison(h, s.get(), kernel), poison(gate, s.get(), kernel);
    if (a.tokens > 0 && nd > 0) {
        auto* fn = gated_res_rows<S, Bug>;
        CONFORM_LAUNCH(fn, dim3(blocks), dim3(lc.threads), static_cast<std::size_t>(std::max(a.rank, 1)) * 4, s.get())(
            x.as<S>(), g.as<S>(), A.as<S>(), B.as<S>(), h.as<S>(), gate.as<S>(), zw.as<float>(), ww.as<float>(), a);
        check_launch(s.get(), kernel);
    }
    download(h, c.out[0], s.get(), kernel);
    download(gate, c.out[1], s.get(), kernel);
}

template <class Bug = ResidualNoBug>
void run_gated_res(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_gated_res_as<decltype(s), Bug>(c, kernel, lc); });
}

}  // namespace conform::CONFORM_CUDA_NS
