// Mutants of the compressed-attention kernels (docs/compressed_attention.md,
// "Mutants"): the seed sample's shortcuts and the compressor's and the
// selection's classic slips, each on the FP32 scalar kernel.
#include "impls/cpu/compressed_attention.hpp"

namespace conform {
namespace {

void add_csa_mutant(Registry& r, const char* bug, const char* bug_class, cpu::CsaFlaws flaws, const char* what) {
    KernelInfo k = mutant_info("compressed_attention", bug, Format::fp32, Format::fp32, bug_class, what,
                               [flaws](const KernelCall& c) { cpu::compressed_attention_call(c, false, flaws); });
    k.out_formats = {Format::fp32, Format::fp32, Format::fp32};
    cpu::declare_csa_tiles(k);  // held to the kernel's bound
    r.add(std::move(k));
}

}  // namespace

void register_mutants_compressed_attention(Registry& r) {
    add_csa_mutant(r, "no_overlap", "2 mask geometry", {.no_overlap = true},
                   "CSA's grouping b pooled over the same tokens [m i, m (i + 1)) as grouping a (the seed sample's "
                   "view(B, n_blk, m, c) for both): no shift by m, no overlap between adjacent entries");
    add_csa_mutant(r, "mean_pool", "12 silently ignored parameter", {.mean_pool = true},
                   "HCA's entry the plain mean of its m rows of C: the softmax gate softmax(Z + B) dropped");
    add_csa_mutant(r, "separate_softmax", "14 reduction axis/granularity", {.separate_softmax = true},
                   "one softmax per grouping, the two pooled results added (the seed sample's sa, sb): each "
                   "grouping's weights sum to 1, twice the mass of the text's one softmax over the 2m rows");
    add_csa_mutant(r, "bias_dropped", "12 silently ignored parameter", {.bias_dropped = true},
                   "the learnable positional biases B^a, B^b never added to the gate logits Z");
    add_csa_mutant(r, "window_plus_one", "2 mask geometry", {.window_plus_one = true},
                   "the sliding branch keeps the raw rows [t - window, t]: window + 1 of them, one older than the "
                   "window allows");
    add_csa_mutant(r, "entry_vs_token", "17 discrete choices", {.entry_vs_token = true},
                   "the seed sample's block-causal mask tril(ones(L, n_blk)): entry i eligible at token t when "
                   "i <= t, an entry index compared with a token index, so unfinished entries are selectable");
}

}  // namespace conform
