// CPU kernels of block_sparse_attention (docs/block_sparse_attention.md,
// "Kernels"): the block scores in FP32 (MSA: FP32 dot products times an FP32
// 1/sqrt(Di), max pooled; QSA: FP32 mean, zero-centred RMSNorm and partial
// RoPE with FP32 cos/sin tables of double angles, FP32 dots and head sum),
// the selection by topk_select's kernel, and each selection group's attention
// by the attention kernel over the gathered tokens of the selected blocks.
#include "impls/cpu/block_sparse.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/attention.hpp"
#include "oracle/block_sparse.hpp"

namespace conform::cpu {
namespace {

using BsaShape = BlockSparseDims;

std::vector<float> bsa_row(const TensorView& t, std::int64_t at, std::int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(t.value(at + i));
    return v;
}

float bsa_dot(const std::vector<float>& a, const std::vector<float>& b) {
    float s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// MSA: scores [L, N] of group g; only the entries the selector reads (blocks
// started before the query's own) are written.
void msa_scores(const KernelCall& c, const BsaShape& s, std::int64_t g, const BlockSparseFlaws& f, Tensor& scores) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.di));
    std::vector<std::vector<float>> keys;
    for (std::int64_t j = 0; j < s.len; ++j) keys.push_back(bsa_row(c.in[4], j * s.di, s.di));
    for (std::int64_t t = 0; t < s.len; ++t) {
        const std::vector<float> q = bsa_row(c.in[3], (g * s.len + t) * s.di, s.di);
        for (std::int64_t b = 0; b < s.n && b * s.r <= t; ++b) {
            if (b == t / s.r) continue;
            float best = -std::numeric_limits<float>::infinity(), sum = 0;
            std::int64_t count = 0;
            for (std::int64_t j = b * s.r; j < std::min(s.len, b * s.r + s.r) && j <= t; ++j, ++count) {
                const float x = bsa_dot(q, keys[static_cast<std::size_t>(j)]) * scale;
                best = std::isnan(x) || std::isnan(best) ? std::numeric_limits<float>::quiet_NaN() : std::max(best, x);
                sum += x;
            }
            scores.set_value(t * s.n + b, f.msa_mean_pool ? sum / static_cast<float>(count) : best);
        }
    }
}

// QSA's index vector: zero-centred RMSNorm with weight w, then the first
// rope_dim dims rotated (half-split pairs) at position pos.
std::vector<float> qsa_vector(std::vector<float> x, const TensorView& w, std::int64_t pos, const BsaShape& s) {
    float ss = 0;
    for (float v : x) ss += v * v;
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(s.di) + static_cast<float>(s.eps));
    for (std::int64_t i = 0; i < s.di; ++i)
        x[static_cast<std::size_t>(i)] = x[static_cast<std::size_t>(i)] * inv * (1.0f + static_cast<float>(w.value(i)));
    const std::int64_t half = s.rope_dim / 2;
    for (std::int64_t j = 0; j < half; ++j) {
        const double angle = static_cast<double>(pos) * std::pow(s.base, -2.0 * static_cast<double>(j) / static_cast<double>(s.rope_dim));
        const auto cs = static_cast<float>(std::cos(angle)), sn = static_cast<float>(std::sin(angle));
        const float xa = x[static_cast<std::size_t>(j)], xb = x[static_cast<std::size_t>(j + half)];
        x[static_cast<std::size_t>(j)] = xa * cs - xb * sn;
        x[static_cast<std::size_t>(j + half)] = xa * sn + xb * cs;
    }
    return x;
}

// QSA: scores [L, N]; only the fully observed blocks are written.
void qsa_scores(const KernelCall& c, const BsaShape& s, const BlockSparseFlaws& f, Tensor& scores) {
    std::vector<std::vector<float>> keys;
    for (std::int64_t b = 0; b * s.r + s.r <= s.len; ++b) {
        std::vector<float> m(static_cast<std::size_t>(s.di), f.qsa_max_pool ? -std::numeric_limits<float>::infinity() : 0.0f);
        for (std::int64_t j = b * s.r; j < b * s.r + s.r; ++j)
            for (std::int64_t i = 0; i < s.di; ++i) {
                const auto x = static_cast<float>(c.in[4].value(j * s.di + i));
                float& mi = m[static_cast<std::size_t>(i)];
                mi = f.qsa_max_pool ? std::max(mi, x) : mi + x;
            }
        if (!f.qsa_max_pool)
            for (float& v : m) v /= static_cast<float>(s.r);
        keys.push_back(qsa_vector(m, c.in[6], f.qsa_rope_at_index ? b : b * s.r, s));
    }
    for (std::int64_t t = 0; t < s.len; ++t) {
        std::vector<std::vector<float>> qs;
        for (std::int64_t h = 0; h < s.gi; ++h) qs.push_back(qsa_vector(bsa_row(c.in[3], (h * s.len + t) * s.di, s.di), c.in[5], t, s));
        for (std::int64_t b = 0; b * s.r + s.r - 1 <= t; ++b) {
            float sum = 0;
            for (const auto& q : qs) {
                const float d = bsa_dot(q, keys[static_cast<std::size_t>(b)]);
                sum += std::isnan(d) ? d : std::max(d, 0.0f);
            }
            scores.set_value(t * s.n + b, sum);
        }
    }
}

}  // namespace

BlockSparseDims block_sparse_dims(const KernelCall& c) {
    const oracle::BlockSparseSetup o = oracle::block_sparse_setup(c.params, c.in);
    if (c.in.size() != 7 || c.out.size() != 2)
        throw std::invalid_argument("block_sparse_attention kernel: expects 7 inputs and 2 outputs (o, indices)");
    BlockSparseDims s{o.mode,      o.hq,           o.groups,         o.len, o.d,     o.dv,        o.gi,       o.di,
                      o.block,     o.k,            o.rope_dim,       o.blocks, o.sel_groups, o.select.slots, o.eps, o.rope_base,
                      o.scale};
    const TensorView &out = c.out[0], &idx = c.out[1];
    if (out.rank != 3 || out.shape[0] != s.hq || out.shape[1] != s.len || out.shape[2] != s.dv || idx.rank != 3 ||
        idx.shape[0] != s.sel_groups || idx.shape[1] != s.len || idx.shape[2] != s.slots)
        throw std::invalid_argument("block_sparse_attention kernel: outputs must be o [Hq, L, Dv] and indices [" +
                                    std::to_string(s.sel_groups) + ", L, " + std::to_string(s.slots) + "]");
    return s;
}

namespace {

const KernelFn& bsa_attention_kernel(Format f, bool naive) {
    static const std::vector<KernelInfo> list = cpu_attention_kernels();
    const std::string want = std::string("cpu.") + (naive ? "naive" : "scalar") + ".attention." + name(f);
    for (const KernelInfo& k : list)
        if (k.name == want) return k.fn;
    throw std::logic_error("block_sparse_attention: no kernel " + want);
}

}  // namespace

void block_sparse_call(const KernelCall& c, Format f, bool naive, const BlockSparseFlaws& flaws) {
    const BsaShape s = block_sparse_dims(c);
    Params sel_params;
    sel_params.set("k", static_cast<double>(s.k));
    sel_params.set("block", static_cast<double>(s.r));
    sel_params.set("causal", s.mode == 0 ? 2 : 1);
    sel_params.set("offset", 0);
    sel_params.set("force_local", s.mode == 0 ? 1 : 2);
    Params attn_params;
    attn_params.set("scale", c.params.get("scale", 0));
    const KernelFn& attend = bsa_attention_kernel(f, naive);
    const std::int64_t per = s.hq / s.groups;
    for (std::int64_t g = 0; g < s.sel_groups; ++g) {
        Tensor scores(Format::fp32, {s.len, s.n}), idx(Format::fp32, {s.len, s.slots});
        if (s.mode == 0) msa_scores(c, s, g, flaws, scores);
        else qsa_scores(c, s, flaws, scores);
        topk_select_call(KernelCall{sel_params, {scores.view()}, {idx.view()}}, false, flaws.select);
        // Per query row: the selected blocks' tokens up to t, gathered in
        // increasing order, attended by the attention kernel.
        const std::int64_t h0 = s.mode == 0 ? g * per : 0, nh = s.mode == 0 ? per : s.hq;
        const std::int64_t kv0 = s.mode == 0 ? g : 0, nkv = s.mode == 0 ? 1 : s.groups;
        for (std::int64_t t = 0; t < s.len; ++t) {
            std::vector<double> ids(static_cast<std::size_t>(s.slots));
            for (std::int64_t slot = 0; slot < s.slots; ++slot) {
                ids[static_cast<std::size_t>(slot)] = idx.value(t * s.slots + slot);
                c.out[1].set_bits((g * s.len + t) * s.slots + slot, encode(c.out[1].format, ids[static_cast<std::size_t>(slot)]));
            }
            const std::vector<std::int64_t> tok = oracle::block_sparse_tokens(ids.data(), s.slots, s.r, s.len, t);
            if (tok.empty()) {  // nothing selected (a NaN score in the row): o NaN
                for (std::int64_t h = 0; h < nh; ++h)
                    for (std::int64_t d = 0; d < s.dv; ++d)
                        c.out[0].set_bits(((h0 + h) * s.len + t) * s.dv + d, encode(c.out[0].format, std::nan("")));
                continue;
            }
            const Tensor q = oracle::gather_head_rows(c.in[0], h0, nh, {t}), k = oracle::gather_head_rows(c.in[1], kv0, nkv, tok),
                         v = oracle::gather_head_rows(c.in[2], kv0, nkv, tok);
            Tensor o(f, {nh, 1, s.dv}), lse(Format::fp32, {nh, 1});
            attend(KernelCall{attn_params, {q.view(), k.view(), v.view()}, {o.view(), lse.view()}});
            for (std::int64_t h = 0; h < nh; ++h)
                for (std::int64_t d = 0; d < s.dv; ++d)
                    c.out[0].set_bits(((h0 + h) * s.len + t) * s.dv + d, encode(c.out[0].format, o.value(h * s.dv + d)));
        }
    }
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_block_sparse(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const bool naive : {false, true}) {
            KernelInfo k;
            k.op = "block_sparse_attention";
            k.variant = naive ? "naive" : "scalar";
            k.name = "cpu." + k.variant + ".block_sparse_attention." + name(f);
            k.in = f, k.out = f, k.acc = Format::fp32;
            k.out_formats = {f, Format::fp32};
            if (naive) k.role = Role::baseline;
            k.description = naive ? "naive baseline: FP32 block scores, topk_select's kernel, cpu.naive.attention over "
                                    "the selected blocks' gathered tokens"
                                  : "FP32 block scores (MSA max pooled token dots; QSA mean, ZC-RMSNorm, partial RoPE, "
                                    "ReLU head sum), topk_select's kernel, cpu.scalar.attention over the selected "
                                    "blocks' gathered tokens (per query row)";
            k.fn = [f, naive](const KernelCall& c) { cpu::block_sparse_call(c, f, naive); };
            r.add(std::move(k));
        }
}

}  // namespace conform
