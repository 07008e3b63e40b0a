// Running error analysis of the exp-domain Sinkhorn iteration in a floating
// format (docs/sinkhorn.md, "Error bound", has the derivation).  In short:
//
// The exact iterate is B = diag(x) K diag(y) (K = exp(L - row max), x and y
// the products of the normalizations so far).  The computed iterate is
// written as
//     B^_ij = B_ij exp(xi_i + zeta_j + rho_ij) + delta_ij
// with per-row and per-column log errors xi_i, zeta_j (known to lie in
// intervals), entrywise log errors |rho_ij| <= R_ij (the exp and every
// division round each entry) and absolute errors |delta_ij| <= A_ij (results
// in the subnormal range).  A row normalization divides row i by
// s^ = (1 + theta) sum_j B^_ij, |theta| <= gamma_{n-1} (nonnegative terms;
// additions that underflow are exact), which gives the new row error exactly:
//     xi'_i = -log(1 + theta'_i) - log sum_j w_ij exp(rho_ij + zeta_j),
//     w_ij = B_ij / sum_k B_ik (the exact weights),
// theta' folding in the absolute errors' share of the sum.  The old xi_i
// cancels, so the interval of xi' is the interval of zeta shifted by a
// weighted log-mean of rho plus theta': errors add up over the half-steps,
// they do not double.  Columns are the same with the roles swapped.
//
// The exact weights come from an FP64 run of the same iteration
// (oracle::sinkhorn<double> with an observer).  By this same analysis with
// u = 2^-53 its iterates are within a relative (2T + 1)^2 n 2^-53 of the exact
// ones (widths (2T)^2 u + 4T(R_0 + gamma), R_0 <= 1 ulp of libm's exp plus the
// shift); twice that (a weight is a ratio) bounds the error of every
// weighted log-mean, and it is added to each step's theta and to the final
// relative bound as `trace_slack` (4 (2T + 1)^2 n 2^-53: 3e-12 at T = 20,
// n = 4, far below the FP32 terms).
#include "oracle/sinkhorn_bound.hpp"

#include <cmath>
#include <limits>

#include "numerics/sinkhorn_domain.hpp"
#include "oracle/bound.hpp"
#include "oracle/sinkhorn.hpp"

namespace conform::oracle {
namespace {


struct Span {
    double lo = 0, hi = 0;
};

// The format's constants the analysis uses.
struct Arith {
    double u;           // unit roundoff
    double gamma;       // gamma_{n-1}: a sum of n nonnegative terms
    double div;         // -log(1 - u): one rounding, in the log domain
    double exp_rel;     // -log(1 - e_exp)
    double exp_abs;     // an exp result below the normal range: two subnormal spacings
    double div_abs;     // a quotient rounded into the subnormal range: half a spacing
    double rel_floor;   // start entries below this are carried as absolute errors
    double trace_slack; // the FP64 trace's weights against the exact ones
    double eps;         // the guard of the exact iteration (0: none)
    double eps_ratio;   // the kernel's guard (eps rounded to acc) over eps
};

// The guard as the kernel adds it: eps rounded to the arithmetic's format.
double eps_in(Format acc, double eps) { return acc == Format::fp32 ? static_cast<double>(static_cast<float>(eps)) : eps; }

Arith arith_of(Format acc, std::int64_t n, int iters, double eps) {
    const double u = unit_roundoff(acc), tiny = ulp_at(acc, 0.0), steps = 2.0 * iters + 1;
    return {u, gamma(static_cast<double>(n - 1), u), -std::log1p(-u), -std::log1p(-2 * kExpUlps * u),
            2 * tiny, 0.5 * tiny, std::ldexp(1.0, info(acc).emin + 6),
            4 * steps * steps * static_cast<double>(n) * 0x1p-53, eps, eps > 0 ? eps_in(acc, eps) / eps : 1.0};
}

// The new log error of a line (docs/sinkhorn.md, "The eps guard"): the line
// was off by old (an interval) and its computed sum by a factor in
// [e^(dn - theta), e^(up + theta)] relative to e^old times the exact sum S.
// Without a guard the old error cancels in the quotient; with one, lambda =
// S / (S + eps) is the sum's share of the divisor and
//     xi' = xi - log(lambda q + (1 - lambda) r) - log(1 + delta_add),
// q = e^xi (1 + theta') M, r the guard's rounding: increasing in xi,
// decreasing in q, so the ends come from the ends of each factor.
Span line_error(const Span& old, double theta, double up, double dn, double lambda, const Arith& a) {
    if (a.eps == 0) return {-theta - up, theta - dn};
    const double hi = old.hi - std::log(lambda * std::exp(old.hi - theta + dn) + (1 - lambda) * a.eps_ratio) + a.div;
    const double lo = old.lo - std::log(lambda * std::exp(old.lo + theta + up) + (1 - lambda) * a.eps_ratio) - a.div;
    return {lo, hi};
}

// b^_ij = b_ij exp(xi_i + zeta_j + rho_ij) + delta_ij (see the file comment).
struct ErrorState {
    std::int64_t n = 0;
    std::vector<double> R, A;  // |rho| and |delta| bounds per entry
    std::vector<bool> zero;    // structural zeros (-inf logits, all -inf rows): exactly 0 on every path
    std::vector<Span> xi, zeta;
    bool lost = false;         // a whole line may vanish to underflow: no finite bound
};

// The exp-domain start: K^ = exp(fl(L - m)), the subtraction off by at most
// |L - m| u in the argument, the exp by e_exp; entries of K below rel_floor
// (possibly subnormal or flushed to 0 by the exp) carry absolute errors.
ErrorState start_state(const Mat<double>& l, const Arith& a) {
    const std::int64_t n = l.rows;
    ErrorState s{n, std::vector<double>(static_cast<std::size_t>(n * n), 0.0),
                 std::vector<double>(static_cast<std::size_t>(n * n), 0.0),
                 std::vector<bool>(static_cast<std::size_t>(n * n), false), std::vector<Span>(static_cast<std::size_t>(n)),
                 std::vector<Span>(static_cast<std::size_t>(n))};
    for (std::int64_t i = 0; i < n; ++i) {
        double m = -INFINITY;
        for (std::int64_t j = 0; j < n; ++j) m = std::fmax(m, l(i, j));
        for (std::int64_t j = 0; j < n; ++j) {
            const auto e = static_cast<std::size_t>(i * n + j);
            if (std::isinf(m) || std::isinf(l(i, j))) {
                s.zero[e] = true;
                continue;
            }
            const double d = std::fabs(l(i, j) - m), k = std::exp(-d), arg = d * a.u * (1 + 2 * a.u);
            if (k >= a.rel_floor) s.R[e] = arg + a.exp_rel;
            else s.A[e] = k * std::expm1(std::fmin(arg + a.exp_rel, 700.0)) + a.exp_abs;  // k = 0 past e^-745
        }
    }
    return s;
}

// One normalization of the lines along `axis`, c the exact matrix before it.
void normalize_step(ErrorState& s, const Mat<double>& c, SinkhornAxis axis, const Arith& a) {
    const bool rows = axis == SinkhornAxis::rows;
    const std::int64_t n = s.n;
    std::vector<Span>& own = rows ? s.xi : s.zeta;
    const std::vector<Span>& cross = rows ? s.zeta : s.xi;
    std::vector<Span> next(static_cast<std::size_t>(n));
    for (std::int64_t line = 0; line < n && !s.lost; ++line) {
        auto at = [&](std::int64_t k) { return static_cast<std::size_t>(rows ? line * n + k : k * n + line); };
        double sum = 0, abs_sum = 0;
        for (std::int64_t k = 0; k < n; ++k) sum += c.a[at(k)], abs_sum += s.A[at(k)];
        if (sum == 0) {  // structural zeros stay 0; anything else was lost below FP64's range
            s.lost = abs_sum != 0;
            continue;
        }
        double up = 0, dn = 0;  // sum_k w_k exp(+-R_k + cross_k): the weighted log-means' ends
        for (std::int64_t k = 0; k < n; ++k) {
            const double w = c.a[at(k)] / sum;
            up += w * std::exp(s.R[at(k)] + cross[static_cast<std::size_t>(k)].hi);
            dn += w * std::exp(-s.R[at(k)] + cross[static_cast<std::size_t>(k)].lo);
        }
        up = std::log(up), dn = std::log(dn);
        const double rel_lo = sum * std::exp(own[static_cast<std::size_t>(line)].lo + dn);  // the relative part's sum
        const double share = abs_sum / rel_lo;
        if (!(share < 1)) {
            s.lost = true;
            continue;
        }
        const double theta = -std::log1p(-a.gamma) - std::log1p(-share) + a.trace_slack;
        next[static_cast<std::size_t>(line)] = line_error(own[static_cast<std::size_t>(line)], theta, up, dn, sum / (sum + a.eps), a);
        double s_lo = (1 - a.gamma) * (rel_lo - abs_sum);  // the computed divisor, from below
        if (a.eps > 0) s_lo = (s_lo + a.eps * a.eps_ratio) * (1 - a.u);
        for (std::int64_t k = 0; k < n; ++k) {
            if (s.zero[at(k)]) continue;
            s.A[at(k)] = s.A[at(k)] * (1 + a.u) / s_lo + a.div_abs;
            s.R[at(k)] += a.div;
        }
    }
    own = std::move(next);
}

// Bounds of one matrix (n*n values at `bound`), from the state after the
// last normalization and the exact result.
void final_bounds(const ErrorState& s, const double* exact, Format out, const Arith& a, Format acc, double* bound) {
    const std::int64_t n = s.n;
    const bool narrower = info(out).precision < info(acc).precision;
    for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            const auto e = static_cast<std::size_t>(i * n + j);
            if (s.lost) {
                bound[e] = INFINITY;
                continue;
            }
            if (s.zero[e]) continue;  // exactly 0 on every path
            const double hi = s.xi[static_cast<std::size_t>(i)].hi + s.zeta[static_cast<std::size_t>(j)].hi + s.R[e];
            const double lo = s.xi[static_cast<std::size_t>(i)].lo + s.zeta[static_cast<std::size_t>(j)].lo - s.R[e];
            const double y = std::fabs(exact[e]);
            double b = y * std::fmax(std::expm1(hi), -std::expm1(lo)) + s.A[e];
            if (narrower) b += 0.5 * ulp_at(out, y * std::exp(hi) + s.A[e]);
            bound[e] = b * (1 + a.trace_slack);
        }
}

// ---- the wide domain: the log-domain kernel (docs/sinkhorn.md, "The wide domain") ----
//
// The kernel's potentials are off by absolute errors in intervals (phi for
// rows, psi for columns).  A half-step computes, per line, LSE of v^_k =
// fl(L'^_k + cross^_k): each v^_k is off by the cross error, the start's
// rounding of L' (rho_k <= u |L'_k|) and the addition's (u |v^_k|); inside
// LSE the subtraction of the max rounds (u |v^_k - m^|, a relative error of
// e^(v - m)) and exp adds e_exp.  LSE(v + delta) - LSE(v) = log sum_k w_k
// e^(delta_k) with w the exact softmax weights of the line: a weighted
// log-mean, so the new interval is the ends of that mean, widened by the
// line's own roundings eta (the sum: gamma_{n-1}; log of a sum in [1, n(1 +
// gamma)]: 2 ulps of it; the final m^ + log S^: u |LSE|; subnormal exps: n
// 2^-148).  The potential is -LSE: the interval flips.

struct LogArith {
    double u, gamma, exp_rel, log_rel, trace_slack;
};

// The log-domain state: the potentials' error intervals, the FP64 trace's
// potentials, the row-shifted logits.
struct LogState {
    std::int64_t n;
    Mat<double> l;           // L' = L - row max (exact in double up to 2^-53 relative)
    std::vector<double> f, g;
    std::vector<Span> phi, psi;
};

// Where every line's entries are weighted by the exact e^(v_k - lse).
double log_mean(const std::vector<double>& log_w, const std::vector<double>& shift) {
    std::vector<double> s(log_w.size());
    for (std::size_t k = 0; k < s.size(); ++k) s[k] = log_w[k] + shift[k];
    return log_sum_exp(s);
}

// One half-step along `axis` (rows update f from g, columns g from f).
void log_step(LogState& s, SinkhornAxis axis, const LogArith& a) {
    const bool rows = axis == SinkhornAxis::rows;
    const std::int64_t n = s.n;
    std::vector<double>& own = rows ? s.f : s.g;
    const std::vector<double>& cross = rows ? s.g : s.f;
    std::vector<Span>& own_err = rows ? s.phi : s.psi;
    const std::vector<Span>& cross_err = rows ? s.psi : s.phi;
    std::vector<double> next(own.size());
    std::vector<Span> next_err(own_err.size());
    for (std::int64_t line = 0; line < n; ++line) {
        std::vector<double> v, lw, up, dn;
        double widest = 0;
        for (std::int64_t k = 0; k < n; ++k) widest = std::fmax(widest, std::fmax(std::fabs(cross_err[k].lo), std::fabs(cross_err[k].hi)));
        for (std::int64_t k = 0; k < n; ++k) {
            const double lk = rows ? s.l(line, k) : s.l(k, line);
            if (std::isinf(lk)) continue;  // -inf: weight 0 on every path
            v.push_back(lk + cross[static_cast<std::size_t>(k)]);
        }
        if (v.empty()) {  // a line of structural zeros: potential 0 exactly on both sides
            next[static_cast<std::size_t>(line)] = 0, next_err[static_cast<std::size_t>(line)] = {0, 0};
            continue;
        }
        const double lse = log_sum_exp(v), vmax = *std::max_element(v.begin(), v.end());
        std::size_t q = 0;
        for (std::int64_t k = 0; k < n; ++k) {
            const double lk = rows ? s.l(line, k) : s.l(k, line);
            if (std::isinf(lk)) continue;
            const double vk = v[q];
            // Argument errors: the start's rounding of L', the addition, the
            // subtraction of the (computed) max, each u times a magnitude the
            // computed value can have; the exp's relative error as a log.
            const double d = a.u * (std::fabs(lk) + std::fabs(vk) + widest) + a.u * (vk - vmax <= 0 ? vmax - vk : 0) +
                             2 * a.u * widest + a.exp_rel;
            lw.push_back(vk - lse);
            up.push_back(cross_err[static_cast<std::size_t>(k)].hi + d);
            dn.push_back(cross_err[static_cast<std::size_t>(k)].lo - d);
            ++q;
        }
        const double hi = log_mean(lw, up), lo = log_mean(lw, dn);
        const double eta = -std::log1p(-a.gamma) + a.log_rel * std::log(static_cast<double>(n) * (1 + a.gamma)) +
                           a.u * (std::fabs(lse) + std::fmax(std::fabs(hi), std::fabs(lo))) + static_cast<double>(n) * 0x1p-148 +
                           a.trace_slack * (1 + std::fabs(lse));
        next[static_cast<std::size_t>(line)] = -lse;
        next_err[static_cast<std::size_t>(line)] = {-hi - eta, -lo + eta};
    }
    own = std::move(next);
    own_err = std::move(next_err);
}

// Bounds of one wide matrix: the FP64 trace of the log-domain iteration
// carrying the intervals, then b^ = exp(fl(fl(L'^ + f^) + g^)).
void log_domain_bounds(const Mat<double>& logits, int iters, const double* exact, Format acc, Format out, double* bound) {
    const std::int64_t n = logits.rows;
    const double u = unit_roundoff(acc), steps = 2.0 * iters + 1;
    const LogArith a{u, gamma(static_cast<double>(n - 1), u), -std::log1p(-2 * kExpUlps * u), 2 * u,
                     8 * steps * static_cast<double>(n) * 0x1p-53};
    LogState s{n, Mat<double>(n, n), std::vector<double>(static_cast<std::size_t>(n), 0.0),
               std::vector<double>(static_cast<std::size_t>(n), 0.0), std::vector<Span>(static_cast<std::size_t>(n)),
               std::vector<Span>(static_cast<std::size_t>(n))};
    for (std::int64_t i = 0; i < n; ++i) {
        double m = -INFINITY;
        for (std::int64_t j = 0; j < n; ++j) m = std::fmax(m, logits(i, j));
        for (std::int64_t j = 0; j < n; ++j)
            s.l(i, j) = std::isinf(m) || sinkhorn_below_range(logits(i, j), m) ? -INFINITY : logits(i, j) - m;
    }
    for (int t = 0; t < iters; ++t) {
        log_step(s, SinkhornAxis::rows, a);
        log_step(s, SinkhornAxis::cols, a);
    }
    const bool narrower = info(out).precision < info(acc).precision;
    const double tiny = ulp_at(acc, 0.0), normal = std::ldexp(1.0, info(acc).emin);
    for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            const auto e = static_cast<std::size_t>(i * n + j);
            if (std::isinf(s.l(i, j))) continue;  // a structural zero: 0 on every path
            const double lf = s.l(i, j) + s.f[static_cast<std::size_t>(i)], arg = lf + s.g[static_cast<std::size_t>(j)];
            const Span &p = s.phi[static_cast<std::size_t>(i)], &q = s.psi[static_cast<std::size_t>(j)];
            const double wp = std::fmax(std::fabs(p.lo), std::fabs(p.hi)), wq = std::fmax(std::fabs(q.lo), std::fabs(q.hi));
            const double r = u * (std::fabs(s.l(i, j)) + std::fabs(lf) + wp + std::fabs(arg) + wp + wq) + a.trace_slack * (1 + std::fabs(arg));
            const double hi = p.hi + q.hi + r + a.exp_rel, lo = p.lo + q.lo - r - a.exp_rel;
            const double y = std::fabs(exact[e]);
            if (y == 0) {  // below even MPFR's range: the kernel's exp is 0 or a subnormal of the last step
                bound[e] = 2 * tiny;
                continue;
            }
            const double top = y * std::exp(hi);
            double b = y * std::fmax(std::expm1(hi), -std::expm1(lo)) + (top < normal ? 2 * tiny : 0.0);
            if (narrower) b += 0.5 * ulp_at(out, top + b);
            bound[e] = b;
        }
}

}  // namespace

std::vector<std::vector<double>> sinkhorn_bound(const Params& params, const std::vector<TensorView>& in,
                                                const std::vector<std::vector<double>>& exact, Format acc,
                                                const std::vector<Format>& out) {
    const TensorView& l = in.at(0);
    const std::int64_t n = l.shape[l.rank - 1], nn = n * n, count = nn ? l.numel() / nn : 0;
    const int iters = sinkhorn_iters(params);
    const double eps = sinkhorn_eps(params);
    const Arith a = arith_of(acc, n, iters, eps);
    std::vector<double> bound(static_cast<std::size_t>(l.numel()), 0.0);
    for (std::int64_t k = 0; k < count; ++k) {
        Mat<double> logits(n, n);
        for (std::int64_t e = 0; e < nn; ++e) logits.a[static_cast<std::size_t>(e)] = l.value(k * nn + e);
        if (poisons_matrix(logits)) continue;  // NaN: judged as a class
        if (eps == 0 && sinkhorn_wide(n, [&](std::int64_t i, std::int64_t j) { return logits(i, j); })) {
            log_domain_bounds(logits, iters, exact.at(0).data() + k * nn, acc, out.at(0), bound.data() + k * nn);
            continue;
        }
        ErrorState s = start_state(logits, a);
        sinkhorn<double>(
            logits, iters,
            [&](const Mat<double>& c, SinkhornAxis axis) {
                if (!s.lost) normalize_step(s, c, axis, a);
            },
            eps);
        final_bounds(s, exact.at(0).data() + k * nn, out.at(0), a, acc, bound.data() + k * nn);
    }
    return {bound};
}

double sinkhorn_column_sum_bound(std::int64_t n, Format acc, Format out, bool guarded) {
    const double u = unit_roundoff(acc), g = gamma(static_cast<double>(n - 1), u);
    const bool narrower = info(out).precision < info(acc).precision;
    const double u_out = narrower ? unit_roundoff(out) : 0.0;
    // With a guard the divisor fl(s^ + eps) >= (1 - u) s^ (one more rounding);
    // only the upper side is a bound then (the exact sums are below 1).
    const double rel = guarded ? (1 + u) * (1 + u_out) / ((1 - g) * (1 - u)) - 1
                               : std::fmax((1 + u) * (1 + u_out) / (1 - g) - 1, 1 - (1 - u) * (1 - u_out) / (1 + g));
    // Subnormal quotients (half a spacing each) and, for a narrower output,
    // subnormal outputs (half the output's spacing each).
    const double abs = static_cast<double>(n) * (0.5 * ulp_at(acc, 0.0) * (1 + u_out) + (narrower ? 0.5 * ulp_at(out, 0.0) : 0.0));
    return rel + abs;
}

}  // namespace conform::oracle
