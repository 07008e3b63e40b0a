// Properties of the gated hidden (docs/gated.md).
#include <cmath>

#include "numerics/ulp.hpp"
#include "properties/common.hpp"
#include "properties/fixed.hpp"

namespace conform::props {
namespace {

// |SiTU-GLU(g, u)| <= beta1 beta2 for every finite input (strictly below in
// exact arithmetic; the kernel may round up to the cap itself).
Testable situ_bound(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        GenOptions opt;
        opt.max_n = std::min(cfg.max_n, 1024);
        const std::string f = situ_bound_check(k, build_case(in_domain(*gen_spec(*find_op(k.op), k.in, opt))));
        if (!f.empty()) RC_FAIL(f);
    };
}

// The kernel's SiTU-GLU on the case within max_ulps of the correctly rounded SwiGLU.
void expect_close_to_swiglu(const KernelInfo& k, const Case& c, std::uint64_t max_ulps, const std::string& where) {
    const auto y = run_kernel(k, c.params, c.views());
    const auto ref = oracle::evaluate(*find_op("swiglu"), Params(), c.views(), k.out);
    for (std::int64_t i = 0; i < y[0].numel(); ++i) {
        const UlpCompare cmp = compare_bits(k.out, ref.rounded.bits(i), y[0].bits(i));
        if (!cmp.class_match || cmp.ulps > max_ulps)
            RC_FAIL("situ_glu " + where + " at (" + hexfloat(c.inputs[0].value(i)) + ", " +
                    hexfloat(c.inputs[1].value(i)) + ") = " + hexfloat(y[0].value(i)) + ", swiglu = " +
                    hexfloat(ref.rounded.value(i)));
    }
}

// As beta1, beta2 -> infinity SiTU-GLU tends to SwiGLU pointwise: with both
// caps at 2^40 and |inputs| <= 2^10 the kernel is within 1 ulp of the
// correctly rounded SwiGLU.
Testable situ_to_swiglu(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        GenOptions opt;
        opt.max_n = std::min(cfg.max_n, 256);
        CaseSpec spec = in_domain(*gen_spec(*find_op(k.op), k.in, opt));
        spec.scale_exp = std::min(spec.scale_exp, 6);
        for (auto& f : spec.families) f = *rc::gen::element(Family::normal, Family::uniform, Family::tiny);
        const double big = std::ldexp(1.0, 40);
        spec.params = Params({{"beta1", big}, {"beta2", big}});
        const Case c = build_case(spec);
        expect_close_to_swiglu(k, c, 1, "with beta = 2^40");
    };
}

// Near zero, beta tanh(z / beta) = z (1 + O(z^2 / beta^2)): with |gate|, |up|
// <= beta 2^-8 (2^-20 for fp32) SiTU-GLU and SwiGLU differ by less than
// 2^-16 relative (2^-40), below half an output ulp, so their correctly rounded
// values are equal or adjacent and the kernel is within 2 ulp of SwiGLU.
Testable situ_near_zero(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        GenOptions opt;
        opt.max_n = std::min(cfg.max_n, 256);
        CaseSpec spec = in_domain(*gen_spec(*find_op(k.op), k.in, opt));
        const Case raw = build_case(spec);
        const double beta = std::min(spec.params.get("beta1", 4), spec.params.get("beta2", 25));
        const double lim = beta * std::ldexp(1.0, k.in == Format::fp32 ? -20 : -8);
        Case c = raw;
        for (auto& t : c.inputs)
            for (std::int64_t i = 0; i < t.numel(); ++i) {
                const double v = t.value(i);
                t.set_value(i, std::isfinite(v) ? std::fmod(v, lim) : 0.0);  // fold into (-lim, lim)
            }
        expect_close_to_swiglu(k, c, 2, "near zero");
    };
}

}  // namespace

std::string situ_bound_check(const KernelInfo& k, const Case& c) {
    const double cap = c.params.get("beta1", 4) * c.params.get("beta2", 25);
    const double cap_fmt = cap_in_format(k.out, cap);  // within_budget judges the outputs where it is +inf
    const auto y = run_kernel(k, c.params, c.views());
    for (std::int64_t i = 0; i < y[0].numel(); ++i) {
        const double g = c.inputs[0].value(i), u = c.inputs[1].value(i);
        if (!std::isfinite(g) || !std::isfinite(u)) continue;  // special values: the special_values table
        if (!(std::fabs(y[0].value(i)) <= std::fmax(cap, cap_fmt)))
            return "|situ_glu(" + hexfloat(g) + ", " + hexfloat(u) + ")| = " + hexfloat(y[0].value(i)) +
                   " exceeds beta1*beta2 = " + hexfloat(cap);
    }
    return "";
}

void add_gated_properties(std::vector<PropertyDef>& v) {
    v.push_back({"situ_bound", "|SiTU-GLU(gate, up)| <= beta1 * beta2 for every input",
                 [](const OpSpec& op) { return op.name == "situ_glu"; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return situ_bound(k, cfg); }, 2});
    v.push_back({"situ_to_swiglu", "SiTU-GLU with beta1 = beta2 = 2^40 equals SwiGLU within 1 ulp",
                 [](const OpSpec& op) { return op.name == "situ_glu"; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return situ_to_swiglu(k, cfg); }, 2});
    v.push_back({"situ_near_zero", "near zero SiTU-GLU equals SwiGLU within 2 ulp (beta tanh(z/beta) = z + O(z^3))",
                 [](const OpSpec& op) { return op.name == "situ_glu"; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return situ_near_zero(k, cfg); }, 2});
}

}  // namespace conform::props
