// A-priori error bounds of an exp-domain Sinkhorn kernel that runs in FP32
// (docs/sinkhorn.md, "Error bound", derives them):
//   * per element, |b_kernel - b_exact| for the same iteration count;
//   * the column sums after the final column normalization.
#pragma once
#include <cstdint>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::oracle {

// The kernels' exp, in ulps of the arithmetic: e_exp = 4u (vf::exp_neg measures
// 1.22 ulp, glibc expf < 1 ulp). Sinkhorn's and mHC's bounds both use it.
inline constexpr double kExpUlps = 2;

// The StructuredBoundFn of op `sinkhorn` (find_structured_bound): one bound
// per element of b, for a kernel computing exp(L - row max) (exp within 2
// ulps), then `iters` times row sums and column sums of nonnegative terms in
// any order and b = v / sum (one rounding), in `acc` (FP32), storing in out[0].
// Poisoned matrices (NaN or +inf logit) get 0 (the class must match); a
// matrix whose FP32 iteration can lose a whole line to underflow gets +inf
// (the verdict then checks the class only: finite, not NaN).
std::vector<std::vector<double>> sinkhorn_bound(const Params& params, const std::vector<TensorView>& in,
                                                const std::vector<std::vector<double>>& exact, Format acc,
                                                const std::vector<Format>& out);

// |sum_i b_ij - 1| after the final column normalization of a column of n
// entries (whose sum was not 0), stored in `out`: the rounding of that one
// step, (1 + u)(1 + u_out) / (1 - gamma_{n-1}) - 1, plus the absolute
// subnormal roundings.  It holds whatever the earlier iterations did.  With
// an eps guard (`guarded`) the columns sum to S / (S + eps) < 1 exactly, and
// the bound is of sum_i b_ij - 1 from above only (one more rounding: the
// addition of eps).
double sinkhorn_column_sum_bound(std::int64_t n, Format acc, Format out, bool guarded = false);

}  // namespace conform::oracle
