#include "properties/fixed.hpp"

namespace conform::props {

const std::vector<FixedProperty>& fixed_properties() {
    auto op_is = [](const char* name) { return [name](const OpSpec& op) { return op.name == name; }; };
    static const std::vector<FixedProperty> v = {
        {"softcap_bound", "|softcap(x; beta)| <= beta", op_is("softcap"), softcap_bound_check},
        {"situ_bound", "|SiTU-GLU(gate, up)| <= beta1 * beta2", op_is("situ_glu"), situ_bound_check},
        {"column_marginals", "every column of B sums to 1 within the last normalization's rounding",
         op_is("sinkhorn"), column_marginals_check},
        {"monotone", "within one scale group, a larger x never gets a smaller code", op_is("quantize"),
         quantize_monotone_check},
        {"saturation", "codes are integers in [-127, 127]; a group's scale is never negative", op_is("quantize"),
         quantize_range_check},
    };
    return v;
}

std::vector<const FixedProperty*> fixed_properties_for(const OpSpec& op) {
    std::vector<const FixedProperty*> out;
    for (const auto& p : fixed_properties())
        if (p.applies(op)) out.push_back(&p);
    return out;
}

}  // namespace conform::props
