// Generators and properties of MoE routing (docs/moe.md, "Properties").
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "oracle/moe.hpp"
#include "properties/common.hpp"

namespace conform::props {
namespace {

struct RouterDims {
    std::int64_t t, c, e, bias, duplicate;
};
RouterDims dims_of(const CaseSpec& s) { return {s.dims.at(0), s.dims.at(1), s.dims.at(2), s.dims.at(3), s.dims.at(4)}; }

}  // namespace

// Values of ordinary magnitude (logits stay inside FP32's range and the
// sigmoid's normal range); constants make every expert tie.
const std::vector<Family>& moe_families() {
    static const std::vector<Family> v{Family::normal,   Family::uniform, Family::heavy_tail, Family::outlier,
                                       Family::constant, Family::tiny,    Family::subnormal};
    return v;
}

// A selection bias [E], small (it reorders near ties) or large (it overrides
// the scores).
Tensor selection_bias(std::int64_t experts, std::mt19937_64& rng) {
    Tensor b(Format::fp32, {experts});
    const double amp = rng() % 2 ? 0.05 : 1.0;
    std::uniform_real_distribution<double> U(-amp, amp);
    for (std::int64_t e = 0; e < experts; ++e) b.set_value(e, U(rng));
    return b;
}

// Group-limited selection for E experts and k chosen (params groups,
// topk_groups, group_top): 0 none; 1 min(8, E / 4) groups of 4 or more (E >=
// 8: the top-2 sum differs from the sum of all and from the largest), about
// half of them kept; 2 pairs (E >= 4), ceil(k / 2) kept; 3 as 1, the groups
// ranked by their largest score (group_top 1, DeepSeek-V2).  Every choice
// keeps fewer groups than there are unless k needs them all.
void set_grouping(Params& p, std::int64_t e, std::int64_t k, int grouping) {
    std::int64_t groups = 1, kept = 0;
    if (grouping == 3) p.set("group_top", 1);
    if ((grouping == 1 || grouping == 3) && e >= 8)
        groups = std::min<std::int64_t>(8, e / 4), kept = std::max<std::int64_t>(groups / 2, (k + e / groups - 1) / (e / groups));
    if (grouping == 2 && e >= 4) groups = e / 2, kept = (k + 1) / 2;
    p.set("groups", static_cast<double>(groups));
    p.set("topk_groups", static_cast<double>(kept));
}

// dims = {T, C, E, has selection_bias, duplicated expert columns}: the
// duplicates make two experts' scores tie exactly (1: expert 2i + 1 a copy
// of 2i), or two groups' (2, grouped: group 2h + 1 a copy of group 2h, bias
// included; ungrouped as 1) (the tie rules, and ambiguous selections).
// Parameters k (<= E), score, renormalize, capacity, groups and topk_groups
// (set_grouping), scaling (1, DeepSeek-V3's 2.5, or 0.7, not an FP32 value).
rc::Gen<CaseSpec> gen_moe_router_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](std::int64_t t, std::int64_t c, std::int64_t e, int k, int score, int renorm, double capacity, int bias,
              int duplicate, Family fx, Family fw, int scale, std::uint64_t seed, int specials,
              std::pair<int, double> grouping_scaling) {
            const std::int64_t kk = std::min<std::int64_t>(k, e);
            Params p({{"k", static_cast<double>(kk)},
                      {"score", static_cast<double>(score)},
                      {"renormalize", static_cast<double>(renorm)},
                      {"capacity", capacity},
                      {"scaling", grouping_scaling.second}});
            set_grouping(p, e, kk, grouping_scaling.first);
            CaseSpec s = structured_spec("moe_router", fmt, {t, c, e, bias, duplicate}, p, fx, scale, seed, specials);
            s.families = {fx, fw};
            return s;
        },
        rc::gen::element<std::int64_t>(1, 2, 5, 16, 33), rc::gen::element<std::int64_t>(1, 4, 16, 64),
        rc::gen::element<std::int64_t>(2, 4, 8, 16, 64), rc::gen::element(1, 2, 4, 8), rc::gen::inRange(0, 2),
        rc::gen::inRange(0, 2), rc::gen::element(0.0, 0.0, 0.5, 1.0, 1.25), rc::gen::inRange(0, 2), rc::gen::element(0, 0, 1, 2),
        rc::gen::elementOf(moe_families()), rc::gen::elementOf(moe_families()), rc::gen::inRange(-3, 2),
        rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0),
        rc::gen::pair(rc::gen::element(0, 0, 1, 2, 3), rc::gen::element(1.0, 1.0, 2.5, 0.7)));
}

Case build_moe_router_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const RouterDims d = dims_of(spec);
    Tensor x(spec.format, {d.t, d.c}), w(spec.format, {d.c, d.e});
    fill_values(x, spec.families.at(0), spec, 0, rng);
    fill_values(w, spec.families.size() > 1 ? spec.families[1] : spec.families[0], spec, 1, rng);
    const auto groups = static_cast<std::int64_t>(spec.params.get("groups", 1)), n = d.e / groups;
    const bool group_copies = d.duplicate == 2 && groups > 1;
    if (d.duplicate && !group_copies)  // expert 2i + 1 a copy of expert 2i: their scores tie exactly
        for (std::int64_t r = 0; r < d.c; ++r)
            for (std::int64_t e = 0; e + 1 < d.e; e += 2) w.set_bits(r * d.e + e + 1, w.bits(r * d.e + e));
    if (group_copies)  // group 2h + 1 a copy of group 2h: their group scores tie exactly
        for (std::int64_t r = 0; r < d.c; ++r)
            for (std::int64_t g = 0; g + 1 < groups; g += 2)
                for (std::int64_t i = 0; i < n; ++i) w.set_bits(r * d.e + (g + 1) * n + i, w.bits(r * d.e + g * n + i));
    inject_specials(x, spec.specials, rng);
    inject_specials(w, spec.specials, rng);
    c.inputs.push_back(std::move(x));
    c.inputs.push_back(std::move(w));
    if (d.bias) {
        Tensor b = selection_bias(d.e, rng);
        if (group_copies)
            for (std::int64_t g = 0; g + 1 < groups; g += 2)
                for (std::int64_t i = 0; i < n; ++i) b.set_bits((g + 1) * n + i, b.bits(g * n + i));
        c.inputs.push_back(std::move(b));
    }
    return c;
}

namespace {

CaseSpec plain_spec(const KernelInfo& k) {
    CaseSpec s = in_domain(*gen_moe_router_spec(k.in, GenOptions{}));
    return s;
}

double param(const Case& c, const char* name) { return c.params.get(name, 0); }

// Renormalized, no capacity: every finite token's weights sum to the
// scaling s within (k + 2) 2^-23 s (the sum of the chosen p rounds k - 1
// times, each quotient once), and (s != 1) 2^-23 s more (s rounded to FP32,
// each product once).
Testable weights_sum_to_one(const KernelInfo& k) {
    return [&k] {
        CaseSpec s = plain_spec(k);
        s.params.set("renormalize", 1);
        s.params.set("capacity", 0);
        const Case c = build_case(s);
        const auto out = run_kernel(k, c.params, c.views());
        const std::int64_t kk = out[1].shape()[1];
        const double scaling = c.params.get("scaling", 1);
        const double tol = (static_cast<double>(kk + 2) + (scaling != 1 ? 1 : 0)) * 0x1p-23 * scaling;
        for (std::int64_t t = 0; t < out[1].shape()[0]; ++t) {
            double sum = 0;
            for (std::int64_t j = 0; j < kk; ++j) sum += out[1].value(t * kk + j);
            if (std::isnan(sum)) continue;  // a token with a non-finite logit
            const std::vector<TensorView> in = c.views();
            const oracle::TokenBudget tb = oracle::router_token_budget(oracle::router_setup(c.params, in), in, t);
            if (tb.undefined) continue;  // not judged: sigmoid scores may underflow to 0 (0 / 0, or 0 with an epsilon)
            // Nor where the chosen p's may all underflow (a dropped group's
            // expert taking the whole softmax): the verdict's own condition.
            double sp_lo = 0;
            for (std::int64_t j = 0; j < kk; ++j) {
                const auto e = static_cast<std::size_t>(out[0].value(t * kk + j));
                sp_lo += tb.p[e] * (1 - tb.rel[e]);
            }
            if (!(sp_lo * (1 - oracle::gamma(static_cast<double>(kk), 0x1p-24)) > static_cast<double>(kk) * tb.abs_p)) continue;
            // A renormalizing epsilon (at most FP32's 1e-20, which the budget
            // admits) lowers the sum by its share of the chosen p's sum.
            if (!(std::fabs(sum - scaling) <= tol + scaling * 1e-20 * (1 + 0x1p-23) / sp_lo))
                RC_FAIL("token " + std::to_string(t) + ": the " + std::to_string(kk) + " weights sum to " + hexfloat(sum) +
                        ", not the scaling " + hexfloat(scaling));
        }
    };
}

// The same case with and without the selection bias: a token that chooses
// the same experts both times has the same weight for each of them (within
// 4 (k + 2) u relative): the bias decides the choice, never the weights.
Testable bias_never_changes_weights(const KernelInfo& k) {
    return [&k] {
        CaseSpec s = plain_spec(k);
        s.dims[3] = 1;
        const Case c = build_case(s);
        const std::vector<TensorView> with = c.views(), without{with[0], with[1]};
        const auto a = run_kernel(k, c.params, with), b = run_kernel(k, c.params, without);
        const std::int64_t kk = a[0].shape()[1];
        for (std::int64_t t = 0; t < a[0].shape()[0]; ++t) {
            std::map<double, double> wa, wb;
            for (std::int64_t j = 0; j < kk; ++j) {
                if (a[2].value(t * kk + j) == 1) wa[a[0].value(t * kk + j)] = a[1].value(t * kk + j);
                if (b[2].value(t * kk + j) == 1) wb[b[0].value(t * kk + j)] = b[1].value(t * kk + j);
            }
            if (wa.size() != static_cast<std::size_t>(kk) || wb.size() != wa.size()) continue;  // drops or NaN
            bool same_set = true;
            for (const auto& [e, v] : wa) same_set = same_set && wb.count(e);
            if (!same_set) continue;
            bool finite = true;
            for (const auto& [e, v] : wa) finite = finite && std::isfinite(v) && std::isfinite(wb.at(e));
            if (!finite) continue;  // sigmoid scores all 0 (|logits| past its range): 0 / 0
            for (const auto& [e, v] : wa)
                if (!(std::fabs(v - wb[e]) <= 4.0 * static_cast<double>(kk + 2) * 0x1p-24 * std::fabs(wb[e])))
                    RC_FAIL("token " + std::to_string(t) + ", expert " + std::to_string(static_cast<int>(e)) + ": weight " +
                            hexfloat(v) + " with the bias, " + hexfloat(wb[e]) + " without (same experts chosen)");
        }
    };
}

// Capacity c: expert e keeps its first floor(c T k / E) assignments in token
// order (then slot order) and drops the rest, read from the kernel's own
// indices and kept.
Testable capacity_in_token_order(const KernelInfo& k) {
    return [&k] {
        CaseSpec s = plain_spec(k);
        s.params.set("capacity", *rc::gen::element(0.25, 0.5, 1.0));
        const Case c = build_case(s);
        const auto out = run_kernel(k, c.params, c.views());
        const std::int64_t T = out[0].shape()[0], kk = out[0].shape()[1], E = c.inputs[1].shape()[1];
        const double cap = std::floor(param(c, "capacity") * static_cast<double>(T * kk) / static_cast<double>(E));
        std::map<double, double> seen;
        for (std::int64_t i = 0; i < T * kk; ++i) {
            const double e = out[0].value(i);
            if (std::isnan(e)) continue;
            const double want = seen[e]++ < cap ? 1 : 0;
            if (out[2].value(i) != want)
                RC_FAIL("token " + std::to_string(i / kk) + " slot " + std::to_string(i % kk) + " (expert " +
                        std::to_string(static_cast<int>(e)) + ", capacity " + std::to_string(static_cast<int>(cap)) +
                        "): kept " + hexfloat(out[2].value(i)) + ", want " + std::to_string(static_cast<int>(want)));
        }
    };
}

// Whether token t's selection is unambiguous under the scores' budget (the
// verdict's own, oracle/moe.hpp): there a permutation may not change it.
bool clear_choice(const Case& c, std::int64_t t, std::int64_t kk) {
    const std::vector<TensorView> in = c.views();
    const oracle::TokenBudget b = oracle::router_token_budget(oracle::router_setup(c.params, in), in, t);
    if (!b.finite || b.undefined) return false;
    return !oracle::ambiguous(b, oracle::router_order(b), kk);
}

// Permuting the experts (w's columns and the bias) permutes the chosen
// indices, slot for slot, on every token whose choice is clear.  Grouped,
// the permutation keeps the groups: it permutes the groups as blocks and
// the experts within each.
Testable expert_permutation_equivariance(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(plain_spec(k));
        const std::int64_t C = c.inputs[1].shape()[0], E = c.inputs[1].shape()[1];
        const auto groups = static_cast<std::int64_t>(c.params.get("groups", 1)), n = E / groups;
        std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
        std::vector<std::int64_t> gperm(static_cast<std::size_t>(groups)), perm;  // new expert q is old expert perm[q]
        std::iota(gperm.begin(), gperm.end(), 0);
        std::shuffle(gperm.begin(), gperm.end(), rng);
        for (std::int64_t g = 0; g < groups; ++g) {
            std::vector<std::int64_t> within(static_cast<std::size_t>(n));
            std::iota(within.begin(), within.end(), gperm[static_cast<std::size_t>(g)] * n);
            std::shuffle(within.begin(), within.end(), rng);
            perm.insert(perm.end(), within.begin(), within.end());
        }
        std::vector<Tensor> moved = c.inputs;
        for (std::int64_t q = 0; q < E; ++q) {
            const std::int64_t o = perm[static_cast<std::size_t>(q)];
            for (std::int64_t r = 0; r < C; ++r) moved[1].set_bits(r * E + q, c.inputs[1].bits(r * E + o));
            if (moved.size() > 2) moved[2].set_bits(q, c.inputs[2].bits(o));
        }
        std::vector<TensorView> views;
        for (const Tensor& t : moved) views.push_back(t.view());
        const auto a = run_kernel(k, c.params, c.views()), b = run_kernel(k, c.params, views);
        const std::int64_t kk = a[0].shape()[1];
        for (std::int64_t t = 0; t < a[0].shape()[0]; ++t) {
            if (std::isnan(a[0].value(t * kk)) || !clear_choice(c, t, kk)) continue;
            for (std::int64_t j = 0; j < kk; ++j) {
                const double got = b[0].value(t * kk + j);
                const double want = a[0].value(t * kk + j);
                if (!(got >= 0 && got < static_cast<double>(E)) || static_cast<double>(perm[static_cast<std::size_t>(got)]) != want)
                    RC_FAIL("token " + std::to_string(t) + " slot " + std::to_string(j) + ": expert " +
                            std::to_string(static_cast<int>(want)) + " before the permutation, " +
                            std::to_string(static_cast<int>(got)) + " after (which is old expert " +
                            (got >= 0 && got < static_cast<double>(E) ? std::to_string(perm[static_cast<std::size_t>(got)]) : "none") + ")");
            }
        }
    };
}

// Group-limited selection: every token's chosen experts lie in at most
// topk_groups groups (read from the kernel's own indices); and keeping every
// group (topk_groups = groups) chooses and weighs exactly as no groups.
Testable group_limited_selection(const KernelInfo& k) {
    return [&k] {
        CaseSpec s = plain_spec(k);
        for (int mode : {1, 2})
            if (s.params.get("groups", 1) == 1) set_grouping(s.params, s.dims[2], static_cast<std::int64_t>(s.params.get("k", 2)), mode);
        const auto groups = static_cast<std::int64_t>(s.params.get("groups", 1));
        RC_PRE(groups > 1);
        const Case c = build_case(s);
        const auto out = run_kernel(k, c.params, c.views());
        const std::int64_t T = out[0].shape()[0], kk = out[0].shape()[1], n = c.inputs[1].shape()[1] / groups;
        const auto kept = static_cast<std::size_t>(c.params.get("topk_groups", 0));
        for (std::int64_t t = 0; t < T; ++t) {
            std::set<std::int64_t> held;
            for (std::int64_t j = 0; j < kk; ++j)
                if (!std::isnan(out[0].value(t * kk + j))) held.insert(static_cast<std::int64_t>(out[0].value(t * kk + j)) / n);
            if (held.size() > kept)
                RC_FAIL("token " + std::to_string(t) + ": its experts lie in " + std::to_string(held.size()) + " groups, topk_groups " +
                        std::to_string(kept));
        }
        Params all = c.params, none = c.params;
        all.set("topk_groups", static_cast<double>(groups));
        none.set("groups", 1), none.set("topk_groups", 0);
        const auto a = run_kernel(k, all, c.views()), b = run_kernel(k, none, c.views());
        for (std::size_t o = 0; o < 3; ++o)
            for (std::int64_t i = 0; i < a[o].numel(); ++i)
                if (a[o].bits(i) != b[o].bits(i))
                    RC_FAIL("every group kept: output " + std::to_string(o) + " element " + std::to_string(i) + " is " +
                            hexfloat(a[o].value(i)) + ", without groups " + hexfloat(b[o].value(i)));
    };
}

}  // namespace

void add_moe_properties(std::vector<PropertyDef>& v) {
    auto router = [](const OpSpec& op) { return op.name == "moe_router"; };
    v.push_back({"weights_sum_to_one", "renormalized weights of every token sum to 1 within (k + 2) 2^-23", router,
                 of_kernel(weights_sum_to_one)});
    v.push_back({"bias_never_changes_weights", "the selection bias changes which experts are chosen, never their weights",
                 router, of_kernel(bias_never_changes_weights)});
    v.push_back({"capacity_in_token_order", "each expert keeps its first floor(c T k / E) assignments in token order",
                 router, of_kernel(capacity_in_token_order)});
    v.push_back({"expert_permutation_equivariance", "permuting the experts permutes the chosen indices (tokens whose "
                                                    "selection is unambiguous)",
                 router, of_kernel(expert_permutation_equivariance)});
    v.push_back({"group_limited_selection", "grouped: the chosen experts lie in at most topk_groups groups, and keeping "
                                            "every group chooses and weighs as no groups",
                 router, of_kernel(group_limited_selection)});
}

}  // namespace conform::props
