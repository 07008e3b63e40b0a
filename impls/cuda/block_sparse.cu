// CUDA block-sparse attention (docs/block_sparse_attention.md, "Kernels"):
// cuda.block_sparse_attention.<fmt> for fp32, fp16 and bf16 storage.  The
// kernels are block_sparse.cuh's: the CPU kernels' block scores (their
// bits), cuda.topk_select's selection per group, and FP32 attention under
// the selection's mask, all on the device.
#include "impls/cuda/block_sparse.cuh"
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/rope.cuh"  // kCudaPowUlps

namespace conform::CONFORM_CUDA_NS {

// The registry entry of cuda.block_sparse_attention.<fmt> or of a mutant built on it.
KernelInfo block_sparse_info(KernelInfo k, Format f) {
    k.acc = Format::fp32;
    k.out_formats = {f, Format::fp32};
    k.declared["pow_ulps"] = kCudaPowUlps;  // QSA's RoPE angles (CUDA's double pow)
    return k;
}

void register_block_sparse(Registry& r) {
    add_composed(
        r, "block_sparse_attention", {Format::fp32, Format::fp16, Format::bf16}, block_sparse_info,
        [](Format) -> std::string {
            return "MSA: a block per (group, query), a thread per key block (max of fl(dot) fl(1/sqrt(Di)) over its "
                   "tokens j <= t); QSA: a warp per pooled key and index query (ZC-RMSNorm, RoPE with double angles), a "
                   "thread per block for sum_h ReLU(q.K); the CPU kernels' score bits; cuda.topk_select's warp "
                   "selection per group; FP32 attention (a warp per row, 32 keys a step) under the selection's 0/-inf "
                   "mask over the tokens j <= t, o rounded once; ids in FP32";
        },
        [](const KernelCall& c, Format f, const char* kernel, Launch l) { run_block_sparse(c, f, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
