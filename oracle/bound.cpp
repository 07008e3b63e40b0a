#include "oracle/bound.hpp"

#include "oracle/attention_bound.hpp"
#include "oracle/compressed_attention.hpp"
#include "oracle/gdn_bound.hpp"
#include "oracle/hc_residual_bound.hpp"
#include "oracle/attn_res.hpp"
#include "oracle/gated_residual.hpp"
#include "oracle/int8.hpp"
#include "oracle/int8_block.hpp"
#include "oracle/fp8.hpp"
#include "oracle/matmul.hpp"
#include "oracle/dsa.hpp"
#include "oracle/mla_bound.hpp"
#include "oracle/block_sparse.hpp"
#include "oracle/nsa.hpp"
#include "oracle/moe.hpp"
#include "oracle/moe_layer.hpp"
#include "oracle/sparse.hpp"
#include "oracle/rope.hpp"
#include "oracle/sinkhorn_bound.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace conform::oracle {
namespace {

// Smallest positive subnormal of the accumulation format: the absolute error
// an underflowing product can make.
double eta(Format acc) { return min_subnormal(acc); }

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
// Declared conventions (docs/norm.md, "Conventions"): eps outside the root,
// r = sqrt(t) + eps, and l2's r = max(||x||, eps) take the computed root
// with the same relative error and combine it with fl(eps) (one rounding) by
// an add (one more) or an exact max; a sum or max of two positive terms has
// at most the larger relative error of the two, so two more roundings
// cover both: b = gamma_6 (gamma_7 zero-centred).  Underflow (docs/norm.md):
// with eps beside the root, squares or a mean that underflow err by up to
// eta_abs absolutely (eta for the mean of squares, n eta / 2 + eta / 2 for
// l2's sum), which the root turns into min(sqrt(eta_abs), eta_abs / sqrt(m))
// on r -- relative e / r, not covered by the relative terms when eps is tiny;
// and a max form computed as max(sum x^2, fl(eps)^2) errs by eta / 2 on a
// subnormal eps^2, relative eta / (4 eps^2) on the root, where the max can
// pick eps (||x|| < 2 eps).
std::vector<double> rms_bound(const Params& p, const RowData& r, Format acc, Format out, bool has_weight) {
    const double u = unit_roundoff(acc);
    const std::size_t n = r.x.size();
    const bool zc = has_weight && p.get("zero_centered", 0) != 0;
    const bool outside = p.get("convention.eps_placement", 0) != 0, max_form = p.get("convention.l2_form", 0) != 0;
    const double eta_t = gamma(n + 3.0, u);
    const double a = eta_t / (2 * (1 - eta_t)), b = gamma((zc ? 5 : 4) + (outside || max_form ? 2 : 0), u);
    double uf = 0;  // relative error of the root from underflow (declared forms only)
    if (outside || max_form) {
        const double eps = p.get("eps", 1e-6);
        double s = 0;
        for (double v : r.x) s += v * v;
        const double m = has_weight ? s / static_cast<double>(n) : s;
        if (outside) {
            const double eta_abs = has_weight ? eta(acc) : (static_cast<double>(n) + 1) * eta(acc) / 2;
            const double e_root = m > 0 ? std::min(std::sqrt(eta_abs), eta_abs / std::sqrt(m)) : std::sqrt(eta_abs);
            uf = e_root / (std::sqrt(m) + eps);
        } else if (eps > 0 && std::sqrt(m) < 2 * eps) {
            uf = eta(acc) / (4 * eps * eps);
        }
        uf = uf < 1 ? uf / (1 - uf) : INFINITY;  // on 1 / r: exact, not first order
    }
    const double rel = (1 + a) * (1 + b) * (1 + uf) - 1;
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
std::vector<double> layer_bound(const Params& p, const RowData& r, Format acc, Format out) {
    const double u = unit_roundoff(acc);
    const std::size_t n = r.x.size();
    const double eps = p.get("eps", 1e-5);
    double A = 0, mu = 0, A_c = 0;
    for (double v : r.x) A += std::fabs(v), mu += v, A_c += std::fabs(v - r.x[0]);
    A /= n;
    mu /= n;
    A_c /= n;
    // A kernel that declares a centred mean (declared.centred_mean: mu =
    // x[0] + sum (x - x[0]) / n, the sum and the add each in acc) errs by
    // gamma_{n+1} times the mean |x - x[0]| plus one rounding of mu: the
    // error follows the spread of the row, not its magnitude.
    const bool centred = p.get("declared.centred_mean", 0) != 0;
    // + eta/2: the mean's rounding when it is subnormal (an absolute error the
    // relative terms miss on a narrow row of subnormal values).
    const double e_mu = (centred ? gamma(n + 1.0, u) * A_c * (1 + u) + u * std::fabs(mu) : gamma(n + 1.0, u) * A) + eta(acc) / 2;
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
    double q, rel_q;
    if (p.get("convention.eps_placement", 0) == 0) {
        const double t = var + eps;
        // + eta: squares and the division by n underflowing (absolute).
        const double eta_t = (gamma(n + 2.0, u) * s_hat + (2 * cross + esq) / n + u * eps + eta(acc)) / t + u;
        q = 1 / std::sqrt(t);
        rel_q = eta_t / 2 + 4 * u;
    } else {
        // eps outside the root, D = sqrt(var) + eps: the computed variance is
        // off by at most delta (absolute), so its root by at most
        // min(delta / sqrt(var), sqrt(delta)); the root's rounding, fl(eps) and
        // the add give rel_D, and 1 / D_hat is within rel_D / (1 - rel_D) of q.
        const double delta = gamma(n + 2.0, u) * s_hat + (2 * cross + esq) / n + u * var + eta(acc);
        const double sv = std::sqrt(var), e_root = sv > 0 ? std::min(delta / sv, std::sqrt(delta)) : std::sqrt(delta);
        const double D = sv + eps;
        const double rel_d = (e_root * (1 + u) + u * sv + u * eps) * (1 + u) / D + u;  // the add rounds it all
        q = 1 / D;
        rel_q = rel_d < 1 ? rel_d / (1 - rel_d) + 4 * u : INFINITY;  // vacuous, reported as such
    }
    std::vector<double> bound(n);
    for (std::size_t i = 0; i < n; ++i) {
        const double w = std::fabs(r.w[i]);
        bound[i] = w * q * (E[i] + std::fabs(d[i]) * rel_q) * (1 + 2 * rel_q) + u * std::fabs(r.y[i]) +
                   half_ulp_out(out, r.y[i], rel_q + u) + 2 * eta(acc) * (1 + w);
    }
    return bound;
}

// softmax over a row, FP32-style kernel (docs/softmax.md, "Error budget"):
// m = max x (exact), d_i = fl(x_i - m) feeds exp an argument off by at most
// |x_i - m| u, so e_i = exp(d_i) carries eta_i = (1 + a_i)(1 + e_exp) - 1 with
// a_i = expm1(|x_i - m| u) and e_exp the exp's relative error (kExpUlps ulps).
// The sum of positive terms in any order: S_hat = S (1 + theta) with
// 1 + theta <= (1 + sum_j y_j eta_j)(1 + gamma_{n-1})  (y_j = e_j / S weights
// each term's error by its share).  Reciprocal and multiply: two roundings.
//   |y_hat_i - y_i| <= y_i [(1 + eta_i)(1 + u)^2 / (1 - theta) - 1] + half ulp_out + (n + 2) eta_acc,
// the last term for exp results and products in the subnormal range.
std::vector<double> softmax_bound(const RowData& r, Format acc, Format out) {
    constexpr double kExpUlps = 2;  // the kernel's exp: <= 2 ulps of acc (docs/softmax.md)
    const double u = unit_roundoff(acc), e_exp = 2 * kExpUlps * u;
    const std::size_t n = r.x.size();
    double m = -INFINITY;
    for (double v : r.x) m = std::fmax(m, v);
    std::vector<double> eta_i(n, 0.0);
    double weighted = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (!(r.y[i] > 0) || !std::isfinite(m)) continue;  // zero shares (and special rows: class checks)
        const double a = std::expm1(std::fabs(r.x[i] - m) * u);
        eta_i[i] = (1 + a) * (1 + e_exp) - 1;
        weighted += r.y[i] * eta_i[i];
    }
    const double theta = (1 + weighted) * (1 + gamma(n > 1 ? n - 1.0 : 0.0, u)) - 1;
    std::vector<double> bound(n);
    for (std::size_t i = 0; i < n; ++i) {
        const double rel = (1 + eta_i[i]) * (1 + u) * (1 + u) / (1 - theta) - 1;
        const double y = std::fabs(r.y[i]);
        bound[i] = (y > 0 ? y * rel : 0.0) + half_ulp_out(out, y, rel) + (n + 2.0) * eta(acc);
    }
    return bound;
}

}  // namespace

namespace {
thread_local Tier tls_tier = Tier::rigorous;
thread_local bool tls_sharpened = false;
}  // namespace

const char* name(Tier t) { return t == Tier::rigorous ? "rigorous" : "probabilistic"; }

double tier_failure_probability(double lambda, double u) {
    return 2 * std::exp(-lambda * lambda * (1 - u) * (1 - u) / 2);
}

TierScope::TierScope(Tier t) : prev_(tls_tier), prev_sharpened_(tls_sharpened) {
    tls_tier = t;
    tls_sharpened = false;
}
TierScope::~TierScope() {
    tls_tier = prev_;
    tls_sharpened = prev_sharpened_;
}
bool TierScope::sharpened() const { return tls_sharpened; }
Tier current_tier() { return tls_tier; }

// k u >= 1: no finite constant (the classical analysis needs k u < 1).
double gamma_rigorous(double k, double u) { return k * u < 1 ? k * u / (1 - k * u) : INFINITY; }

double gamma_probabilistic(double k, double u, double lambda) {
    return std::expm1(lambda * std::sqrt(k) * u + k * u * u / (1 - u));
}

double gamma(double k, double u) {
    const double rigorous = gamma_rigorous(k, u);
    if (tls_tier == Tier::rigorous || !(k > 0)) return rigorous;
    const double prob = gamma_probabilistic(k, u);
    if (rigorous <= prob) return rigorous;
    tls_sharpened = true;
    return prob;
}

double rounding_sum(double u, double l1, double l2) {
    if (u == 0) return 0;  // no rounding (and no 0 * inf for an infinite term)
    const double rigorous = u * l1;
    if (tls_tier == Tier::rigorous) return rigorous;
    const double prob = kLambda * u * l2;
    if (rigorous <= prob) return rigorous;
    tls_sharpened = true;
    return prob;
}

// attention_bound (docs/attention.md) for the cpu kernels' contract: exp
// within 2 ulps, FP32 state, lse stored in fp32, the key-tile count unknown
// (N_b = Lk, the weakest assumption) unless declared (declared_flash_model).
// It takes the oracle's outputs as OpOutputs; it reads them as magnitudes,
// so doubles suffice.
std::vector<std::vector<double>> attention_bound_split(const Params& p, const std::vector<TensorView>& in,
                                                       const std::vector<std::vector<double>>& exact, Format,
                                                       const std::vector<Format>& out) {
    const OpOutputs ex = attention_outputs(in, exact.at(0), exact.at(1));
    FlashErrorModel model = declared_flash_model(p, out);
    // attention_arith = input: the logits, the weights and the lse rounded to
    // the input format (docs/attention.md, "Logits in a narrower format").
    const Format f = in.at(0).format;
    if (p.get("convention.attention_arith", 0) != 0 && info(f).precision < info(Format::fp32).precision) {
        const double eta_f = min_subnormal(f) / 2;
        model.s_unit = std::max(model.s_unit, unit_roundoff(f)), model.s_eta = std::max(model.s_eta, eta_f);
        model.p_unit = std::max(model.p_unit, unit_roundoff(f)), model.p_eta = std::max(model.p_eta, eta_f);
        if (info(f).precision < info(model.lse_out).precision) model.lse_out = f;
    }
    std::vector<double> flat = attention_bound(p, in, ex, model);
    const auto n_o = static_cast<std::ptrdiff_t>(exact.at(0).size());
    return {std::vector<double>(flat.begin(), flat.begin() + n_o), std::vector<double>(flat.begin() + n_o, flat.end())};
}

namespace {

// lse_merge in FP32 (docs/softmax.md, "lse_merge kernel"), exp and log1p
// within 2 ulps (e = 4u) each.  With exact inputs, hi/lo the larger/smaller
// lse, d = lo - hi <= 0 and t = e^d <= 1:
//   t_hat = t (1 + tau),       tau = (1 + expm1(|d| u))(1 + e) - 1
//   |lse_hat - lse| <= A = t tau + e log1p(t) + u |lse|   (d log1p / dt <= 1; the add)
//   w_x = e^(lse_x - lse): argument off by A + u(|lse_x - lse| + A), then exp:
//   rho_x = (1 + expm1(A + u(|lse_x - lse| + A)))(1 + e) - 1
//   |o_hat - o| <= sum_x [|w_x o_x| ((1 + rho_x)(1 + u)^2 - 1) + s_x |o_x| (1 + u)^2] + 3 eta
//                  (+ half ulp_out when the output format is narrower than FP32)
// (two products and the sum rounded; eta for subnormal products).  "Within
// 2 ulps" is a relative 4u only for a normal result: an exp below FP32's
// normal range is off by up to 2 subnormal ulps, 2 eta absolute, so a weight
// that may be subnormal adds s_x = 2 eta times |o_x| (a huge o_x times a
// weight of e^-100 is where it shows), and t adds 2 eta to A.  The lse
// bound is A (inflated by (1 + 4u) for the second-order terms).  Each output
// stored in a format narrower than the arithmetic rounds once more: half an
// ulp of that format at the largest value the pre-rounding result can take
// (|o| + pre, |lse| + A).  A row with an empty state returns the other
// state: bound 0 where the output format holds it (the kernel must be exact),
// else the distance to its correct rounding; special rows are classes.
std::vector<std::vector<double>> lse_merge_bound(const Params&, const std::vector<TensorView>& in,
                                                 const std::vector<std::vector<double>>& exact, Format acc,
                                                 const std::vector<Format>& out) {
    const double u = unit_roundoff(acc), e = 4 * u;
    // The store into `fmt` of a value of magnitude up to `reach`: already
    // counted in the arithmetic's last rounding unless `fmt` is narrower.
    const auto store = [acc](Format fmt, double reach) {
        return info(fmt).precision < info(acc).precision ? 0.5 * ulp_at(fmt, reach) : 0.0;
    };
    // A value known exactly (the other state's, when one is empty) is stored
    // correctly rounded: its distance to that rounding (0 when it fits).
    const auto rounding_gap = [](Format fmt, double x) {
        const double stored = decode(fmt, encode(fmt, x));
        return std::isfinite(stored) ? std::fabs(stored - x) : 0.0;
    };
    const Format o_out = out.at(0), lse_out = out.size() > 1 ? out[1] : out[0];
    const TensorView &oa = in.at(0), &la = in.at(1), &ob = in.at(2), &lb = in.at(3);
    const std::int64_t dv = oa.cols();
    std::vector<double> bo(static_cast<std::size_t>(oa.numel()), 0.0), bl(static_cast<std::size_t>(la.numel()), 0.0);
    for (std::int64_t r = 0; r < oa.rows(); ++r) {
        const double a = la.value(r), b = lb.value(r);
        if (!std::isfinite(a) || !std::isfinite(b)) {  // the other state as given (or classes)
            bl[static_cast<std::size_t>(r)] = rounding_gap(lse_out, exact.at(1)[static_cast<std::size_t>(r)]);
            for (std::int64_t i = r * dv; i < (r + 1) * dv; ++i)
                bo[static_cast<std::size_t>(i)] = rounding_gap(o_out, exact.at(0)[static_cast<std::size_t>(i)]);
            continue;
        }
        const double lse = exact.at(1)[static_cast<std::size_t>(r)];
        const double d = std::fmin(a, b) - std::fmax(a, b), t = std::exp(d);
        const double tau = (1 + std::expm1(std::fabs(d) * u)) * (1 + e) - 1;
        const double tiny = std::ldexp(1.0, info(acc).emin);  // smallest normal of the arithmetic
        const auto subnormal_error = [&](double w, double rho) { return w * (1 + rho) < tiny ? 2 * eta(acc) : 0.0; };
        const double A = (t * tau + subnormal_error(t, tau) + e * std::log1p(t) + u * std::fabs(lse)) * (1 + 4 * u);
        bl[static_cast<std::size_t>(r)] = A + store(lse_out, std::fabs(lse) + A);
        const double rho_a = (1 + std::expm1(A + u * (std::fabs(a - lse) + A))) * (1 + e) - 1;
        const double rho_b = (1 + std::expm1(A + u * (std::fabs(b - lse) + A))) * (1 + e) - 1;
        const double wa = std::exp(a - lse), wb = std::exp(b - lse);
        const double sa = subnormal_error(wa, rho_a), sb = subnormal_error(wb, rho_b);
        for (std::int64_t k = 0; k < dv; ++k) {
            const std::int64_t i = r * dv + k;
            const double ta = std::fabs(wa * oa.value(i)), tb = std::fabs(wb * ob.value(i));
            const double pre = ta * ((1 + rho_a) * (1 + u) * (1 + u) - 1) + tb * ((1 + rho_b) * (1 + u) * (1 + u) - 1) +
                               (sa * std::fabs(oa.value(i)) + sb * std::fabs(ob.value(i))) * (1 + u) * (1 + u);
            const double y = exact.at(0)[static_cast<std::size_t>(i)];
            // The sum's rounding is already in (1 + u)^2.
            bo[static_cast<std::size_t>(i)] = pre + store(o_out, std::fabs(y) + pre) + 3 * eta(acc);
        }
    }
    return {bo, bl};
}

}  // namespace

StructuredBoundFn find_structured_bound(const std::string& op) {
    if (op == "lse_merge") return lse_merge_bound;
    if (op == "sinkhorn") return sinkhorn_bound;
    if (op == "hc_residual") return hc_residual_bound;
    if (op == "mhc_residual") return mhc_residual_bound;
    if (op == "block_attn_res") return block_attn_res_bound;
    if (op == "gated_residual") return gated_residual_bound;
    if (op == "quantize") return quantize_bound;
    if (op == "int8_gemm") return int8_gemm_bound;
    if (op == "matmul") return matmul_bound;
    if (op == "mla") return mla_bound;
    if (op == "nsa_attention") return nsa_attention_bound;
    if (op == "moe_router") return moe_router_bound;
    if (op == "topk_select") return topk_select_bound;
    if (op == "lightning_indexer") return lightning_indexer_bound;
    if (op == "compressed_attention") return compressed_attention_bound;
    if (op == "dsa_attention") return dsa_attention_bound;
    if (op == "block_sparse_attention") return block_sparse_attention_bound;
    if (op == "moe") return moe_bound;
    if (op == "latent_moe") return latent_moe_bound;
    if (op == "fp8_quantize") return fp8_quantize_bound;
    if (op == "fp8_gemm") return fp8_gemm_bound;
    if (op == "dequantize") return dequantize_bound;
    if (op == "smooth_quant") return smooth_quant_bound;
    if (op == "int8_block") return int8_block_bound;
    if (op == "rope") return rope_bound;
    if (op == "attention") return attention_bound_split;
    if (op == "gated_attention") return gated_attention_bound;
    if (op == "sink_attention") return sink_attention_bound;
    if (op == "gdn") return gdn_bound;
    if (op == "kda") return kda_bound;
    return nullptr;
}

namespace {

// eps = 0 and a row whose centred values (x - mean for layer_norm, x for the
// others) are all zero: 0/0.
bool undefined_row(const OpSpec& op, const Params& p, const RowData& r) {
    if (op.name == "softmax" || r.x.empty() || p.get("eps", Params::defaults(op).get("eps", 1)) != 0) return false;
    for (double v : r.x)
        if (!std::isfinite(v) || v != (op.name == "layer_norm" ? r.x[0] : 0.0)) return false;
    return true;
}

}  // namespace

std::vector<double> row_bound(const OpSpec& op, const Params& p, const RowData& row, Format acc, Format out) {
    if (undefined_row(op, p, row)) return std::vector<double>(row.x.size(), kUndefined);
    if (op.name == "rms_norm") return rms_bound(p, row, acc, out, true);
    if (op.name == "l2_norm") return rms_bound(p, row, acc, out, false);
    if (op.name == "layer_norm") return layer_bound(p, row, acc, out);
    if (op.name == "softmax") return softmax_bound(row, acc, out);
    throw std::invalid_argument("no error bound for op '" + op.name + "'");
}

}  // namespace conform::oracle
