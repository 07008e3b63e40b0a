// CUDA matrix product (docs/matmul.md, "CUDA kernels"): cuda.matmul.fp32
// (FP32 FMA chains, the CPU kernels' bits) and cuda.matmul.{fp16,bf16}[.fp32]
// on tensor cores (mma.sync m16n8k16, FP32 accumulators, declared mma_k 16),
// y in the operands' format or in FP32.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/matmul.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_matmul(Registry& r) {
    KernelInfo f32 = matmul_info(kernel_info("matmul", Format::fp32, ""), Format::fp32, Format::fp32);
    f32.description = "64 x 64 tiles of 256 threads (4 x 4 outputs each), K by 16 through shared memory; y_ij = "
                      "fmaf chain over k ascending from +0 (cpu.scalar.matmul.fp32's bits)";
    with_matmul_launches<float, float>(f32);
    r.add(std::move(f32));
    for (Format in : {Format::fp16, Format::bf16})
        for (Format out : {in, Format::fp32}) {
            KernelInfo k = matmul_info(kernel_info("matmul", in, ""), in, out);
            k.description = std::string("tensor cores (mma.sync m16n8k16 ") + name(in) +
                            ", FP32 accumulators): 64 x 64 tiles of four warps, a and b (transposed) staged in shared "
                            "memory 32 k at a time; y_ij a chain of ceil(K/16) block FMAs from +0 rounded once into " +
                            name(out);
            by_storage(in, [&](auto s) {
                using S = decltype(s);
                if (out == Format::fp32) with_matmul_launches<S, float>(k);
                else with_matmul_launches<S, S>(k);
            });
            r.add(std::move(k));
        }
}

}  // namespace conform::CONFORM_CUDA_NS
