// block_attn_res mutants (docs/residual.md "Mutants"): the scalar FP32 kernel
// (cpu::block_attn_res_fp32) with one flaw each.
#include "impls/cpu/attn_res.hpp"

namespace conform {
namespace {

void add_attn_res_mutant(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::AttnResFlaws flaws) {
    r.add(mutant_info("block_attn_res", bug, Format::fp32, Format::fp32, bug_class, what,
                      [flaws](const KernelCall& c) { cpu::block_attn_res_fp32(c, flaws); }));
}

}  // namespace

void register_mutants_attn_res(Registry& r) {
    add_attn_res_mutant(r, "raw_keys", "12 silently ignored parameter",
                        "keys g v without the RMSNorm: a large-norm source dominates the weights", {.raw_keys = true});
    add_attn_res_mutant(r, "normalized_values", "5 layout transposition",
                        "h = sum_i alpha_i RMSNorm(v_i): the normalized keys read as the values", {.normalized_values = true});
    add_attn_res_mutant(r, "eps_outside", "9 scale/offset convention", "RMSNorm root sqrt(mean(v^2)) + eps, eps outside the root",
                        {.eps_outside = true});
    add_attn_res_mutant(r, "weight_ignored", "12 silently ignored parameter", "the keys' norm_weight read as 1",
                        {.weight_ignored = true});
}

}  // namespace conform
