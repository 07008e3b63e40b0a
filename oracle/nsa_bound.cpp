// nsa_attention_bound (docs/nsa_attention.md, "Error budget"): three
// attention bounds (attention_bound, FP32 branch outputs) composed with the
// FP32 sigmoid gates, their products and the three-term FP32 sum:
//   compressed: attention_bound over the exact K_cmp, V_cmp with the pooling
//     error of the kernel's stored K_cmp as a further logit error on every
//     key, and the pooling error of V_cmp added;
//   selected:   attention_bound per KV head with the 0/-inf mask of the
//     selection's tokens s <= t;
//   window:     attention_bound with window w.
// The magnitudes (branch outputs, lse) are recomputed in double.
#include <algorithm>
#include <cmath>

#include "oracle/attention_bound.hpp"
#include "oracle/bound.hpp"
#include "oracle/nsa.hpp"

namespace conform::oracle {
namespace {

constexpr double kNsaBU = 0x1p-24;
// The FP32 sigmoid's relative and absolute error (oracle/attention_gated_bound.cpp,
// docs/gated_attention.md: e^-|g| within 2 ulps and 2 subnormal ulps, 1 + t and one division).
constexpr double kNsaTheta = (1 + kNsaBU) / ((1 - 4 * kNsaBU - 0x1p-148) * (1 - kNsaBU)) - 1;
constexpr double kNsaEtaSigma = 0x1p-147;
constexpr double kNsaEtaProduct = 0x1p-150;


// A [shape] FP64 tensor holding `x`.
Tensor nsa_tensor(std::vector<std::int64_t> shape, const std::vector<double>& x) {
    Tensor t(Format::fp64, std::move(shape));
    for (std::int64_t e = 0; e < t.numel(); ++e) t.set_value(e, x[static_cast<std::size_t>(e)]);
    return t;
}

// Rows [r0, r0 + rows) of width w of x.
std::vector<double> nsa_rows(const std::vector<double>& x, std::int64_t r0, std::int64_t rows, std::int64_t w) {
    return {x.begin() + r0 * w, x.begin() + (r0 + rows) * w};
}

// The attention parameters of a branch: the scale, the kernel's declared key tile, and the window.
Params nsa_attention_params(const Params& p, double window) {
    Params a;
    a.set("scale", p.get("scale", 0));
    if (p.get("declared.key_block", 0) > 0) a.set("declared.key_block", p.get("declared.key_block", 0));
    if (window > 0) a.set("window", window);
    return a;
}

}  // namespace

std::vector<std::vector<double>> nsa_attention_bound(const Params& p, const std::vector<TensorView>& in,
                                                     const std::vector<std::vector<double>>& exact, Format,
                                                     const std::vector<Format>& out) {
    const NsaSetup s = nsa_setup(p, in);
    const std::vector<double> q = decoded_values(in[0]), k = decoded_values(in[1]), v = decoded_values(in[2]);
    const std::vector<double> gate = decoded_values(in[3]);
    const double scale = nsa_scale<double>(p, s.d);
    const std::vector<double> kc = nsa_pool<double>(s, k, s.d), vc = nsa_pool<double>(s, v, s.dv);
    const Format store = in[1].format;
    const std::vector<double> ek = nsa_pool_error(s, k, kc, s.d, store), ev = nsa_pool_error(s, v, vc, s.dv, store);
    const std::vector<double>& sel = exact.at(1);
    const NsaBranches<double> br = nsa_branches<double>(s, q, k, v, kc, vc, scale, sel);
    const Params ap = nsa_attention_params(p, 0);
    const FlashErrorModel model = declared_flash_model(ap, {Format::fp32, Format::fp32});
    const std::size_t n_o = static_cast<std::size_t>(s.hq * s.lq * s.dv);
    std::vector<double> bound[3];
    for (auto& b : bound) b.assign(n_o, 0.0);

    // Compressed: per query row, over its visible blocks.
    for (std::int64_t h = 0; h < s.hq; ++h)
        for (std::int64_t i = 0; i < s.lq; ++i) {
            const std::int64_t g = kv_head_of(h, s.hq, s.hkv), c = s.visible(i), row = h * s.lq + i;
            if (c == 0) continue;  // no visible block: exactly 0 required
            const Tensor tq = nsa_tensor({1, 1, s.d}, nsa_rows(q, row, 1, s.d));
            const Tensor tk = nsa_tensor({1, c, s.d}, nsa_rows(kc, g * s.blocks, c, s.d));
            const Tensor tv = nsa_tensor({1, c, s.dv}, nsa_rows(vc, g * s.blocks, c, s.dv));
            const std::vector<TensorView> views{tq.view(), tk.view(), tv.view()};
            // The stored K_cmp moves logit b by at most |scale| sum_d |q_d| e_K[b, d]: added to every key's
            // logit error through e_exp (which enters each delta_j (N_b + 1) times), with its effect on the
            // dot's rounding, the max subtraction and M.
            double big_delta = 0;
            for (std::int64_t b = 0; b < c; ++b) {
                double pe = 0;
                for (std::int64_t d = 0; d < s.d; ++d)
                    pe += std::fabs(q[static_cast<std::size_t>(row * s.d + d)]) * ek[static_cast<std::size_t>((g * s.blocks + b) * s.d + d)];
                big_delta = std::max(big_delta, std::fabs(scale) * pe);
            }
            FlashErrorModel m = model;
            const double nb = model.key_block > 0 ? std::ceil(static_cast<double>(c) / model.key_block) : static_cast<double>(c);
            m.e_exp += big_delta * (1 + gamma(static_cast<double>(s.d + 2), kNsaBU) + 8 * kNsaBU + 2 * kNsaBU * (nb + 1)) / (nb + 1);
            const std::vector<double> b = attention_bound(
                ap, views, attention_outputs(views, nsa_rows(br.o[0], row, 1, s.dv), {br.lse[0][static_cast<std::size_t>(row)]}), m);
            const double g_acc = 2 * gamma(static_cast<double>(c) + nb + 2, kNsaBU) + kNsaBU;
            for (std::int64_t d = 0; d < s.dv; ++d) {
                double ev_max = 0;  // the stored V_cmp's error, carried by weights summing to 1
                for (std::int64_t j = 0; j < c; ++j) ev_max = std::max(ev_max, ev[static_cast<std::size_t>((g * s.blocks + j) * s.dv + d)]);
                bound[0][static_cast<std::size_t>(row * s.dv + d)] = b[static_cast<std::size_t>(d)] + ev_max * (1 + g_acc);
            }
        }

    // Selected: per KV head, its group's query heads with the selection's 0/-inf mask.
    for (std::int64_t g = 0; g < s.hkv; ++g) {
        std::vector<double> mask(static_cast<std::size_t>(s.lq * s.lk), -INFINITY);
        std::vector<char> poisoned(static_cast<std::size_t>(s.lq), 0);
        for (std::int64_t i = 0; i < s.lq; ++i) {
            const std::vector<double> row = nsa_rows(sel, g * s.lq + i, 1, s.n);
            if (std::isnan(row[0])) poisoned[static_cast<std::size_t>(i)] = 1;
            else
                for (std::int64_t j : nsa_selected_keys(s, i, row)) mask[static_cast<std::size_t>(i * s.lk + j)] = 0;
        }
        const Tensor tq = nsa_tensor({s.group, s.lq, s.d}, nsa_rows(q, g * s.group * s.lq, s.group * s.lq, s.d));
        const Tensor tk = nsa_tensor({1, s.lk, s.d}, nsa_rows(k, g * s.lk, s.lk, s.d));
        const Tensor tv = nsa_tensor({1, s.lk, s.dv}, nsa_rows(v, g * s.lk, s.lk, s.dv));
        const Tensor tm = nsa_tensor({s.lq, s.lk}, mask);
        const std::vector<TensorView> views{tq.view(), tk.view(), tv.view(), tm.view()};
        const std::int64_t r0 = g * s.group * s.lq, rows = s.group * s.lq;
        const std::vector<double> b = attention_bound(
            ap, views, attention_outputs(views, nsa_rows(br.o[1], r0, rows, s.dv), nsa_rows(br.lse[1], r0, rows, 1)), model);
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t d = 0; d < s.dv; ++d)
                bound[1][static_cast<std::size_t>((r0 + r) * s.dv + d)] =
                    poisoned[static_cast<std::size_t>(r % s.lq)] ? NAN : b[static_cast<std::size_t>(r * s.dv + d)];
    }

    // Window: every head at once.
    {
        const std::vector<TensorView> views{in[0], in[1], in[2]};
        const std::vector<double> b = attention_bound(nsa_attention_params(p, static_cast<double>(s.window)), views,
                                                      attention_outputs(views, br.o[2], br.lse[2]), model);
        std::copy(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n_o), bound[2].begin());
    }

    // The gates: sigmoid32(g) within theta s + eta_s (exact at +-inf), the FP32 product
    // fl(o^ s^), and the FP32 sum of the three products (exact when at most one is not 0).
    // Undefined (not judged): a row whose importance budget is not finite (an FP32 logit may
    // overflow: any selection), and an element whose branch bound is not finite.
    const std::vector<double> delta = nsa_importance_budget(s, p, in, store);
    std::vector<char> undefined(static_cast<std::size_t>(s.hkv * s.lq), 0);
    for (std::int64_t r = 0; r < s.hkv * s.lq; ++r)
        for (std::int64_t b = 0; b < s.candidates; ++b)
            if (!std::isfinite(delta[static_cast<std::size_t>(r * s.candidates + b)]) && !std::isnan(sel[static_cast<std::size_t>(r * s.n)]))
                undefined[static_cast<std::size_t>(r)] = 1;
    // An FP32 logit of a branch may overflow (its terms' magnitudes, the stored K_cmp's included,
    // past FP32's range: a hidden key or an infinite logit where the exact one is finite), or an FP32
    // accumulator sum_j e_j v_j (e_j <= 1): the keys' count times their largest |v|.
    const double g_dot = gamma(static_cast<double>(s.d + 2), kNsaBU);
    const auto may_overflow = [&](std::int64_t h, std::int64_t i, std::int64_t d) {
        const std::int64_t g = kv_head_of(h, s.hq, s.hkv);
        const std::vector<double> row = nsa_rows(sel, g * s.lq + i, 1, s.n);
        const std::vector<std::int64_t> keys[3] = {nsa_compressed_keys(s, i),
                                                   std::isnan(row[0]) ? std::vector<std::int64_t>{} : nsa_selected_keys(s, i, row),
                                                   nsa_window_keys(s, i)};
        for (int b = 0; b < 3; ++b)
            for (std::int64_t j : keys[b]) {
                double a = 0;  // the finite terms (an infinite one beside an overflowing one: NaN in FP32)
                for (std::int64_t c = 0; c < s.d; ++c) {
                    const double x = std::fabs(q[static_cast<std::size_t>((h * s.lq + i) * s.d + c)]);
                    const auto kb = static_cast<std::size_t>(((b == 0 ? s.blocks : s.lk) * g + j) * s.d + c);
                    const double t = b == 0 ? x * (std::fabs(kc[kb]) + ek[kb]) : x * std::fabs(k[kb]);
                    if (std::isfinite(t)) a += t;
                }
                if (a * std::max(1.0, std::fabs(scale)) * (1 + g_dot) >= 0x1p127) return true;
            }
        for (int b = 0; b < 3; ++b) {
            double m = 0;
            for (std::int64_t j : keys[b])
                m = std::max(m, std::fabs(b == 0 ? vc[static_cast<std::size_t>((g * s.blocks + j) * s.dv + d)]
                                                 : v[static_cast<std::size_t>((g * s.lk + j) * s.dv + d)]));
            if (std::isfinite(m) && m * static_cast<double>(keys[b].size()) * (1 + 0x1p-20) >= 0x1p128) return true;
        }
        return false;
    };
    const bool narrower = info(out.at(0)).precision < info(Format::fp32).precision;
    std::vector<double> bo(n_o);
    for (std::size_t e = 0; e < n_o; ++e) {
        const std::size_t row = e / static_cast<std::size_t>(s.dv);
        const std::int64_t h = static_cast<std::int64_t>(row) / s.lq, i = static_cast<std::int64_t>(row) % s.lq;
        double pre = 0, mags = 0;
        int terms = 0;
        bool nan = !std::isfinite(exact.at(0)[e]), undef = undefined[static_cast<std::size_t>(kv_head_of(h, s.hq, s.hkv) * s.lq + i)] != 0 ||
                                                        may_overflow(h, i, static_cast<std::int64_t>(e) % s.dv);
        for (int b = 0; b < 3; ++b) {
            const double gl = gate[row * 3 + static_cast<std::size_t>(b)], bb = bound[b][e], o = std::fabs(br.o[b][e]);
            if (std::isnan(gl) || std::isnan(bb)) nan = true;
            if (std::isinf(bb)) undef = true;
            const bool exact_gate = std::isinf(gl);
            const double sg = sigmoid_double(gl), theta = exact_gate ? 0 : kNsaTheta, eta_s = exact_gate ? 0 : kNsaEtaSigma;
            const double big_s = sg * (1 + theta) + eta_s;
            if (big_s == 0 || (bb == 0 && o == 0)) continue;  // the product is exactly 0
            ++terms;
            pre += bb * big_s + o * (sg * theta + eta_s) + kNsaBU * (o + bb) * big_s + kNsaEtaProduct;
            mags += (o + bb) * big_s * (1 + kNsaBU) + kNsaEtaProduct;
        }
        if (!nan && mags * (1 + 0x1p-20) >= 0x1p128) undef = true;  // a product or the FP32 sum may overflow
        if (nan || undef) {
            // not bounded (an FP32 overflow may change the class too), else a non-finite exact value:
            // classes are compared
            bo[e] = undef ? kUndefined : NAN;
            continue;
        }
        if (terms > 1) pre += gamma(2, kNsaBU) * mags;
        const double y = exact[0][e];
        bo[e] = pre + (narrower && (pre > 0 || y != 0) ? 0.5 * ulp_at(out[0], std::fabs(y) + pre) : 0);
    }
    std::vector<double> bi(exact.at(1).size(), 0.0);
    for (std::size_t e = 0; e < bi.size(); ++e)
        if (std::isnan(exact[1][e])) bi[e] = NAN;
        else if (undefined[e / static_cast<std::size_t>(s.n)]) bi[e] = kUndefined;
    return {bo, bi};
}

}  // namespace conform::oracle
