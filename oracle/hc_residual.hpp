// Oracle of the Hyper-Connections residual update (docs/hc_residual.md; seed
// 000 "Hyper-Connections 与 mHC", seed 001 §6.2, eq. 6.4):
//     X_{l+1} = B X + C F(A X),  A = sigma(a_logits) (1 x n),  C = 2 sigma(c_logits) (n x 1),
// B free (HC) or the Sinkhorn projection of b_logits (mHC).  F (the layer:
// attention or MLP) sits between the two mixings, so the registry ops take
// its output f as an input and compute the two mixings around it:
//     pre-mixing   h = A X             (the layer input),
//     post-mixing  x_next = B X + C f  (the residual update).
// Templates over R: Real for the MPFR tier, double for depth sweeps.
#pragma once
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "oracle/activation.hpp"  // sigmoid
#include "oracle/sinkhorn.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

// h = A X: sum_i sigma(a_i) x_i over the n rows of X (n x d).
template <class R> std::vector<R> hc_pre_mix(const Mat<R>& x, const std::vector<R>& a_logits) {
    std::vector<R> h(static_cast<std::size_t>(x.cols), R(0));
    for (std::int64_t i = 0; i < x.rows; ++i) {
        const R a = sigmoid(a_logits[static_cast<std::size_t>(i)]);
        for (std::int64_t k = 0; k < x.cols; ++k) h[static_cast<std::size_t>(k)] += a * x(i, k);
    }
    return h;
}

// x_next = B X + C f, C_i = 2 sigma(c_i): every stream gets its share of the
// layer output f (a d-vector).
template <class R>
Mat<R> hc_post_mix(const Mat<R>& x, const Mat<R>& b, const std::vector<R>& c_logits, const std::vector<R>& f) {
    Mat<R> out = matmul(b, x);
    for (std::int64_t i = 0; i < x.rows; ++i) {
        const R c = R(2) * sigmoid(c_logits[static_cast<std::size_t>(i)]);
        for (std::int64_t k = 0; k < x.cols; ++k) out(i, k) += c * f[static_cast<std::size_t>(k)];
    }
    return out;
}

// The layer F of one d-vector (attention or MLP); non-deduced, so that a
// lambda binds to it.
template <class R> using LayerFn = std::type_identity_t<std::function<std::vector<R>(const std::vector<R>&)>>;

// One HC layer on the n_hc x d residual stream X with the layer F in place.
// B is used as given.
template <class R> Mat<R> hc_residual(const Mat<R>& x, const std::vector<R>& a_logits, const Mat<R>& b,
                                      const std::vector<R>& c_logits, const LayerFn<R>& layer) {
    return hc_post_mix(x, b, c_logits, layer(hc_pre_mix(x, a_logits)));
}

// mHC: the same update with B = Sinkhorn(b_logits) (iters iterations).
template <class R> Mat<R> mhc_residual(const Mat<R>& x, const std::vector<R>& a_logits, const Mat<R>& b_logits,
                                       const std::vector<R>& c_logits, const LayerFn<R>& layer, int iters = 20) {
    return hc_residual(x, a_logits, sinkhorn(b_logits, iters), c_logits, layer);
}

// Registry evaluators (docs/hc_residual.md), per token t:
//   hc_residual:  x [T, n, d], f [T, d], a_logits [T, n], b [T, n, n], c_logits [T, n]
//                 -> h [T, d], x_next [T, n, d]
//   mhc_residual: the same with b_logits [T, n, n] in place of b and params
//                 iters (20) and eps (0, sinkhorn's guard) -> h, x_next and
//                 b [T, n, n] (the projection used)
OpOutputs eval_hc_residual(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_mhc_residual(const Params& params, const std::vector<TensorView>& in);

// The geometry of a call, validated (std::invalid_argument naming the op, the
// input and the dimension otherwise).
struct HcShape {
    std::int64_t tokens = 0, n = 0, d = 0;
};
HcShape hc_shape(const std::string& op, const std::vector<TensorView>& in);

}  // namespace conform::oracle
