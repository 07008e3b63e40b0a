// The per-element error bound of FP32-state chunkwise gated delta-rule
// kernels (GDN and KDA), derived in docs/gdn.md ("Error bound of the
// chunkwise kernels").  A sound kernel's utilization |kernel - exact| / bound
// stays <= 1.
//
// The bound is a forward error analysis of the kernels' algorithm
// (impls/cpu/gdn.cpp): per chunk, the local error of the kernel's arithmetic
// on the state it actually entered with (computed decay factors, Gram
// matrices, forward substitution, products), plus the error carried in by
// that state, transported through the exact chunk map, whose transitions
// have 2-norm <= rho_t = max(1, |1 - beta_t |k_t|^2|) max_c alpha_{t,c}
// (<= 1 in the models' domain).  Magnitudes (the exact state, V~, X =
// (I + Diag(beta) L)^-1, |A|, |L|) are recomputed in double from the exact
// inputs; their own relative error (~1e-15) moves the bound by as much.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::oracle {

// What the kernel declares about itself.
// A kernel computing in a wider format than FP32 (acc; the double-precision
// mutants) is held to the same FP32-state budget plus one rounding of each
// output into its storage format.
struct DeltaErrorModel {
    bool per_channel = false;         // kda: one log-decay per key channel; gdn: one per head
    Format out = Format::fp32;        // storage format of y
    Format state_out = Format::fp32;  // storage format of the returned state
    Format acc = Format::fp32;        // the kernel's arithmetic
    double u = 0x1p-24;               // unit roundoff of the state and the arithmetic (FP32)
    double e_exp = 4 * 0x1p-24;       // relative error of its exp (expf, the AVX2 polynomial: <= 2 ulp)
    std::vector<std::int64_t> chunk_starts;  // first token of every chunk: 0 < ... < T (empty: regular chunks of param chunk)
    // The state update S' = d S + K_e^T V~ on tensor cores, as a kernel
    // declares it (declared.update_unit, declared.update_eta, declared.mma_k):
    // K_e and V~ rounded into a narrower format first (its unit roundoff, and
    // half its smallest subnormal: the absolute error of a subnormal result;
    // 0: FP32 operands, no rounding), and the sum a chain of block FMAs of
    // mma_k products with d S as the accumulator (0: FP32 sums).
    double update_unit = 0, update_eta = 0;
    int mma_k = 0;
};

// The state update's declaration of a kernel, from its parameters
// "declared.<key>" (the registry's bound) or its KernelInfo::declared
// (absent keys: 0, the FP32 update).
void read_declared_update(DeltaErrorModel& m, double update_unit, double update_eta, double mma_k);
void read_declared_update(DeltaErrorModel& m, const std::map<std::string, double>& declared);

struct DeltaBound {
    std::vector<double> y;      // [T, H, d_v]
    std::vector<double> state;  // [H, d_k, d_v]
};

// Chunk starts 0, C, 2C, ... below T.
std::vector<std::int64_t> regular_chunk_starts(std::int64_t tokens, std::int64_t chunk);

// Bounds on |kernel - exact| for y and the final state.  params and in as
// the oracle evaluators take them (q, k, v, g, beta, optional
// initial_state; l2norm, l2_eps, scale, chunk); exact_y the oracle's y (its
// magnitude enters the output half-ulp).  Never NaN: where a NaN input makes
// a magnitude NaN, the exact value is NaN too (judged by class) and the
// bound is +inf.
DeltaBound delta_rule_bound(const Params& params, const std::vector<TensorView>& in,
                            const std::vector<double>& exact_y, const DeltaErrorModel& model);

// The finite-range envelope of the scaled chunk form (Q e^G)(K e^-G)^T, G
// the cumulative log-decay from the chunk start: the largest chunk C with
// C |g_min| < ln(largest finite value of f), i.e. e^{-G} of C saturated
// gates still finite (0: not even one token).  docs/gdn.md has the table.
std::int64_t scaled_form_max_chunk(Format f, double g_min);

// StructuredBoundFn of the registry ops gdn and kda (the cpu kernels' model:
// regular chunks of param chunk, exp within 2 ulp).
std::vector<std::vector<double>> gdn_bound(const Params& params, const std::vector<TensorView>& in,
                                           const std::vector<std::vector<double>>& exact, Format acc,
                                           const std::vector<Format>& out);
std::vector<std::vector<double>> kda_bound(const Params& params, const std::vector<TensorView>& in,
                                           const std::vector<std::vector<double>>& exact, Format acc,
                                           const std::vector<Format>& out);

}  // namespace conform::oracle
