// Hyper-Connections mutants (docs/hc_residual.md "Mutants"): the scalar FP32
// kernel (cpu::hc_residual_fp32) with one flaw each.
#include "impls/cpu/hc_residual.hpp"

namespace conform {
namespace {

void add(Registry& r, bool project, const char* bug, const char* bug_class, const char* what, cpu::HcFlaws flaws) {
    r.add(mutant_info(project ? "mhc_residual" : "hc_residual", bug, Format::fp32, Format::fp32, bug_class, what,
                      [project, flaws](const KernelCall& c) { cpu::hc_residual_fp32(c, project, flaws); }));
}

}  // namespace

void register_mutants_hc_residual(Registry& r) {
    for (const bool mhc : {false, true}) {
        add(r, mhc, "c_sigma", "9 scale/offset convention", "C = sigma(c) instead of 2 sigma(c): the layer output halved",
            {.c_sigma = true});
        add(r, mhc, "pre_post_swapped", "5 layout transposition",
            "the pre- and post-mixing logits swapped: A = sigma(c), C = 2 sigma(a)", {.swapped = true});
        add(r, mhc, "b_transposed", "5 layout transposition", "B^T X instead of B X (the mixing matrix read column-major)",
            {.transposed = true});
    }
    add(r, true, "unprojected", "12 silently ignored parameter",
        "B = the raw logits: the projection skipped (HC's free B under mHC's name)", {.unprojected = true});
    add(r, true, "rows_only", "14 reduction axis/granularity",
        "B row-normalized only (a softmax per row): row-stochastic, not doubly stochastic", {.rows_only = true});
}

}  // namespace conform
