// CUDA fp8_quantize (docs/fp8.md, "CUDA kernels"): cuda.fp8_quantize.<in>
// (E4M3 codes) and .<in>.fp8_e5m2, for FP32 and BF16 x: exact codes and
// scales, the CPU kernels' conversion (impls/fp8_codes.hpp) on the device.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/fp8_quantize.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_fp8_quantize(Registry& r) {
    for (Format in : {Format::fp32, Format::bf16})
        for (Format codes : {Format::fp8_e4m3, Format::fp8_e5m2}) {
            KernelInfo k = fp8_quantize_info(kernel_info("fp8_quantize", in, ""), in, codes);
            k.description = std::string("a CUDA block per quantization block: amax by a block reduction of the "
                                        "magnitudes' bits, the scale by one FP32 division (or the power of two), "
                                        "q = x / s in FP32 rounded to ") + name(codes) +
                            " on the bits, a midpoint decided by the exact residual fmaf(-q, s, x)";
            r.add(std::move(k));
        }
}

}  // namespace conform::CONFORM_CUDA_NS
