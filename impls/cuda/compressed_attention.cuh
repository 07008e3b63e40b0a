// DeepSeek-V4 compressed attention (CSA, HCA) on the GPU
// (compressed_attention.cu registers the kernels;
// impls/mutants/cuda_compressed_attention.cu instantiates them with one
// bug).  docs/compressed_attention.md holds the formula, the verdict and
// the bound.
//
// The CPU kernels' stages, on the device with no host round-trip: the
// compressor by a thread per (entry, channel) -- the CPU's FP32 softmax
// pooling over group a's rows then group b's (z + b, the max, expf, the
// sum and the weighted sum in row order, one division), each entry
// stored in the input format (the KV cache); CSA's selection by
// sparse.cuh's indexer over the stored entries and its top-k selection
// (block m: fully observed entries), HCA's indices in closed form (the
// observed entries in order); the mask over [entries; raw rows] of the
// selection and the window (sparse_attention.cuh); and the FP32 attention
// under it over the entries and raw rows widened to FP32, o rounded once.
#pragma once
#include <string>
#include <vector>

#include "impls/cpu/compressed_attention.hpp"
#include "impls/cuda/sparse_attention.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct CsaNoBug {
    static constexpr bool kNoOverlap = false;       // grouping b pooled over entry n's own rows, not the previous entry's
    static constexpr bool kWindowPlusOne = false;   // the window opens raw rows [t - window, t]: window + 1 of them
    static constexpr bool kPartialEntries = false;  // CSA: an entry with a token still to come is selectable
};

using CsaArgs = cpu::CsaKDims;

// In: q, raw, ca, za, ba, cb, zb, bb, iq, iw (the op's order).
enum CsaInput { kCsaQ, kCsaRaw, kCsaCa, kCsaZa, kCsaBa, kCsaCb, kCsaZb, kCsaBb, kCsaIq, kCsaIw };

template <class S>
struct CsaInputs {
    const S* t[10];
};

// comp [N, c]: entry n, channel x, pooled over group a's rows m n + j and
// (CSA, n >= 1) group b's rows m (n - 1) + j.  A NaN or +inf logit makes
// the entry NaN; -inf logits weigh nothing and their values are not read;
// all -inf: 0.
template <class S, class Bug>
__global__ void csa_compress(CsaInputs<S> in, S* __restrict__ comp, CsaArgs a) {
    const long long cells = a.n * a.c;
    for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < cells;
         e += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long n = e / a.c, x = e % a.c;
        const bool with_b = a.mode == 0 && (n >= 1 || Bug::kNoOverlap);
        const long long rows = with_b ? 2 * a.m : a.m;
        // Row r: (logit, value) of group a (r < m) or b.
        const auto logit = [&](long long r, float* v) {
            const bool ga = r < a.m;
            const long long j = ga ? r : r - a.m;
            const long long t = ga || Bug::kNoOverlap ? a.m * n + j : a.m * (n - 1) + j;
            if (v) *v = static_cast<float>(load((ga ? in.t[kCsaCa] : in.t[kCsaCb])[t * a.c + x]));
            return static_cast<float>(load((ga ? in.t[kCsaZa] : in.t[kCsaZb])[t * a.c + x])) +
                   static_cast<float>(load((ga ? in.t[kCsaBa] : in.t[kCsaBb])[j * a.c + x]));
        };
        float mx = -INFINITY;
        bool bad = false;
        for (long long r = 0; r < rows; ++r) {
            const float s = logit(r, nullptr);
            bad = bad || isnan(s) || s == INFINITY;
            mx = fmaxf(mx, s);
        }
        float y = 0.0f;
        if (bad) {
            y = NAN;
        } else if (mx != -INFINITY) {
            float l = 0.0f, acc = 0.0f;
            for (long long r = 0; r < rows; ++r) {
                float v;
                const float s = logit(r, &v);
                if (s == -INFINITY) continue;
                const float w = expf(s - mx);
                l += w;
                acc += isinf(v) ? v : w * v;  // the exact weight is positive: never 0 * inf
            }
            y = acc / l;
        }
        comp[e] = store<S>(y);
    }
}

// HCA: slot j of token t holds entry j while j < min(N, (t + 1) / m) (the
// fully observed entries in index order), -1 after.  A template, as every
// kernel of a header (defined in both unity batches).
template <class Bug>
__global__ void hca_indices(float* __restrict__ ids, CsaArgs a) {
    for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < a.l * a.slots;
         e += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long t = e / a.slots, j = e % a.slots, seen = (t + 1) / a.m;
        ids[e] = j < (seen < a.n ? seen : a.n) ? static_cast<float>(j) : -1.0f;
    }
}

// The registry entry of cuda.compressed_attention.<fmt> or of a mutant built on it (compressed_attention.cu).
KernelInfo compressed_attention_info(KernelInfo k, Format f);

template <class S, class Bug = CsaNoBug>
void run_compressed_attention_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const CsaArgs a = cpu::csa_dims(c);
    const std::string who = kernel;
    check_fp32_dv(a.c, who);
    if (a.mode == 0 && a.hi * a.c > kIndexerMaxQ)
        throw std::invalid_argument(who + ": Hi c = " + std::to_string(a.hi * a.c) +
                                    " > 12288: a query row of the indexer does not fit the block's shared memory");
    Stream s(kernel);
    const auto z = [](long long n) { return static_cast<std::size_t>(n); };
    std::vector<DeviceBuffer> in;
    in.reserve(10);
    CsaInputs<S> ptr{};
    for (int t = 0; t < 10; ++t) {
        in.emplace_back(z(c.in[t].numel()) * sizeof(S), kernel);
        upload(c.in[t], in.back(), s.get(), kernel);
        ptr.t[t] = in.back().as<S>();
    }
    const long long lk = a.n + a.l, rows = a.h * a.l;
    DeviceBuffer comp(z(a.n * a.c) * sizeof(S), kernel), scores(z(a.l * a.n) * 4, kernel), ids(z(a.l * a.slots) * 4, kernel),
        mask(z(a.l * lk) * 4, kernel), q32(z(rows * a.c) * 4, kernel), kv32(z(lk * a.c) * 4, kernel),
        o32(z(rows * a.c) * 4, kernel), lse(z(rows) * 4, kernel), o(z(rows * a.c) * sizeof(S), kernel);
    for (const DeviceBuffer* d : {&comp, &ids, &o}) poison(*d, s.get(), kernel);
    if (a.l > 0) {
        auto* comp_fn = csa_compress<S, Bug>;
        CONFORM_LAUNCH(comp_fn, dim3(blocks_for(a.n * a.c, lc)), dim3(lc.threads), 0, s.get())(ptr, comp.as<S>(), a);
        if (a.mode == 1) {
            auto* hca_fn = hca_indices<Bug>;
            CONFORM_LAUNCH(hca_fn, dim3(blocks_for(a.l * a.slots, lc)), dim3(lc.threads), 0, s.get())(ids.as<float>(), a);
        } else {
            IndexerArgs ia;
            ia.lq = a.l, ia.n = a.n, ia.h = static_cast<int>(a.hi), ia.c = static_cast<int>(a.c);
            launch_indexer<S>(ptr.t[kCsaIq], comp.as<S>(), ptr.t[kCsaIw], scores.as<float>(), ia, lc, s.get());
            SelectArgs sa;
            sa.lq = a.l, sa.n = a.n, sa.k = a.k, sa.r = a.m, sa.offset = 0, sa.force = 0;
            sa.causal = Bug::kPartialEntries ? 2 : 1;  // fully observed: n m + m - 1 <= t
            sa.slots = static_cast<int>(a.slots);
            launch_topk_select<float>(scores.as<float>(), ids.as<float>(), sa, lc, s.get());
        }
        SelectionMask m;
        m.rows = a.l, m.cols = lk, m.keys = a.n, m.slots = static_cast<int>(a.slots);
        m.window = Bug::kWindowPlusOne && a.window > 0 ? a.window + 1 : a.window, m.window_col = a.n;
        launch_selection_mask<float>(ids.as<float>(), mask.as<float>(), m, lc, s.get());
        launch_convert(ptr.t[kCsaQ], q32.as<float>(), rows * a.c, lc, s.get());
        launch_convert(comp.as<S>(), kv32.as<float>(), a.n * a.c, lc, s.get());
        launch_convert(ptr.t[kCsaRaw], kv32.as<float>() + a.n * a.c, a.l * a.c, lc, s.get());
        Fp32Attention f;
        f.hq = static_cast<int>(a.h), f.hkv = 1, f.lq = static_cast<int>(a.l), f.lk = static_cast<int>(lk);
        f.d = f.dv = static_cast<int>(a.c), f.scale = a.scale;
        launch_fp32_attention(f, q32.as<float>(), kv32.as<float>(), kv32.as<float>(), mask.as<float>(), o32.as<float>(),
                              lse.as<float>(), s.get());
        launch_convert(o32.as<float>(), o.as<S>(), rows * a.c, lc, s.get());
        check_launch(s.get(), kernel);
    }
    download(o, c.out[0], s.get(), kernel);
    download(comp, c.out[1], s.get(), kernel);
    download(ids, c.out[2], s.get(), kernel);
}

template <class Bug = CsaNoBug>
void run_compressed_attention(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_compressed_attention_as<decltype(s), Bug>(c, kernel, lc); });
}

}  // namespace conform::CONFORM_CUDA_NS
