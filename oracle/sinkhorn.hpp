// Oracle of the doubly-stochastic projection of mHC (docs/sinkhorn.md):
// Sinkhorn–Knopp from the exp-domain start K = exp(L) and from a log-domain
// formulation, marginals and their residual, the spectral norm (Jacobi on
// BᵀB with an error enclosure) and the amplification of a product over
// depth.  The Hyper-Connections residual update that uses B is in
// oracle/hc_residual.hpp.
//
// One iteration is a row normalization followed by a column normalization
// (seed 001 §6.2: "row/column normalization", 20 iterations in DeepSeek-V4),
// so after any number of iterations the column sums are 1 and the row sums
// carry the residual.  Templates over R: Real for the MPFR tier, double for
// the FP64 tier (the error bound's trace and the depth sweeps).
//
// Special values (the kernels follow the same table):
//   * a NaN or +inf logit makes the whole matrix NaN (NaN reaches every entry
//     through the sums within two normalizations anyway; +inf has no finite
//     normalization);
//   * a -inf logit is a structural zero: exp(-inf) = 0;
//   * a line (row or column) whose sum is exactly 0 is left unchanged by its
//     normalization (0/0 is never formed): an all -inf row stays a zero row,
//     and B then cannot be doubly stochastic (documented, not an error);
//   * huge logits: the start subtracts each row's maximum before exp.  That
//     is exact algebra, not an approximation: the first row normalization
//     removes any positive factor of a row, so exp(L - m) and exp(L) give the
//     same iterates, while exp(L) itself overflows at L > 709 (double) or
//     L > 88 (float).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "oracle/delta_rule.hpp"  // Mat<R>
#include "oracle/real.hpp"
#include "oracle/softmax.hpp"     // ln, neg_inf, quiet_nan
#include "oracle/structured.hpp"

namespace conform::oracle {

// ---- matrix helpers --------------------------------------------------------

template <class R> bool poisons_matrix(const Mat<R>& l) {
    return std::any_of(l.a.begin(), l.a.end(), [](const R& v) { return isnan(v) || (isinf(v) && v > 0); });
}

template <class R> Mat<R> nan_matrix(std::int64_t n) {
    Mat<R> m(n, n);
    for (R& v : m.a) v = quiet_nan<R>();
    return m;
}

// ---- marginals -------------------------------------------------------------

template <class R> std::vector<R> row_sums(const Mat<R>& m) {
    std::vector<R> s(static_cast<std::size_t>(m.rows), R(0));
    for (std::int64_t i = 0; i < m.rows; ++i)
        for (std::int64_t j = 0; j < m.cols; ++j) s[static_cast<std::size_t>(i)] += m(i, j);
    return s;
}
template <class R> std::vector<R> col_sums(const Mat<R>& m) { return row_sums(transpose(m)); }

// max over rows and columns of |sum - 1|: 0 exactly when B is doubly
// stochastic (given B >= 0).
template <class R> R marginal_residual(const Mat<R>& m) {
    R r(0);
    for (const auto& sums : {row_sums(m), col_sums(m)})
        for (const R& s : sums) r = std::max(r, R(abs(s - R(1))));
    return r;
}

// ---- Sinkhorn–Knopp, exp domain ------------------------------------------

// K_ij = exp(L_ij - max_k L_ik): the exp-domain start, row-shifted (see the
// header comment).  An all -inf row gives a zero row.
template <class R> Mat<R> sinkhorn_start(const Mat<R>& l) {
    Mat<R> k(l.rows, l.cols);
    for (std::int64_t i = 0; i < l.rows; ++i) {
        R m = neg_inf<R>();
        for (std::int64_t j = 0; j < l.cols; ++j) m = std::max(m, l(i, j));
        if (isinf(m)) continue;  // all -inf: zero row
        for (std::int64_t j = 0; j < l.cols; ++j) k(i, j) = exp(l(i, j) - m);
    }
    return k;
}

// One half-step of the iteration: which lines it normalizes.
enum class SinkhornAxis { rows, cols };

// Divides every row (or column) by its sum plus the guard eps >= 0 (the
// `v / (sum + eps)` of some training code; 0: none); a line whose sum plus
// eps is 0 is left as it is.  Returns the sums (the marginals before the step).
template <class R> std::vector<R> normalize(Mat<R>& m, SinkhornAxis axis, double eps = 0) {
    const bool rows = axis == SinkhornAxis::rows;
    std::vector<R> s = rows ? row_sums(m) : col_sums(m);
    for (std::int64_t i = 0; i < m.rows; ++i)
        for (std::int64_t j = 0; j < m.cols; ++j) {
            const R d = s[static_cast<std::size_t>(rows ? i : j)] + R(eps);
            if (d != 0) m(i, j) /= d;
        }
    return s;
}

// Called before every half-step with the matrix about to be normalized and the
// axis (the error bound of oracle/sinkhorn_bound.cpp reads the exact weights
// of every step from it).
template <class R> using SinkhornObserver = std::function<void(const Mat<R>&, SinkhornAxis)>;

// `iters` iterations (row then column normalization each) from exp(L - row
// max), each line divided by its sum plus eps.  With eps > 0 the row shift is
// part of the definition (the guard is relative to the shifted start, whose
// row maxima are 1): a positive factor of a row no longer cancels.
template <class R>
Mat<R> sinkhorn(const Mat<R>& l, int iters, const SinkhornObserver<R>& observe = {}, double eps = 0) {
    if (poisons_matrix(l)) return nan_matrix<R>(l.rows);
    Mat<R> m = sinkhorn_start(l);
    for (int t = 0; t < iters; ++t)
        for (SinkhornAxis axis : {SinkhornAxis::rows, SinkhornAxis::cols}) {
            if (observe) observe(m, axis);
            normalize(m, axis, eps);
        }
    return m;
}

// ---- Sinkhorn–Knopp, log domain ------------------------------------------

// log sum_k exp(v_k) over the finite-or--inf entries, max-shifted; -inf when
// every entry is -inf.
template <class R> R log_sum_exp(const std::vector<R>& v) {
    const R m = row_max(v);
    if (isinf(m)) return m;
    R s(0);
    for (const R& x : v) s += exp(x - m);
    return m + ln(s);
}

// The same iterates in potentials: B_ij = exp(L_ij + f_i + g_j) with
//     f_i = -LSE_j (L_ij + g_j),   g_j = -LSE_i (L_ij + f_i),   g = 0 at start.
// A line that is all -inf keeps potential 0 (its entries are 0 anyway), the
// log-domain form of "a zero line is left unchanged".  Algebraically equal to
// sinkhorn() for every iteration count; nothing overflows or underflows in
// the potentials, so it is the reference for huge logits.
template <class R> Mat<R> sinkhorn_log(const Mat<R>& l, int iters) {
    const std::int64_t n = l.rows;
    if (poisons_matrix(l)) return nan_matrix<R>(n);
    std::vector<R> f(static_cast<std::size_t>(n), R(0)), g(static_cast<std::size_t>(n), R(0));
    std::vector<R> line(static_cast<std::size_t>(n));
    auto potential = [](const std::vector<R>& v) {
        const R s = log_sum_exp(v);
        return isinf(s) ? R(0) : R(-s);
    };
    for (int t = 0; t < iters; ++t) {
        for (std::int64_t i = 0; i < n; ++i) {
            for (std::int64_t j = 0; j < n; ++j) line[static_cast<std::size_t>(j)] = l(i, j) + g[static_cast<std::size_t>(j)];
            f[static_cast<std::size_t>(i)] = potential(line);
        }
        for (std::int64_t j = 0; j < n; ++j) {
            for (std::int64_t i = 0; i < n; ++i) line[static_cast<std::size_t>(i)] = l(i, j) + f[static_cast<std::size_t>(i)];
            g[static_cast<std::size_t>(j)] = potential(line);
        }
    }
    Mat<R> b(n, n);
    for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j)
            b(i, j) = exp(l(i, j) + f[static_cast<std::size_t>(i)] + g[static_cast<std::size_t>(j)]);
    return b;
}

// ---- to convergence --------------------------------------------------------

template <class R> struct SinkhornRun {
    Mat<R> b;
    int iters = 0;  // iterations done
    R residual;     // marginal_residual(b)
};

// Iterates until the marginal residual is <= tol or max_iters is reached
// (the caller checks `residual`: a matrix without total support converges
// only sublinearly and may not get there).
template <class R> SinkhornRun<R> sinkhorn_to_tolerance(const Mat<R>& l, const R& tol, int max_iters) {
    if (poisons_matrix(l)) return {nan_matrix<R>(l.rows), 0, quiet_nan<R>()};
    SinkhornRun<R> run{sinkhorn_start(l), 0, R(0)};
    run.residual = marginal_residual(run.b);
    while (run.iters < max_iters && run.residual > tol) {
        normalize(run.b, SinkhornAxis::rows);
        normalize(run.b, SinkhornAxis::cols);
        ++run.iters;
        run.residual = marginal_residual(run.b);
    }
    return run;
}

// ---- spectral norm -----------------------------------------------------------

// Working precision in bits: the thread's MPFR precision, or 53.
template <class R> unsigned precision_bits() {
    if constexpr (std::is_same_v<R, double>) return 53;
    else return current_bits();
}

// ||B||_2 enclosed: lo <= sigma_max(B) <= hi, value the estimate.
template <class R> struct NormEnclosure {
    R value, lo, hi;
};

// sigma_max(B) = sqrt(lambda_max(G)), G = BᵀB, by cyclic Jacobi rotations on
// G until the off-diagonal part is below 2^-P ||G||_F.  Enclosure (Weyl): the
// eigenvalues of the final matrix differ from its diagonal by at most
// ||off||_F; the rounding of G = BᵀB adds gamma_n ||B||_F^2 and every
// rotation perturbs G by at most c 2^-P ||G||_F (orthogonal transformations
// are backward stable; c = 8 n per sweep here, a generous constant for the
// few flops of a 2x2 rotation).  So |lambda - diag_max| <= err_lambda and the
// square root gives the enclosure.  A NaN entry gives a NaN enclosure.
template <class R> NormEnclosure<R> spectral_norm(const Mat<R>& b) {
    const std::int64_t n = b.cols;
    if (std::any_of(b.a.begin(), b.a.end(), [](const R& v) { return isnan(v) || isinf(v); }))
        return {quiet_nan<R>(), quiet_nan<R>(), quiet_nan<R>()};
    Mat<R> g = matmul(transpose(b), b);
    const R eps = R(std::ldexp(1.0, -static_cast<int>(precision_bits<R>())));
    auto frob2 = [](const Mat<R>& m, bool off_only) {
        R s(0);
        for (std::int64_t i = 0; i < m.rows; ++i)
            for (std::int64_t j = 0; j < m.cols; ++j)
                if (!off_only || i != j) s += m(i, j) * m(i, j);
        return s;
    };
    const R g_norm = sqrt(frob2(g, false)), b_norm2 = frob2(b, false);
    int sweeps = 0;
    for (; sweeps < 64 && sqrt(frob2(g, true)) > eps * g_norm; ++sweeps)
        for (std::int64_t p = 0; p + 1 < n; ++p)
            for (std::int64_t q = p + 1; q < n; ++q) {
                if (g(p, q) == 0) continue;
                // Rutishauser's rotation zeroing g_pq: t = sign(theta)/(|theta| + sqrt(theta^2 + 1)).
                const R theta = (g(q, q) - g(p, p)) / (R(2) * g(p, q));
                const R t = (theta >= 0 ? R(1) : R(-1)) / (abs(theta) + sqrt(theta * theta + R(1)));
                const R c = R(1) / sqrt(t * t + R(1)), s = t * c;
                for (std::int64_t k = 0; k < n; ++k) {  // G <- G J (columns p, q)
                    const R gp = g(k, p), gq = g(k, q);
                    g(k, p) = c * gp - s * gq, g(k, q) = s * gp + c * gq;
                }
                for (std::int64_t k = 0; k < n; ++k) {  // G <- Jᵀ G (rows p, q)
                    const R gp = g(p, k), gq = g(q, k);
                    g(p, k) = c * gp - s * gq, g(q, k) = s * gp + c * gq;
                }
            }
    R lambda(0);
    for (std::int64_t i = 0; i < n; ++i) lambda = std::max(lambda, g(i, i));
    const R err = sqrt(frob2(g, true)) + R(static_cast<double>(n)) * eps / (R(1) - R(static_cast<double>(n)) * eps) * b_norm2 +
                  R(8.0 * static_cast<double>(n * n) * (sweeps + 1)) * eps * g_norm;
    const R lo2 = lambda - err;
    return {sqrt(lambda), lo2 > 0 ? sqrt(lo2) : R(0), sqrt(lambda + err)};
}

// The rigorous bound of any nonnegative matrix (Schur test, ||B||_2^2 <=
// ||B||_1 ||B||_inf): sqrt(max row sum * max column sum).
template <class R> R schur_bound(const Mat<R>& b) {
    const auto r = row_sums(b), c = col_sums(b);
    return sqrt(*std::max_element(r.begin(), r.end()) * *std::max_element(c.begin(), c.end()));
}

// The amplification of the residual path over depth: ||B_l ... B_1||_2 for
// l = 1..L (the signal gain of the identity path through l layers), as
// enclosures.
template <class R> std::vector<NormEnclosure<R>> amplification(const std::vector<Mat<R>>& bs) {
    std::vector<NormEnclosure<R>> out;
    if (bs.empty()) return out;
    Mat<R> p = identity<R>(bs.front().rows);
    for (const auto& b : bs) {
        p = matmul(b, p);
        out.push_back(spectral_norm(p));
    }
    return out;
}

// Registry evaluator: logits [n, n] or [batch, n, n]; param iters (20) ->
// b of the same shape (docs/sinkhorn.md).
OpOutputs eval_sinkhorn(const Params& params, const std::vector<TensorView>& in);

// The iteration count of a call: a positive integer (std::invalid_argument
// naming the op otherwise).
int sinkhorn_iters(const Params& params);
// The guard eps of a call: finite and >= 0 (default 0).
double sinkhorn_eps(const Params& params);

}  // namespace conform::oracle
