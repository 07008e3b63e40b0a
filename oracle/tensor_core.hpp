// The tensor cores' accumulation model the bounds assume (docs/attention.md,
// "Tensor-core accumulation"): mma.sync's block FMA d = c + sum_{k<K} a_k b_k
// with exact products, every term truncated below the largest one's
// exponent (no guard bits) and the sum truncated to FP32.  Used by the
// attention bound and by the gated delta rule's tensor-core state update.
#pragma once
#include <cmath>

#include "oracle/bound.hpp"  // kEta

namespace conform::oracle {

// The error of a chain of n block FMAs of k products each, relative to the
// sum of its terms' magnitudes, and its absolute part (every block's final
// truncation may fall in FP32's subnormal range).  Truncation errors all
// lean toward zero, so no probabilistic tier: the worst case in both.
struct ChainError {
    double rel, abs;
};
// A block with k_b products errs by (k_b + 2) 2^-23 of its terms, so n
// blocks holding `products` products in all: 2u (products + 2n), grown by
// (1 + c)^n for the partial sums carried as c.
inline ChainError block_fma_chain(int k, double products, double n) {
    constexpr double u = 0x1p-24;       // FP32 unit roundoff
    const double c = 2 * (k + 2) * u;  // (k + 2) 2^-23 per full block FMA
    const double grow = std::pow(1 + c, n);
    return {2 * u * (products + 2 * n) * grow, n * kEta * grow};
}

}  // namespace conform::oracle
