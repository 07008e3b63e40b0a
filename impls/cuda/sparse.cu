// CUDA kernels of sparse attention's selection (docs/sparse.md, "Kernels"):
// cuda.lightning_indexer.<fmt> and cuda.topk_select.<fmt> for fp32, fp16
// and bf16 storage, scores and ids in FP32.  The kernels are sparse.cuh's:
// the indexer a block per query row (the CPU scalar kernel's arithmetic,
// its bits), the selection a warp per query row.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/sparse.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_sparse(Registry& r) {
    add_per_format(r, "lightning_indexer", {Format::fp32, Format::fp16, Format::bf16}, Format::fp32, Format::fp32,
                   "a block per query row, q[t] in shared memory, a thread per key: each dot an fmaf chain from +0, then "
                   "sum_h w ReLU(dot) in FP32, heads in order (cpu.scalar's bits); scores stored in FP32",
                   false, [](const KernelCall& c, Format f, const char* kernel, Launch l) { run_indexer(c, f, kernel, l); });
    add_per_format(r, "topk_select", {Format::fp32, Format::fp16, Format::bf16}, Format::fp32, Format::fp32,
                   "a warp per query row: a vote for NaN, a warp count of the eligible, then each slot a warp argmax over "
                   "the candidates after the previous slot's (scores compared exactly as FP32 values, ties to the lower "
                   "index); forced block first; ids stored in FP32",
                   false, [](const KernelCall& c, Format f, const char* kernel, Launch l) { run_topk_select(c, f, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
