// MoE mutants (docs/moe.md "Mutants"): the router with one flaw each
// (cpu::RouterFlaws), the layers with one each (cpu::LayerFlaws).
#include <string>

#include "impls/cpu/moe.hpp"

namespace conform {
namespace {

void add(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::RouterFlaws flaws) {
    KernelInfo k = mutant_info("moe_router", bug, Format::fp32, Format::fp32, bug_class, what,
                               [flaws](const KernelCall& c) { cpu::moe_router_call(c, false, flaws); });
    r.add(std::move(k));
}

void add_layer(Registry& r, const char* op, const char* bug, const char* bug_class, const char* what, cpu::LayerFlaws flaws) {
    const bool latent = std::string(op) == "latent_moe";
    r.add(mutant_info(op, bug, Format::fp32, Format::fp32, bug_class, what, [flaws, latent](const KernelCall& c) {
        cpu::moe_layer_call(c, latent, false, cpu::ExpertForm::grouped, flaws);
    }));
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
    add(r, "group_score_sum_all", "17 discrete choices",
        "group-limited selection ranking the groups by the sum of all their scores, not of their two largest",
        {.group_sum_all = true});
    add(r, "group_score_max", "17 discrete choices",
        "group-limited selection ranking the groups by their largest score only, not the sum of their two largest",
        {.group_max = true});
    add(r, "group_top_ignored", "12 silently ignored parameter",
        "group_top 1 (DeepSeek-V2: a group's largest score) ignored: the groups ranked by their two largest summed",
        {.group_top_ignored = true});
    add(r, "scaling_before_renormalize", "9 scale/offset convention",
        "the routed scaling applied to p before renormalizing, where it cancels (the weights not scaled)",
        {.scaling_before_renormalize = true});
    add_layer(r, "latent_moe", "rmsnorm_skipped", "11 wrong function variant", "Normalized LatentMoE without its RMSNorm: u latent_up",
              {.rmsnorm_skipped = true});
    add_layer(r, "moe", "shared_weighted", "9 scale/offset convention", "the shared experts scaled by the token's first routing weight",
              {.shared_weighted = true});
    add_layer(r, "moe", "gate_up_swapped", "5 layout transposition", "silu on the up half of gate_up, times the gate half",
              {.gate_up_swapped = true});
}

}  // namespace conform
