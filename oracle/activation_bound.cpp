#include "oracle/activation_bound.hpp"

#include <cmath>
#include <stdexcept>

#include "oracle/activation.hpp"
#include "oracle/bound.hpp"

namespace conform::oracle {
namespace {

constexpr Format kAcc = Format::fp32;  // every class evaluates in FP32

double eta32() { return min_subnormal(kAcc); }

// The exact gate activation of a gated op at x, in double (its error is far
// below the class's).
double act(const std::string& arith, double x) {
    if (arith == "one_plus_erf") return gelu_erf(x);
    if (arith == "one_plus_tanh") return gelu_tanh(x);
    return silu(x);
}

double act_error(const std::string& arith, const Params& p, double x, double s) {
    if (arith == "one_plus_erf") return erf_gelu_error(x, s);
    if (arith == "one_plus_tanh") return tanh_gelu_error(x, s);
    if (arith == "log1p_exp") return softplus_error(x, s);
    if (arith == "scaled_tanh") return softcap_error(x, s, p.get("beta", 30));
    return quotient_error(x, s);
}

// The store of an FP32 value within e of y into out.
double stored(double y, double e, Format out) {
    return info(out).precision < info(kAcc).precision ? e + 0.5 * ulp_at(out, std::fabs(y) + e) : e;
}

}  // namespace

double quotient_error(double x, double s) {
    const double u = unit_roundoff(kAcc), rho = 4 * u * (1 + 4 * u);
    const bool overflows = std::exp(-x) * (1 + 2 * u) * (1 + u) >= max_finite(kAcc);
    return overflows ? std::fabs(s) : rho * std::fabs(s) + eta32() / 2;
}

// ẑ = z(1 + ε_z), |ε_z| <= 7u (x·x·x, κ̂x³, the sum and β̂(·), κ̂ = fl(0.044715),
// β̂ = fl(√(2/π)); x and κx³ share a sign: no cancellation); tanh within 2
// ulps; 1 + t̂ and (x/2)(·) one rounding each.  Where x³ may overflow, ẑ may be
// ±inf and t̂ = ±1 within 2 ulps: |t̂ - t| <= 1 - |t| + 2^-23.
double tanh_gelu_error(double x, double s) {
    const double u = unit_roundoff(kAcc), ax = std::fabs(x);
    const double kBeta = std::sqrt(2 / M_PI), kKappa = 0.044715;
    const double z = kBeta * (x + kKappa * x * x * x), t = std::tanh(z), eps_z = 7 * u * (1 + 8 * u);
    double dt;
    if (ax * ax * ax >= max_finite(kAcc) / 2) {
        dt = 1 - std::fabs(t) + 0x1p-23;  // ẑ may be ±inf: t̂ = ±1, or 2 ulps inside it
    } else {
        const double az = std::fabs(z), far = az * (1 - eps_z), sech = 1 / std::cosh(std::min(far, 354.0));
        const double moved = sech * sech * az * eps_z + kBeta * 3 * eta32();  // + underflowing x², x³, κx³
        dt = moved + 2 * ulp_at(kAcc, std::fabs(t) + moved);  // 2 ulps of tanh(ẑ), |tanh(ẑ)| <= |t| + moved
    }
    const double dw = dt * (1 + u) + u * (1 + t);  // 1 + t̂
    return 0.5 * ax * dw * (1 + u) + u * std::fabs(s) + eta32();  // (x/2) ŵ: its rounding, x/2 below the normal range
}

// z = x/√2 formed as fl(x α̂), α̂ = fl(1/√2): |ẑ - z| <= |z| θ + η/2, θ = 2u(1 + u),
// so erf moves by at most (2/√π) e^{-m²} times that (m the nearer end); the
// class adds kErfAbs; 1 + Ê and (x/2)(·) round once each, x/2 below the
// normal range adds η/2.  For x << 0, 1 + erf cancels: the error is absolute,
// about ½|x| kErfAbs against a result ~ x e^{-z²}.
double erf_gelu_error(double x, double s) {
    const double u = unit_roundoff(kAcc), ax = std::fabs(x);
    const double z = ax * M_SQRT1_2, dz = z * 2 * u * (1 + u) + eta32() / 2, m = std::max(0.0, z - dz);
    const double d = M_2_SQRTPI * std::exp(-m * m) * dz + kErfAbs;  // |Ê(ẑ) - erf(z)|
    const double dw = d * (1 + u) + u * std::erfc(-x * M_SQRT1_2);  // 1 + Ê rounded (w = erfc(-z): no cancellation)
    return 0.5 * ax * dw * (1 + u) + u * std::fabs(s) + 2 * eta32();
}

// log1p(t̂) for t̂ = exp(±|x|) within 1 ulp of t, then log1p within 1 ulp: the
// first moves log1p by at most |t̂ - t| / (1 + min(t, t̂)) (its slope
// 1/(1 + t)); subnormal t and L are covered by the ulps (η there).  "1 ulp"
// as glibc measures it, the ulp of the correctly rounded result, which for a
// value just below a power of two is the next binade's: the ulp at the top
// of each range.
static double log1p_exp_error(double t) {
    const double et = ulp_at(kAcc, t + ulp_at(kAcc, t)), moved = et / (1 + t - et), L = std::log1p(t);
    const double top = L + moved;
    return moved + ulp_at(kAcc, top + ulp_at(kAcc, top));
}

// (a) max(x, 0) + log1p(exp(-|x|)): the log1p of t = e^-|x| <= 1, then for
// x > 0 the sum, one rounding; (b) log1p(exp(x)) (PyTorch; its threshold
// returns x where x > 20): for x > 0 the log1p of t = e^x, whose slope
// 1/(1 + t) keeps the exp's error below an ulp of 1.  The larger of the two
// for x > 0; for x <= 0 they are the same arithmetic.  (1 + 4u) covers the
// double evaluation of the bound itself.
double softplus_error(double x, double s) {
    const double u = unit_roundoff(kAcc), ax = std::fabs(x);
    const double la = log1p_exp_error(std::exp(-ax));
    double e = x > 0 ? la + 0.5 * ulp_at(kAcc, std::fabs(s) + la) : la;
    if (x > 0 && std::exp(x) * (1 + 2 * u) < max_finite(kAcc)) e = std::max(e, log1p_exp_error(std::exp(x)));
    return e * (1 + 4 * u);
}

// z = x / beta formed by a division, or by a product with fl(1 / beta):
// |ẑ - z| <= 2u(1 + u)|z| + η/2; tanh moves by sech² of the nearer end
// times that, the library's 2 ulps (of the correctly rounded result: the ulp
// at the top) add 2 ulp(|tanh ẑ|); the product beta t̂ rounds once (beta <=
// 2^60 and |t̂| <= 1: no overflow).  An infinite ẑ (x / beta beyond FP32)
// gives t̂ = ±1, the limit, within the same terms (sech² = 0 there).
double softcap_error(double x, double s, double beta) {
    const double u = unit_roundoff(kAcc), b = std::fabs(beta), z = std::fabs(x / beta);
    const double dz = 2 * u * (1 + u) * z + eta32() / 2, far = std::min(std::max(0.0, z - dz), 354.0);
    const double sech = 1 / std::cosh(far), moved = sech * sech * dz;
    const double t = std::tanh(z) + moved, dt = moved + 2 * ulp_at(kAcc, t + ulp_at(kAcc, t));
    return (b * dt * (1 + u) + u * std::fabs(s) + eta32() / 2) * (1 + 4 * u);
}

std::vector<double> act_arith_bound(const std::string& op, const Conventions& c, const Params& p,
                                    const std::vector<TensorView>& in, const std::vector<double>& exact, Format out) {
    check_conventions(c, op);  // the class fits the op (and geglu's gelu)
    const std::string arith = convention(c, "act_arith");
    if (arith == "ulp") throw std::invalid_argument("act_arith_bound: op " + op + " declares no arithmetic class");
    const bool gated = op == "swiglu" || op == "geglu";
    for (const TensorView& v : in)  // the classes read their inputs exactly in FP32
        if (info(v.format).precision > info(kAcc).precision || max_finite(v.format) > max_finite(kAcc) ||
            min_subnormal(v.format) < min_subnormal(kAcc))
            throw std::invalid_argument("act_arith = " + arith + " evaluates in FP32: " + name(v.format) +
                                        " inputs are not exact there");
    const double u = unit_roundoff(kAcc);
    std::vector<double> b(exact.size(), 0.0);
    for (std::size_t i = 0; i < exact.size(); ++i) {
        const auto ii = static_cast<std::int64_t>(i);
        const double x = in.at(0).value(ii), up = gated ? in.at(1).value(ii) : 1.0;
        // A zero factor gives an exact ±0 in every class with one (x/(1 + ê),
        // (x/2)ŵ and ŝ·0 at a zero x or up; 0·inf is NaN, judged by class):
        // bound 0.  sigmoid and softplus have no factor x.
        const bool x_factor = op != "sigmoid" && op != "softplus";  // softcap: beta tanh(0/beta) = ±0 exactly
        if ((x == 0 && x_factor) || (up == 0 && std::isfinite(x))) continue;
        if (gated && std::isfinite(x) && std::isinf(up)) {
            // The class lets ŝ round to 0 where its error reaches |s|: 0 · inf
            // is NaN, the exact product ±inf; the class leaves it open.
            const double s = act(arith, x);
            if (act_error(arith, p, x, s) >= std::fabs(s)) b[i] = kUndefined;
            continue;
        }
        if (!std::isfinite(x) || !std::isfinite(up) || !std::isfinite(exact[i])) continue;  // judged by class
        if (!gated) {  // sigmoid: the quotient with n = 1
            b[i] = stored(exact[i], act_error(arith, p, x, exact[i]), out);
            continue;
        }
        const double s = act(arith, x), e = act_error(arith, p, x, s);
        // ŝ·up rounded in FP32: |up| e, then u of |ŝ up| <= |h| + |up| e, η/2 underflowing.
        const double eh = std::fabs(up) * e * (1 + u) + u * std::fabs(exact[i]) + eta32() / 2;
        b[i] = stored(exact[i], eh, out);
    }
    return b;
}

}  // namespace conform::oracle
