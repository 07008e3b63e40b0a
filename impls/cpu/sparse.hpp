// CPU kernels of sparse-attention selection (op `topk_select`, docs/sparse.md
// "Kernels") and the switches their mutants turn on.
#pragma once
#include "impls/registry.hpp"

namespace conform {

void register_cpu_sparse(Registry& r);      // impls/cpu/sparse.cpp
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

}  // namespace cpu
}  // namespace conform
