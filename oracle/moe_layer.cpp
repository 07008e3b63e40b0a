#include "oracle/moe_layer.hpp"

#include <cmath>
#include <limits>

#include "numerics/moe_slots.hpp"
#include "oracle/activation.hpp"
#include "oracle/moe.hpp"
#include "oracle/norm.hpp"

namespace conform::oracle {

using moe_slots::Layer;

OpOutputs route_layer(const Layer& l, const Params& p, const std::vector<TensorView>& in) {
    std::vector<TensorView> rin = moe_slots::router_inputs(l, in);
    // Staged, moe_router reads the candidate's indices from its first output
    // slot and only the shapes of the other three.
    if (l.staged)
        for (int i = 0; i < 4; ++i) rin.push_back(in[l.outputs_at + moe_slots::indices_o]);
    return eval_moe_router(p, rin);
}

namespace {

const double kLayerNaN = std::numeric_limits<double>::quiet_NaN();

// v w for w [n, m] stored row-major at flat offset `base` of t: exact sums.
std::vector<Real> project(const std::vector<Real>& v, const TensorView& t, std::int64_t base, std::int64_t m) {
    std::vector<Real> y(static_cast<std::size_t>(m), Real(0));
    for (std::size_t i = 0; i < v.size(); ++i)
        for (std::int64_t j = 0; j < m; ++j)
            y[static_cast<std::size_t>(j)] += v[i] * from_double(t.value(base + static_cast<std::int64_t>(i) * m + j));
    return y;
}

// SwiGLU expert e of gate_up [n, W, 2F] and down [n, F, W] on v [W]:
// (silu(v G) * (v U)) D with G the first F columns of gate_up, U the rest.
std::vector<Real> expert(const TensorView& gu, const TensorView& dn, std::int64_t e, const std::vector<Real>& v) {
    const std::int64_t w = gu.shape[1], f = gu.shape[2] / 2;
    const std::vector<Real> h = project(v, gu, e * w * 2 * f, 2 * f);
    std::vector<Real> a(static_cast<std::size_t>(f));
    // An infinite gate makes the row NaN (docs/moe.md), not silu's limit -0.
    for (std::int64_t i = 0; i < f; ++i)
        a[static_cast<std::size_t>(i)] = isinf(h[static_cast<std::size_t>(i)])
                                             ? from_double(std::numeric_limits<double>::quiet_NaN())
                                             : silu(h[static_cast<std::size_t>(i)]) * h[static_cast<std::size_t>(f + i)];
    return project(a, dn, e * f * w, w);
}

// y of token t for the router's (candidate's, where admissible) selection:
// eq 4.6, or eq 4.7 for latent_moe.
std::vector<Real> layer_token(const Layer& l, const std::vector<TensorView>& in, const OpOutputs& r, std::int64_t t) {
    std::vector<Real> x(static_cast<std::size_t>(l.c));
    for (std::int64_t c = 0; c < l.c; ++c) x[static_cast<std::size_t>(c)] = from_double(l.in(in, moe_slots::x).value(t * l.c + c));
    const std::vector<Real> v = l.latent ? project(x, l.in(in, moe_slots::latent_down), 0, l.w) : x;
    std::vector<Real> u(static_cast<std::size_t>(l.w), Real(0));
    for (std::int64_t j = 0; j < l.k; ++j) {
        const std::size_t at = static_cast<std::size_t>(t * l.k + j);
        if (r.values[2][at] != 1) continue;  // dropped by capacity
        const auto e = static_cast<std::int64_t>(to_double(r.values[0][at]));
        const std::vector<Real> ye = expert(l.in(in, moe_slots::gate_up), l.in(in, moe_slots::down), e, v);
        for (std::size_t i = 0; i < u.size(); ++i) u[i] += r.values[1][at] * ye[i];
    }
    std::vector<Real> y = u;
    if (l.latent) {
        std::vector<Real> n = u;
        if (l.normalized) {
            std::vector<Real> wn(u.size(), Real(1));
            if (l.has(moe_slots::norm_weight)) wn = read_exact(l.in(in, moe_slots::norm_weight));
            n = rms_norm(u, wn, l.eps, false);
        }
        y = project(n, l.in(in, moe_slots::latent_up), 0, l.c);
    }
    for (std::int64_t s = 0; s < l.s; ++s) {
        const std::vector<Real> ys = expert(l.in(in, moe_slots::shared_gate_up), l.in(in, moe_slots::shared_down), s, x);
        for (std::size_t i = 0; i < y.size(); ++i) y[i] += ys[i];
    }
    return y;
}

OpOutputs eval_layer(const std::string& op, const Params& p, const std::vector<TensorView>& in) {
    const Layer l = moe_slots::read_layer(op, p, in);
    OpOutputs r = route_layer(l, p, in);
    OpOutputs out{{"y", "indices", "weights"}, {{l.t, l.c}, {l.t, l.k}, {l.t, l.k}}, {{}, r.values[0], r.values[1]}};
    out.notes = r.notes;
    out.values[0].reserve(static_cast<std::size_t>(l.t * l.c));
    for (std::int64_t t = 0; t < l.t; ++t) {
        std::vector<Real> y;
        if (!isnan(r.values[0][static_cast<std::size_t>(t * l.k)])) y = layer_token(l, in, r, t);
        // A NaN or an infinity met anywhere (the router, an input the token
        // reads, an exact intermediate) makes the whole row NaN (docs/moe.md).
        bool finite = !y.empty();
        for (const Real& v : y) finite = finite && isfinite(v);
        for (std::int64_t c = 0; c < l.c; ++c) out.values[0].push_back(finite ? y[static_cast<std::size_t>(c)] : from_double(kLayerNaN));
    }
    return out;
}

}  // namespace

OpOutputs eval_moe(const Params& params, const std::vector<TensorView>& in) { return eval_layer("moe", params, in); }
OpOutputs eval_latent_moe(const Params& params, const std::vector<TensorView>& in) {
    return eval_layer("latent_moe", params, in);
}

}  // namespace conform::oracle
