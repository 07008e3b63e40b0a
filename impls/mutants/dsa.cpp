// Mutants of the DSA kernels (docs/dsa_attention.md, "Mutants"): the scalar
// FP32 kernel with one flaw each (cpu::DsaFlaws).
#include "impls/cpu/attention.hpp"
#include "impls/cpu/dsa.hpp"

namespace conform {
namespace {

void add_dsa_mutant(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::DsaFlaws flaws) {
    KernelInfo k = mutant_info("dsa_attention", bug, Format::fp32, Format::fp32, bug_class, what,
                               [flaws](const KernelCall& c) { cpu::dsa_call(c, cpu::DsaVariant::scalar, flaws); });
    k.out_formats = {Format::fp32, Format::fp32, Format::fp32};
    k.declared["key_block"] = cpu::kAttnKeyTile;
    r.add(std::move(k));
}

}  // namespace

void register_mutants_dsa(Registry& r) {
    add_dsa_mutant(r, "relu_dropped", "11 wrong function variant",
                   "the indexer's ReLU dropped: negative dot products subtract from the scores", {.relu_dropped = true});
    add_dsa_mutant(r, "masked_topk", "17 discrete choices",
                   "the samples' torch.topk over -inf-masked scores: a query with fewer earlier tokens than k selects "
                   "future ones", {.masked_topk = true});
    add_dsa_mutant(r, "per_head_selection", "17 discrete choices",
                   "every attention head selects its own tokens by one indexer head's term w ReLU(q . k) instead of "
                   "the selection shared by all heads (the indices output is the shared one)",
                   {.per_head_selection = true});
    add_dsa_mutant(r, "weights_ignored", "9 scale/offset convention",
                   "the indexer's head weights w read as 1: sum_h ReLU(q_h . k) ranks the tokens", {.weights_ignored = true});
}

}  // namespace conform
