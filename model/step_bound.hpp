// Local error budgets of the block-stack steps (docs/diverge.md, "Budgets").
//
// For one step, from the candidate's own inputs (exact values) and the FP64
// tier's output `ref` of that step:
//  - budget: per element, how far a sound kernel may be from the exact
//    result when it reads those inputs, computes with FP32 accumulation and
//    stores into `out` (the candidate point's format);
//  - oracle: per element, how far the FP64 tier's own `ref` may be from the
//    exact result (the same analysis at u = 2^-53, libm within a few ulps).
// The verdict of an element is |cand - ref| <= budget + oracle, and
// max(oracle / budget) must stay far below 1 for that verdict to be the
// kernel's and not the reference's (DESIGN.md, "Precision tiers").
#pragma once
#include <cstdint>
#include <vector>

#include "model/contract.hpp"
#include "model/graph.hpp"
#include "model/run.hpp"

namespace conform::model {

struct StepBound {
    std::vector<double> budget;  // the candidate's local budget, per element of the point
    std::vector<double> oracle;  // the FP64 tier's bound on ref, per element
    // max over elements of oracle / max(budget, granule) (0 when empty).  The
    // granule is the smallest subnormal of the point's format: a step that
    // must be exact (budget 0, e.g. an add that needs no rounding) is judged
    // by equality, which an oracle bound below the format's granularity
    // cannot change.
    double ratio() const;
    double granule = 0;
};

// conv: the conventions the reference `ref` was computed under (the
// contract's, or an alternative being tried); `out`: the candidate point's
// storage format.  std::invalid_argument for a step kind without a bound.
StepBound step_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref,
                     const Conventions& conv, Format out);

// ---- pieces, exposed for tests ------------------------------------------------

// The accumulation of y = x W^T (+ b) (docs/diverge.md, "matmul"): inputs
// stored exactly in `in`, products and sums in `acc` in any order, result
// rounded into `out`.
struct MatmulModel {
    Format in = Format::fp32, acc = Format::fp32, out = Format::fp32;
};
// |x| |W|^T (+ |b|) for every output element (row-major [T, N]) and the
// number of accumulated terms K (+1 with a bias).
struct AbsProducts {
    std::vector<double> a;
    std::int64_t terms = 0;
};
AbsProducts abs_products(const Values& x, const Values& w, const Values* bias);
// Per element: gamma_terms(u_acc) A + the subnormal term + the output rounding.
std::vector<double> matmul_budget(const AbsProducts& p, const std::vector<double>& y, const MatmulModel& m);
// The FP64 tier's own matmul (Eigen over double): gamma_terms(2^-53) A + terms 2^-1074.
std::vector<double> matmul_oracle_bound(const AbsProducts& p);

// max |v - y| over the values v of format f within k ulps of the correct
// rounding of some value in [y - e, y + e]: the absolute form of a k-ulp
// budget around a reference known to within e.
double ulp_window(Format f, double y, double e, int k);

}  // namespace conform::model
