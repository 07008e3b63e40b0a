// CUDA Hyper-Connections mixings (docs/hc_residual.md, "CUDA kernels"):
// cuda.hc_residual.<fmt> (B as given) and cuda.mhc_residual.<fmt> (B the
// Sinkhorn projection of its logits, also returned), fp32, fp16 and bf16
// storage, FP32 arithmetic (declared acc fp32, the CPU kernels' bound).  The
// kernel is hc_residual.cuh's: one block per token, coefficients in shared
// memory, threads over the channels.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/hc_residual.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

template <bool kProject>
void add_hc_residual(Registry& r) {
    const char* op = kProject ? "mhc_residual" : "hc_residual";
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = kernel_info(op, f, "");
        k.acc = Format::fp32;
        k.description = std::string("one block per token (n <= 32 streams): sigmoid coefficients") +
                        (kProject ? " and B by warp 0's Sinkhorn projection (cuda.sinkhorn's)" : "") +
                        " in shared memory, threads over the channels, left-to-right sums of separate products in "
                        "FP32; one rounding into " + name(f);
        with_launches(k, [f, kernel = k.name](Launch l) -> KernelFn {
            return [f, kernel, l](const KernelCall& c) { run_hc_residual<kProject>(c, f, kernel.c_str(), l); };
        });
        r.add(std::move(k));
    }
}

}  // namespace

void register_hc_residual(Registry& r) {
    add_hc_residual<false>(r);
    add_hc_residual<true>(r);
}

}  // namespace conform::CONFORM_CUDA_NS
