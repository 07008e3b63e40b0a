// Attention checks that judge a given case (properties/attention.cpp).
#pragma once
#include <string>

#include "impls/registry.hpp"
#include "properties/generators.hpp"

namespace conform::props {

// Quantizes the mask (input 3; 4 of gated_attention) of case c to multiples of ulp(2|shift|) in its
// format, or in `declared` where that is coarser (a plug-in's F16 mask beside F32 q, k, v), and
// returns mask + shift, which is then exact in both (-inf stays -inf).
Tensor shift_mask(Case& c, double shift, Format declared = Format::fp64);

// The mask (input 3; 4 of gated_attention) of case c quantized to multiples of ulp(2|shift|), so
// that mask + shift is exact, and kernel k judged against the oracle on the
// quantized mask and on mask + shift: "" when within the bound on both, else
// the first failure.  softmax(s + c) = softmax(s), so a correct kernel passes
// for every shift; one that takes the row max before adding the mask
// overflows at +1e4.
std::string mask_shift_check(const KernelInfo& k, Case c, double shift);

}  // namespace conform::props
