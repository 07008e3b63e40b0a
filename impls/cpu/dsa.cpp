// CPU kernels of dsa_attention (docs/dsa_attention.md, "Kernels"): the
// indexer's scores [Lq, Lk] in FP32 by the lightning_indexer kernel, the
// token selection by the topk_select kernel (causal 1, offset Lk - Lq), and
// every head's attention by the attention kernel under the selection's
// additive mask (0 on the selected tokens, -inf elsewhere, NaN on a NaN row).
#include "impls/cpu/dsa.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "impls/cpu/attention.hpp"
#include "impls/cpu/sparse.hpp"

namespace conform::cpu {
namespace {

const char* dsa_variant_name(DsaVariant v) {
    return v == DsaVariant::simd ? "simd" : v == DsaVariant::scalar ? "scalar" : "naive";
}

// The attention kernel cpu.<variant>.attention.<format>.
const KernelInfo& dsa_attention_kernel(DsaVariant v, Format f) {
    static const std::vector<KernelInfo> kernels = cpu_attention_kernels();
    const std::string want = std::string("cpu.") + dsa_variant_name(v) + ".attention." + name(f);
    for (const KernelInfo& k : kernels)
        if (k.name == want) return k;
    throw std::invalid_argument("dsa_attention: no attention kernel " + want);
}

struct DsaDims {
    std::int64_t lq, hi, c, lk, h, k;
};

// Indexer scores [Lq, Lk] in FP32 from index queries [Lq, hi, c] and weights [Lq, hi].
Tensor dsa_index_scores(const TensorView& iq, const TensorView& ik, const TensorView& iw, DsaVariant v, bool relu_dropped) {
    Tensor s(Format::fp32, {iq.shape[0], ik.shape[0]});
    const Params none;
    const IndexerDots dots = v == DsaVariant::simd ? IndexerDots::simd : v == DsaVariant::scalar ? IndexerDots::scalar : IndexerDots::naive;
    lightning_indexer_call(KernelCall{none, {iq, ik, iw}, {s.view()}}, dots, {.relu_dropped = relu_dropped});
    return s;
}

// The token selection [Lq, k] (ids in FP32) of scores [Lq, Lk].
Tensor dsa_select(const DsaDims& d, const Tensor& scores, DsaVariant v, const DsaFlaws& f) {
    Tensor ids(Format::fp32, {d.lq, d.k});
    const Params p({{"k", static_cast<double>(d.k)}, {"block", 1}, {"causal", 1},
                    {"offset", static_cast<double>(d.lk - d.lq)}, {"force_local", 0}});
    topk_select_call(KernelCall{p, {scores.view()}, {ids.view()}}, v == DsaVariant::naive, {.masked_topk = f.masked_topk, .ties_to_higher = f.ties_to_higher});
    return ids;
}

// The selection's additive mask [Lq, Lk] in format f.
Tensor dsa_kernel_mask(const DsaDims& d, const Tensor& ids, Format f) {
    Tensor m(f, {d.lq, d.lk});
    for (std::int64_t i = 0; i < d.lq; ++i) {
        const bool nan_row = std::isnan(ids.value(i * d.k));
        for (std::int64_t n = 0; n < d.lk; ++n)
            m.set_value(i * d.lk + n, nan_row ? std::numeric_limits<double>::quiet_NaN() : -INFINITY);
        if (nan_row) continue;
        for (std::int64_t j = 0; j < d.k; ++j)
            if (const double id = ids.value(i * d.k + j); id >= 0 && id < static_cast<double>(d.lk))
                m.set_value(i * d.lk + static_cast<std::int64_t>(id), 0.0);
    }
    return m;
}

// Index-head j's own part [Lq, 1, c] of iq and [Lq, 1] of iw.
std::pair<Tensor, Tensor> dsa_index_head(const DsaDims& d, const TensorView& iq, const TensorView& iw, std::int64_t j) {
    Tensor q(iq.format, {d.lq, 1, d.c}), w(iw.format, {d.lq, 1});
    for (std::int64_t t = 0; t < d.lq; ++t) {
        for (std::int64_t i = 0; i < d.c; ++i) q.set_bits(t * d.c + i, iq.bits((t * d.hi + j) * d.c + i));
        w.set_bits(t, iw.bits(t * d.hi + j));
    }
    return {std::move(q), std::move(w)};
}

}  // namespace

void dsa_call(const KernelCall& c, DsaVariant v, const DsaFlaws& f) {
    const TensorView &iq = c.in[0], &ik = c.in[1], &iw = c.in[2], &q = c.in[3], &kv = c.in[4], &vv = c.in[5];
    const DsaDims d{iq.shape[0], iq.shape[1], iq.shape[2], ik.shape[0], q.shape[0], c.out[2].shape[1]};
    const KernelInfo& attn = dsa_attention_kernel(v, q.format);
    Params ap;
    ap.set("scale", c.params.get("scale", 0));
    ap.set("causal", 0);
    Tensor w1(iw.format, {d.lq, d.hi});
    for (std::int64_t i = 0; i < w1.numel(); ++i) w1.set_value(i, 1.0);
    const TensorView w = f.weights_ignored ? w1.view() : iw;
    const Tensor ids = dsa_select(d, dsa_index_scores(iq, ik, w, v, f.relu_dropped), v, f);
    for (std::int64_t i = 0; i < ids.numel(); ++i) c.out[2].set_bits(i, encode(c.out[2].format, ids.value(i)));
    if (!f.per_head_selection) {
        const Tensor mask = dsa_kernel_mask(d, ids, q.format);
        attn.fn(KernelCall{ap, {q, kv, vv, mask.view()}, {c.out[0], c.out[1]}});
        return;
    }
    for (std::int64_t h = 0; h < d.h; ++h) {
        const auto [hq, hw] = dsa_index_head(d, iq, w, h % d.hi);
        const Tensor ids_h = dsa_select(d, dsa_index_scores(hq.view(), ik, hw.view(), v, f.relu_dropped), v, f);
        const Tensor mask = dsa_kernel_mask(d, ids_h, q.format);
        attn.fn(KernelCall{ap, {q.slice_first(h, h + 1), kv, vv, mask.view()},
                           {c.out[0].slice_first(h, h + 1), c.out[1].slice_first(h, h + 1)}});
    }
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_dsa(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const cpu::DsaVariant v : {cpu::DsaVariant::simd, cpu::DsaVariant::scalar, cpu::DsaVariant::naive}) {
            const bool naive = v == cpu::DsaVariant::naive;
            KernelInfo k;
            k.op = "dsa_attention";
            k.variant = cpu::dsa_variant_name(v);
            k.name = "cpu." + k.variant + ".dsa_attention." + name(f);
            k.in = f, k.out = f, k.acc = Format::fp32;
            k.out_formats = {f, Format::fp32, Format::fp32};
            k.role = naive ? Role::baseline : Role::kernel;
            // The attention kernel's key tiles (N_b = ceil(Lk / B_k) rescales).
            if (!naive) k.declared["key_block"] = cpu::kAttnKeyTile;
            k.description = naive ? "naive baseline: cpu.naive.lightning_indexer's plain dot loops, every eligible token "
                                    "stable-sorted, cpu.naive.attention under the selection's mask"
                                  : "scores [Lq, Lk] in FP32 by cpu." + k.variant + ".lightning_indexer, the top k "
                                    "tokens s <= Lk - Lq + i by cpu.scalar.topk_select (shared by the heads; ids in "
                                    "FP32), then cpu." + k.variant + ".attention (one latent KV head) under the 0/-inf "
                                    "mask of the selection";
            k.fn = [v](const KernelCall& c) { cpu::dsa_call(c, v); };
            r.add(std::move(k));
        }
}

}  // namespace conform
