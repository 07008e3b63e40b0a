// block_sparse_attention mutants (docs/block_sparse_attention.md "Mutants"):
// the scalar kernel with one flaw each (cpu::BlockSparseFlaws).
#include "impls/cpu/block_sparse.hpp"

namespace conform {
namespace {

void add_bsa_mutant(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::BlockSparseFlaws flaws) {
    KernelInfo k = mutant_info("block_sparse_attention", bug, Format::fp32, Format::fp32, bug_class, what,
                               [flaws](const KernelCall& c) { cpu::block_sparse_call(c, Format::fp32, false, flaws); });
    r.add(std::move(k));
}

}  // namespace

void register_mutants_block_sparse(Registry& r) {
    add_bsa_mutant(r, "msa_mean_pool", "14 reduction axis/granularity",
                   "MSA's block score the mean of the block's visible token scores, not their max",
                   {.msa_mean_pool = true, .select = {}});
    add_bsa_mutant(r, "qsa_max_pool", "14 reduction axis/granularity",
                   "QSA's block key pooled by the elementwise max of its index keys, not their mean",
                   {.qsa_max_pool = true, .select = {}});
    add_bsa_mutant(r, "rope_at_block_index", "9 scale/offset convention",
                   "QSA's pooled block key rotated at its block index b instead of p_b = b r",
                   {.qsa_rope_at_index = true, .select = {}});
    add_bsa_mutant(r, "local_missing", "17 discrete choices", "the query's own block is never forced",
                   {.select = {.local_missing = true}});
    add_bsa_mutant(r, "masked_topk", "17 discrete choices",
                   "the seeds' samples: ineligible block scores set to -inf and the top k taken over every block, so "
                   "a query with fewer eligible blocks than slots selects future ones",
                   {.select = {.masked_topk = true}});
}

}  // namespace conform
