// Error bounds of the Hyper-Connections mixings in a floating format
// (docs/hc_residual.md, "Error bound", has the derivation).  In short, with u
// the unit roundoff of the arithmetic and tiny its smallest subnormal:
//   * a coefficient a = sigma(l) is computed as t = e^-|l| (within e_exp),
//     then (l >= 0 ? 1 : t) / (1 + t) (two roundings), so
//     sigma^ = sigma (1 + e_sigma) + abs with
//     e_sigma = (1 + e_exp)(1 + u) / ((1 - e_exp)(1 - u)) - 1 and abs a few
//     tiny (t subnormal); C = 2 sigma^ is exact;
//   * an output element is one sum of m products with computed coefficients:
//     |fl(sum p^_j) - sum p^_j| <= gamma_m sum |p^_j| + m tiny (products or
//     fused adds that land among the subnormals round absolutely), and the
//     coefficients' own errors enter once each: sum |coef^ - coef| |x|;
//   * a narrower output rounds once more: half an ulp of the output format at
//     the largest value the kernel's sum can take.
#include "oracle/hc_residual_bound.hpp"

#include <cmath>

#include "oracle/bound.hpp"
#include "oracle/hc_residual.hpp"
#include "oracle/sinkhorn_bound.hpp"

namespace conform::oracle {
namespace {


double sigmoid_of(double l) { return 1.0 / (1.0 + std::exp(-l)); }

// The arithmetic's constants.
struct HcArith {
    double u, tiny, e_sigma, sigma_abs;
    Format acc;
    bool narrower_than(Format out) const { return info(out).precision < info(acc).precision; }
};

HcArith arith_of(Format acc) { return {unit_roundoff(acc), ulp_at(acc, 0.0), sigmoid_rel(acc), sigmoid_abs(acc), acc}; }

// A coefficient and the bound of its computed value: 2 sigma for C.
struct Coef {
    double value, err;
};
Coef coef(const HcArith& a, double logit, double scale) {
    const double s = scale * sigmoid_of(logit);
    return {s, s * a.e_sigma + scale * a.sigma_abs};
}

// The bound of one output element: `pre` the error before the final store,
// `mag` the largest value the computed sum can take, y the exact value.
double stored(const HcArith& a, Format out, double pre, double y) {
    return pre + (a.narrower_than(out) ? 0.5 * ulp_at(out, std::fabs(y) + pre) : 0.0);
}

// The bounds are summed in double, and the "exact" sigmoid they start from
// comes from libm (not correctly rounded): relative slips of a few 2^-53,
// covered by this factor (as int8_block_propagated does).
constexpr double kSafety = 1 + 0x1p-40;

// h[t, k] = sum_i a_i x[t, i, k]: n products.
void bound_h(const HcArith& a, const std::vector<TensorView>& in, const HcShape& s, const std::vector<double>& exact,
             Format out, std::vector<double>& bound) {
    const double g = gamma(static_cast<double>(s.n), a.u);
    for (std::int64_t t = 0; t < s.tokens; ++t)
        for (std::int64_t k = 0; k < s.d; ++k) {
            double computed = 0, coef_err = 0;  // sum |a^ x|, sum |a^ - a| |x|
            for (std::int64_t i = 0; i < s.n; ++i) {
                const Coef c = coef(a, in[2].value(t * s.n + i), 1.0);
                const double x = std::fabs(in[0].value((t * s.n + i) * s.d + k));
                computed += (c.value + c.err) * x, coef_err += c.err * x;
            }
            const auto e = static_cast<std::size_t>(t * s.d + k);
            bound[e] = stored(a, out, (g * computed + coef_err + static_cast<double>(s.n) * a.tiny) * kSafety, exact[e]);
        }
}

// x_next[t, i, k] = sum_j B_ij x[t, j, k] + c_i f[t, k]: n + 1 products, B_ij
// off by at most b_err (0 for HC, where B is an input).  A non-finite b_err
// (mHC's unbounded domain) makes the element's bound +inf.
template <class BAt, class BErr>
void bound_x_next(const HcArith& a, const std::vector<TensorView>& in, const HcShape& s, const std::vector<double>& exact,
                  Format out, const BAt& b_at, const BErr& b_err, std::vector<double>& bound) {
    const double g = gamma(static_cast<double>(s.n + 1), a.u);
    for (std::int64_t t = 0; t < s.tokens; ++t)
        for (std::int64_t i = 0; i < s.n; ++i) {
            const Coef c = coef(a, in[4].value(t * s.n + i), 2.0);
            for (std::int64_t k = 0; k < s.d; ++k) {
                const double f = std::fabs(in[1].value(t * s.d + k));
                double computed = (c.value + c.err) * f, coef_err = c.err * f;
                bool finite = true;
                for (std::int64_t j = 0; j < s.n; ++j) {
                    const double x = std::fabs(in[0].value((t * s.n + j) * s.d + k)), be = b_err(t, i, j);
                    finite = finite && std::isfinite(be);
                    computed += (std::fabs(b_at(t, i, j)) + be) * x, coef_err += be * x;
                }
                const auto e = static_cast<std::size_t>((t * s.n + i) * s.d + k);
                bound[e] = finite ? stored(a, out, (g * computed + coef_err + static_cast<double>(s.n + 1) * a.tiny) * kSafety,
                                           exact[e])
                                  : INFINITY;
            }
        }
}

std::vector<double> zeros(std::int64_t n) { return std::vector<double>(static_cast<std::size_t>(n), 0.0); }

}  // namespace

double sigmoid_rel(Format acc) {
    const double u = unit_roundoff(acc), e = 2 * kExpUlps * u;
    return (1 + e) * (1 + u) / ((1 - e) * (1 - u)) - 1;
}

// e^-|l| subnormal (|l| > 87 in FP32): the exp is off by two spacings
// absolutely (as in the sinkhorn start), the quotient by half a spacing; past
// the exp's flush to 0 (|l| > 105) the exact value is below 2^-151.
double sigmoid_abs(Format acc) { return 3 * ulp_at(acc, 0.0); }

std::vector<std::vector<double>> hc_residual_bound(const Params&, const std::vector<TensorView>& in,
                                                   const std::vector<std::vector<double>>& exact, Format acc,
                                                   const std::vector<Format>& out) {
    const HcShape s = hc_shape("hc_residual", in);
    const HcArith a = arith_of(acc);
    std::vector<double> h = zeros(s.tokens * s.d), next = zeros(s.tokens * s.n * s.d);
    bound_h(a, in, s, exact.at(0), out.at(0), h);
    auto b_at = [&](std::int64_t t, std::int64_t i, std::int64_t j) { return in[3].value((t * s.n + i) * s.n + j); };
    auto b_err = [](std::int64_t, std::int64_t, std::int64_t) { return 0.0; };
    bound_x_next(a, in, s, exact.at(1), out.size() > 1 ? out[1] : out[0], b_at, b_err, next);
    return {h, next};
}

std::vector<std::vector<double>> mhc_residual_bound(const Params& params, const std::vector<TensorView>& in,
                                                    const std::vector<std::vector<double>>& exact, Format acc,
                                                    const std::vector<Format>& out) {
    const HcShape s = hc_shape("mhc_residual", in);
    const HcArith a = arith_of(acc);
    auto fmt = [&](std::size_t o) { return out.size() > o ? out[o] : out[0]; };
    const std::vector<double>& b_exact = exact.at(2);
    // The kernel's FP32 B against the exact one (B is mixed before any storing).
    const std::vector<double> b_used = sinkhorn_bound(params, {in[3]}, {b_exact}, acc, {acc}).at(0);
    std::vector<double> h = zeros(s.tokens * s.d), next = zeros(s.tokens * s.n * s.d);
    bound_h(a, in, s, exact.at(0), fmt(0), h);
    auto at = [&](std::int64_t t, std::int64_t i, std::int64_t j) { return static_cast<std::size_t>((t * s.n + i) * s.n + j); };
    auto b_at = [&](std::int64_t t, std::int64_t i, std::int64_t j) { return b_exact[at(t, i, j)]; };
    auto b_err = [&](std::int64_t t, std::int64_t i, std::int64_t j) { return b_used[at(t, i, j)]; };
    bound_x_next(a, in, s, exact.at(1), fmt(1), b_at, b_err, next);
    return {h, next, sinkhorn_bound(params, {in[3]}, {b_exact}, acc, {fmt(2)}).at(0)};
}

}  // namespace conform::oracle
