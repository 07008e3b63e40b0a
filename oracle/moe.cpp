#include "oracle/moe.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "oracle/exact_dot.hpp"
#include "oracle/matmul.hpp"

namespace conform::oracle {
namespace {

constexpr double kU = 0x1p-24;         // FP32's unit roundoff: the kernels' arithmetic
constexpr double kSigmoidRange = 87;   // |l| past it, FP32's exp(-l) leaves the normal range
// A renormalizing kernel may add up to FP32's 1e-20 to the chosen scores'
// sum (Hugging Face's DeepSeek-V3 router: sum + 1e-20): the weights' budget
// admits any addend in [0, kRenormEps] (docs/moe.md, "Error budget").
constexpr double kRenormEps = 1e-20 * (1 + 0x1p-23);
const double kNaN = std::numeric_limits<double>::quiet_NaN();

double bias_at(const RouterSetup& s, const std::vector<TensorView>& in, std::int64_t e) {
    return s.has_bias ? in[2].value(e) : 0.0;
}

// Experts by decreasing score, ties to the lower index.
template <class V>
std::vector<std::int64_t> ranked(const std::vector<V>& score) {
    std::vector<std::int64_t> order(score.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)];
    });
    return order;
}

// The sum of the `top` largest of v (v reordered).
template <class V>
V top_sum(std::vector<V>& v, std::int64_t top) {
    std::partial_sort(v.begin(), v.begin() + top, v.end(), [](const V& a, const V& b) { return a > b; });
    V sum = v[0];
    for (std::int64_t i = 1; i < top; ++i) sum += v[static_cast<std::size_t>(i)];
    return sum;
}

// Which groups are kept: ranked by the sum of their `top` largest scores
// (ties to the lower group), the first m.
template <class V>
std::vector<char> kept_groups(const std::vector<V>& score, std::int64_t groups, std::int64_t m, std::int64_t top) {
    const std::size_t n = score.size() / static_cast<std::size_t>(groups);
    std::vector<V> gs(static_cast<std::size_t>(groups));
    for (std::size_t g = 0; g < gs.size(); ++g) {
        std::vector<V> v(score.begin() + static_cast<std::ptrdiff_t>(g * n), score.begin() + static_cast<std::ptrdiff_t>((g + 1) * n));
        gs[g] = top_sum(v, top);
    }
    const std::vector<std::int64_t> order = ranked(gs);
    std::vector<char> kept(gs.size(), 0);
    for (std::int64_t i = 0; i < m; ++i) kept[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = 1;
    return kept;
}

// Experts by decreasing score, ties to the lower index, those of the kept
// groups first (group-limited selection): the first k are the choice.
template <class V>
std::vector<std::int64_t> masked_ranking(const std::vector<V>& score, std::int64_t groups, std::int64_t m, std::int64_t top) {
    std::vector<std::int64_t> order = ranked(score);
    if (groups > 1 && m < groups) {
        const std::vector<char> kept = kept_groups(score, groups, m, top);
        const std::size_t n = score.size() / static_cast<std::size_t>(groups);
        std::stable_partition(order.begin(), order.end(), [&](std::int64_t e) { return kept[static_cast<std::size_t>(e) / n] != 0; });
    }
    return order;
}

// p of one token from its exact logits: softmax over the experts, or sigmoid.
std::vector<Real> probabilities(const std::vector<Real>& l, bool sigmoid) {
    std::vector<Real> p(l.size());
    if (sigmoid) {
        for (std::size_t e = 0; e < l.size(); ++e) p[e] = Real(1) / (Real(1) + exp(-l[e]));
        return p;
    }
    const Real m = *std::max_element(l.begin(), l.end());
    Real sum = 0;
    for (std::size_t e = 0; e < l.size(); ++e) sum += (p[e] = exp(l[e] - m));
    for (Real& v : p) v /= sum;
    return p;
}

}  // namespace

// topn(c + e) <= topn(c) + topn(|e|) for the sum of the n largest: a group
// score moves by at most its n largest deltas; with n = 2 the FP32
// addition rounds once (u), the double one here (2^-52 of |c_a| + |c_b|: a
// negative bias can make their sum far smaller); the maximum (n = 1) is
// exact.
void group_scores(const TokenBudget& b, std::vector<double>& g, std::vector<double>& dg) {
    const std::size_t n = b.score.size() / static_cast<std::size_t>(b.groups);
    g.assign(static_cast<std::size_t>(b.groups), 0), dg.assign(static_cast<std::size_t>(b.groups), 0);
    for (std::size_t h = 0; h < g.size(); ++h) {
        std::vector<double> s(b.score.begin() + static_cast<std::ptrdiff_t>(h * n), b.score.begin() + static_cast<std::ptrdiff_t>((h + 1) * n));
        std::vector<double> d(b.delta.begin() + static_cast<std::ptrdiff_t>(h * n), b.delta.begin() + static_cast<std::ptrdiff_t>((h + 1) * n));
        g[h] = top_sum(s, b.group_top);
        const double D = top_sum(d, b.group_top);
        dg[h] = D;
        if (b.group_top > 1) dg[h] += kU * (std::fabs(g[h]) + D) + 0x1p-52 * (std::fabs(s[0]) + std::fabs(s[1]));
    }
}

std::vector<std::int64_t> router_order(const TokenBudget& b) {
    return masked_ranking(b.score, b.groups, b.topk_groups, b.group_top);
}

// More than one selection (or order) within the budget: a chosen score and
// the next one overlap in their budgets, or (group-limited) a kept group's
// score and a dropped one's.
bool ambiguous(const TokenBudget& b, const std::vector<std::int64_t>& all, std::int64_t k) {
    std::vector<std::int64_t> order = all;
    if (b.limited()) {
        std::vector<double> g, dg;
        group_scores(b, g, dg);
        const std::vector<std::int64_t> gr = ranked(g);
        double low_kept = INFINITY, high_dropped = -INFINITY;
        for (std::size_t i = 0; i < gr.size(); ++i) {
            const auto h = static_cast<std::size_t>(gr[i]);
            if (static_cast<std::int64_t>(i) < b.topk_groups) low_kept = std::min(low_kept, g[h] - dg[h]);
            else high_dropped = std::max(high_dropped, g[h] + dg[h]);
        }
        if (low_kept <= high_dropped) return true;
        const std::vector<char> kept = kept_groups(b.score, b.groups, b.topk_groups, b.group_top);
        const std::size_t n = b.score.size() / static_cast<std::size_t>(b.groups);
        order.erase(std::remove_if(order.begin(), order.end(), [&](std::int64_t e) { return !kept[static_cast<std::size_t>(e) / n]; }),
                    order.end());
    }
    for (std::int64_t j = 0; j + 1 < static_cast<std::int64_t>(order.size()) && j < k; ++j) {
        const auto a = static_cast<std::size_t>(order[static_cast<std::size_t>(j)]), c = static_cast<std::size_t>(order[static_cast<std::size_t>(j + 1)]);
        if (b.score[a] - b.delta[a] <= b.score[c] + b.delta[c]) return true;
    }
    return false;
}

RouterSetup router_setup(const Params& p, const std::vector<TensorView>& in) {
    const std::string op = "moe_router";
    RouterSetup s;
    if (in.size() != 2 && in.size() != 3 && in.size() != 6 && in.size() != 7)
        throw std::invalid_argument(op + ": expects x [T, C], w [C, E] and optionally selection_bias [E]");
    s.has_bias = in.size() == 3 || in.size() == 7;
    s.staged = in.size() >= 6;
    s.outputs_at = s.has_bias ? 3 : 2;
    require_rank(op, "x", in[0], 2);
    require_rank(op, "w", in[1], 2);
    require_dim(op, "w", in[1], 0, in[0].shape[1], "C of x");
    s.tokens = in[0].shape[0], s.channels = in[0].shape[1], s.experts = in[1].shape[1];
    if (s.has_bias) {
        require_rank(op, "selection_bias", in[2], 1);
        require_dim(op, "selection_bias", in[2], 0, s.experts, "E of w");
    }
    s.k = static_cast<std::int64_t>(p.get("k", 2));
    if (s.k < 1 || s.k > s.experts)
        throw std::invalid_argument(op + ": parameter k = " + std::to_string(s.k) + " outside [1, E = " +
                                    std::to_string(s.experts) + "]");
    s.sigmoid = p.get("score", 0) != 0;
    s.renormalize = p.get("renormalize", 1) != 0;
    s.logit_unit = p.get("declared.logit_unit", 0), s.logit_eta = p.get("declared.logit_eta", 0);
    s.capacity = p.get("capacity", 0);
    s.groups = static_cast<std::int64_t>(p.get("groups", 1));
    if (s.groups < 1 || s.experts % s.groups != 0)
        throw std::invalid_argument(op + ": parameter groups = " + std::to_string(s.groups) + " must divide E = " +
                                    std::to_string(s.experts));
    s.group_top = static_cast<std::int64_t>(p.get("group_top", 2));
    if (s.group_top != 1 && s.group_top != 2)
        throw std::invalid_argument(op + ": parameter group_top = " + std::to_string(s.group_top) +
                                    " must be 1 (a group's largest score) or 2 (the sum of its two largest)");
    if (s.groups > 1 && s.experts / s.groups < s.group_top)
        throw std::invalid_argument(op + ": parameter groups = " + std::to_string(s.groups) + " leaves fewer than " +
                                    std::to_string(s.group_top) + " experts per group (a group's score sums its " +
                                    std::to_string(s.group_top) + " largest)");
    const auto tg = static_cast<std::int64_t>(p.get("topk_groups", 0));
    if (tg < 0 || tg > s.groups)
        throw std::invalid_argument(op + ": parameter topk_groups = " + std::to_string(tg) + " outside [0, groups = " +
                                    std::to_string(s.groups) + "]");
    s.topk_groups = tg == 0 ? s.groups : tg;
    if (s.k > s.topk_groups * (s.experts / s.groups))
        throw std::invalid_argument(op + ": parameter k = " + std::to_string(s.k) + " exceeds the " +
                                    std::to_string(s.topk_groups * (s.experts / s.groups)) + " experts of the kept groups");
    s.scaling = p.get("scaling", 1);
    if (!(std::isfinite(s.scaling) && s.scaling > 0))
        throw std::invalid_argument(op + ": parameter scaling must be finite and > 0");
    if (s.staged)
        for (std::size_t o = 0; o < 3; ++o) {
            require_rank(op, "a candidate output", in[s.outputs_at + o], 2);
            require_dim(op, "a candidate output", in[s.outputs_at + o], 1, s.k, "k");
        }
    return s;
}

// docs/moe.md, "Error budget".  Logit l_e: an FP32 dot product, |err| <=
// eps_e = gamma_C a_e + C eta/2, a_e = sum_c |x_c w_ce| (dot_budget,
// docs/matmul.md).
// Softmax: the kernel's exponent l_i - m errs by E_i = eps_i + eps_m plus
// its own rounding u |l_i - m|; exp adds 2 ulps (4u): the numerator within
// n_i = e^(E_i) (1 + 4u); the denominator within 1 + sum_j (e^(l_j - m +
// E_j) (1 + 4u) - e_j) / sum_j e_j (its terms' errors weighted by the
// terms), the sum gamma_E, the division u: p_i within n_i d (1 + u) - 1
// relative.  Sigmoid: sigma(l + eps) / sigma(l) <= e^eps, exp 4u, the add
// and the division u each.  Underflowing exponentials add eta each (abs_p =
// 4 eta).  The score p + b rounds once more.
TokenBudget router_token_budget(const RouterSetup& s, const std::vector<TensorView>& in, std::int64_t t) {
    TokenBudget b;
    b.groups = s.groups, b.topk_groups = s.topk_groups, b.group_top = s.group_top;
    const std::size_t e_count = static_cast<std::size_t>(s.experts);
    std::vector<double> l(e_count, 0), eps(e_count, 0);
    for (std::size_t e = 0; e < e_count; ++e) {
        double a = 0;
        for (std::int64_t c = 0; c < s.channels; ++c) {
            const double term = in[0].value(t * s.channels + c) * in[1].value(c * s.experts + static_cast<std::int64_t>(e));
            if (!std::isfinite(term)) b.finite = false;
            l[e] += term, a += std::fabs(term);
        }
        const DotBudget db = dot_budget(a, s.channels, Format::fp32);
        // A logit rounded to a narrower format: half its ulp there more.
        eps[e] = db.err + (s.logit_unit > 0 ? s.logit_unit * (std::fabs(l[e]) + db.err) + s.logit_eta : 0);
        if (db.may_overflow || (s.sigmoid && std::fabs(l[e]) >= kSigmoidRange)) b.undefined = true;
    }
    if (!b.finite) return b;
    b.p.resize(e_count), b.score.resize(e_count), b.delta.resize(e_count), b.rel.resize(e_count);
    b.abs_p = 4 * kEta;
    if (s.sigmoid) {
        for (std::size_t e = 0; e < e_count; ++e) {
            b.p[e] = 1 / (1 + std::exp(-l[e]));
            b.rel[e] = std::exp(eps[e]) * (1 + 4 * kU) * (1 + kU) * (1 + kU) - 1;
        }
    } else {
        // The denominator's relative error is its terms' errors weighted by
        // the terms: experts far below the maximum hardly count.
        const std::size_t im = static_cast<std::size_t>(std::max_element(l.begin(), l.end()) - l.begin());
        double sum = 0, den_err = 0;
        std::vector<double> ex(e_count), num(e_count);
        for (std::size_t e = 0; e < e_count; ++e) {
            sum += (ex[e] = std::exp(l[e] - l[im]));
            const double expo = eps[e] + eps[im] + kU * std::fabs(l[e] - l[im]);
            num[e] = std::exp(expo) * (1 + 4 * kU);
            den_err += std::exp(l[e] - l[im] + expo) * (1 + 4 * kU) - ex[e];  // not ex (num - 1): 0 * inf
        }
        const double den = (1 + den_err / sum) * (1 + gamma(static_cast<double>(e_count), kU));
        for (std::size_t e = 0; e < e_count; ++e) {
            b.p[e] = ex[e] / sum;
            b.rel[e] = num[e] * den * (1 + kU) - 1;
        }
    }
    // A logit budget so large that p is not bounded at all (|l| near FP32's
    // range: eps of the order of 1e30): the token is not judged.
    for (double r : b.rel)
        if (!std::isfinite(r)) b.undefined = true;
    if (b.undefined) std::replace_if(b.rel.begin(), b.rel.end(), [](double r) { return !std::isfinite(r); }, INFINITY);
    b.rel_p = *std::max_element(b.rel.begin(), b.rel.end());
    for (std::size_t e = 0; e < e_count; ++e) {
        const double bias = bias_at(s, in, static_cast<std::int64_t>(e));
        const double dp = (b.p[e] > 0 ? b.p[e] * b.rel[e] : 0) + b.abs_p;
        b.score[e] = b.p[e] + bias;
        b.delta[e] = dp + kU * (std::fabs(b.p[e]) + std::fabs(bias) + dp);
    }
    return b;
}

bool router_admissible(const TokenBudget& b, const std::vector<double>& chosen) {
    const std::size_t e_count = b.score.size();
    std::vector<char> in_set(e_count, 0);
    for (double v : chosen) {
        if (!(v >= 0 && v < static_cast<double>(e_count) && v == std::floor(v))) return false;
        const std::size_t e = static_cast<std::size_t>(v);
        if (in_set[e]) return false;  // an expert chosen twice
        in_set[e] = 1;
    }
    double lo = INFINITY, hi = -INFINITY;
    for (std::size_t e = 0; e < e_count; ++e) {
        if (in_set[e]) lo = std::min(lo, b.score[e] + b.delta[e]);
        else hi = std::max(hi, b.score[e] - b.delta[e]);
    }
    if (!b.limited() && lo < hi) return false;
    if (b.limited()) {
        // The groups H holding a chosen expert must be kept; a group may be
        // kept only if none of its other experts must beat the chosen ones
        // (feasible).  Some kept set K, H in K, |K| = m, is admissible iff
        // for some tau = min_K (G + dG): K holds every group with G - dG >
        // tau, and only groups with G + dG >= tau, feasible.
        const std::size_t n = e_count / static_cast<std::size_t>(b.groups), ng = static_cast<std::size_t>(b.groups);
        std::vector<char> held(ng, 0), feasible(ng, 1);
        for (std::size_t e = 0; e < e_count; ++e) {
            if (in_set[e]) held[e / n] = 1;
            else if (b.score[e] - b.delta[e] > lo) feasible[e / n] = 0;
        }
        std::int64_t nh = 0;
        for (std::size_t h = 0; h < ng; ++h) {
            if (held[h] && !feasible[h]) return false;  // a chosen group's other expert beats a chosen one
            nh += held[h];
        }
        if (nh > b.topk_groups) return false;
        std::vector<double> g, dg;
        group_scores(b, g, dg);
        bool some = false;
        for (std::size_t t = 0; t < ng && !some; ++t) {
            const double tau = g[t] + dg[t];
            std::int64_t forced = 0, allowed = 0;
            bool fits = true;
            for (std::size_t h = 0; h < ng; ++h) {
                const bool f = held[h] || g[h] - dg[h] > tau, a = g[h] + dg[h] >= tau && feasible[h];
                fits = fits && (!f || a);
                forced += f, allowed += a;
            }
            some = fits && forced <= b.topk_groups && b.topk_groups <= allowed;
        }
        if (!some) return false;
    }
    for (std::size_t a = 0; a + 1 < chosen.size(); ++a) {
        const auto i = static_cast<std::size_t>(chosen[a]), j = static_cast<std::size_t>(chosen[a + 1]);
        if (b.score[i] + b.delta[i] < b.score[j] - b.delta[j]) return false;
    }
    return true;
}

OpOutputs eval_moe_router(const Params& params, const std::vector<TensorView>& in) {
    const RouterSetup s = router_setup(params, in);
    const std::int64_t T = s.tokens, E = s.experts, K = s.k;
    const auto ek = static_cast<std::size_t>(E);
    OpOutputs out{{"indices", "weights", "kept", "loss"}, {{T, K}, {T, K}, {T, K}, {1}}, {{}, {}, {}, {}}};
    std::vector<std::vector<std::int64_t>> lists(static_cast<std::size_t>(T));
    std::vector<Real> p_sum(ek, Real(0));
    std::vector<std::int64_t> counts(ek, 0);
    std::vector<char> bad(static_cast<std::size_t>(T), 0);
    ExactDot dot(s.channels);
    const std::vector<double> x = decoded_values(in[0]), wr = decoded_values(in[1]);
    for (std::int64_t t = 0; t < T; ++t) {
        std::vector<Real> l(ek);
        bool finite = true;
        for (std::int64_t e = 0; e < E; ++e) {
            for (std::int64_t c = 0; c < s.channels; ++c)
                dot.set(static_cast<std::size_t>(c), x[static_cast<std::size_t>(t * s.channels + c)],
                        wr[static_cast<std::size_t>(c * E + e)]);
            l[static_cast<std::size_t>(e)] = dot.sum();
            finite = finite && !isnan(l[static_cast<std::size_t>(e)]) && !isinf(l[static_cast<std::size_t>(e)]);
        }
        std::vector<std::int64_t> list;
        if (!finite) {
            bad[static_cast<std::size_t>(t)] = 1;
            for (std::int64_t j = 0; j < K; ++j) {
                out.values[0].push_back(from_double(kNaN));
                out.values[1].push_back(from_double(kNaN));
            }
            continue;
        }
        const std::vector<Real> p = probabilities(l, s.sigmoid);
        std::vector<Real> score(ek);
        for (std::size_t e = 0; e < ek; ++e) score[e] = p[e] + from_double(bias_at(s, in, static_cast<std::int64_t>(e)));
        const std::vector<std::int64_t> order = masked_ranking(score, s.groups, s.topk_groups, s.group_top);
        list.assign(order.begin(), order.begin() + K);
        // The candidate's selection where the budget allows it.  On a token
        // the budget leaves undefined (not judged) any valid selection is
        // taken, and none (the candidate found no finite scores there) takes
        // no capacity, so that later tokens' capacity follows the candidate.
        bool takes_capacity = true;
        if (s.staged) {
            std::vector<double> cand(static_cast<std::size_t>(K));
            for (std::int64_t j = 0; j < K; ++j) cand[static_cast<std::size_t>(j)] = in[s.outputs_at].value(t * K + j);
            const TokenBudget b = router_token_budget(s, in, t);
            TokenBudget any = b;
            std::fill(any.delta.begin(), any.delta.end(), INFINITY);
            if (router_admissible(b.undefined ? any : b, cand)) {
                bool differs = false;
                for (std::int64_t j = 0; j < K; ++j) {
                    differs = differs || list[static_cast<std::size_t>(j)] != static_cast<std::int64_t>(cand[static_cast<std::size_t>(j)]);
                    list[static_cast<std::size_t>(j)] = static_cast<std::int64_t>(cand[static_cast<std::size_t>(j)]);
                }
                if (differs && !b.undefined) ++out.notes["indices: selections other than the oracle's, within the scores' budget (accepted)"];
            } else {
                takes_capacity = !b.undefined;
            }
            if (!b.undefined && ambiguous(b, order, K)) ++out.notes["indices: ambiguous selections (more than one within the scores' budget)"];
        }
        Real chosen = 0, all = 0;
        for (std::int64_t i : list) chosen += p[static_cast<std::size_t>(i)];
        for (const Real& v : p) all += v;
        const Real scaling = from_double(s.scaling);
        for (std::int64_t i : list) {
            out.values[0].push_back(Real(static_cast<double>(i)));
            out.values[1].push_back(scaling * (s.renormalize ? p[static_cast<std::size_t>(i)] / chosen : p[static_cast<std::size_t>(i)]));
            ++counts[static_cast<std::size_t>(i)];
        }
        for (std::size_t e = 0; e < ek; ++e) p_sum[e] += s.sigmoid ? p[e] / all : p[e];
        if (takes_capacity) lists[static_cast<std::size_t>(t)] = list;
    }
    // Capacity: assignments in token order, then slot order.
    const double cap = s.capacity > 0 ? std::floor(s.capacity * static_cast<double>(T * K) / static_cast<double>(E)) : INFINITY;
    std::vector<double> used(ek, 0);
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < K; ++j) {
            const std::size_t at = static_cast<std::size_t>(t * K + j);
            if (bad[static_cast<std::size_t>(t)]) {
                out.values[2].push_back(from_double(kNaN));
                continue;
            }
            if (lists[static_cast<std::size_t>(t)].empty()) {  // undefined, no selection: takes no capacity
                out.values[2].push_back(Real(1));
                continue;
            }
            const std::size_t e = static_cast<std::size_t>(lists[static_cast<std::size_t>(t)][static_cast<std::size_t>(j)]);
            const bool keep = used[e] < cap;
            used[e] += keep;
            out.values[2].push_back(Real(keep ? 1 : 0));
            if (!keep) out.values[1][at] = 0;
        }
    // loss = E sum_i f_i P_i, f_i = counts_i / T, P_i = p_sum_i / T.
    Real loss = 0;
    for (std::size_t e = 0; e < ek; ++e) loss += Real(static_cast<double>(counts[e])) * p_sum[e];
    loss *= Real(static_cast<double>(E)) / Real(static_cast<double>(T * T));
    const bool any_bad = std::any_of(bad.begin(), bad.end(), [](char c) { return c != 0; });
    out.values[3].push_back(any_bad ? from_double(kNaN) : loss);
    return out;
}

// docs/moe.md, "Error budget": indices and kept are exact; a weight lies in
// the interval the budget gives its p and (renormalized) the chosen p's
// sum; the loss within (1 + rel) (1 + gamma_{T+E+3}) - 1 relative.
std::vector<std::vector<double>> moe_router_bound(const Params& params, const std::vector<TensorView>& in,
                                                  const std::vector<std::vector<double>>& exact, Format,
                                                  const std::vector<Format>&) {
    const RouterSetup s = router_setup(params, in);
    const std::int64_t T = s.tokens, K = s.k;
    std::vector<std::vector<double>> b(4);
    for (auto& v : b) v.reserve(static_cast<std::size_t>(T * K));
    double rel_max = 0;
    bool loss_undefined = false;
    for (std::int64_t t = 0; t < T; ++t) {
        const TokenBudget tb = router_token_budget(s, in, t);
        double sp_lo = 0, sp_hi = 0;  // the chosen p's sum, as the kernel's p may be
        for (std::int64_t j = 0; tb.finite && j < K && !std::isnan(exact[0][static_cast<std::size_t>(t * K)]); ++j) {
            const std::size_t e = static_cast<std::size_t>(exact[0][static_cast<std::size_t>(t * K + j)]);
            sp_lo += tb.p[e] * (1 - tb.rel[e]), sp_hi += tb.p[e] * (1 + tb.rel[e]);
        }
        const double g_k = gamma(static_cast<double>(K), kU);
        for (std::int64_t j = 0; j < K; ++j) {
            const std::size_t at = static_cast<std::size_t>(t * K + j);
            if (!tb.finite || std::isnan(exact[0][at])) {
                for (int o = 0; o < 3; ++o) b[static_cast<std::size_t>(o)].push_back(kNaN);
                continue;
            }
            if (tb.undefined) {
                for (int o = 0; o < 3; ++o) b[static_cast<std::size_t>(o)].push_back(kUndefined);
                continue;
            }
            b[0].push_back(0), b[2].push_back(0);
            const std::size_t e = static_cast<std::size_t>(exact[0][at]);
            const double lam = s.scaling, g = exact[1][at] / lam, p = tb.p[e], r = tb.rel[e];
            if (exact[2][at] == 0) {  // dropped: exactly 0
                b[1].push_back(0);
                continue;
            }
            // The weight before the scaling: within b1 of g.
            double b1 = 0;
            if (!s.renormalize) {
                b1 = p * r + tb.abs_p + kU * (p * (1 + r) + tb.abs_p);
            } else {
                // The sum's k roundings (k - 1 additions, and the addition of
                // a renormalizing epsilon in [0, kRenormEps]) within gamma_k;
                // the epsilon lowers the weight at most by its share.
                const double kabs = static_cast<double>(K) * tb.abs_p;
                const double hi = (p * (1 + r) + tb.abs_p) / (sp_lo * (1 - g_k) - kabs) * (1 + kU);
                const double lo = (p * (1 - r) - tb.abs_p) / (sp_hi * (1 + g_k) + kabs + kRenormEps) * (1 - kU);
                b1 = sp_lo * (1 - g_k) > kabs ? std::max(hi - g, g - lo) : kUndefined;
            }
            // Times the scaling: rounded to FP32 (rl), the product once (u),
            // its subnormal range eta / 2.
            if (lam != 1 && b1 != kUndefined) {
                const double rl = static_cast<double>(static_cast<float>(lam)) == lam ? 0 : kU;
                b1 = lam * b1 + lam * (std::fabs(g) + b1) * (rl + kU + rl * kU) + kEta / 2;
            }
            b[1].push_back(b1);
        }
        loss_undefined = loss_undefined || tb.undefined;
        rel_max = std::max(rel_max, tb.rel_p);
    }
    const double loss = exact[3][0], E = static_cast<double>(s.experts);
    double rel = rel_max;
    if (s.sigmoid) rel = (1 + rel_max) / (1 - rel_max) * (1 + gamma(E, kU)) * (1 + kU) - 1;
    const double rel_loss = (1 + rel) * (1 + gamma(static_cast<double>(T) + E + 3, kU)) - 1;
    b[3].push_back(std::isnan(loss) ? kNaN : loss_undefined ? kUndefined : std::fabs(loss) * rel_loss + E * 8 * kEta);
    return b;
}

}  // namespace conform::oracle
