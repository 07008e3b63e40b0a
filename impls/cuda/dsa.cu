// CUDA DeepSeek Sparse Attention (docs/dsa_attention.md, "Kernels"):
// cuda.dsa_attention.<fmt> for fp32, fp16 and bf16 storage.  The kernels
// are dsa.cuh's composition of the CUDA indexer, top-k selection and
// attention kernels, declared as the attention kernels are (tensor cores
// for FP16 and BF16, KV splits).
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/dsa.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_dsa(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = attention_info(kernel_info("dsa_attention", f, ""), f);
        k.out_formats = {f, Format::fp32, Format::fp32};
        k.description = std::string("scores by cuda.lightning_indexer's kernel, the top k tokens s <= Lk - Lq + i by "
                                    "cuda.topk_select's (shared by the heads; ids in FP32), a block per row writing the "
                                    "selection's 0/-inf mask, then cuda.attention.") +
                        name(f) + "'s kernels under it, all on the device";
        const std::string kernel = k.name;
        auto make = [f, kernel](AttnLaunch l) -> KernelFn {
            return [f, kernel, l](const KernelCall& c) { run_dsa(c, f, kernel.c_str(), l); };
        };
        k.fn = make({});
        k.launches = {{"one warp per block", make({1, 0})}, {"the keys in 3 splits", make({0, 3})}};
        r.add(std::move(k));
    }
    // cuda.dsa_attention.simt.<fmt>: the same indices, the attention in FP32 on
    // CUDA cores (a warp per row, 32 keys a step, one split) over the inputs
    // widened to FP32: any head dimension -- DeepSeek-V3.2's absorbed MLA
    // heads of 576 (512 latent + 64 rope) with Dv 512, past the tensor-core
    // kernels' 256 -- declared as what it is (no tensor cores, no splits).
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = kernel_info("dsa_attention", f, "");
        k.name = std::string("cuda.dsa_attention.simt.") + name(f);
        k.variant = "cuda.simt";
        k.acc = Format::fp32;
        k.out_formats = {f, Format::fp32, Format::fp32};
        k.declared["key_block"] = kSparseKeyStep;
        k.description = "the indices of cuda.dsa_attention; the attention in FP32 on CUDA cores (a warp per query row, "
                        "32 keys a step, one split) under the selection's 0/-inf mask over the inputs widened to FP32, "
                        "o rounded once: any head dimension (MLA's 576), Dv <= 512";
        const std::string kernel = k.name;
        auto make = [f, kernel](AttnLaunch l) -> KernelFn {
            return [f, kernel, l](const KernelCall& c) { run_dsa<DsaNoBug, true>(c, f, kernel.c_str(), l); };
        };
        k.fn = make({});
        k.launches = {{"one warp per block", make({1, 0})}};
        r.add(std::move(k));
    }
}

}  // namespace conform::CONFORM_CUDA_NS
