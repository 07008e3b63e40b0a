// The pre-norm block in seed 000's INT8 + FP16 precision flow (op
// `int8_block`, docs/int8.md "int8_block as an op"), composed from the
// project's kernels: quantize and the INT8 GEMM (impls/cpu/int8_gemm.hpp),
// the layer_norm and softmax row kernels; residual adds in FP32, every stage
// stored in FP16.
#pragma once
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

// One int8_block call; `simd`: the AVX2 quantize/GEMM and the simd row
// kernels, else the scalar ones.
void int8_block_call(const KernelCall& c, bool simd, const BlockFlaws& flaws = {});

}  // namespace cpu
}  // namespace conform
