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
    add(r, "future_block", "2 mask geometry",
        "a block counts as observed once it has started: the query's own unfinished block (its later keys) is selectable",
        {.future_block = true});
    add(r, "local_missing", "17 discrete choices", "the query's own block is never forced", {.local_missing = true});
    add(r, "masked_topk", "17 discrete choices",
        "the seeds' samples: ineligible scores set to -inf and the top k taken over every candidate, so a query with "
        "fewer eligible candidates than k selects future ones",
        {.masked_topk = true});
    const auto indexer = [&r](const char* bug, const char* bug_class, const char* what, cpu::IndexerFlaws flaws) {
        r.add(mutant_info("lightning_indexer", bug, Format::fp32, Format::fp32, bug_class, what, [flaws](const KernelCall& c) {
            cpu::lightning_indexer_call(c, cpu::IndexerDots::scalar, flaws);
        }));
    };
    indexer("relu_dropped", "11 wrong function variant", "the indexer's ReLU dropped: negative dot products subtract",
            {.relu_dropped = true});
    indexer("weight_in_relu", "9 scale/offset convention", "ReLU(w q . k) instead of w ReLU(q . k): heads with a "
            "negative weight vanish", {.weight_in_relu = true});
    indexer("bf16_head_sum", "6 low-precision accumulation/storage", "the head sum rounded to BF16 after every head",
            {.bf16_head_sum = true});
}

}  // namespace conform
