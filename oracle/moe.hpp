// Oracle of Mixture-of-Experts routing (docs/moe.md): op moe_router.
//
// Top-k selection is discontinuous, so the op is judged ambiguity-aware
// (docs/moe.md, "Discrete decisions"): evaluated with a candidate's outputs
// appended (OpSpec::staged), the evaluator accepts the candidate's
// selection of a token when some scores within the scores' budget of the
// exact ones would produce it (router_admissible), and then computes the
// weights, capacity and loss for that selection; otherwise it returns its
// own selection (ties: the lower index), and the candidate fails there.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "oracle/bound.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

struct RouterSetup {
    std::int64_t tokens = 0, channels = 0, experts = 0, k = 0;
    bool sigmoid = false, renormalize = true, has_bias = false, staged = false;
    double capacity = 0;
    // Group-limited selection (DeepSeek-V3): the experts in `groups` groups of
    // E / groups consecutive ids; a group's score is the sum of its
    // `group_top` largest p + b (2: DeepSeek-V3's top-2 sum; 1: DeepSeek-V2's
    // maximum); only the `topk_groups` best groups may be chosen (param
    // topk_groups 0: all, resolved here).  groups = 1: no limit.
    std::int64_t groups = 1, topk_groups = 1, group_top = 2;
    double scaling = 1;  // routed scaling factor: every weight times it, after renormalization

    std::size_t outputs_at = 0;  // index of the candidate's first output in `in` (staged)
    // Logits rounded to a narrower format before the scores (params
    // declared.logit_unit, declared.logit_eta: its unit roundoff and half its
    // smallest subnormal spacing; 0: FP32 logits).
    double logit_unit = 0, logit_eta = 0;
};
RouterSetup router_setup(const Params& p, const std::vector<TensorView>& in);

// What the scores' budget allows for one token, in double from the exact
// inputs, for a kernel that forms the logits as FP32 dot products and p in
// FP32 (docs/moe.md, "Error budget").
struct TokenBudget {
    std::vector<double> p, score;  // p_i and p_i + b_i
    std::vector<double> delta;     // |computed score - exact| <= delta_i
    std::vector<double> rel;       // |computed p_i - p_i| <= rel_i p_i + abs_p
    double rel_p = 0;              // max_i rel_i
    double abs_p = 0;
    bool finite = true;            // every exact logit finite
    bool undefined = false;        // an FP32 logit may overflow, or a sigmoid leave the normal range
    std::int64_t groups = 1, topk_groups = 1, group_top = 2;  // the setup's group-limited selection
    bool limited() const { return groups > 1 && topk_groups < groups; }
};
TokenBudget router_token_budget(const RouterSetup& s, const std::vector<TensorView>& in, std::int64_t t);

// Group scores (the sum of each group's group_top largest scores) and their
// budget: |computed - exact| <= the sum of the group's group_top largest
// delta, plus the FP32 additions' rounding (and double's), docs/moe.md
// "Error budget".
void group_scores(const TokenBudget& b, std::vector<double>& g, std::vector<double>& dg);

// The experts in decreasing score, ties to the lower index, those of the
// kept groups (ranked by their double group scores, ties to the lower
// group) first: its first k are the selection of the double scores.
std::vector<std::int64_t> router_order(const TokenBudget& b);

// Whether `chosen` (k expert ids in the candidate's order) is a selection
// some scores within the budget produce: k distinct valid ids, every chosen
// score + delta at least every other score - delta, and consecutive chosen
// ones in a decreasing order that the budget allows.  Group-limited: some
// set of topk_groups groups holding every chosen expert is admissible by
// the group scores' budget (each kept group's score + its delta at least
// every dropped one's - its delta), and the "every other" above ranges
// over the experts of those groups only.
bool router_admissible(const TokenBudget& b, const std::vector<double>& chosen);

// Whether more than one selection or order of the k experts (ranked by
// `order`, the exact scores' ranking) lies within the budget; group-limited,
// also whether more than one set of kept groups does.
bool ambiguous(const TokenBudget& b, const std::vector<std::int64_t>& order, std::int64_t k);

OpOutputs eval_moe_router(const Params& params, const std::vector<TensorView>& in);

// indices and kept exact (bound 0), weights and loss by docs/moe.md's
// bounds; NaN (compare classes) where the exact value is NaN, kUndefined
// on tokens the budget leaves undefined.
std::vector<std::vector<double>> moe_router_bound(const Params& params, const std::vector<TensorView>& in,
                                                  const std::vector<std::vector<double>>& exact, Format acc,
                                                  const std::vector<Format>& out);

}  // namespace conform::oracle
