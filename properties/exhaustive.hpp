// Exhaustive sweeps over 16-bit formats: every FP16 or BF16 input of a unary
// kernel, and every (gate, up) pair of a gated kernel (2^32 pairs).  The
// gated reference uses the factorisation h = G(gate) * U(up): each factor is
// computed once per pattern by the MPFR oracle as a double-double, their
// product is rounded with round_dd, and the rare undecided pair falls back to
// the oracle itself.
#pragma once
#include <functional>

#include "impls/registry.hpp"
#include "reports/model.hpp"

namespace conform::props {

struct SweepOptions {
    int threads = 0;  // 0: hardware concurrency
    std::function<void(double fraction)> progress;
    std::function<bool()> cancelled;  // checked between gate rows: an interrupted sweep stops early
};

// Every pattern of k.in as the single input of a unary (or elementwise) op.
report::ExhaustiveResult sweep_unary(const KernelInfo& k, const Params& p, const SweepOptions& opt = {});

// Every (gate, up) pair for situ_glu (or swiglu / geglu / swiglu_clamp, whose
// hidden is also a product of one-argument factors).
report::ExhaustiveResult sweep_gated(const KernelInfo& k, const Params& p, const SweepOptions& opt = {});

}  // namespace conform::props
