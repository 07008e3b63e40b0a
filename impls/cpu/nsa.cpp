// CPU kernels of nsa_attention (docs/nsa_attention.md, "Kernels").  The
// selected and window branches call the FP32 attention kernel and the
// selection calls topk_select's kernel; the compressed branch (whose softmax
// weights are the importance) is a direct FP32 softmax per query row.
#include "impls/cpu/nsa.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "impls/cpu/attention.hpp"
#include "impls/cpu/sparse.hpp"
#include "oracle/nsa.hpp"

namespace conform::cpu {
namespace {

constexpr float kNsaInf = std::numeric_limits<float>::infinity();
constexpr float kNsaNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> nsa_widen(const TensorView& t) {
    std::vector<float> x(static_cast<std::size_t>(t.numel()));
    for (std::int64_t e = 0; e < t.numel(); ++e) x[static_cast<std::size_t>(e)] = static_cast<float>(t.value(e));
    return x;
}

// Mean pooling of [Hkv, Lk, w] into [Hkv, blocks, w]: the FP32 sum of x / l
// in order (no overflow where the mean is finite), stored in format f.
std::vector<float> nsa_pool32(const NsaShape& s, const std::vector<float>& x, long w, Format f) {
    std::vector<float> out(static_cast<std::size_t>(s.hkv * s.blocks * w));
    for (long g = 0; g < s.hkv; ++g)
        for (long b = 0; b < s.blocks; ++b)
            for (long c = 0; c < w; ++c) {
                float sum = 0;
                for (long j = b * s.l; j < (b + 1) * s.l; ++j)
                    sum += x[static_cast<std::size_t>((g * s.lk + j) * w + c)] / static_cast<float>(s.l);
                out[static_cast<std::size_t>((g * s.blocks + b) * w + c)] = static_cast<float>(decode(f, encode(f, sum)));
            }
    return out;
}

// One query row's softmax attention over `keys` (rows of k [., d] and v
// [., dv]), direct form in FP32: logits scale q.k (times `mult`), max, expf,
// sum, o = acc * (1/L).  p (if given) receives the weights e_j / L.  No key:
// o = 0; a NaN or +inf logit: o and p NaN.
void nsa_direct(const float* q, const float* k, const float* v, long d, long dv, const std::vector<long>& keys, float scale,
                float mult, float* o, std::vector<float>* p) {
    std::fill(o, o + dv, 0.0f);
    if (p) p->assign(keys.size(), 0.0f);
    if (keys.empty()) return;
    std::vector<float> z(keys.size());
    float m = -kNsaInf;
    for (std::size_t j = 0; j < keys.size(); ++j) {
        float dot = 0;
        for (long t = 0; t < d; ++t) dot += q[t] * k[keys[j] * d + t];
        z[j] = dot * scale;
        if (mult != 1.0f) z[j] *= mult;
        if (std::isnan(z[j]) || z[j] == kNsaInf) {
            std::fill(o, o + dv, kNsaNaN);
            if (p) p->assign(keys.size(), kNsaNaN);
            return;
        }
        m = std::max(m, z[j]);
    }
    if (m == -kNsaInf) return;
    float sum = 0;
    std::vector<float> acc(static_cast<std::size_t>(dv), 0.0f);
    for (std::size_t j = 0; j < keys.size(); ++j) {
        const bool zero = z[j] == -kNsaInf;  // a -inf logit: weight exactly 0, the value not read
        z[j] = std::exp(z[j] - m);
        sum += z[j];
        for (long c = 0; c < dv && !zero; ++c) {  // an infinite v counts whole even where its weight underflows
            const float x = v[keys[j] * dv + c];
            acc[static_cast<std::size_t>(c)] += std::isinf(x) ? x : z[j] * x;
        }
    }
    const float r = 1.0f / sum;
    for (long c = 0; c < dv; ++c) o[c] = acc[static_cast<std::size_t>(c)] * r;
    if (p)
        for (std::size_t j = 0; j < keys.size(); ++j) (*p)[j] = z[j] * r;
}

// An fp32 tensor of shape with x.
Tensor nsa_tensor32(std::vector<std::int64_t> shape, const float* x) {
    Tensor t(Format::fp32, std::move(shape));
    for (std::int64_t e = 0; e < t.numel(); ++e) t.set_value(e, x[e]);
    return t;
}

// The FP32 attention kernel (cpu.scalar.attention.fp32) on q [G, Lq, D],
// k [1, Lk, D], v [1, Lk, Dv] and the optional mask with params p: o [G, Lq, Dv].
std::vector<float> nsa_attention32(const NsaShape& s, const float* q, long heads, const float* k, const float* v,
                                   const std::vector<float>* mask, const Params& p) {
    const Tensor tq = nsa_tensor32({heads, s.lq, s.d}, q), tk = nsa_tensor32({1, s.lk, s.d}, k),
                 tv = nsa_tensor32({1, s.lk, s.dv}, v);
    Tensor to(Format::fp32, {heads, s.lq, s.dv}), tl(Format::fp32, {heads, s.lq});
    std::vector<TensorView> in{tq.view(), tk.view(), tv.view()};
    Tensor tm;
    if (mask) {
        tm = nsa_tensor32({s.lq, s.lk}, mask->data());
        in.push_back(tm.view());
    }
    gated_attention_call(KernelCall{p, in, {to.view(), tl.view()}}, Format::fp32, GateForm::none);
    return nsa_widen(to.view());
}

}  // namespace

NsaShape nsa_dims(const KernelCall& c) {
    const oracle::NsaSetup o = oracle::nsa_setup(c.params, c.in);
    if (c.in.size() != 4 || c.out.size() != 2)
        throw std::invalid_argument("nsa_attention kernel: expects q, k, v, g -> o, indices");
    NsaShape s{};
    s.hq = o.hq, s.hkv = o.hkv, s.lq = o.lq, s.lk = o.lk, s.d = o.d, s.dv = o.dv, s.group = o.group;
    s.l = o.block, s.n = o.n, s.w = o.window, s.force = o.force_local, s.offset = o.offset;
    s.blocks = o.blocks, s.cand = o.candidates;
    const double scale = c.params.get("scale", 0);
    s.scale = static_cast<float>(scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(s.d)));
    const TensorView &out = c.out[0], &idx = c.out[1];
    if (out.rank != 3 || out.shape[0] != s.hq || out.shape[1] != s.lq || out.shape[2] != s.dv || idx.rank != 3 ||
        idx.shape[0] != s.hkv || idx.shape[1] != s.lq || idx.shape[2] != s.n)
        throw std::invalid_argument("nsa_attention kernel: outputs must be o [Hq, Lq, Dv] and indices [Hkv, Lq, n]");
    return s;
}

void nsa_call(const KernelCall& c, bool naive, const NsaFlaws& flaws) {
    const NsaShape s = nsa_dims(c);
    const Format f = c.in[0].format;
    const std::vector<float> q = nsa_widen(c.in[0]), k = nsa_widen(c.in[1]), v = nsa_widen(c.in[2]), g = nsa_widen(c.in[3]);
    const std::vector<float> kc = nsa_pool32(s, k, s.d, f);
    std::vector<float> vc = nsa_pool32(s, v, s.dv, f);
    if (flaws.cv_equals_ck)
        for (long b = 0; b < s.hkv * s.blocks; ++b)
            for (long x = 0; x < s.dv; ++x) vc[static_cast<std::size_t>(b * s.dv + x)] = x < s.d ? kc[static_cast<std::size_t>(b * s.d + x)] : 0.0f;
    const auto gate = [&](long h, long i, int b) { return g[static_cast<std::size_t>((h * s.lq + i) * 3 + b)]; };
    const auto mult = [&](long h, long i, int b) { return flaws.gate_in_logits ? sigmoid32(gate(h, i, b)) : 1.0f; };
    const std::size_t n_o = static_cast<std::size_t>(s.hq * s.lq * s.dv);
    std::vector<float> oc(n_o), os(n_o), ow(n_o);

    // Compressed branch and the importance (the group's heads in order).
    std::vector<float> imp(static_cast<std::size_t>(s.hkv * s.lq * s.cand), 0.0f), p;
    for (long h = 0; h < s.hq; ++h)
        for (long i = 0; i < s.lq; ++i) {
            const long kv = h / s.group, vis = flaws.compressed_uncausal ? s.blocks : (s.pos(i) + 1) / s.l;
            std::vector<long> keys(static_cast<std::size_t>(vis));
            for (long b = 0; b < vis; ++b) keys[static_cast<std::size_t>(b)] = b;
            nsa_direct(&q[static_cast<std::size_t>((h * s.lq + i) * s.d)], kc.data() + kv * s.blocks * s.d,
                       vc.data() + kv * s.blocks * s.dv, s.d, s.dv, keys, s.scale, mult(h, i, 0),
                       &oc[static_cast<std::size_t>((h * s.lq + i) * s.dv)], &p);
            float* row = &imp[static_cast<std::size_t>((kv * s.lq + i) * s.cand)];
            for (std::size_t b = 0; b < p.size(); ++b) row[b] += p[b];
        }

    // Selection: topk_select's kernel per KV head over the importance.
    const Params sp({{"k", static_cast<double>(s.n)}, {"block", static_cast<double>(s.l)}, {"causal", 1},
                     {"offset", static_cast<double>(s.offset)}, {"force_local", static_cast<double>(s.force)}});
    SelectFlaws sf;
    sf.future_block = flaws.future_block, sf.local_missing = flaws.local_missing, sf.ties_to_higher = flaws.ties_to_higher;
    sf.masked_topk = flaws.masked_topk;
    std::vector<double> sel(static_cast<std::size_t>(s.hkv * s.lq * s.n));
    for (long kv = 0; kv < s.hkv; ++kv) {
        const Tensor scores = nsa_tensor32({s.lq, s.cand}, &imp[static_cast<std::size_t>(kv * s.lq * s.cand)]);
        Tensor ids(Format::fp32, {s.lq, s.n});
        topk_select_call(KernelCall{sp, {scores.view()}, {ids.view()}}, naive, sf);
        for (long e = 0; e < s.lq * s.n; ++e) {
            sel[static_cast<std::size_t>(kv * s.lq * s.n + e)] = ids.value(e);
            c.out[1].set_bits(kv * s.lq * s.n + e, encode(c.out[1].format, ids.value(e)));
        }
    }
    // The tokens s <= t of row (kv, i)'s selected blocks, in increasing order.
    const auto selected = [&](long kv, long i, bool& poisoned) {
        std::vector<long> blocks, keys;
        poisoned = false;
        for (long j = 0; j < s.n; ++j) {
            const double id = sel[static_cast<std::size_t>((kv * s.lq + i) * s.n + j)];
            if (std::isnan(id)) poisoned = true;
            else if (id >= 0) blocks.push_back(static_cast<long>(id));
        }
        std::sort(blocks.begin(), blocks.end());
        for (long b : blocks)
            for (long t = b * s.l; t < std::min(s.lk, (b + 1) * s.l) && t <= s.pos(i); ++t) keys.push_back(t);
        return keys;
    };

    if (naive || flaws.gate_in_logits) {
        for (long h = 0; h < s.hq; ++h)
            for (long i = 0; i < s.lq; ++i) {
                const long kv = h / s.group;
                const auto at = static_cast<std::size_t>((h * s.lq + i) * s.dv);
                const float* qr = &q[static_cast<std::size_t>((h * s.lq + i) * s.d)];
                const float* kh = &k[static_cast<std::size_t>(kv * s.lk * s.d)];
                const float* vh = &v[static_cast<std::size_t>(kv * s.lk * s.dv)];
                bool poisoned = false;
                const std::vector<long> keys = selected(kv, i, poisoned);
                nsa_direct(qr, kh, vh, s.d, s.dv, keys, s.scale, mult(h, i, 1), &os[at], nullptr);
                if (poisoned) std::fill(&os[at], &os[at] + s.dv, kNsaNaN);
                std::vector<long> win;
                for (long t = std::max(0L, s.pos(i) - s.w + 1); t <= s.pos(i); ++t) win.push_back(t);
                nsa_direct(qr, kh, vh, s.d, s.dv, win, s.scale, mult(h, i, 2), &ow[at], nullptr);
            }
    } else {
        const Params ap({{"scale", c.params.get("scale", 0)}});
        for (long kv = 0; kv < s.hkv; ++kv) {
            std::vector<float> mask(static_cast<std::size_t>(s.lq * s.lk), -kNsaInf);
            std::vector<char> poisoned(static_cast<std::size_t>(s.lq), 0);
            for (long i = 0; i < s.lq; ++i) {
                bool bad = false;
                for (long t : selected(kv, i, bad)) mask[static_cast<std::size_t>(i * s.lk + t)] = 0;
                poisoned[static_cast<std::size_t>(i)] = bad;
            }
            const std::size_t q0 = static_cast<std::size_t>(kv * s.group * s.lq);
            const std::vector<float> o = nsa_attention32(s, &q[q0 * static_cast<std::size_t>(s.d)], s.group,
                                                         &k[static_cast<std::size_t>(kv * s.lk * s.d)],
                                                         &v[static_cast<std::size_t>(kv * s.lk * s.dv)], &mask, ap);
            for (long r = 0; r < s.group * s.lq; ++r)
                for (long x = 0; x < s.dv; ++x)
                    os[(q0 + static_cast<std::size_t>(r)) * static_cast<std::size_t>(s.dv) + static_cast<std::size_t>(x)] =
                        poisoned[static_cast<std::size_t>(r % s.lq)] ? kNsaNaN : o[static_cast<std::size_t>(r * s.dv + x)];
        }
        // The window branch: every head in one call per KV head.
        const Params wp({{"scale", c.params.get("scale", 0)}, {"window", static_cast<double>(s.w)}});
        for (long kv = 0; kv < s.hkv; ++kv) {
            const std::size_t q0 = static_cast<std::size_t>(kv * s.group * s.lq);
            const std::vector<float> o = nsa_attention32(s, &q[q0 * static_cast<std::size_t>(s.d)], s.group,
                                                         &k[static_cast<std::size_t>(kv * s.lk * s.d)],
                                                         &v[static_cast<std::size_t>(kv * s.lk * s.dv)], nullptr, wp);
            std::copy(o.begin(), o.end(), ow.begin() + static_cast<std::ptrdiff_t>(q0 * static_cast<std::size_t>(s.dv)));
        }
    }

    // The gates: fl(fl(sigma_c o_c + sigma_s o_s) + sigma_w o_w), rounded once into the format.  An
    // infinite branch output with a gate above -inf stays infinite (as gated attention).
    const auto gated = [&](float o, float gl) { return gate_output(o, gl, flaws.gate_in_logits ? GateForm::none : GateForm::sigmoid); };
    for (long h = 0; h < s.hq; ++h)
        for (long i = 0; i < s.lq; ++i)
            for (long x = 0; x < s.dv; ++x) {
                const auto e = static_cast<std::size_t>((h * s.lq + i) * s.dv + x);
                const float y = gated(oc[e], gate(h, i, 0)) + gated(os[e], gate(h, i, 1)) + gated(ow[e], gate(h, i, 2));
                c.out[0].set_bits(static_cast<std::int64_t>(e), encode(c.out[0].format, y));
            }
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_nsa(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const bool naive : {false, true}) {
            KernelInfo k;
            k.op = "nsa_attention";
            k.variant = naive ? "naive" : "scalar";
            k.name = "cpu." + k.variant + ".nsa_attention." + name(f);
            k.in = f, k.out = f, k.acc = Format::fp32;
            k.out_formats = {f, Format::fp32};
            if (naive) k.role = Role::baseline;
            // Key tiles of at most 64 keys in every branch (the attention kernel's; the direct
            // softmax is one tile).
            k.declared["key_block"] = cpu::kAttnKeyTile;
            const std::string common = "K_cmp, V_cmp = FP32 block sums / l stored in the input format; compressed "
                                       "branch and importance by a direct FP32 softmax per row; o = sigmoid32(g) "
                                       "products summed in FP32, rounded once; indices in FP32";
            k.description = naive ? "naive baseline: every branch by the direct FP32 softmax over its keys, the "
                                    "selection by topk_select's full stable sort; " + common
                                  : "selection by topk_select's kernel (partial_sort), selected branch by the FP32 "
                                    "attention kernel with a 0/-inf mask per KV head, window branch by it with "
                                    "window w; " + common;
            k.fn = [naive](const KernelCall& c) { cpu::nsa_call(c, naive); };
            r.add(std::move(k));
        }
}

}  // namespace conform
