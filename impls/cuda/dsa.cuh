// DeepSeek Sparse Attention on the GPU (dsa.cu registers the kernels; the
// GPU mutants of impls/mutants/cuda_dsa.cu instantiate them with one bug).
// docs/dsa_attention.md holds the formula, the staged verdict and the bound.
//
// The CPU kernels' composition, on the device with no host round-trip:
// sparse.cuh's indexer scores [Lq, Lk] in FP32, its top-k selection of the
// tokens s <= Lk - Lq + i (shared by the heads; ids in FP32), a block per
// query row writing the selection's 0 / -inf mask (NaN on a NaN row), then
// attention.cuh's kernels (tensor cores for FP16 and BF16, split-KV for
// decoding) under that mask -- the op's o and lse are attention over the
// selected tokens exactly, and the bound is the attention kernels'.
#pragma once
#include <string>
#include <vector>

#include "impls/cuda/sparse_attention.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct DsaNoBug {
    static constexpr bool kTopLeft = false;        // the causal limit s <= i (top-left), not s <= Lk - Lq + i
    static constexpr bool kBf16Scores = false;     // the indexer's scores rounded to BF16 before the selection
};

// The mutant bf16_index_scores' rounding of every score to BF16 (a template:
// defined in both unity batches, as every kernel of a header).
template <class T>
__global__ void dsa_bf16_scores(T* __restrict__ s, long long n) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        s[i] = __bfloat162float(__float2bfloat16(s[i]));
}

// kWide: the attention in FP32 on CUDA cores (sparse_attention.cuh's
// launch_fp32_attention over the inputs widened to FP32, one split, o
// rounded once) instead of the tensor-core kernels: any head dimension
// (MLA's absorbed 576) and Dv up to 512.
template <class S, class Bug = DsaNoBug, bool kWide = false>
void run_dsa_as(const KernelCall& c, const char* kernel, const AttnLaunch& l) {
    const std::string who = kernel;
    if (c.in.size() != 6 || c.out.size() != 3)
        throw std::invalid_argument(who + ": expects iq, ik, iw, q, kv, v -> o, lse, indices");
    const IndexerArgs ia = indexer_args(KernelCall{c.params, {c.in[0], c.in[1], c.in[2]}, {c.out[2]}}, kernel);
    // The attention kernels' parameters, as the CPU twin's: the op's scale and
    // no structural mask (the selection's does it); nothing else of the call.
    Params ap;
    ap.set("scale", c.params.get("scale", 0));
    ap.set("causal", 0);
    AttnArgs a = attention_args(KernelCall{ap, {c.in[3], c.in[4], c.in[5]}, {c.out[0], c.out[1]}}, l);
    a.has_mask = true;
    if constexpr (kWide) check_fp32_dv(a.dv, who);
    else padded_dim(a.d, a.dv);  // refuses head dimensions over 256 before any work
    SelectArgs sa;
    sa.lq = ia.lq, sa.n = ia.n, sa.k = c.out[2].shape[1], sa.r = 1, sa.causal = 1, sa.force = 0;
    sa.offset = Bug::kTopLeft ? 0 : ia.n - ia.lq;
    sa.slots = static_cast<int>(sa.k);
    if (a.lq != ia.lq || a.lk != ia.n || a.hkv != 1 || c.out[2].shape[0] != ia.lq || sa.k < 1)
        throw std::invalid_argument(who + ": q [H, Lq, D], kv [1, Lk, D], v [1, Lk, Dv] must match the indexer's Lq and "
                                    "Lk, indices be [Lq, k >= 1]");
    Stream s(kernel);
    std::vector<DeviceBuffer> in;
    in.reserve(6);
    for (int t = 0; t < 6; ++t) {
        in.emplace_back(static_cast<std::size_t>(c.in[t].numel()) * sizeof(S), kernel);
        upload(c.in[t], in.back(), s.get(), kernel);
    }
    const auto lqlk = static_cast<std::size_t>(ia.lq) * static_cast<std::size_t>(ia.n);
    const long long rows = static_cast<long long>(a.hq) * a.lq;
    const long long parts = merged(a) && !kWide ? a.splits : 0;
    using M = std::conditional_t<kWide, float, S>;  // the mask's storage: what the attention kernel reads
    const auto wide = [&](long long n) { return static_cast<std::size_t>(kWide ? n : 0) * 4; };
    DeviceBuffer scores(lqlk * 4, kernel), ids(static_cast<std::size_t>(ia.lq * sa.k) * 4, kernel),
        mask(lqlk * sizeof(M), kernel), o(rows * a.dv * sizeof(S), kernel), lse(rows * sizeof(float), kernel),
        po(parts * rows * a.dv * sizeof(float), kernel), pl(parts * rows * sizeof(float), kernel),
        q32(wide(c.in[3].numel()), kernel), k32(wide(c.in[4].numel()), kernel), v32(wide(c.in[5].numel()), kernel),
        o32(wide(rows * a.dv), kernel);
    for (const DeviceBuffer* d : {&ids, &o, &lse, &po, &pl}) poison(*d, s.get(), kernel);
    if (ia.lq > 0) {
        const Launch lc{};
        if (ia.n > 0) {
            launch_indexer<S>(in[0].as<S>(), in[1].as<S>(), in[2].as<S>(), scores.as<float>(), ia, lc, s.get());
            if constexpr (Bug::kBf16Scores) {
                auto* round_fn = dsa_bf16_scores<float>;
                CONFORM_LAUNCH(round_fn, dim3(static_cast<unsigned>(std::min<long long>((lqlk + 255) / 256, lc.max_blocks))),
                               dim3(256), 0, s.get())(scores.as<float>(), static_cast<long long>(lqlk));
            }
        }
        launch_topk_select<float>(scores.as<float>(), ids.as<float>(), sa, lc, s.get());
        SelectionMask m;
        m.rows = ia.lq, m.cols = m.keys = ia.n, m.slots = static_cast<int>(sa.k);
        launch_selection_mask<M>(ids.as<float>(), mask.as<M>(), m, lc, s.get());
        if (rows > 0) {
            if constexpr (kWide) {
                launch_convert(in[3].as<S>(), q32.as<float>(), c.in[3].numel(), lc, s.get());
                launch_convert(in[4].as<S>(), k32.as<float>(), c.in[4].numel(), lc, s.get());
                launch_convert(in[5].as<S>(), v32.as<float>(), c.in[5].numel(), lc, s.get());
                Fp32Attention f;
                f.hq = a.hq, f.hkv = 1, f.lq = a.lq, f.lk = a.lk, f.d = a.d, f.dv = a.dv, f.scale = a.scale;
                launch_fp32_attention(f, q32.as<float>(), k32.as<float>(), v32.as<float>(), mask.as<float>(),
                                      o32.as<float>(), lse.as<float>(), s.get(), l.warps);
                launch_convert(o32.as<float>(), o.as<S>(), rows * a.dv, lc, s.get());
            } else {
                const AttnBuffers<S> b{in[3].as<S>(), in[4].as<S>(), in[5].as<S>(), mask.as<S>(), o.as<S>(),
                                       lse.as<float>(), po.as<float>(), pl.as<float>(), nullptr, nullptr};
                launch_attention<S>(a, b, l.warps, s.get());
            }
        }
        check_launch(s.get(), kernel);
    }
    download(o, c.out[0], s.get(), kernel);
    download(lse, c.out[1], s.get(), kernel);
    download(ids, c.out[2], s.get(), kernel);
}

template <class Bug = DsaNoBug, bool kWide = false>
void run_dsa(const KernelCall& c, Format f, const char* kernel, const AttnLaunch& l = {}) {
    by_storage(f, [&](auto s) { run_dsa_as<decltype(s), Bug, kWide>(c, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
