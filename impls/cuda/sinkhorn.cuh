// The Sinkhorn–Knopp kernel and host call (sinkhorn.cu registers them; the
// GPU mutants of impls/mutants/cuda_sinkhorn.cu instantiate them with one
// bug).  docs/sinkhorn.md holds the formula, the two domains and the bound.
//
// One warp per matrix (grid-stride over the batch), lane j holding column j
// in registers (a compile-time bucket N >= n of rows, the rest -inf logits:
// structural zeros that never change a sum).  A row sum or maximum is a
// butterfly over the warp (every lane gets the same bits: IEEE addition is
// commutative), a column sum is the lane's own chain.  FP32 arithmetic as
// the CPU kernels (declared acc fp32): expf/logf within the bound's 2 ulps,
// IEEE division, no FMA contraction (--fmad=false).  Unguarded wide
// matrices take the log domain, decided on the stored logits by the
// predicates the bound uses (numerics/sinkhorn_domain.hpp).
#pragma once
#include <stdexcept>
#include <string>
#include <type_traits>

#include "impls/cpu/sinkhorn.hpp"  // sinkhorn_params: the parameters' validation, shared
#include "impls/cuda/elementwise.cuh"
#include "numerics/sinkhorn_domain.hpp"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct SinkhornNoBug {
    static constexpr bool kStaleColumnSums = false;  // the column step divides by sums taken before the row step
    static constexpr bool kExpDomainOnly = false;    // wide matrices stay in the exp domain (lines underflow)
};

constexpr int kSinkhornMaxN = 32;  // one lane per column

__device__ __forceinline__ float warp_sum(float v) {
    for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(kFullMask, v, m);
    return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
    for (int m = 16; m > 0; m /= 2) v = fmax(v, __shfl_xor_sync(kFullMask, v, m));
    return v;
}

// log sum_j e^(v_j) over the warp's lanes; -inf when every v_j is -inf.
__device__ __forceinline__ float warp_log_sum_exp(float v) {
    const float m = warp_max(v);
    if (m == -INFINITY) return m;
    return m + logf(warp_sum(expf(v - m)));
}

// A line's potential: -LSE, or 0 for a line of structural zeros.
__device__ __forceinline__ float potential(float lse) { return lse == -INFINITY ? 0.0f : -lse; }

// The unguarded log-domain iteration on the row-shifted logits (the CPU's
// sinkhorn_log_matrix): f_i = -LSE_j(L'_ij + g_j), g_j = -LSE_i(L'_ij + f_i),
// b_ij = exp((L'_ij + f_i) + g_j).  c: this lane's column.
template <int N>
__device__ void sinkhorn_log_domain(float (&c)[N], int n, int iters) {
    CONFORM_UNROLL
    for (int i = 0; i < N; ++i) {
        const float mx = warp_max(c[i]);
        if (mx != -INFINITY) c[i] = sinkhorn_below_range(c[i], mx) ? -INFINITY : c[i] - mx;
    }
    float f[N], g = 0.0f;
    CONFORM_UNROLL
    for (int i = 0; i < N; ++i) f[i] = 0.0f;
    for (int t = 0; t < iters; ++t) {
        CONFORM_UNROLL
        for (int i = 0; i < N; ++i) f[i] = i < n ? potential(warp_log_sum_exp(c[i] + g)) : 0.0f;
        float m = -INFINITY;
        CONFORM_UNROLL
        for (int i = 0; i < N; ++i) m = fmaxf(m, c[i] + f[i]);
        float s = 0.0f;
        if (m != -INFINITY) {
            CONFORM_UNROLL
            for (int i = 0; i < N; ++i) s += expf((c[i] + f[i]) - m);
        }
        g = potential(m == -INFINITY ? m : m + logf(s));
    }
    CONFORM_UNROLL
    for (int i = 0; i < N; ++i) c[i] = expf((c[i] + f[i]) + g);
}

// The exp-domain iteration: start exp(L - row max), then `iters` times the
// rows, then the columns, each line divided by (sum + eps) unless that is 0.
template <int N, class Bug>
__device__ void sinkhorn_exp_domain(float (&c)[N], int iters, float eps) {
    CONFORM_UNROLL
    for (int i = 0; i < N; ++i) {
        const float mx = warp_max(c[i]);
        c[i] = mx == -INFINITY ? 0.0f : expf(c[i] - mx);
    }
    for (int t = 0; t < iters; ++t) {
        float stale = 0.0f;
        if constexpr (Bug::kStaleColumnSums) {
            CONFORM_UNROLL
            for (int i = 0; i < N; ++i) stale += c[i];
        }
        CONFORM_UNROLL
        for (int i = 0; i < N; ++i) {
            const float s = warp_sum(c[i]) + eps;
            if (s != 0.0f) c[i] = c[i] / s;
        }
        float s = stale;
        if constexpr (!Bug::kStaleColumnSums) {
            CONFORM_UNROLL
            for (int i = 0; i < N; ++i) s += c[i];
        }
        s += eps;
        if (s != 0.0f) {
            CONFORM_UNROLL
            for (int i = 0; i < N; ++i) c[i] = c[i] / s;
        }
    }
}

// One matrix by the calling warp: its logits `in` (n x n, n <= N) into c,
// lane j's column of the projection (NaN everywhere for a NaN or +inf
// logit).  Every lane of the warp must call it.
template <class S, int N, class Bug = SinkhornNoBug>
__device__ void sinkhorn_project(const S* __restrict__ in, int n, int iters, float eps, float (&c)[N]) {
    const int lane = threadIdx.x % 32;
    const bool mine = lane < n;
    bool poisoned = false, wide = false;
    CONFORM_UNROLL
    for (int i = 0; i < N; ++i) {
        c[i] = mine && i < n ? static_cast<float>(load(in[i * n + lane])) : -INFINITY;
        poisoned = poisoned || isnan(c[i]) || c[i] == INFINITY;
    }
    poisoned = __any_sync(kFullMask, poisoned);
    if (!poisoned && eps == 0.0f && !Bug::kExpDomainOnly) {
        CONFORM_UNROLL
        for (int i = 0; i < N; ++i) {
            const double row_max = warp_max(static_cast<double>(c[i]));  // every lane shuffles: no short circuit
            wide = sinkhorn_wide_entry(c[i], row_max) || wide;
        }
        wide = __any_sync(kFullMask, wide);
    }
    if (wide) sinkhorn_log_domain<N>(c, n, iters);
    else if (!poisoned) sinkhorn_exp_domain<N, Bug>(c, iters, eps);
    if (poisoned) {
        CONFORM_UNROLL
        for (int i = 0; i < N; ++i) c[i] = NAN;
    }
}

template <class S, int N, class Bug>
__global__ void sinkhorn_kernel(const S* __restrict__ logits, S* __restrict__ b, long long count, int n, int iters,
                                float eps) {
    const int lane = threadIdx.x % 32;
    const long long warp = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32;
    const long long warps = static_cast<long long>(gridDim.x) * blockDim.x / 32;
    for (long long k = warp; k < count; k += warps) {  // warp-uniform: every lane takes part in the shuffles
        float c[N];
        sinkhorn_project<S, N, Bug>(logits + k * n * n, n, iters, eps, c);
        S* out = b + k * n * n;
        CONFORM_UNROLL
        for (int i = 0; i < N; ++i)
            if (lane < n && i < n) out[i * n + lane] = store<S>(static_cast<double>(c[i]));
    }
}

// The call's geometry: count matrices of n x n.
struct SinkhornShape {
    long long count = 0;
    int n = 0;
};

inline SinkhornShape sinkhorn_shape(const KernelCall& c, const char* kernel) {
    const std::string who = kernel;
    if (c.in.size() != 1 || c.out.size() != 1) throw std::invalid_argument(who + ": expects logits -> b");
    const TensorView& l = c.in[0];
    if (l.rank != 2 && l.rank != 3) throw std::invalid_argument(who + ": logits must be [n, n] or [batch, n, n]");
    SinkhornShape s;
    s.n = static_cast<int>(l.shape[l.rank - 1]);
    if (l.shape[l.rank - 2] != s.n) throw std::invalid_argument(who + ": logits matrices must be square");
    if (c.out[0].numel() != l.numel()) throw std::invalid_argument(who + ": b must have the shape of logits");
    if (s.n > kSinkhornMaxN)
        throw std::invalid_argument(who + ": n = " + std::to_string(s.n) + " > 32 is not supported (one warp per "
                                    "matrix, a lane per column)");
    s.count = s.n ? l.numel() / (static_cast<long long>(s.n) * s.n) : 0;
    return s;
}

template <class S, int N, class Bug>
void launch_sinkhorn_n(const S* l, S* b, SinkhornShape g, int iters, float eps, const Launch& lc, cudaStream_t s) {
    auto* kernel_fn = sinkhorn_kernel<S, N, Bug>;
    const long long warps_per_block = lc.threads / 32;
    const unsigned blocks = static_cast<unsigned>(
        std::clamp<long long>((g.count + warps_per_block - 1) / warps_per_block, 1, lc.max_blocks));
    CONFORM_LAUNCH(kernel_fn, dim3(blocks), dim3(lc.threads), 0, s)(l, b, g.count, g.n, iters, eps);
}

// Calls fn with std::integral_constant<int, N>, N the smallest of 4, 8, 16,
// 32 that holds n (the row bucket of the registers a lane keeps).
template <class Fn>
void by_row_bucket(int n, Fn&& fn) {
    if (n <= 4) fn(std::integral_constant<int, 4>{});
    else if (n <= 8) fn(std::integral_constant<int, 8>{});
    else if (n <= 16) fn(std::integral_constant<int, 16>{});
    else fn(std::integral_constant<int, 32>{});
}

template <class S, class Bug = SinkhornNoBug>
void launch_sinkhorn(const S* l, S* b, SinkhornShape g, int iters, float eps, const Launch& lc, cudaStream_t s) {
    by_row_bucket(g.n, [&](auto bucket) { launch_sinkhorn_n<S, decltype(bucket)::value, Bug>(l, b, g, iters, eps, lc, s); });
}

template <class S, class Bug = SinkhornNoBug>
void run_sinkhorn_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const SinkhornShape g = sinkhorn_shape(c, kernel);
    const cpu::SinkhornParams p = cpu::sinkhorn_params(c.params, kernel);
    const std::size_t bytes = static_cast<std::size_t>(c.in[0].numel()) * sizeof(S);
    Stream s(kernel);
    DeviceBuffer l(bytes, kernel), b(bytes, kernel);
    poison(b, s.get(), kernel);
    upload(c.in[0], l, s.get(), kernel);
    if (g.count > 0) {
        launch_sinkhorn<S, Bug>(l.as<S>(), b.as<S>(), g, p.iters, p.eps, lc, s.get());
        check_launch(s.get(), kernel);
    }
    download(b, c.out[0], s.get(), kernel);
}

template <class Bug = SinkhornNoBug>
void run_sinkhorn(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_sinkhorn_as<decltype(s), Bug>(c, kernel, lc); });
}

}  // namespace conform::CONFORM_CUDA_NS
