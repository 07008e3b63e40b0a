// Gate logits and the properties of gated_attention (docs/gated_attention.md,
// "Properties"); the attention properties (properties/attention.cpp) run for
// it too.
#include <cmath>

#include "impls/registry.hpp"
#include "properties/common.hpp"
#include "properties/domain.hpp"
#include "properties/suite.hpp"
#include "properties/verdict.hpp"

namespace conform::props {

// g [Hq, Lq, Dv]: N(0, 4) logits (gates from ~0.02 to ~0.98), one element in
// eight a gate value that tests the edges: closed (-inf) and open (+inf)
// exactly, saturated in FP32 (+-30: 1 + e^-30 rounds to 1), a gate below
// FP32's normal range (-100: sigmoid ~ 3.7e-44), and 0 (sigmoid 1/2
// exactly); NaN among them when the case has special values.
Tensor gate_logits(const CaseSpec& spec, std::mt19937_64& rng) {
    const auto& d = spec.dims;  // Hq, Hkv, Lq, Lk, D, Dv, has_mask
    Tensor g(spec.format, {d[0], d[2], d[5]});
    std::normal_distribution<double> n(0, 4);
    const double edges[] = {-INFINITY, INFINITY, 30, -30, -100, 0, NAN};
    const std::size_t n_edges = spec.specials > 0 ? 7 : 6;
    for (std::int64_t e = 0; e < g.numel(); ++e)
        g.set_value(e, rng() % 8 == 0 ? edges[rng() % n_edges] : n(rng));
    return g;
}

namespace {

constexpr std::size_t kGateInput = 3;  // g: after q, k, v

Case gated_case(const KernelInfo& k) {
    return build_case(in_domain(*gen_attention_spec(k.in, GenOptions{}, "gated_attention")));
}

// The case's inputs without g: attention's q, k, v and the optional mask.
std::vector<TensorView> attention_views(const Case& c) {
    std::vector<TensorView> v = c.views();
    v.erase(v.begin() + kGateInput);
    return v;
}

// A gate of -inf switches its output off: exactly 0 (no specials in q, k,
// v, so every attention output is finite), whatever the attention row.
Testable gate_closed(const KernelInfo& k) {
    return [&k] {
        Case c = gated_case(k);
        Tensor& g = c.inputs[kGateInput];
        std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
        for (std::int64_t e = 0; e < g.numel(); ++e)
            if (rng() % 2) g.set_value(e, -INFINITY);
        const auto out = run_kernel(k, c.params, c.views());
        for (std::int64_t e = 0; e < g.numel(); ++e)
            if (g.value(e) == -INFINITY && out[0].value(e) != 0)
                RC_FAIL("o[" + std::to_string(e) + "] = " + hexfloat(out[0].value(e)) + " under a gate logit of -inf (want 0)");
    };
}

// The gated kernel with g fixed, seen as a kernel of op attention (inputs
// q, k, v and the optional mask), so that attention's oracle and bound judge it.
KernelInfo with_fixed_gate(const KernelInfo& k, std::shared_ptr<const Tensor> g) {
    KernelInfo a = k;
    a.op = "attention";
    a.name = k.name + "[g fixed]";
    a.fn = [&k, g](const KernelCall& call) {
        KernelCall gated{call.params, call.in, call.out};
        gated.in.insert(gated.in.begin() + kGateInput, g->view());
        k.fn(gated);
    };
    return a;
}

// A gate logit large enough that sigmoid is 1 in FP32 (30, 1e4, +inf) makes
// the output attention's: within attention's own budget of its oracle.
Testable gate_open(const KernelInfo& k) {
    return [&k] {
        const Case c = gated_case(k);
        const double big = *rc::gen::element(30.0, 1e4, double(INFINITY));
        auto g = std::make_shared<Tensor>(c.inputs[kGateInput].format(), c.inputs[kGateInput].shape());
        for (std::int64_t e = 0; e < g->numel(); ++e) g->set_value(e, big);
        const KernelInfo a = with_fixed_gate(k, g);
        const CaseResult r = check_case(a, c.params, attention_views(c));
        if (!r.pass) RC_FAIL("g = " + hexfloat(big) + " everywhere, judged as attention: " + r.message);
    };
}

double gate_sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

// Gating commutes with the per-head softmax average: the gated output is
// sigmoid(g) times attention's output, o' = sigmoid(g) o, within the two
// budgets -- |o'^ - sigmoid(g) o^| <= B_gated + sigmoid(g) B_attention (+ the
// double product's rounding), with o^ from cpu.scalar.attention in the same
// format (any attention kernel within its budget would do).
Testable gate_commutes(const KernelInfo& k) {
    return [&k] {
        const Case c = gated_case(k);
        const KernelInfo* a = builtin_registry().find(std::string("cpu.scalar.attention.") + conform::name(k.in));
        RC_PRE(a != nullptr);
        const CaseEval yg = evaluate_case(k, c.params, c.views()), ya = evaluate_case(*a, c.params, attention_views(c));
        const OutputEval &og = yg.outputs[0], &oa = ya.outputs[0];
        const Tensor& g = c.inputs[kGateInput];
        for (std::int64_t e = 0; e < g.numel(); ++e) {
            const double s = gate_sigmoid(g.value(e)), y = og.got.value(e), o = oa.got.value(e);
            const auto i = static_cast<std::size_t>(e);
            if (!std::isfinite(y) || !std::isfinite(o) || std::isnan(s) || std::isnan(og.rigorous[i])) continue;
            const double tol = og.rigorous[i] + s * oa.rigorous[i] + 0x1p-50 * std::fabs(s * o);
            if (std::fabs(y - s * o) > tol)
                RC_FAIL("element " + std::to_string(e) + ": gated " + hexfloat(y) + ", sigmoid(g) * attention " +
                        hexfloat(s * o) + " (g = " + hexfloat(g.value(e)) + "), apart by more than " + hexfloat(tol));
        }
    };
}

}  // namespace

void add_gated_attention_properties(std::vector<PropertyDef>& v) {
    const auto gated = [](const OpSpec& op) { return op.name == "gated_attention"; };
    v.push_back({"gate_closed", "a gate logit of -inf makes its output exactly 0", gated,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return gate_closed(k); }, 2});
    v.push_back({"gate_open", "gate logits of 30, 1e4 or +inf (sigmoid 1 in FP32) give attention's output, within its budget",
                 gated, [](const KernelInfo& k, const RunConfig&, Stats*) { return gate_open(k); }, 2});
    v.push_back({"gate_commutes", "the gated output is sigmoid(g) times attention's output, within both budgets", gated,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return gate_commutes(k); }, 4});
}

}  // namespace conform::props
