#include "oracle/int8_block.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "numerics/format.hpp"
#include "oracle/bound.hpp"
#include "oracle/int8.hpp"

namespace conform::oracle {

std::vector<double> column_range(const std::vector<double>& m, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t c1) {
    std::vector<double> out(static_cast<std::size_t>(rows * (c1 - c0)));
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = c0; j < c1; ++j) out[static_cast<std::size_t>(i * (c1 - c0) + j - c0)] = m[static_cast<std::size_t>(i * cols + j)];
    return out;
}

std::vector<double> transposed(const std::vector<double>& m, std::int64_t rows, std::int64_t cols) {
    std::vector<double> t(m.size());
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) t[static_cast<std::size_t>(j * rows + i)] = m[static_cast<std::size_t>(i * cols + j)];
    return t;
}

namespace {

using Vec = std::vector<double>;

double fp16(double v) { return decode(Format::fp16, encode(Format::fp16, v)); }

// Row-major [rows, cols] helpers.
Vec matmul(const Vec& x, const Vec& w, std::int64_t m, std::int64_t k, std::int64_t n) {
    Vec y(static_cast<std::size_t>(m * n), 0.0);
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t p = 0; p < k; ++p)
            for (std::int64_t j = 0; j < n; ++j) y[static_cast<std::size_t>(i * n + j)] += x[static_cast<std::size_t>(i * k + p)] * w[static_cast<std::size_t>(p * n + j)];
    return y;
}

Vec layer_norm_rows(const Vec& x, std::int64_t rows, std::int64_t d, const Vec& g, const Vec& b, double eps) {
    Vec y(x.size());
    for (std::int64_t i = 0; i < rows; ++i) {
        double mean = 0, var = 0;
        for (std::int64_t j = 0; j < d; ++j) mean += x[static_cast<std::size_t>(i * d + j)];
        mean /= static_cast<double>(d);
        for (std::int64_t j = 0; j < d; ++j) var += std::pow(x[static_cast<std::size_t>(i * d + j)] - mean, 2);
        const double r = 1 / std::sqrt(var / static_cast<double>(d) + eps);
        for (std::int64_t j = 0; j < d; ++j)
            y[static_cast<std::size_t>(i * d + j)] = g[static_cast<std::size_t>(j)] * (x[static_cast<std::size_t>(i * d + j)] - mean) * r + b[static_cast<std::size_t>(j)];
    }
    return y;
}

// Causal softmax of scores [t, t] per row.
Vec causal_softmax(const Vec& s, std::int64_t t) {
    Vec p(s.size(), 0.0);
    for (std::int64_t i = 0; i < t; ++i) {
        double m = -INFINITY, z = 0;
        for (std::int64_t j = 0; j <= i; ++j) m = std::max(m, s[static_cast<std::size_t>(i * t + j)]);
        for (std::int64_t j = 0; j <= i; ++j) z += std::exp(s[static_cast<std::size_t>(i * t + j)] - m);
        for (std::int64_t j = 0; j <= i; ++j) p[static_cast<std::size_t>(i * t + j)] = std::exp(s[static_cast<std::size_t>(i * t + j)] - m) / z;
    }
    return p;
}

Vec add(Vec a, const Vec& b) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
}

Vec relu(Vec a) {
    for (double& v : a) v = std::max(v, 0.0);
    return a;
}

Vec rounded(Vec a) {
    for (double& v : a) v = fp16(v);
    return a;
}

// The block's dataflow with the products and the rounding as parameters:
// the real block passes exact products and no rounding, the flow INT8 GEMMs
// and FP16.
template <class Product, class Round>
Vec run_block(const Vec& h, std::int64_t t, const BlockWeights& w, Product&& product, Round&& round) {
    const std::int64_t d = w.d, dh = d / w.heads;
    const Vec x = round(layer_norm_rows(h, t, d, w.ln1_g, w.ln1_b, w.eps));
    const Vec q = product("q", x, w.wq, t, d, d, 1.0), k = product("k", x, w.wk, t, d, d, 1.0),
              v = product("v", x, w.wv, t, d, d, 1.0);
    Vec o(static_cast<std::size_t>(t * d));
    for (std::int64_t hd = 0; hd < w.heads; ++hd) {
        const std::string tag = ".h" + std::to_string(hd);
        const Vec qh = column_range(q, t, d, hd * dh, (hd + 1) * dh), kh = column_range(k, t, d, hd * dh, (hd + 1) * dh),
                  vh = column_range(v, t, d, hd * dh, (hd + 1) * dh);
        const Vec s = product("scores" + tag, qh, transposed(kh, t, dh), t, dh, t, 1 / std::sqrt(static_cast<double>(dh)));
        const Vec p = round(causal_softmax(s, t));
        const Vec oh = product("pv" + tag, p, vh, t, t, dh, 1.0);
        for (std::int64_t i = 0; i < t; ++i)
            for (std::int64_t j = 0; j < dh; ++j) o[static_cast<std::size_t>(i * d + hd * dh + j)] = oh[static_cast<std::size_t>(i * dh + j)];
    }
    const Vec u = round(add(h, product("o", o, w.wo, t, d, d, 1.0)));
    const Vec a = round(relu(product("fc1", round(layer_norm_rows(u, t, d, w.ln2_g, w.ln2_b, w.eps)), w.w1, t, d, w.ffn, 1.0)));
    return round(add(u, product("fc2", a, w.w2, t, w.ffn, d, 1.0)));
}

// One INT8 GEMM of the flow, y = fp16(scale * (X~ W~)), checked against its
// local budget (file comment of int8_block.hpp).
Vec int8_product(const std::string& name, const Vec& x, const Vec& w, std::int64_t m, std::int64_t k, std::int64_t n,
                 double scale, std::vector<GemmStage>& stages) {
    const Vec sx = quant_scales(x, m, k, QuantAxis::token), sw = quant_scales(w, k, n, QuantAxis::channel);
    const auto acc = int8_matmul(quantize(x, m, k, QuantAxis::token, sx), quantize(w, k, n, QuantAxis::channel, sw), m, k, n);
    const double g = gamma(static_cast<double>(k + 2), 0x1p-53);  // the FP64 tier's own rounding
    GemmStage st{name};
    Vec y(static_cast<std::size_t>(m * n));
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            const std::size_t e = static_cast<std::size_t>(i * n + j);
            y[e] = fp16(scale * static_cast<double>(acc[e]) * sx[static_cast<std::size_t>(i)] * sw[static_cast<std::size_t>(j)]);
            double exact = 0, noise = 0, mag = 0;
            for (std::int64_t p = 0; p < k; ++p) {
                const double xv = x[static_cast<std::size_t>(i * k + p)], wv = w[static_cast<std::size_t>(p * n + j)];
                exact += xv * wv;
                mag += std::fabs(xv * wv);
                noise += sx[static_cast<std::size_t>(i)] / 2 * std::fabs(wv) + std::fabs(xv) * sw[static_cast<std::size_t>(j)] / 2 +
                         sx[static_cast<std::size_t>(i)] * sw[static_cast<std::size_t>(j)] / 4;
            }
            const double budget = scale * (noise * (1 + g) + 2 * g * mag) + 0.5 * ulp_at(Format::fp16, std::fabs(y[e]));
            const double err = std::fabs(y[e] - scale * exact);
            st.max_error = std::max(st.max_error, err);
            st.max_util = std::max(st.max_util, budget > 0 ? err / budget : (err > 0 ? INFINITY : 0.0));
        }
    stages.push_back(st);
    return y;
}

void require(const BlockWeights& w, const Vec& h, std::int64_t t) {
    const auto dd = static_cast<std::size_t>(w.d * w.d), df = static_cast<std::size_t>(w.d * w.ffn);
    if (w.d <= 0 || w.heads <= 0 || w.d % w.heads != 0 || h.size() != static_cast<std::size_t>(t * w.d) ||
        w.wq.size() != dd || w.wk.size() != dd || w.wv.size() != dd || w.wo.size() != dd || w.w1.size() != df ||
        w.w2.size() != df || w.ln1_g.size() != static_cast<std::size_t>(w.d) || w.ln2_g.size() != w.ln1_g.size() ||
        w.ln1_b.size() != w.ln1_g.size() || w.ln2_b.size() != w.ln1_g.size())
        throw std::invalid_argument("int8_block: inconsistent block dimensions");
}

// max |x_j| over rows and max |W_jk| over the columns of several weights.
Vec smoothing(const Vec& x, std::int64_t t, std::int64_t c, const std::vector<const Vec*>& ws, std::int64_t n, double alpha) {
    Vec s(static_cast<std::size_t>(c), 1.0);
    for (std::int64_t j = 0; j < c; ++j) {
        double ax = 0, aw = 0;
        for (std::int64_t i = 0; i < t; ++i) ax = std::max(ax, std::fabs(x[static_cast<std::size_t>(i * c + j)]));
        for (const Vec* w : ws)
            for (std::int64_t k = 0; k < n; ++k) aw = std::max(aw, std::fabs((*w)[static_cast<std::size_t>(j * n + k)]));
        if (ax > 0 && aw > 0) s[static_cast<std::size_t>(j)] = std::pow(ax, alpha) / std::pow(aw, 1 - alpha);
    }
    return s;
}

void fold(Vec& g, Vec& b, const std::vector<Vec*>& ws, std::int64_t n, const Vec& s) {
    for (std::size_t j = 0; j < s.size(); ++j) {
        g[j] /= s[j], b[j] /= s[j];
        for (Vec* w : ws)
            for (std::int64_t k = 0; k < n; ++k) (*w)[j * static_cast<std::size_t>(n) + static_cast<std::size_t>(k)] *= s[j];
    }
}

}  // namespace

std::vector<double> block_real(const std::vector<double>& h, std::int64_t t, const BlockWeights& w) {
    require(w, h, t);
    return run_block(h, t, w,
                     [](const std::string&, const Vec& x, const Vec& wm, std::int64_t m, std::int64_t k, std::int64_t n,
                        double scale) {
                         Vec y = matmul(x, wm, m, k, n);
                         for (double& v : y) v *= scale;
                         return y;
                     },
                     [](Vec v) { return v; });
}

FlowResult block_int8_flow(const std::vector<double>& h, std::int64_t t, const BlockWeights& w) {
    require(w, h, t);
    FlowResult r;
    r.out = run_block(rounded(h), t, w,
                      [&r](const std::string& name, const Vec& x, const Vec& wm, std::int64_t m, std::int64_t k,
                           std::int64_t n, double scale) { return int8_product(name, x, wm, m, k, n, scale, r.stages); },
                      [](Vec v) { return rounded(std::move(v)); });
    return r;
}

BlockWeights smooth_block(const BlockWeights& w, const std::vector<double>& h, std::int64_t t, double alpha) {
    require(w, h, t);
    BlockWeights s = w;
    const Vec x1 = layer_norm_rows(h, t, w.d, w.ln1_g, w.ln1_b, w.eps);
    fold(s.ln1_g, s.ln1_b, {&s.wq, &s.wk, &s.wv}, w.d, smoothing(x1, t, w.d, {&w.wq, &w.wk, &w.wv}, w.d, alpha));
    // LN2's input u is the real block's (calibration on the unquantized
    // model): the block's output with an MLP that adds 0.
    BlockWeights no_mlp = w;
    std::fill(no_mlp.w2.begin(), no_mlp.w2.end(), 0.0);
    const Vec x2 = layer_norm_rows(block_real(h, t, no_mlp), t, w.d, w.ln2_g, w.ln2_b, w.eps);
    fold(s.ln2_g, s.ln2_b, {&s.w1}, w.ffn, smoothing(x2, t, w.d, {&w.w1}, w.ffn, alpha));
    return s;
}

}  // namespace conform::oracle
