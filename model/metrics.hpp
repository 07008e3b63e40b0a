// Error metrics of one point (docs/diverge.md, "Metrics"): a candidate's
// values against a reference, element by element, in the candidate's
// storage format.  Special values are compared as classes first: a NaN or
// an Inf on one side where the other has none is a class mismatch, and a NaN
// in the reference never passes (utilization +inf).
#pragma once
#include <cstdint>
#include <vector>

#include "model/diverge.hpp"
#include "numerics/format.hpp"

namespace conform::model {

// cand: the candidate's values (exact, stored in f); ref: the reference
// (FP64 tier or another dump); allowed: per element, the budget plus the
// reference's own bound (utilization = |cand - ref| / allowed; a zero
// allowance demands equality; an allowance of -inf, oracle::kUndefined, is
// an element not judged, counted in not_judged).  The reference's class is the class of its
// correct rounding into f, so a finite reference beyond f's range matches
// the infinity a correct kernel returns.  inherited_nan: the reference's
// inputs already held NaN/Inf (a local reference computed on a candidate's
// broken inputs), so a NaN on both sides is that inheritance, not a pass of
// a NaN reference: it matches.
ErrorMetrics compare(const std::vector<double>& cand, const std::vector<double>& ref,
                     const std::vector<double>& allowed, Format f, bool inherited_nan = false);

// |cand - exact|_2 / |same_dtype - exact|_2 over the elements finite in all
// three (docs/diverge.md, "Drift"); NaN when the same-dtype run equals the
// exact one there.
double drift_ratio(const std::vector<double>& cand, const std::vector<double>& exact, const std::vector<double>& same_dtype);

// Top-1 agreement, top-k overlap and KL divergence of logits [T, V] (row-major).
LogitMetrics logit_metrics(const std::vector<double>& cand, const std::vector<double>& ref, std::int64_t vocab);

// True when the metrics fail the budget (class mismatch or utilization > 1).
inline bool exceeds(const ErrorMetrics& m) { return m.class_mismatch || !(m.utilization <= 1); }

}  // namespace conform::model
