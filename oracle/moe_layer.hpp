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

// The router's outputs in double (indices, weights, kept, loss; staged: the
// candidate's selection where admissible) and moe_router's bound on them
// (a weight kUndefined where its budget does not bound it): where the
// layer's budget starts, for a kernel accumulating in `acc`.
struct LayerRouting {
    std::vector<std::vector<double>> values, bound;
};
LayerRouting layer_routing(const moe_slots::Layer& l, const Params& p, const std::vector<TensorView>& in, Format acc);

// y: the propagated budget of a kernel with FP32 accumulation that stores
// z, h, a, every expert's output, u, RMSNorm(u) and latent_up's product in
// y's format (docs/moe.md, "Error budget of the layer"); indices exact;
// weights as moe_router's.  NaN (compare classes) on tokens whose exact y
// is NaN, kUndefined where a stage may overflow or the router is undefined.
// A routing of every token's k slots ([T, k] each, row-major): expert ids
// (NaN on a token the router found non-finite), weights, a bound on each
// weight's error (kUndefined: not bounded) and kept (1 or 0).
struct GivenRouting {
    std::vector<double> indices, weights, weight_err, kept;
};
// Where a budget stops: y of the layer, latent_moe's u (the routed experts'
// weighted sum, [T, L]), or latent_moe's y from a given u.
enum class BoundStage { all, latent_u, latent_out };
// Whether token t's k slots of `ids` ([T, k] row-major) are integer expert
// ids in [0, experts): a routing any layer can run.
bool valid_expert_ids(const std::vector<double>& ids, std::int64_t t, std::int64_t k, std::int64_t experts);

// y's (or u's) budget given the routing (the stages after the router, as
// moe_bound and latent_moe_bound compute them for the router's own
// outputs), for a kernel storing every intermediate in `store` and
// accumulating in `acc`: NaN rows on tokens whose ids are not valid (NaN, or
// not an integer in [0, E): valid_expert_ids), kUndefined
// rows where a stage may overflow or the RMSNorm bound would be vacuous.
std::vector<double> moe_bound_given_routing(const moe_slots::Layer& l, const std::vector<TensorView>& in,
                                            const GivenRouting& r, Format store, Format acc,
                                            BoundStage stage = BoundStage::all);
// latent_moe's y budget from the exact values u [T, L] (the model's stored
// u point): RMSNorm (if normalized), latent_up, the shared experts and the
// sum; NaN rows where u has a non-finite value.
std::vector<double> latent_out_bound(const moe_slots::Layer& l, const std::vector<TensorView>& in,
                                     const std::vector<double>& u, Format store, Format acc);

std::vector<std::vector<double>> moe_bound(const Params& params, const std::vector<TensorView>& in,
                                           const std::vector<std::vector<double>>& exact, Format acc,
                                           const std::vector<Format>& out);
std::vector<std::vector<double>> latent_moe_bound(const Params& params, const std::vector<TensorView>& in,
                                                  const std::vector<std::vector<double>>& exact, Format acc,
                                                  const std::vector<Format>& out);

}  // namespace conform::oracle
