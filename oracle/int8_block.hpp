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
// end-to-end error against the all-real block is measured and reported here;
// the op's int8_block_propagated (below) bounds it soundly, but too loosely
// past the attention to be a gate (docs/int8.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "oracle/structured.hpp"

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
// Columns [c0, c1) of the row-major m [rows, cols], and m transposed.
std::vector<double> column_range(const std::vector<double>& m, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t c1);
std::vector<double> transposed(const std::vector<double>& m, std::int64_t rows, std::int64_t cols);

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

// The registry op int8_block (oracle/int8_block_eval.cpp): inputs h [T, d],
// ln1_g, ln1_b [d], wq, wk, wv, wo [d, d], ln2_g, ln2_b [d], w1 [d, ffn],
// w2 [ffn, d]; params heads, eps -> out, x1, q, k, v [T, d], s, p [heads, T,
// T], o, u, x2 [T, d], a [T, ffn].  Staged (OpSpec::staged): the candidate's
// 11 outputs may follow the inputs, and each output is then the exact stage
// of the candidate's own stage inputs; without them, the all-real block.
OpOutputs eval_int8_block(const Params& params, const std::vector<TensorView>& in);

// The shape and parameter checks of the op (heads >= 1 dividing d >= 1, every
// weight's shape, ffn >= 1): the kernels call it before touching any tensor.

// The local budget of every stage (oracle/int8_block_bound.cpp, docs/int8.md):
// the INT8 GEMM noise N_ij of the candidate's stage input and the real
// weights, the LayerNorm and softmax row bounds, the residual's roundings.
// Empty without the candidate's stages.
std::vector<std::vector<double>> int8_block_bound(const Params& params, const std::vector<TensorView>& in,
                                                  const std::vector<std::vector<double>>& exact, Format acc,
                                                  const std::vector<Format>& out);

// The propagated budget (docs/int8.md "The propagated budget"): per output,
// a bound on |candidate - all-real block| from the local budgets above,
// carried forward stage by stage (linear maps by |W|, the bilinear q k^T and
// p v exactly, softmax and LayerNorm by the mean value theorem on the segment
// between the candidate's and the real stage input).  `in`: inputs followed
// by the candidate's stages; `local_exact`: the staged oracle's values;
// `real`: the all-real block's (the oracle on the inputs alone).
std::vector<std::vector<double>> int8_block_propagated(const Params& params, const std::vector<TensorView>& in,
                                                       const std::vector<std::vector<double>>& local_exact,
                                                       const std::vector<std::vector<double>>& real, Format acc,
                                                       const std::vector<Format>& out);

}  // namespace conform::oracle
