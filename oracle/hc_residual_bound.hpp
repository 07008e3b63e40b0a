// A-priori error bounds of FP32 kernels of hc_residual and mhc_residual
// (docs/hc_residual.md, "Error bound", derives them).
#pragma once
#include <vector>

#include "numerics/format.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::oracle {

// The StructuredBoundFn of op hc_residual: per element of h and x_next, for
// a kernel that computes sigma in `acc` within kSigmoidRel (relative) plus
// kSigmoidAbs (absolute, where e^-|a| is subnormal), C = 2 sigma, and each
// output element as one sum of n (h) or n + 1 (x_next) products in any order,
// stored once in its output format.
std::vector<std::vector<double>> hc_residual_bound(const Params& params, const std::vector<TensorView>& in,
                                                   const std::vector<std::vector<double>>& exact, Format acc,
                                                   const std::vector<Format>& out);

// mhc_residual: the same, B being the kernel's own FP32 Sinkhorn projection
// of b_logits, off the exact B by at most the sinkhorn bound (with no output
// rounding: B is used in FP32); output b gets the sinkhorn bound itself.  A
// token whose projection has no finite bound (a line that FP32 may lose to
// underflow) gets +inf on its x_next.
std::vector<std::vector<double>> mhc_residual_bound(const Params& params, const std::vector<TensorView>& in,
                                                    const std::vector<std::vector<double>>& exact, Format acc,
                                                    const std::vector<Format>& out);

// The sigmoid model of both bounds, for a kernel in `acc`:
// |sigma^ - sigma| <= sigma * sigmoid_rel(acc) + sigmoid_abs(acc).
double sigmoid_rel(Format acc);
double sigmoid_abs(Format acc);

}  // namespace conform::oracle
