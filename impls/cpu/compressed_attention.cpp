// CPU kernels of compressed attention (docs/compressed_attention.md,
// "Kernels").  FP32 arithmetic throughout; the compressed entries are stored
// in the inputs' format S (the KV cache) and every later stage reads the
// stored entries: the indexer's keys and the core attention's keys and
// values are exactly the comp output.
#include "impls/cpu/compressed_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/attention.hpp"
#include "impls/cpu/sparse.hpp"
#include "oracle/compressed_attention.hpp"

namespace conform::cpu {
namespace {

constexpr float kCsaInf = std::numeric_limits<float>::infinity();

// One pooled channel: rows (logit, value); sum_r softmax(x)_r v_r, max-shifted
// expf in FP32.  A -inf logit carries no weight and its value is not read;
// NaN or +inf logits make the result NaN (as attention).
float csa_pool(const std::vector<float>& x, const std::vector<float>& v) {
    float mx = -kCsaInf;
    for (float s : x)
        if (std::isnan(s) || s == kCsaInf) return std::numeric_limits<float>::quiet_NaN();
        else mx = std::max(mx, s);
    if (mx == -kCsaInf) return 0.0f;
    float l = 0, acc = 0;
    for (std::size_t r = 0; r < x.size(); ++r) {
        if (x[r] == -kCsaInf) continue;
        const float e = std::exp(x[r] - mx);
        l += e;
        acc += std::isinf(v[r]) ? v[r] : e * v[r];  // the exact weight is positive: never 0 * inf
    }
    return acc / l;
}

// The compressor: comp [N, c] written into c.out[1] in its format.
void csa_compress(const KernelCall& c, const CsaKDims& d, const CsaFlaws& f) {
    const TensorView &ca = c.in[2], &za = c.in[3], &ba = c.in[4], &cb = c.in[5], &zb = c.in[6], &bb = c.in[7];
    for (std::int64_t n = 0; n < d.n; ++n)
        for (std::int64_t x = 0; x < d.c; ++x) {
            std::vector<float> xa, va, xb, vb;
            for (std::int64_t j = 0; j < d.m; ++j) {
                const std::int64_t t = d.m * n + j;
                xa.push_back(static_cast<float>(za.value(t * d.c + x)) + (f.bias_dropped ? 0.0f : static_cast<float>(ba.value(j * d.c + x))));
                va.push_back(static_cast<float>(ca.value(t * d.c + x)));
            }
            // Grouping b: [m (n - 1), m n) -- shifted by m, overlapping the previous entry's a.
            const bool with_b = d.mode == 0 && (n >= 1 || f.no_overlap);
            for (std::int64_t j = 0; with_b && j < d.m; ++j) {
                const std::int64_t t = f.no_overlap ? d.m * n + j : d.m * (n - 1) + j;
                xb.push_back(static_cast<float>(zb.value(t * d.c + x)) + (f.bias_dropped ? 0.0f : static_cast<float>(bb.value(j * d.c + x))));
                vb.push_back(static_cast<float>(cb.value(t * d.c + x)));
            }
            float y;
            if (f.mean_pool && d.mode == 1) {
                float s = 0;
                for (float v : va) s += v;
                y = s / static_cast<float>(d.m);
            } else if (f.separate_softmax && with_b) {
                y = csa_pool(xa, va) + csa_pool(xb, vb);
            } else {
                xa.insert(xa.end(), xb.begin(), xb.end());
                va.insert(va.end(), vb.begin(), vb.end());
                y = csa_pool(xa, va);
            }
            c.out[1].set_bits(n * d.c + x, encode(c.out[1].format, y));
        }
}

bool csa_eligible(const CsaKDims& d, std::int64_t n, std::int64_t t, const CsaFlaws& f) {
    return f.entry_vs_token ? n <= t : d.m * (n + 1) - 1 <= t;
}

// HCA's indices: the fully observed entries in index order, -1 after.
void csa_hca_indices(const KernelCall& c, const CsaKDims& d, const CsaFlaws& f) {
    for (std::int64_t t = 0; t < d.l; ++t)
        for (std::int64_t n = 0, j = 0; j < d.slots; ++n, ++j) {
            while (n < d.n && !csa_eligible(d, n, t, f)) ++n;
            c.out[2].set_bits(t * d.slots + j, encode(c.out[2].format, n < d.n ? static_cast<double>(n) : -1.0));
        }
}

// Naive selection: scores by plain FP32 loops, eligible entries stable-sorted
// by decreasing score (ties: the lower index), the first k; a NaN score among
// the eligible makes the row NaN.
void csa_naive_select(const KernelCall& c, const CsaKDims& d, const CsaFlaws& f) {
    const TensorView &iq = c.in[8], &iw = c.in[9], &comp = c.out[1];
    for (std::int64_t t = 0; t < d.l; ++t) {
        std::vector<float> sc(static_cast<std::size_t>(d.n));
        std::vector<std::int64_t> pool;
        bool nan = false;
        for (std::int64_t n = 0; n < d.n; ++n) {
            float sum = 0;
            for (std::int64_t h = 0; h < d.hi; ++h) {
                float dot = 0;
                for (std::int64_t x = 0; x < d.c; ++x)
                    dot += static_cast<float>(iq.value((t * d.hi + h) * d.c + x)) * static_cast<float>(comp.value(n * d.c + x));
                sum += static_cast<float>(iw.value(t * d.hi + h)) * (dot < 0 ? 0.0f : dot);
            }
            sc[static_cast<std::size_t>(n)] = sum;
            if (csa_eligible(d, n, t, f)) pool.push_back(n), nan = nan || std::isnan(sum);
        }
        std::stable_sort(pool.begin(), pool.end(), [&](std::int64_t a, std::int64_t b) {
            const float x = sc[static_cast<std::size_t>(a)], y = sc[static_cast<std::size_t>(b)];
            return x > y || (f.ties_to_higher && x == y && a > b);
        });
        for (std::int64_t j = 0; j < d.slots; ++j) {
            const double id = nan ? std::numeric_limits<double>::quiet_NaN()
                                  : j < static_cast<std::int64_t>(pool.size()) ? static_cast<double>(pool[static_cast<std::size_t>(j)]) : -1.0;
            c.out[2].set_bits(t * d.slots + j, encode(c.out[2].format, id));
        }
    }
}

// The suite's kernels: cpu.scalar.lightning_indexer's arithmetic into FP32
// scores, then topk_select (block m, fully observed; block 1 for the
// entry-vs-token mutant: tril(ones(L, N))).
void csa_select(const KernelCall& c, const CsaKDims& d, const CsaFlaws& f) {
    Tensor scores(Format::fp32, {d.l, d.n});
    const Params none;
    lightning_indexer_call(KernelCall{none, {c.in[8], c.out[1], c.in[9]}, {scores.view()}}, IndexerDots::scalar);
    const Params sel({{"k", static_cast<double>(d.k)}, {"block", static_cast<double>(f.entry_vs_token ? 1 : d.m)},
                      {"causal", 1}, {"offset", 0}, {"force_local", 0}});
    topk_select_call(KernelCall{sel, {scores.view()}, {c.out[2]}}, false);
}

// Rows of the core attention that see an entry (from the indices) or a raw
// row of the window: mask [L, N + L] of 0 / -inf; NaN index rows reported.
std::vector<char> csa_mask(const KernelCall& c, const CsaKDims& d, std::vector<float>& mask, const CsaFlaws& f) {
    const std::int64_t lk = d.n + d.l;
    mask.assign(static_cast<std::size_t>(d.l * lk), -kCsaInf);
    std::vector<char> nan_row(static_cast<std::size_t>(d.l), 0);
    for (std::int64_t t = 0; t < d.l; ++t) {
        for (std::int64_t j = 0; j < d.slots; ++j) {
            const double id = c.out[2].value(t * d.slots + j);
            if (std::isnan(id)) nan_row[static_cast<std::size_t>(t)] = 1;
            else if (id >= 0 && id < static_cast<double>(d.n)) mask[static_cast<std::size_t>(t * lk + static_cast<std::int64_t>(id))] = 0;
        }
        const std::int64_t first = t - d.window + (f.window_plus_one ? 0 : 1);
        for (std::int64_t r = std::max<std::int64_t>(0, first); d.window > 0 && r <= t; ++r)
            mask[static_cast<std::size_t>(t * lk + d.n + r)] = 0;
    }
    return nan_row;
}

// The core attention by cpu.scalar.attention on kv = [entries; raw] in S.
void csa_attend_kernel(const KernelCall& c, const CsaKDims& d, const std::vector<float>& mask) {
    const Format f = c.in[0].format;
    static const std::vector<KernelInfo> kernels = cpu_attention_kernels();
    const std::string want = std::string("cpu.scalar.attention.") + name(f);
    const auto it = std::find_if(kernels.begin(), kernels.end(), [&](const KernelInfo& k) { return k.name == want; });
    if (it == kernels.end()) throw std::runtime_error("compressed_attention: no kernel " + want);
    const std::int64_t lk = d.n + d.l;
    Tensor kv(f, {1, lk, d.c}), mk(f, {d.l, lk}), lse(Format::fp32, {d.h, d.l});
    for (std::int64_t e = 0; e < d.n * d.c; ++e) kv.set_bits(e, c.out[1].bits(e));
    for (std::int64_t e = 0; e < d.l * d.c; ++e) kv.set_bits(d.n * d.c + e, c.in[1].bits(e));
    for (std::int64_t e = 0; e < d.l * lk; ++e) mk.set_value(e, mask[static_cast<std::size_t>(e)]);
    const Params ap({{"scale", d.scale}});
    it->fn(KernelCall{ap, {c.in[0], kv.view(), kv.view(), mk.view()}, {c.out[0], lse.view()}});
}

// The core attention in plain loops: per head and token the visible keys'
// FP32 logits, max-shifted expf, o = sum e v / sum e (0 for a row that sees
// nothing).
void csa_attend_naive(const KernelCall& c, const CsaKDims& d, const std::vector<float>& mask) {
    const std::int64_t lk = d.n + d.l;
    const float scale = static_cast<float>(d.scale);
    auto key = [&](std::int64_t j, std::int64_t x) {
        return static_cast<float>(j < d.n ? c.out[1].value(j * d.c + x) : c.in[1].value((j - d.n) * d.c + x));
    };
    for (std::int64_t h = 0; h < d.h; ++h)
        for (std::int64_t t = 0; t < d.l; ++t) {
            std::vector<float> s(static_cast<std::size_t>(lk), -kCsaInf);
            float mx = -kCsaInf;
            bool bad = false;
            for (std::int64_t j = 0; j < lk; ++j) {
                if (mask[static_cast<std::size_t>(t * lk + j)] == -kCsaInf) continue;
                float dot = 0;
                for (std::int64_t x = 0; x < d.c; ++x) dot += static_cast<float>(c.in[0].value((h * d.l + t) * d.c + x)) * key(j, x);
                const float v = scale * dot;
                s[static_cast<std::size_t>(j)] = v;
                bad = bad || std::isnan(v) || v == kCsaInf;
                if (v > mx) mx = v;
            }
            std::vector<float> acc(static_cast<std::size_t>(d.c), 0.0f);
            float l = 0;
            for (std::int64_t j = 0; j < lk && !bad && mx != -kCsaInf; ++j) {
                if (s[static_cast<std::size_t>(j)] == -kCsaInf) continue;
                const float e = std::exp(s[static_cast<std::size_t>(j)] - mx);
                l += e;
                for (std::int64_t x = 0; x < d.c; ++x) acc[static_cast<std::size_t>(x)] += e * key(j, x);
            }
            for (std::int64_t x = 0; x < d.c; ++x) {
                const float o = bad ? std::numeric_limits<float>::quiet_NaN() : mx == -kCsaInf ? 0.0f : acc[static_cast<std::size_t>(x)] / l;
                c.out[0].set_bits((h * d.l + t) * d.c + x, encode(c.out[0].format, o));
            }
        }
}

}  // namespace

CsaKDims csa_dims(const KernelCall& c) {
    const oracle::CsaSetup o = oracle::csa_setup(c.params, c.in);
    if (c.in.size() != 10 || c.out.size() != 3) throw std::invalid_argument("compressed_attention kernel: 10 inputs, 3 outputs");
    const CsaKDims d{o.mode, o.m, o.k, o.window, o.heads, o.tokens, o.dim, o.index_heads, o.entries, o.slots, o.scale};
    const TensorView &out = c.out[0], &comp = c.out[1], &idx = c.out[2];
    if (out.rank != 3 || out.shape[0] != d.h || out.shape[1] != d.l || out.shape[2] != d.c || comp.rank != 2 ||
        comp.shape[0] != d.n || comp.shape[1] != d.c || idx.rank != 2 || idx.shape[0] != d.l || idx.shape[1] != d.slots)
        throw std::invalid_argument("compressed_attention kernel: outputs must be o [H, L, c], comp [N, c] and indices [L, " +
                                    std::to_string(d.slots) + "]");
    return d;
}

void declare_csa_tiles(KernelInfo& k) {
    k.declared["compressor_block"] = kAttnKeyTile;
    k.declared["key_block"] = kAttnKeyTile;
}

void compressed_attention_call(const KernelCall& c, bool naive, const CsaFlaws& f) {
    const CsaKDims d = csa_dims(c);
    csa_compress(c, d, f);
    if (d.mode == 1) csa_hca_indices(c, d, f);
    else if (naive) csa_naive_select(c, d, f);
    else csa_select(c, d, f);
    std::vector<float> mask;
    const std::vector<char> nan_row = csa_mask(c, d, mask, f);
    if (naive) csa_attend_naive(c, d, mask);
    else csa_attend_kernel(c, d, mask);
    for (std::int64_t t = 0; t < d.l; ++t)
        if (nan_row[static_cast<std::size_t>(t)])
            for (std::int64_t h = 0; h < d.h; ++h)
                for (std::int64_t x = 0; x < d.c; ++x)
                    c.out[0].set_bits((h * d.l + t) * d.c + x, encode(c.out[0].format, std::numeric_limits<double>::quiet_NaN()));
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_compressed_attention(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const bool naive : {false, true}) {
            KernelInfo k;
            k.op = "compressed_attention";
            k.variant = naive ? "naive" : "scalar";
            k.name = "cpu." + k.variant + ".compressed_attention." + name(f);
            k.in = k.out = f, k.acc = Format::fp32;
            k.out_formats = {f, f, Format::fp32};
            if (naive) k.role = Role::baseline;
            cpu::declare_csa_tiles(k);
            k.description = std::string("compressor in FP32 (z + b, max-shifted expf softmax over the 2m or m rows, ") +
                            "the weighted sum over the sum), entries stored in the input format; " +
                            (naive ? "naive baseline: the indexer, the selection (stable sort) and the attention in "
                                     "plain FP32 loops"
                                   : "cpu.scalar.lightning_indexer's dots and head sum, topk_select's partial sort "
                                     "(block m, fully observed), cpu.scalar.attention over [entries; raw] with a "
                                     "0/-inf mask") +
                            "; indices stored in FP32";
            k.fn = [naive](const KernelCall& c) { cpu::compressed_attention_call(c, naive); };
            r.add(std::move(k));
        }
}

}  // namespace conform
