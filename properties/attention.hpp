// Attention checks that judge a given case (properties/attention.cpp).
#pragma once
#include <string>

#include "impls/registry.hpp"
#include "properties/generators.hpp"

namespace conform::props {

// Quantizes the mask (input 3; 4 of gated_attention) of case c to multiples of ulp(2|shift|) in its
// format and returns mask + shift, which is then exact (-inf stays -inf).
Tensor shift_mask(Case& c, double shift);

// The mask (input 3; 4 of gated_attention) of case c quantized to multiples of ulp(2|shift|), so
// that mask + shift is exact, and kernel k judged against the oracle on the
// quantized mask and on mask + shift: "" when within the bound on both, else
// the first failure.  softmax(s + c) = softmax(s), so a correct kernel passes
// for every shift; one that takes the row max before adding the mask
// overflows at +1e4.
std::string mask_shift_check(const KernelInfo& k, Case c, double shift);

}  // namespace conform::props
