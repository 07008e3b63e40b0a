// The extras of the gated linear-attention block (docs/model.md,
// "Linear-attention block extras"): the short causal convolution of q, k, v
// (Gated DeltaNet, KDA: L2Norm(SiLU(ShortConv(W x)))) and KDA's
// lower-bounded decay g = g_min sigmoid(e^A z) (seed 001 eq 1.22) and
// Qwen3-Next's g = -e^A softplus(z + b).  Each has
// its FP64-tier value, the FP32 kernel of the executor and the local budget
// of a kernel that computes it in FP32 (derivations in docs/diverge.md,
// "Budgets").  The output gate (eq 1.23) is made of existing steps.
#pragma once
#include <cstdint>
#include <optional>

#include "model/run.hpp"
#include "model/step_bound.hpp"
#include "numerics/tensor.hpp"

namespace conform::model {

// Depthwise convolution over tokens, x [T, F], weight w [F, K]:
//   y[t, f] = sum_j w[f, j] x[t - (K - 1) + j, f]      (causal: padding K - 1 on the left)
// rows before 0 read the cache [K - 1, F] (the previous inputs; zeros
// without one).  `same` (the convention conv_padding = same: a centred
// window, padding on both sides, as Conv1d(padding = (K - 1) / 2)) reads
// x[t - (K - 1) / 2 + j], zeros outside [0, T) (the cache before 0).
struct ShortConv {
    const Values& x;
    const Values* cache;  // null: zeros before the first token
    const Values& w;
    bool same = false;
};
Values eval_short_conv(const ShortConv& s);
// What tap j of output element (t, f) reads: an element of x, of the cache,
// or a zero (nullopt).  T, F: x's shape; K taps.
struct ConvTap {
    bool from_cache = false;
    std::int64_t index = 0;  // flat, into x [T, F] or the cache [K - 1, F]
};
std::optional<ConvTap> conv_tap(std::int64_t T, std::int64_t F, std::int64_t K, std::int64_t t, std::int64_t f,
                                std::int64_t j, bool same, bool cached);
// The executor's kernel: FP32 products and sums in tap order, one rounding into `out`.
Tensor run_short_conv(const TensorView& x, const TensorView* cache, const TensorView& w, bool same, Format out);
// gamma_K (FP32) of the taps' |w x| (the matmul budget with K terms), the
// output rounding; the FP64 tier's own gamma_K(2^-53).
StepBound short_conv_bound(const ShortConv& s, const Values& ref, Format in, Format out);

// g[t, i] = g_min sigmoid(e^{A_h} z[t, i]), A [H], h = i / (width / H) (one
// decay per head, or per key channel of the head for KDA).
struct BoundedDecay {
    const Values& z;
    const Values& a;
    double g_min = -5;
};
Values eval_bounded_decay(const BoundedDecay& d);
// FP32: e^A, the product, a sigmoid without overflow (e / (1 + e) below 0),
// the product by g_min, one rounding into `out`.
Tensor run_bounded_decay(const TensorView& z, const TensorView& a, double g_min, Format out);
StepBound bounded_decay_bound(const BoundedDecay& d, const Values& ref, Format out);

// g[t, i] = -e^{A_h} softplus(z[t, i] + b_h), A, b [H], h = i / (width / H)
// (exp_softplus: Mamba-2's and Qwen3-Next's A_log and dt_bias).
struct SoftplusDecay {
    const Values& z;
    const Values& a;
    const Values& b;
};
Values eval_softplus_decay(const SoftplusDecay& d);
// FP32: z + b, softplus as max(y, 0) + log1p(e^-|y|), e^A, the product, one
// rounding into `out`.
Tensor run_softplus_decay(const TensorView& z, const TensorView& a, const TensorView& b, Format out);
StepBound softplus_decay_bound(const SoftplusDecay& d, const Values& ref, Format out);

}  // namespace conform::model
