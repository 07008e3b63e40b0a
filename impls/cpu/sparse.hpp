// CPU kernels of sparse attention's selection (ops `topk_select`,
// `lightning_indexer`; docs/sparse.md "Kernels") and the switches their
// mutants turn on.
#pragma once
#include "impls/registry.hpp"

namespace conform {

void register_cpu_sparse(Registry& r);      // impls/cpu/sparse.cpp (and sparse_indexer.cpp)
void register_mutants_sparse(Registry& r);  // impls/mutants/sparse.cpp

namespace cpu {

// The ways selectors go wrong; all off is the kernel.
struct SelectFlaws {
    bool future_block = false;    // causal 1 read as "started": the query's own unfinished block is selectable
    bool local_missing = false;   // the forced block never forced
    bool masked_topk = false;     // the seeds' form: ineligible scores set to -inf, top-k over all N (no -1 slots)
    bool ties_to_higher = false;  // equal scores: the higher index first (a legitimate rule: must pass)
};

// The op on one call: per query row, the eligible candidates ranked by
// partial_sort (first k) or a full stable sort (`full_sort`, the baseline).
void topk_select_call(const KernelCall& c, bool full_sort, const SelectFlaws& flaws = {});

// The ways lightning indexers go wrong; all off is the kernel.
struct IndexerFlaws {
    bool relu_dropped = false;     // sum_h w (q . k): negative dot products subtract
    bool weight_in_relu = false;   // sum_h ReLU(w (q . k)): a negative weight's heads vanish
    bool bf16_head_sum = false;    // the head sum rounded to BF16 after every head
};

// How the dot products are formed: by the matmul kernel (`simd`: its best
// path, else its scalar loop) on q [Lq H, c] and k^T, or by a plain loop
// (the naive baseline).  The head sum in FP32, heads in order.
enum class IndexerDots { simd, scalar, naive };
void lightning_indexer_call(const KernelCall& c, IndexerDots dots, const IndexerFlaws& flaws = {});
void register_cpu_sparse_indexer(Registry& r);  // impls/cpu/sparse_indexer.cpp

}  // namespace cpu
}  // namespace conform
