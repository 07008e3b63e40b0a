// CPU kernels of DeepSeek Sparse Attention (op `dsa_attention`,
// docs/dsa_attention.md "Kernels"): the lightning indexer's kernel, the
// token top-k selector and the attention kernel with a 0/-inf mask of the
// selection, called in turn; and the switches their mutants turn on.
#pragma once
#include "impls/registry.hpp"

namespace conform {

void register_cpu_dsa(Registry& r);      // impls/cpu/dsa.cpp
void register_mutants_dsa(Registry& r);  // impls/mutants/dsa.cpp

namespace cpu {

// The ways DSA kernels go wrong; all off is the kernel.
struct DsaFlaws {
    bool relu_dropped = false;        // the indexer without its ReLU: negative dot products subtract
    bool masked_topk = false;         // -inf-masked scores and top-k over every token: the first queries pick future ones
    bool per_head_selection = false;  // attention head h selects by indexer head h mod Hi's own term, not the shared sum
    bool weights_ignored = false;     // the indexer's head weights w read as 1
    bool ties_to_higher = false;      // equal scores: the higher index first (a legitimate rule: must pass)
};

// simd: cpu.simd.lightning_indexer's dots, partial_sort, cpu.simd.attention;
// scalar: the scalar matmul loop, partial_sort, cpu.scalar.attention;
// naive (the baseline): plain dot loops, a full stable sort, cpu.naive.attention.
enum class DsaVariant { simd, scalar, naive };
void dsa_call(const KernelCall& c, DsaVariant v, const DsaFlaws& flaws = {});

}  // namespace cpu
}  // namespace conform
