// The oracle side of declared conventions (numerics/conventions.hpp lists
// them): formula conventions (eps placement, L2 form, GELU form, causal
// alignment) are hidden parameters the evaluators read
// (with_convention_params); the ones that change only special rows or
// elements are applied here to the correctly rounded reference:
//
//   masked_row = nan       an empty row -- softmax over only -inf, attention
//     for a query that sees no key -- is NaN in every output of that row (o
//     and lse), as softmax(s) @ v computes -inf - (-inf), instead of the
//     empty distribution (0, lse -inf); compared as a special-value class.
//   special_values = ieee  an elementwise op at an infinite input is the
//     formula evaluated literally in IEEE double (ieee_special) instead of
//     its limit.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "numerics/conventions.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::oracle {

using conform::Conventions;

// The reference of op `op` under the row and element conventions of c
// (masked_row, special_values): rewrites the correctly rounded outputs and
// their exact values in place (outputs in op order, exact[o][i] for element
// i of output o).  `in` are the op's inputs, p its parameters.  Formula
// conventions are not applied here: evaluate with with_convention_params.
void apply_conventions(const std::string& op, const Conventions& c, const Params& p, const std::vector<TensorView>& in,
                       std::vector<Tensor>& rounded, std::vector<std::vector<double>>& exact);

// The `ieee` accuracy profile (numerics/profile.hpp): elementwise op `op`
// evaluated literally in IEEE double arithmetic (silu(x) = x * sigmoid(x),
// so silu(-inf) = -inf * 0 = NaN) when one of its arguments is infinite;
// nullopt when none is, or for ops that are not elementwise.  The oracle
// itself follows the limits (docs/activation.md, "Special values").
std::optional<double> ieee_special(const std::string& op, const Params& params, const std::vector<double>& args);

}  // namespace conform::oracle
