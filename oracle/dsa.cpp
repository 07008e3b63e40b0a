// DeepSeek Sparse Attention (docs/dsa_attention.md): oracle and budget, on
// top of the lightning indexer, the token selection and attention.
#include "oracle/dsa.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "numerics/shape_check.hpp"
#include "oracle/attention.hpp"
#include "oracle/attention_bound.hpp"
#include "oracle/bound.hpp"

namespace conform::oracle {
namespace {

constexpr double kDsaNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<TensorView> dsa_indexer_inputs(const std::vector<TensorView>& in) { return {in[0], in[1], in[2]}; }

// attention's parameters: the op's scale, no structural mask (the selection's mask does it).
Params dsa_attention_params(const Params& p) {
    Params a = p;
    a.set("causal", 0);
    return a;
}

}  // namespace

DsaSetup dsa_setup(const Params& p, const std::vector<TensorView>& in) {
    const std::string op = "dsa_attention";
    if (in.size() != 6 && in.size() != 9)
        throw std::invalid_argument(op + ": expects iq [Lq, Hi, c], ik [Lk, c], iw [Lq, Hi], q [H, Lq, D], kv [1, Lk, D], "
                                         "v [1, Lk, Dv] (and, staged, the candidate's o, lse, indices)");
    require_rank(op, "iq", in[0], 3);
    require_rank(op, "ik", in[1], 2);
    require_rank(op, "iw", in[2], 2);
    require_rank(op, "q", in[3], 3);
    require_rank(op, "kv", in[4], 3);
    require_rank(op, "v", in[5], 3);
    DsaSetup s;
    s.lq = in[0].shape[0], s.hi = in[0].shape[1], s.c = in[0].shape[2], s.lk = in[1].shape[0];
    s.h = in[3].shape[0], s.d = in[3].shape[2], s.dv = in[5].shape[2];
    require_dim(op, "ik", in[1], 1, s.c, "c of iq");
    require_dim(op, "iw", in[2], 0, s.lq, "Lq of iq");
    require_dim(op, "iw", in[2], 1, s.hi, "Hi of iq");
    require_dim(op, "q", in[3], 1, s.lq, "Lq of iq");
    require_dim(op, "kv", in[4], 0, 1, "one latent KV head");
    require_dim(op, "kv", in[4], 1, s.lk, "Lk of ik");
    require_dim(op, "kv", in[4], 2, s.d, "D of q");
    require_dim(op, "v", in[5], 0, 1, "one latent KV head");
    require_dim(op, "v", in[5], 1, s.lk, "Lk of ik");
    if (s.lk < s.lq) throw std::invalid_argument(op + ": Lk >= Lq required (query i sits at position Lk - Lq + i)");
    if (s.lk > (std::int64_t{1} << 24)) throw std::invalid_argument(op + ": at most 2^24 keys (ids are exact FP32 values)");
    s.k = integer_param(op, p, "k", 4, 1, 0x1p40);
    s.select.queries = s.lq, s.select.candidates = s.lk, s.select.k = s.k, s.select.slots = s.k;
    s.select.block = 1, s.select.causal = 1, s.select.offset = s.lk - s.lq, s.select.force_local = 0;
    s.staged = in.size() == 9;
    if (s.staged) {
        require_rank(op, "a candidate's indices", in[8], 2);
        require_dim(op, "a candidate's indices", in[8], 0, s.lq, "Lq");
        require_dim(op, "a candidate's indices", in[8], 1, s.k, "k");
    }
    return s;
}

DsaScores dsa_scores(const DsaSetup& s, const std::vector<TensorView>& in) {
    const std::vector<TensorView> ix = dsa_indexer_inputs(in);
    const OpOutputs r = eval_lightning_indexer(Params{}, ix);
    DsaScores d;
    for (const Real& v : r.values[0]) d.score.push_back(to_double(v));
    // The kernels keep the scores in FP32 with FP32 arithmetic.
    d.delta = lightning_indexer_bound(Params{}, ix, {d.score}, Format::fp32, {Format::fp32}).at(0);
    d.undefined.assign(static_cast<std::size_t>(s.lq), 0);
    for (std::int64_t i = 0; i < s.lq; ++i)
        for (std::int64_t n = 0; n < s.lk; ++n) {
            double& e = d.delta[static_cast<std::size_t>(i * s.lk + n)];
            if (e == kUndefined) {
                e = INFINITY;
                if (select_eligible(s.select, i, n)) d.undefined[static_cast<std::size_t>(i)] = 1;
            } else if (std::isnan(e)) {
                e = 0;  // a non-finite exact score: its class is exact
            }
        }
    return d;
}

std::vector<double> dsa_row(const DsaSetup& s, const std::vector<double>& v, std::int64_t i) {
    return {v.begin() + i * s.lk, v.begin() + (i + 1) * s.lk};
}

Tensor dsa_mask(const DsaSetup& s, const std::vector<double>& indices) {
    Tensor m(Format::fp32, {s.lq, s.lk});
    for (std::int64_t i = 0; i < s.lq; ++i) {
        const bool nan_row = std::isnan(indices.at(static_cast<std::size_t>(i * s.k)));
        for (std::int64_t n = 0; n < s.lk; ++n) m.set_value(i * s.lk + n, nan_row ? kDsaNaN : -INFINITY);
        if (nan_row) continue;
        for (std::int64_t j = 0; j < s.k; ++j)
            if (const double id = indices[static_cast<std::size_t>(i * s.k + j)]; id >= 0 && id < static_cast<double>(s.lk))
                m.set_value(i * s.lk + static_cast<std::int64_t>(id), 0.0);
    }
    return m;
}

Tensor dsa_exact_mask(const Params& p, const std::vector<TensorView>& in) {
    const std::vector<TensorView> six(in.begin(), in.begin() + std::min<std::ptrdiff_t>(6, static_cast<std::ptrdiff_t>(in.size())));
    const DsaSetup s = dsa_setup(p, six);
    const DsaScores sc = dsa_scores(s, six);
    std::vector<double> ids;
    for (std::int64_t i = 0; i < s.lq; ++i) {
        const std::vector<double> row = select_row(s.select, dsa_row(s, sc.score, i), i);
        ids.insert(ids.end(), row.begin(), row.end());
    }
    return dsa_mask(s, ids);
}

OpOutputs eval_dsa_attention(const Params& params, const std::vector<TensorView>& in) {
    const DsaSetup s = dsa_setup(params, in);
    const DsaScores sc = dsa_scores(s, in);
    OpOutputs out{{"o", "lse", "indices"}, {{s.h, s.lq, s.dv}, {s.h, s.lq}, {s.lq, s.k}}, {{}, {}, {}}};
    std::vector<double> used;
    for (std::int64_t i = 0; i < s.lq; ++i) {
        const std::vector<double> scores = dsa_row(s, sc.score, i);
        std::vector<double> row = select_row(s.select, scores, i);
        if (s.staged && !std::isnan(row[0])) {
            std::vector<double> theirs(static_cast<std::size_t>(s.k));
            for (std::int64_t j = 0; j < s.k; ++j) theirs[static_cast<std::size_t>(j)] = in[8].value(i * s.k + j);
            if (theirs != row && selection_admissible(s.select, scores, dsa_row(s, sc.delta, i), i, theirs)) {
                row = theirs;
                if (!sc.undefined[static_cast<std::size_t>(i)])
                    ++out.notes["indices: selections other than the oracle's, within the indexer's budget (accepted)"];
            }
        }
        used.insert(used.end(), row.begin(), row.end());
    }
    const Tensor mask = dsa_mask(s, used);
    OpOutputs a = eval_attention(dsa_attention_params(params), {in[3], in[4], in[5], mask.view()});
    out.values[0] = std::move(a.values.at(0));
    out.values[1] = std::move(a.values.at(1));
    for (double v : used) out.values[2].push_back(from_double(v));
    return out;
}

std::vector<std::vector<double>> dsa_attention_bound(const Params& params, const std::vector<TensorView>& in,
                                                     const std::vector<std::vector<double>>& exact, Format,
                                                     const std::vector<Format>& out) {
    const DsaSetup s = dsa_setup(params, in);
    const DsaScores sc = dsa_scores(s, in);
    const std::vector<double>& used = exact.at(2);
    const Tensor mask = dsa_mask(s, used);
    const std::vector<TensorView> attn{in[3], in[4], in[5], mask.view()};
    const std::vector<Format> fo{out.at(0), out.size() > 1 ? out[1] : Format::fp32};
    const std::vector<double> flat = attention_bound(dsa_attention_params(params), attn,
                                                     attention_outputs(attn, exact.at(0), exact.at(1)),
                                                     declared_flash_model(params, fo));
    const auto n_o = static_cast<std::ptrdiff_t>(exact.at(0).size());
    std::vector<double> bo(flat.begin(), flat.begin() + n_o), bl(flat.begin() + n_o, flat.end());
    std::vector<double> bi(used.size(), 0.0);
    for (std::int64_t i = 0; i < s.lq; ++i) {
        bool same = s.staged;  // the candidate's row is the one judged
        for (std::int64_t j = 0; j < s.k; ++j) {
            const auto at = static_cast<std::size_t>(i * s.k + j);
            if (std::isnan(used[at])) bi[at] = kDsaNaN;
            if (s.staged && in[8].value(i * s.k + j) != used[at]) same = false;
        }
        if (!sc.undefined[static_cast<std::size_t>(i)]) continue;
        for (std::int64_t j = 0; j < s.k; ++j) bi[static_cast<std::size_t>(i * s.k + j)] = kUndefined;
        if (same) continue;
        for (std::int64_t h = 0; h < s.h; ++h) {
            bl[static_cast<std::size_t>(h * s.lq + i)] = kUndefined;
            for (std::int64_t x = 0; x < s.dv; ++x) bo[static_cast<std::size_t>((h * s.lq + i) * s.dv + x)] = kUndefined;
        }
    }
    return {bo, bl, bi};
}

}  // namespace conform::oracle
