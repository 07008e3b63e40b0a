// A-priori error bounds of the row kernels (docs/norm.md and docs/softmax.md
// derive them):
// for a kernel that accumulates in format `acc` and stores into `out`, the
// per-element bound on |kernel - exact| computed from the exact row.  A
// sound kernel's utilization |err| / bound stays below 1.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::oracle {

// The smallest FP32 subnormal: the absolute error of an FP32 product that underflows.
inline constexpr double kEta = 0x1p-149;

// Two tiers of every derived bound (docs/numerics.md, "Two tiers"):
//   rigorous       gamma_k = k u / (1 - k u) bounds |theta_k| for any product
//                  prod (1 + delta_i)^(+-1) of k roundings: a breach is a
//                  certain defect, whatever the summation order;
//   probabilistic  Higham & Mary (2019, Thm 2.4): with independent, mean-zero
//                  roundings |delta_i| <= u, |theta_k| <= gamma~_k(lambda) =
//                  exp(lambda sqrt(k) u + k u^2 / (1 - u)) - 1 except with
//                  probability <= 2 exp(-lambda^2 (1 - u)^2 / 2).
// Every bound function asks gamma() for its accumulation constants, so one
// derivation gives both tiers: gamma() answers for the tier of the innermost
// TierScope on this thread (rigorous when there is none) and, in the
// probabilistic tier, the smaller of the two constants.
enum class Tier { rigorous, probabilistic };
const char* name(Tier t);

// lambda = 10: 2 exp(-49.6) < 6e-22 per constant (u <= 2^-8), so a run that
// evaluates fewer than 1.7e12 constants (elements x accumulation terms; the
// default suite: ~1e11) exceeds one with probability < 1e-9.
inline constexpr double kLambda = 10;
// The failure probability of one probabilistic constant at lambda and u.
double tier_failure_probability(double lambda, double u);

class TierScope {
public:
    explicit TierScope(Tier t);
    ~TierScope();
    TierScope(const TierScope&) = delete;
    TierScope& operator=(const TierScope&) = delete;
    // True when some gamma() in this scope answered with the probabilistic
    // constant (smaller than the rigorous one): the two tiers differ.
    bool sharpened() const;

private:
    Tier prev_;
    bool prev_sharpened_;
};
Tier current_tier();

// gamma_k in the current tier.
double gamma(double k, double u);
double gamma_rigorous(double k, double u);
double gamma_probabilistic(double k, double u, double lambda = kLambda);
// |sum_j theta_j x_j| for independent roundings |theta_j| <= u of terms
// whose magnitudes sum to l1 and whose squares sum to l2^2: u l1 in the
// rigorous tier; in the probabilistic one also at most lambda u l2
// (Hoeffding, the failure probability of one gamma constant).
double rounding_sum(double u, double l1, double l2);

struct RowData {
    std::vector<double> x, w, b;  // exact inputs (w, b empty when the op has none)
    std::vector<double> y;        // exact outputs (the oracle's values)
};

// A bound entry that marks an element the formula leaves undefined (0/0:
// layer_norm of a constant row, rms_norm and l2_norm of a zero row, with
// eps = 0; docs/norm.md "Special values"): any result is consistent with a
// backward-stable kernel, so the verdict does not judge it.
inline constexpr double kUndefined = -INFINITY;

std::vector<double> row_bound(const OpSpec& op, const Params& p, const RowData& row, Format acc, Format out);

// Structured ops: one bound vector per output, from the exact inputs and the
// oracle's values (exact[o][i]), for a kernel accumulating in `acc` and
// storing output o in out[o].  An empty vector for an output means "no
// derived bound": that output is held to 1 ulp.
using StructuredBoundFn = std::vector<std::vector<double>> (*)(const Params&, const std::vector<TensorView>& in,
                                                                const std::vector<std::vector<double>>& exact,
                                                                Format acc, const std::vector<Format>& out);
StructuredBoundFn find_structured_bound(const std::string& op);

}  // namespace conform::oracle
