// Oracle of the FP8 family (docs/fp8.md): block-scaled quantization into
// OCP FP8 (E4M3, E5M2) and the block-scaled FP8 GEMM with promotion.
//
//   fp8_quantize  x [R, C] -> q [R, C] (FP8 codes), scale [ceil(R/br), ceil(C/bc)]
//                 (FP32).  Staged: with the candidate's q and scale appended,
//                 the codes are RN_fp8(x / s) for the candidate's own s (when
//                 it is a usable scale: positive and finite), in the format
//                 of the candidate's q.  Both outputs are exact (bound 0).
//   fp8_gemm      a [M, K], scale_a [M, ceil(K/blk)], b [K, N],
//                 scale_b [ceil(K/blk), ceil(N/blk)] -> y [M, N]:
//                 y_ij = sum_kb scale_a[i,kb] scale_b[kb,j/blk] P_kb, P_kb the
//                 exact block sum of code products; one rounding into y.
#pragma once
#include <vector>

#include "numerics/fp8.hpp"
#include "oracle/bound.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

OpOutputs eval_fp8_quantize(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_fp8_gemm(const Params& params, const std::vector<TensorView>& in);

// RN_fp8(x / s) as a decoded value (ties to even, the overflow rule of qp):
// x / s is formed in double, which is exact enough: x and s carry at most
// 24 significant bits and an FP8 midpoint at most 5, so x / s is either a
// midpoint or at least 2^-30 relative away from every one, far beyond the
// 2^-53 of the double quotient (docs/fp8.md, "Oracle").
double fp8_code_value(double x, double s, const Fp8QuantParams& qp);

// fp8_quantize: exact, bound 0 for q and scale.
std::vector<std::vector<double>> fp8_quantize_bound(const Params&, const std::vector<TensorView>& in,
                                                    const std::vector<std::vector<double>>& exact, Format acc,
                                                    const std::vector<Format>& out);

// fp8_gemm (docs/fp8.md, "Error budget"): each block sum formed in an
// accumulator of declared unit roundoff u_b (params "declared.block_bits";
// default the acc format's precision), scaled by two roundings and added
// into `acc` (unit roundoff u) over nb = ceil(K/blk) blocks:
//   |y^ - y| <= ((1 + gamma_blk(u_b)) (1 + gamma_{nb+2}(u)) - 1) W + nb eta (1 + c)
//               [+ 1/2 ulp_out(|y| + err)],   W = sum_k |a_ik sa b_kj sb|,
// c the largest scale; kUndefined where W may overflow acc; NaN (classes)
// where y is not finite.
std::vector<std::vector<double>> fp8_gemm_bound(const Params& params, const std::vector<TensorView>& in,
                                                const std::vector<std::vector<double>>& exact, Format acc,
                                                const std::vector<Format>& out);

}  // namespace conform::oracle
