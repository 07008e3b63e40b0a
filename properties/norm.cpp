// Metamorphic properties of the row norms (docs/norm.md).
#include <cmath>

#include "properties/common.hpp"

namespace conform::props {
namespace {

// rms_norm and l2_norm with eps = 0 are invariant under x -> 2^k x, and a
// kernel that scales exactly (power-of-two rescue, FP32 sums) gives the same
// bits.  Rows near FP16's overflow are generated on purpose: an FP16 sum of
// squares overflows there.
Testable scale_invariance(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        const OpSpec& op = *find_op(k.op);
        GenOptions opt;
        opt.max_n = cfg.max_n;
        CaseSpec spec = in_domain(*gen_spec(op, k.in, opt));
        spec.params.set("eps", 0.0);
        if (*rc::gen::inRange(0, 3) == 0) spec.families[0] = Family::near_overflow;
        const Case c = build_case(spec);
        const int shift = *rc::gen::element(-12, -6, -3, -1, 1, 2, 5, 9);
        Tensor scaled;
        RC_PRE(scale_exact(c.inputs[0], shift, &scaled));
        std::vector<TensorView> a = c.views(), b = c.views();
        b[0] = scaled.view();
        const auto ya = run_kernel(k, c.params, a), yb = run_kernel(k, c.params, b);
        std::string where;
        if (!identical(ya[0], yb[0], &where))
            RC_FAIL("norm(2^" + std::to_string(shift) + " x) differs from norm(x) at " + where);
    };
}

// zero_centered = 1 with weight w must equal zero_centered = 0 with weight
// v = 1 + w, bit for bit, whenever v is exact (v in [1/2, 2] makes w = v - 1
// exact by Sterbenz' lemma).
Testable zero_centered_equivalence(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        GenOptions opt;
        opt.max_n = std::min(cfg.max_n, 1024);
        CaseSpec spec = in_domain(*gen_spec(*find_op(k.op), k.in, opt));
        spec.params.set("zero_centered", 0.0);
        const Case c = build_case(spec);  // weights around 1
        Tensor v(k.in, {spec.n}), w(k.in, {spec.n});
        for (std::int64_t i = 0; i < spec.n; ++i) {
            v.set_value(i, std::fmin(std::fmax(c.inputs[1].value(i), 0.5), 2.0));
            w.set_value(i, v.value(i) - 1);
        }
        Params zc = c.params;
        zc.set("zero_centered", 1.0);
        std::vector<TensorView> with_v = c.views(), with_w = c.views();
        with_v[1] = v.view();
        with_w[1] = w.view();
        const auto plain = run_kernel(k, c.params, with_v), centred = run_kernel(k, zc, with_w);
        std::string where;
        if (!identical(plain[0], centred[0], &where))
            RC_FAIL("zero-centred weight w differs from plain weight 1 + w at " + where);
    };
}

}  // namespace

void add_norm_properties(std::vector<PropertyDef>& v) {
    v.push_back({"scale_invariance",
                 "eps = 0: norm(2^k x) is bit-identical to norm(x), including rows whose sum of squares overflows FP16",
                 [](const OpSpec& op) { return is_op(op, {"rms_norm", "l2_norm"}); },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return scale_invariance(k, cfg); }, 2});
    v.push_back({"zero_centered_equivalence",
                 "rms_norm with zero-centred weight w equals rms_norm with weight 1 + w, bit for bit",
                 [](const OpSpec& op) { return op.name == "rms_norm"; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return zero_centered_equivalence(k, cfg); },
                 2});
}

}  // namespace conform::props
