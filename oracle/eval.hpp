// The oracle as the rest of conform calls it: evaluate an op on exact input
// tensors, return the correctly rounded output in a target format and the
// high-precision value of every element.
//
// Correct rounding follows Ziv: each row is evaluated at P and 2P bits
// (P = 128 first); an element is accepted when every value within twice the
// P/2P difference (plus the 2P evaluation's own rounding slack) rounds to the
// same pattern.  Otherwise P doubles, up to kMaxBits; a value still straddling
// a boundary there is an exact midpoint for every practical purpose and is
// rounded as computed (ties to even).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "numerics/op.hpp"
#include "numerics/tensor.hpp"
#include "oracle/real.hpp"

namespace conform::oracle {

constexpr unsigned kMaxBits = 4096;

struct Result {
    Tensor rounded;             // correctly rounded into the requested format
    std::vector<double> exact;  // the oracle value, rounded to double (for error sizes)
    unsigned max_bits = 0;      // highest precision any element needed
    std::int64_t recomputed = 0;  // elements that needed more than 2P
};

// Inputs are matched to op.inputs by position; shapes follow docs/<family>.md
// (row ops: x is [..., n], weight/bias are [n]; elementwise: same shapes).
// Throws std::invalid_argument with the offending input's name on a mismatch.
Result evaluate(const OpSpec& op, const Params& params, const std::vector<TensorView>& inputs, Format out);

// One row of the op at the current working precision (for self-checks and
// the exhaustive sweeps).  `in` holds the row of each input tensor.
std::vector<Real> eval_row(const OpSpec& op, const Params& params, const std::vector<std::vector<Real>>& in);

// Convenience for scalar ops: op(x) or op(gate, up) at `bits` of precision.
Real eval_scalar(const std::string& op, const Params& params, const std::vector<double>& args,
                 unsigned bits = kDefaultBits);

// Correctly rounded scalar result (Ziv), as a pattern of `out`.
std::uint64_t round_scalar(const std::string& op, const Params& params, const std::vector<double>& args, Format out);

void check_shapes(const OpSpec& op, const std::vector<TensorView>& inputs);

// Ziv's acceptance test for one element: a at `bits` and b at 2 * bits of
// precision.  The pattern of `out` that every value within 2|a - b| (plus the
// 2P evaluation's own rounding slack) of b rounds to, or nullopt when that
// interval straddles a rounding boundary (or the special classes disagree).
std::optional<std::uint64_t> ziv_accept(const Real& a, const Real& b, unsigned bits, Format out);

}  // namespace conform::oracle
