// CPU kernels of multi-head latent attention (docs/mla.md, "Kernels").
// FP32 arithmetic: every dot product is an fma chain from +0, the softmax is
// max-shifted with expf, o = (sum_j w_j v_j) / (sum_j w_j).  What a real
// kernel stores goes through the storage format S of h ("stored"):
// the latent c_t and the rotated rope key k^R_t (the KV cache), the queries
// q^C and q^R, per head k^C and v (explicit) or the absorbed query a and the
// averaged latent (absorbed), and o.  The projections before RoPE and the
// logits stay in FP32.
#include "impls/cpu/mla.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/rope.hpp"

namespace conform::cpu {
namespace {
bool mla_has_cache(const KernelCall& c) { return c.in.size() >= 8 && c.in[6].data != nullptr && c.in[6].rank == 2; }
}  // namespace

MlaSetup mla_setup(const KernelCall& c) {
    if (c.in.size() != 6 && c.in.size() != 8) throw std::invalid_argument("mla kernel: expects 6 or 8 inputs");
    const TensorView &h = c.in[0], &wuk = c.in[2], &wuv = c.in[3], &wkr = c.in[5];
    if (h.rank != 2 || wuk.rank != 3 || wuv.rank != 3 || wkr.rank != 2)
        throw std::invalid_argument("mla kernel: h, W_kr must be rank 2; W_uk, W_uv rank 3");
    MlaSetup su{{wuk.shape[0], h.shape[0], mla_has_cache(c) ? c.in[6].shape[0] : 0, h.shape[1], wuk.shape[2], wuk.shape[1], wkr.shape[0],
                 wuv.shape[1]},
                0, true, true, 0.0f, static_cast<int>(c.params.get("pairing", 0)), c.params.get("base", 10000.0)};
    if (su.d.d_r % 2 != 0 || su.d.d_c < 1 || su.d.heads < 1)
        throw std::invalid_argument("mla kernel: d_r must be even, d_c and H >= 1");
    if (su.pairing != 0 && su.pairing != 1) throw std::invalid_argument("mla kernel: pairing must be 0 or 1");
    if (!(su.base > 0) || std::isinf(su.base)) throw std::invalid_argument("mla kernel: base must be finite and > 0");
    const double offset = c.params.get("offset", 0);
    if (!(offset >= 0 && offset <= 0x1p52) || offset != std::floor(offset))
        throw std::invalid_argument("mla kernel: offset must be an integer in [0, 2^52]");
    su.offset = static_cast<std::int64_t>(offset);
    su.causal = c.params.get("causal", 1) != 0;
    su.cache_rotated = c.params.get("cache_rotated", 1) != 0;
    if (!su.cache_rotated && su.offset < su.d.cached)
        throw std::invalid_argument("mla kernel: offset must be >= Lc when cache_rotated = 0");
    const double scale = c.params.get("scale", 0);
    // 1/sqrt(n) in FP32: sqrt of an exact integer and a division, two roundings.
    su.scale = scale != 0 ? static_cast<float>(scale) : 1.0f / std::sqrt(static_cast<float>(su.d.d_q()));
    return su;
}

namespace {

using MlaFVec = std::vector<float>;

MlaFVec mla_read_all(const TensorView& t) {
    MlaFVec v(static_cast<std::size_t>(t.numel()));
    for (std::int64_t i = 0; i < t.numel(); ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(t.value(i));
    return v;
}

// The arithmetic of one kernel: FP32 roundings, and the storage format S
// (every FP32 step also rounded to S in the naive baseline).
struct MlaArith {
    Format store;
    bool naive;
    float st(float x) const {
        return store == Format::fp32 ? x : static_cast<float>(decode(store, encode(store, static_cast<double>(x))));
    }
    float acc(float x) const { return naive ? st(x) : x; }
    // sum_k a[k * sa] b[k * sb] as an fma chain from +0.
    float dot(const float* a, std::ptrdiff_t sa, const float* b, std::ptrdiff_t sb, std::int64_t n) const {
        float s = 0.0f;
        for (std::int64_t k = 0; k < n; ++k) s = acc(std::fma(a[k * sa], b[k * sb], s));
        return s;
    }
    // y = W x for a row-major [rows, cols] W (transposed: y = W^T x, y has cols entries).
    MlaFVec project(const float* w, std::int64_t rows, std::int64_t cols, const float* x, bool transposed = false) const {
        MlaFVec y(static_cast<std::size_t>(transposed ? cols : rows));
        for (std::size_t r = 0; r < y.size(); ++r) {
            const auto i = static_cast<std::ptrdiff_t>(r);
            y[r] = transposed ? dot(w + i, cols, x, 1, rows) : dot(w + i * cols, 1, x, 1, cols);
        }
        return y;
    }
    MlaFVec stored(MlaFVec v) const {
        for (float& x : v) x = st(x);
        return v;
    }
};

RopeArgs mla_rope_args(const Params& p, std::int64_t d_r, std::int64_t offset) {
    RopeArgs a;
    a.pairing = static_cast<int>(p.get("pairing", 0));
    a.rotary_dim = d_r;
    a.base = p.get("base", 10000.0);
    a.offset = offset;
    return a;
}

// x rotated at position a.offset: pairs (2j, 2j+1) or (j, j + d_r/2).
MlaFVec mla_rotate(const MlaArith& ar, const MlaFVec& x, const RopeArgs& a) {
    if (x.empty()) return x;
    const RopeTables t = rope_tables(a, 1);
    MlaFVec y(x.size());
    for (std::int64_t j = 0; j < t.half; ++j) {
        const auto ia = static_cast<std::size_t>(a.pairing == 0 ? 2 * j : j);
        const auto ib = static_cast<std::size_t>(a.pairing == 0 ? 2 * j + 1 : j + t.half);
        const float c = t.cos[static_cast<std::size_t>(j)], s = t.sin[static_cast<std::size_t>(j)];
        y[ia] = ar.acc(std::fma(x[ia], c, -ar.acc(x[ib] * s)));
        y[ib] = ar.acc(std::fma(x[ia], s, ar.acc(x[ib] * c)));
    }
    return y;
}

// The keys every head reads: latents [Lk, d_c] and rotated rope keys
// [Lk, d_r], the cache's rows first (what a kernel appends for the new
// tokens is stored in S).
struct MlaLatentKeys {
    MlaFVec c, kr;
};

struct MlaInputs {
    MlaDims d;
    MlaFVec h, w_dkv, w_uk, w_uv, w_q, w_kr, c_cache, kr_cache;
    std::int64_t offset;
    bool causal, cache_rotated;
    float scale;
};

MlaInputs mla_read_inputs(const KernelCall& c) {
    const MlaSetup su = mla_setup(c);
    MlaInputs in{su.d, mla_read_all(c.in[0]), mla_read_all(c.in[1]), mla_read_all(c.in[2]), mla_read_all(c.in[3]),
              mla_read_all(c.in[4]), mla_read_all(c.in[5]), {}, {}, su.offset, su.causal, su.cache_rotated, su.scale};
    if (mla_has_cache(c)) in.c_cache = mla_read_all(c.in[6]), in.kr_cache = mla_read_all(c.in[7]);
    return in;
}

MlaLatentKeys mla_latent_keys(const MlaArith& ar, const MlaInputs& in, const Params& p, const MlaFlaws& f) {
    const MlaDims& d = in.d;
    MlaLatentKeys k{in.c_cache, {}};
    for (std::int64_t j = 0; j < d.cached; ++j) {
        MlaFVec r(in.kr_cache.begin() + j * d.d_r, in.kr_cache.begin() + (j + 1) * d.d_r);
        if (!in.cache_rotated || f.cache_rerotated) r = ar.stored(mla_rotate(ar, r, mla_rope_args(p, d.d_r, in.offset - d.cached + j)));
        k.kr.insert(k.kr.end(), r.begin(), r.end());
    }
    for (std::int64_t t = 0; t < d.tokens; ++t) {
        const float* ht = &in.h[static_cast<std::size_t>(t * d.d_model)];
        const MlaFVec c = ar.stored(ar.project(in.w_dkv.data(), d.d_c, d.d_model, ht));
        const MlaFVec kr = ar.stored(mla_rotate(ar, ar.project(in.w_kr.data(), d.d_r, d.d_model, ht),
                                         mla_rope_args(p, d.d_r, in.offset + t)));
        k.c.insert(k.c.end(), c.begin(), c.end());
        k.kr.insert(k.kr.end(), kr.begin(), kr.end());
    }
    return k;
}

// One query row against keys [k1_j ; k2_j] (widths n1, n2) and values v_j
// (width dv) for j < visible: o (unrounded FP32) and lse.
struct MlaRowResult {
    MlaFVec o;
    float lse;
};

MlaRowResult mla_attend(const MlaArith& ar, const MlaFVec& q, const float* k1, std::int64_t n1, const float* k2, std::int64_t n2,
                 const float* v, std::int64_t dv, std::int64_t visible, float scale) {
    MlaFVec s(static_cast<std::size_t>(visible));
    for (std::int64_t j = 0; j < visible; ++j) {
        float dot = ar.dot(q.data(), 1, k1 + j * n1, 1, n1);
        for (std::int64_t r = 0; r < n2; ++r) dot = ar.acc(std::fma(q[static_cast<std::size_t>(n1 + r)], k2[j * n2 + r], dot));
        s[static_cast<std::size_t>(j)] = ar.acc(scale * dot);
    }
    MlaRowResult res{MlaFVec(static_cast<std::size_t>(dv), 0.0f), 0.0f};
    float m = -INFINITY;
    for (float x : s) m = std::isnan(x) || std::isnan(m) ? NAN : std::max(m, x);
    // Every logit -inf (an infinite input): no weight to normalize, o = 0 and
    // lse = -inf as the oracle's attend_direct (not exp(-inf - -inf) = NaN).
    if (m == -INFINITY) return {res.o, -INFINITY};
    float l = 0.0f;
    for (std::int64_t j = 0; j < visible; ++j) {
        const float sj = s[static_cast<std::size_t>(j)];
        if (sj == -INFINITY) continue;  // an exact -inf logit: no weight, the value is not read (as the oracle)
        const float w = ar.acc(std::exp(ar.acc(sj - m)));
        l = ar.acc(l + w);
        for (std::int64_t e = 0; e < dv; ++e) {
            float& acc = res.o[static_cast<std::size_t>(e)];
            const float ve = v[j * dv + e];
            // The exact weight is positive: an infinite value counts whole even
            // where its FP32 weight underflows (never 0 * inf = NaN).
            acc = w == 0.0f && std::isinf(ve) ? acc + ve : ar.acc(std::fma(w, ve, acc));
        }
    }
    for (float& x : res.o) x = ar.acc(x / l);
    res.lse = std::isnan(m) ? NAN : m + std::log(l);
    return res;
}

// Head i's query for token t: [q^C ; q^R] in S, q^R rotated at offset + t.
MlaFVec mla_query(const MlaArith& ar, const MlaInputs& in, const Params& p, std::int64_t i, std::int64_t t) {
    const MlaDims& d = in.d;
    const float* wq = &in.w_q[static_cast<std::size_t>(i * d.d_q() * d.d_model)];
    const MlaFVec q = ar.project(wq, d.d_q(), d.d_model, &in.h[static_cast<std::size_t>(t * d.d_model)]);
    MlaFVec qc(q.begin(), q.begin() + d.d_nope), qr(q.begin() + d.d_nope, q.end());
    qc = ar.stored(std::move(qc));
    qr = ar.stored(mla_rotate(ar, qr, mla_rope_args(p, d.d_r, in.offset + t)));
    qc.insert(qc.end(), qr.begin(), qr.end());
    return qc;
}

// The mutant's rope keys of head i: the new tokens' from W_q[i]'s rope rows.
MlaFVec mla_rope_keys_of_head(const MlaArith& ar, const MlaInputs& in, const Params& p, const MlaLatentKeys& k, std::int64_t i) {
    const MlaDims& d = in.d;
    MlaFVec kr(k.kr.begin(), k.kr.begin() + d.cached * d.d_r);
    const float* rows = &in.w_q[static_cast<std::size_t>((i * d.d_q() + d.d_nope) * d.d_model)];
    for (std::int64_t t = 0; t < d.tokens; ++t) {
        const MlaFVec r = ar.stored(mla_rotate(ar, ar.project(rows, d.d_r, d.d_model, &in.h[static_cast<std::size_t>(t * d.d_model)]),
                                        mla_rope_args(p, d.d_r, in.offset + t)));
        kr.insert(kr.end(), r.begin(), r.end());
    }
    return kr;
}

void mla_write_row(const KernelCall& c, const MlaArith& ar, std::int64_t row, const MlaFVec& o, float lse) {
    const TensorView &out = c.out.at(0), &lse_out = c.out.at(1);
    const auto dv = static_cast<std::int64_t>(o.size());
    for (std::int64_t e = 0; e < dv; ++e) out.set_bits(row * dv + e, encode(out.format, ar.st(o[static_cast<std::size_t>(e)])));
    lse_out.set_bits(row, encode(lse_out.format, lse));
}

}  // namespace

void mla_call(const KernelCall& c, MlaKernelForm form, const MlaFlaws& f, bool naive) {
    const MlaInputs in = mla_read_inputs(c);
    const MlaDims& d = in.d;
    const MlaArith ar{c.in[0].format, naive};
    const MlaLatentKeys keys = mla_latent_keys(ar, in, c.params, f);
    const std::int64_t lk = d.keys();
    for (std::int64_t i = 0; i < d.heads; ++i) {
        const float* uk = &in.w_uk[static_cast<std::size_t>(i * d.d_nope * d.d_c)];
        const float* uv = &in.w_uv[static_cast<std::size_t>(i * d.d_v * d.d_c)];
        const MlaFVec kr = f.rope_key_per_head ? mla_rope_keys_of_head(ar, in, c.params, keys, i) : keys.kr;
        // Explicit form: this head's content keys and values of every key, in S.
        MlaFVec kc, v;
        if (form == MlaKernelForm::explicit_kv)
            for (std::int64_t j = 0; j < lk; ++j) {
                const float* cj = &keys.c[static_cast<std::size_t>(j * d.d_c)];
                const MlaFVec a = ar.stored(ar.project(uk, d.d_nope, d.d_c, cj)), b = ar.stored(ar.project(uv, d.d_v, d.d_c, cj));
                kc.insert(kc.end(), a.begin(), a.end());
                v.insert(v.end(), b.begin(), b.end());
            }
        for (std::int64_t t = 0; t < d.tokens; ++t) {
            const std::int64_t visible = in.causal ? d.cached + t + 1 : lk;
            MlaFVec q = mla_query(ar, in, c.params, i, t);
            if (form == MlaKernelForm::explicit_kv) {
                const MlaRowResult r = mla_attend(ar, q, kc.data(), d.d_nope, kr.data(), d.d_r, v.data(), d.d_v, visible, in.scale);
                mla_write_row(c, ar, i * d.tokens + t, r.o, r.lse);
                continue;
            }
            // Absorbed: a = W_uk[i]^T q^C (the mutant reads W_uk[i] as [d_c, d_nope]).
            const MlaFVec a = ar.stored(f.uk_untransposed ? ar.project(uk, d.d_c, d.d_nope, q.data())
                                                       : ar.project(uk, d.d_nope, d.d_c, q.data(), true));
            MlaFVec qa(a);
            qa.insert(qa.end(), q.begin() + d.d_nope, q.end());
            const MlaRowResult r = mla_attend(ar, qa, keys.c.data(), d.d_c, kr.data(), d.d_r, keys.c.data(), d.d_c, visible, in.scale);
            const MlaFVec cbar = ar.stored(r.o);
            mla_write_row(c, ar, i * d.tokens + t, ar.project(uv, d.d_v, d.d_c, cbar.data()), r.lse);
        }
    }
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_mla(Registry& r) {
    const std::string common = "FP32 fma chains, max-shifted expf softmax; latent, rope key, queries and o stored in "
                               "the input format";
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        auto add = [&](const char* variant, Role role, cpu::MlaKernelForm form, bool naive, std::string what) {
            KernelInfo k;
            k.name = std::string("cpu.") + variant + ".mla." + name(f);
            k.op = "mla";
            k.variant = variant;
            k.in = f;
            k.out = f;
            k.acc = naive ? f : Format::fp32;
            k.role = role;
            k.out_formats = {f, Format::fp32};
            k.description = std::move(what);
            // The form it computes: its bound (declared.form) and the oracle's form for
            // special values (the mla_form convention pins the `form` parameter).
            const bool absorbed = form == cpu::MlaKernelForm::absorbed;
            k.declared["form"] = absorbed ? 1 : 0;
            k.conventions["mla_form"] = absorbed ? "absorbed" : "explicit";
            k.fn = [form, naive](const KernelCall& c) { cpu::mla_call(c, form, {}, naive); };
            r.add(std::move(k));
        };
        add("explicit", Role::kernel, cpu::MlaKernelForm::explicit_kv, false,
            "explicit form (prefill): per-head k^C = W_uk c and v = W_uv c stored in the input format; " + common);
        add("absorbed", Role::kernel, cpu::MlaKernelForm::absorbed, false,
            "absorbed form (decode, eq 1.6): a = W_uk^T q^C and the averaged latent stored in the input format, o = "
            "W_uv c-bar; " + common);
        add("naive", Role::baseline, cpu::MlaKernelForm::explicit_kv, true,
            "explicit form with every FP32 step rounded to the input format too (lse stored as fp32)");
    }
}

}  // namespace conform
