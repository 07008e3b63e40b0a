// Oracle of the gated hidden h of a gated MLP from its two pre-activations
// (gate, up); see docs/gated.md.  Products follow IEEE conventions for the
// limits (0 * Inf = NaN).
#pragma once
#include "oracle/activation.hpp"

namespace conform::oracle {

// act(g) * u.  For finite g != 0, silu(g) and gelu(g) are nonzero with the
// sign of g, even where their value underflows MPFR's exponent range
// (gelu_erf(-6e4) ~ e^-1.8e9): the product with an infinite u is then the
// signed infinity, not 0 * Inf.
template <class R> R gate_times(const R& act, const R& g, const R& u) {
    if (isinf(u) && !isinf(g) && !isnan(g) && g != 0) {
        const double inf = std::numeric_limits<double>::infinity();
        return R(signbit(g) != signbit(u) ? -inf : inf);
    }
    return act * u;
}

template <class R> R swiglu(const R& g, const R& u) { return gate_times(silu(g), g, u); }
template <class R> R geglu(const R& g, const R& u) { return gate_times(gelu_erf(g), g, u); }
// The convention gelu = tanh (numerics/conventions.hpp): the tanh form in the gate.
template <class R> R geglu_tanh(const R& g, const R& u) { return gate_times(gelu_tanh(g), g, u); }

// SiTU-GLU is a product of two one-argument factors; the exhaustive sweep
// uses them separately.
template <class R> R situ_gate_factor(const R& g, double beta1) { return softcap(g, beta1) * sigmoid(g); }
template <class R> R situ_up_factor(const R& u, double beta2) { return softcap(u, beta2); }
template <class R> R situ_glu(const R& g, const R& u, double beta1, double beta2) {
    return situ_gate_factor(g, beta1) * situ_up_factor(u, beta2);
}

// DeepSeek-V4: gate branch capped above at `limit`, linear branch clamped to
// [-limit, limit]; NaN propagates.
template <class R> R swiglu_clamp(const R& g, const R& u, double limit) {
    if (isnan(g) || isnan(u)) return nan_of<R>();
    const R L(limit);
    const R gc = g > L ? L : g;
    const R uc = u > L ? L : (u < -L ? R(-L) : u);
    return silu(gc) * uc;
}

}  // namespace conform::oracle
