// Oracle of the elementwise activations, written from the formulas in
// docs/activation.md.  Each is evaluated in a form without cancellation so
// that the working precision is the accuracy (1 + tanh z = 2 sigmoid(2z),
// 1 + erf(z) = erfc(-z), softplus(x) = x + log1p(exp(-x)) for x > 0), and
// the infinities are defined by their limits.
#pragma once
#include <limits>

#include "oracle/real.hpp"

namespace conform::oracle {

template <class R> R nan_of() { return R(std::numeric_limits<double>::quiet_NaN()); }
template <class R> R neg_zero() { return R(-0.0); }

template <class R> R sigmoid(const R& x) {
    if (isinf(x)) return R(x > 0 ? 1 : 0);
    return R(1) / (R(1) + exp(-x));
}

template <class R> R silu(const R& x) {
    if (isinf(x)) return x > 0 ? x : neg_zero<R>();
    return x / (R(1) + exp(-x));
}

template <class R> R gelu_erf(const R& x) {
    if (isinf(x)) return x > 0 ? x : neg_zero<R>();
    return x * erfc(-x / sqrt(R(2))) / 2;
}

template <class R> R gelu_tanh(const R& x) {
    if (isinf(x)) return x > 0 ? x : neg_zero<R>();
    const R c = sqrt(R(2) / pi_of<R>());
    const R z = c * (x + decimal_of<R>("0.044715") * x * x * x);
    return x / (R(1) + exp(-2 * z));  // x/2 (1 + tanh z) = x sigmoid(2z)
}

template <class R> R softplus(const R& x) {
    if (isinf(x)) return x > 0 ? x : R(0);
    if (x > 0) return x + log1p(exp(-x));
    return log1p(exp(x));
}

template <class R> R softcap(const R& x, double beta) {
    if (isinf(x)) return R(x > 0 ? beta : -beta);
    const R b(beta);
    return b * tanh(x / b);
}

}  // namespace conform::oracle
