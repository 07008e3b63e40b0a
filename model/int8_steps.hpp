// INT8 layers in the block stack (docs/model.md, "INT8 layers"; the flow of
// docs/int8.md): in a layer the contract quantizes, every projection
// y = x W^T is W8A8 -- x quantized per token and W per output channel
// (symmetric codes in [-127, 127], scale fl32(amax / 127), codes decided
// exactly), the codes multiplied with exact integer accumulation, and
// y = acc s_x s_w in FP32, rounded once into the point's format.
#pragma once
#include "impls/registry.hpp"
#include "model/run.hpp"
#include "model/step_bound.hpp"

namespace conform::model {

// The FP64 tier: the exact flow (exact codes, exact accumulator, the
// dequantized product rounded once to double).  x [T, K], w [N, K].
Values eval_int8_matmul(const Values& x, const Values& w);

// The executor: the registry's quantize kernels (per token; per channel of
// W^T) and its int8_gemm kernel in the model's format, or `gemm` (a mutant)
// in its own; the FP32 (or FP16) y rounded into `out`.
Tensor run_int8_matmul(const TensorView& x, const TensorView& w, Format out, const KernelInfo* gemm = nullptr);

// With the codes exact, y = acc s_x s_w is three FP32 roundings (acc to
// float above 2^24, two products; oracle::int8_gemm_bound) and one more
// into a narrower point: |y^ - y| <= |y| ((1 + u)^3 - 1) + 2 eta (+ 1/2 ulp).
// The FP64 tier's own: one rounding to double.
StepBound int8_matmul_bound(const Values& ref, Format out);

}  // namespace conform::model
