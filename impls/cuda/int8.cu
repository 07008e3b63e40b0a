// CUDA INT8 GEMM (docs/int8.md, "CUDA kernel"): cuda.int8_gemm.<out> for fp32
// and fp16 y, s8 x s8 -> s32 on the integer tensor cores (int8.cuh), acc
// exact, y = acc * s_a * s_b in double rounded once (declared acc fp64).
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/int8.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_int8(Registry& r) {
    for (Format out : {Format::fp32, Format::fp16}) {
        KernelInfo k = int8_gemm_info(kernel_info("int8_gemm", out, ""), out);
        k.description = std::string("integer tensor cores (mma.sync m16n8k32 s8.s8.s32): 64 x 32 tiles of four warps, "
                                    "a and b staged in shared memory as 32-bit words of four k; acc exact INT32, "
                                    "y = acc * s_a * s_b in double rounded once into ") +
                        name(out);
        with_gemm_launches(k, out);
        r.add(std::move(k));
    }
}

}  // namespace conform::CONFORM_CUDA_NS
