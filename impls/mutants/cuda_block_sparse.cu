// GPU mutants of block-sparse attention (docs/block_sparse_attention.md,
// "GPU mutants"): the kernels of impls/cuda/block_sparse.cuh with one bug each.
#include "impls/cuda/block_sparse.cuh"
#include "impls/cuda/cuda.hpp"

namespace conform::CONFORM_CUDA_NS {

namespace {

struct BsaFutureTokens : BsaNoBug {
    static constexpr bool kFutureTokens = true;
};
struct BsaRopeAtIndex : BsaNoBug {
    static constexpr bool kRopeAtIndex = true;
};
struct BsaFirstGroupMask : BsaNoBug {
    static constexpr bool kFirstGroupMask = true;
};

template <class Bug>
void add_block_sparse_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    const Format f = Format::fp32;  // one storage type instantiated (build time)
    KernelInfo k = block_sparse_info(mutant_kernel_info("block_sparse_attention", bug, f, bug_class, what), f);
    k.fn = [kernel = k.name](const KernelCall& c) { run_block_sparse_as<float, Bug>(c, kernel.c_str(), Launch{}); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_block_sparse(Registry& r) {
    add_block_sparse_mutant<BsaFutureTokens>(r, "future_tokens", "2 mask geometry",
                                             "the chosen blocks' tokens after the query attended too (the samples' "
                                             "missing token-causal limit on the own block)");
    add_block_sparse_mutant<BsaRopeAtIndex>(r, "rope_at_block_index", "9 scale/offset convention",
                                            "QSA's pooled key rotated at its block index b, not at p_b = b r");
    add_block_sparse_mutant<BsaFirstGroupMask>(r, "first_group_mask", "5 layout transposition",
                                               "MSA: every KV group attends under group 0's selection");
}

}  // namespace conform::CONFORM_CUDA_NS
