// CPU kernels of the FP8 family (ops fp8_quantize and fp8_gemm, docs/fp8.md
// "Kernels"), and the switches their mutants turn on.
#pragma once
#include <cstdint>

#include "impls/fp8_codes.hpp"
#include "impls/registry.hpp"

namespace conform {

void register_cpu_fp8(Registry& r);      // impls/cpu/fp8.cpp
void register_mutants_fp8(Registry& r);  // impls/mutants/fp8.cpp

namespace cpu {

// An FP8 format as the kernels' integer conversion sees it
// (impls/fp8_codes.hpp, shared with the CUDA kernel).
using Fp8Codec = fp8::Codec;
Fp8Codec fp8_codec(Format f);

// RN_fp8 of a float v on its bits (fp8::from_float): ties to even; `dir`
// says on which side of |v| the true value lies when v is the FP32 rounding
// of it (+1 above, -1 below, 0 exact), which decides an FP8 midpoint that v
// landed on.  Overflow and +-Inf: +-max when saturating, else Inf (E5M2) or
// NaN (E4M3).  `truncate` rounds toward zero instead (the mutant).
inline std::uint8_t fp8_from_float(float v, int dir, const Fp8Codec& c, bool saturate, bool truncate = false) {
    return fp8::from_float(v, dir, c, saturate, truncate);
}

// The ways FP8 kernels go wrong; all off is the kernel.
struct Fp8Flaws {
    bool overflow_nan = false;      // quantize: E4M3 overflow to NaN even when saturating
    bool per_tensor_scale = false;  // quantize: one amax over the whole tensor
    bool truncate = false;          // quantize: round toward zero
    bool reciprocal = false;        // quantize: x * fl(1 / s), one double rounding
    bool no_promotion = false;      // gemm: one 14-bit accumulator over all of K, scaled products
    bool a_scale_by_column = false; // gemm: A's scale taken at B's column block index
};

// fp8_quantize on one call: `simd` the AVX2 lanes, else the portable loop
// (the same bits).
void fp8_quantize_call(const KernelCall& c, bool simd, const Fp8Flaws& flaws = {});
// fp8_gemm on one call: `simd` decodes each 128-deep K block to FP32 and
// runs the FP32 matmul kernel on it, else the portable loop (the same bits).
void fp8_gemm_call(const KernelCall& c, bool simd, const Fp8Flaws& flaws = {});

}  // namespace cpu
}  // namespace conform
