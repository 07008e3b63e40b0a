// The inputs of the MoE layer ops `moe` and `latent_moe` (docs/moe.md, "The
// MoE layer"): where each lies in a tensor list, which optional ones are
// there, and the layer's dimensions.  The oracle, its bound and the CPU
// kernels all read the lists through this (kernels do not include oracle/).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::moe_slots {

// Every input either op may have; an op lacks some (moe has no latent_*).
enum Slot { x, router, latent_down, latent_up, gate_up, down, shared_gate_up, shared_down, norm_weight, bias, n_slots };
// Outputs of both ops.
enum Out { y_o, indices_o, weights_o, n_outputs };

struct Layer {
    bool latent = false;      // op latent_moe
    bool staged = false;      // a candidate's three outputs follow the inputs
    bool shared = false;      // shared experts given
    bool normalized = false;  // latent_moe: RMSNorm between u and latent_up
    std::int64_t t = 0, c = 0, e = 0, f = 0, s = 0, g = 0, k = 0;
    std::int64_t w = 0;  // the routed experts' width: c (moe) or the latent width l
    double eps = 0;
    // A declared rounding of each expert's activation silu(gate) to a
    // narrower format before the product (Hugging Face's act_fn(gate) * up
    // in bf16/fp16; the model's glu_arith = separate): its unit roundoff and
    // subnormal half-step, 0 when the activation stays FP32.
    double act_unit = 0, act_eta = 0;
    // The ulps of the kernel's expf in its FP32 SiLU (declared.exp_ulps; 1:
    // glibc's, CUDA's is within 2).
    double exp_ulps = 1;
    std::array<int, n_slots> at{};  // position in the list, -1 when absent
    std::size_t outputs_at = 0;     // first staged output
    bool has(Slot s_) const { return at[s_] >= 0; }
    const TensorView& in(const std::vector<TensorView>& v, Slot s_) const { return v.at(static_cast<std::size_t>(at[s_])); }
};

// The op's inputs in order, as numerics/op.cpp declares them.
const std::vector<Slot>& slots_of(bool latent);

// The layer from an op's inputs (optional ones absent at the end, or as
// empty views in place; staged: y, indices, weights appended) and its
// parameters; std::invalid_argument naming the op, input and dimension.
Layer read_layer(const std::string& op, const Params& p, const std::vector<TensorView>& in);

// The router's part of a list (x, router and the selection bias if given):
// moe_router's inputs.
std::vector<TensorView> router_inputs(const Layer& l, const std::vector<TensorView>& in);

}  // namespace conform::moe_slots
