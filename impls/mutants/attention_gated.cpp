// Gated-attention mutants (docs/gated_attention.md, "Mutants"): the scalar
// flash kernel of gated_attention with a wrong gate, so that the gate is the
// only thing a property can catch.
#include "impls/cpu/attention.hpp"

namespace conform {

void register_mutants_gated_attention(Registry& r) {
    struct Bug {
        const char *name, *bug_class, *what;
        GateForm gate;
    };
    const Bug bugs[] = {
        {"sigma_of_output", "5 layout transposition",
         "the sigmoid on the attention output and the gate logits as the factor: g * sigmoid(o)", GateForm::swapped},
        {"one_minus_sigma", "9 scale/offset convention", "o * (1 - sigmoid(g)): the gate's sense inverted",
         GateForm::one_minus},
        {"gate_ignored", "12 silently ignored parameter", "g read and dropped: plain attention", GateForm::ignored},
    };
    for (const Bug& b : bugs)
        add_variant_mutants(r, "gated_attention", b.name, b.bug_class, b.what,
                            [gate = b.gate](const KernelCall& c, Format f) { gated_attention_call(c, f, gate); });
}

}  // namespace conform
