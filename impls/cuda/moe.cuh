// The MoE router's kernels and host call (moe.cu registers them; the GPU
// mutants of impls/mutants/cuda_moe.cu instantiate them with one bug).
// docs/moe.md holds the formula, the ambiguity-aware verdict and the bound.
//
// Three launches, no host round-trip between them:
// 1. logits [T, E]: one block per token (grid-stride), a thread per expert,
//    the chain acc = fmaf(x_tc, w_ce, acc) from +0 in the CPU kernels' order
//    (chain_index) -- the CPU scalar kernel's chain, so the logits are its
//    bits.
// 2. routing: one warp per token (grid-stride), the token's row in shared
//    memory.  Softmax (warp max, expf of the shifted logits, a warp sum,
//    IEEE division) or sigmoid, scores p + b; grouped, lane g scores group
//    g (its largest, or its two largest summed, in expert order as the CPU)
//    and topk_groups warp argmaxes keep the best groups (ties to the lower
//    group); k warp argmaxes pick the experts (ties to the lower index).
//    The weights' sum runs over the chosen experts in expert order (the
//    CPU's bits for the same p).  FP32 throughout, expf within the bound's
//    2 ulps.
// 3. capacity and loss: one block, a thread per expert, which walks the
//    assignments in token order (keeping its first floor(c T k / E)) and
//    sums its p over the tokens in double; thread 0 sums the experts' terms
//    in expert order.  No atomics: every launch configuration gives the
//    same bits.
#pragma once
#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "impls/cpu/moe.hpp"  // router_params: the parameters' validation, shared with the CPU kernels
#include "impls/cuda/device_io.cuh"
#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/reduce.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct RouterNoBug {
    static constexpr bool kArgmaxHalfWarp = false;     // the top-k argmax butterfly spans 16 lanes, not 32
    static constexpr bool kUnbiasedGroups = false;     // group scores from p, without the selection bias
    static constexpr bool kCapacitySlotMajor = false;  // capacity filled slot by slot (every token's first choice first)
    static constexpr bool kBf16Logits = false;         // the GEMM's logits stored in bf16 before the softmax
};

struct RouterArgs {
    long long t = 0;
    int c = 0, e = 0, k = 0;
    bool sigmoid = false, renormalize = true, has_bias = false;
    int groups = 1, topk_groups = 1, group_top = 2;
    float scaling = 1;
    double cap = INFINITY;  // assignments each expert keeps; +inf: no capacity
};

// What routing leaves for the capacity and loss launch, besides the outputs.
struct RouterWork {
    float* idx;              // [T, k] the chosen experts (exact values; NaN on a non-finite token)
    float* wt;               // [T, k]
    float* kept;             // [T, k]
    float* p;                // [T, E] each token's probabilities
    double* all;             // [T] sum_i p_i in double, expert order (sigmoid's normalizer)
    unsigned char* bad;      // [T] 1: a non-finite logit
};

template <class S, class Bug>
__global__ void router_logits(const S* __restrict__ x, const S* __restrict__ w, float* __restrict__ l, RouterArgs a) {
    for (long long t = blockIdx.x; t < a.t; t += gridDim.x)
        for (int e = threadIdx.x; e < a.e; e += blockDim.x) {
            const S* xr = x + t * a.c;
            float acc = 0.0f;
            for (int p = 0; p < a.c; ++p) {
                const int c = chain_index<S>(p, a.c);
                acc = fmaf(static_cast<float>(load(xr[c])), static_cast<float>(load(w[static_cast<long long>(c) * a.e + e])), acc);
            }
            if constexpr (Bug::kBf16Logits) acc = __bfloat162float(__float2bfloat16(acc));
            l[t * a.e + e] = acc;
        }
}

// The best of the entries [0, n) of `v` not yet taken (taken[i] < 0: free;
// a taken entry holds its slot), ties to the lower index: the warp's argmax.
template <bool kHalfWarp>
__device__ __forceinline__ int warp_pick(const float* v, const int* taken, int n) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = threadIdx.x % 32; i < n; i += 32)
        if (taken[i] < 0 && comes_before(v[i], i, bv, bi)) bv = v[i], bi = i;
    warp_argmax<kHalfWarp>(bv, bi);
    return bi;
}

// Per warp in shared memory: p, the choosing scores, the slot of each
// expert (-1 free), the group scores and the groups' kept marks (E words each).
constexpr int kRouterWordsPerExpert = 5;

// Group-limited selection: the experts outside the topk_groups groups of
// largest score get a choosing score of -inf.
template <class Bug>
__device__ void router_limit_groups(const RouterArgs& a, const float* p, float* choose, float* gs, int* gkept) {
    if (a.groups == 1 || a.topk_groups == a.groups) return;
    const int lane = threadIdx.x % 32, n = a.e / a.groups;
    for (int g = lane; g < a.groups; g += 32) {
        const float* v = (Bug::kUnbiasedGroups ? p : choose) + g * n;
        float top = -INFINITY, second = -INFINITY;
        for (int i = 0; i < n; ++i) {
            if (v[i] > top) second = top, top = v[i];
            else if (v[i] > second) second = v[i];
        }
        gs[g] = a.group_top == 2 ? top + second : top;
        gkept[g] = -1;
    }
    __syncwarp();
    for (int j = 0; j < a.topk_groups; ++j) {
        const int g = warp_pick<false>(gs, gkept, a.groups);
        if (lane == 0 && g < a.groups) gkept[g] = j;  // g = INT_MAX only if no score is comparable (router_params refuses that)
        __syncwarp();
    }
    for (int i = lane; i < a.e; i += 32)
        if (gkept[i / n] < 0) choose[i] = -INFINITY;
    __syncwarp();
}

template <class S, class Bug>
__global__ void router_route(const float* __restrict__ logits, const float* __restrict__ bias, RouterArgs a, RouterWork o) {
    const int lane = threadIdx.x % 32, wib = threadIdx.x / 32;
    float* p = dynamic_shared<float>() + static_cast<long long>(wib) * kRouterWordsPerExpert * a.e;
    float* choose = p + a.e;
    int* slot = reinterpret_cast<int*>(choose + a.e);
    float* gs = reinterpret_cast<float*>(slot + a.e);
    int* gkept = reinterpret_cast<int*>(gs + a.e);
    const long long warp = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32;
    const long long warps = static_cast<long long>(gridDim.x) * blockDim.x / 32;
    for (long long t = warp; t < a.t; t += warps) {  // warp-uniform: every lane takes part in the shuffles
        const float* l = logits + t * a.e;
        bool bad = false;
        float m = -INFINITY;
        for (int i = lane; i < a.e; i += 32) bad = bad || !isfinite(l[i]), m = fmaxf(m, l[i]);
        if (__any_sync(kFullMask, bad)) {
            for (int j = lane; j < a.k; j += 32) o.idx[t * a.k + j] = o.wt[t * a.k + j] = o.kept[t * a.k + j] = NAN;
            if (lane == 0) o.bad[t] = 1;
            continue;
        }
        m = warp_reduce(m, [](float u, float v) { return fmaxf(u, v); });
        float sum = 0.0f;
        for (int i = lane; i < a.e; i += 32) {
            p[i] = a.sigmoid ? 1.0f / (1.0f + expf(-l[i])) : expf(l[i] - m);
            sum += p[i];
        }
        sum = warp_reduce(sum, Add{});
        for (int i = lane; i < a.e; i += 32) {
            if (!a.sigmoid) p[i] = p[i] / sum;
            choose[i] = p[i] + (a.has_bias ? bias[i] : 0.0f);
            slot[i] = -1;
        }
        __syncwarp();
        router_limit_groups<Bug>(a, p, choose, gs, gkept);
        for (int j = 0; j < a.k; ++j) {
            const int i = warp_pick<Bug::kArgmaxHalfWarp>(choose, slot, a.e);
            if (lane == 0 && i < a.e) slot[i] = j;
            __syncwarp();
        }
        float chosen = 0.0f;
        double all = 0.0;
        if (lane == 0)
            for (int i = 0; i < a.e; ++i) {
                if (slot[i] >= 0) chosen += p[i];
                all += p[i];
            }
        chosen = __shfl_sync(kFullMask, chosen, 0);
        for (int i = lane; i < a.e; i += 32) {
            o.p[t * a.e + i] = p[i];
            if (slot[i] < 0) continue;
            const long long at = t * a.k + slot[i];
            o.idx[at] = static_cast<float>(i);
            o.wt[at] = (a.renormalize ? p[i] / chosen : p[i]) * a.scaling;
            o.kept[at] = 1.0f;
        }
        if (lane == 0) o.all[t] = all, o.bad[t] = 0;
        __syncwarp();
    }
}

// One block: thread e (strided) walks expert e's assignments in token
// order for the capacity and sums its p over the tokens; the loss is
// E / T^2 sum_e count_e P_e in double, NaN when any token is non-finite.
template <class Bug>
__global__ void router_finish(RouterArgs a, RouterWork o, float* __restrict__ loss) {
    double* term = dynamic_shared<double>();
    for (int e = threadIdx.x; e < a.e; e += blockDim.x) {
        double count = 0, used = 0, p_sum = 0;
        const long long outer = Bug::kCapacitySlotMajor ? a.k : a.t, inner = Bug::kCapacitySlotMajor ? a.t : a.k;
        for (long long u = 0; u < outer; ++u)
            for (long long v = 0; v < inner; ++v) {
                const long long t = Bug::kCapacitySlotMajor ? v : u, at = t * a.k + (Bug::kCapacitySlotMajor ? u : v);
                if (o.bad[t] || o.idx[at] != static_cast<float>(e)) continue;
                ++count;
                if (a.cap == INFINITY) continue;
                const bool keep = used < a.cap;
                used += keep;
                o.kept[at] = keep ? 1.0f : 0.0f;
                if (!keep) o.wt[at] = 0.0f;
            }
        for (long long t = 0; t < a.t; ++t)
            if (!o.bad[t]) p_sum += a.sigmoid ? o.p[t * a.e + e] / o.all[t] : static_cast<double>(o.p[t * a.e + e]);
        term[e] = count * p_sum;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    bool any_bad = false;
    for (long long t = 0; t < a.t; ++t) any_bad = any_bad || o.bad[t];
    double l = 0;
    for (int e = 0; e < a.e; ++e) l += term[e];
    l *= static_cast<double>(a.e) / (static_cast<double>(a.t) * static_cast<double>(a.t));
    loss[0] = any_bad ? NAN : static_cast<float>(l);
}

inline RouterArgs router_args(const KernelCall& c, const char* kernel) {
    const std::string who = kernel;
    if (c.in.size() < 2 || c.out.size() != 4) throw std::invalid_argument(who + ": expects x, w[, selection_bias] -> indices, weights, kept, loss");
    if (c.in[0].rank != 2 || c.in[1].rank != 2 || c.in[1].shape[0] != c.in[0].shape[1])
        throw std::invalid_argument(who + ": x must be [T, C] and w [C, E]");
    const cpu::RouterParams r = cpu::router_params(c);
    if (c.in[1].format != c.in[0].format) throw std::invalid_argument(who + ": x and w must share one format");
    RouterArgs a;
    a.t = r.t, a.c = static_cast<int>(r.c), a.e = static_cast<int>(r.e), a.k = static_cast<int>(r.k);
    a.sigmoid = r.sigmoid, a.renormalize = r.renormalize;
    a.has_bias = c.in.size() > 2 && c.in[2].data != nullptr;
    a.groups = static_cast<int>(r.groups), a.topk_groups = static_cast<int>(r.topk_groups);
    a.group_top = static_cast<int>(r.group_top), a.scaling = r.scaling;
    if (r.capacity > 0) a.cap = std::floor(r.capacity * static_cast<double>(r.t * r.k) / static_cast<double>(r.e));
    const long long per_warp = static_cast<long long>(kRouterWordsPerExpert) * 4 * a.e;
    if (per_warp > 48 * 1024)
        throw std::invalid_argument(who + ": E = " + std::to_string(a.e) + " experts do not fit one warp's 48 KiB of shared memory");
    return a;
}

// The router's device buffers: the outputs and the scratch of its launches.
struct RouterDevice {
    DeviceBuffer logits, p, all, bad, idx, wt, kept, loss;
    RouterDevice(const RouterArgs& a, const char* kernel)
        : logits(te(a) * 4, kernel), p(te(a) * 4, kernel), all(static_cast<std::size_t>(a.t) * 8, kernel),
          bad(static_cast<std::size_t>(a.t), kernel), idx(tk(a) * 4, kernel), wt(tk(a) * 4, kernel), kept(tk(a) * 4, kernel),
          loss(4, kernel) {}
    RouterWork work() const {
        return {idx.as<float>(), wt.as<float>(), kept.as<float>(), p.as<float>(), all.as<double>(), bad.as<unsigned char>()};
    }
    static std::size_t te(const RouterArgs& a) { return static_cast<std::size_t>(a.t) * static_cast<std::size_t>(a.e); }
    static std::size_t tk(const RouterArgs& a) { return static_cast<std::size_t>(a.t) * static_cast<std::size_t>(a.k); }
};

// The selection bias (if the call has one) on the device as the FP32 values
// the CPU kernels add, whatever its format (the suite's is FP32).
inline DeviceBuffer router_bias(const KernelCall& c, const RouterArgs& a, cudaStream_t s, const char* kernel) {
    DeviceBuffer b(a.has_bias ? static_cast<std::size_t>(a.e) * 4 : 0, kernel);
    if (a.has_bias) {
        Tensor bias(Format::fp32, {a.e});
        for (int i = 0; i < a.e; ++i) bias.set_value(i, static_cast<float>(c.in[2].value(i)));
        upload(bias.view(), b, s, kernel);
    }
    return b;
}

// The three launches on device memory (run_router_as; the MoE layers, moe_layer.cuh).
template <class S, class Bug = RouterNoBug>
void launch_router(const S* x, const S* w, const float* bias, const RouterArgs& a, const RouterDevice& d, const Launch& lc,
                   cudaStream_t s) {
    const RouterWork o = d.work();
    const long long per_warp = static_cast<long long>(kRouterWordsPerExpert) * 4 * a.e;
    const long long warps = std::clamp<long long>(48 * 1024 / std::max<long long>(per_warp, 1), 1, lc.threads / 32);
    if (a.t > 0) {
        auto* logits_fn = router_logits<S, Bug>;
        CONFORM_LAUNCH(logits_fn, dim3(static_cast<unsigned>(std::min<long long>(a.t, lc.max_blocks))), dim3(lc.threads), 0,
                       s)(x, w, d.logits.as<float>(), a);
        auto* route_fn = router_route<S, Bug>;
        const unsigned blocks = static_cast<unsigned>(std::clamp<long long>((a.t + warps - 1) / warps, 1, lc.max_blocks));
        CONFORM_LAUNCH(route_fn, dim3(blocks), dim3(static_cast<unsigned>(warps * 32)), static_cast<std::size_t>(warps * per_warp),
                       s)(d.logits.as<float>(), bias, a, o);
    }
    auto* finish_fn = router_finish<Bug>;
    CONFORM_LAUNCH(finish_fn, dim3(1), dim3(lc.threads), static_cast<std::size_t>(a.e) * 8, s)(a, o, d.loss.as<float>());
}

template <class S, class Bug = RouterNoBug>
void run_router_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const RouterArgs a = router_args(c, kernel);
    Stream s(kernel);
    DeviceBuffer x(static_cast<std::size_t>(c.in[0].numel()) * sizeof(S), kernel),
        w(static_cast<std::size_t>(c.in[1].numel()) * sizeof(S), kernel);
    upload(c.in[0], x, s.get(), kernel);
    upload(c.in[1], w, s.get(), kernel);
    const DeviceBuffer b = router_bias(c, a, s.get(), kernel);
    const RouterDevice d(a, kernel);
    for (const DeviceBuffer* o : {&d.idx, &d.wt, &d.kept, &d.loss}) poison(*o, s.get(), kernel);
    launch_router<S, Bug>(x.as<S>(), w.as<S>(), b.as<float>(), a, d, lc, s.get());
    check_launch(s.get(), kernel);
    download(d.idx, c.out[0], s.get(), kernel);
    download(d.wt, c.out[1], s.get(), kernel);
    download(d.kept, c.out[2], s.get(), kernel);
    download(d.loss, c.out[3], s.get(), kernel);
}

template <class Bug = RouterNoBug>
void run_router(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_router_as<decltype(s), Bug>(c, kernel, lc); });
}

}  // namespace conform::CONFORM_CUDA_NS
