// Oracle of the INT8 precision flow (docs/int8.md): symmetric INT8
// quantization per tensor, per token (row) and per channel (column),
// dequantization, the INT8 x INT8 GEMM with exact integer accumulation and
// dequantization by the outer product of scales, and SmoothQuant's
// per-channel smoothing (seed 000: the SmoothQuant block precision flow).
//
// Conventions (the kernels implement the same):
//   * codes are symmetric, in [-127, 127]: -128 is never produced (so -q is
//     always a code, and the range is the same on both sides); the GEMM still
//     accepts -128 operands;
//   * the scale of a group (the tensor, a row or a column) is amax / 127
//     rounded once to FP32 (RNE): the scale a kernel stores and multiplies by;
//   * q = clamp(round_half_even(x / s), -127, 127), with x / s exact: only the
//     rounding to an integer rounds;
//   * a group whose amax is 0 has scale 0 and codes 0; a group holding a NaN
//     or an infinity has scale NaN and codes 0 (an integer has no NaN);
//   * dequantization is q * s (exact in double: 8 x 24 bits).
#pragma once
#include <cstdint>
#include <vector>

#include "oracle/real.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

inline constexpr int kInt8Max = 127;  // the saturation bound: codes in [-127, 127]

// Quantization granularity of x [rows, cols].
enum class QuantAxis {
    tensor = 0,   // one scale
    token = 1,    // one scale per row
    channel = 2,  // one scale per column
};

// Number of scales, and the scale index of element (i, j).
std::int64_t scale_count(QuantAxis axis, std::int64_t rows, std::int64_t cols);
std::int64_t scale_index(QuantAxis axis, std::int64_t i, std::int64_t j);

// amax / 127 per group, rounded to FP32 (0 for amax 0, NaN for a non-finite group).
std::vector<double> quant_scales(const std::vector<double>& x, std::int64_t rows, std::int64_t cols, QuantAxis axis);

// clamp(round_half_even(x / s), -127, 127), decided exactly; 0 when s is 0 or
// NaN or x is not finite.
std::int8_t quantize_value(double x, double s);

// Codes of x with the given scales (quant_scales or static ones).
std::vector<std::int8_t> quantize(const std::vector<double>& x, std::int64_t rows, std::int64_t cols, QuantAxis axis,
                                  const std::vector<double>& scales);
std::vector<double> dequantize(const std::vector<std::int8_t>& q, std::int64_t rows, std::int64_t cols, QuantAxis axis,
                               const std::vector<double>& scales);

// acc = A B, exactly: A [M, K] and B [K, N] codes (any int8, -128 included),
// row-major, in INT64.  |acc| <= K 2^14, so an INT32 accumulator holds it
// for K < 2^17 (K = 2^17 codes of -128 give 2^31).
std::vector<std::int64_t> int8_matmul(const std::vector<std::int8_t>& a, const std::vector<std::int8_t>& b,
                                      std::int64_t m, std::int64_t k, std::int64_t n);

// y_ij = acc_ij sa_i sb_j exactly (sa: M per-token scales or 1 per-tensor;
// sb: N per-channel scales or 1), to be rounded once to the output format.
std::vector<Real> int8_dequant_outer(const std::vector<std::int64_t>& acc, std::int64_t m, std::int64_t n,
                                     const std::vector<double>& sa, const std::vector<double>& sb);

// SmoothQuant (Xiao et al. 2023): for X [T, C] activations and W [C, N]
// weights (channel j of X meets row j of W),
//     s_j = max_t |X_tj|^alpha / max_k |W_jk|^(1 - alpha),
// and X W = (X diag(s)^-1)(diag(s) W) exactly.  A channel whose activation or
// weight maximum is 0 gets s_j = 1 (nothing to balance); a channel holding
// a NaN or an infinity (in column j of X or row j of W) gets s_j = NaN.
std::vector<Real> smooth_scales(const std::vector<double>& x, std::int64_t t, std::int64_t c,
                                const std::vector<double>& w, std::int64_t n, const Real& alpha);

struct Smoothed {
    std::vector<Real> x, w;  // X diag(s)^-1 [T, C] and diag(s) W [C, N]
};
Smoothed smooth(const std::vector<double>& x, std::int64_t t, std::int64_t c, const std::vector<double>& w,
                std::int64_t n, const std::vector<Real>& s);

// Registry evaluators (docs/int8.md "Ops"):
//   quantize   x [rows, cols]; params axis (0 tensor, 1 token, 2 channel), scale
//              (> 0: static) -> q [rows, cols], scale [rows, cols] (each element's group scale)
//   int8_gemm  a [M, K], b [K, N] (int8), scale_a [M] or [1], scale_b [N] or [1]
//              -> acc [M, N] (exact integers), y [M, N] = acc scale_a scale_b
//   dequantize q [rows, cols] (int8), scale [1] / [rows] / [cols] by the
//              param axis -> y [rows, cols] = q scale, exact (IEEE specials)
//   smooth_quant x [T, C], w [C, N]; param alpha -> xs [T, C] = x diag(s)^-1,
//              ws [C, N] = diag(s) w, s [C] (smooth_scales, exact reals)
OpOutputs eval_quantize(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_int8_gemm(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_dequantize(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_smooth_quant(const Params& params, const std::vector<TensorView>& in);

// Bounds (find_structured_bound): quantize is exact (q and scale: bound 0);
// int8_gemm's acc is exact and y = acc sa sb is three FP32 roundings (acc to
// float above 2^24, two products; any order) plus a rounding into a narrower
// output: |y^ - y| <= |y| ((1 + u)^3 - 1) + 2 eta (+ 1/2 ulp_out).
std::vector<std::vector<double>> quantize_bound(const Params&, const std::vector<TensorView>& in,
                                                const std::vector<std::vector<double>>& exact, Format acc,
                                                const std::vector<Format>& out);
std::vector<std::vector<double>> int8_gemm_bound(const Params&, const std::vector<TensorView>& in,
                                                 const std::vector<std::vector<double>>& exact, Format acc,
                                                 const std::vector<Format>& out);

// dequantize: y = q s is one product of an 8-bit code and an FP32 scale (at
// most 7 + 24 significant bits).  In an accumulation format of >= 32 bits
// (FP64) it is exact and the output rounding is the only one: |y^ - y| <=
// 1/2 ulp_out(y) (correct rounding, up to the tie's direction, which the
// correctly_rounded property checks).  In a narrower one (a naive FP16
// baseline) the scale rounds into it and the product rounds: |y| ((1 + u)^2
// - 1) + (|q| + 1) eta, the product's rounding being the output's.
std::vector<std::vector<double>> dequantize_bound(const Params&, const std::vector<TensorView>& in,
                                                  const std::vector<std::vector<double>>& exact, Format acc,
                                                  const std::vector<Format>& out);
// smooth_quant (docs/int8.md "Error budget"): s from log and exp in `acc`
// (libm within kLibmUlps ulps), |s^ - s| <= |s| delta_s; xs = x * fl(1/s^)
// and ws = w * s^ in acc, then one rounding into the output (s: FP32).
inline constexpr double kLibmUlps = 2;
std::vector<std::vector<double>> smooth_quant_bound(const Params&, const std::vector<TensorView>& in,
                                                    const std::vector<std::vector<double>>& exact, Format acc,
                                                    const std::vector<Format>& out);
// delta_s of channel j: the relative error bound of s_j computed as
// exp(alpha ln ax - (1 - alpha) ln aw) in a format of unit roundoff u.
double smooth_scale_rel_error(double ax, double aw, double alpha, double u);

// The axis and static scale of a quantize call (std::invalid_argument naming
// the parameter otherwise); the static scale is rounded to FP32, 0 when absent.
QuantAxis quant_axis(const Params& params);
double static_scale(const Params& params);
double smooth_alpha(const Params& params);  // in [0, 1], std::invalid_argument otherwise

// Channel maxima of X [T, C] (per column) and W [C, N] (per row): NaN for a
// channel holding a NaN or an infinity.
std::vector<double> column_amax(const TensorView& x);
std::vector<double> row_amax(const TensorView& w);

}  // namespace conform::oracle
