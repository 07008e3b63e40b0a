// CUDA native sparse attention (docs/nsa_attention.md, "Kernels"):
// cuda.nsa_attention.<fmt> for fp32, fp16 and bf16 storage.  The kernels
// are nsa.cuh's: the CPU kernels' stages in FP32 on the device, the
// selected and window branches by the FP32 attention kernel (32 keys a
// step: declared key_block 32).
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/nsa.cuh"

namespace conform::CONFORM_CUDA_NS {

KernelInfo nsa_info(KernelInfo k, Format f) {
    k.acc = Format::fp32;
    k.out_formats = {f, Format::fp32};
    k.declared["key_block"] = kSparseKeyStep;
    return k;
}

void register_nsa(Registry& r) {
    add_composed(
        r, "nsa_attention", {Format::fp32, Format::fp16, Format::bf16}, nsa_info,
        [](Format) -> std::string {
            return "FP32 throughout: K_cmp, V_cmp a thread per element (sums of x/l stored in the input format); the "
                   "compressed branch a warp per (head, query) (warp max and sum, the weights written for the "
                   "importance, summed over the group's heads in order); cuda.topk_select's selection per KV head; "
                   "the selected branch by FP32 attention (a warp per row, 32 keys a step) under the selection's mask, "
                   "the window branch by it with window w; o = the sigmoid-gated sum, rounded once; ids in FP32";
        },
        [](const KernelCall& c, Format f, const char* kernel, Launch l) { run_nsa(c, f, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
