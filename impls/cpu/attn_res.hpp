// CPU kernels of the residual reads (docs/residual.md, "Kernels"): op
// block_attn_res (here) and gated_residual (impls/cpu/gated_residual.hpp);
// FP32 arithmetic, fp32, fp16 or bf16 storage, plus naive baselines.
#pragma once
#include <cstdint>
#include <vector>

#include "impls/registry.hpp"

namespace conform {

void register_cpu_attn_res(Registry& r);      // impls/cpu/attn_res.cpp
void register_mutants_attn_res(Registry& r);  // impls/mutants/attn_res.cpp

namespace cpu {

// Every input of a call widened to FP32 (exact: storage is at most FP32).
std::vector<float> widen_residual(const TensorView& t);

// 1 / r of a row x[0..d) in FP32, r = sqrt(fl(fl(sum x^2) / d + eps)), the
// add of the exact eps rounded once (the RMSNorm of both residual reads);
// eps_outside: r = sqrt(mean) + eps (a flaw).
float residual_inv_rms(const float* x, std::int64_t d, double eps, bool eps_outside = false);

// block_attn_res's shapes of one call, validated (the CPU and CUDA kernels'):
// N sources of T tokens of width d, and whether norm_weight is given.
struct AttnResGeometry {
    std::int64_t n = 0, tokens = 0, d = 0;
    bool has_g = false;
};
AttnResGeometry attn_res_geometry(const KernelCall& c);

// The ways a block_attn_res kernel goes wrong; all off is the kernel.
struct AttnResFlaws {
    bool raw_keys = false;           // keys g v, not normalized
    bool normalized_values = false;  // h = sum alpha_i k_i (the keys as values)
    bool eps_outside = false;        // sqrt(mean) + eps
    bool weight_ignored = false;     // norm_weight read as 1
};

// The scalar FP32 kernel with fp32 storage, with flaws (the mutants).
void block_attn_res_fp32(const KernelCall& c, const AttnResFlaws& flaws);

}  // namespace cpu
}  // namespace conform
