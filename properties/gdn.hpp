// Case layout of the gated delta-rule generator (properties/gdn.cpp), for
// tests that build their own cases: CaseSpec::dims =
// {T, H, d_k, d_v, has_state, DeltaGates, DeltaBetas[, sequences[, DeltaKeys]]}.
#pragma once

namespace conform::props {

enum DeltaGates {
    mixed_gates,      // the op's parameterization (KDA lower-bounded sigmoid, GDN negative softplus), 1/8 exact 0
    saturated_gates,  // g = g_min on every token (and channel): KDA -5, GDN ln 1e-12
    unit_gates,       // g = 0 (alpha = 1)
    burst_gates,      // runs of 5 saturated, 5 unit, 5 parameterized gates; 1/16 resets (g = -inf)
    near_one_gates,   // alpha = 1 - 2^-3 .. 1 - 2^-14 (long memory)
};
enum DeltaBetas {
    uniform_betas, zero_betas, one_betas, mixed_betas,
    near_one_betas,  // beta = 1 - 2^-2 .. 1 - 2^-12 (and 1 at times): every token almost overwrites its key direction
};
enum DeltaKeys {
    unit_keys,           // independent directions (of unit norm when the op does not normalize them)
    near_parallel_keys,  // one direction per head plus 10^-1 .. 10^-4 noise: the chunk's Gram K K^T is all ~1
};

}  // namespace conform::props
