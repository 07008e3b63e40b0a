// The oracle interface of the structured ops (RoPE, softmax, attention, ...):
// ops whose outputs are not an elementwise or row-wise map of one input.
//
// An op family provides, for each registry op, an evaluator
//     OpOutputs eval_<op>(const Params& params, const std::vector<TensorView>& in);
// that reads its inputs exactly (from_double of every element), validates
// their shapes against the op's documented layout (std::invalid_argument
// naming the op, the input and the offending dimension), and returns the
// exact-arithmetic value of every output element at the thread's current
// working precision (PrecisionScope).  Correct rounding (Ziv: evaluate at P
// and 2P, accept what both round the same way) is done once, generically, by
// the caller; an evaluator never rounds to a storage format.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "numerics/op.hpp"
#include "numerics/tensor.hpp"
#include "oracle/real.hpp"

namespace conform::oracle {

struct OpOutputs {
    std::vector<std::string> names;                  // the op's output names, in order
    std::vector<std::vector<std::int64_t>> shapes;   // one shape per output
    std::vector<std::vector<Real>> values;           // row-major, numel(shape) each
};

using StructuredEval = OpOutputs (*)(const Params&, const std::vector<TensorView>&);

// Every element of t, exactly, in row-major order.
inline std::vector<Real> read_exact(const TensorView& t) {
    std::vector<Real> v(static_cast<std::size_t>(t.numel()));
    for (std::int64_t i = 0; i < t.numel(); ++i) v[static_cast<std::size_t>(i)] = from_double(t.value(i));
    return v;
}

// Shape checks that name the op, the input and the dimension.
inline void require_rank(const std::string& op, const std::string& input, const TensorView& t, int rank) {
    if (t.rank != rank)
        throw std::invalid_argument(op + ": input '" + input + "' must have rank " + std::to_string(rank) + ", has " +
                                    std::to_string(t.rank));
}
inline void require_dim(const std::string& op, const std::string& input, const TensorView& t, int dim,
                        std::int64_t expected, const std::string& why) {
    if (t.shape[dim] != expected)
        throw std::invalid_argument(op + ": input '" + input + "' dimension " + std::to_string(dim) + " is " +
                                    std::to_string(t.shape[dim]) + ", expected " + std::to_string(expected) + " (" +
                                    why + ")");
}

}  // namespace conform::oracle
