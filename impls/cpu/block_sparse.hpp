// CPU kernels of block_sparse_attention (docs/block_sparse_attention.md,
// "Kernels") and the switches their mutants turn on.
#pragma once
#include "impls/cpu/sparse.hpp"
#include "impls/registry.hpp"

namespace conform {

void register_cpu_block_sparse(Registry& r);      // impls/cpu/block_sparse.cpp
void register_mutants_block_sparse(Registry& r);  // impls/mutants/block_sparse.cpp

namespace cpu {

// The ways block-sparse attention goes wrong; all off is the kernel.
struct BlockSparseFlaws {
    bool msa_mean_pool = false;     // MSA's block score the mean of its token scores, not the max
    bool qsa_max_pool = false;      // QSA's block key the elementwise max of its index keys, not the mean
    bool qsa_rope_at_index = false; // QSA's block key rotated at position b, not p_b = b r
    SelectFlaws select;             // the selector's (local_missing, masked_topk, ...)
};

// A call's dimensions and parameters, validated as the oracle validates
// them (oracle::block_sparse_setup: std::invalid_argument naming the input
// or parameter) and the outputs' shapes checked; shared with the CUDA
// kernels (impls/cuda/block_sparse.cuh).
struct BlockSparseDims {
    std::int64_t mode, hq, groups, len, d, dv, gi, di, r, k, rope_dim, n, sel_groups, slots;
    double eps, base, scale;
};
BlockSparseDims block_sparse_dims(const KernelCall& c);

// The op on one call: block scores in FP32, the selection by topk_select's
// kernel, the attention of each selection group by the attention kernel
// (`naive`: cpu.naive.attention, else cpu.scalar.attention) over the
// selected blocks' tokens up to the query, gathered per query row, in the
// storage format f.
void block_sparse_call(const KernelCall& c, Format f, bool naive, const BlockSparseFlaws& flaws = {});

}  // namespace cpu
}  // namespace conform
