// CUDA MoE router (docs/moe.md, "Kernels"): cuda.moe_router.<fmt> for fp32
// and bf16 storage, FP32 logits and routing (declared acc fp32, the bound
// of docs/moe.md "Error budget").  The kernels are moe.cuh's: logits by a
// thread per expert (the CPU scalar kernel's fmaf chain), routing by a warp
// per token, capacity and loss by a thread per expert.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/moe.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_moe(Registry& r) {
    add_per_format(r, "moe_router", {Format::fp32, Format::bf16}, Format::fp32, Format::fp32,
                   "logits by a thread per expert (fmaf chain from +0 in the CPU's order: cpu.scalar's bits); a warp per "
                   "token: softmax (warp max, expf, warp sum) or sigmoid, scores p + b, groups scored by a lane each and "
                   "kept by warp argmaxes, the top k by warp argmaxes (ties to the lower index), weights over the chosen "
                   "experts summed in expert order, times fl32(scaling); capacity in token order and the loss in double "
                   "by a thread per expert",
                   false, [](const KernelCall& c, Format f, const char* kernel, Launch l) { run_router(c, f, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
