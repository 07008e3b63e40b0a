// Oracle of native sparse attention (NSA, seed 001 §1.5.1 eq 1.9; op
// nsa_attention, docs/nsa_attention.md).
//
// Query row i sits at position t = Lk - Lq + i (bottom-right); query head h
// reads KV head floor(h / G), G = Hq / Hkv.  With block l:
//   K_cmp[b] = mean of k over [b l, b l + l - 1], V_cmp[b] likewise (complete
//   blocks b < floor(Lk / l) only); compressed block b visible iff
//   b l + l - 1 <= t.
//   o_c = softmax(scale q K_cmp) V_cmp over the visible blocks (0 when none);
//   importance[g, i, b] = sum over the group's heads of that softmax;
//   selection[g, i] = topk_select's row (k = n, block l, causal 1, the own
//   block forced in slot 0 with force_local = 1) over the importance;
//   o_s = softmax attention over the tokens s <= t of the selected blocks;
//   o_w = softmax attention over s in (t - w, t];
//   o = sigmoid(g_c) o_c + sigmoid(g_s) o_s + sigmoid(g_w) o_w.
// The branch functions are templates over the number type: the evaluator
// runs them in MPFR (Real), the bound in double (magnitudes).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "oracle/attention.hpp"
#include "oracle/sparse.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

struct NsaSetup {
    std::int64_t hq = 0, hkv = 0, lq = 0, lk = 0, d = 0, dv = 0, group = 1;
    std::int64_t block = 4, n = 4, window = 4, force_local = 1;
    std::int64_t offset = 0;      // position of query row 0: Lk - Lq
    std::int64_t blocks = 0;      // complete blocks floor(Lk / l): the compressed keys
    std::int64_t candidates = 0;  // ceil(Lk / l): every block, the partial own block included
    bool staged = false;          // the candidate's o and indices follow the inputs
    SelectSetup select;           // topk_select's setup of the selection (k = n, causal 1)
    std::int64_t pos(std::int64_t i) const { return offset + i; }
    // Compressed blocks visible from row i: b < visible(i), b l + l - 1 <= t.
    std::int64_t visible(std::int64_t i) const { return (pos(i) + 1) / block; }
};
// Shapes and parameters (std::invalid_argument naming nsa_attention and the input).
NsaSetup nsa_setup(const Params& p, const std::vector<TensorView>& in);

inline double to_double_of(double x) { return x; }
inline double to_double_of(const Real& x) { return to_double(x); }

// The exact scale: param scale, else 1/sqrt(D).
template <class R> R nsa_scale(const Params& p, std::int64_t d) {
    const double s = p.get("scale", 0);
    return s != 0 ? R(s) : R(1) / sqrt(R(static_cast<double>(d)));
}

// Mean pooling of a [Hkv, Lk, w] tensor into [Hkv, blocks, w].
template <class R> std::vector<R> nsa_pool(const NsaSetup& s, const std::vector<R>& x, std::int64_t w) {
    std::vector<R> out(static_cast<std::size_t>(s.hkv * s.blocks * w), R(0));
    for (std::int64_t g = 0; g < s.hkv; ++g)
        for (std::int64_t b = 0; b < s.blocks; ++b)
            for (std::int64_t c = 0; c < w; ++c) {
                R sum(0);
                for (std::int64_t j = b * s.block; j < (b + 1) * s.block; ++j) sum += x[static_cast<std::size_t>((g * s.lk + j) * w + c)];
                out[static_cast<std::size_t>((g * s.blocks + b) * w + c)] = sum / R(static_cast<double>(s.block));
            }
    return out;
}

// Softmax attention of query row (h, i) over the keys of `keys` (indices into
// a [Hkv, Lk, .] k/v of length lk): o [Dv] and lse; the empty state (0, -inf)
// without keys.
template <class R>
AttnState<R> nsa_attend(const NsaSetup& s, const std::vector<R>& q, const std::vector<R>& k, const std::vector<R>& v,
                        std::int64_t lk, const R& scale, std::int64_t h, std::int64_t i, const std::vector<std::int64_t>& keys) {
    const std::int64_t g = kv_head_of(h, s.hq, s.hkv);
    std::vector<R> logits, vals;
    const R* qr = &q[static_cast<std::size_t>((h * s.lq + i) * s.d)];
    for (std::int64_t j : keys) {
        logits.push_back(capped_logit(qr, &k[static_cast<std::size_t>((g * lk + j) * s.d)], s.d, scale, 0));
        for (std::int64_t c = 0; c < s.dv; ++c) vals.push_back(v[static_cast<std::size_t>((g * lk + j) * s.dv + c)]);
    }
    if (keys.empty()) return {std::vector<R>(static_cast<std::size_t>(s.dv), R(0)), R(-INFINITY)};
    AttnState<R> st = attend_direct(logits, vals, s.dv);
    // An infinite v at a key of finite logit counts whole: its weight is positive even where the
    // working precision's exp underflows (never 0 * inf = NaN; opposite infinities give NaN).
    if (!isnan(st.lse))
        for (std::int64_t c = 0; c < s.dv; ++c) {
            R inf_sum(0);
            bool any = false, nan = false;
            for (std::size_t j = 0; j < logits.size(); ++j) {
                const R& x = vals[j * static_cast<std::size_t>(s.dv) + static_cast<std::size_t>(c)];
                if (isinf(logits[j])) continue;
                if (isinf(x)) inf_sum += x, any = true;
                nan = nan || isnan(x);
            }
            if (any && !nan) st.o[static_cast<std::size_t>(c)] = inf_sum;
        }
    return st;
}

// The keys of each branch for row i.
std::vector<std::int64_t> nsa_compressed_keys(const NsaSetup& s, std::int64_t i);
std::vector<std::int64_t> nsa_window_keys(const NsaSetup& s, std::int64_t i);
// The tokens s <= t of the selected blocks (ids of a selection row; -1 skipped).
std::vector<std::int64_t> nsa_selected_keys(const NsaSetup& s, std::int64_t i, const std::vector<double>& row);

// The compressed softmax weights of row (h, i) over its visible blocks
// (empty when none; NaN throughout when poisoned).
template <class R>
std::vector<R> nsa_compressed_weights(const NsaSetup& s, const std::vector<R>& q, const std::vector<R>& kc, const R& scale,
                                      std::int64_t h, std::int64_t i) {
    const std::int64_t g = kv_head_of(h, s.hq, s.hkv), c = s.visible(i);
    std::vector<R> logits;
    for (std::int64_t b = 0; b < c; ++b)
        logits.push_back(capped_logit(&q[static_cast<std::size_t>((h * s.lq + i) * s.d)],
                                      &kc[static_cast<std::size_t>((g * s.blocks + b) * s.d)], s.d, scale, 0));
    if (logits.empty()) return {};
    return softmax_row(logits).y;
}

// Importance of every candidate block for (g, i): the group's summed
// compressed weights (0 for blocks not visible), [Hkv, Lq, candidates].
template <class R>
std::vector<double> nsa_importance(const NsaSetup& s, const std::vector<R>& q, const std::vector<R>& kc, const R& scale) {
    std::vector<R> sum(static_cast<std::size_t>(s.hkv * s.lq * s.candidates), R(0));
    for (std::int64_t h = 0; h < s.hq; ++h)
        for (std::int64_t i = 0; i < s.lq; ++i) {
            const std::vector<R> p = nsa_compressed_weights(s, q, kc, scale, h, i);
            const auto at = static_cast<std::size_t>((kv_head_of(h, s.hq, s.hkv) * s.lq + i) * s.candidates);
            for (std::size_t b = 0; b < p.size(); ++b) sum[at + b] += p[b];
        }
    std::vector<double> imp(sum.size());
    for (std::size_t e = 0; e < sum.size(); ++e) imp[e] = to_double_of(sum[e]);
    return imp;
}

// The three branch outputs [Hq, Lq, Dv] and their lse [Hq, Lq], given the
// selection rows [Hkv, Lq, n].
template <class R> struct NsaBranches {
    std::vector<R> o[3], lse[3];  // compressed, selected, window
};
template <class R>
NsaBranches<R> nsa_branches(const NsaSetup& s, const std::vector<R>& q, const std::vector<R>& k, const std::vector<R>& v,
                            const std::vector<R>& kc, const std::vector<R>& vc, const R& scale,
                            const std::vector<double>& sel) {
    NsaBranches<R> out;
    for (std::int64_t h = 0; h < s.hq; ++h)
        for (std::int64_t i = 0; i < s.lq; ++i) {
            const std::int64_t g = kv_head_of(h, s.hq, s.hkv);
            const std::vector<double> row(sel.begin() + (g * s.lq + i) * s.n, sel.begin() + (g * s.lq + i + 1) * s.n);
            AttnState<R> st[3] = {nsa_attend(s, q, kc, vc, s.blocks, scale, h, i, nsa_compressed_keys(s, i)),
                                  nsa_attend(s, q, k, v, s.lk, scale, h, i, nsa_selected_keys(s, i, row)),
                                  nsa_attend(s, q, k, v, s.lk, scale, h, i, nsa_window_keys(s, i))};
            if (std::isnan(row.at(0))) st[1] = {std::vector<R>(static_cast<std::size_t>(s.dv), R(NAN)), R(NAN)};
            for (int b = 0; b < 3; ++b) {
                out.o[b].insert(out.o[b].end(), st[b].o.begin(), st[b].o.end());
                out.lse[b].push_back(st[b].lse);
            }
        }
    return out;
}

// The error of a kernel's pooled x (mean over l FP32 terms, stored in
// `store`) per element of `pooled` [Hkv, blocks, w] (exact means, double).
std::vector<double> nsa_pool_error(const NsaSetup& s, const std::vector<double>& x, const std::vector<double>& pooled,
                                   std::int64_t w, Format store);

// The budget of the importance [Hkv, Lq, candidates] for a kernel that pools
// k in FP32 and stores K_cmp in `store`, forms the compressed logits and
// softmax in FP32 and sums the group's heads in FP32
// (docs/nsa_attention.md, "Budget of the importance").
std::vector<double> nsa_importance_budget(const NsaSetup& s, const Params& p, const std::vector<TensorView>& in, Format store);

// Registry evaluator.  Inputs q, k, v, g (and, staged, the candidate's o and
// indices); outputs o [Hq, Lq, Dv], indices [Hkv, Lq, n].
OpOutputs eval_nsa_attention(const Params& params, const std::vector<TensorView>& in);

// StructuredBoundFn (docs/nsa_attention.md, "Error budget").
std::vector<std::vector<double>> nsa_attention_bound(const Params& params, const std::vector<TensorView>& in,
                                                     const std::vector<std::vector<double>>& exact, Format acc,
                                                     const std::vector<Format>& out);

}  // namespace conform::oracle
