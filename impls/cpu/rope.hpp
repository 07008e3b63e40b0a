// CPU RoPE kernels (op `rope`, docs/rope.md "Kernels") and their mutants,
// registered in builtin_registry(); rope_args also validates the CUDA
// kernels' parameters (impls/cuda/rope.cuh).
#pragma once
#include <cstdint>
#include <vector>

#include "impls/registry.hpp"
#include "numerics/rope_scaling.hpp"

namespace conform {

void register_cpu_rope(Registry& r);      // impls/cpu/rope.cpp
void register_mutants_rope(Registry& r);  // impls/mutants/rope.cpp

namespace cpu {

// The op's parameters as eval_rope reads them (docs/rope.md "Validation"),
// resolved for a head dimension D: rotary_dim 0 becomes D.
struct RopeArgs {
    int pairing = 0;             // 0 interleaved (2j, 2j+1), 1 half-split (j, j + r/2)
    std::int64_t rotary_dim = 0;  // r, even, 2 <= r <= D
    double base = 10000.0;
    double ntk_scale = 1.0;
    std::int64_t offset = 0;     // token l sits at position offset + l
    RopeScalingArgs scaling{};   // frequency scaling and attention_factor
};
// Throws std::invalid_argument naming the op and the parameter.
RopeArgs rope_args(const Params& p, std::int64_t D);

// cos/sin tables of one call: row l holds pair j's entries at position
// offset + l, [L, r/2] row-major, FP32 values of double angles (see
// rope_tables in rope.cpp for the construction and its error).
struct RopeTables {
    std::int64_t L = 0, half = 0;
    std::vector<float> cos, sin;
    const float* cos_row(std::int64_t l) const { return cos.data() + l * half; }
    const float* sin_row(std::int64_t l) const { return sin.data() + l * half; }
};
RopeTables rope_tables(const RopeArgs& a, std::int64_t L);

}  // namespace cpu
}  // namespace conform
