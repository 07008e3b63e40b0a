// Case layout of the gated delta-rule generator (properties/gdn.cpp), for
// tests that build their own cases: CaseSpec::dims =
// {T, H, d_k, d_v, has_state, DeltaGates, DeltaBetas}.
#pragma once

namespace conform::props {

enum DeltaGates {
    mixed_gates,      // the op's parameterization (KDA lower-bounded sigmoid, GDN negative softplus), 1/8 exact 0
    saturated_gates,  // g = g_min on every token (and channel): KDA -5, GDN ln 1e-12
    unit_gates,       // g = 0 (alpha = 1)
    burst_gates,      // runs of 5 saturated, 5 unit, 5 parameterized gates; 1/16 resets (g = -inf)
    near_one_gates,   // alpha = 1 - 2^-3 .. 1 - 2^-14 (long memory)
};
enum DeltaBetas { uniform_betas, zero_betas, one_betas, mixed_betas };

}  // namespace conform::props
