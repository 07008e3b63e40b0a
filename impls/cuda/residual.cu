// CUDA residual reads (docs/residual.md, "Kernels"): cuda.block_attn_res.<fmt>
// and cuda.gated_residual.<fmt> for fp32, fp16 and bf16 storage, FP32
// arithmetic (declared acc fp32, the CPU kernels' bound).  The kernels are
// residual.cuh's: one block per token, block reductions for the RMSNorm
// sums and the dots.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/residual.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_residual(Registry& r) {
    add_per_format(r, "block_attn_res", {Format::fp32, Format::fp16, Format::bf16}, std::nullopt, Format::fp32,
                   "a block per token: per source the RMSNorm root and the logit w . (g v)(1/r) by block reductions, "
                   "the softmax over the sources by one thread (expf), h = sum_i alpha_i v_i left to right per channel; "
                   "FP32",
                   true, [](const KernelCall& c, Format f, const char* kernel, Launch l) { run_attn_res(c, f, kernel, l); });
    add_per_format(r, "gated_residual", {Format::fp32, Format::fp16, Format::bf16}, std::nullopt, Format::fp32,
                   "a block per token: z_i = (g_i H_i)(1/r_i) by block reductions, y = z A by r block reductions, "
                   "l = y B left to right, gate (l >= 0 ? 1 : t)/(1 + t), t = expf(-|l|), h = sum_i gate_i z_i left to "
                   "right; FP32",
                   true, [](const KernelCall& c, Format f, const char* kernel, Launch l) { run_gated_res(c, f, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
