// Router mutants (docs/moe.md "Mutants"): the kernel with one flaw each
// (cpu::RouterFlaws).
#include "impls/cpu/moe.hpp"

namespace conform {
namespace {

void add(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::RouterFlaws flaws) {
    KernelInfo k = mutant_info("moe_router", bug, Format::fp32, Format::fp32, bug_class, what,
                               [flaws](const KernelCall& c) { cpu::moe_router_call(c, false, flaws); });
    r.add(std::move(k));
}

}  // namespace

void register_mutants_moe(Registry& r) {
    add(r, "renormalize_all", "17 discrete choices", "weights renormalized over all experts instead of the k chosen",
        {.renormalize_all = true});
    add(r, "softmax_after_topk", "17 discrete choices",
        "top-k on the logits, softmax over the chosen ones only (where the op takes the softmax first)",
        {.softmax_after_topk = true});
    add(r, "bias_in_weights", "17 discrete choices", "the selection bias added to the weights as well (p_i + b_i)",
        {.bias_in_weights = true});
    add(r, "routed_twice", "17 discrete choices", "the last slot repeats the first expert: a token routed twice to one expert",
        {.routed_twice = true});
    add(r, "capacity_reversed", "17 discrete choices", "capacity filled from the last token backwards: the wrong tokens dropped",
        {.capacity_reversed = true});
}

}  // namespace conform
