// Mutants of the NSA kernel (docs/nsa_attention.md, "Mutants"): the gates,
// the compressed values and the selection's causal limit as the seed's
// sample and common slips get them wrong, each on the FP32 kernel and held
// to its reference and bound.
#include "impls/cpu/attention.hpp"
#include "impls/cpu/nsa.hpp"

namespace conform {
namespace {

void add_nsa_mutant(Registry& r, const char* bug, const char* bug_class, cpu::NsaFlaws flaws, const char* what) {
    KernelInfo k = mutant_info("nsa_attention", bug, Format::fp32, Format::fp32, bug_class, what,
                               [flaws](const KernelCall& c) { cpu::nsa_call(c, false, flaws); });
    k.out_formats = {Format::fp32, Format::fp32};
    k.declared["key_block"] = cpu::kAttnKeyTile;
    r.add(std::move(k));
}

}  // namespace

void register_mutants_nsa(Registry& r) {
    add_nsa_mutant(r, "gate_in_logits", "11 wrong function variant", {.gate_in_logits = true},
                   "each branch's gate sigmoid(g) multiplied into its softmax logits, the branch outputs summed "
                   "ungated");
    add_nsa_mutant(r, "cv_equals_ck", "5 layout transposition", {.cv_equals_ck = true},
                   "the seed sample's cv = ck: the compressed branch averages the compressed keys (zeros past D) "
                   "instead of the compressed values");
    add_nsa_mutant(r, "future_block", "17 discrete choices", {.future_block = true},
                   "a block counts as observed once started: without the forced block (force_local = 0) the "
                   "query's own unfinished block is selectable");
    add_nsa_mutant(r, "masked_topk", "17 discrete choices", {.masked_topk = true},
                   "the seed samples' selection: blocks not observed set to -inf and top-k over every block, so "
                   "that with fewer observed blocks than free slots unfinished and future blocks are selected");
    add_nsa_mutant(r, "local_missing", "17 discrete choices", {.local_missing = true},
                   "the query's own block is never forced: slot 0 holds the top complete block");
    add_nsa_mutant(r, "compressed_uncausal", "2 mask geometry", {.compressed_uncausal = true},
                   "the seed sample's compressed branch without a causal limit: every complete block, future ones "
                   "included, in o_c and the importance");
}

}  // namespace conform
