// block_attn_res: the evaluator (each token's sources read exactly, the
// read of attn_res.hpp) and its error bound (docs/residual.md, "Error
// budget"), with the RMSNorm and softmax-of-computed-logits stages that
// gated_residual shares.
#include "oracle/attn_res.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "oracle/bound.hpp"
#include "oracle/matmul.hpp"

namespace conform::oracle {

AttnResShape attn_res_shape(const std::vector<TensorView>& in) {
    const std::string op = "block_attn_res";
    if (in.size() != 2 && in.size() != 3)
        throw std::invalid_argument(op + ": expects v [N, T, d], w [d] and optionally norm_weight [d], got " +
                                    std::to_string(in.size()) + " inputs");
    require_rank(op, "v", in[0], 3);
    AttnResShape s{in[0].shape[0], in[0].shape[1], in[0].shape[2], in.size() == 3 && in[2].numel() > 0};
    if (s.sources < 1) throw std::invalid_argument(op + ": v needs at least one source (N >= 1)");
    require_rank(op, "w", in[1], 1);
    require_dim(op, "w", in[1], 0, s.d, "width of v");
    if (s.has_g) {
        require_rank(op, "norm_weight", in[2], 1);
        require_dim(op, "norm_weight", in[2], 0, s.d, "width of v");
    }
    return s;
}

OpOutputs eval_block_attn_res(const Params& params, const std::vector<TensorView>& in) {
    const AttnResShape s = attn_res_shape(in);
    const double eps = params.get("eps", 1e-6);
    if (!(eps >= 0)) throw std::invalid_argument("block_attn_res: parameter eps = " + std::to_string(eps) + " is negative");
    const std::vector<Real> v = read_exact(in[0]), w = read_exact(in[1]);
    const std::vector<Real> g = s.has_g ? read_exact(in[2]) : std::vector<Real>(static_cast<std::size_t>(s.d), Real(1));
    OpOutputs out{{"h"}, {{s.tokens, s.d}}, {{}}};
    std::vector<std::vector<Real>> src(static_cast<std::size_t>(s.sources));
    for (std::int64_t t = 0; t < s.tokens; ++t) {
        for (std::int64_t i = 0; i < s.sources; ++i) {
            const auto first = v.begin() + (i * s.tokens + t) * s.d;
            src[static_cast<std::size_t>(i)].assign(first, first + s.d);
        }
        const std::vector<Real> h = attn_res_read(src, w, g, eps);
        out.values[0].insert(out.values[0].end(), h.begin(), h.end());
    }
    return out;
}

// ---- shared stages -------------------------------------------------------------

// docs/residual.md, "RMSNorm": the sum of d nonnegative squares is
// s (1 + theta), |theta| <= gamma_d, and squares or a mean that underflow
// err by at most eta absolutely; dividing by d, adding eps (rounded) keep
// t = mean + eps within eta_t = gamma_{d+3} + eta / t.  1 / sqrt(t (1 +
// eta_t)) = q (1 + a), |a| <= eta_t / (2 (1 - eta_t)); the root, the
// reciprocal and the two multiplies (g x, then by 1 / r) are four more
// roundings: rel = (1 + a)(1 + gamma_4) - 1.  Products among the
// subnormals: g x rounds by eta/2 absolutely, which the multiply by 1 / r
// magnifies (by up to 1 / sqrt(eps)), the last product by eta/2 more (and
// the other order, x (1 / r) first, by |g| times that): eta (1 + 1/r)(1 + |g|).
RmsRowBudget rms_row_budget(const TensorView& x, std::int64_t first, std::int64_t stride, std::int64_t d, double eps,
                            Format acc) {
    const double u = unit_roundoff(acc), eta = ulp_at(acc, 0.0);
    double s = 0;
    for (std::int64_t c = 0; c < d; ++c) {
        const double v = x.value(first + c * stride);
        s += v * v;
    }
    RmsRowBudget b;
    const double t = s / static_cast<double>(d) + eps;
    const double eta_t = gamma(d + 3.0, u) + eta / t;
    if (!(s * (1 + gamma_rigorous(static_cast<double>(d), u)) < max_finite(acc)) || !(t > 0) || !(eta_t < 0.5)) {
        b.undefined = true;
        return b;
    }
    b.inv_r = 1 / std::sqrt(t);
    b.rel = (1 + eta_t / (2 * (1 - eta_t))) * (1 + gamma(4, u)) - 1;
    b.abs_per_g = eta * (1 + b.inv_r);
    return b;
}

// docs/moe.md, "Error budget", with both sides: the kernel's exponent
// l^_i - m^ errs from l_i - m by E_i = err_i + err_max plus its own rounding
// u (|l_i - m| + E_i) (m^ the computed maximum, within err_max of m); exp
// adds 2 ulps (4u).  Numerator N^_i / N_i in [e^-E_i (1 - 4u), e^E_i (1 +
// 4u)]; denominator D^ / D in [d_lo, d_hi], d_hi = (1 + sum_j (e^(l_j - m +
// E_j)(1 + 4u) - e_j) / D)(1 + gamma_N), d_lo = (1 - sum_j (e_j - e^(l_j - m
// - E_j)(1 - 4u)) / D)(1 - gamma_N) (a term far below the maximum adds next
// to nothing, even with a large E_j); the division u.  Underflowing
// exponentials: 4 eta absolute.
SoftmaxBudget softmax_of_computed(const std::vector<double>& l, const std::vector<double>& err, Format acc) {
    const double u = unit_roundoff(acc), ex = 2 * 2 * u;  // kExpUlps = 2
    const std::size_t n = l.size();
    const double m = *std::max_element(l.begin(), l.end());
    const double err_max = *std::max_element(err.begin(), err.end());
    SoftmaxBudget b;
    b.p.resize(n), b.rel.resize(n);
    std::vector<double> e(n), E(n);
    double sum = 0, up = 0, down = 0;
    for (std::size_t j = 0; j < n; ++j) {
        sum += (e[j] = std::exp(l[j] - m));
        E[j] = err[j] + err_max;
        E[j] += u * (std::fabs(l[j] - m) + E[j]);
        up += std::exp(l[j] - m + E[j]) * (1 + ex) - e[j];
        down += e[j] - std::exp(l[j] - m - E[j]) * (1 - ex);
    }
    const double gn = gamma(static_cast<double>(n), u);
    const double d_hi = (1 + up / sum) * (1 + gn), d_lo = (1 - down / sum) * (1 - gn);
    for (std::size_t i = 0; i < n; ++i) {
        b.p[i] = e[i] / sum;
        const double hi = std::exp(E[i]) * (1 + ex) * (1 + u) / d_lo, lo = std::exp(-E[i]) * (1 - ex) * (1 - u) / d_hi;
        b.rel[i] = d_lo > 0 ? std::max(hi - 1, 1 - lo) : INFINITY;
    }
    b.abs = 4 * ulp_at(acc, 0.0);
    return b;
}

// ---- the bound of block_attn_res -------------------------------------------------

namespace {

// Bounds summed in double from libm's exp and sqrt: relative slips of a few
// 2^-53, covered by this factor (as hc_residual's).
constexpr double kAttnResSafety = 1 + 0x1p-40;

}  // namespace

// docs/residual.md, "block_attn_res": per token, the keys by
// rms_row_budget; the logit a_i = sum_c w_c k^_ic, a dot of d computed
// keys: |a^_i - a_i| <= sum_c |w_c| (rel |k_ic| + abs_c) + dot_budget(sum_c
// |w_c| (|k_ic| (1 + rel) + abs_c), d); alpha by softmax_of_computed; the
// read h_c = sum_i alpha^_i v_ic, N products in any order: sum_i |alpha^_i -
// alpha_i| |v_ic| + gamma_N sum_i |alpha^_i| |v_ic| + N eta; the output
// rounding.  A stage that may overflow makes the token kUndefined.
std::vector<std::vector<double>> block_attn_res_bound(const Params& params, const std::vector<TensorView>& in,
                                                      const std::vector<std::vector<double>>& exact, Format acc,
                                                      const std::vector<Format>& out) {
    const AttnResShape s = attn_res_shape(in);
    const double eps = params.get("eps", 1e-6), u = unit_roundoff(acc), eta = ulp_at(acc, 0.0);
    const bool narrower = info(out.at(0)).precision < info(acc).precision;
    const auto N = static_cast<std::size_t>(s.sources);
    std::vector<double> bound(static_cast<std::size_t>(s.tokens * s.d), 0.0);
    auto g_at = [&](std::int64_t c) { return s.has_g ? in[2].value(c) : 1.0; };
    const double gn = gamma(static_cast<double>(N), u);
    for (std::int64_t t = 0; t < s.tokens; ++t) {
        std::vector<double> l(N), err(N);
        bool undefined = false, finite = true;
        for (std::size_t i = 0; i < N; ++i) {
            const std::int64_t row = (static_cast<std::int64_t>(i) * s.tokens + t) * s.d;
            const RmsRowBudget r = rms_row_budget(in[0], row, 1, s.d, eps, acc);
            double a = 0, mag = 0, key_err = 0;
            for (std::int64_t c = 0; c < s.d; ++c) {
                const double g = g_at(c), w = in[1].value(c), k = g * in[0].value(row + c) * r.inv_r;
                const double ke = r.rel * std::fabs(k) + r.abs_per_g * (1 + std::fabs(g));
                a += w * k, key_err += std::fabs(w) * ke, mag += std::fabs(w) * (std::fabs(k) + ke);
            }
            finite = finite && std::isfinite(a) && std::isfinite(mag);
            if (r.undefined) {
                undefined = true;
                continue;
            }
            const DotBudget db = dot_budget(mag, s.d, acc);
            undefined = undefined || db.may_overflow;
            l[i] = a, err[i] = key_err + db.err;
        }
        double* b = bound.data() + t * s.d;
        if (!finite) continue;  // the NaN token: judged by class (bound 0)
        if (undefined) {
            std::fill(b, b + s.d, kUndefined);
            continue;
        }
        const SoftmaxBudget sm = softmax_of_computed(l, err, acc);
        for (std::int64_t c = 0; c < s.d; ++c) {
            double pre = 0, computed = 0;
            for (std::size_t i = 0; i < N; ++i) {
                const double v = std::fabs(in[0].value((static_cast<std::int64_t>(i) * s.tokens + t) * s.d + c));
                const double da = sm.rel[i] * sm.p[i] + sm.abs;
                pre += da * v, computed += (sm.p[i] + da) * v;
            }
            pre = (pre + gn * computed + static_cast<double>(N) * eta) * kAttnResSafety;
            const double y = exact.at(0)[static_cast<std::size_t>(t * s.d + c)];
            b[c] = pre + (narrower ? 0.5 * ulp_at(out[0], std::fabs(y) + pre) : 0.0);
        }
    }
    return {bound};
}

}  // namespace conform::oracle
