// Oracle of the MoE layers (docs/moe.md, "The MoE layer"): ops moe (eq 4.6:
// shared experts plus the weighted routed experts, SwiGLU each) and
// latent_moe (eq 4.7: routed experts on z = x latent_down, their weighted
// sum u, y = shared(x) + RMSNorm(u) latent_up, or u latent_up unnormalized).
//
// Both are staged like moe_router: with a candidate's outputs appended, the
// candidate's selection is taken where the router's budget admits it and
// y is the exact layer for that selection.
#pragma once
#include <vector>

#include "numerics/moe_slots.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

OpOutputs eval_moe(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_latent_moe(const Params& params, const std::vector<TensorView>& in);

// The router's outputs (moe_router's indices, weights, kept, loss) on the
// layer's list: the candidate's selection where admissible when staged.
OpOutputs route_layer(const moe_slots::Layer& l, const Params& p, const std::vector<TensorView>& in);

// y: the propagated budget of a kernel with FP32 accumulation that stores
// z, h, a, every expert's output, u, RMSNorm(u) and latent_up's product in
// y's format (docs/moe.md, "Error budget of the layer"); indices exact;
// weights as moe_router's.  NaN (compare classes) on tokens whose exact y
// is NaN, kUndefined where a stage may overflow or the router is undefined.
std::vector<std::vector<double>> moe_bound(const Params& params, const std::vector<TensorView>& in,
                                           const std::vector<std::vector<double>>& exact, Format acc,
                                           const std::vector<Format>& out);
std::vector<std::vector<double>> latent_moe_bound(const Params& params, const std::vector<TensorView>& in,
                                                  const std::vector<std::vector<double>>& exact, Format acc,
                                                  const std::vector<Format>& out);

}  // namespace conform::oracle
