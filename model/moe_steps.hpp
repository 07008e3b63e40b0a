// The MoE steps of the block stack (docs/moe.md, "In the model";
// docs/diverge.md): the router point [T, 2k] (each token's k expert ids,
// then their k weights, FP32) and mlp_out, the experts on that point's
// selection.  The FP64 tier, the budgets and the router point's
// ambiguity-aware reference live here; model/layout.cpp builds the op calls
// and model/kernels.cpp runs the kernels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/layout.hpp"
#include "model/step_bound.hpp"

namespace conform::model {

// moe_router's parameters from the contract (capacity 0: inference drops no
// token), and moe's / latent_moe's (normalized, eps) on top.
Params router_params(const ModelContract& c);
Params moe_layer_params(const ModelContract& c);

// How the router point of a dump was judged: tokens whose selection was
// ambiguous (more than one selection or order within the scores' budget),
// and tokens whose selection differs from the FP64 tier's and was accepted.
struct RouterCounts {
    std::int64_t ambiguous = 0, accepted_other = 0;
    std::string note() const;  // "" when both are 0
};

// The router step on the FP64 tier: scores in double, the k largest (ties:
// the lower index) in decreasing order, weights over them.  With `cand` (a
// dump's router point) a token takes the candidate's selection where the
// scores' budget admits it (oracle::router_admissible, the budget widened by
// the FP64 tier's own error), and its weights are those of that selection.
Values eval_router_step(const OpCall& call, const Values* cand = nullptr, RouterCounts* counts = nullptr);
// The moe step on the FP64 tier from the op call's inputs and the router
// point: moe's y, or latent_moe's u [T, L].
Values eval_moe_step(const OpCall& call, const Values& router);
// latent_moe's y from the stored u.
Values eval_latent_out_step(const OpCall& call, const Values& u);

// The local budgets: indices exact and weights by moe_router's bound
// (router); the layer's stages after the router on the point's selection and
// weights (moe), widened by half an ulp of the model format on each weight
// (a layer may use the FP32 weights or their rounding into the model format:
// Mixtral's and DeepSeek's code differ there).
StepBound router_step_bound(const OpCall& call, const Values& ref, Format out);
StepBound moe_step_bound(const ModelContract& c, const OpCall& call, const Values& router, const Values& ref, Format out);
// latent_moe's y from the stored u: RMSNorm, latent_up, shared experts, sum.
StepBound latent_out_step_bound(const ModelContract& c, const OpCall& call, const Values& u, const Values& ref, Format out);

// The router point [T, 2k] from moe_router's indices and weights [T, k].
Tensor router_point(const TensorView& indices, const TensorView& weights);
// The selection and weights [T, k] of a router point (FP32 tensors).
std::pair<Tensor, Tensor> split_router_point(const TensorView& point);

}  // namespace conform::model
