// gated_attention_bound (docs/gated_attention.md, "Error budget"): the
// kernel keeps attention's o in FP32 (attention_bound with an FP32 output,
// B_o), computes sigmoid(g) in FP32 and multiplies:
//   |s^ - s| <= theta s + eta_s                       (the FP32 sigmoid)
//   |o^ s^ - o s| <= B_o S + |o| (theta s + eta_s),   S = s (1 + theta) + eta_s >= s^
//   |fl(o^ s^) - o^ s^| <= u (|o| + B_o) S + eta       (the product, when it is not 0)
// plus half an ulp of the output format where it is narrower than FP32.
#include <algorithm>
#include <cmath>

#include "oracle/attention.hpp"
#include "oracle/attention_bound.hpp"
#include "oracle/bound.hpp"

namespace conform::oracle {
namespace {

constexpr double kGatedU = 0x1p-24;               // FP32 unit roundoff
constexpr double kGatedExp = 4 * kGatedU;         // the kernels' exp: within 2 ulps where normal ...
constexpr double kGatedExpAbs = 0x1p-148;         // ... and 2 subnormal ulps below FP32's normal range
// sigmoid32: t = e^-|g| (1 + e1) + xi, 1 + t rounded, one division (and t's
// factor for g < 0, whose relative error x / (1 + x) does not amplify):
// relative (1 + u) / ((1 - e_exp - xi)(1 - u)) - 1, absolute xi (1 + 3u) plus
// a subnormal quotient's half spacing, below 2^-147.
constexpr double kGatedTheta = (1 + kGatedU) / ((1 - kGatedExp - kGatedExpAbs) * (1 - kGatedU)) - 1;
constexpr double kGatedEtaSigma = 0x1p-147;
constexpr double kGatedEtaProduct = 0x1p-150;     // a subnormal FP32 product's rounding


// Upper bounds of |o_d|, attention's ungated output, from the gated exact
// y = o sigmoid(g): |y| / sigmoid(g) (inflated for the doubles' rounding)
// while sigmoid(g) is far from double's underflow, else the largest finite
// |v_jd| of the row's KV head (o_d is a convex combination of visible v_jd;
// a non-finite visible v makes o non-finite, judged by class).
std::vector<double> ungated_magnitudes(const std::vector<TensorView>& in, const std::vector<double>& y) {
    const TensorView &q = in[0], &k = in[1], &v = in[2], &g = in[3];
    const std::int64_t hq = q.shape[0], lq = q.shape[1], hkv = k.shape[0], lk = k.shape[1], dv = v.shape[2];
    std::vector<double> mag(y.size());
    for (std::int64_t e = 0; e < static_cast<std::int64_t>(y.size()); ++e) {
        const double s = sigmoid_double(g.value(e));
        if (s >= 0x1p-900 && std::isfinite(y[e])) {
            mag[e] = (std::fabs(y[e]) * (1 + 0x1p-50) + 0x1p-1074) / (s * (1 - 0x1p-50));
            continue;
        }
        const std::int64_t h = e / (lq * dv), d = e % dv, kv = kv_head_of(h, hq, hkv);
        double m = 0;
        for (std::int64_t j = 0; j < lk; ++j)
            if (const double x = v.value((kv * lk + j) * dv + d); std::isfinite(x)) m = std::max(m, std::fabs(x));
        mag[e] = m;
    }
    return mag;
}

// The bound of one gated element from B_o, |o| (upper bound) and g.
double gated_element(double b_o, double o_mag, double g, double y, Format out) {
    if (std::isnan(g) || std::isnan(b_o)) return NAN;
    if (b_o == kUndefined) return kUndefined;  // the row's logits may overflow FP32
    if (b_o == 0) return 0;  // a row that sees no key: exactly 0 * sigmoid32(g) = 0 required
    const bool exact_gate = std::isinf(g);  // sigmoid32(+-inf) = 1 or 0 exactly
    const double s = sigmoid_double(g), theta = exact_gate ? 0 : kGatedTheta, eta_s = exact_gate ? 0 : kGatedEtaSigma;
    const double big_s = s * (1 + theta) + eta_s;
    const double pre = b_o * big_s + o_mag * (s * theta + eta_s) + kGatedU * (o_mag + b_o) * big_s +
                       (big_s > 0 ? kGatedEtaProduct : 0);  // g = -inf: o^ * 0 is exactly 0
    const bool narrower = info(out).precision < info(Format::fp32).precision;
    // An exact 0 (a closed gate) is stored exactly; anything else rounds once more.
    return pre + (narrower && (pre > 0 || y != 0) ? 0.5 * ulp_at(out, std::fabs(y) + pre) : 0);
}

}  // namespace

std::vector<std::vector<double>> gated_attention_bound(const Params& p, const std::vector<TensorView>& in,
                                                       const std::vector<std::vector<double>>& exact, Format,
                                                       const std::vector<Format>& out) {
    std::vector<TensorView> attn{in.at(0), in.at(1), in.at(2)};
    if (in.size() > 4) attn.push_back(in[4]);
    const std::vector<double> o_mag = ungated_magnitudes(in, exact.at(0));
    const std::vector<Format> fp32_o{Format::fp32, out.size() > 1 ? out[1] : Format::fp32};
    const std::vector<double> b = attention_bound(p, attn, attention_outputs(attn, o_mag, exact.at(1)),
                                                  declared_flash_model(p, fp32_o));
    const std::size_t n_o = exact.at(0).size();
    std::vector<double> bo(n_o);
    for (std::size_t e = 0; e < n_o; ++e)
        bo[e] = gated_element(b[e], o_mag[e], in[3].value(static_cast<std::int64_t>(e)), exact[0][e], out.at(0));
    return {bo, std::vector<double>(b.begin() + static_cast<std::ptrdiff_t>(n_o), b.end())};
}

}  // namespace conform::oracle
