#include "model/moe_steps.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "model/step_bound_structured.hpp"
#include "numerics/moe_slots.hpp"
#include "numerics/ulp.hpp"
#include "oracle/activation.hpp"
#include "oracle/moe.hpp"
#include "oracle/moe_layer.hpp"
#include "oracle/norm.hpp"

namespace conform::model {

Params router_params(const ModelContract& c) {
    return Params({{"k", static_cast<double>(c.top_k)},
                   {"score", c.router_score == RouterScore::sigmoid ? 1.0 : 0.0},
                   {"renormalize", c.renormalize ? 1.0 : 0.0},
                   {"capacity", 0},
                   {"groups", static_cast<double>(c.router_groups)},
                   {"topk_groups", static_cast<double>(c.router_topk_groups)},
                   {"group_top", static_cast<double>(c.router_group_top)},
                   {"scaling", c.routed_scaling}});
}

Params moe_layer_params(const ModelContract& c) {
    Params p = router_params(c);
    if (c.mlp == MlpKind::latent_moe) p.set("normalized", c.normalized ? 1.0 : 0.0), p.set("eps", c.eps);
    return p;
}

std::string RouterCounts::note() const {
    if (!ambiguous && !accepted_other) return "";
    return "router: " + std::to_string(ambiguous) + " ambiguous selections, " + std::to_string(accepted_other) +
           " other than the oracle's accepted (within the scores' budget)";
}

namespace {

using MoeMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr double kMoeNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<TensorView> views_of(const OpCall& call) {
    std::vector<TensorView> v;
    for (const Tensor& t : call.in) v.push_back(t.view());
    return v;
}

// The exact scores are within the FP64 tier's own error of the double ones
// the budget is centred on: 2^-29 of the FP32 budget (kFp64TierScale), and a
// subnormal floor.
void widen_by_tier(oracle::TokenBudget& b) {
    for (double& d : b.delta) d = d * (1 + 2 * kFp64TierScale) + 0x1p-1070;
}

// The k experts of largest score, in decreasing order, ties to the lower
// index (group-limited: among the kept groups', oracle::router_order).
std::vector<double> own_selection(const oracle::TokenBudget& b, std::int64_t k, std::vector<std::int64_t>& order) {
    order = oracle::router_order(b);
    return {order.begin(), order.begin() + k};
}

}  // namespace

Values eval_router_step(const OpCall& call, const Values* cand, RouterCounts* counts) {
    const std::vector<TensorView> in = views_of(call);
    const oracle::RouterSetup s = oracle::router_setup(call.params, in);
    const std::int64_t T = s.tokens, K = s.k;
    Values out{{T, 2 * K}, std::vector<double>(static_cast<std::size_t>(T * 2 * K))};
    for (std::int64_t t = 0; t < T; ++t) {
        double* row = &out.v[static_cast<std::size_t>(t * 2 * K)];
        oracle::TokenBudget b = oracle::router_token_budget(s, in, t);
        if (!b.finite) {
            std::fill(row, row + 2 * K, kMoeNaN);
            continue;
        }
        widen_by_tier(b);
        std::vector<std::int64_t> order;
        std::vector<double> chosen = own_selection(b, K, order);
        if (cand) {
            const double* c = &cand->v[static_cast<std::size_t>(t * 2 * K)];
            const std::vector<double> theirs(c, c + K);
            oracle::TokenBudget any = b;  // an undefined token: any valid selection is its choice
            if (b.undefined) std::fill(any.delta.begin(), any.delta.end(), INFINITY);
            if (oracle::router_admissible(b.undefined ? any : b, theirs)) {
                if (counts && theirs != chosen && !b.undefined) ++counts->accepted_other;
                chosen = theirs;
            }
            if (counts && !b.undefined && oracle::ambiguous(b, order, K)) ++counts->ambiguous;
        }
        double sum = 0;
        for (double e : chosen) sum += b.p[static_cast<std::size_t>(e)];
        for (std::int64_t j = 0; j < K; ++j) {
            const double p = b.p[static_cast<std::size_t>(chosen[static_cast<std::size_t>(j)])];
            row[j] = chosen[static_cast<std::size_t>(j)];
            row[K + j] = s.scaling * (s.renormalize ? p / sum : p);
        }
    }
    return out;
}

namespace {

MoeMat matrix(const TensorView& t, std::int64_t rows, std::int64_t cols, std::int64_t first = 0) {
    MoeMat m(rows, cols);
    for (std::int64_t i = 0; i < rows * cols; ++i) m.data()[i] = t.value(first + i);
    return m;
}

// Expert e of gate_up [n, W, 2F] and down [n, F, W] on the rows of v, in double.
MoeMat expert_rows(const MoeMat& v, const TensorView& gu, const TensorView& dn, std::int64_t e) {
    const std::int64_t W = gu.shape[1], F = gu.shape[2] / 2;
    const MoeMat h = v * matrix(gu, W, 2 * F, e * W * 2 * F);
    MoeMat a(h.rows(), F);
    for (Eigen::Index r = 0; r < h.rows(); ++r)
        for (std::int64_t i = 0; i < F; ++i) a(r, i) = oracle::silu(h(r, i)) * h(r, F + i);
    return a * matrix(dn, F, W, e * F * W);
}

}  // namespace

namespace {

// Rows of y that are NaN throughout: a token the router found non-finite
// (bad), or whose computation met a NaN or an infinity (the op's rule).
Values with_nan_rows(const MoeMat& y, const std::vector<char>& bad) {
    const std::int64_t T = y.rows(), W = y.cols();
    Values out{{T, W}, std::vector<double>(y.data(), y.data() + T * W)};
    for (std::int64_t t = 0; t < T; ++t) {
        double* row = &out.v[static_cast<std::size_t>(t * W)];
        if (bad[static_cast<std::size_t>(t)] || !std::all_of(row, row + W, [](double e) { return std::isfinite(e); }))
            std::fill(row, row + W, kMoeNaN);
    }
    return out;
}

// sum_j g_j routed_{i_j}(v_t) per token, grouped by expert.
MoeMat routed_sum(const moe_slots::Layer& l, const std::vector<TensorView>& in, const MoeMat& v, const Values& router) {
    const auto slot = [&](std::int64_t t, std::int64_t j) { return router.v[static_cast<std::size_t>(t * 2 * l.k + j)]; };
    MoeMat u = MoeMat::Zero(l.t, l.w);
    for (std::int64_t e = 0; e < l.e; ++e) {  // the tokens choosing e, with their slots
        std::vector<std::pair<std::int64_t, std::int64_t>> ts;
        for (std::int64_t t = 0; t < l.t; ++t)
            for (std::int64_t j = 0; j < l.k; ++j)
                if (slot(t, j) == static_cast<double>(e)) ts.push_back({t, j});
        if (ts.empty()) continue;
        MoeMat g(static_cast<Eigen::Index>(ts.size()), l.w);
        for (std::size_t n = 0; n < ts.size(); ++n) g.row(static_cast<Eigen::Index>(n)) = v.row(ts[n].first);
        const MoeMat ye = expert_rows(g, l.in(in, moe_slots::gate_up), l.in(in, moe_slots::down), e);
        for (std::size_t n = 0; n < ts.size(); ++n)
            u.row(ts[n].first) += slot(ts[n].first, l.k + ts[n].second) * ye.row(static_cast<Eigen::Index>(n));
    }
    return u;
}

MoeMat plus_shared(const moe_slots::Layer& l, const std::vector<TensorView>& in, MoeMat y) {
    const MoeMat x = matrix(l.in(in, moe_slots::x), l.t, l.c);
    for (std::int64_t s = 0; s < l.s; ++s) y += expert_rows(x, l.in(in, moe_slots::shared_gate_up), l.in(in, moe_slots::shared_down), s);
    return y;
}

}  // namespace

Values eval_moe_step(const OpCall& call, const Values& router) {
    const std::vector<TensorView> in = views_of(call);
    const moe_slots::Layer l = moe_slots::read_layer(call.op, call.params, in);
    const MoeMat x = matrix(l.in(in, moe_slots::x), l.t, l.c);
    const MoeMat v = l.latent ? MoeMat(x * matrix(l.in(in, moe_slots::latent_down), l.c, l.w)) : x;
    // A token the router found non-finite, or a dump's router row that is no
    // routing (an id NaN, out of range or fractional): NaN throughout.
    std::vector<double> ids;
    for (std::int64_t t = 0; t < l.t; ++t)
        for (std::int64_t j = 0; j < l.k; ++j) ids.push_back(router.v[static_cast<std::size_t>(t * 2 * l.k + j)]);
    std::vector<char> bad(static_cast<std::size_t>(l.t));
    for (std::int64_t t = 0; t < l.t; ++t) bad[static_cast<std::size_t>(t)] = !oracle::valid_expert_ids(ids, t, l.k, l.e);
    const MoeMat u = routed_sum(l, in, v, router);
    return with_nan_rows(l.latent ? u : plus_shared(l, in, u), bad);
}

Values eval_latent_out_step(const OpCall& call, const Values& u) {
    const std::vector<TensorView> in = views_of(call);
    const moe_slots::Layer l = moe_slots::read_layer(call.op, call.params, in);
    MoeMat n(l.t, l.w);
    std::vector<char> bad(static_cast<std::size_t>(l.t), 0);
    for (std::int64_t t = 0; t < l.t; ++t) {
        std::vector<double> row(u.v.begin() + t * l.w, u.v.begin() + (t + 1) * l.w);
        bad[static_cast<std::size_t>(t)] = !std::all_of(row.begin(), row.end(), [](double e) { return std::isfinite(e); });
        if (l.normalized) {
            std::vector<double> w(static_cast<std::size_t>(l.w), 1.0);
            if (l.has(moe_slots::norm_weight))
                for (std::int64_t i = 0; i < l.w; ++i) w[static_cast<std::size_t>(i)] = l.in(in, moe_slots::norm_weight).value(i);
            row = oracle::rms_norm<double>(row, w, l.eps, false);
        }
        for (std::int64_t i = 0; i < l.w; ++i) n(t, i) = row[static_cast<std::size_t>(i)];
    }
    return with_nan_rows(plus_shared(l, in, n * matrix(l.in(in, moe_slots::latent_up), l.w, l.c)), bad);
}

// ---- budgets ------------------------------------------------------------------

StepBound router_step_bound(const OpCall& call, const Values& ref, Format out) {
    const std::vector<TensorView> in = views_of(call);
    const oracle::RouterSetup s = oracle::router_setup(call.params, in);
    const std::int64_t T = s.tokens, K = s.k;
    std::vector<std::vector<double>> exact(4);
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < K; ++j) {
            exact[0].push_back(ref.v[static_cast<std::size_t>(t * 2 * K + j)]);
            exact[1].push_back(ref.v[static_cast<std::size_t>(t * 2 * K + K + j)]);
            exact[2].push_back(1);
        }
    exact[3].push_back(0);
    const auto rb = oracle::moe_router_bound(call.params, in, exact, Format::fp32, std::vector<Format>(4, Format::fp32));
    const bool rounds = info(out).precision < info(Format::fp32).precision;
    // Weights a router in the model's format may return rounded to it
    // (router_arith = dtype, model/layout.cpp): half an ulp, at most u |g|
    // (or half the subnormal spacing).
    const double weight_unit = call.params.get("declared.weight_unit", 0), weight_eta = call.params.get("declared.weight_eta", 0);
    StepBound b{std::vector<double>(ref.v.size()), std::vector<double>(ref.v.size(), 0.0)};
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < K; ++j) {
            const auto at = static_cast<std::size_t>(t * K + j), pi = static_cast<std::size_t>(t * 2 * K + j), pw = pi + static_cast<std::size_t>(K);
            const double w = std::isfinite(rb[1][at]) ? rb[1][at] + weight_unit * (std::fabs(ref.v[pw]) + rb[1][at]) + weight_eta : rb[1][at];
            b.budget[pi] = rb[0][at];
            b.budget[pw] = w + (rounds && std::isfinite(w) ? 0.5 * ulp_at(out, std::fabs(ref.v[pw]) + w) : 0.0);
            if (std::isfinite(w)) b.oracle[pw] = kFp64TierScale * w;
        }
    return b;
}

namespace {

// The budget of a kernel storing into the model format, plus a rounding
// into `out` where the point is narrower; the FP64 tier's bound from the
// same analysis with FP32 intermediates (kFp64TierScale).
StepBound finish_bound(StepBound b, const ModelContract& c, const Values& ref, Format out) {
    if (info(out).precision < info(c.dtype).precision)
        for (std::size_t i = 0; i < b.budget.size(); ++i)
            if (std::isfinite(b.budget[i])) b.budget[i] += 0.5 * ulp_at(out, std::fabs(ref.v[i]) + b.budget[i]);
    for (double& o : b.oracle) o = std::isfinite(o) ? kFp64TierScale * o : 0.0;
    return b;
}

}  // namespace

StepBound moe_step_bound(const ModelContract& c, const OpCall& call, const Values& router, const Values& ref, Format out) {
    const std::vector<TensorView> in = views_of(call);
    const moe_slots::Layer l = moe_slots::read_layer(call.op, call.params, in);
    oracle::GivenRouting r;
    const bool cast = info(c.dtype).precision < info(Format::fp32).precision;
    for (std::int64_t t = 0; t < l.t; ++t)
        for (std::int64_t j = 0; j < l.k; ++j) {
            const double g = router.v[static_cast<std::size_t>(t * 2 * l.k + l.k + j)];
            r.indices.push_back(router.v[static_cast<std::size_t>(t * 2 * l.k + j)]);
            r.weights.push_back(g);
            r.weight_err.push_back(cast && std::isfinite(g) ? 0.5 * ulp_at(c.dtype, std::fabs(g)) : 0.0);
            r.kept.push_back(1);
        }
    const auto stage = l.latent ? oracle::BoundStage::latent_u : oracle::BoundStage::all;
    StepBound b{oracle::moe_bound_given_routing(l, in, r, c.dtype, Format::fp32, stage), {}};
    std::fill(r.weight_err.begin(), r.weight_err.end(), 0.0);
    b.oracle = oracle::moe_bound_given_routing(l, in, r, Format::fp32, Format::fp32, stage);
    return finish_bound(std::move(b), c, ref, out);
}

StepBound latent_out_step_bound(const ModelContract& c, const OpCall& call, const Values& u, const Values& ref, Format out) {
    const std::vector<TensorView> in = views_of(call);
    const moe_slots::Layer l = moe_slots::read_layer(call.op, call.params, in);
    StepBound b{oracle::latent_out_bound(l, in, u.v, c.dtype, Format::fp32),
                oracle::latent_out_bound(l, in, u.v, Format::fp32, Format::fp32)};
    return finish_bound(std::move(b), c, ref, out);
}

// ---- the router point -------------------------------------------------------------

Tensor router_point(const TensorView& indices, const TensorView& weights) {
    const std::int64_t T = indices.shape[0], K = indices.shape[1];
    Tensor p(Format::fp32, {T, 2 * K});
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < K; ++j) {
            p.set_value(t * 2 * K + j, indices.value(t * K + j));
            p.set_value(t * 2 * K + K + j, weights.value(t * K + j));
        }
    return p;
}

std::pair<Tensor, Tensor> split_router_point(const TensorView& point) {
    const std::int64_t T = point.shape[0], K = point.shape[1] / 2;
    Tensor idx(Format::fp32, {T, K}), w(Format::fp32, {T, K});
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < K; ++j) {
            idx.set_value(t * K + j, point.value(t * 2 * K + j));
            w.set_value(t * K + j, point.value(t * 2 * K + K + j));
        }
    return {std::move(idx), std::move(w)};
}

}  // namespace conform::model
