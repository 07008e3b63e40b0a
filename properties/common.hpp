// Pieces shared by the family property files.
#pragma once
#include <string>

#include "properties/generators.hpp"
#include "properties/suite.hpp"

namespace conform::props {

// Bit-identical outputs (any NaN equals any NaN); on a difference, describes
// the first differing element.
bool identical(const Tensor& a, const Tensor& b, std::string* where);

// x * 2^k for every element when all of them stay exactly representable and
// finite; false otherwise (the case is then discarded).
bool scale_exact(const Tensor& x, int k, Tensor* out);

bool is_op(const OpSpec& op, std::initializer_list<const char*> names);

}  // namespace conform::props
