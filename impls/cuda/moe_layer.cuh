// The MoE layers (ops moe, latent_moe) on the GPU (moe_layer.cu registers
// the kernels; impls/mutants/cuda_moe_layer.cu instantiates them with one
// bug).  docs/moe.md holds the formula, the verdict and the bound.
//
// The CPU scalar kernels' arithmetic, on the device with no host
// round-trip: moe.cuh's router launches; every GEMM a thread per output
// element of a (row, expert) pair -- the chain acc = fmaf(a_i, b_ij, acc)
// from +0 in the CPU kernels' order (chain_index), the CPU's bits, stored
// in x's format; the routed experts on each token's kept slots (no
// gather: a slot's pair reads the token's row), the shared experts on
// every token; silu(gate) up in FP32, stored; a thread per (token,
// channel) for the routed sum over the token's experts in ascending
// expert order (the CPU's order); latent_moe's u, RMSNorm(u) (the sum of
// squares in channel order by one lane) and its latent_up product stored;
// and a block per token adding the shared experts in FP32 and storing y
// once, NaN throughout a token the router found non-finite or whose row
// meets a NaN or an infinity.
#pragma once
#include <string>
#include <vector>

#include "impls/cuda/moe.cuh"
#include "numerics/moe_slots.hpp"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct LayerNoBug {
    static constexpr bool kDownByToken = false;     // the down GEMM reads the activation row of the token, not of its slot
    static constexpr bool kDroppedKept = false;     // slots over capacity computed and added (kept ignored)
    static constexpr bool kNormUnweighted = false;  // latent_moe: RMSNorm's weight never applied
};

// The (row, expert) pairs a GEMM runs on.  Routed: pair p = t k + j is
// token t's slot j, active when the router kept it (and the token is
// finite); otherwise (idx null) pair p is row p / per with expert p % per.
struct MoePairs {
    const float* idx = nullptr;
    const float* kept = nullptr;
    const unsigned char* bad = nullptr;
    long long count = 0, per = 1;
};

template <class Bug>
__device__ __forceinline__ bool pair_of(const MoePairs& pr, long long p, long long* row, long long* e) {
    *row = p / pr.per;
    if (!pr.idx) {
        *e = p % pr.per;
        return true;
    }
    if (pr.bad[*row] || (!Bug::kDroppedKept && pr.kept[p] != 1.0f)) return false;
    *e = static_cast<long long>(pr.idx[p]);
    return true;
}

// out [count, n]: for an active pair p, out[p, j] = the chain over i < kd
// of a[r, i] b_e[i, j] stored in S, r = its row (a_by_pair: p itself),
// b_e = b + e kd n.
template <class S, class Bug>
__global__ void moe_pair_gemm(const S* __restrict__ a, const S* __restrict__ b, S* __restrict__ out, MoePairs pr, long long kd,
                              long long n, bool a_by_pair) {
    for (long long x = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; x < pr.count * n;
         x += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long p = x / n, j = x % n;
        long long row, e;
        if (!pair_of<Bug>(pr, p, &row, &e)) continue;
        const S* ar = a + (a_by_pair ? p : row) * kd;
        const S* be = b + e * kd * n;
        float acc = 0.0f;
        for (long long q = 0; q < kd; ++q) {
            const long long i = chain_index<S>(static_cast<int>(q), static_cast<int>(kd));
            acc = fmaf(static_cast<float>(load(ar[i])), static_cast<float>(load(be[i * n + j])), acc);
        }
        out[x] = store<S>(acc);
    }
}

// act [count, f] = silu(h_gate) h_up in FP32, stored; h [count, 2f].
template <class S, class Bug>
__global__ void moe_swiglu(const S* __restrict__ h, S* __restrict__ act, MoePairs pr, long long f) {
    for (long long x = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; x < pr.count * f;
         x += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long p = x / f, i = x % f;
        long long row, e;
        if (!pair_of<Bug>(pr, p, &row, &e)) continue;
        const float g = static_cast<float>(load(h[p * 2 * f + i])), u = static_cast<float>(load(h[p * 2 * f + f + i]));
        const float s = g / (1.0f + expf(-g));
        act[x] = store<S>(s * u);
    }
}

// acc [T, W] = sum over token t's active slots, in ascending expert order,
// of weight * ye (FP32 products and sums, the CPU's order).
template <class S, class Bug>
__global__ void moe_routed_sum(const S* __restrict__ ye, const float* __restrict__ wt, float* __restrict__ acc, MoePairs pr,
                               long long t_count, long long w) {
    for (long long x = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; x < t_count * w;
         x += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long t = x / w, i = x % w;
        float sum = 0.0f;
        float prev = -1.0f;  // the previous expert added; each step the next larger one
        for (long long step = 0; step < pr.per; ++step) {
            long long pick = -1;
            for (long long j = 0; j < pr.per; ++j) {
                long long row, e;
                if (!pair_of<Bug>(pr, t * pr.per + j, &row, &e)) continue;
                const float id = pr.idx[t * pr.per + j];
                if (id > prev && (pick < 0 || id < pr.idx[t * pr.per + pick])) pick = j;
            }
            if (pick < 0) break;
            const long long p = t * pr.per + pick;
            sum += wt[p] * static_cast<float>(load(ye[p * w + i]));
            prev = pr.idx[p];
        }
        acc[x] = sum;
    }
}

// latent_moe: u = acc stored in S, then RMSNorm(u) (weight wn if given)
// stored, a warp per token, the sum of squares in channel order by lane 0.
template <class S, class Bug>
__global__ void moe_latent_norm(const float* __restrict__ acc, const S* __restrict__ wn, S* __restrict__ n, long long t_count,
                                long long w, float eps, bool normalized) {
    const int lane = threadIdx.x % 32;
    const long long warps = static_cast<long long>(gridDim.x) * blockDim.x / 32;
    for (long long t = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32; t < t_count; t += warps) {
        const float* row = acc + t * w;
        const auto u = [&](long long i) { return static_cast<float>(load(store<S>(row[i]))); };
        float ss = 0.0f;
        if (lane == 0)
            for (long long i = 0; i < w; ++i) ss += u(i) * u(i);
        ss = __shfl_sync(kFullMask, ss, 0);
        const float r = sqrtf(ss / static_cast<float>(w) + eps);
        for (long long i = lane; i < w; i += 32) {
            const float g = wn && !Bug::kNormUnweighted ? static_cast<float>(load(wn[i])) : 1.0f;
            n[t * w + i] = store<S>(normalized ? g * u(i) / r : u(i));
        }
    }
}

// y [T, C] = base + the shared experts' outputs in order, FP32, stored once;
// a block per token: NaN throughout a router-bad token or a row with a NaN
// or an infinity (stored, then overwritten after the block's vote).  base:
// FP32 (routed sum) or S (latent_up's product).
template <class S, class Bug>
__global__ void moe_finish(const float* __restrict__ base32, const S* __restrict__ base_s, const S* __restrict__ ys,
                           const unsigned char* __restrict__ bad, S* __restrict__ y, long long t_count, long long c,
                           long long shared) {
    for (long long t = blockIdx.x; t < t_count; t += gridDim.x) {
        int nonfinite = 0;
        for (long long i = threadIdx.x; i < c; i += blockDim.x) {
            float v = base32 ? base32[t * c + i] : static_cast<float>(load(base_s[t * c + i]));
            for (long long s = 0; s < shared; ++s) v += static_cast<float>(load(ys[(t * shared + s) * c + i]));
            nonfinite += !isfinite(v);
            y[t * c + i] = store<S>(v);
        }
        // Each thread overwrites only the elements it stored itself.
        if (bad[t] || block_reduce(nonfinite, Add{}, 0) > 0)
            for (long long i = threadIdx.x; i < c; i += blockDim.x) y[t * c + i] = store<S>(NAN);
    }
}

// The registry entry of cuda.<op>.<fmt> or of a mutant built on it (moe_layer.cu).
KernelInfo moe_layer_info(KernelInfo k, Format f);

template <class S, class Bug = LayerNoBug>
void run_moe_layer_as(const KernelCall& c, bool latent, const char* kernel, const Launch& lc) {
    using moe_slots::Layer;
    const std::string op = latent ? "latent_moe" : "moe";
    const Layer l = moe_slots::read_layer(op, c.params, c.in);
    if (l.staged || c.out.size() != moe_slots::n_outputs)
        throw std::invalid_argument(std::string(kernel) + ": expects the op's inputs -> y, indices, weights");
    const std::vector<TensorView> rin = moe_slots::router_inputs(l, c.in);
    const std::vector<TensorView> rout(4);
    const RouterArgs ra = router_args(KernelCall{c.params, rin, rout}, kernel);
    Stream s(kernel);
    const auto z = [](long long n) { return static_cast<std::size_t>(n); };
    std::vector<DeviceBuffer> in;
    in.reserve(moe_slots::n_slots);
    const auto dev = [&](moe_slots::Slot slot) -> const S* {
        if (!l.has(slot)) return nullptr;
        const TensorView& v = l.in(c.in, slot);
        in.emplace_back(z(v.numel()) * sizeof(S), kernel);
        upload(v, in.back(), s.get(), kernel);
        return in.back().as<S>();
    };
    const S *x = dev(moe_slots::x), *router = dev(moe_slots::router), *gu = dev(moe_slots::gate_up),
            *dn = dev(moe_slots::down), *sgu = dev(moe_slots::shared_gate_up), *sdn = dev(moe_slots::shared_down),
            *ldown = dev(moe_slots::latent_down), *lup = dev(moe_slots::latent_up), *wn = dev(moe_slots::norm_weight);
    const DeviceBuffer bias = router_bias(KernelCall{c.params, rin, rout}, ra, s.get(), kernel);
    const RouterDevice rd(ra, kernel);
    const long long tk = l.t * l.k, ts = l.t * l.s;
    DeviceBuffer zb(z(latent ? l.t * l.w : 0) * sizeof(S), kernel), h(z(tk * 2 * l.f) * sizeof(S), kernel),
        act(z(tk * l.f) * sizeof(S), kernel), ye(z(tk * l.w) * sizeof(S), kernel), acc(z(l.t * l.w) * 4, kernel),
        nb(z(latent ? l.t * l.w : 0) * sizeof(S), kernel), lat(z(latent ? l.t * l.c : 0) * sizeof(S), kernel),
        sh(z(ts * 2 * l.g) * sizeof(S), kernel), sact(z(ts * l.g) * sizeof(S), kernel), sy(z(ts * l.c) * sizeof(S), kernel),
        y(z(l.t * l.c) * sizeof(S), kernel);
    for (const DeviceBuffer* d : {&rd.idx, &rd.wt, static_cast<const DeviceBuffer*>(&y)}) poison(*d, s.get(), kernel);
    launch_router<S>(x, router, bias.as<float>(), ra, rd, lc, s.get());
    if (l.t > 0) {
        const auto gemm = [&](const S* a, const S* b, S* out, const MoePairs& pr, long long kd, long long n, bool by_pair) {
            auto* fn = moe_pair_gemm<S, Bug>;
            if (pr.count * n > 0)
                CONFORM_LAUNCH(fn, dim3(blocks_for(pr.count * n, lc)), dim3(lc.threads), 0, s.get())(a, b, out, pr, kd, n, by_pair);
        };
        const auto swiglu = [&](const S* hh, S* out, const MoePairs& pr, long long f) {
            auto* fn = moe_swiglu<S, Bug>;
            if (pr.count * f > 0)
                CONFORM_LAUNCH(fn, dim3(blocks_for(pr.count * f, lc)), dim3(lc.threads), 0, s.get())(hh, out, pr, f);
        };
        MoePairs routed{rd.idx.as<float>(), rd.kept.as<float>(), rd.bad.as<unsigned char>(), tk, l.k};
        const S* v = x;
        if (latent) {  // z = x latent_down [C, W]: one pair per token
            gemm(x, ldown, zb.as<S>(), MoePairs{nullptr, nullptr, nullptr, l.t, 1}, l.c, l.w, false);
            v = zb.as<S>();
        }
        gemm(v, gu, h.as<S>(), routed, l.w, 2 * l.f, false);
        swiglu(h.as<S>(), act.as<S>(), routed, l.f);
        gemm(act.as<S>(), dn, ye.as<S>(), routed, l.f, l.w, !Bug::kDownByToken);
        auto* sum_fn = moe_routed_sum<S, Bug>;
        CONFORM_LAUNCH(sum_fn, dim3(blocks_for(l.t * l.w, lc)), dim3(lc.threads), 0, s.get())(
            ye.as<S>(), rd.wt.as<float>(), acc.as<float>(), routed, l.t, l.w);
        if (latent) {
            auto* norm_fn = moe_latent_norm<S, Bug>;
            CONFORM_LAUNCH(norm_fn, dim3(blocks_for(l.t * 32, lc)), dim3(lc.threads), 0, s.get())(
                acc.as<float>(), wn, nb.as<S>(), l.t, l.w, static_cast<float>(l.eps), l.normalized);
            gemm(nb.as<S>(), lup, lat.as<S>(), MoePairs{nullptr, nullptr, nullptr, l.t, 1}, l.w, l.c, false);
        }
        if (l.shared) {
            const MoePairs shared{nullptr, nullptr, nullptr, ts, l.s};
            gemm(x, sgu, sh.as<S>(), shared, l.c, 2 * l.g, false);
            swiglu(sh.as<S>(), sact.as<S>(), shared, l.g);
            gemm(sact.as<S>(), sdn, sy.as<S>(), shared, l.g, l.c, true);
        }
        auto* finish_fn = moe_finish<S, Bug>;
        CONFORM_LAUNCH(finish_fn, dim3(static_cast<unsigned>(std::min<long long>(l.t, lc.max_blocks))), dim3(lc.threads), 0,
                       s.get())(latent ? nullptr : acc.as<float>(), latent ? lat.as<S>() : nullptr, sy.as<S>(),
                                rd.bad.as<unsigned char>(), y.as<S>(), l.t, l.c, l.s);
    }
    check_launch(s.get(), kernel);
    download(y, c.out[moe_slots::y_o], s.get(), kernel);
    download(rd.idx, c.out[moe_slots::indices_o], s.get(), kernel);
    download(rd.wt, c.out[moe_slots::weights_o], s.get(), kernel);
}

template <class Bug = LayerNoBug>
void run_moe_layer(const KernelCall& c, bool latent, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_moe_layer_as<decltype(s), Bug>(c, latent, kernel, lc); });
}

}  // namespace conform::CONFORM_CUDA_NS
