// Oracle of softmax, its online (running max / running sum) form and the
// merge of partial attention states (docs/softmax.md).
//
// Row functions are templates over R (Real for the MPFR tier, double for the
// FP64 tier).  Every form subtracts a maximum before exponentiating, so no
// term overflows and the sum has only nonnegative terms: the working
// precision is the accuracy.  Special values follow one rule everywhere:
//   * a NaN or a +inf logit makes the whole row NaN (IEEE on the formula:
//     +inf - +inf and NaN - m are NaN);
//   * a -inf logit has weight 0;
//   * a row with no finite logit (all -inf, or empty) is the empty
//     distribution: y = 0, max = lse = -inf (never NaN).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "oracle/real.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

// Natural logarithm (named ln so it never collides with a later log in real.hpp).
inline Real ln(const Real& x) { return apply(mpfr_log, x); }
inline double ln(double x) { return std::log(x); }

template <class R> R neg_inf() { return R(-std::numeric_limits<double>::infinity()); }
template <class R> R quiet_nan() { return R(std::numeric_limits<double>::quiet_NaN()); }

// True when the row's value is NaN by the IEEE rule above.
template <class R> bool poisons_row(const std::vector<R>& s) {
    return std::any_of(s.begin(), s.end(), [](const R& v) { return isnan(v) || (isinf(v) && v > 0); });
}

// Largest entry; -inf for an empty or all -inf row.  Call after poisons_row.
template <class R> R row_max(const std::vector<R>& s) {
    R m = neg_inf<R>();
    for (const R& v : s)
        if (v > m) m = v;
    return m;
}

template <class R> struct SoftmaxRow {
    std::vector<R> y;  // probabilities
    R max;             // the row maximum (the shift)
    R lse;             // log sum exp of the row
};

template <class R> SoftmaxRow<R> nan_row(std::size_t n) {
    return {std::vector<R>(n, quiet_nan<R>()), quiet_nan<R>(), quiet_nan<R>()};
}
template <class R> SoftmaxRow<R> empty_row(std::size_t n) { return {std::vector<R>(n, R(0)), neg_inf<R>(), neg_inf<R>()}; }

// softmax(s)_j = exp(s_j - m) / sum_k exp(s_k - m), m = max s: exact shift,
// every exponent <= 0, the sum >= 1 (the maximum contributes exp(0)).
template <class R> SoftmaxRow<R> softmax_row(const std::vector<R>& s) {
    if (poisons_row(s)) return nan_row<R>(s.size());
    const R m = row_max(s);
    if (isinf(m)) return empty_row<R>(s.size());
    std::vector<R> e(s.size());
    R l(0);
    for (std::size_t j = 0; j < s.size(); ++j) {
        e[j] = exp(s[j] - m);  // exp(-inf) = 0
        l += e[j];
    }
    for (R& v : e) v /= l;
    return {std::move(e), m, m + ln(l)};
}

// The online recurrence over blocks of `block` entries (0: one block):
//     m' = max(m, max_block),  l' = l * exp(m - m') + sum_block exp(s_j - m')
// Each entry's numerator is taken against the running max of its own block
// and rescaled at the end by exp(m_block - m_final), as a flash kernel
// rescales its output accumulator.  The rescale is skipped while the running
// max is still -inf (a prefix of all -inf blocks): exp(-inf - -inf) is NaN,
// and l = 0 there anyway.  Algebraically equal to softmax_row for every block.
template <class R> SoftmaxRow<R> online_softmax_row(const std::vector<R>& s, std::size_t block) {
    const std::size_t n = s.size();
    if (poisons_row(s)) return nan_row<R>(n);
    if (block == 0 || block > n) block = std::max<std::size_t>(n, 1);
    R m = neg_inf<R>(), l(0);
    std::vector<R> num(n), shift_at(n);  // exp(s_j - m_block) and the m_block it used
    for (std::size_t b0 = 0; b0 < n; b0 += block) {
        const std::size_t b1 = std::min(n, b0 + block);
        R m_new = m;
        for (std::size_t j = b0; j < b1; ++j)
            if (s[j] > m_new) m_new = s[j];
        if (isinf(m_new)) {  // nothing finite seen yet: l stays 0, numerators 0
            for (std::size_t j = b0; j < b1; ++j) num[j] = R(0), shift_at[j] = m_new;
            continue;
        }
        if (!isinf(m)) l *= exp(m - m_new);
        for (std::size_t j = b0; j < b1; ++j) {
            num[j] = exp(s[j] - m_new);
            shift_at[j] = m_new;
            l += num[j];
        }
        m = m_new;
    }
    if (isinf(m)) return empty_row<R>(n);
    std::vector<R> y(n);
    for (std::size_t j = 0; j < n; ++j) y[j] = isinf(shift_at[j]) ? R(0) : num[j] * exp(shift_at[j] - m) / l;
    return {std::move(y), m, m + ln(l)};
}

// A partial attention state over a subset of keys: o = sum_j p_j v_j with p
// normalized over that subset, lse = log sum_j exp(s_j).  The empty state is
// (0, -inf).
template <class R> struct AttnState {
    std::vector<R> o;
    R lse;
};

// merge((o_a, lse_a), (o_b, lse_b)) = (w_a o_a + w_b o_b, lse) with
// lse = max + log1p(exp(min - max)) (no overflow, no cancellation) and
// w = exp(lse_x - lse).  Merging with the empty state returns the other
// state exactly; two empty states give the empty state (never NaN).
template <class R> AttnState<R> lse_merge(const AttnState<R>& a, const AttnState<R>& b) {
    if (isnan(a.lse) || isnan(b.lse) || (isinf(a.lse) && a.lse > 0) || (isinf(b.lse) && b.lse > 0))
        return {std::vector<R>(a.o.size(), quiet_nan<R>()), quiet_nan<R>()};
    const bool a_empty = isinf(a.lse), b_empty = isinf(b.lse);
    if (a_empty && b_empty) return {std::vector<R>(a.o.size(), R(0)), neg_inf<R>()};
    if (b_empty) return a;
    if (a_empty) return b;
    const R hi = a.lse > b.lse ? a.lse : b.lse, lo = a.lse > b.lse ? b.lse : a.lse;
    const R lse = hi + log1p(exp(lo - hi));
    const R wa = exp(a.lse - lse), wb = exp(b.lse - lse);
    std::vector<R> o(a.o.size());
    for (std::size_t d = 0; d < o.size(); ++d) o[d] = wa * a.o[d] + wb * b.o[d];
    return {std::move(o), lse};
}

// Registry evaluators (inputs and layouts in docs/softmax.md).
//   softmax        x [..., n]                          -> y [..., n]
//   online_softmax x [..., n]; param block (0)         -> y [..., n], m [...], lse [...]
//   lse_merge      o_a [..., Dv], lse_a [...], o_b, lse_b -> o [..., Dv], lse [...]
OpOutputs eval_softmax(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_online_softmax(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_lse_merge(const Params& params, const std::vector<TensorView>& in);

}  // namespace conform::oracle
