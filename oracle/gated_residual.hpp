// Oracle of op gated_residual, the Gated Residual read (docs/residual.md;
// seed 001 §6.4, eq 6.8): n parallel residual streams, each normalized on
// its own, read through an element-wise, data-dependent sigmoid gate from a
// low-rank map of the concatenated normalized streams:
//     z_i = g_i * H_i / sqrt(mean(H_i^2) + eps),   z = concat(z_1..z_n)  [n d]
//     gate = sigmoid((z A) B)  [n d],   h = sum_i gate_i * z_i  [d]
// A [n d, r], B [r, n d] in [in, out] layouts.  Templates over R: Real for
// the MPFR tier, double for the model's FP64 tier.
#pragma once
#include <cstdint>
#include <vector>

#include "oracle/activation.hpp"  // sigmoid
#include "oracle/delta_rule.hpp"  // Mat
#include "oracle/norm.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

template <class R> struct GatedRead {
    std::vector<R> h;     // [d]
    std::vector<R> gate;  // [n d]
};

// One token: streams n x d (row i = H_i), g n x d, A [n d, r], B [r, n d].
// IEEE arithmetic for special values (a NaN or infinite stream value makes
// the whole token NaN through the gate).
template <class R>
GatedRead<R> gated_residual_read(const Mat<R>& streams, const Mat<R>& g, const Mat<R>& A, const Mat<R>& B, double eps) {
    const std::int64_t n = streams.rows, d = streams.cols;
    Mat<R> z(1, n * d);
    for (std::int64_t i = 0; i < n; ++i) {
        const std::vector<R> zi = rms_norm(std::vector<R>(streams.row(i), streams.row(i) + d),
                                           std::vector<R>(g.row(i), g.row(i) + d), eps, false);
        for (std::int64_t c = 0; c < d; ++c) z(0, i * d + c) = zi[static_cast<std::size_t>(c)];
    }
    const Mat<R> l = matmul(matmul(z, A), B);
    GatedRead<R> r{std::vector<R>(static_cast<std::size_t>(d), R(0)), std::vector<R>(static_cast<std::size_t>(n * d))};
    for (std::int64_t m = 0; m < n * d; ++m) r.gate[static_cast<std::size_t>(m)] = sigmoid(l(0, m));
    for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t c = 0; c < d; ++c)
            r.h[static_cast<std::size_t>(c)] += r.gate[static_cast<std::size_t>(i * d + c)] * z(0, i * d + c);
    return r;
}

// Registry evaluator: streams [n, T, d], g [n, d], A [n d, r], B [r, n d],
// param eps (1e-6) -> h [T, d], gate [T, n d].
OpOutputs eval_gated_residual(const Params& params, const std::vector<TensorView>& in);

struct GatedShape {
    std::int64_t n = 0, tokens = 0, d = 0, rank = 0;
};
GatedShape gated_residual_shape(const std::vector<TensorView>& in);

// The per-element bounds of h and gate (docs/residual.md): kUndefined on a
// token where a stage may overflow or a non-finite weight meets it.
std::vector<std::vector<double>> gated_residual_bound(const Params& params, const std::vector<TensorView>& in,
                                                      const std::vector<std::vector<double>>& exact, Format acc,
                                                      const std::vector<Format>& out);

}  // namespace conform::oracle
