// Metamorphic properties of softmax (docs/softmax.md).
#include <cmath>

#include "numerics/ulp.hpp"
#include "properties/common.hpp"

namespace conform::props {
namespace {

// x quantized to multiples of q = ulp(2|c|) and clamped to [-|c|, |c|], so
// that x + c is exact in the format (|x + c| <= 2|c|, a multiple of q).
Tensor quantize_for_shift(const Tensor& x, double c) {
    const double q = ulp_at(x.format(), 2 * std::fabs(c));
    Tensor out(x.format(), x.shape());
    for (std::int64_t i = 0; i < x.numel(); ++i) {
        const double v = x.value(i);
        out.set_value(i, std::isfinite(v) ? q * std::nearbyint(std::fmin(std::fmax(v, -std::fabs(c)), std::fabs(c)) / q)
                                          : v);
    }
    return out;
}

// softmax(x + c) = softmax(x) exactly, so the oracle's rounded outputs for x
// and x + c must be the same bits (the oracle checking itself) and the kernel
// must meet its bound on x + c, including c = +-1e4 where a kernel that does
// not subtract the row max overflows (or underflows every term).
Testable shift_invariance(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        GenOptions opt;
        opt.max_n = std::min(cfg.max_n, 1024);
        const Case base = build_case(*gen_spec(*find_op(k.op), k.in, opt));
        const double c = *rc::gen::element(1e4, -1e4, 1000.0, -1000.0, 100.0, 64.0, -0.5);
        const Tensor x = quantize_for_shift(base.inputs[0], c);
        Tensor shifted(x.format(), x.shape());
        for (std::int64_t i = 0; i < x.numel(); ++i) shifted.set_value(i, x.value(i) + c);
        const CaseResult plain = check_case(k, base.params, {x.view()});
        const CaseResult moved = check_case(k, base.params, {shifted.view()});
        std::string where;
        if (!identical(plain.ref.rounded, moved.ref.rounded, &where))
            RC_FAIL("oracle: softmax(x + " + hexfloat(c) + ") differs from softmax(x) at " + where);
        if (!moved.pass) RC_FAIL("softmax(x + " + hexfloat(c) + "): " + moved.message);
        if (!plain.pass) RC_FAIL("softmax(x): " + plain.message);
    };
}

// Masked rows (-inf logits, whole rows of -inf): within budget, and a fully
// masked row is exactly +0 everywhere (never NaN, never a finite sentinel's
// uniform distribution).
Testable masked_rows(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        GenOptions opt;
        opt.max_n = std::min(cfg.max_n, 1024);
        CaseSpec spec = *gen_spec(*find_op(k.op), k.in, opt);
        spec.families[0] = Family::masked;
        const Case c = build_case(spec);
        const CaseResult r = check_case(k, c.params, c.views());
        if (!r.pass) RC_FAIL(r.message);
        const TensorView x = c.inputs[0].view(), y = r.outputs[0].view();
        const std::int64_t n = x.cols();
        for (std::int64_t row = 0; row < x.rows(); ++row) {
            bool all_masked = true;
            for (std::int64_t j = 0; j < n; ++j) all_masked &= x.value(row * n + j) == -INFINITY;
            for (std::int64_t j = 0; all_masked && j < n; ++j)
                if (y.bits(row * n + j) != 0)
                    RC_FAIL("fully masked row " + std::to_string(row) + ": element " + std::to_string(j) + " is " +
                            hexfloat(y.value(row * n + j)) + ", want +0");
        }
    };
}

}  // namespace

void add_softmax_properties(std::vector<PropertyDef>& v) {
    v.push_back({"shift_invariance",
                 "softmax(x + c) within budget and equal in the oracle to softmax(x), c up to +-1e4 (x + c exact)",
                 [](const OpSpec& op) { return op.name == "softmax"; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return shift_invariance(k, cfg); }, 2});
    v.push_back({"masked_rows",
                 "-inf logits get weight 0 and fully masked rows are all +0, within budget elsewhere",
                 [](const OpSpec& op) { return op.name == "softmax"; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return masked_rows(k, cfg); }, 2});
}

}  // namespace conform::props
