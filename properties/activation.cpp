// Properties of the activations beyond the budget (docs/activation.md).
#include <cmath>

#include "numerics/ulp.hpp"
#include "properties/common.hpp"
#include "properties/fixed.hpp"

namespace conform::props {

// Changing a parameter must change the output wherever the oracle's
// correctly rounded outputs differ by more than 2 ulp: a kernel that ignores
// softcap's beta, SiTU-GLU's caps or the clamp limit fails here.
Testable parameter_sensitivity(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        const OpSpec& op = *find_op(k.op);
        GenOptions opt;
        opt.max_n = std::min(cfg.max_n, 256);
        CaseSpec spec = in_domain(*gen_spec(op, k.in, opt));
        for (auto& f : spec.families) f = Family::around_cap;
        const Case c = build_case(spec);
        const ParamSpec& ps = op.params[*rc::gen::inRange<std::size_t>(0, op.params.size())];
        const double other = c.params.get(ps.name, ps.default_value) * *rc::gen::element(0.25, 0.5, 2.0, 4.0);
        Params p2 = c.params;
        p2.set(ps.name, other);
        const auto y1 = run_kernel(k, c.params, c.views()), y2 = run_kernel(k, p2, c.views());
        const auto r1 = oracle::evaluate(op, c.params, c.views(), k.out), r2 = oracle::evaluate(op, p2, c.views(), k.out);
        int checked = 0;
        for (std::int64_t i = 0; i < y1[0].numel(); ++i) {
            const auto a = r1.rounded.bits(i), b = r2.rounded.bits(i);
            if (classify(k.out, a) != ValueClass::finite || classify(k.out, b) != ValueClass::finite) continue;
            if (ulp_distance(k.out, a, b) <= 2) continue;
            ++checked;
            if (y1[0].bits(i) == y2[0].bits(i))
                RC_FAIL("changing " + ps.name + " to " + std::to_string(other) + " left element " + std::to_string(i) +
                        " at " + hexfloat(y1[0].value(i)) + "; the oracle moves it from " +
                        hexfloat(decode(k.out, a)) + " to " + hexfloat(decode(k.out, b)));
        }
        RC_PRE(checked > 0);
    };
}

namespace {

// |softcap(x)| <= beta for every input, as the kernel rounds it.
Testable softcap_bound(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        GenOptions opt;
        opt.max_n = std::min(cfg.max_n, 1024);
        const std::string f = softcap_bound_check(k, build_case(in_domain(*gen_spec(*find_op(k.op), k.in, opt))));
        if (!f.empty()) RC_FAIL(f);
    };
}

}  // namespace

std::string softcap_bound_check(const KernelInfo& k, const Case& c) {
    const double beta = c.params.get("beta", 30);
    const double cap = cap_in_format(k.out, beta);  // next_up(RN(beta)) >= beta
    const auto y = run_kernel(k, c.params, c.views());
    for (std::int64_t i = 0; i < y[0].numel(); ++i)
        if (!(std::fabs(y[0].value(i)) <= cap) && !std::isnan(c.inputs[0].value(i)))
            return "|softcap(" + hexfloat(c.inputs[0].value(i)) + ")| = " + hexfloat(y[0].value(i)) +
                   " exceeds beta = " + hexfloat(beta);
    return "";
}

void add_activation_properties(std::vector<PropertyDef>& v) {
    v.push_back({"parameter_sensitivity",
                 "changing beta / beta1 / beta2 / limit changes every output the oracle says must change",
                 [](const OpSpec& op) { return !op.params.empty() && (op.kind == OpKind::unary || op.kind == OpKind::gated); },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return parameter_sensitivity(k, cfg); }, 2});
    v.push_back({"softcap_bound", "|softcap(x; beta)| <= beta for every input",
                 [](const OpSpec& op) { return op.name == "softcap"; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return softcap_bound(k, cfg); }, 2});
}

}  // namespace conform::props
