// Shape checks that name the op, the input and the dimension: shared by the
// oracle's evaluators and by kernels that validate their inputs the same way
// (kernels do not include oracle/ headers).
#pragma once
#include <stdexcept>
#include <string>

#include "numerics/tensor.hpp"

namespace conform {

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

}  // namespace conform
