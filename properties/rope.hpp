// RoPE measurements beyond pass/fail properties (docs/rope.md).
#pragma once
#include <cstdint>

#include "impls/registry.hpp"
#include "reports/model.hpp"

namespace conform::props {

// The relative-position invariance error of kernel k along position: for
// x = 2^0 .. 2^20, |S(x + 5, x) - S(5, 0)| with S(m, n) = <R(m)q, R(n)k>
// taken exactly from the kernel's rotated vectors (head dim 64, base 1e4,
// full rotary), against the budget B(x + 5, x) + B(5, 0) derived from the
// per-element bounds of the table precision.  q and k are N(0, 1) from seed.
report::Curve rope_invariance_curve(const KernelInfo& k, std::uint64_t seed);

}  // namespace conform::props
