// Tensor plumbing of the attention evaluators: shape validation, parameter
// parsing, per-head logits with masks, then the row forms of attention.hpp.
#include "oracle/attention.hpp"

#include <cmath>
#include <string>

#include "oracle/norm.hpp"

namespace conform::oracle {
namespace {

struct Config {
    Real scale;
    bool causal = false;
    bool top_left = false;  // the declared convention causal = top_left
    std::int64_t window = 0;
    double softcap = 0;
    std::size_t block = 0;
};

// Exact inputs of one evaluation; q (and k) may be replaced by normalized copies.
struct Problem {
    std::int64_t hq = 0, hkv = 0, lq = 0, lk = 0, d = 0, dv = 0;
    std::vector<Real> q, k, v, mask;  // mask empty: none
};


Config read_config(const std::string& op, const Params& p, std::int64_t d) {
    Config c;
    const double scale = p.get("scale", 0.0);
    if (!std::isfinite(scale)) throw std::invalid_argument(op + ": parameter 'scale' must be finite");
    c.scale = scale != 0 ? from_double(scale) : Real(1) / sqrt(Real(static_cast<double>(d)));
    c.causal = integer_param(op, p, "causal", 0, 0, 1) != 0;
    c.window = static_cast<std::int64_t>(integer_param(op, p, "window", 0, 0, 1e15));
    c.top_left = p.get("convention.causal", 0) != 0;
    c.softcap = p.get("softcap", 0.0);
    if (!(c.softcap >= 0) || std::isinf(c.softcap))
        throw std::invalid_argument(op + ": parameter 'softcap' must be finite and >= 0");
    c.block = static_cast<std::size_t>(integer_param(op, p, "block", 0, 0, 1e15));
    return c;
}

// q, k, v (and the optional mask at index `mask_at`) with the layout checks.
Problem read_problem(const std::string& op, const std::vector<TensorView>& in, std::size_t mask_at) {
    if (in.size() != mask_at && in.size() != mask_at + 1)
        throw std::invalid_argument(op + ": expects " + std::to_string(mask_at) + " inputs and an optional mask, got " +
                                    std::to_string(in.size()));
    const TensorView &q = in[0], &k = in[1], &v = in[2];
    require_rank(op, "q", q, 3);
    require_rank(op, "k", k, 3);
    require_rank(op, "v", v, 3);
    Problem p;
    p.hq = q.shape[0], p.lq = q.shape[1], p.d = q.shape[2];
    p.hkv = k.shape[0], p.lk = k.shape[1], p.dv = v.shape[2];
    if (p.d < 1) throw std::invalid_argument(op + ": input 'q' dimension 2 (head dim D) must be >= 1");
    require_dim(op, "k", k, 2, p.d, "head dim D of q");
    if (p.hkv < 1 || p.hq % p.hkv != 0)
        throw std::invalid_argument(op + ": input 'k' dimension 0 is " + std::to_string(p.hkv) +
                                    ", expected a divisor of Hq = " + std::to_string(p.hq) + " (KV heads)");
    require_dim(op, "v", v, 0, p.hkv, "KV heads of k");
    require_dim(op, "v", v, 1, p.lk, "keys of k");
    p.q = read_exact(q), p.k = read_exact(k), p.v = read_exact(v);
    if (in.size() == mask_at + 1) {
        const TensorView& mask = in[mask_at];
        require_rank(op, "mask", mask, 2);
        require_dim(op, "mask", mask, 0, p.lq, "Lq");
        require_dim(op, "mask", mask, 1, p.lk, "Lk");
        p.mask = read_exact(mask);
    }
    return p;
}

// The masked logits of query i of head h (against KV head kv_head_of(h)).
std::vector<Real> row_logits(const Problem& p, const Config& c, std::int64_t h, std::int64_t i) {
    const std::int64_t g = kv_head_of(h, p.hq, p.hkv);
    const Real* q = &p.q[static_cast<std::size_t>((h * p.lq + i) * p.d)];
    std::vector<Real> s(static_cast<std::size_t>(p.lk));
    for (std::int64_t j = 0; j < p.lk; ++j) {
        // A -inf mask entry hides the key exactly like the structural masks:
        // its logit is never formed, so a NaN in q or k_j there cannot leak.
        const bool mask_hides = !p.mask.empty() && isinf(p.mask[static_cast<std::size_t>(i * p.lk + j)]) &&
                                p.mask[static_cast<std::size_t>(i * p.lk + j)] < 0;
        if (mask_hides || !key_visible(i, j, p.lq, p.lk, c.causal, c.window, c.top_left)) {
            s[j] = neg_inf<Real>();
            continue;
        }
        s[j] = capped_logit(q, &p.k[static_cast<std::size_t>((g * p.lk + j) * p.d)], p.d, c.scale, c.softcap);
        if (!p.mask.empty()) s[j] += p.mask[static_cast<std::size_t>(i * p.lk + j)];
    }
    return s;
}

// With `sinks` (sink_attention), head h's sink logit joins each row as key
// 0 with a zero value row: the sink takes its share of the softmax and adds
// nothing to o.  Its logit is the sink itself, not formed from q (a NaN in q
// reaches only the keys' logits).
OpOutputs solve(const Problem& p, const Config& c, const std::vector<Real>* sinks = nullptr) {
    OpOutputs out{{"o", "lse"}, {{p.hq, p.lq, p.dv}, {p.hq, p.lq}}, {{}, {}}};
    out.values[0].reserve(static_cast<std::size_t>(p.hq * p.lq * p.dv));
    for (std::int64_t h = 0; h < p.hq; ++h) {
        const std::int64_t g = kv_head_of(h, p.hq, p.hkv);
        std::vector<Real> v(p.v.begin() + g * p.lk * p.dv, p.v.begin() + (g + 1) * p.lk * p.dv);
        if (sinks) v.insert(v.begin(), static_cast<std::size_t>(p.dv), Real(0));
        for (std::int64_t i = 0; i < p.lq; ++i) {
            std::vector<Real> s = row_logits(p, c, h, i);
            if (sinks) s.insert(s.begin(), (*sinks)[static_cast<std::size_t>(h)]);
            AttnState<Real> r = c.block ? attend_online(s, v, p.dv, c.block) : attend_direct(s, v, p.dv);
            out.values[0].insert(out.values[0].end(), r.o.begin(), r.o.end());
            out.values[1].push_back(r.lse);
        }
    }
    return out;
}

// Normalize every [D] row of x (heads x positions rows) with weight w.
void normalize_rows(std::vector<Real>& x, std::int64_t d, const std::vector<Real>& w, int kind, double eps) {
    const std::size_t n = static_cast<std::size_t>(d);
    for (std::size_t r = 0; r < x.size() / n; ++r) {
        std::vector<Real> row(x.begin() + r * n, x.begin() + (r + 1) * n);
        if (kind == 1) {
            row = rms_norm(row, w, eps, false);
        } else {
            row = l2_norm(row, eps);
            for (std::size_t t = 0; t < n; ++t) row[t] *= w[t];
        }
        std::copy(row.begin(), row.end(), x.begin() + r * n);
    }
}

}  // namespace

OpOutputs eval_attention(const Params& params, const std::vector<TensorView>& in) {
    const std::string op = "attention";
    const Problem p = read_problem(op, in, 3);
    return solve(p, read_config(op, params, p.d));
}

OpOutputs eval_qk_norm_attention(const Params& params, const std::vector<TensorView>& in) {
    const std::string op = "qk_norm_attention";
    if (in.size() < 5) throw std::invalid_argument(op + ": expects q, k, v, q_weight, k_weight and an optional mask");
    Problem p = read_problem(op, in, 5);
    const Config c = read_config(op, params, p.d);
    const double kind_param = params.get("qk_norm", 1);
    if (kind_param != 1 && kind_param != 2)
        throw std::invalid_argument(op + ": parameter 'qk_norm' must be 1 (rms) or 2 (l2), is " +
                                    std::to_string(kind_param));
    const int kind = static_cast<int>(kind_param);
    const double eps = params.get("eps", 1e-6);
    if (!(eps >= 0)) throw std::invalid_argument(op + ": parameter 'eps' must be >= 0");
    require_rank(op, "q_weight", in[3], 1);
    require_dim(op, "q_weight", in[3], 0, p.d, "head dim D");
    require_rank(op, "k_weight", in[4], 1);
    require_dim(op, "k_weight", in[4], 0, p.d, "head dim D");
    normalize_rows(p.q, p.d, read_exact(in[3]), kind, eps);
    normalize_rows(p.k, p.d, read_exact(in[4]), kind, eps);
    return solve(p, c);
}

OpOutputs eval_gated_attention(const Params& params, const std::vector<TensorView>& in) {
    const std::string op = "gated_attention";
    if (in.size() < 4) throw std::invalid_argument(op + ": expects q, k, v, g and an optional mask");
    const Problem p = read_problem(op, in, 4);
    const TensorView& g = in[3];
    require_rank(op, "g", g, 3);
    require_dim(op, "g", g, 0, p.hq, "query heads Hq");
    require_dim(op, "g", g, 1, p.lq, "queries Lq");
    require_dim(op, "g", g, 2, p.dv, "value dim Dv");
    OpOutputs out = solve(p, read_config(op, params, p.d));
    const std::vector<Real> gate = read_exact(g);
    for (std::size_t e = 0; e < gate.size(); ++e) out.values[0][e] *= sigmoid(gate[e]);
    return out;
}

OpOutputs eval_sink_attention(const Params& params, const std::vector<TensorView>& in) {
    const std::string op = "sink_attention";
    if (in.size() < 4) throw std::invalid_argument(op + ": expects q, k, v, sinks and an optional mask");
    const Problem p = read_problem(op, in, 4);
    require_rank(op, "sinks", in[3], 1);
    require_dim(op, "sinks", in[3], 0, p.hq, "query heads Hq");
    const std::vector<Real> sinks = read_exact(in[3]);
    return solve(p, read_config(op, params, p.d), &sinks);
}

}  // namespace conform::oracle
