// Sparse-selection mutants (docs/sparse.md "Mutants"): the selector with one
// flaw each (cpu::SelectFlaws).
#include "impls/cpu/sparse.hpp"

namespace conform {
namespace {

void add(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::SelectFlaws flaws) {
    r.add(mutant_info("topk_select", bug, Format::fp32, Format::fp32, bug_class, what,
                      [flaws](const KernelCall& c) { cpu::topk_select_call(c, false, flaws); }));
}

}  // namespace

void register_mutants_sparse(Registry& r) {
    add(r, "future_block", "7 causal mask alignment",
        "a block counts as observed once it has started: the query's own unfinished block (its later keys) is selectable",
        {.future_block = true});
    add(r, "local_missing", "17 discrete choices", "the query's own block is never forced", {.local_missing = true});
    add(r, "masked_topk", "7 causal mask alignment",
        "the seeds' samples: ineligible scores set to -inf and the top k taken over every candidate, so a query with "
        "fewer eligible candidates than k selects future ones",
        {.masked_topk = true});
}

}  // namespace conform
