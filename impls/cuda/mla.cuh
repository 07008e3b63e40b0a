// Multi-head latent attention on the GPU, absorbed form (mla.cu registers
// the kernels; the GPU mutants of impls/mutants/cuda_mla.cu instantiate
// them with one bug).  docs/mla.md holds the formula, the stored stages and
// the bound.
//
// The CPU absorbed kernel's arithmetic, in its order, in two launches:
// 1. a block per key row: a cached row as given (its rope key rotated on
//    read when cache_rotated = 0), a new token's latent c_t = W_dkv h_t and
//    rope key RoPE(W_kr h_t), each an fmaf chain from +0, stored in S;
// 2. a block per (head, token): [q^C; q^R] = W_q[i] h_t (q^R rotated), the
//    absorbed query a = W_uk[i]^T q^C, a thread per visible key for the
//    logit scale (a . c_j + q^R . k^R_j) (one chain), the maximum, then a
//    thread per latent channel runs the keys in order (w_j = expf(s_j - m),
//    l and sum_j w_j c_j, each thread forming the same l), c-bar = sum / l
//    stored in S, o = W_uv[i] c-bar, lse = m + logf(l).
// RoPE's cos and sin are the rope kernel's (angle_sincos: double angles,
// rounded to FP32, as cpu::rope_tables), the rotation two roundings per
// entry as the CPU's.
#pragma once
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/mla.hpp"  // mla_setup: the shapes' and parameters' validation, shared
#include "impls/cuda/device_io.cuh"
#include "impls/host_device.hpp"
#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/rope.cuh"  // angle_sincos

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct MlaNoBug : NoBug {
    static constexpr bool kCausalOffByOne = false;  // the causal limit lets each token see the next one
    static constexpr bool kLatentScale = false;     // scale 1/sqrt(d_c) (the absorbed query's width), not 1/sqrt(d_nope + d_r)
};

struct MlaArgs {
    int heads = 0, tokens = 0, cached = 0, d_model = 0, d_c = 0, d_nope = 0, d_r = 0, d_v = 0;
    int pairing = 0;
    double base = 10000, offset = 0;
    bool causal = true, cache_rotated = true;
    float scale = 0;
    CONFORM_HOST_DEVICE int keys() const { return cached + tokens; }
    CONFORM_HOST_DEVICE int d_q() const { return d_nope + d_r; }
};

// v rounded to S and back (the stages a real kernel stores).
template <class S>
__device__ __forceinline__ float stored(float v) {
    return static_cast<float>(load(store<S>(static_cast<double>(v))));
}

// sum_k w[k * sw] x[k] as an fmaf chain from +0.
template <class W>
__device__ __forceinline__ float chain_dot(const W* w, long long sw, const float* x, int n) {
    float s = 0.0f;
    for (int k = 0; k < n; ++k) s = fmaf(static_cast<float>(load(w[k * sw])), x[k], s);
    return s;
}

// x[0, d_r) rotated in place at position `pos` by the block (pairs by
// thread), then stored in S: pairs (2j, 2j+1) or (j, j + d_r/2).
template <class S>
__device__ void mla_rotate(float* x, int d_r, double pos, const MlaArgs& a) {
    RopeShape rs;
    rs.r = d_r, rs.base = a.base;
    const int half = d_r / 2;
    __syncthreads();  // x complete
    float ya = 0, yb = 0;
    int ia = 0, ib = 0;
    const bool mine = static_cast<int>(threadIdx.x) < half;
    if (mine) {
        const int j = threadIdx.x;
        double sd, cd;
        angle_sincos<NoBug>(pos, j, rs, &sd, &cd);
        const float c = static_cast<float>(cd), s = static_cast<float>(sd);
        ia = a.pairing == 0 ? 2 * j : j, ib = a.pairing == 0 ? 2 * j + 1 : j + half;
        ya = stored<S>(fmaf(x[ia], c, -(x[ib] * s)));
        yb = stored<S>(fmaf(x[ia], s, x[ib] * c));
    }
    __syncthreads();  // every pair read before any is written
    if (mine) x[ia] = ya, x[ib] = yb;
    __syncthreads();
}

// Launch 1: key row j's latent C[j] and rope key KR[j] (FP32 values of S).
template <class S, class Bug>
__global__ void mla_keys(const S* __restrict__ h, const S* __restrict__ w_dkv, const S* __restrict__ w_kr,
                         const S* __restrict__ c_cache, const S* __restrict__ kr_cache, float* __restrict__ C,
                         float* __restrict__ KR, MlaArgs a) {
    float* hs = dynamic_shared<float>();  // h_t [d_model], then the rope key [d_r]
    float* kr = hs + a.d_model;
    for (int j = blockIdx.x; j < a.keys(); j += gridDim.x) {
        __syncthreads();
        if (j < a.cached) {
            for (int e = threadIdx.x; e < a.d_c; e += blockDim.x) C[static_cast<long long>(j) * a.d_c + e] = static_cast<float>(load(c_cache[static_cast<long long>(j) * a.d_c + e]));
            for (int e = threadIdx.x; e < a.d_r; e += blockDim.x) kr[e] = static_cast<float>(load(kr_cache[static_cast<long long>(j) * a.d_r + e]));
            if (!a.cache_rotated) mla_rotate<S>(kr, a.d_r, a.offset - a.cached + j, a);
        } else {
            const int t = j - a.cached;
            for (int k = threadIdx.x; k < a.d_model; k += blockDim.x) hs[k] = static_cast<float>(load(h[static_cast<long long>(t) * a.d_model + k]));
            __syncthreads();
            for (int e = threadIdx.x; e < a.d_c; e += blockDim.x)
                C[static_cast<long long>(j) * a.d_c + e] = stored<S>(chain_dot(w_dkv + static_cast<long long>(e) * a.d_model, 1, hs, a.d_model));
            for (int e = threadIdx.x; e < a.d_r; e += blockDim.x) kr[e] = chain_dot(w_kr + static_cast<long long>(e) * a.d_model, 1, hs, a.d_model);
            mla_rotate<S>(kr, a.d_r, a.offset + t, a);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < a.d_r; e += blockDim.x) KR[static_cast<long long>(j) * a.d_r + e] = kr[e];
    }
}

// Launch 2, the shared memory of one (head, token) block, in floats.
inline long long mla_head_words(const MlaArgs& a) {
    return static_cast<long long>(a.d_model) + a.d_q() + a.d_c + a.keys() + a.d_c;  // h, q, absorbed a, s, c-bar
}

template <class S, class Bug>
__global__ void mla_heads(const S* __restrict__ h, const S* __restrict__ w_uk, const S* __restrict__ w_uv,
                          const S* __restrict__ w_q, const float* __restrict__ C, const float* __restrict__ KR,
                          S* __restrict__ o, float* __restrict__ lse, MlaArgs a) {
    float* hs = dynamic_shared<float>();
    float* q = hs + a.d_model;     // [q^C ; q^R]
    float* qa = q + a.d_q();       // a = W_uk^T q^C
    float* s = qa + a.d_c;         // logits of the visible keys
    float* cbar = s + a.keys();
    const long long items = static_cast<long long>(a.heads) * a.tokens;
    for (long long item = blockIdx.x; item < items; item += gridDim.x) {
        const int i = static_cast<int>(item / a.tokens), t = static_cast<int>(item % a.tokens);
        __syncthreads();  // the previous item's readers are done
        for (int k = threadIdx.x; k < a.d_model; k += blockDim.x) hs[k] = static_cast<float>(load(h[static_cast<long long>(t) * a.d_model + k]));
        __syncthreads();
        const S* wq = w_q + static_cast<long long>(i) * a.d_q() * a.d_model;
        for (int e = threadIdx.x; e < a.d_q(); e += blockDim.x) {
            const float v = chain_dot(wq + static_cast<long long>(e) * a.d_model, 1, hs, a.d_model);
            q[e] = e < a.d_nope ? stored<S>(v) : v;
        }
        mla_rotate<S>(q + a.d_nope, a.d_r, a.offset + t, a);
        const S* uk = w_uk + static_cast<long long>(i) * a.d_nope * a.d_c;
        for (int e = threadIdx.x; e < a.d_c; e += blockDim.x) qa[e] = stored<S>(chain_dot(uk + e, a.d_c, q, a.d_nope));
        __syncthreads();
        const int visible = a.causal ? a.cached + t + 1 + (Bug::kCausalOffByOne && t + 1 < a.tokens ? 1 : 0) : a.keys();
        const float scale = Bug::kLatentScale ? 1.0f / sqrtf(static_cast<float>(a.d_c)) : a.scale;
        for (int j = threadIdx.x; j < visible; j += blockDim.x) {
            float dot = chain_dot(C + static_cast<long long>(j) * a.d_c, 1, qa, a.d_c);
            for (int r = 0; r < a.d_r; ++r) dot = fmaf(q[a.d_nope + r], KR[static_cast<long long>(j) * a.d_r + r], dot);
            s[j] = scale * dot;
        }
        __syncthreads();
        float m = -INFINITY;  // every thread forms the same maximum (NaN-propagating, as the CPU's)
        for (int j = 0; j < visible; ++j) m = isnan(s[j]) || isnan(m) ? NAN : fmaxf(m, s[j]);
        const long long row = item;  // [H, L] order: head i, token t
        // Every logit -inf: no weight to normalize, c-bar = 0 and lse = -inf
        // (the oracle's attend_direct), o still W_uv c-bar as the CPU's.
        float l = 0.0f;  // thread 0's (e = 0) is the one lse takes
        for (int e = threadIdx.x; e < a.d_c; e += blockDim.x) {
            float acc = 0.0f, le = 0.0f;
            if (m != -INFINITY)
                for (int j = 0; j < visible; ++j) {
                    if (s[j] == -INFINITY) continue;  // an exact -inf logit: no weight, the value is not read
                    const float w = expf(s[j] - m);
                    le = le + w;
                    const float ve = C[static_cast<long long>(j) * a.d_c + e];
                    // The exact weight is positive: an infinite value counts whole where w underflows.
                    acc = w == 0.0f && isinf(ve) ? acc + ve : fmaf(w, ve, acc);
                }
            cbar[e] = m == -INFINITY ? 0.0f : stored<S>(acc / le);
            l = le;
        }
        __syncthreads();
        const S* uv = w_uv + static_cast<long long>(i) * a.d_v * a.d_c;
        for (int e = threadIdx.x; e < a.d_v; e += blockDim.x)
            o[row * a.d_v + e] = store<S>(static_cast<double>(chain_dot(uv + static_cast<long long>(e) * a.d_c, 1, cbar, a.d_c)));
        if (threadIdx.x == 0) lse[row] = m == -INFINITY ? -INFINITY : isnan(m) ? NAN : m + logf(l);
    }
}

inline MlaArgs mla_args(const KernelCall& c, const char* kernel) {
    const cpu::MlaSetup su = cpu::mla_setup(c);  // the CPU kernels' validation
    const cpu::MlaDims& d = su.d;
    MlaArgs a;
    a.heads = static_cast<int>(d.heads), a.tokens = static_cast<int>(d.tokens), a.cached = static_cast<int>(d.cached);
    a.d_model = static_cast<int>(d.d_model), a.d_c = static_cast<int>(d.d_c), a.d_nope = static_cast<int>(d.d_nope);
    a.d_r = static_cast<int>(d.d_r), a.d_v = static_cast<int>(d.d_v);
    a.pairing = su.pairing, a.base = su.base, a.offset = static_cast<double>(su.offset);
    a.causal = su.causal, a.cache_rotated = su.cache_rotated, a.scale = su.scale;
    if (mla_head_words(a) * 4 > 48 * 1024 || a.d_r / 2 > 1024)
        throw std::invalid_argument(std::string(kernel) + ": d_model + d_q + 2 d_c + keys = " +
                                    std::to_string(mla_head_words(a)) + " floats do not fit a block's 48 KiB of shared memory");
    return a;
}

// The registry entry of cuda.mla.<fmt> or of a mutant built on it (mla.cu).
KernelInfo mla_info(KernelInfo k, Format f);

template <class S, class Bug = MlaNoBug>
void run_mla_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const MlaArgs a = mla_args(c, kernel);
    Stream s(kernel);
    const std::size_t inputs = a.cached > 0 ? 8 : 6;
    std::vector<DeviceBuffer> in;
    in.reserve(8);
    for (std::size_t t = 0; t < 8; ++t) {
        in.emplace_back(t < inputs ? static_cast<std::size_t>(c.in[t].numel()) * sizeof(S) : 0, kernel);
        if (t < inputs) upload(c.in[t], in.back(), s.get(), kernel);
    }
    const long long rows = static_cast<long long>(a.heads) * a.tokens;
    DeviceBuffer C(static_cast<std::size_t>(a.keys()) * a.d_c * 4, kernel), KR(static_cast<std::size_t>(a.keys()) * a.d_r * 4, kernel),
        o(static_cast<std::size_t>(rows) * a.d_v * sizeof(S), kernel), lse(static_cast<std::size_t>(rows) * 4, kernel);
    poison(o, s.get(), kernel), poison(lse, s.get(), kernel);
    const unsigned threads = std::max<unsigned>(lc.threads, static_cast<unsigned>((a.d_r / 2 + 31) / 32 * 32));
    if (a.keys() > 0) {
        auto* keys_fn = mla_keys<S, Bug>;
        CONFORM_LAUNCH(keys_fn, dim3(static_cast<unsigned>(std::min<long long>(a.keys(), lc.max_blocks))), dim3(threads),
                       static_cast<std::size_t>(a.d_model + a.d_r) * 4, s.get())(
            in[0].as<S>(), in[1].as<S>(), in[5].as<S>(), in[6].as<S>(), in[7].as<S>(), C.as<float>(), KR.as<float>(), a);
    }
    if (rows > 0) {
        auto* heads_fn = mla_heads<S, Bug>;
        CONFORM_LAUNCH(heads_fn, dim3(static_cast<unsigned>(std::min<long long>(rows, lc.max_blocks))), dim3(threads),
                       static_cast<std::size_t>(mla_head_words(a)) * 4, s.get())(
            in[0].as<S>(), in[2].as<S>(), in[3].as<S>(), in[4].as<S>(), C.as<float>(), KR.as<float>(), o.as<S>(),
            lse.as<float>(), a);
    }
    check_launch(s.get(), kernel);
    download(o, c.out[0], s.get(), kernel);
    download(lse, c.out[1], s.get(), kernel);
}

template <class Bug = MlaNoBug>
void run_mla(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_mla_as<decltype(s), Bug>(c, kernel, lc); });
}

}  // namespace conform::CONFORM_CUDA_NS
