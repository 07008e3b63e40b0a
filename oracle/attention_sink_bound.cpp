// sink_attention_bound (docs/sink_attention.md, "Error budget"): each head's
// rows as attention with the sink as one more key.
#include <cmath>

#include "oracle/attention.hpp"
#include "oracle/attention_bound.hpp"

namespace conform::oracle {
namespace {

// Head h of a sink_attention problem as an attention problem of one head
// whose key 0 carries the sink: q_h (a row that sees no key of its own gets
// q = 0, so that a non-finite q, which reaches only the keys' logits, does
// not reach the sink's), k and v with a zero row 0, and the mask [Lq, Lk + 1]
// in FP64 (exact for every input format): column 0 the sink, then the mask
// (0 without one) with -inf where the causal or window structure hides the
// key.  The structure lives in the mask, so the augmented problem is run
// without it, and key 0 is seen by every row.
struct SinkHead {
    Tensor q, k, v, mask;
    std::vector<TensorView> views() const { return {q.view(), k.view(), v.view(), mask.view()}; }
};

SinkHead augment(const Params& p, const std::vector<TensorView>& in, std::int64_t h) {
    const TensorView &q = in[0], &k = in[1], &v = in[2];
    const std::int64_t hq = q.shape[0], lq = q.shape[1], d = q.shape[2], hkv = k.shape[0], lk = k.shape[1],
                       dv = v.shape[2], g = kv_head_of(h, hq, hkv);
    const bool causal = p.get("causal", 0) != 0, top_left = p.get("convention.causal", 0) != 0;
    const auto window = static_cast<std::int64_t>(p.get("window", 0));
    const bool has_mask = in.size() > 4;
    SinkHead a{Tensor(q.format, {1, lq, d}), Tensor(k.format, {1, lk + 1, d}), Tensor(v.format, {1, lk + 1, dv}),
               Tensor(Format::fp64, {lq, lk + 1})};
    for (std::int64_t i = 0; i < lq; ++i) {
        bool sees = false;
        a.mask.set_value(i * (lk + 1), in[3].value(h));
        for (std::int64_t j = 0; j < lk; ++j) {
            const double m = has_mask ? in[4].value(i * lk + j) : 0.0;
            const bool hidden = !key_visible(i, j, lq, lk, causal, window, top_left) || (std::isinf(m) && m < 0);
            a.mask.set_value(i * (lk + 1) + j + 1, hidden ? -INFINITY : m);
            sees = sees || !hidden;
        }
        for (std::int64_t t = 0; t < d; ++t) a.q.set_value(i * d + t, sees ? q.value((h * lq + i) * d + t) : 0.0);
    }
    for (std::int64_t j = 0; j < lk; ++j) {
        for (std::int64_t t = 0; t < d; ++t) a.k.set_bits((j + 1) * d + t, k.bits((g * lk + j) * d + t));
        for (std::int64_t t = 0; t < dv; ++t) a.v.set_bits((j + 1) * dv + t, v.bits((g * lk + j) * dv + t));
    }
    return a;
}

}  // namespace

std::vector<std::vector<double>> sink_attention_bound(const Params& p, const std::vector<TensorView>& in,
                                                      const std::vector<std::vector<double>>& exact, Format acc,
                                                      const std::vector<Format>& out) {
    const std::int64_t hq = in.at(0).shape[0], lq = in[0].shape[1], dv = in.at(2).shape[2];
    Params flat = p;  // the structure is in each head's mask
    flat.set("causal", 0), flat.set("window", 0), flat.set("convention.causal", 0);
    // A kernel that merges split states (declared max_splits > 1) may merge
    // the sink as a state of its own: one state more than the key splits
    // (it declares max_splits counting it).
    if (p.get("declared.max_splits", 1) > 1 && p.get("splits", 0) > 0) flat.set("splits", p.get("splits", 0) + 1);
    std::vector<std::vector<double>> b{{}, {}};
    for (std::int64_t h = 0; h < hq; ++h) {
        const SinkHead a = augment(p, in, h);
        const auto o0 = exact.at(0).begin() + h * lq * dv, l0 = exact.at(1).begin() + h * lq;
        const std::vector<std::vector<double>> ex{{o0, o0 + lq * dv}, {l0, l0 + lq}};
        const std::vector<std::vector<double>> bh = attention_bound_split(flat, a.views(), ex, acc, out);
        b[0].insert(b[0].end(), bh[0].begin(), bh[0].end());
        b[1].insert(b[1].end(), bh[1].begin(), bh[1].end());
    }
    return b;
}

}  // namespace conform::oracle
