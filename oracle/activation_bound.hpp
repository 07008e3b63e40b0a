// Declared arithmetic classes of the activations (act_arith; docs/activation.md,
// "Arithmetic classes"): what a kernel that evaluates the textbook form in
// FP32 with a library exp, tanh, erf or log1p can promise, in place of one ulp of
// the correctly rounded result.  Each error function bounds |ŝ - s| of the
// FP32 activation ŝ at an FP32 input x against its exact value s; the
// derivations are in docs/activation.md and are shared with the model
// steps of the same names (docs/diverge.md, "SwiGLU computed in two ops",
// "GeGLU with the tanh GELU", "GeGLU with the erf GELU").
#pragma once
#include <string>
#include <vector>

#include "numerics/conventions.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::oracle {

// The erf class: an erf within this much of erf, in absolute terms
// (PyTorch's CPU erf keeps 1 + erf within 12.8 * 2^-24, measured).
inline constexpr double kErfAbs = 0x1p-20;

// n / (1 + exp(-x)) in FP32 (sigmoid: n = 1, silu: n = x) with an exp within
// 1 ulp: two roundings and the exp's, rho |s| + eta/2 with rho = 4u(1 + 4u);
// |s| itself where exp(-x) or the sum may overflow FP32 (ŝ = ±0 there).
double quotient_error(double x, double s);

// x/2 (1 + tanh(β(x + κx³))) in FP32 with a tanh within 2 ulps.
double tanh_gelu_error(double x, double s);

// x/2 (1 + Ê(x/√2)) in FP32 with an erf Ê within kErfAbs of erf.
double erf_gelu_error(double x, double s);

// softplus in FP32 as max(x, 0) + log1p(exp(-|x|)) or as log1p(exp(x)), with
// exp and log1p within 1 ulp each.
double softplus_error(double x, double s);

// softcap beta tanh(x / beta) in FP32: x / beta (or x times fl(1 / beta)),
// a tanh within 2 ulps, the product by beta.
double softcap_error(double x, double s, double beta);

// The per-element bound on |kernel - exact| of op `op` under the class that
// conventions `c` declare (act_arith "quotient", "one_plus_tanh",
// "one_plus_erf", "log1p_exp", "scaled_tanh" with p's beta; geglu's by its `gelu`): the FP32 activation,
// for a gated op its FP32 product with `up`, then the store into `out` (half
// an ulp more when out is narrower than FP32).  0 where an input or the exact
// value is not finite (judged by class), but kUndefined (oracle/bound.hpp)
// for a gated op whose up is infinite where the class lets the activation
// round to 0 (0 · inf: NaN or the exact infinity).  std::invalid_argument
// (check_conventions) for a class that does not fit the op.
std::vector<double> act_arith_bound(const std::string& op, const Conventions& c, const Params& p,
                                    const std::vector<TensorView>& in, const std::vector<double>& exact, Format out);

}  // namespace conform::oracle
