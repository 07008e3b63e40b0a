// Oracle of the row norms (docs/norm.md), one row at a time, in exact
// formula order; sums of squares have no cancellation, and layer_norm's
// centring converges as the working precision grows because inputs are exact.
#pragma once
#include <vector>

#include "oracle/real.hpp"

namespace conform::oracle {

// Declared conventions (numerics/conventions.hpp): eps_outside puts eps
// beside the root, sqrt(mean) + eps; l2's max_form divides by max(||x||, eps).
template <class R>
std::vector<R> rms_norm(const std::vector<R>& x, const std::vector<R>& w, double eps, bool zero_centered,
                        bool eps_outside = false) {
    R s(0);
    for (const R& v : x) s += v * v;
    const R mean = s / R(static_cast<double>(x.size()));
    const R r = eps_outside ? sqrt(mean) + R(eps) : sqrt(mean + R(eps));
    std::vector<R> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = (zero_centered ? R(1) + w[i] : w[i]) * x[i] / r;
    return y;
}

template <class R>
std::vector<R> layer_norm(const std::vector<R>& x, const std::vector<R>& w, const std::vector<R>& b, double eps,
                          bool eps_outside = false) {
    const R n(static_cast<double>(x.size()));
    R s(0);
    for (const R& v : x) s += v;
    const R mu = s / n;
    R q(0);
    for (const R& v : x) q += (v - mu) * (v - mu);
    const R r = eps_outside ? sqrt(q / n) + R(eps) : sqrt(q / n + R(eps));
    std::vector<R> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = w[i] * (x[i] - mu) / r + b[i];
    return y;
}

template <class R>
std::vector<R> l2_norm(const std::vector<R>& x, double eps, bool eps_outside = false, bool max_form = false) {
    R s(0);
    for (const R& v : x) s += v * v;
    const R root = sqrt(s);
    const R r = max_form ? (root < R(eps) ? R(eps) : root) : eps_outside ? root + R(eps) : sqrt(s + R(eps));  // NaN stays
    std::vector<R> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] / r;
    return y;
}

}  // namespace conform::oracle
