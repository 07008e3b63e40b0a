// Mutants of the MLA kernels (docs/mla.md, "Mutants"): each one of the bug
// classes the issue names, on the FP32 kernel of the form where it arises.
#include "impls/cpu/mla.hpp"

namespace conform {

void register_mutants_mla(Registry& r) {
    r.add(mutant_info("mla", "rope_key_per_head", Format::fp32, Format::fp32, "5 layout transposition",
                      "the new tokens' decoupled rope key per head, from head i's own rope query rows of W_q (the MHA "
                      "habit), instead of the one W_kr h_t shared by all heads",
                      [](const KernelCall& c) {
                          cpu::mla_call(c, cpu::MlaKernelForm::explicit_kv, {.rope_key_per_head = true});
                      }));
    r.add(mutant_info("mla", "uk_untransposed", Format::fp32, Format::fp32, "5 layout transposition",
                      "absorbed form without the W_uk transpose: W_uk[i] [d_nope, d_c] read as [d_c, d_nope], so "
                      "a = W_uk q^C of the reinterpreted buffer instead of W_uk^T q^C",
                      [](const KernelCall& c) {
                          cpu::mla_call(c, cpu::MlaKernelForm::absorbed, {.uk_untransposed = true});
                      }));
}

}  // namespace conform
