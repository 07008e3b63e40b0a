// The Hyper-Connections mixing kernel and host call (hc_residual.cu
// registers cuda.hc_residual and cuda.mhc_residual; the GPU mutants of
// impls/mutants/cuda_hc_residual.cu instantiate it with one bug).
// docs/hc_residual.md holds the formula, special values and the bound.
//
// One block per token (grid-stride over tokens).  The token's coefficients
// go to shared memory first: a_i = σ(ã_i) and c_i = 2σ(c̃_i) by the first n
// threads, B by warp 0 (mHC: its Sinkhorn projection, sinkhorn.cuh's
// sinkhorn_project, also written to the output b) or by every thread (HC:
// B as given); after a barrier the threads stride over the d channels,
// each keeping the channel's n stream values in registers for its n + 1
// outputs.  FP32 arithmetic as the CPU kernels (declared acc fp32): σ as
// (l >= 0 ? 1 : t) / (1 + t), t = e^-|l|; every output the same
// left-to-right chain of separate multiplies and adds (--fmad=false).
#pragma once
#include <stdexcept>
#include <string>

#include "impls/cuda/sinkhorn.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct HcNoBug {
    static constexpr bool kNoBarrier = false;          // channels read the coefficients before they are written
    static constexpr bool kNoTrailingBarrier = false;  // the next token's coefficients overwrite the current ones
};

constexpr int kHcMaxStreams = 32;  // mHC's projection: a lane per column of B

// σ(l) without overflow or cancellation; σ(−∞) = 0, σ(NaN) = NaN.
__device__ __forceinline__ float hc_sigmoid(float l) {
    const float t = expf(-fabsf(l));
    return (signbit(l) ? t : 1.0f) / (1.0f + t);
}

struct HcArgs {
    long long tokens;
    int n, d, iters;
    float eps;
};

template <class S, int N, bool kProject, class Bug>
__global__ void hc_residual_kernel(const S* __restrict__ x, const S* __restrict__ f, const S* __restrict__ a_logits,
                                   const S* __restrict__ b_in, const S* __restrict__ c_logits, S* __restrict__ h,
                                   S* __restrict__ next, S* __restrict__ b_out, HcArgs g) {
    __shared__ float sa[kHcMaxStreams], sc[kHcMaxStreams], sb[kHcMaxStreams * kHcMaxStreams];
    const int n = g.n, d = g.d;
    for (long long t = blockIdx.x; t < g.tokens; t += gridDim.x) {
        const int i = threadIdx.x;
        if (i < n) {
            sa[i] = hc_sigmoid(static_cast<float>(load(a_logits[t * n + i])));
            sc[i] = 2.0f * hc_sigmoid(static_cast<float>(load(c_logits[t * n + i])));
        }
        if constexpr (kProject) {
            if (threadIdx.x < 32) {  // warp 0 projects, every lane of it
                float col[N];
                sinkhorn_project<S, N>(b_in + t * n * n, n, g.iters, g.eps, col);
                const int lane = threadIdx.x;
                CONFORM_UNROLL
                for (int r = 0; r < N; ++r)
                    if (lane < n && r < n) {
                        sb[r * n + lane] = col[r];
                        b_out[t * n * n + r * n + lane] = store<S>(static_cast<double>(col[r]));
                    }
            }
        } else {
            for (int e = threadIdx.x; e < n * n; e += blockDim.x) sb[e] = static_cast<float>(load(b_in[t * n * n + e]));
        }
        if (!Bug::kNoBarrier) __syncthreads();
        const S* xt = x + t * n * d;
        for (int k = threadIdx.x; k < d; k += blockDim.x) {
            float xs[N];
            CONFORM_UNROLL
            for (int j = 0; j < N; ++j) xs[j] = j < n ? static_cast<float>(load(xt[j * d + k])) : 0.0f;
            float hk = sa[0] * xs[0];
            CONFORM_UNROLL
            for (int j = 1; j < N; ++j)
                if (j < n) hk = hk + sa[j] * xs[j];
            h[t * d + k] = store<S>(static_cast<double>(hk));
            const float fk = static_cast<float>(load(f[t * d + k]));
            for (int r = 0; r < n; ++r) {
                float y = sb[r * n] * xs[0];
                CONFORM_UNROLL
                for (int j = 1; j < N; ++j)
                    if (j < n) y = y + sb[r * n + j] * xs[j];
                y = y + sc[r] * fk;
                next[(t * n + r) * d + k] = store<S>(static_cast<double>(y));
            }
        }
        if (!Bug::kNoTrailingBarrier) __syncthreads();  // the shared coefficients are the next token's after this
    }
}

inline HcArgs hc_args(const KernelCall& c, bool project, const char* kernel) {
    const std::string who = kernel;
    if (c.in.size() != 5 || c.out.size() != (project ? 3u : 2u))
        throw std::invalid_argument(who + ": expects x, f, a_logits, b, c_logits -> h, x_next" + (project ? ", b" : ""));
    const TensorView& x = c.in[0];
    if (x.rank != 3) throw std::invalid_argument(who + ": x must be [T, n, d]");
    HcArgs g{x.shape[0], static_cast<int>(x.shape[1]), static_cast<int>(x.shape[2]), 20, 0.0f};
    if (g.n < 1) throw std::invalid_argument(who + ": x needs at least one stream (n >= 1)");
    if (g.n > kHcMaxStreams)
        throw std::invalid_argument(who + ": n = " + std::to_string(g.n) + " > 32 streams is not supported");
    const long long want[5] = {g.tokens * g.n * g.d, g.tokens * g.d, g.tokens * g.n, g.tokens * g.n * g.n, g.tokens * g.n};
    for (int k = 0; k < 5; ++k)
        if (c.in[k].numel() != want[k]) throw std::invalid_argument(who + ": input shapes do not match x");
    if (project) {
        const cpu::SinkhornParams p = cpu::sinkhorn_params(c.params, kernel);
        g.iters = p.iters, g.eps = p.eps;
    }
    return g;
}

template <class S, bool kProject, class Bug = HcNoBug>
void run_hc_residual_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const HcArgs g = hc_args(c, kProject, kernel);
    Stream s(kernel);
    std::vector<DeviceBuffer> in;
    for (const TensorView& v : c.in) {
        in.emplace_back(static_cast<std::size_t>(v.numel()) * sizeof(S), kernel);
        upload(v, in.back(), s.get(), kernel);
    }
    std::vector<DeviceBuffer> out;
    for (const TensorView& v : c.out) {
        out.emplace_back(static_cast<std::size_t>(v.numel()) * sizeof(S), kernel);
        poison(out.back(), s.get(), kernel);
    }
    if (g.tokens > 0 && g.d >= 0) {
        by_row_bucket(g.n, [&](auto bucket) {
            auto* kernel_fn = hc_residual_kernel<S, decltype(bucket)::value, kProject, Bug>;
            const unsigned blocks = static_cast<unsigned>(std::min<long long>(g.tokens, lc.max_blocks));
            CONFORM_LAUNCH(kernel_fn, dim3(blocks), dim3(lc.threads), 0, s.get())(
                in[0].as<S>(), in[1].as<S>(), in[2].as<S>(), in[3].as<S>(), in[4].as<S>(), out[0].as<S>(),
                out[1].as<S>(), kProject ? out[2].as<S>() : nullptr, g);
        });
        check_launch(s.get(), kernel);
    }
    for (std::size_t k = 0; k < c.out.size(); ++k) download(out[k], c.out[k], s.get(), kernel);
}

template <bool kProject, class Bug = HcNoBug>
void run_hc_residual(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_hc_residual_as<decltype(s), kProject, Bug>(c, kernel, lc); });
}

}  // namespace conform::CONFORM_CUDA_NS
