// Budget of the MoE layers' y (docs/moe.md, "Error budget of the layer"):
// a forward error analysis stage by stage.  Every stage carries, per
// element, a double `v` near the exact value and a bound `e` on both |kernel
// - exact| and |v - exact|, so |exact| and |kernel| are at most |v| + 2e.
#include <algorithm>
#include <cmath>
#include <limits>

#include "oracle/bound.hpp"
#include "oracle/matmul.hpp"
#include "oracle/moe.hpp"
#include "oracle/moe_layer.hpp"

namespace conform::oracle {
namespace {

using moe_slots::Layer;

constexpr double kDoubleU = 0x1p-53;           // double's unit roundoff: the slack of v itself
constexpr double kMoeSiluSlope = 1.1;       // max |silu'(z)| = 1.0998 (z = 2.40)
constexpr double kMoeSiluAbs = 0x1p-121;    // expf(-g) = inf below g = -88.72: silu(g) returned as -0
const double kBoundNaN = std::numeric_limits<double>::quiet_NaN();

struct Approx {
    std::vector<double> v, e;
    double mag(std::size_t i) const { return std::fabs(v[i]) + 2 * e[i]; }
};

struct Term {
    const Approx* a;
    double g, dg;  // weight and its budget (1 and 0 for a shared expert)
};

class Budget {
public:
    // The FP32 SiLU g / (1 + expf(-g)): expf within exp_ulps ulps (2u each),
    // 1 + e and the division one u each, one u of margin (5u for glibc's expf).
    Budget(Format store, Format acc, double act_unit = 0, double act_eta = 0, double exp_ulps = 1)
        : store_(store), acc_(acc), u_(unit_roundoff(acc)), act_unit_(act_unit), act_eta_(act_eta),
          silu_rel_((2 * exp_ulps + 3) * 0x1p-24) {}
    bool undefined = false;

    // Rounding into the storage format of a value of magnitude at most m.
    double st(double m) {
        if (m >= max_finite(store_)) undefined = true;
        return info(store_).precision < info(acc_).precision ? 0.5 * ulp_at(store_, m) : 0.0;
    }

    // x w for w [n, m] at flat offset base of t, FP32 dot products stored.
    Approx project(const Approx& x, const TensorView& t, std::int64_t base, std::int64_t m) {
        const std::size_t n = x.v.size();
        Approx y{std::vector<double>(static_cast<std::size_t>(m), 0), std::vector<double>(static_cast<std::size_t>(m), 0)};
        std::vector<double> prop(y.v.size(), 0), s(y.v.size(), 0), sv(y.v.size(), 0);
        for (std::size_t i = 0; i < n; ++i)
            for (std::int64_t j = 0; j < m; ++j) {
                const double w = t.value(base + static_cast<std::int64_t>(i) * m + j);
                const auto jj = static_cast<std::size_t>(j);
                y.v[jj] += x.v[i] * w;
                prop[jj] += x.e[i] * std::fabs(w);
                s[jj] += x.mag(i) * std::fabs(w);
                sv[jj] += std::fabs(x.v[i] * w);
            }
        for (std::size_t j = 0; j < y.v.size(); ++j) {
            const DotBudget db = dot_budget(s[j], static_cast<std::int64_t>(n), acc_);
            undefined = undefined || db.may_overflow;
            y.e[j] = prop[j] + db.err + kDoubleU * static_cast<double>(n + 2) * sv[j];
            y.e[j] += st(std::fabs(y.v[j]) + 2 * y.e[j]);
        }
        return y;
    }

    // a_f = silu(h_f) h_{F+f}, in the accumulator's format, stored.  A
    // declared activation rounding (act_unit) stores the FP32 SiLU first:
    // |fl(ŝ) − ŝ| <= act_unit |ŝ| + act_eta, ŝ within silu_err of silu.
    Approx act(const Approx& h) {
        const std::size_t f = h.v.size() / 2;
        Approx a{std::vector<double>(f), std::vector<double>(f)};
        for (std::size_t i = 0; i < f; ++i) {
            const double g = h.v[i], w = h.v[f + i];
            const double sg = g / (1 + std::exp(-g));
            const double smag = std::fabs(sg) + 2 * kMoeSiluSlope * h.e[i] + 0x1p-1000, wmag = h.mag(f + i);
            a.v[i] = sg * w;
            const double fp32_err = kMoeSiluSlope * h.e[i] + silu_rel_ * smag + kMoeSiluAbs;
            const double silu_err = fp32_err + act_unit_ * (smag + fp32_err) + act_eta_;
            const double stored = smag * (1 + silu_rel_) + kMoeSiluAbs;  // |ŝ|, the product's first factor
            a.e[i] = silu_err * wmag + smag * h.e[f + i] + u_ * (stored * (1 + act_unit_) + act_eta_) * wmag +
                     kEta + 4 * kDoubleU * std::fabs(a.v[i]);
            if (smag * wmag >= max_finite(acc_)) undefined = true;
            a.e[i] += st(std::fabs(a.v[i]) + 2 * a.e[i]);
        }
        return a;
    }

    // SwiGLU expert e of gate_up / down on v.
    Approx expert(const Approx& v, const TensorView& gu, const TensorView& dn, std::int64_t e) {
        const std::int64_t w = gu.shape[1], f = gu.shape[2] / 2;
        return project(act(project(v, gu, e * w * 2 * f, 2 * f)), dn, e * f * w, w);
    }

    // sum of g y over the terms, in the accumulator (weights times values
    // rounded, sums in any order), stored.
    Approx combine(const std::vector<Term>& terms, std::size_t width) {
        Approx y{std::vector<double>(width, 0), std::vector<double>(width, 0)};
        for (std::size_t j = 0; j < width; ++j) {
            double prop = 0, s = 0;
            for (const Term& t : terms) {
                y.v[j] += t.g * t.a->v[j];
                prop += (std::fabs(t.g) + t.dg) * t.a->e[j] + t.dg * (std::fabs(t.a->v[j]) + t.a->e[j]);
                s += (std::fabs(t.g) + t.dg) * t.a->mag(j);
            }
            const DotBudget db = dot_budget(s, static_cast<std::int64_t>(terms.size()), acc_);
            undefined = undefined || db.may_overflow;
            y.e[j] = prop + db.err + kDoubleU * static_cast<double>(terms.size() + 2) * s;
            y.e[j] += st(std::fabs(y.v[j]) + 2 * y.e[j]);
        }
        return y;
    }

    // wn u / sqrt(mean(u^2) + eps), the root and quotient in the accumulator
    // (docs/moe.md): |kernel rms - exact rms| <= ||e_u||_2 / sqrt(L).
    Approx rms(const Approx& u, const TensorView* wn, double eps) {
        const std::size_t n = u.v.size();
        double ss = 0, ee = 0, sm = 0;
        for (std::size_t i = 0; i < n; ++i) ss += u.v[i] * u.v[i], ee += u.e[i] * u.e[i], sm += u.mag(i) * u.mag(i);
        const double nd = static_cast<double>(n);
        // An FP32 sum of squares may overflow (|u| near 2^64 and past): the
        // root is then inf and RMSNorm(u) 0 in a kernel without rescaling.
        if (sm * (1 + gamma_rigorous(nd, u_)) >= max_finite(acc_)) undefined = true;
        const double r = std::sqrt(ss / nd + eps) * (1 + 8 * kDoubleU), dr = std::sqrt(ee / nd) * (1 + 8 * kDoubleU);
        // Past 8 dr > r the root's term alone nears |n|: the bound would be vacuous.
        if (8 * dr > r) undefined = true;
        const double lo = std::max(r - 2 * dr, std::sqrt(eps)) * (1 - 8 * kDoubleU);
        const double rel = gamma(nd + 7, u_) + nd * kEta / (lo * lo);
        Approx y{std::vector<double>(n), std::vector<double>(n)};
        for (std::size_t i = 0; i < n; ++i) {
            const double w = wn ? wn->value(static_cast<std::int64_t>(i)) : 1.0;
            y.v[i] = w * u.v[i] / r;
            y.e[i] = std::fabs(w) * (u.e[i] / lo + (std::fabs(u.v[i]) + u.e[i]) * dr / (lo * lo) + u.mag(i) / lo * rel) +
                     16 * kDoubleU * std::fabs(y.v[i]);
            // Subnormal roundings: w u (eta/2, then divided by the root) and
            // the quotient (or u / r, then times w).
            const double wu = std::fabs(w) * u.mag(i), q = u.mag(i) / lo;
            if (wu < 0x1p-126) y.e[i] += kEta / lo;
            if (q * std::max(1.0, std::fabs(w)) < 0x1p-126) y.e[i] += (1 + std::fabs(w)) * kEta;
            if (wu >= max_finite(acc_) || q >= max_finite(acc_)) undefined = true;  // w u or u / r overflows
            y.e[i] += st(std::fabs(y.v[i]) + 2 * y.e[i]);
        }
        return y;
    }

private:
    Format store_, acc_;
    double u_, act_unit_, act_eta_, silu_rel_;
};

Approx exact_row(const TensorView& x, std::int64_t t, std::int64_t c) {
    Approx a{std::vector<double>(static_cast<std::size_t>(c)), std::vector<double>(static_cast<std::size_t>(c), 0)};
    for (std::int64_t i = 0; i < c; ++i) a.v[static_cast<std::size_t>(i)] = x.value(t * c + i);
    return a;
}

// The bound of token t at `stage`: y of the whole layer given its routing
// r; u of latent_moe given r; or latent_moe's y from the stored u row
// `u_row` (exact inputs of that step: its error starts at 0).
std::vector<double> token_bound(const Layer& l, const std::vector<TensorView>& in, std::int64_t t, const GivenRouting* r,
                                const double* u_row, Format store, Format acc, BoundStage stage) {
    const std::size_t width = static_cast<std::size_t>(stage == BoundStage::latent_u ? l.w : l.c);
    const std::vector<double> undefined_row(width, kUndefined);
    Budget b(store, acc, l.act_unit, l.act_eta, l.exp_ulps);
    const Approx x = exact_row(l.in(in, moe_slots::x), t, l.c);
    std::vector<Approx> ys;
    ys.reserve(static_cast<std::size_t>(l.k + l.s + 1));
    std::vector<Term> last;
    Approx u;  // latent_out: the stored u, exact (error 0)
    if (u_row) u = {std::vector<double>(u_row, u_row + l.w), std::vector<double>(static_cast<std::size_t>(l.w), 0.0)};
    if (stage != BoundStage::latent_out) {
        const Approx v = l.latent ? b.project(x, l.in(in, moe_slots::latent_down), 0, l.w) : x;
        std::vector<Term> routed;
        for (std::int64_t j = 0; j < l.k; ++j) {
            const std::size_t at = static_cast<std::size_t>(t * l.k + j);
            if (r->weight_err[at] == kUndefined) return undefined_row;
            if (r->kept[at] != 1) continue;  // dropped
            ys.push_back(b.expert(v, l.in(in, moe_slots::gate_up), l.in(in, moe_slots::down), static_cast<std::int64_t>(r->indices[at])));
            routed.push_back({&ys.back(), r->weights[at], r->weight_err[at]});
        }
        if (!l.latent) last = routed;  // moe: shared and routed experts in one FP32 sum
        else u = b.combine(routed, static_cast<std::size_t>(l.w));
        if (stage == BoundStage::latent_u) return b.undefined ? undefined_row : u.e;
    }
    Approx up;
    if (l.latent) {
        const TensorView* wn = l.has(moe_slots::norm_weight) ? &l.in(in, moe_slots::norm_weight) : nullptr;
        up = b.project(l.normalized ? b.rms(u, wn, l.eps) : u, l.in(in, moe_slots::latent_up), 0, l.c);
        last.push_back({&up, 1, 0});
    }
    for (std::int64_t s = 0; s < l.s; ++s) {
        ys.push_back(b.expert(x, l.in(in, moe_slots::shared_gate_up), l.in(in, moe_slots::shared_down), s));
        last.push_back({&ys.back(), 1, 0});
    }
    const Approx y = b.combine(last, static_cast<std::size_t>(l.c));
    return b.undefined ? undefined_row : y.e;
}

// Every token's bound at `stage`, NaN rows where nan_row(t).
template <class NanRow>
std::vector<double> bound_rows(const Layer& l, const std::vector<TensorView>& in, const GivenRouting* r,
                               const std::vector<double>* u, Format store, Format acc, BoundStage stage, NanRow nan_row) {
    const std::int64_t width = stage == BoundStage::latent_u ? l.w : l.c;
    std::vector<double> b;
    b.reserve(static_cast<std::size_t>(l.t * width));
    for (std::int64_t t = 0; t < l.t; ++t) {
        const double* u_row = u ? u->data() + t * l.w : nullptr;
        const std::vector<double> bt = nan_row(t) ? std::vector<double>(static_cast<std::size_t>(width), kBoundNaN)
                                                  : token_bound(l, in, t, r, u_row, store, acc, stage);
        b.insert(b.end(), bt.begin(), bt.end());
    }
    return b;
}

std::vector<std::vector<double>> layer_bound(const std::string& op, const Params& params, const std::vector<TensorView>& in,
                                             const std::vector<std::vector<double>>& exact, Format acc,
                                             const std::vector<Format>& out) {
    const Layer l = moe_slots::read_layer(op, params, in);
    const LayerRouting r = layer_routing(l, params, in, acc);
    const std::vector<std::vector<double>>& rx = r.values;
    const std::vector<std::vector<double>>& rb = r.bound;
    std::vector<std::vector<double>> b{{}, rb[0], rb[1]};
    const GivenRouting given{rx[0], rx[1], rb[1], rx[2]};
    b[0] = bound_rows(l, in, &given, nullptr, out.at(0), acc, BoundStage::all,
                      [&](std::int64_t t) { return std::isnan(exact.at(0).at(static_cast<std::size_t>(t * l.c))); });
    return b;
}

}  // namespace

LayerRouting layer_routing(const Layer& l, const Params& params, const std::vector<TensorView>& in, Format acc) {
    LayerRouting r{std::vector<std::vector<double>>(4), {}};
    {
        PrecisionScope scope(kDefaultBits);
        const OpOutputs exact = route_layer(l, params, in);
        for (std::size_t o = 0; o < 4; ++o)
            for (const Real& v : exact.values[o]) r.values[o].push_back(to_double(v));
    }
    r.bound = moe_router_bound(params, moe_slots::router_inputs(l, in), r.values, acc,
                               {Format::fp32, Format::fp32, Format::fp32, Format::fp32});
    return r;
}

bool valid_expert_ids(const std::vector<double>& ids, std::int64_t t, std::int64_t k, std::int64_t experts) {
    for (std::int64_t j = 0; j < k; ++j) {
        const double e = ids.at(static_cast<std::size_t>(t * k + j));
        if (!(e >= 0 && e < static_cast<double>(experts) && e == std::floor(e))) return false;
    }
    return true;
}

std::vector<double> moe_bound_given_routing(const Layer& l, const std::vector<TensorView>& in, const GivenRouting& r,
                                            Format store, Format acc, BoundStage stage) {
    return bound_rows(l, in, &r, nullptr, store, acc, stage,
                      [&](std::int64_t t) { return !valid_expert_ids(r.indices, t, l.k, l.e); });
}

std::vector<double> latent_out_bound(const Layer& l, const std::vector<TensorView>& in, const std::vector<double>& u,
                                     Format store, Format acc) {
    return bound_rows(l, in, nullptr, &u, store, acc, BoundStage::latent_out, [&](std::int64_t t) {
        return !std::all_of(u.begin() + t * l.w, u.begin() + (t + 1) * l.w, [](double v) { return std::isfinite(v); });
    });
}

std::vector<std::vector<double>> moe_bound(const Params& params, const std::vector<TensorView>& in,
                                           const std::vector<std::vector<double>>& exact, Format acc,
                                           const std::vector<Format>& out) {
    return layer_bound("moe", params, in, exact, acc, out);
}

std::vector<std::vector<double>> latent_moe_bound(const Params& params, const std::vector<TensorView>& in,
                                                  const std::vector<std::vector<double>>& exact, Format acc,
                                                  const std::vector<Format>& out) {
    return layer_bound("latent_moe", params, in, exact, acc, out);
}

}  // namespace conform::oracle
