// CPU kernels of gated_residual (docs/residual.md, "Kernels") and its
// mutants; FP32 arithmetic, fp32, fp16 or bf16 storage, plus naive baselines.
#pragma once
#include "impls/registry.hpp"

namespace conform {

void register_cpu_gated_residual(Registry& r);      // impls/cpu/gated_residual.cpp
void register_mutants_gated_residual(Registry& r);  // impls/mutants/gated_residual.cpp

namespace cpu {

// gated_residual's shapes of one call, validated (the CPU and CUDA
// kernels'): n streams of T tokens of width d, low rank r.
struct GatedGeometry {
    std::int64_t n = 0, tokens = 0, d = 0, rank = 0;
};
GatedGeometry gated_geometry(const KernelCall& c);

// The ways a gated_residual kernel goes wrong; all off is the kernel.
struct GatedFlaws {
    bool gate_raw = false;     // the gate's low-rank map of the raw streams, not RMSNorm(H)
    bool read_raw = false;     // h = sum_i gate_i * H_i (the raw streams read)
    bool index_shift = false;  // the gate of stream i applied to stream i + 1 (mod n)
    bool softmax = false;      // the gate a softmax over the streams, not a sigmoid
};

// The scalar FP32 kernel with fp32 storage, with flaws (the mutants).
void gated_residual_fp32(const KernelCall& c, const GatedFlaws& flaws);

}  // namespace cpu
}  // namespace conform
