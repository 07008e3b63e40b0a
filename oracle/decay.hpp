// Decay-gate parameterizations of the delta-rule linear attentions
// (docs/gdn.md "Decay gates"): each maps a logit z and a per-head / per-channel
// temperature A to a log-decay g = ln(alpha) <= 0; the state decays by
// alpha = e^g per token.
#pragma once
#include "oracle/activation.hpp"

namespace conform::oracle {

// Kimi K3's lower-bounded decay (seed 001 eq. 1.22):
//   g = g_min * sigmoid(e^A z),  g in (g_min, 0),  alpha in (e^{g_min}, 1).
// With g_min = -5 a chunk of C tokens has a cumulative log-decay above
// -5 C, which is what bounds the scaled-Q/K chunkwise form's 1/Gamma.
template <class R>
R lower_bounded_log_decay(const R& z, const R& a_log, const R& g_min = R(-5)) {
    return g_min * sigmoid(R(exp(a_log) * z));
}

// Negative softplus (Mamba-2 / GDN / Kimi Linear; seed 001 eq. 5.6):
//   g = -e^A softplus(z),  g in (-inf, 0): no lower bound, alpha -> 0 as z -> inf.
template <class R>
R softplus_log_decay(const R& z, const R& a_log) {
    return -exp(a_log) * softplus(z);
}

}  // namespace conform::oracle
