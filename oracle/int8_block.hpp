// The SmoothQuant precision flow of one pre-norm decoder block (seed 000:
// projections and attention BMMs in INT8; residual, LayerNorm, softmax and
// activation in FP16), against the all-real block (docs/int8.md "int8_block").
//
//   x = LN1(h);  q, k, v = x W_q, x W_k, x W_v;  per head S = q kᵀ / sqrt(d_h)
//   (causal), P = softmax(S), o = P v;  u = h + o W_o;
//   out = u + ReLU(LN2(u) W_1) W_2.
//
// In the flow every product is an INT8 GEMM (int8_gemm of oracle/int8.hpp:
// the left operand quantized per token, the right one per output channel,
// exact integer accumulation, dequantized by the outer product of scales and
// rounded to FP16), and every other stage is computed exactly and rounded to
// FP16.  Both run on the FP64 tier: its rounding error (gamma_K sum |x||w| per
// product) is far below the quantization noise and is added to the budgets.
//
// The budget is local, stage by stage (the divergence analysis of DESIGN.md):
// a GEMM applied to the flow's own FP16 input X and the real right operand W
// must come out within
//     N_ij = sum_k ( s_x(i)/2 |W_kj| + |X_ik| s_w(j)/2 + s_x(i) s_w(j)/4 ) + 1/2 ulp_fp16(y_ij)
// of X W (|X~ - X| <= s_x/2 and |W~ - W| <= s_w/2: dynamic amax scales never
// saturate), times the GEMM's output scale (1/sqrt(d_h) for the scores).  The
// end-to-end error against the all-real block is measured and reported (it
// compounds through softmax and the norms, which a local budget does not
// pretend to bound).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace conform::oracle {

struct BlockWeights {
    std::int64_t d = 0, heads = 1, ffn = 0;
    double eps = 1e-5;
    std::vector<double> ln1_g, ln1_b, ln2_g, ln2_b;  // [d]
    std::vector<double> wq, wk, wv, wo;              // [d, d]
    std::vector<double> w1;                          // [d, ffn]
    std::vector<double> w2;                          // [ffn, d]
};

// All-real block on the FP64 tier: h [T, d] -> out [T, d].
std::vector<double> block_real(const std::vector<double>& h, std::int64_t t, const BlockWeights& w);

// One INT8 GEMM of the flow against its local budget.
struct GemmStage {
    std::string name;       // "q", "k", "v", "scores.h0", "pv.h0", "o", "fc1", "fc2"
    double max_error = 0;   // max |flow - exact(flow input)|
    double max_util = 0;    // max error / budget
};

struct FlowResult {
    std::vector<double> out;        // [T, d], FP16 values
    std::vector<GemmStage> stages;  // in execution order
};

// The INT8 + FP16 flow: h (FP16 values) [T, d] -> out [T, d].
FlowResult block_int8_flow(const std::vector<double>& h, std::int64_t t, const BlockWeights& w);

// SmoothQuant folded into the weights: for the LN1 -> W_q/W_k/W_v and LN2 ->
// W_1 products, s_j = max|x_j|^alpha / max_k |W_jk|^(1 - alpha) over the
// calibration activations `h` (LN outputs), LN's gamma and beta divided by s
// and the weights' rows multiplied by s: the real block is unchanged.
BlockWeights smooth_block(const BlockWeights& w, const std::vector<double>& h, std::int64_t t, double alpha);

}  // namespace conform::oracle
