// Oracle of op block_attn_res, Block Attention Residuals (docs/residual.md;
// seed 001 §6.3, eqs 6.6-6.7): per token, attention of one learned
// pseudo-query w over the N source representations v_i (the embedding, the
// completed block sums, the current partial block sum):
//     k_i = g * v_i / sqrt(mean(v_i^2) + eps)     (RMSNorm of the keys, weight g)
//     a_i = w . k_i,  alpha = softmax_i(a),  h = sum_i alpha_i v_i
// (values are the raw v_i, keys the normalized ones).  Templates over R: Real
// for the MPFR tier, double for the model's FP64 tier.
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"
#include "oracle/norm.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

// One token: v holds the N sources (each d long), w the query, g the key norm
// weight (d each).  A token whose logits are not all finite (a NaN or infinite
// source value, w or g) reads as NaN in every channel; so does an eps = 0
// token with an all-zero source (0/0 key).
template <class R>
std::vector<R> attn_res_read(const std::vector<std::vector<R>>& v, const std::vector<R>& w, const std::vector<R>& g,
                             double eps) {
    const std::size_t n = v.size(), d = w.size();
    std::vector<R> a(n, R(0));
    bool finite = true;
    for (std::size_t i = 0; i < n; ++i) {
        const std::vector<R> k = rms_norm(v[i], g, eps, false);
        for (std::size_t c = 0; c < d; ++c) a[i] += w[c] * k[c];
        finite = finite && !isnan(a[i]) && !isinf(a[i]);
    }
    if (!finite) return std::vector<R>(d, R(std::numeric_limits<double>::quiet_NaN()));
    R m = a[0];
    for (const R& x : a) m = x > m ? x : m;
    std::vector<R> e(n);
    R s(0);
    for (std::size_t i = 0; i < n; ++i) s += (e[i] = exp(a[i] - m));
    std::vector<R> h(d, R(0));
    for (std::size_t i = 0; i < n; ++i) {
        const R alpha = e[i] / s;
        for (std::size_t c = 0; c < d; ++c) h[c] += alpha * v[i][c];
    }
    return h;
}

// Registry evaluator: v [N, T, d], w [d], optional norm_weight [d] (default
// 1), param eps (1e-6) -> h [T, d].
OpOutputs eval_block_attn_res(const Params& params, const std::vector<TensorView>& in);

struct AttnResShape {
    std::int64_t sources = 0, tokens = 0, d = 0;
    bool has_g = false;
};
AttnResShape attn_res_shape(const std::vector<TensorView>& in);

// The RMSNorm stage of both residual reads (docs/residual.md, "Error
// budget"): a row x (d values, stride apart) normalized in `acc` as
// (g x) (1 / sqrt(fl(sum x^2) / d + eps)), any order of the sum.  Each
// computed element is k (1 + theta) + e with |theta| <= rel and |e| <=
// abs_per_g (1 + |g|), abs_per_g = eta (1 + 1/r) (subnormal products);
// inv_r = 1 / sqrt(mean + eps) exactly (in double).  undefined: the sum of
// squares may overflow in acc, or mean + eps is 0 (eps = 0 on a zero row) or
// so small that the underflowing squares leave it unbounded.
struct RmsRowBudget {
    double inv_r = 0, rel = 0, abs_per_g = 0;
    bool undefined = false;
};
RmsRowBudget rms_row_budget(const TensorView& x, std::int64_t first, std::int64_t stride, std::int64_t d, double eps,
                            Format acc);

// Softmax of computed logits (as the router's, docs/moe.md "Error budget"),
// exact logits l, each within err: p_i = softmax(l)_i and the computed
// p^_i within rel_i p_i + abs (exp 2 ulps, the sum gamma_N, the division).
struct SoftmaxBudget {
    std::vector<double> p, rel;
    double abs = 0;
};
SoftmaxBudget softmax_of_computed(const std::vector<double>& l, const std::vector<double>& err, Format acc);

// The per-element bound of block_attn_res (docs/residual.md): kUndefined on
// a token where a stage may overflow, a non-finite bound nowhere else.
std::vector<std::vector<double>> block_attn_res_bound(const Params& params, const std::vector<TensorView>& in,
                                                      const std::vector<std::vector<double>>& exact, Format acc,
                                                      const std::vector<Format>& out);

}  // namespace conform::oracle
