// Oracle of scaled dot-product attention and its variants (docs/attention.md):
// MHA/GQA/MQA, bottom-right causal alignment, sliding windows, logit
// softcapping, additive masks, QK-norm and the G1 output gate.
//
// Layout: q [Hq, Lq, D], k [Hkv, Lk, D], v [Hkv, Lk, Dv], mask [Lq, Lk],
// outputs o [Hq, Lq, Dv] and lse [Hq, Lq].  A batch folds into the head
// dimension (B*Hq query heads, B*Hkv KV heads): floor(h / G) with
// G = Hq/Hkv then maps batch b's heads onto batch b's KV heads.
//
// One query row is: logits s_j = softcap(scale * q.k_j) + mask_ij, with
// structurally hidden keys (causal, window) set to -inf, then the softmax of
// softmax.hpp (exact max shift) and o = sum_j p_j v_j.  The same row can be
// evaluated by the flash recurrence over key tiles (param `block`); the two
// forms agree to oracle precision, which the tests check.
#pragma once
#include <cstdint>
#include <vector>

#include "oracle/activation.hpp"
#include "oracle/softmax.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

// Position of query row i when Lq queries are the last Lq of Lk positions
// (bottom-right alignment: the last query sits at the last key).
inline std::int64_t query_position(std::int64_t i, std::int64_t lq, std::int64_t lk, bool top_left = false) {
    return top_left ? i : i + lk - lq;
}

// Structural visibility of key j from query i.  causal: j <= pos.  window
// W > 0: exactly the W positions (pos - W, pos]; a window implies the causal
// upper bound.  With Lq > Lk the first Lq - Lk queries see no key at all.
inline bool key_visible(std::int64_t i, std::int64_t j, std::int64_t lq, std::int64_t lk, bool causal,
                        std::int64_t window, bool top_left = false) {
    const std::int64_t pos = query_position(i, lq, lk, top_left);
    if ((causal || window > 0) && j > pos) return false;
    if (window > 0 && j <= pos - window) return false;
    return true;
}

// Query head h reads KV head floor(h / (Hq / Hkv)) (consecutive query heads
// share a KV head, as repeat_interleave lays them out).
inline std::int64_t kv_head_of(std::int64_t h, std::int64_t hq, std::int64_t hkv) { return h / (hq / hkv); }

// The logit of one (query, key) pair before masking: scale * q.k, then
// c * tanh(s / c) when a softcap c > 0 is set.
template <class R> R capped_logit(const R* q, const R* k, std::int64_t d, const R& scale, double softcap) {
    R dot(0);
    for (std::int64_t t = 0; t < d; ++t) add_product(dot, q[t], k[t]);
    const R s = scale * dot;
    return softcap > 0 ? conform::oracle::softcap(s, softcap) : s;
}

// o = sum_j p_j v_j with p = softmax(s); v is [Lk, Dv] row-major.  Keys with
// logit -inf carry no weight and are not read (a NaN in a masked v row does
// not leak); a row with no visible key is the empty state (0, -inf).
// p v for a visible key's weight p (positive: a finite logit) and value v:
// a weight that underflowed to 0 (MPFR's exponent range ends near
// e^(-7e8)) still multiplies an infinite value into that infinity, as the
// exact product does (0 * inf would be NaN).
template <class R> R weighted_value(const R& p, const R& v) { return p == 0 && isinf(v) ? v : R(p * v); }
// acc += weighted_value(p, v), the product and the sum rounded once.
template <class R> void add_weighted(R& acc, const R& p, const R& v) {
    if (p == 0 && isinf(v)) acc += v;
    else add_product(acc, p, v);
}

template <class R> AttnState<R> attend_direct(const std::vector<R>& s, const std::vector<R>& v, std::int64_t dv) {
    const SoftmaxRow<R> p = softmax_row(s);
    const std::size_t n = static_cast<std::size_t>(dv);
    if (isnan(p.lse)) return {std::vector<R>(n, quiet_nan<R>()), p.lse};
    std::vector<R> o(n, R(0));
    for (std::size_t j = 0; j < s.size(); ++j) {
        if (isinf(s[j])) continue;
        for (std::size_t d = 0; d < n; ++d) add_weighted(o[d], p.y[j], v[j * n + d]);
    }
    return {std::move(o), p.lse};
}

// The flash form: key tiles of `block` keys (0: one tile), running max m,
// running sum l and an unnormalized accumulator acc, both rescaled by
// exp(m_old - m_new) when the max grows; the rescale is skipped while m is
// still -inf (no finite key seen: l = acc = 0).  o = acc / l at the end.
template <class R>
AttnState<R> attend_online(const std::vector<R>& s, const std::vector<R>& v, std::int64_t dv, std::size_t block) {
    const std::size_t n = s.size(), w = static_cast<std::size_t>(dv);
    if (poisons_row(s)) return {std::vector<R>(w, quiet_nan<R>()), quiet_nan<R>()};
    if (block == 0 || block > n) block = std::max<std::size_t>(n, 1);
    R m = neg_inf<R>(), l(0);
    std::vector<R> acc(w, R(0));
    for (std::size_t b0 = 0; b0 < n; b0 += block) {
        const std::size_t b1 = std::min(n, b0 + block);
        R m_new = m;
        for (std::size_t j = b0; j < b1; ++j)
            if (s[j] > m_new) m_new = s[j];
        if (isinf(m_new)) continue;  // tile fully masked and nothing before it
        if (!isinf(m)) {
            const R alpha = exp(m - m_new);
            l *= alpha;
            for (R& a : acc) a = weighted_value(alpha, a);
        }
        for (std::size_t j = b0; j < b1; ++j) {
            if (isinf(s[j])) continue;
            const R e = exp(s[j] - m_new);
            l += e;
            for (std::size_t d = 0; d < w; ++d) add_weighted(acc[d], e, v[j * w + d]);
        }
        m = m_new;
    }
    if (isinf(m)) return {std::vector<R>(w, R(0)), neg_inf<R>()};
    for (R& a : acc) a /= l;
    return {std::move(acc), m + ln(l)};
}

// Registry evaluators.  Parameters (all optional, defaults in brackets):
//   scale [0 = 1/sqrt(D)], causal [0], window [0 = none], softcap [0 = none],
//   block [0 = direct form; > 0 = flash recurrence over key tiles of that length]
//   qk_norm_attention adds qk_norm [1 = rms, 2 = l2] and eps [1e-6].
// Inputs (an optional additive mask [Lq, Lk] may follow the listed ones):
//   attention          q, k, v
//   qk_norm_attention  q, k, v, q_weight [D], k_weight [D]
//   gated_attention    q, k, v, g [Hq, Lq, Dv]     (o <- o * sigmoid(g))
//   sink_attention     q, k, v, sinks [Hq]         (one more logit per row, value 0)
// Outputs: o [Hq, Lq, Dv], lse [Hq, Lq].
OpOutputs eval_attention(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_qk_norm_attention(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_gated_attention(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_sink_attention(const Params& params, const std::vector<TensorView>& in);

}  // namespace conform::oracle
