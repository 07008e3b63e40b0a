// The pre-norm block in seed 000's INT8 + FP16 precision flow (op
// `int8_block`, docs/int8.md "int8_block as an op"), composed from the
// project's kernels: quantize and the INT8 GEMM (impls/cpu/int8_gemm.hpp),
// the layer_norm and softmax row kernels; residual adds in FP32, every stage
// stored in FP16.
#pragma once
#include <cstdint>
#include <functional>

#include "impls/registry.hpp"

namespace conform {

void register_cpu_int8_block(Registry& r);  // impls/cpu/int8_block.cpp

namespace cpu {

// The ways a quantized block goes wrong, as switches; all off is the kernel.
struct BlockFlaws {
    bool pv_per_tensor = false;    // P quantized with one scale per head, not per query token
    bool residual_int8 = false;    // the residual stream h quantized to INT8 (per token) before the add
    bool unscaled_scores = false;  // q k^T without the 1/sqrt(d_h)
};

// The kernels a block is composed of: the CPU kernels' and the CUDA
// kernel's (impls/cuda/int8_block.cu) blocks differ only here; the glue
// (dequantization in double, ReLU, residual adds in FP32, FP16 stores) is
// the same code.
struct BlockStages {
    KernelFn quantize;  // op quantize: x [rows, cols] fp16 (param axis) -> int8 codes, fp32 scales
    // acc [m, n] = a [m, k] b [k, n] in INT32, row-major.
    std::function<void(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                       std::int64_t n)>
        matmul;
    KernelFn layer_norm;  // fp16 rows x, gamma, beta (param eps) -> y
    KernelFn softmax;     // fp16 rows -> fp16 rows
};
// `simd`: the AVX2 quantize/GEMM and the simd row kernels, else the scalar ones.
BlockStages cpu_block_stages(bool simd);

// One int8_block call through the given stages, or the CPU's.
void int8_block_call(const KernelCall& c, const BlockStages& stages, const BlockFlaws& flaws = {});
void int8_block_call(const KernelCall& c, bool simd, const BlockFlaws& flaws = {});

}  // namespace cpu
}  // namespace conform
