// int8_block's local budget, stage by stage, on the candidate's own stage
// inputs (docs/int8.md "int8_block as an op"):
//
//   INT8 GEMM y = fl_out(c * acc * s_x(i) * s_w(j)) of X [m, k] (quantized per
//   token) and the real W [k, n] (per output channel), against c X W:
//     N_ij = sum_p ( s_x(i)/2 |W_pj| + |X_ip| s_w(j)/2 + s_x(i) s_w(j)/4 )
//   (|X~ - X| <= s_x/2, |W~ - W| <= s_w/2: dynamic amax scales never
//   saturate), then the dequantization's roundings in double (acc * s_x,
//   * s_w, * c, and c = 1/sqrt(dh) itself: (1 + u64)^4 - 1 of the value) and
//   the store: 1/2 ulp_out at the largest magnitude the value can have.
//   ReLU is 1-Lipschitz: a = ReLU(y) keeps y's budget.
//   Residual u = fl16(fl32(h + y)): y's budget, u32 of the sum, 1/2 ulp16.
//   LayerNorm and softmax: the derived row bounds of the layer_norm and
//   softmax kernels (oracle::row_bound, docs/norm.md, docs/softmax.md) on the
//   candidate's own rows.
// The budget is only defined against the candidate's stages; the verdict
// always appends them (the op is staged), so the inputs-alone path is not
// reached by the suite.
#include <cmath>

#include "oracle/bound.hpp"
#include "oracle/int8.hpp"
#include "numerics/int8_block_slots.hpp"
#include "oracle/int8_block.hpp"

namespace conform::oracle {
namespace {

using namespace int8_block_slots;

using Vec = std::vector<double>;

// Columns [c0, c0 + w) of x [rows, cols].
// 1/2 ulp of `out` at the largest magnitude `mag` of a value before its store.
double half_ulp_above(Format out, double mag) { return 0.5 * ulp_at(out, mag * (1 + unit_roundoff(out))); }

// The budget of y = fl_out(c X~ W~) against c X W, element [m, n] (file comment).
Vec gemm_budget(const Vec& x, const Vec& w, std::int64_t m, std::int64_t k, std::int64_t n, double c, Format out) {
    const Vec sx = quant_scales(x, m, k, QuantAxis::token), sw = quant_scales(w, k, n, QuantAxis::channel);
    const double u = unit_roundoff(Format::fp64), g = gamma(static_cast<double>(3 * k + 3), u);
    // acc * sx * sw * c: three products, and c = fl(1 / fl(sqrt(dh))) two more
    // roundings (dh not a power of 4), with one to spare.
    const double dequant = std::pow(1 + u, 6) - 1;
    Vec b(ix(m * n), 0.0);
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            const double a = sx[ix(i)], s = sw[ix(j)];
            if (!std::isfinite(a) || !std::isfinite(s)) continue;  // a NaN scale: the exact value is NaN too
            double noise = 0, mag = 0, y = 0;
            for (std::int64_t p = 0; p < k; ++p) {
                const double xv = x[ix(i * k + p)], wv = w[ix(p * n + j)];
                noise += a / 2 * std::fabs(wv) + std::fabs(xv) * s / 2 + a * s / 4;
                mag += std::fabs(xv * wv);
                y += xv * wv;
            }
            noise *= c * (1 + g);
            const double y_max = c * (std::fabs(y) + 2 * g * mag) + noise;  // >= |c X~ W~|
            const double pre = noise + y_max * dequant;
            b[ix(i * n + j)] = pre + half_ulp_above(out, y_max + pre);
        }
    return b;
}

// u = fl16(fl32(r + y)) against r + y_exact, y within y_budget.
Vec residual_budget(const Vec& y_budget, const std::vector<double>& exact_sum, Format acc, Format out) {
    Vec b(y_budget.size());
    for (std::size_t i = 0; i < b.size(); ++i) {
        const double z = std::fabs(exact_sum[i]) + y_budget[i];
        b[i] = y_budget[i] + unit_roundoff(acc) * z + half_ulp_above(out, z * (1 + unit_roundoff(acc)));
    }
    return b;
}

Vec norm_budget(const Params& p, const Vec& x, const TensorView& g, const TensorView& beta, const std::vector<double>& exact,
                std::int64_t rows, std::int64_t d, Format acc, Format out) {
    Vec b;
    for (std::int64_t i = 0; i < rows; ++i) {
        RowData r{Vec(x.begin() + i * d, x.begin() + (i + 1) * d), decoded_values(g), decoded_values(beta),
                  Vec(exact.begin() + i * d, exact.begin() + (i + 1) * d)};
        for (double v : row_bound(*find_op("layer_norm"), p, r, acc, out)) b.push_back(v);
    }
    return b;
}

Vec softmax_budget(const Vec& s, const std::vector<double>& exact, std::int64_t rows, std::int64_t n, Format acc, Format out) {
    Vec b;
    for (std::int64_t i = 0; i < rows; ++i) {
        RowData r{Vec(s.begin() + i * n, s.begin() + (i + 1) * n), {}, {}, Vec(exact.begin() + i * n, exact.begin() + (i + 1) * n)};
        for (double v : row_bound(*find_op("softmax"), Params(), r, acc, out)) b.push_back(v);
    }
    return b;
}

// Propagation (docs/int8.md "The propagated budget"): |X^ W - X* W| <= E_X |W|.
Vec abs_product(const Vec& e, const Vec& w, std::int64_t m, std::int64_t k, std::int64_t n) {
    Vec y(ix(m * n), 0.0);
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t p = 0; p < k; ++p)
            for (std::int64_t j = 0; j < n; ++j) y[ix(i * n + j)] += e[ix(i * k + p)] * std::fabs(w[ix(p * n + j)]);
    return y;
}

// |LN(x) - LN(x*)| over |x - x*| <= delta, row by row, by the mean value
// theorem on the segment: dLN_i/dx_j = g_i/sigma (d_ij - 1/d - y_i y_j / d),
// sigma >= sigma* - |delta|_2 / sqrt(d) on the segment (sqrt(a^2 + eps) is
// 1-Lipschitz in a = |P x|_2 / sqrt(d)), |y_j| <= (|x*_j - mu*| + delta_j + mean delta) / sigma_min.
Vec ln_sensitivity(const Vec& x, const Vec& delta, const Vec& g, std::int64_t rows, std::int64_t d, double eps) {
    Vec e(x.size(), INFINITY);
    const double n = static_cast<double>(d);
    for (std::int64_t r = 0; r < rows; ++r) {
        const double* xr = &x[ix(r * d)];
        const double* dr = &delta[ix(r * d)];
        double mu = 0, var = 0, dbar = 0, l2 = 0;
        for (std::int64_t j = 0; j < d; ++j) mu += xr[j], dbar += dr[j], l2 += dr[j] * dr[j];
        mu /= n, dbar /= n;
        for (std::int64_t j = 0; j < d; ++j) var += (xr[j] - mu) * (xr[j] - mu);
        // A lower bound of sigma* - |delta|/sqrt(n) even when the two nearly
        // cancel: each square root (and the sums under it) is off by a few u.
        const double u = 0x1p-53;
        const double smin = std::sqrt(var / n + eps) * (1 - 8 * u) - std::sqrt(l2 / n) * (1 + 8 * u);
        if (!(smin > 0)) continue;  // the segment may reach a constant row: no finite bound
        Vec y(ix(d));
        double s = 0;
        for (std::int64_t j = 0; j < d; ++j) {
            y[ix(j)] = (std::fabs(xr[j] - mu) + dr[j] + dbar) / smin;
            s += y[ix(j)] * dr[j] / n;
        }
        for (std::int64_t i = 0; i < d; ++i) e[ix(r * d + i)] = std::fabs(g[ix(i)]) / smin * (dr[i] + dbar + y[ix(i)] * s);
    }
    return e;
}

}  // namespace

std::vector<std::vector<double>> int8_block_bound(const Params& p, const std::vector<TensorView>& in,
                                                  const std::vector<std::vector<double>>& exact, Format acc,
                                                  const std::vector<Format>& out) {
    if (in.size() != std::size_t{n_inputs} + n_outputs) return {};  // no candidate stages: no local budget
    auto fmt = [&](int o) { return out.size() == 1 ? out[0] : out.at(static_cast<std::size_t>(o)); };
    auto cand = [&](int o) { return decoded_values(in[n_inputs + o]); };
    const std::int64_t t = in[h_in].shape[0], d = in[h_in].shape[1], ffn = in[w1].shape[1];
    const std::int64_t heads = static_cast<std::int64_t>(p.get("heads", 1)), dh = d / heads;
    std::vector<Vec> b(n_outputs);
    b[x1_o] = norm_budget(p, decoded_values(in[h_in]), in[ln1_g], in[ln1_b], exact[x1_o], t, d, acc, fmt(x1_o));
    const Vec x1 = cand(x1_o), q = cand(q_o), k = cand(k_o), v = cand(v_o), s = cand(s_o), pr = cand(p_o);
    b[q_o] = gemm_budget(x1, decoded_values(in[wq]), t, d, d, 1, fmt(q_o));
    b[k_o] = gemm_budget(x1, decoded_values(in[wk]), t, d, d, 1, fmt(k_o));
    b[v_o] = gemm_budget(x1, decoded_values(in[wv]), t, d, d, 1, fmt(v_o));
    b[s_o].assign(ix(heads * t * t), 0.0);  // masked entries: exactly -inf
    b[o_o].assign(ix(t * d), 0.0);
    for (std::int64_t hd = 0; hd < heads; ++hd) {
        const Vec kt = transposed(column_range(k, t, d, hd * dh, (hd + 1) * dh), t, dh);
        const Vec sb = gemm_budget(column_range(q, t, d, hd * dh, (hd + 1) * dh), kt, t, dh, t, 1 / std::sqrt(static_cast<double>(dh)), fmt(s_o));
        for (std::int64_t i = 0; i < t; ++i)
            for (std::int64_t j = 0; j <= i; ++j) b[s_o][ix((hd * t + i) * t + j)] = sb[ix(i * t + j)];
        const Vec ph(pr.begin() + hd * t * t, pr.begin() + (hd + 1) * t * t);
        const Vec ob = gemm_budget(ph, column_range(v, t, d, hd * dh, (hd + 1) * dh), t, t, dh, 1, fmt(o_o));
        for (std::int64_t i = 0; i < t; ++i)
            for (std::int64_t e = 0; e < dh; ++e) b[o_o][ix(i * d + hd * dh + e)] = ob[ix(i * dh + e)];
    }
    b[p_o] = softmax_budget(s, exact[p_o], heads * t, t, acc, fmt(p_o));
    b[u_o] = residual_budget(gemm_budget(cand(o_o), decoded_values(in[wo]), t, d, d, 1, fmt(u_o)), exact[u_o], acc, fmt(u_o));
    const Vec u = cand(u_o);
    b[x2_o] = norm_budget(p, u, in[ln2_g], in[ln2_b], exact[x2_o], t, d, acc, fmt(x2_o));
    b[a_o] = gemm_budget(cand(x2_o), decoded_values(in[w1]), t, d, ffn, 1, fmt(a_o));
    b[out_o] = residual_budget(gemm_budget(cand(a_o), decoded_values(in[w2]), t, ffn, d, 1, fmt(out_o)), exact[out_o], acc, fmt(out_o));
    return b;
}

std::vector<std::vector<double>> int8_block_propagated(const Params& p, const std::vector<TensorView>& in,
                                                       const std::vector<std::vector<double>>& local_exact,
                                                       const std::vector<std::vector<double>>& real, Format acc,
                                                       const std::vector<Format>& out) {
    const std::vector<Vec> b = int8_block_bound(p, in, local_exact, acc, out);
    if (b.empty()) return {};
    const std::int64_t t = in[h_in].shape[0], d = in[h_in].shape[1], ffn = in[w1].shape[1];
    const std::int64_t heads = static_cast<std::int64_t>(p.get("heads", 1)), dh = d / heads;
    const double c = 1 / std::sqrt(static_cast<double>(dh)), eps = p.get("eps", 1e-5);
    std::vector<Vec> e(n_outputs);
    auto plus = [](Vec a, const Vec& x) {
        for (std::size_t i = 0; i < a.size(); ++i) a[i] += x[i];
        return a;
    };
    e[x1_o] = b[x1_o];
    e[q_o] = plus(b[q_o], abs_product(e[x1_o], decoded_values(in[wq]), t, d, d));
    e[k_o] = plus(b[k_o], abs_product(e[x1_o], decoded_values(in[wk]), t, d, d));
    e[v_o] = plus(b[v_o], abs_product(e[x1_o], decoded_values(in[wv]), t, d, d));
    e[s_o] = b[s_o];
    e[p_o] = b[p_o];
    e[o_o] = b[o_o];
    for (std::int64_t hd = 0; hd < heads; ++hd) {
        auto qk = [&](const Vec& m, std::int64_t i, std::int64_t x) { return m[ix(i * d + hd * dh + x)]; };
        auto row = [&](std::int64_t i, std::int64_t j) { return ix((hd * t + i) * t + j); };
        for (std::int64_t i = 0; i < t; ++i) {
            double dmax = 0;
            for (std::int64_t j = 0; j <= i; ++j) {  // q^ k^ - q* k* = dq k* + q* dk + dq dk
                double ds = 0;
                for (std::int64_t x = 0; x < dh; ++x)
                    ds += qk(e[q_o], i, x) * std::fabs(qk(real[k_o], j, x)) + std::fabs(qk(real[q_o], i, x)) * qk(e[k_o], j, x) +
                          qk(e[q_o], i, x) * qk(e[k_o], j, x);
                e[s_o][row(i, j)] += c * ds;
                dmax = std::max(dmax, e[s_o][row(i, j)]);
            }
            // softmax: dP_j = P_j(xi) (ds_j - sum_l P_l(xi) ds_l), P(xi) <= min(1, P* e^(2 D)) on the segment
            for (std::int64_t j = 0; j <= i; ++j)
                e[p_o][row(i, j)] += std::min(1.0, real[p_o][row(i, j)] * std::exp(2 * dmax)) * (e[s_o][row(i, j)] + dmax);
        }
        for (std::int64_t i = 0; i < t; ++i)
            for (std::int64_t x = 0; x < dh; ++x) {
                double dout = 0;  // p^ v^ - p* v* = dp v* + p* dv + dp dv, over all keys
                for (std::int64_t j = 0; j < t; ++j)
                    dout += e[p_o][row(i, j)] * std::fabs(qk(real[v_o], j, x)) + real[p_o][row(i, j)] * qk(e[v_o], j, x) +
                            e[p_o][row(i, j)] * qk(e[v_o], j, x);
                e[o_o][ix(i * d + hd * dh + x)] += dout;
            }
    }
    e[u_o] = plus(b[u_o], abs_product(e[o_o], decoded_values(in[wo]), t, d, d));
    e[x2_o] = plus(b[x2_o], ln_sensitivity(real[u_o], e[u_o], decoded_values(in[ln2_g]), t, d, eps));
    e[a_o] = plus(b[a_o], abs_product(e[x2_o], decoded_values(in[w1]), t, d, ffn));
    e[out_o] = plus(plus(b[out_o], e[u_o]), abs_product(e[a_o], decoded_values(in[w2]), t, ffn, d));
    // The bound's own double evaluation (sums of at most a few thousand
    // nonnegative terms, and the double-rounded real stages): far below 2^-40.
    for (Vec& v : e)
        for (double& x : v) x *= 1 + 0x1p-40;
    return e;
}

}  // namespace conform::oracle
