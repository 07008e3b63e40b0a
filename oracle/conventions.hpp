// Declared conventions: the documented alternatives to the oracle's choices
// that a kernel (or a dump) may declare, and the reference they imply.
//
//   masked_row = zero (default) | nan
//     An empty row — softmax over only -inf (or n = 0), attention for a query
//     that sees no key — is the empty distribution: the oracle gives 0 (and
//     lse -inf).  A literal softmax(s) @ v computes -inf - (-inf) and gives
//     NaN; a kernel declaring `nan` is held to NaN in every output of that
//     row (o and lse) instead, compared as a special-value class.
//
// Unknown keys or values are errors: a declaration the verdict ignored would
// silently judge the kernel against the wrong reference.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::oracle {

using Conventions = std::map<std::string, std::string>;

// The conventions op `op` accepts, as "key = default | alternative ...".
std::vector<std::string> conventions_for(const std::string& op);

// Throws std::invalid_argument naming the key and the accepted values.
void check_conventions(const Conventions& c);

// The reference of op `op` under conventions c: rewrites the correctly
// rounded outputs and their exact values in place (outputs in op order,
// exact[o][i] for element i of output o).  `in` are the op's inputs.
void apply_conventions(const std::string& op, const Conventions& c, const std::vector<TensorView>& in,
                       std::vector<Tensor>& rounded, std::vector<std::vector<double>>& exact);

// The `ieee` accuracy profile (properties/profile.hpp): elementwise op `op`
// evaluated literally in IEEE double arithmetic (silu(x) = x * sigmoid(x),
// so silu(-inf) = -inf * 0 = NaN) when one of its arguments is infinite;
// nullopt when none is, or for ops that are not elementwise.  The oracle
// itself follows the limits (docs/activation.md, "Special values").
std::optional<double> ieee_special(const std::string& op, const Params& params, const std::vector<double>& args);

}  // namespace conform::oracle
