// Mutants of the MLA kernels (docs/mla.md, "Mutants"): the two bug classes
// the issue names and a cache hand-off, each on the FP32 kernel of the form where it
// arises and held to that form's reference and bound, as the kernel it breaks.
#include "impls/cpu/mla.hpp"

namespace conform {
namespace {

void add_mla_mutant(Registry& r, const char* bug, const char* bug_class, cpu::MlaKernelForm form, cpu::MlaFlaws flaws,
                    const char* what) {
    KernelInfo k = mutant_info("mla", bug, Format::fp32, Format::fp32, bug_class, what,
                               [form, flaws](const KernelCall& c) { cpu::mla_call(c, form, flaws); });
    const bool absorbed = form == cpu::MlaKernelForm::absorbed;
    k.declared["form"] = absorbed ? 1 : 0;
    k.conventions["mla_form"] = absorbed ? "absorbed" : "explicit";
    r.add(std::move(k));
}

}  // namespace

void register_mutants_mla(Registry& r) {
    add_mla_mutant(r, "rope_key_per_head", "5 layout transposition", cpu::MlaKernelForm::explicit_kv, {.rope_key_per_head = true},
                   "the new tokens' decoupled rope key per head, from head i's own rope query rows of W_q (the MHA "
                   "habit), instead of the one W_kr h_t shared by all heads");
    add_mla_mutant(r, "uk_untransposed", "5 layout transposition", cpu::MlaKernelForm::absorbed, {.uk_untransposed = true},
                   "absorbed form without the W_uk transpose: W_uk[i] [d_nope, d_c] read as [d_c, d_nope], so a = "
                   "W_uk q^C of the reinterpreted buffer instead of W_uk^T q^C");
    add_mla_mutant(r, "cache_rerotated", "3 state hand-off", cpu::MlaKernelForm::absorbed, {.cache_rerotated = true},
                   "the decode path rotates the cached rope keys at their positions offset - Lc + j on read, "
                   "though the cache already holds them rotated (cache_rotated = 1): rotated twice");
}

}  // namespace conform
