// The per-element error bound of FP32-accumulating (flash) attention kernels,
// derived in docs/attention.md ("Error budget for FP32-accumulating (flash)
// kernels").  A sound kernel's utilization |kernel - exact| / bound stays <= 1.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

// What the kernel declares about itself.
struct FlashErrorModel {
    Format out = Format::fp32;      // storage format of o
    Format lse_out = Format::fp32;  // storage format of lse (fp32 for the cpu kernels)
    double e_exp = 4 * 0x1p-24;     // relative error of its exp (vf::exp_neg measures <= 1.22 ulp)
    double e_tanh = 8 * 0x1p-24;    // relative error of its tanh inside the softcap
    double e_log = 4 * 0x1p-24;     // relative error of its log (lse)
    std::int64_t key_block = 0;     // B_k: N_b = ceil(Lk / B_k); 0 = unknown (N_b = Lk)
    // Tensor cores (docs/attention.md, "Tensor-core accumulation"): dot
    // products and P V in block FMAs of mma_k products (0: FP32 operations
    // each rounded to nearest), each off by (mma_k + 2) 2^-23 of its terms'
    // magnitudes (impls/cuda/emu/mma_model.hpp).
    int mma_k = 0;
    // Its key tile when param block sets one (0: whole blocks of mma_k).
    std::int64_t key_tile = 0;
    // The weights rounded to a narrower format before P V: its unit
    // roundoff and half its smallest subnormal spacing (0: not rounded).
    double p_unit = 0, p_eta = 0;
    // The logits rounded to a narrower format after every stage of their
    // arithmetic (the dot product's FP32 sum, the scale, the softcap's
    // divide, tanh and multiply, the mask add: eager attention in BF16 or
    // FP16): its unit roundoff and half its smallest subnormal spacing
    // (0: the logits stay in FP32).
    double s_unit = 0, s_eta = 0;
    // KV splits merged by lse_merge (1: none).
    std::int64_t splits = 1;
};

// Bounds on |kernel - exact| for every element of the attention op's outputs,
// in output order, flattened: the first Hq*Lq*Dv entries bound o (row-major
// [Hq, Lq, Dv]), the next Hq*Lq bound lse.
//   params, in: exactly what the oracle evaluator takes (scale, causal,
//               window, softcap; q, k, v and the optional mask);
//   exact:      the oracle's outputs (oracle::eval_attention) for the same
//               inputs; |o_d| and lse enter the output half-ulp terms.
// The magnitudes p_j, s_j, A_j = sum_d |q_d k_jd|, m, M are recomputed in
// double from the exact inputs (a relative error ~1e-15 in a magnitude moves
// the bound by as much; the bound is no closer than that anyway).
// Special rows: a row with no visible finite logit gets bound 0 (the kernel
// must return exactly o = 0, lse = -inf); a row poisoned by a NaN or +inf
// logit gets NaN (compare special-value classes only).
std::vector<double> attention_bound(const Params& params, const std::vector<TensorView>& in, const OpOutputs& exact,
                                    const FlashErrorModel& model);

// The error model of a kernel from what it declares (params "declared.*":
// key_block, mma_k, p_unit, p_eta, s_unit, s_eta, max_splits; params block
// and splits) and
// its output formats (o, lse).
FlashErrorModel declared_flash_model(const Params& p, const std::vector<Format>& out);

// o and lse of attention as OpOutputs (what attention_bound reads as
// magnitudes) from doubles.
OpOutputs attention_outputs(const std::vector<TensorView>& in, const std::vector<double>& o, const std::vector<double>& lse);

// sigmoid(g) in double without overflow (e^g / (1 + e^g) below 0): the
// magnitude the sigmoid budgets are built on, tiny values kept.
inline double sigmoid_double(double g) { return g >= 0 ? 1 / (1 + std::exp(-g)) : std::exp(g) / (1 + std::exp(g)); }

// The verdict's bound of gated_attention (docs/gated_attention.md, "Error
// budget"): attention_bound of the ungated o, kept in FP32, composed with
// the FP32 sigmoid of g, the product and the output rounding.  in: q, k, v,
// g and the optional mask; exact: the oracle's gated o and lse.  Same
// special rows as attention_bound; a NaN gate logit gets NaN (classes).
std::vector<std::vector<double>> gated_attention_bound(const Params& p, const std::vector<TensorView>& in,
                                                       const std::vector<std::vector<double>>& exact, Format acc,
                                                       const std::vector<Format>& out);

// The verdict's bound of attention: attention_bound under the kernel's
// declared model (declared_flash_model) and the attention_arith convention,
// split into o's and lse's bounds.
std::vector<std::vector<double>> attention_bound_split(const Params& p, const std::vector<TensorView>& in,
                                                       const std::vector<std::vector<double>>& exact, Format acc,
                                                       const std::vector<Format>& out);

// The verdict's bound of sink_attention (docs/sink_attention.md, "Error
// budget"): head by head, attention_bound_split of the attention whose row
// gains the sink as key 0 with a zero key and a zero value row, its logit
// the sink through the additive mask (the causal and window structure
// written into that mask as -inf).  in: q, k, v, sinks and the optional mask.
std::vector<std::vector<double>> sink_attention_bound(const Params& p, const std::vector<TensorView>& in,
                                                      const std::vector<std::vector<double>>& exact, Format acc,
                                                      const std::vector<Format>& out);

// The normalized weights p_j = e^(s_j - m) / l of every query row's visible
// keys (row-major over [Hq, Lq]; hidden keys left out), in double from the
// exact inputs: the terms of the row's sum l (the probabilistic tier's
// absorption check, properties/model_breach.cpp).  Rows without a finite
// visible logit are empty.
std::vector<std::vector<double>> attention_weights(const Params& params, const std::vector<TensorView>& in);

}  // namespace conform::oracle
