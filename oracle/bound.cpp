#include "oracle/bound.hpp"

#include <cmath>
#include <stdexcept>

namespace conform::oracle {
namespace {

// Smallest positive subnormal of the accumulation format: the absolute error
// an underflowing product can make.
double eta(Format acc) {
    const FormatInfo& fi = info(acc);
    return std::ldexp(1.0, fi.emin - fi.precision + 1);
}

// Output rounding: half an output ulp at the largest value the kernel's
// pre-rounding result can take.
double half_ulp_out(Format out, double y, double rel) {
    return 0.5 * ulp_at(out, std::fabs(y) * (1 + rel));
}

// rms_norm and l2_norm (docs/norm.md): every term of sum x^2 is nonnegative,
// so the computed sum is s (1 + theta), |theta| <= gamma_n; dividing by n,
// rounding eps and adding it keep t = mean + eps within gamma_{n+2} relative
// (one spare rounding for kernels that multiply by fl(1/n)): eta_t <= gamma_{n+3}.
// 1/sqrt(t (1 + eta)) = q (1 + a) with |a| <= eta / (2 (1 - eta)).  Then
// sqrt, the reciprocal (or division) and the two multiplies are four more
// roundings, b = gamma_4 (gamma_5 with the 1 + w of zero-centred weights):
// rel = a + b + a b holds for every n with n u < 1, no first-order shortcut.
std::vector<double> rms_bound(const Params& p, const NormRow& r, Format acc, Format out, bool has_weight) {
    const double u = unit_roundoff(acc);
    const std::size_t n = r.x.size();
    const bool zc = has_weight && p.get("zero_centered", 0) != 0;
    const double eta_t = gamma(n + 3.0, u);
    const double a = eta_t / (2 * (1 - eta_t)), b = gamma(zc ? 5 : 4, u);
    const double rel = a + b + a * b;
    std::vector<double> bound(n);
    for (std::size_t i = 0; i < n; ++i) {
        const double w = has_weight ? std::fabs(zc ? 1 + r.w[i] : r.w[i]) : 1.0;
        bound[i] = std::fabs(r.y[i]) * rel + half_ulp_out(out, r.y[i], rel) + 2 * eta(acc) * (1 + w);
    }
    return bound;
}

// layer_norm, two-pass, first order in u with second-order slack in gamma:
//   mu_hat = mu + e_mu,          |e_mu| <= gamma_{n+1} A,  A = mean |x|
//   d_hat_i = d_i + E'_i,        |E'_i| <= E_i = |e_mu| + u (|d_i| + |e_mu|)
//   t = var + eps, t_hat = t (1 + eta_t) with
//     eta_t <= [gamma_{n+2} S + (2 sum |d_i| E_i + sum E_i^2)/n + u eps] / t + u,  S = mean d_hat^2
//   y_hat_i = w_i d_hat_i q_hat + b_i, q = 1/sqrt(t), q_hat = q (1 + eta_t/2 + 2u)
//   |y_hat_i - y_i| <= |w_i| q (E_i + |d_i| (eta_t/2 + 4u)) + u |y_i| + half ulp_out.
std::vector<double> layer_bound(const Params& p, const NormRow& r, Format acc, Format out) {
    const double u = unit_roundoff(acc);
    const std::size_t n = r.x.size();
    const double eps = p.get("eps", 1e-5);
    double A = 0, mu = 0;
    for (double v : r.x) A += std::fabs(v), mu += v;
    A /= n;
    mu /= n;
    const double e_mu = gamma(n + 1.0, u) * A;
    std::vector<double> d(n), E(n);
    double var = 0, cross = 0, esq = 0, s_hat = 0;
    for (std::size_t i = 0; i < n; ++i) {
        d[i] = r.x[i] - mu;
        E[i] = e_mu + u * (std::fabs(d[i]) + e_mu);
        var += d[i] * d[i];
        cross += std::fabs(d[i]) * E[i];
        esq += E[i] * E[i];
        s_hat += (std::fabs(d[i]) + E[i]) * (std::fabs(d[i]) + E[i]);
    }
    var /= n;
    s_hat /= n;
    const double t = var + eps;
    const double eta_t = (gamma(n + 2.0, u) * s_hat + (2 * cross + esq) / n + u * eps) / t + u;
    const double q = 1 / std::sqrt(t);
    std::vector<double> bound(n);
    for (std::size_t i = 0; i < n; ++i) {
        const double w = std::fabs(r.w[i]);
        const double rel_q = eta_t / 2 + 4 * u;
        bound[i] = w * q * (E[i] + std::fabs(d[i]) * rel_q) * (1 + 2 * rel_q) + u * std::fabs(r.y[i]) +
                   half_ulp_out(out, r.y[i], rel_q + u) + 2 * eta(acc) * (1 + w);
    }
    return bound;
}

}  // namespace

double gamma(double k, double u) { return k * u / (1 - k * u); }

std::vector<double> norm_bound(const OpSpec& op, const Params& p, const NormRow& row, Format acc, Format out) {
    if (op.name == "rms_norm") return rms_bound(p, row, acc, out, true);
    if (op.name == "l2_norm") return rms_bound(p, row, acc, out, false);
    if (op.name == "layer_norm") return layer_bound(p, row, acc, out);
    throw std::invalid_argument("no error bound for op '" + op.name + "'");
}

}  // namespace conform::oracle
