// The tensor cores' accumulation the bounds assume (docs/attention.md,
// "Tensor-core accumulation"): mma.sync's block FMA d = c + sum_{k<K} a_k b_k
// as measured on an H200 (impls/cuda/emu/mma_model.hpp): exact products,
// every term truncated below 2^(E - 25) where E, estimated from the inputs'
// exponent fields, can exceed the largest term's exponent when a factor is
// subnormal, and the sum truncated to FP32.  Used by the attention bound and
// by the gated delta rule's tensor-core state update.
#pragma once
#include <algorithm>
#include <cmath>

#include "oracle/bound.hpp"  // kEta

namespace conform::oracle {

// The error of a chain of n block FMAs of k products each, relative to the
// sum of its terms' magnitudes; its absolute part (every block's final
// truncation may fall in FP32's subnormal range, and a subnormal c's
// exponent counts as -126); and `sub`, the absolute part a subnormal factor
// adds, per unit of M = the largest |a|, |b| of the chain (at least 2^emin):
// the caller multiplies it by its M.  Truncation errors all lean toward
// zero, so no probabilistic tier: the worst case in both.
struct ChainError {
    double rel, abs, sub;
};
// A block with k_b products errs by less than (k_b + 1) 2^(E - 25) + ulp(d),
// 2^E <= sum |t| + 2^emin M (+ 2^-126 for a subnormal c): at most
// (k_b + 2) 2^-23 of its terms plus (k_b + 1) 2^(emin - 25) M; n blocks
// holding `products` products in all: 2u (products + 2n), grown by
// (1 + c)^n for the partial sums carried as c.  emin: the inputs' smallest
// normal exponent, -14 for FP16, -126 for BF16.
inline ChainError block_fma_chain(int k, double products, double n, int emin) {
    constexpr double u = 0x1p-24;       // FP32 unit roundoff
    const double c = 2 * (k + 2) * u;  // (k + 2) 2^-23 per full block FMA
    const double grow = std::pow(1 + c, n);
    return {2 * u * (products + 2 * n) * grow, n * (kEta + (k + 1) * 0x1p-151) * grow,
            n * (k + 1) * std::ldexp(1.0, emin - 25) * grow};
}

// The smallest normal exponent of a block FMA's 16-bit inputs (-14 for
// FP16, -126 for BF16; FP16's, the larger, for any other).
inline int block_fma_emin(Format f) { return info(f == Format::bf16 ? Format::bf16 : Format::fp16).emin; }

// M of a chain: the largest magnitude of its operands, at least 2^emin.
inline double chain_operand_bound(double largest, int emin) { return std::max(largest, std::ldexp(1.0, emin)); }

}  // namespace conform::oracle
