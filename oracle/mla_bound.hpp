// The per-element error bound of the MLA kernels (docs/mla.md, "Error
// budget"): FP32 arithmetic, intermediates stored in the inputs' format,
// error propagated stage by stage with magnitudes recomputed in double from
// the exact inputs.
#pragma once
#include <vector>

#include "numerics/format.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::oracle {

// StructuredBoundFn of `mla` (oracle/bound.hpp): bounds on |kernel - exact|
// of o [H, L, d_v] and lse [H, L], for a kernel that accumulates in `acc`
// and stores its intermediates in the format of h.  Param declared.form (0
// explicit, 1 absorbed) selects the form's bound; undeclared, an element's
// bound is the larger of the two.  An element whose exact value is not
// finite gets NaN (classes are compared); one whose bound cannot be formed
// (a non-finite magnitude, a stored value past the format's range) +inf.
std::vector<std::vector<double>> mla_bound(const Params& params, const std::vector<TensorView>& in,
                                           const std::vector<std::vector<double>>& exact, Format acc,
                                           const std::vector<Format>& out);

}  // namespace conform::oracle
