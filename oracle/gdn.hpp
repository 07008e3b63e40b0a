// Oracle of Gated DeltaNet (seed 001 §1.6.2, eqs. 1.12-1.20; docs/gdn.md):
// per head, one scalar decay alpha_t = e^{g_t} per token,
//   S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,  y_t = S_t^T q_t,
// S in R^{d_k x d_v}.  Problems, results, context-parallel composition and
// variable-length packing are in oracle/delta_rule.hpp (shared with KDA);
// decay parameterizations in oracle/decay.hpp.
#pragma once
#include "oracle/delta_rule.hpp"

namespace conform::oracle {

// p.decay must be DecayShape::per_head (g [T, H]).  Both return y [T, H, d_v]
// and the final state [H, d_k, d_v]; q and k are used as given (see
// prepare_qk for the L2 normalization and the readout scale).
template <class R>
DeltaResult<R> gdn_recurrent(const DeltaProblem<R>& p);
// Chunks of `chunk` tokens (any size >= 1; the last chunk may be shorter).
template <class R>
DeltaResult<R> gdn_chunkwise(const DeltaProblem<R>& p, std::int64_t chunk);

// Structured-op evaluators (oracle/structured.hpp interface).
// Inputs: q [T, H, d_k], k [T, H, d_k], v [T, H, d_v], g [T, H] (log-decay
//   ln alpha), beta [T, H], optionally initial_state [H, d_k, d_v].
// Params: l2norm [0] (1: q, k <- x / sqrt(|x|^2 + l2_eps) first), l2_eps
//   [1e-6], scale [1; 0 means 1/sqrt(d_k)] on q; chunk [64] (chunkwise only).
// Outputs: y [T, H, d_v], state [H, d_k, d_v].
OpOutputs eval_gdn_recurrent(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_gdn_chunkwise(const Params& params, const std::vector<TensorView>& in);

}  // namespace conform::oracle
