// CUDA MoE layers (docs/moe.md, "CUDA kernels"): cuda.moe.<fmt> and
// cuda.latent_moe.<fmt> for fp32 and bf16 storage.  The kernels are
// moe_layer.cuh's: cuda.moe_router's launches, then the CPU scalar
// kernels' GEMM chains, activations and sums on the device.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/moe_layer.cuh"

namespace conform::CONFORM_CUDA_NS {

KernelInfo moe_layer_info(KernelInfo k, Format f) {
    k.acc = Format::fp32;
    k.out_formats = {f, Format::fp32, Format::fp32};
    k.declared["exp_ulps"] = 2;  // CUDA's expf in the SiLU (the bound's SiLU term takes the kernel's ulps)
    return k;
}

void register_moe_layer(Registry& r) {
    for (const bool latent : {false, true})
        add_composed(
            r, latent ? "latent_moe" : "moe", {Format::fp32, Format::bf16}, moe_layer_info,
            [latent](Format f) {
                return std::string("cuda.moe_router's launches; every GEMM a thread per output of a (row, expert) "
                                   "pair, the CPU's fmaf chain and order, stored in ") +
                       name(f) + " (routed experts on each kept slot, shared experts on every token); silu(gate) up "
                                 "in FP32, stored; the routed sum per token in ascending expert order" +
                       (latent ? "; z, u, RMSNorm(u) (a warp per token) and its latent_up product stored" : "") +
                       "; a block per token adds the shared experts and stores y once";
            },
            [latent](const KernelCall& c, Format f, const char* kernel, Launch l) { run_moe_layer(c, latent, f, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
