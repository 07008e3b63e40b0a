// Local budgets of the structured steps (RoPE, attention, GDN, KDA,
// Sinkhorn): the op's own derived bound (oracle::find_structured_bound) on
// the views the op takes, for the candidate (FP32 arithmetic, output in the
// point's format) and for the FP64 tier (the same analysis at fp64).
#pragma once
#include "model/step_bound.hpp"

namespace conform::model {

// The FP64 tier's bound of a step whose candidate budget is a first-order
// forward analysis at u = 2^-24: every term is superlinear in u (a gamma_k,
// an expm1 of a multiple of u, a multiple of the libm error) or a subnormal
// term, so at u = 2^-53 the same analysis is at most 2^-29 = u64 / u32 times
// its value with every intermediate kept in FP32 (docs/diverge.md).
inline constexpr double kFp64TierScale = 0x1p-29;

StepBound structured_step_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref,
                                const Conventions& conv, Format out);

}  // namespace conform::model
