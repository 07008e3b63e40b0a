// Oracle of multi-head latent attention (MLA, DeepSeek-V2/V3; seed 001 §1.3,
// docs/mla.md), in the explicit and in the absorbed ("weight-folded") form.
//
// Per new token t (hidden state h_t, position offset + t) and head i:
//   c_t   = W_dkv h_t                          joint KV latent        [d_c]
//   k_t^R = RoPE(W_kr h_t, offset + t)         decoupled rope key     [d_r], shared by all heads
//   q_{t,i} = W_q[i] h_t = [q^C ; q^R_pre],    q^R = RoPE(q^R_pre, offset + t)
// Keys j = 0..Lc+L-1 are the cached tokens followed by the new ones.
// Explicit form:  k^C_{j,i} = W_uk[i] c_j,  v_{j,i} = W_uv[i] c_j,
//   s_j = scale (q^C . k^C_{j,i} + q^R . k^R_j),  o = sum_j p_j v_{j,i}.
// Absorbed form:  a = W_uk[i]^T q^C  [d_c],
//   s_j = scale (a . c_j + q^R . k^R_j),  o = W_uv[i] (sum_j p_j c_j).
// Both are the same real number (associativity of the matrix products); the
// tests check agreement to oracle precision.  o is the per-head output BEFORE
// the output projection W_o.
#pragma once
#include <cstdint>
#include <vector>

#include "oracle/rope.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

enum class MlaForm {
    explicit_kv = 0,  // materialize k^C and v per head from the latent
    absorbed = 1,     // fold W_uk into the query and W_uv after the softmax average
};

// Exact inputs of one MLA evaluation (row-major, see docs/mla.md "Layout").
struct MlaProblem {
    std::int64_t heads = 0, tokens = 0, cached = 0;  // H, L, Lc
    std::int64_t d_model = 0, d_c = 0, d_nope = 0, d_r = 0, d_v = 0;
    std::vector<Real> h;         // [L, d_model]
    std::vector<Real> w_dkv;     // [d_c, d_model]
    std::vector<Real> w_uk;      // [H, d_nope, d_c]
    std::vector<Real> w_uv;      // [H, d_v, d_c]
    std::vector<Real> w_q;       // [H, d_nope + d_r, d_model]
    std::vector<Real> w_kr;      // [d_r, d_model]
    std::vector<Real> c_cache;   // [Lc, d_c]   (empty when Lc = 0)
    std::vector<Real> kr_cache;  // [Lc, d_r]   rotated or not, see MlaConfig::cache_rotated
};

struct MlaConfig {
    MlaForm form = MlaForm::explicit_kv;
    bool causal = true;          // bottom-right: new token t sees keys j <= Lc + t
    Real scale;                  // resolved: param 'scale' or 1/sqrt(d_nope + d_r)
    RopeConfig rope;             // rotary_dim = d_r, pairing, base
    std::int64_t offset = 0;     // position of the first new token
    bool cache_rotated = true;   // k_r_cache holds RoPE(W_kr h_j) at its own position
};

// Latent and rope key of the new tokens, as a kernel would append them to the
// KV cache: c [L, d_c], k_r [L, d_r] rotated at position offset + t.
struct MlaCacheEntries {
    std::vector<Real> c_kv, k_r;
};
MlaCacheEntries mla_cache_entries(const MlaProblem& p, const MlaConfig& c);

// The two forms on an already-read problem (MPFR at the current precision).
// Outputs: o [H, L, d_v], lse [H, L] (natural log of the softmax denominator
// of the scaled logits; -inf for a row with no visible key, whose o is 0).
OpOutputs mla_solve(const MlaProblem& p, const MlaConfig& c);

// Tensor plumbing: layout checks (std::invalid_argument naming 'mla', the
// input and the dimension) and parameter parsing.
MlaProblem read_mla_problem(const std::vector<TensorView>& in);
MlaConfig read_mla_config(const Params& params, const MlaProblem& p);

// Registry evaluator (oracle/structured.hpp interface).
// Inputs: h [L, d_model], W_dkv [d_c, d_model], W_uk [H, d_nope, d_c],
//   W_uv [H, d_v, d_c], W_q [H, d_nope + d_r, d_model], W_kr [d_r, d_model],
//   and optionally (both or neither) c_kv_cache [Lc, d_c], k_r_cache [Lc, d_r].
// Params (defaults in brackets): form [0 explicit, 1 absorbed], causal [1],
//   scale [0 = 1/sqrt(d_nope + d_r)], base [10000], pairing [0 interleaved,
//   1 half-split], offset [0 = position of the first new token; integer
//   >= 0], cache_rotated [1: k_r_cache already rotated; 0: raw W_kr h, cached
//   token j sits at position offset - Lc + j, which must be >= 0].
// Outputs: o [H, L, d_v], lse [H, L].
OpOutputs eval_mla(const Params& params, const std::vector<TensorView>& in);

}  // namespace conform::oracle
