// CUDA FP8 GEMM (docs/fp8.md, "CUDA kernels"): cuda.fp8_gemm.<codes>[.fp32],
// DeepSeek-V3's block-scaled recipe with the codes widened exactly to BF16
// and each K block's sum on tensor cores (fp8_gemm.cuh), promoted into FP32.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/fp8_gemm.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_fp8_gemm(Registry& r) {
    const std::pair<Format, Format> kinds[] = {
        {Format::fp8_e4m3, Format::bf16}, {Format::fp8_e4m3, Format::fp32}, {Format::fp8_e5m2, Format::bf16}};
    for (const auto& [codes, out] : kinds) {
        KernelInfo k = fp8_gemm_info(kernel_info("fp8_gemm", codes, ""), codes, out);
        k.description = std::string("codes widened exactly to BF16 in shared memory, 64 x 64 tiles of four warps on "
                                    "tensor cores (mma.sync m16n8k16 bf16); per K block the chain of block FMAs from "
                                    "+0, then acc += (P * scale_a) * scale_b in FP32, y rounded once to ") + name(out);
        r.add(std::move(k));
    }
}

}  // namespace conform::CONFORM_CUDA_NS
