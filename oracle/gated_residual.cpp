// gated_residual: the evaluator (each token's streams read exactly, the read
// of gated_residual.hpp) and its error bound (docs/residual.md, "Error
// budget").
#include "oracle/gated_residual.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "oracle/attn_res.hpp"  // rms_row_budget
#include "oracle/bound.hpp"
#include "oracle/hc_residual_bound.hpp"  // sigmoid_rel, sigmoid_abs
#include "oracle/matmul.hpp"

namespace conform::oracle {

GatedShape gated_residual_shape(const std::vector<TensorView>& in) {
    const std::string op = "gated_residual";
    if (in.size() != 4)
        throw std::invalid_argument(op + ": expects streams [n, T, d], g [n, d], A [n d, r], B [r, n d], got " +
                                    std::to_string(in.size()) + " inputs");
    require_rank(op, "streams", in[0], 3);
    GatedShape s{in[0].shape[0], in[0].shape[1], in[0].shape[2], 0};
    if (s.n < 1) throw std::invalid_argument(op + ": streams needs at least one stream (n >= 1)");
    require_rank(op, "g", in[1], 2);
    require_dim(op, "g", in[1], 0, s.n, "streams of H");
    require_dim(op, "g", in[1], 1, s.d, "width of H");
    require_rank(op, "A", in[2], 2);
    require_dim(op, "A", in[2], 0, s.n * s.d, "n d of H");
    s.rank = in[2].shape[1];
    require_rank(op, "B", in[3], 2);
    require_dim(op, "B", in[3], 0, s.rank, "rank of A");
    require_dim(op, "B", in[3], 1, s.n * s.d, "n d of H");
    return s;
}

namespace {

Mat<Real> gated_matrix(const TensorView& t, std::int64_t rows, std::int64_t cols) {
    Mat<Real> m(rows, cols);
    m.a = read_exact(t);
    return m;
}

// The bounds are summed in double from libm's exp and sqrt (relative slips
// of a few 2^-53), covered by this factor (as hc_residual's).
constexpr double kGatedSafety = 1 + 0x1p-40;

// One FP32 dot-product stage of the low rank, out_j = sum_k x_k W[k, j] (W
// [K, cols] row-major, K = x.size()) from computed inputs within ex:
// eo_j = sum_k ex_k |W_kj| + dot_budget(sum_k (|x_k| + ex_k) |W_kj|, K).
// Returns whether some dot may overflow.
bool gated_dot_stage(const std::vector<double>& x, const std::vector<double>& ex, const TensorView& W, std::int64_t cols,
                     Format acc, std::vector<double>& out, std::vector<double>& eo) {
    bool overflow = false;
    const auto K = static_cast<std::int64_t>(x.size());
    for (std::int64_t j = 0; j < cols; ++j) {
        double v = 0, mag = 0, prop = 0;
        for (std::int64_t k = 0; k < K; ++k) {
            const double w = W.value(k * cols + j);
            const auto ku = static_cast<std::size_t>(k);
            v += x[ku] * w, mag += (std::fabs(x[ku]) + ex[ku]) * std::fabs(w), prop += ex[ku] * std::fabs(w);
        }
        const DotBudget db = dot_budget(mag, K, acc);
        overflow = overflow || db.may_overflow;
        out[static_cast<std::size_t>(j)] = v, eo[static_cast<std::size_t>(j)] = prop + db.err;
    }
    return overflow;
}

}  // namespace

OpOutputs eval_gated_residual(const Params& params, const std::vector<TensorView>& in) {
    const GatedShape s = gated_residual_shape(in);
    const double eps = params.get("eps", 1e-6);
    if (!(eps >= 0)) throw std::invalid_argument("gated_residual: parameter eps = " + std::to_string(eps) + " is negative");
    const std::int64_t nd = s.n * s.d;
    const Mat<Real> g = gated_matrix(in[1], s.n, s.d), A = gated_matrix(in[2], nd, s.rank),
                    B = gated_matrix(in[3], s.rank, nd);
    const std::vector<Real> H = read_exact(in[0]);
    OpOutputs out{{"h", "gate"}, {{s.tokens, s.d}, {s.tokens, nd}}, {{}, {}}};
    Mat<Real> x(s.n, s.d);
    for (std::int64_t t = 0; t < s.tokens; ++t) {
        for (std::int64_t i = 0; i < s.n; ++i)
            std::copy_n(H.begin() + (i * s.tokens + t) * s.d, s.d, x.a.begin() + i * s.d);
        const GatedRead<Real> r = gated_residual_read(x, g, A, B, eps);
        out.values[0].insert(out.values[0].end(), r.h.begin(), r.h.end());
        out.values[1].insert(out.values[1].end(), r.gate.begin(), r.gate.end());
    }
    return out;
}

// docs/residual.md, "gated_residual".  Per token: z by rms_row_budget per
// stream (|z^_m - z_m| <= ez_m = rel |z_m| + abs (1 + |g_m|)); y = z A and
// l = y B as FP32 dot products of computed inputs: ey_j = sum_m ez_m |A_mj| +
// dot_budget(sum_m (|z_m| + ez_m) |A_mj|, n d), el_c likewise through |B|
// (r terms); the gate sigma(l^) within D = S (1 - S) e^(2 Delta) Delta of S =
// sigma(l), Delta = el_c (sigma' = sigma (1 - sigma) moves by at most e^Delta
// on each factor over the interval), its own evaluation within (S + D)
// e_sigma + 3 tiny (hc_residual's sigmoid model), at most 1 in all; the read
// h_c = sum_i w^_ic z^_ic, n products in any order; outputs rounded once.
std::vector<std::vector<double>> gated_residual_bound(const Params& params, const std::vector<TensorView>& in,
                                                      const std::vector<std::vector<double>>& exact, Format acc,
                                                      const std::vector<Format>& out) {
    const GatedShape s = gated_residual_shape(in);
    const double eps = params.get("eps", 1e-6), u = unit_roundoff(acc), eta = ulp_at(acc, 0.0);
    const double e_sig = sigmoid_rel(acc), a_sig = sigmoid_abs(acc);
    auto fmt = [&](std::size_t o) { return out.size() > o ? out[o] : out[0]; };
    auto narrower = [&](std::size_t o) { return info(fmt(o)).precision < info(acc).precision; };
    const std::int64_t nd = s.n * s.d, rk = s.rank;
    const auto und = static_cast<std::size_t>(nd), ur = static_cast<std::size_t>(rk);
    std::vector<double> bh(static_cast<std::size_t>(s.tokens * s.d), 0.0), bw(static_cast<std::size_t>(s.tokens * nd), 0.0);
    const double gn = gamma(static_cast<double>(s.n), u);
    for (std::int64_t t = 0; t < s.tokens; ++t) {
        std::vector<double> z(und), ez(und), y(ur, 0.0), ey(ur, 0.0), l(und, 0.0), el(und, 0.0);
        bool undefined = false, finite = true;
        for (std::int64_t i = 0; i < s.n; ++i) {
            const std::int64_t row = (i * s.tokens + t) * s.d;
            const RmsRowBudget r = rms_row_budget(in[0], row, 1, s.d, eps, acc);
            undefined = undefined || r.undefined;
            for (std::int64_t c = 0; c < s.d; ++c) {
                const double g = in[1].value(i * s.d + c);
                const auto m = static_cast<std::size_t>(i * s.d + c);
                z[m] = g * in[0].value(row + c) * r.inv_r;
                ez[m] = r.rel * std::fabs(z[m]) + r.abs_per_g * (1 + std::fabs(g));
            }
        }
        undefined = gated_dot_stage(z, ez, in[2], rk, acc, y, ey) || undefined;
        undefined = gated_dot_stage(y, ey, in[3], nd, acc, l, el) || undefined;
        for (std::size_t m = 0; m < und; ++m) finite = finite && std::isfinite(l[m]) && std::isfinite(el[m]);
        double* h_out = bh.data() + t * s.d;
        double* w_out = bw.data() + t * nd;
        const double* h_ex = exact.at(0).data() + t * s.d;
        const double* w_ex = exact.at(1).data() + t * nd;
        if (!finite || undefined) {
            // Special values (the exact value NaN: judged by class, bound 0)
            // or a stage that may overflow: not judged where the exact value
            // is finite.
            for (std::int64_t c = 0; c < s.d; ++c) h_out[c] = std::isfinite(h_ex[c]) ? kUndefined : 0.0;
            for (std::int64_t m = 0; m < nd; ++m) w_out[m] = std::isfinite(w_ex[m]) ? kUndefined : 0.0;
            continue;
        }
        std::vector<double> w(und), ew(und);
        for (std::size_t m = 0; m < und; ++m) {
            const double S = 1 / (1 + std::exp(-l[m])), delta = el[m];
            const double D = delta < 16 ? S * (1 - S) * std::exp(2 * delta) * delta : 1.0;
            w[m] = S;
            ew[m] = std::min((D + (S + D) * e_sig + a_sig) * kGatedSafety, 1.0);
            w_out[m] = ew[m] + (narrower(1) ? 0.5 * ulp_at(fmt(1), std::fabs(w_ex[m]) + ew[m]) : 0.0);
        }
        for (std::int64_t c = 0; c < s.d; ++c) {
            double pre = 0, computed = 0;
            for (std::int64_t i = 0; i < s.n; ++i) {
                const auto m = static_cast<std::size_t>(i * s.d + c);
                const double wa = std::min(w[m] + ew[m], 1.0 + e_sig + a_sig);
                pre += ew[m] * std::fabs(z[m]) + wa * ez[m];
                computed += wa * (std::fabs(z[m]) + ez[m]);
            }
            pre = (pre + gn * computed + static_cast<double>(s.n) * eta) * kGatedSafety;
            h_out[c] = pre + (narrower(0) ? 0.5 * ulp_at(fmt(0), std::fabs(h_ex[c]) + pre) : 0.0);
        }
    }
    return {bh, bw};
}

}  // namespace conform::oracle
