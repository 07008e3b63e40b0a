// CPU kernels of the Hyper-Connections mixings (ops hc_residual and
// mhc_residual, docs/hc_residual.md "Kernels") and their mutants: per token,
// h = sum_i sigmoid(a_i) x_i and x_next = B x + 2 sigmoid(c) f, B given (HC)
// or Sinkhorn-projected from logits (mHC); FP32 arithmetic, fp32, fp16 or
// bf16 storage.
#pragma once
#include "impls/registry.hpp"

namespace conform {

void register_cpu_hc_residual(Registry& r);      // impls/cpu/hc_residual.cpp
void register_mutants_hc_residual(Registry& r);  // impls/mutants/hc_residual.cpp

namespace cpu {

// The ways a real HC kernel goes wrong, as switches; all off is the kernel
// (the mutants turn on one each).
struct HcFlaws {
    bool c_sigma = false;      // C = sigma(c) instead of 2 sigma(c)
    bool swapped = false;      // pre- and post-mixing logits swapped: A = sigma(c), C = 2 sigma(a)
    bool transposed = false;   // B^T x instead of B x
    bool unprojected = false;  // mHC: B = the raw logits (no projection)
    bool rows_only = false;    // mHC: B only row-normalized (a softmax, not doubly stochastic)
};

// Runs op `op` (hc_residual or mhc_residual) on a call: `simd` selects the
// AVX2 path (eight channels per register, eight Sinkhorn matrices per
// register; the scalar path without AVX2).  fp32 storage only for flawed
// calls (the mutants).
void hc_residual_fp32(const KernelCall& c, bool project, const HcFlaws& flaws);

}  // namespace cpu
}  // namespace conform
