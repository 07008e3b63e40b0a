// Oracle of the matrix product (docs/matmul.md): y = a b, every element the
// exact sum of its K exact products, correctly rounded once.  The sum is
// MPFR's mpfr_sum, correctly rounded at the working precision whatever the
// cancellation (a fixed-precision running sum is not: 2^200 + 2^-200 -
// 2^200 loses its answer at every precision below 400 bits, and Ziv's
// P/2P comparison cannot tell).
#pragma once
#include <vector>

#include "oracle/bound.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

OpOutputs eval_matmul(const Params& params, const std::vector<TensorView>& in);

// |kernel - exact| for every y_ij of a kernel that forms each product
// exactly or rounded once in `acc` and adds them in any order in `acc`,
// then rounds once into out[0] when that is narrower (docs/matmul.md,
// "Error budget"): gamma_K(u) S_ij + K eta/2 (+ half an output ulp), S_ij =
// sum_k |a_ik b_kj|.  NaN (compare classes only) where the exact value is
// not finite; kUndefined (not judged) where the finite terms' magnitudes
// could overflow acc in some order.
// One dot product of K terms whose finite magnitudes sum to s, formed in
// `acc` in any order (docs/matmul.md, "Error budget"): |err| <= gamma_K s +
// K eta/2 (gamma in the current tier), and whether some order may overflow
// (s (1 + gamma_K) reaches acc's overflow threshold, rigorous gamma): then
// the error is not bounded at all.
struct DotBudget {
    double err = 0;
    bool may_overflow = false;
};
DotBudget dot_budget(double s, std::int64_t k, Format acc);

std::vector<std::vector<double>> matmul_bound(const Params& params, const std::vector<TensorView>& in,
                                              const std::vector<std::vector<double>>& exact, Format acc,
                                              const std::vector<Format>& out);

}  // namespace conform::oracle
