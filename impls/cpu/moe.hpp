// CPU kernels of Mixture-of-Experts routing (op `moe_router`) and of the MoE
// layers (ops `moe`, `latent_moe`), docs/moe.md "Kernels", and the switches
// their mutants turn on.
#pragma once
#include "impls/registry.hpp"

namespace conform {

void register_cpu_moe(Registry& r);        // impls/cpu/moe.cpp
void register_cpu_moe_layer(Registry& r);  // impls/cpu/moe_layer.cpp
void register_mutants_moe(Registry& r);    // impls/mutants/moe.cpp

namespace cpu {

// The ways routers go wrong; all off is the kernel.
struct RouterFlaws {
    bool renormalize_all = false;     // weights p_i / sum over all experts, not the k chosen
    bool softmax_after_topk = false;  // choose on the logits, then softmax over the chosen ones only
    bool bias_in_weights = false;     // weights from p_i + b_i
    bool routed_twice = false;        // the last slot repeats the first expert
    bool capacity_reversed = false;   // capacity filled from the last token backwards
    bool ties_to_higher = false;      // equal scores: the higher index first (a legitimate rule: must pass)
    bool group_sum_all = false;       // a group's score: the sum of all its scores, not of its two largest
    bool group_max = false;           // a group's score: its largest score only (group_top 2 requested)
    bool group_top_ignored = false;   // a group's score: the sum of its two largest whatever group_top says
    bool scaling_before_renormalize = false;  // the scaling applied to p before renormalizing (lost there)
    bool renorm_eps = false;          // Hugging Face's sum + 1e-20 before the division (a legitimate variant: must pass)
};

// moe_router's parameters of one call, validated with the selection bias
// (E finite entries) -- every router kernel, CPU and CUDA, reads them
// here; topk_groups 0 becomes `groups`.
struct RouterParams {
    std::int64_t t, c, e, k;
    bool sigmoid, renormalize;
    double capacity;
    std::int64_t groups, topk_groups;
    float scaling;
    std::int64_t group_top;
};
RouterParams router_params(const KernelCall& c);

// The op on one call: logits by the matmul kernel (cpu::matmul_call, the
// best path when simd, else the scalar loop), the rest in FP32 per token.
void moe_router_call(const KernelCall& c, bool simd, const RouterFlaws& flaws = {});

// The ways MoE layers go wrong; all off is the kernel.
struct LayerFlaws {
    bool rmsnorm_skipped = false;  // latent_moe: u latent_up where the op normalizes u first
    bool shared_weighted = false;  // the shared experts scaled by the token's first routing weight
    bool gate_up_swapped = false;  // silu on the up half, times the gate half
    RouterFlaws router{};          // the router's
};

// How the routed experts run: grouped (each expert's tokens gathered, one
// GEMM pair per expert) or dense-masked (every expert on every token, the
// chosen ones selected: the naive baseline).
enum class ExpertForm { grouped, dense };

// moe or latent_moe (by `latent`) on one call: the router of
// moe_router_call, GEMMs by the matmul kernel (best path when simd, else
// scalar), intermediates stored in x's format, sums in FP32.
void moe_layer_call(const KernelCall& c, bool latent, bool simd, ExpertForm form, const LayerFlaws& flaws = {});

// The layer after its router, whole or in the model's two latent steps
// (model/moe_steps.cpp, docs/moe.md "In the model"): latent_u writes u [T, L]
// (stored in x's format) into c.out[0] instead of y.
enum class MoeStage { all, latent_u };

// y (c.out[0]) from the selection and weights already in c.out[1], c.out[2]
// and `kept` [T, k] (1 or 0 per slot).  A token whose first index is NaN
// gets a NaN row.
void moe_experts_call(const KernelCall& c, bool latent, bool simd, ExpertForm form, const TensorView& kept,
                      const LayerFlaws& flaws = {}, MoeStage stage = MoeStage::all);
// latent_moe's y = shared(x) + RMSNorm(u) latent_up (or u latent_up) from a
// stored u [T, L]; a token with a non-finite u gets a NaN row.
void moe_latent_out_call(const KernelCall& c, bool simd, const TensorView& u);

}  // namespace cpu
}  // namespace conform
