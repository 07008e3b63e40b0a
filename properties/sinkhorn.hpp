// Sinkhorn measurements beyond pass/fail properties (docs/sinkhorn.md).
#pragma once
#include <cstdint>

#include "impls/registry.hpp"
#include "reports/model.hpp"

namespace conform::props {

// mHC's identity path over depth: kernel k projects L = 1000 logit matrices
// (n = 4, N(0, 1) from seed) and the curve holds ||B_L ... B_1||_2 of its
// own outputs (upper enclosure at 128 bits) at L = 1, 2, 5, ..., 1000 against
// the product of the layers' derived bounds sqrt((1 + row slack)(1 + column
// bound)), each a consequence of the element bounds and the column sums
// (||B||_2^2 <= ||B||_1 ||B||_inf for a nonnegative B).  The peer series is the unconstrained HC product (B = I + 0.1 N(0, 1)), which
// amplifies exponentially.
report::Curve depth_amplification_curve(const KernelInfo& k, std::uint64_t seed);

}  // namespace conform::props
