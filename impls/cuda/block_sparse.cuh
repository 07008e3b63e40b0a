// Block-sparse attention (MSA, QSA) on the GPU (block_sparse.cu registers
// the kernels; impls/cuda/mutants' cuda_block_sparse.cu instantiates them
// with one bug).  docs/block_sparse_attention.md holds the formula, the
// verdict and the bound.
//
// The CPU kernels' stages, on the device with no host round-trip:
//   MSA  a block per (group, query) row, iq[g, t] in shared memory, a
//        thread per key block: the max over its tokens j <= t of
//        fl(dot) * fl(1/sqrt(Di)), each dot a product-then-add chain in
//        index order (the CPU's bits);
//   QSA  a warp per vector for the pooled keys (mean of the block's index
//        keys, position b r) and the index queries (position t): the sum
//        of squares in index order by one lane, zero-centred RMSNorm, RoPE
//        of the first rope_dim dims with double angles (the CPU's
//        arithmetic); a block per query, a thread per fully observed block
//        for sum_h ReLU(q~ . K_b);
// then sparse.cuh's top-k selection per selection group, the selection's
// mask over the tokens j <= t of the chosen blocks (sparse_attention.cuh),
// and the FP32 attention under it, whose o is rounded once into the format.
#pragma once
#include <string>
#include <vector>

#include "impls/cpu/block_sparse.hpp"
#include "impls/cuda/sparse_attention.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct BsaNoBug {
    static constexpr bool kFutureTokens = false;    // the chosen blocks' tokens after t attended too (no token-causal limit)
    static constexpr bool kRopeAtIndex = false;     // QSA: the pooled key rotated at b, not at p_b = b r
    static constexpr bool kFirstGroupMask = false;  // MSA: every group attends under group 0's selection
};

using BsaArgs = cpu::BlockSparseDims;

template <class S, class Bug>
__global__ void msa_block_scores(const S* __restrict__ iq, const S* __restrict__ ik, float* __restrict__ scores, BsaArgs a) {
    float* qs = dynamic_shared<float>();
    const float scale = 1.0f / sqrtf(static_cast<float>(a.di));
    for (long long row = blockIdx.x; row < a.groups * a.len; row += gridDim.x) {
        const long long t = row % a.len;
        __syncthreads();  // the previous row's readers are done with qs
        for (long long i = threadIdx.x; i < a.di; i += blockDim.x) qs[i] = static_cast<float>(load(iq[row * a.di + i]));
        __syncthreads();
        for (long long b = threadIdx.x; b < a.n; b += blockDim.x) {
            float best = -INFINITY;  // the own block and the future ones: never read by the selection
            if (b * a.r <= t && b != t / a.r)
                for (long long j = b * a.r; j < b * a.r + a.r && j < a.len && j <= t; ++j) {
                    float dot = 0.0f;
                    for (long long i = 0; i < a.di; ++i) dot += qs[i] * static_cast<float>(load(ik[j * a.di + i]));
                    const float x = dot * scale;
                    best = isnan(x) || isnan(best) ? NAN : fmaxf(best, x);
                }
            scores[row * a.n + b] = best;
        }
    }
}

// QSA's index vectors, a warp each: rows < a.n (pool) are block b's key
// from the mean of ik's rows [b r, b r + r), the others the query iq[h, t]
// (row - a.n = h L + t).  out [rows, Di] in FP32; keys of partial blocks
// are never read.
template <class S, class Bug>
__global__ void qsa_vectors(const S* __restrict__ iq, const S* __restrict__ ik, const S* __restrict__ nq,
                            const S* __restrict__ nk, float* __restrict__ out, BsaArgs a) {
    const int lane = threadIdx.x % 32;
    const long long warps = static_cast<long long>(gridDim.x) * blockDim.x / 32;
    const long long rows = a.n + a.gi * a.len;
    for (long long row = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
        const bool key = row < a.n;
        if (key && row * a.r + a.r > a.len) continue;  // warp-uniform
        float* x = out + row * a.di;
        const S* w = key ? nk : nq;
        for (long long i = lane; i < a.di; i += 32) {
            float v = 0.0f;
            if (key) {
                for (long long j = row * a.r; j < row * a.r + a.r; ++j) v += static_cast<float>(load(ik[j * a.di + i]));
                v /= static_cast<float>(a.r);
            } else {
                v = static_cast<float>(load(iq[(row - a.n) * a.di + i]));
            }
            x[i] = v;
        }
        __syncwarp();
        float ss = 0.0f;  // lane 0 in index order: the CPU's sum
        if (lane == 0)
            for (long long i = 0; i < a.di; ++i) ss += x[i] * x[i];
        ss = __shfl_sync(kFullMask, ss, 0);
        const float inv = 1.0f / sqrtf(ss / static_cast<float>(a.di) + static_cast<float>(a.eps));
        for (long long i = lane; i < a.di; i += 32) x[i] = x[i] * inv * (1.0f + static_cast<float>(load(w[i])));
        __syncwarp();
        const long long pos = key ? (Bug::kRopeAtIndex ? row : row * a.r) : (row - a.n) % a.len, half = a.rope_dim / 2;
        for (long long j = lane; j < half; j += 32) {
            const double angle = static_cast<double>(pos) * pow(a.base, -2.0 * static_cast<double>(j) / static_cast<double>(a.rope_dim));
            const float cs = static_cast<float>(cos(angle)), sn = static_cast<float>(sin(angle));
            const float xa = x[j], xb = x[j + half];
            x[j] = xa * cs - xb * sn;
            x[j + half] = xa * sn + xb * cs;
        }
        __syncwarp();
    }
}

// S[t, b] = sum_h ReLU(q~[h, t] . K_b) over the fully observed blocks, a
// block per query; -inf elsewhere (never read by the selection).  A
// template, as every kernel of a header (defined in both unity batches).
template <class Bug>
__global__ void qsa_block_scores(const float* __restrict__ vec, float* __restrict__ scores, BsaArgs a) {
    const float* keys = vec;
    const float* queries = vec + a.n * a.di;
    for (long long t = blockIdx.x; t < a.len; t += gridDim.x)
        for (long long b = threadIdx.x; b < a.n; b += blockDim.x) {
            float sum = -INFINITY;
            if (b * a.r + a.r - 1 <= t) {
                sum = 0.0f;
                for (long long h = 0; h < a.gi; ++h) {
                    const float* q = queries + (h * a.len + t) * a.di;
                    float d = 0.0f;
                    for (long long i = 0; i < a.di; ++i) d += q[i] * keys[b * a.di + i];
                    sum += d < 0.0f ? 0.0f : d;  // NaN stays NaN
                }
            }
            scores[t * a.n + b] = sum;
        }
}

inline SelectArgs bsa_select_args(const BsaArgs& a) {
    SelectArgs sa;
    sa.lq = a.len, sa.n = a.n, sa.k = a.k, sa.r = a.r, sa.offset = 0;
    sa.causal = a.mode == 0 ? 2 : 1;  // MSA: a block with a visible token; QSA: fully observed
    sa.force = a.mode == 0 ? 1 : 2;   // the own block in slot 0 (QSA: besides the k)
    sa.slots = static_cast<int>(a.slots);
    return sa;
}

// The registry entry of cuda.block_sparse_attention.<fmt> or of a mutant built on it (block_sparse.cu).
KernelInfo block_sparse_info(KernelInfo k, Format f);

template <class S, class Bug = BsaNoBug>
void run_block_sparse_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const BsaArgs a = cpu::block_sparse_dims(c);
    const std::string who = kernel;
    check_fp32_dv(a.dv, who);
    if (a.mode == 0 && a.di * 4 > 48 * 1024) throw std::invalid_argument(who + ": Di does not fit a block's shared memory");
    Stream s(kernel);
    std::vector<DeviceBuffer> in;
    in.reserve(7);
    for (int t = 0; t < 7; ++t) {
        in.emplace_back(static_cast<std::size_t>(c.in[t].numel()) * sizeof(S), kernel);
        upload(c.in[t], in.back(), s.get(), kernel);
    }
    const auto z = [](long long n) { return static_cast<std::size_t>(n); };
    const long long rows = a.hq * a.len, lsq = a.len * a.len;
    DeviceBuffer scores(z(a.sel_groups * a.len * a.n) * 4, kernel), ids(z(a.sel_groups * a.len * a.slots) * 4, kernel),
        vec(z(a.mode == 1 ? (a.n + a.gi * a.len) * a.di : 0) * 4, kernel), mask(z(a.sel_groups * lsq) * 4, kernel),
        o(z(rows * a.dv) * sizeof(S), kernel), lse(z(rows) * 4, kernel);
    constexpr bool kWide = std::is_same_v<S, float>;
    DeviceBuffer q32(kWide ? 0 : z(c.in[0].numel()) * 4, kernel), k32(kWide ? 0 : z(c.in[1].numel()) * 4, kernel),
        v32(kWide ? 0 : z(c.in[2].numel()) * 4, kernel), o32(kWide ? 0 : z(rows * a.dv) * 4, kernel);
    poison(ids, s.get(), kernel), poison(o, s.get(), kernel);
    if (a.len > 0) {
        if (a.mode == 0) {
            auto* fn = msa_block_scores<S, Bug>;
            CONFORM_LAUNCH(fn, dim3(static_cast<unsigned>(std::min<long long>(a.groups * a.len, lc.max_blocks))),
                           dim3(lc.threads), z(a.di) * 4, s.get())(in[3].as<S>(), in[4].as<S>(), scores.as<float>(), a);
        } else {
            auto* vec_fn = qsa_vectors<S, Bug>;
            CONFORM_LAUNCH(vec_fn, dim3(blocks_for((a.n + a.gi * a.len) * 32, lc)), dim3(lc.threads), 0, s.get())(
                in[3].as<S>(), in[4].as<S>(), in[5].as<S>(), in[6].as<S>(), vec.as<float>(), a);
            auto* score_fn = qsa_block_scores<Bug>;
            CONFORM_LAUNCH(score_fn, dim3(static_cast<unsigned>(std::min<long long>(a.len, lc.max_blocks))),
                           dim3(lc.threads), 0, s.get())(vec.as<float>(), scores.as<float>(), a);
        }
        const SelectArgs sa = bsa_select_args(a);
        SelectionMask m;
        m.rows = a.len, m.cols = m.keys = a.len, m.r = a.r, m.slots = sa.slots, m.causal = !Bug::kFutureTokens;
        for (long long g = 0; g < a.sel_groups; ++g) {
            float* gid = ids.as<float>() + g * a.len * a.slots;
            launch_topk_select<float>(scores.as<float>() + g * a.len * a.n, gid, sa, lc, s.get());
            const float* from = Bug::kFirstGroupMask ? ids.as<float>() : gid;
            launch_selection_mask<float>(from, mask.as<float>() + g * lsq, m, lc, s.get());
        }
        const float *q = in[0].as<float>(), *k = in[1].as<float>(), *v = in[2].as<float>();
        float* of = o.as<float>();
        if constexpr (!kWide) {
            launch_convert(in[0].as<S>(), q32.as<float>(), c.in[0].numel(), lc, s.get());
            launch_convert(in[1].as<S>(), k32.as<float>(), c.in[1].numel(), lc, s.get());
            launch_convert(in[2].as<S>(), v32.as<float>(), c.in[2].numel(), lc, s.get());
            q = q32.as<float>(), k = k32.as<float>(), v = v32.as<float>(), of = o32.as<float>();
        }
        // MSA: a call per group (its heads over its KV head, its mask); QSA: one over every head.
        const long long per = a.mode == 0 ? a.hq / a.groups : a.hq;
        for (long long g = 0; g < a.sel_groups; ++g) {
            Fp32Attention f;
            f.hq = static_cast<int>(per), f.hkv = static_cast<int>(a.mode == 0 ? 1 : a.groups);
            f.lq = f.lk = static_cast<int>(a.len), f.d = static_cast<int>(a.d), f.dv = static_cast<int>(a.dv);
            f.scale = a.scale;
            launch_fp32_attention(f, q + g * per * a.len * a.d, k + g * a.len * a.d, v + g * a.len * a.dv,
                                  mask.as<float>() + g * lsq, of + g * per * a.len * a.dv, lse.as<float>() + g * per * a.len,
                                  s.get());
        }
        if constexpr (!kWide) launch_convert(o32.as<float>(), o.as<S>(), rows * a.dv, lc, s.get());
        check_launch(s.get(), kernel);
    }
    download(o, c.out[0], s.get(), kernel);
    download(ids, c.out[1], s.get(), kernel);
}

template <class Bug = BsaNoBug>
void run_block_sparse(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_block_sparse_as<decltype(s), Bug>(c, kernel, lc); });
}

}  // namespace conform::CONFORM_CUDA_NS
