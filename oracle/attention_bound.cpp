// attention_bound (docs/attention.md): one pass over each row's visible keys
// with magnitudes recomputed in double.
#include "oracle/attention_bound.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "oracle/attention.hpp"
#include "oracle/bound.hpp"

namespace conform::oracle {
namespace {

constexpr double kU = 0x1p-24;     // FP32 unit roundoff (the accumulators)

struct Shape {
    std::int64_t hq, hkv, lq, lk, d, dv;
};

// One row's logits and the magnitudes the budget needs; s_j = -inf for
// hidden keys.
struct RowLogits {
    std::vector<double> s, capped, a;  // final logit, logit after softcap (before mask), sum |q_d k_jd|
};

RowLogits row_logits(const Shape& sh, const Params& p, double scale, const std::vector<double>& q,
                     const std::vector<double>& k, const std::vector<double>& mask, std::int64_t h, std::int64_t i) {
    const std::int64_t g = kv_head_of(h, sh.hq, sh.hkv);
    const bool causal = p.get("causal", 0) != 0;
    const auto window = static_cast<std::int64_t>(p.get("window", 0));
    const bool top_left = p.get("convention.causal", 0) != 0;
    const double cap = p.get("softcap", 0);
    RowLogits r{std::vector<double>(sh.lk, -INFINITY), std::vector<double>(sh.lk, 0), std::vector<double>(sh.lk, 0)};
    const double* qr = &q[(h * sh.lq + i) * sh.d];
    for (std::int64_t j = 0; j < sh.lk; ++j) {
        if (!key_visible(i, j, sh.lq, sh.lk, causal, window, top_left)) continue;
        if (!mask.empty() && mask[i * sh.lk + j] == -INFINITY) continue;  // hidden like a structural mask
        const double* kr = &k[(g * sh.lk + j) * sh.d];
        double dot = 0, a = 0;
        for (std::int64_t t = 0; t < sh.d; ++t) dot += qr[t] * kr[t], a += std::fabs(qr[t] * kr[t]);
        double x = scale * dot;
        if (cap > 0) x = cap * std::tanh(x / cap);
        r.capped[j] = x, r.a[j] = a;
        r.s[j] = mask.empty() ? x : x + mask[i * sh.lk + j];
    }
    return r;
}

double half_ulp(Format f, double y) { return 0.5 * ulp_at(f, std::fabs(y)); }

// p * rho where p may have underflowed to 0 in double and rho overflowed to
// inf (logits so large that their FP32 error exceeds ~700 in the exponent):
// then the kernel's weight is unbounded and so is the bound (inf, never NaN).
double weighted(double p, double rho) {
    if (std::isinf(rho)) return INFINITY;
    return p * rho;
}

}  // namespace

std::vector<double> attention_bound(const Params& p, const std::vector<TensorView>& in, const OpOutputs& exact,
                                    const FlashErrorModel& model) {
    const Shape sh{in[0].shape[0], in[1].shape[0], in[0].shape[1], in[1].shape[1], in[0].shape[2], in[2].shape[2]};
    const std::vector<double> q = decoded_values(in[0]), k = decoded_values(in[1]), v = decoded_values(in[2]);
    const std::vector<double> mask = in.size() > 3 ? decoded_values(in[3]) : std::vector<double>{};
    const double scale_param = p.get("scale", 0);
    const double scale = scale_param != 0 ? scale_param : 1 / std::sqrt(static_cast<double>(sh.d));
    const bool softcap = p.get("softcap", 0) > 0;
    const double nb = model.key_block > 0 ? std::ceil(static_cast<double>(sh.lk) / model.key_block)
                                          : static_cast<double>(sh.lk);
    const double kk = sh.lk + nb;  // terms of each accumulation: products and rescales
    const double g2 = 2 * gamma(kk + 2, kU), gk = gamma(kk, kU);
    const std::int64_t n_o = sh.hq * sh.lq * sh.dv;
    std::vector<double> bound(static_cast<std::size_t>(n_o + sh.hq * sh.lq), 0.0);
    std::vector<double> rho(sh.lk), pr(sh.lk);
    for (std::int64_t h = 0; h < sh.hq; ++h) {
        const double* vh = &v[kv_head_of(h, sh.hq, sh.hkv) * sh.lk * sh.dv];
        for (std::int64_t i = 0; i < sh.lq; ++i) {
            const std::int64_t row = h * sh.lq + i;
            double* ob = &bound[row * sh.dv];
            double& lb = bound[n_o + row];
            const RowLogits r = row_logits(sh, p, scale, q, k, mask, h, i);
            if (std::any_of(r.s.begin(), r.s.end(), [](double s) { return std::isnan(s) || s == INFINITY; })) {
                std::fill(ob, ob + sh.dv, NAN), lb = NAN;
                continue;
            }
            const double m = *std::max_element(r.s.begin(), r.s.end());
            if (m == -INFINITY) continue;  // empty row: exact (0, -inf) required
            double mm = 0, l = 0;          // M = max |s_j| over visible keys; l = sum exp(s_j - m)
            for (double s : r.s)
                if (s != -INFINITY) mm = std::max(mm, std::fabs(s)), l += std::exp(s - m);
            // 1. logit perturbation delta_j; 2. weights: rho_j with E = sum p_k (e^delta_k - 1)
            double big_e = 0;
            for (std::int64_t j = 0; j < sh.lk; ++j) {
                pr[j] = r.s[j] == -INFINITY ? 0 : std::exp(r.s[j] - m) / l;
                if (pr[j] == 0 && r.s[j] == -INFINITY) continue;
                const double delta = gamma(sh.d + 2.0, kU) * std::fabs(scale) * r.a[j] +
                                     (softcap ? (model.e_tanh + 3 * kU) * std::fabs(r.capped[j]) : 0) +
                                     (mask.empty() ? 0 : kU * std::fabs(r.s[j])) +  // the mask add rounds once
                                     4 * kU * (std::fabs(r.s[j]) + std::fabs(m)) +
                                     (nb + 1) * (model.e_exp + 2 * kU * mm);
                rho[j] = std::expm1(delta);  // e^delta - 1, completed with E below
                big_e += weighted(pr[j], rho[j]);
            }
            for (std::int64_t j = 0; j < sh.lk; ++j)
                if (r.s[j] != -INFINITY) rho[j] = (1 + rho[j]) * (1 + big_e) - 1;
            // 3. accumulation and output rounding, per output column d
            for (std::int64_t d = 0; d < sh.dv; ++d) {
                double vd = 0, td = 0, vmax = 0;
                for (std::int64_t j = 0; j < sh.lk; ++j) {
                    if (r.s[j] == -INFINITY) continue;
                    const double av = std::fabs(vh[j * sh.dv + d]);
                    vd += pr[j] * av, td += weighted(pr[j], rho[j]) * av, vmax = std::max(vmax, av);
                }
                const double od = std::fabs(to_double(exact.values[0][row * sh.dv + d]));
                const double pre = td + g2 * (vd + td);  // bound before the output rounding
                ob[d] = pre + half_ulp(model.out, od + pre) + sh.lk * kEta * vmax;
            }
            const double lse = std::fabs(to_double(exact.values[1][row]));
            const double pre = std::log1p(big_e) + gk / (1 - gk) + model.e_log * std::fabs(std::log(l)) + kU * lse;
            lb = pre + half_ulp(model.lse_out, lse + pre);
        }
    }
    return bound;
}

std::vector<std::vector<double>> attention_weights(const Params& p, const std::vector<TensorView>& in) {
    const Shape sh{in[0].shape[0], in[1].shape[0], in[0].shape[1], in[1].shape[1], in[0].shape[2], in[2].shape[2]};
    const std::vector<double> q = decoded_values(in[0]), k = decoded_values(in[1]);
    const std::vector<double> mask = in.size() > 3 ? decoded_values(in[3]) : std::vector<double>{};
    const double scale_param = p.get("scale", 0);
    const double scale = scale_param != 0 ? scale_param : 1 / std::sqrt(static_cast<double>(sh.d));
    std::vector<std::vector<double>> weights;
    for (std::int64_t h = 0; h < sh.hq; ++h)
        for (std::int64_t i = 0; i < sh.lq; ++i) {
            const RowLogits r = row_logits(sh, p, scale, q, k, mask, h, i);
            std::vector<double>& w = weights.emplace_back();
            const double m = *std::max_element(r.s.begin(), r.s.end());
            if (!std::isfinite(m)) continue;
            for (double s : r.s)
                if (s != -INFINITY) w.push_back(std::exp(s - m));
        }
    return weights;
}

}  // namespace conform::oracle
