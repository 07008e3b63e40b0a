// CPU kernels of Mixture-of-Experts routing (op `moe_router`, docs/moe.md
// "Kernels"), and the switches its mutants turn on.
#pragma once
#include "impls/registry.hpp"

namespace conform {

void register_cpu_moe(Registry& r);      // impls/cpu/moe.cpp
void register_mutants_moe(Registry& r);  // impls/mutants/moe.cpp

namespace cpu {

// The ways routers go wrong; all off is the kernel.
struct RouterFlaws {
    bool renormalize_all = false;     // weights p_i / sum over all experts, not the k chosen
    bool softmax_after_topk = false;  // choose on the logits, then softmax over the chosen ones only
    bool bias_in_weights = false;     // weights from p_i + b_i
    bool routed_twice = false;        // the last slot repeats the first expert
    bool capacity_reversed = false;   // capacity filled from the last token backwards
    bool ties_to_higher = false;      // equal scores: the higher index first (a legitimate rule: must pass)
};

// The op on one call: logits by the matmul kernel (cpu::matmul_call, the
// best path when simd, else the scalar loop), the rest in FP32 per token.
void moe_router_call(const KernelCall& c, bool simd, const RouterFlaws& flaws = {});

}  // namespace cpu
}  // namespace conform
