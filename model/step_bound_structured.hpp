// Local budgets of the structured steps (RoPE, attention, GDN, KDA,
// Sinkhorn): the op's own derived bound (oracle::find_structured_bound) on
// the views the op takes, for the candidate (FP32 arithmetic, output in the
// point's format) and for the FP64 tier (the same analysis at fp64).
#pragma once
#include "model/step_bound.hpp"

namespace conform::model {

StepBound structured_step_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref,
                                const Conventions& conv, Format out);

}  // namespace conform::model
