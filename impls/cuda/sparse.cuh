// Sparse attention's selection on the GPU (sparse.cu registers the kernels;
// the GPU mutants of impls/mutants/cuda_sparse.cu instantiate them with one
// bug).  docs/sparse.md holds the formulas, the verdict and the bounds.
//
// lightning_indexer: one block per query row t (grid-stride), q[t] (H x c)
// widened to float in shared memory, a thread per key s (strided): each
// dot q[t, h] . k[s] the chain acc = fmaf(q_i, k_i, acc) from +0 in the
// CPU kernels' order (chain_index), then sum += w[t, h] * ReLU(dot) over h in order, a product
// and a sum each rounded (--fmad=false) -- the CPU scalar kernel's
// arithmetic, so the scores are its bits.
//
// topk_select: one warp per query row (grid-stride).  A warp vote finds a
// NaN among the eligible scores (the row is NaN) and a warp sum counts the
// eligible; then each slot is a warp argmax over the candidates that come
// after the previous slot's in the order (score descending, index
// ascending): no marks, no sort buffer, O(k N / 32) per row.  Scores are
// compared exactly as FP32 values, ties to the lower index.
#pragma once
#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "impls/cuda/device_io.cuh"
#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/reduce.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct SparseNoBug {
    static constexpr bool kArgmaxHalfWarp = false;     // topk_select: the argmax butterfly spans 16 lanes
    static constexpr bool kForcedInPool = false;       // topk_select: the forced block also competes for the k slots
    static constexpr bool kWeightsTransposed = false;  // indexer: w read as [H, Lq], not [Lq, H]
    static constexpr bool kReluAfterSum = false;       // indexer: ReLU(sum_h w q.k), not sum_h w ReLU(q.k)
};

struct IndexerArgs {
    long long lq = 0, n = 0;
    int h = 0, c = 0;
};

// Largest q[t] (H c floats) a block stages: 48 KiB of shared memory.
constexpr long long kIndexerMaxQ = 12 * 1024;

template <class S, class Bug>
__global__ void indexer_scores(const S* __restrict__ q, const S* __restrict__ k, const S* __restrict__ w,
                               float* __restrict__ scores, IndexerArgs a) {
    float* qs = dynamic_shared<float>();
    const int hc = a.h * a.c;
    for (long long t = blockIdx.x; t < a.lq; t += gridDim.x) {
        __syncthreads();  // the previous row's readers are done with qs
        for (int i = threadIdx.x; i < hc; i += blockDim.x) qs[i] = static_cast<float>(load(q[t * hc + i]));
        __syncthreads();
        for (long long s = threadIdx.x; s < a.n; s += blockDim.x) {
            const S* ks = k + s * a.c;
            float sum = 0.0f;
            for (int j = 0; j < a.h; ++j) {
                float dot = 0.0f;
                for (int p = 0; p < a.c; ++p) {
                    const int i = chain_index<S>(p, a.c);
                    dot = fmaf(qs[j * a.c + i], static_cast<float>(load(ks[i])), dot);
                }
                const float wj = static_cast<float>(load(Bug::kWeightsTransposed ? w[j * a.lq + t] : w[t * a.h + j]));
                const float r = Bug::kReluAfterSum || !(dot < 0.0f) ? dot : 0.0f;  // NaN stays NaN
                sum += wj * r;
            }
            if (Bug::kReluAfterSum && sum < 0.0f) sum = 0.0f;
            scores[t * a.n + s] = sum;
        }
    }
}

inline IndexerArgs indexer_args(const KernelCall& c, const char* kernel) {
    const std::string who = kernel;
    if (c.in.size() != 3 || c.out.size() != 1) throw std::invalid_argument(who + ": expects q, k, w -> scores");
    const TensorView &q = c.in[0], &k = c.in[1], &w = c.in[2];
    if (q.rank != 3 || k.rank != 2 || w.rank != 2 || k.shape[1] != q.shape[2] || w.shape[0] != q.shape[0] ||
        w.shape[1] != q.shape[1])
        throw std::invalid_argument(who + ": q must be [Lq, H, c], k [N, c] and w [Lq, H]");
    IndexerArgs a;
    a.lq = q.shape[0], a.h = static_cast<int>(q.shape[1]), a.c = static_cast<int>(q.shape[2]), a.n = k.shape[0];
    if (static_cast<long long>(a.h) * a.c > kIndexerMaxQ)
        throw std::invalid_argument(who + ": H c = " + std::to_string(static_cast<long long>(a.h) * a.c) +
                                    " > 12288: a query row does not fit the block's shared memory");
    return a;
}

// The scores [Lq, N] on device memory (run_indexer_as, dsa.cuh).
template <class S, class Bug = SparseNoBug>
void launch_indexer(const S* q, const S* k, const S* w, float* scores, const IndexerArgs& a, const Launch& lc, cudaStream_t s) {
    auto* fn = indexer_scores<S, Bug>;
    CONFORM_LAUNCH(fn, dim3(static_cast<unsigned>(std::min<long long>(a.lq, lc.max_blocks))), dim3(lc.threads),
                   static_cast<std::size_t>(a.h) * static_cast<std::size_t>(a.c) * 4, s)(q, k, w, scores, a);
}

template <class S, class Bug = SparseNoBug>
void run_indexer_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const IndexerArgs a = indexer_args(c, kernel);
    Stream s(kernel);
    DeviceBuffer q(static_cast<std::size_t>(c.in[0].numel()) * sizeof(S), kernel),
        k(static_cast<std::size_t>(c.in[1].numel()) * sizeof(S), kernel),
        w(static_cast<std::size_t>(c.in[2].numel()) * sizeof(S), kernel),
        out(static_cast<std::size_t>(a.lq * a.n) * 4, kernel);
    upload(c.in[0], q, s.get(), kernel);
    upload(c.in[1], k, s.get(), kernel);
    upload(c.in[2], w, s.get(), kernel);
    poison(out, s.get(), kernel);
    if (a.lq > 0 && a.n > 0) {
        launch_indexer<S, Bug>(q.as<S>(), k.as<S>(), w.as<S>(), out.as<float>(), a, lc, s.get());
        check_launch(s.get(), kernel);
    }
    download(out, c.out[0], s.get(), kernel);
}

template <class Bug = SparseNoBug>
void run_indexer(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_indexer_as<decltype(s), Bug>(c, kernel, lc); });
}

struct SelectArgs {
    long long lq = 0, n = 0, k = 0, r = 1, offset = 0;
    int causal = 1, force = 0, slots = 0;
};

__device__ __forceinline__ bool select_allowed(const SelectArgs& a, long long pos, long long n) {
    if (a.causal == 1) return n * a.r + a.r - 1 <= pos;
    if (a.causal == 2) return n * a.r <= pos;
    return true;
}

template <class S, class Bug>
__global__ void topk_select_rows(const S* __restrict__ scores, float* __restrict__ out, SelectArgs a) {
    const int lane = threadIdx.x % 32;
    const long long warp = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32;
    const long long warps = static_cast<long long>(gridDim.x) * blockDim.x / 32;
    for (long long i = warp; i < a.lq; i += warps) {  // warp-uniform: every lane takes part in the shuffles
        const S* v = scores + i * a.n;
        float* row = out + i * a.slots;
        const long long pos = a.offset + i;
        const long long forced = a.force == 0 || pos / a.r >= a.n ? -1 : pos / a.r;
        const auto eligible = [&](long long n) {
            return select_allowed(a, pos, n) && (Bug::kForcedInPool || n != forced);
        };
        bool nan = false;
        long long count = 0;
        for (long long n = lane; n < a.n; n += 32)
            if (eligible(n)) ++count, nan = nan || isnan(static_cast<float>(load(v[n])));
        if (__any_sync(kFullMask, nan)) {
            for (int j = lane; j < a.slots; j += 32) row[j] = NAN;
            continue;
        }
        count = warp_reduce(count, Add{});
        int at = 0;
        if (forced >= 0) {
            if (lane == 0) row[0] = static_cast<float>(forced);
            at = 1;
        }
        const long long free = forced >= 0 && a.force == 1 ? a.k - 1 : a.k;
        const long long take = count < free ? count : free;
        float pv = INFINITY;
        long long pn = -1;  // the previous slot's (score, index); the first slot takes any candidate
        for (long long j = 0; j < take; ++j) {
            float bv = -INFINITY;
            long long bn = LLONG_MAX;
            for (long long n = lane; n < a.n; n += 32) {
                if (!eligible(n)) continue;
                const float x = static_cast<float>(load(v[n]));
                if (comes_before(pv, pn, x, n) && comes_before(x, n, bv, bn)) bv = x, bn = n;
            }
            warp_argmax<Bug::kArgmaxHalfWarp>(bv, bn);
            if (lane == 0) row[at + j] = static_cast<float>(bn);
            pv = bv, pn = bn;
        }
        for (long long j = at + take + lane; j < a.slots; j += 32) row[j] = -1.0f;
    }
}

inline SelectArgs select_args(const KernelCall& c, const char* kernel) {
    const std::string who = kernel;
    if (c.in.size() != 1 || c.out.size() != 1 || c.in[0].rank != 2 || c.out[0].rank != 2)
        throw std::invalid_argument(who + ": expects scores [Lq, N] -> indices [Lq, slots]");
    SelectArgs a;
    a.lq = c.in[0].shape[0], a.n = c.in[0].shape[1];
    a.k = static_cast<long long>(c.params.get("k", 4)), a.r = static_cast<long long>(c.params.get("block", 1));
    a.causal = static_cast<int>(c.params.get("causal", 1)), a.offset = static_cast<long long>(c.params.get("offset", 0));
    a.force = static_cast<int>(c.params.get("force_local", 0));
    a.slots = static_cast<int>(c.out[0].shape[1]);
    if (a.k < 1 || a.r < 1 || a.offset < 0 || a.causal < 0 || a.causal > 2 || a.force < 0 || a.force > 2)
        throw std::invalid_argument(who + ": k >= 1, block >= 1, offset >= 0, causal and force_local in {0, 1, 2}");
    if (a.slots != a.k + (a.force == 2 ? 1 : 0) || c.out[0].shape[0] != a.lq)
        throw std::invalid_argument(who + ": indices must be [Lq, k] ([Lq, k + 1] with force_local = 2)");
    return a;
}

// The selection [Lq, slots] of scores on device memory (run_topk_select_as, dsa.cuh).
template <class S, class Bug = SparseNoBug>
void launch_topk_select(const S* scores, float* out, const SelectArgs& a, const Launch& lc, cudaStream_t s) {
    auto* fn = topk_select_rows<S, Bug>;
    const long long per_block = lc.threads / 32;
    const unsigned blocks = static_cast<unsigned>(std::clamp<long long>((a.lq + per_block - 1) / per_block, 1, lc.max_blocks));
    CONFORM_LAUNCH(fn, dim3(blocks), dim3(lc.threads), 0, s)(scores, out, a);
}

template <class S, class Bug = SparseNoBug>
void run_topk_select_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const SelectArgs a = select_args(c, kernel);
    Stream s(kernel);
    DeviceBuffer in(static_cast<std::size_t>(c.in[0].numel()) * sizeof(S), kernel),
        out(static_cast<std::size_t>(a.lq) * static_cast<std::size_t>(a.slots) * 4, kernel);
    upload(c.in[0], in, s.get(), kernel);
    poison(out, s.get(), kernel);
    if (a.lq > 0) {
        launch_topk_select<S, Bug>(in.as<S>(), out.as<float>(), a, lc, s.get());
        check_launch(s.get(), kernel);
    }
    download(out, c.out[0], s.get(), kernel);
}

template <class Bug = SparseNoBug>
void run_topk_select(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_topk_select_as<decltype(s), Bug>(c, kernel, lc); });
}

}  // namespace conform::CONFORM_CUDA_NS
