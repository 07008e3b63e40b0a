// Oracle of Kimi Delta Attention (seed 001 §1.6.3, eqs. 1.21-1.26;
// docs/gdn.md): the gated delta rule with one decay per key channel,
//   S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T,  o~_t = S_t^T q_t,
// alpha_t = e^{g_t} in R^{d_k} scaling the ROWS of S (the key channels).
// Problems, results, context-parallel composition and varlen packing are in
// oracle/delta_rule.hpp (shared with GDN), decay gates in oracle/decay.hpp.
#pragma once
#include "oracle/delta_rule.hpp"

namespace conform::oracle {

// p.decay must be DecayShape::per_channel (g [T, H, d_k]).  Both return
// o~ as y [T, H, d_v] and the final state [H, d_k, d_v].
template <class R>
DeltaResult<R> kda_recurrent(const DeltaProblem<R>& p);
// Chunks of `chunk` tokens (any size >= 1; the last chunk may be shorter).
template <class R>
DeltaResult<R> kda_chunkwise(const DeltaProblem<R>& p, std::int64_t chunk);

// The output gate of eq. 1.23, y_t = W_o [sigmoid(W_g x_t) ⊙ RMSNorm(o~_t)].
// RMSNorm is per head over its d_v values with one weight vector shared by
// the heads (the FLA / Kimi layout), rms = sqrt(mean(o~^2) + eps).
template <class R>
struct KdaGateProblem {
    std::int64_t tokens = 0, heads = 0, d_v = 0, d_model = 0, d_out = 0;
    std::vector<R> o;       // [T, H, d_v]        o~, the delta-rule readout
    std::vector<R> x;       // [T, d_model]       the layer input the gate reads
    std::vector<R> w_g;     // [H * d_v, d_model] gate projection (full rank)
    std::vector<R> norm_w;  // [d_v]              RMSNorm weight
    std::vector<R> w_o;     // [d_out, H * d_v]   output projection
    double eps = 1e-6;
};
// Returns y [T, d_out].
template <class R>
std::vector<R> kda_output_gate(const KdaGateProblem<R>& p);

// Structured-op evaluators, as eval_gdn_* (oracle/gdn.hpp) with
// g [T, H, d_k].
OpOutputs eval_kda_recurrent(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_kda_chunkwise(const Params& params, const std::vector<TensorView>& in);

}  // namespace conform::oracle
