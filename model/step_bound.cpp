// Local budgets of the elementwise, row-norm, matmul and residual steps
// (derivations in docs/diverge.md, "Budgets"); the structured steps (RoPE,
// attention, the delta rule, Sinkhorn) are in step_bound_structured.cpp.
#include "model/step_bound.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <Eigen/Core>

#include "model/dense_gemm.hpp"

#include "model/int8_steps.hpp"
#include "model/layout.hpp"
#include "model/linear_block.hpp"
#include "model/moe_steps.hpp"
#include "model/step_bound_structured.hpp"
#include "oracle/activation.hpp"
#include "oracle/activation_bound.hpp"
#include "oracle/bound.hpp"

namespace conform::model {

using oracle::erf_gelu_error;
using oracle::quotient_error;
using oracle::tanh_gelu_error;

namespace {

constexpr Format kAcc = Format::fp32;  // every kernel of the stack accumulates in FP32
constexpr double kU64 = 0x1p-53;
constexpr double kEta64 = 0x1p-1074;

// Smallest positive subnormal of f: the absolute error of an underflowing product.
double eta(Format f) { return min_subnormal(f); }

}  // namespace

double ulp_window(Format f, double y, double e, int k) {
    if (!std::isfinite(y)) return 0;  // special values are judged by class
    double lo = decode(f, encode(f, y - e)), hi = decode(f, encode(f, y + e));
    for (int i = 0; i < k && std::isfinite(lo); ++i) lo = next_down(f, lo);
    for (int i = 0; i < k && std::isfinite(hi); ++i) hi = next_up(f, hi);
    return std::max(hi - y, y - lo);
}

double StepBound::ratio() const {
    double r = 0;
    for (std::size_t i = 0; i < budget.size(); ++i)
        if (oracle[i] > 0) {
            const double b = std::max(budget[i], granule);
            r = std::max(r, b > 0 ? oracle[i] / b : std::numeric_limits<double>::infinity());
        }
    return r;
}

// ---- matmul -----------------------------------------------------------------

AbsProducts abs_products(const Values& x, const Values& w, const Values* bias) {
    using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const std::int64_t K = x.shape.back(), T = x.numel() / K, N = w.shape.at(0);
    if (w.numel() != N * K) throw std::invalid_argument("matmul bound: weight shape does not match the input width");
    AbsProducts p;
    p.a.resize(static_cast<std::size_t>(T * N));
    gemm_abs_xwt(x.v.data(), w.v.data(), p.a.data(), T, K, N);
    Eigen::Map<Mat> A(p.a.data(), T, N);
    if (bias) A.rowwise() += Eigen::Map<const Eigen::RowVectorXd>(bias->v.data(), N).cwiseAbs();
    p.terms = K + (bias ? 1 : 0);
    // A itself is a double sum of nonnegative terms: relative error <= gamma_terms(2^-53).
    const double inflate = 1 + oracle::gamma(static_cast<double>(p.terms), kU64);
    A *= inflate;
    return p;
}

// Products of two values of `in` are exact in `acc` when their significands
// fit (2 p_in <= p_acc) and their exponents stay in acc's normal range
// (fp16 into fp32: |x w| >= 2^-48); bf16 products keep 16 bits but may
// underflow FP32, fp32 products round.
static bool products_exact(Format in, Format acc) {
    const FormatInfo &i = info(in), &a = info(acc);
    const int min_exp = 2 * (i.emin - i.precision + 1), max_exp = 2 * (i.emax + 1);
    return 2 * i.precision <= a.precision && min_exp >= a.emin && max_exp <= a.emax;
}

std::vector<double> matmul_budget(const AbsProducts& p, const std::vector<double>& y, const MatmulModel& m) {
    const double k = static_cast<double>(p.terms);
    const double g = oracle::gamma(k, unit_roundoff(m.acc));
    // Each product that underflows is off by at most eta/2 absolute; the sums carry it with (1 + gamma).
    const double sub = products_exact(m.in, m.acc) ? 0.0 : k * eta(m.acc) / 2 * (1 + g);
    const bool rounds = info(m.out).precision < info(m.acc).precision;
    std::vector<double> b(p.a.size());
    for (std::size_t i = 0; i < b.size(); ++i) {
        const double acc_err = g * p.a[i] + sub;
        b[i] = acc_err + (rounds ? 0.5 * ulp_at(m.out, std::fabs(y[i]) + acc_err) : 0.0);
    }
    return b;
}

std::vector<double> matmul_oracle_bound(const AbsProducts& p) {
    const double k = static_cast<double>(p.terms), g = oracle::gamma(k, kU64);
    std::vector<double> b(p.a.size());
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = g * p.a[i] + k * kEta64;
    return b;
}

namespace {

StepBound matmul_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref,
                       const Conventions& conv, Format out) {
    const Values& x = get(s.inputs.at(0));
    const Values* bias = s.weights.size() > 1 ? &get(s.weights[1]) : nullptr;
    const AbsProducts p = abs_products(x, get(matmul_weight(s, conv)), bias);
    // The lm_head product is judged in the format the contract declares for
    // it, whatever the dump stores: FP32, or the dtype under logits_format =
    // dtype (the product's budget plus its rounding into the dtype).
    if (is_logits_product(s)) out = logits_product_format(c, conv);
    // Weights and activations are stored in the model format.  (Were x wider,
    // gamma_terms already counts one rounding per product; only the exact-
    // product claim of the subnormal term would change.)
    return {matmul_budget(p, ref.v, {c.dtype, kAcc, out}), matmul_oracle_bound(p)};
}

// ---- row norms ----------------------------------------------------------------

struct NormSetup {
    const OpSpec* op;
    Params params;
    std::int64_t n;  // row (segment) width
};

NormSetup norm_setup(const ModelContract& c, const Step& s, std::int64_t width) {
    if (s.kind == StepKind::l2_head)
        return {find_op("l2_norm"), Params({{"eps", c.eps}}), width / s.heads};
    if (s.kind == StepKind::head_norm)
        return {find_op("rms_norm"), Params({{"eps", c.eps}, {"zero_centered", norm_offset(c, s) ? 1.0 : 0.0}}),
                width / s.heads};
    if (c.norm == NormKind::layer_norm) return {find_op("layer_norm"), Params({{"eps", c.eps}}), width};
    return {find_op("rms_norm"), Params({{"eps", c.eps}, {"zero_centered", c.zero_centered ? 1.0 : 0.0}}), width};
}

// x / rms(x) (rms_norm) or (x - mean) / sd (layer_norm) of one segment, in
// double, with eps inside or outside the square root.
std::vector<double> normalized(const std::vector<double>& x, bool centred, double eps, bool eps_outside) {
    const double n = static_cast<double>(x.size());
    double mu = 0, q = 0;
    if (centred)
        for (double v : x) mu += v / n;
    for (double v : x) q += (v - mu) * (v - mu);
    const double r = eps_outside ? std::sqrt(q / n) + eps : std::sqrt(q / n + eps);
    std::vector<double> z(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) z[i] = (x[i] - mu) / r;
    return z;
}

// norm_cast = before_weight: z = x / rms rounded into `out`, then w z (+ b)
// rounded again.  |zhat_f - z_f| <= bz + ulp_out(z) (the kernel's z error and
// a rounding that may fall on the other side of a midpoint), then the weight
// multiply and bias add in FP32 and the final rounding.
std::vector<double> before_weight_budget(const NormSetup& ns, const oracle::RowData& row, bool centred, bool eps_outside,
                                         bool zero_centred, Format out) {
    const std::vector<double> z = normalized(row.x, centred, ns.params.get("eps", 0), eps_outside);
    oracle::RowData zr{row.x, centred ? std::vector<double>(row.x.size(), 1.0) : std::vector<double>{},
                       centred ? std::vector<double>(row.x.size(), 0.0) : std::vector<double>{}, z};
    const OpSpec* zop = find_op(centred ? "layer_norm" : "l2_norm");
    // l2_norm's bound is rms_norm's without the weight: the same roundings for x / rms.
    const std::vector<double> bz = oracle::row_bound(*zop, ns.params, zr, kAcc, kAcc);
    const double u = unit_roundoff(kAcc);
    std::vector<double> b(z.size());
    for (std::size_t i = 0; i < z.size(); ++i) {
        const double w = row.w.empty() ? 1.0 : std::fabs(zero_centred ? 1 + row.w[i] : row.w[i]);
        const double ez = w * (bz[i] + ulp_at(out, std::fabs(z[i]) + bz[i]));
        const double pre = ez + u * (std::fabs(row.y[i]) + ez) * (row.b.empty() ? 1 : 2);
        b[i] = pre + 0.5 * ulp_at(out, std::fabs(row.y[i]) + pre) + 2 * eta(kAcc);
    }
    return b;
}

StepBound norm_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref,
                     const Conventions& conv, Format out) {
    const Values x = step_input0(get(s.inputs.at(0)), s);  // a head_norm's columns (Step::in_offset)
    const Values* w = s.weights.empty() ? nullptr : &get(s.weights[0]);
    const Values* bias = s.weights.size() > 1 ? &get(s.weights[1]) : nullptr;
    const NormSetup ns = norm_setup(c, s, x.shape.back());
    const bool before = s.kind != StepKind::l2_head && conv.at("norm_cast") == "before_weight";
    const bool outside = conv.at("eps_placement") == "outside";
    StepBound b{std::vector<double>(ref.v.size()), std::vector<double>(ref.v.size())};
    oracle::RowData row;
    for (std::int64_t off = 0; off < x.numel(); off += ns.n) {
        const auto seg = [&](const std::vector<double>& v, std::int64_t at) {
            return std::vector<double>(v.begin() + at, v.begin() + at + ns.n);
        };
        row.x = seg(x.v, off);
        row.y = seg(ref.v, off);
        if (w) row.w = seg(w->v, 0);
        if (bias) row.b = seg(bias->v, 0);
        // eps outside the square root: the same count of roundings (sqrt, then
        // the eps add), so the same bound holds (docs/diverge.md).
        const std::vector<double> bud =
            before ? before_weight_budget(ns, row, ns.op->name == "layer_norm", outside, norm_offset(c, s), out)
                   : oracle::row_bound(*ns.op, ns.params, row, kAcc, out);
        const std::vector<double> orc = oracle::row_bound(*ns.op, ns.params, row, Format::fp64, Format::fp64);
        std::copy(bud.begin(), bud.end(), b.budget.begin() + off);
        std::copy(orc.begin(), orc.end(), b.oracle.begin() + off);
    }
    return b;
}

// ---- elementwise ------------------------------------------------------------

// The FP64 tier's elementary functions (oracle/activation.hpp over double,
// cancellation-free forms): glibc's exp, log1p, erfc, tanh within 4 ulps
// each, a handful of roundings, and the argument's own rounding errors
// amplified by the functions' condition numbers (exp: |t|, tanh: <= |z|,
// erfc: <= 2 z^2 + 1; gelu_tanh's cubic argument: 0.1 |x|^3).  a = the
// largest argument magnitude of the element.
double elementwise_oracle(double y, double a) {
    return (32 + 8 * a + 4 * a * a + 0.125 * a * a * a) * kU64 * std::fabs(y) + kEta64;
}

// Kernels of unary and gated activations: within `ulps` of the correctly
// rounded result (props::budget_for; 1 for every activation and gated op).
constexpr int kActivationUlps = 1;

// args(i): the largest argument magnitude of element i.
template <class Args>
StepBound ulp_bound(const Values& ref, Format out, int ulps, Args args) {
    StepBound b{std::vector<double>(ref.v.size()), std::vector<double>(ref.v.size())};
    for (std::size_t i = 0; i < ref.v.size(); ++i) {
        b.oracle[i] = elementwise_oracle(ref.v[i], args(i));
        b.budget[i] = ulp_window(out, ref.v[i], b.oracle[i], ulps);
    }
    return b;
}

StepBound unary_bound(const Step& s, const Lookup& get, const Values& ref, Format out) {
    const Values& x = get(s.inputs.at(0));
    return ulp_bound(ref, out, kActivationUlps, [&](std::size_t i) { return std::fabs(x.v[i]); });
}

// softcap_arith = dtype: y = c tanh(x / c) as PyTorch computes it in the
// model's format f (docs/diverge.md, "The logit softcap in the model's
// format"), with c rounded to FP32 (u32 each time it is used): x / c (or x
// times an FP32 1 / c) rounded to f, y1 = (x / c)(1 + t1), |t1| <= (1 + u)(1 +
// u32)^3 - 1; the FP32 tanh (2 ulps: 4 u32 relative) rounded to f, t^ =
// tanh(y1)(1 + t2), |t2| <= (1 + 4 u32)(1 + u) - 1; times c rounded to f, y^ =
// c t^ (1 + t3), |t3| <= (1 + u)(1 + u32)^2 - 1.  By the mean value
// theorem, sech^2 decreasing in |y|: |tanh(y1) - tanh(x / c)| <= |x / c| t1
// sech^2(|x / c| (1 - t1)); so
//   |y^ - y| <= |x| t1 sech^2(|x / c| (1 - t1)) (1 + t2)(1 + t3) + |y| ((1 + t2)(1 + t3) - 1)
// plus (3c + 1) eta_f (1 + 4u) for stages that land below f's normal range
// (the divide's eta and the tanh's — up to 2 eta in FP32 — carried by c, the
// multiply's), and half an ulp of `out` where it is narrower than f.
StepBound softcap_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref,
                        const Conventions& conv, Format out) {
    StepBound b = unary_bound(s, get, ref, out);
    if (convention_value(conv, "softcap_arith") != "dtype") return b;
    const Values& x = get(s.inputs.at(0));
    const double u = unit_roundoff(c.dtype), u32 = unit_roundoff(kAcc), cap = c.logit_softcap;
    const double t1 = (1 + u) * std::pow(1 + u32, 3) - 1, t2 = (1 + 4 * u32) * (1 + u) - 1, t3 = (1 + u) * std::pow(1 + u32, 2) - 1;
    const bool narrower = info(out).precision < info(c.dtype).precision;
    for (std::size_t i = 0; i < ref.v.size(); ++i) {
        if (!std::isfinite(x.v[i]) || !std::isfinite(ref.v[i])) continue;  // judged by class
        const double y = std::fabs(x.v[i] / cap), sech = 1 / std::cosh(y * (1 - t1));
        const double e = std::fabs(x.v[i]) * t1 * sech * sech * (1 + t2) * (1 + t3) +
                         std::fabs(ref.v[i]) * ((1 + t2) * (1 + t3) - 1) + (3 * cap + 1) * eta(c.dtype) * (1 + 4 * u);
        b.budget[i] = e + (narrower ? 0.5 * ulp_at(out, std::fabs(ref.v[i]) + e) : 0.0);
    }
    return b;
}

// act_arith = quotient: the sigmoid and silu steps as PyTorch's CPU kernels
// compute them, the FP32 quotients 1 / (1 + exp(-x)) and x / (1 + exp(-x))
// with a 1-ulp exp (docs/diverge.md, "SwiGLU computed in two ops", steps
// 1-3: one division either way), then stored into `out` (+ 1/2 ulp when
// narrower than FP32).
StepBound logistic_bound(const Step& s, const Lookup& get, const Values& ref, const Conventions& conv, Format out) {
    StepBound b = unary_bound(s, get, ref, out);
    if (convention_value(conv, "act_arith") != "quotient") return b;
    const Values& x = get(s.inputs.at(0));
    const bool narrow = info(out).precision < info(kAcc).precision;
    for (std::size_t i = 0; i < ref.v.size(); ++i) {
        if (!std::isfinite(x.v[i]) || !std::isfinite(ref.v[i])) continue;  // judged by class
        const double e = quotient_error(x.v[i], ref.v[i]);
        b.budget[i] = e + (narrow ? 0.5 * ulp_at(out, std::fabs(ref.v[i]) + e) : 0.0);
    }
    return b;
}

// glu_arith = separate: SwiGLU as act_fn(gate) * up (Hugging Face's
// LlamaMLP), derived in docs/diverge.md ("SwiGLU computed in two ops"):
//   s^ = silu(g) in FP32 as g / (1 + exp(-g)), exp within 1 ulp (2u
//        relative) and two roundings: |s^ - s| <= rho |s| + eta/2,
//        rho = 4u (1 + 4u); |s| itself where exp(-g) or 1 + exp(-g) may
//        overflow FP32 (s^ = -0 there);
//   stored in the model format f: + 1/2 ulp_f(|s| + e_act) when f is narrower;
//   h^ = s^ up rounded into f (an FP32 product of two f values is exact
//        for bf16/fp16 but for underflow, eta/2): + 1/2 ulp_f(|h| + |up| e_s);
//   stored into out when out is narrower than f: + 1/2 ulp_out.
// act(g) * up computed as two ops (act stored in f, then the product
// rounded), given the FP32 activation's value s and error e.
double separate_glu_budget(double s, double e, double up, double y, Format f, Format out) {
    const double eta32 = eta(kAcc);
    const bool narrow = info(f).precision < info(kAcc).precision;
    if (narrow) e += 0.5 * ulp_at(f, std::fabs(s) + e);
    double pre = std::fabs(up) * e + (narrow ? eta32 / 2 : 0.0);
    pre += 0.5 * ulp_at(f, std::fabs(y) + pre);
    if (info(out).precision < info(f).precision) pre += 0.5 * ulp_at(out, std::fabs(y) + pre);
    return pre;
}

double separate_swiglu_budget(double g, double up, double y, Format f, Format out) {
    if (!std::isfinite(g) || !std::isfinite(up) || !std::isfinite(y)) return 0;  // judged by class
    const double s = g / (1 + std::exp(-g));
    return separate_glu_budget(s, quotient_error(g, s), up, y, f, out);
}

// The same with PyTorch's tanh GELU (Gemma's GeGLU) and its erf GELU.
double separate_geglu_tanh_budget(double g, double up, double y, Format f, Format out) {
    if (!std::isfinite(g) || !std::isfinite(up) || !std::isfinite(y)) return 0;  // judged by class
    const double s = oracle::gelu_tanh(g);
    return separate_glu_budget(s, tanh_gelu_error(g, s), up, y, f, out);
}

double separate_geglu_erf_budget(double g, double up, double y, Format f, Format out) {
    if (!std::isfinite(g) || !std::isfinite(up) || !std::isfinite(y)) return 0;  // judged by class
    const double s = oracle::gelu_erf(g);
    return separate_glu_budget(s, erf_gelu_error(g, s), up, y, f, out);
}

StepBound glu_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref, const Conventions& conv,
                    Format out) {
    const Values& gu = get(s.inputs.at(0));
    const auto F = static_cast<std::size_t>(ref.shape.back());
    StepBound b = ulp_bound(ref, out, kActivationUlps, [&](std::size_t i) {
        const std::size_t t = i / F, j = i % F;  // either half may be the gate: take both
        return std::max(std::fabs(gu.v[t * 2 * F + j]), std::fabs(gu.v[t * 2 * F + F + j]));
    });
    const std::string op = step_op(c, s, conv);
    if (convention_value(conv, "glu_arith") != "separate" || (op != "swiglu" && op != "geglu")) return b;
    const bool gate_first = convention_value(conv, "gate_order") == "gate_up";
    const auto budget = op == "swiglu"                               ? separate_swiglu_budget
                        : convention_value(conv, "gelu") == "tanh" ? separate_geglu_tanh_budget
                                                                   : separate_geglu_erf_budget;
    for (std::size_t i = 0; i < ref.v.size(); ++i) {
        const std::size_t t = i / F, j = i % F;
        const double first = gu.v[t * 2 * F + j], second = gu.v[t * 2 * F + F + j];
        b.budget[i] = budget(gate_first ? first : second, gate_first ? second : first, ref.v[i], c.dtype, out);
    }
    return b;
}

// mul: a b in FP32 (exact for bf16/fp16 inputs, one rounding for fp32), then
// one rounding into out; an FP32 product below the normal range adds eta/2.
// The FP64 tier's product of two stored values (<= 24 significand bits each,
// exponents >= -149) is exact in double: its bound is 0, and a product
// representable in `out` must be met exactly (budget 0).
// mul: the FP32 product, then the store into `out`.  The product rounds
// only where the exact one is no FP32 number (a bf16 by an FP32 factor:
// Qwen3-Next's RMSNorm(o) silu(z)); there, in any `out` but FP32, it may
// move by u |ab| before the store (two roundings, or the FP32 one kept).
StepBound mul_bound(const Values& ref, Format out) {
    StepBound b{std::vector<double>(ref.v.size()), std::vector<double>(ref.v.size(), 0.0)};
    const double u = out == kAcc ? 0.0 : unit_roundoff(kAcc);  // FP32 out: the product's one rounding
    for (std::size_t i = 0; i < ref.v.size(); ++i) {
        const double y = ref.v[i], first = static_cast<double>(static_cast<float>(y)) == y ? 0.0 : u * std::fabs(y);
        b.budget[i] = ulp_window(out, y, first + eta(kAcc) / 2, 0);
    }
    return b;
}

// embed: rows copied exactly -- budget and FP64 bound 0 (equality required).
StepBound exact_bound(const Values& ref) {
    return {std::vector<double>(ref.v.size(), 0.0), std::vector<double>(ref.v.size(), 0.0)};
}

// add: y = a + s b.  fl(s b) (exact when s = 1), the FP32 add, then the
// store into the residual format when it is narrower than FP32.
StepBound add_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref, Format out) {
    const Values& bv = get(s.inputs.at(1));
    const double u = unit_roundoff(kAcc), scale = c.residual_scale;
    const bool rounds = info(out).precision < info(kAcc).precision;
    StepBound b{std::vector<double>(ref.v.size()), std::vector<double>(ref.v.size())};
    for (std::size_t i = 0; i < ref.v.size(); ++i) {
        const double sb = std::fabs(scale * bv.v[i]);
        const double e1 = scale == 1 ? 0.0 : u * sb + eta(kAcc) / 2;
        const double pre = e1 + u * (std::fabs(ref.v[i]) + e1);
        b.budget[i] = pre + (rounds ? 0.5 * ulp_at(out, std::fabs(ref.v[i]) + pre) : 0.0);
        // One double rounding of s b (none when s = 1), one of the sum: relative to the result.
        const double o1 = scale == 1 ? 0.0 : kU64 * sb + kEta64;
        b.oracle[i] = o1 + kU64 * (std::fabs(ref.v[i]) + o1) + kEta64;
    }
    return b;
}

// ---- mHC stream mixing --------------------------------------------------------

// A short dot product with computed sigmoid weights: gamma_terms A over the
// magnitudes A, e_w relative on every weighted term (the FP32 sigmoid within
// 2 ulps, 4u), and the output rounding.
void weighted_sum(StepBound& b, std::size_t i, double a, double terms, double y, Format out) {
    const double u = unit_roundoff(kAcc);
    const double pre = (oracle::gamma(terms, u) + 4 * u) * a * (1 + 4 * u) + terms * eta(kAcc);
    const bool rounds = info(out).precision < info(kAcc).precision;
    b.budget[i] = pre + (rounds ? 0.5 * ulp_at(out, std::fabs(y) + pre) : 0.0);
    b.oracle[i] = (oracle::gamma(terms, kU64) + 8 * kU64) * a + terms * kEta64;
}

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

// Stream k of X at element i: X [n, T, C], or X [T, C] standing for n copies.
double stream_at(const Values& X, std::size_t k, std::size_t m, std::size_t i) {
    return X.shape.size() == 3 ? X.v[k * m + i] : X.v[i];
}

// Without a weight the mix is the stream mean: weights 1/n and the division
// (one more rounding, inside the 4u of the weights).
StepBound hc_mix_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref, Format out) {
    const Values& X = get(s.inputs.at(0));
    const Values* alpha = s.weights.empty() ? nullptr : &get(s.weights[0]);
    const auto n = static_cast<std::size_t>(c.hc_streams), m = ref.v.size();
    StepBound b{std::vector<double>(m), std::vector<double>(m)};
    for (std::size_t i = 0; i < m; ++i) {
        double a = 0;
        for (std::size_t k = 0; k < n; ++k)
            a += (alpha ? sigmoid(alpha->v[k]) : 1.0 / static_cast<double>(n)) * std::fabs(stream_at(X, k, m, i));
        weighted_sum(b, i, a, static_cast<double>(n), ref.v[i], out);
    }
    return b;
}

// Gated Residual's write X_i + sigmoid(s_i) f: two terms, the weight an FP32 sigmoid.
StepBound gated_write_bound(const Step& s, const Lookup& get, const Values& ref, Format out) {
    const Values &X = get(s.inputs.at(0)), &f = get(s.inputs.at(1)), &gate = get(s.weights.at(0));
    const std::size_t n = gate.v.size(), m = f.v.size();
    StepBound b{std::vector<double>(ref.v.size()), std::vector<double>(ref.v.size())};
    for (std::size_t r = 0; r < n; ++r)
        for (std::size_t i = 0; i < m; ++i)
            weighted_sum(b, r * m + i, std::fabs(stream_at(X, r, m, i)) + sigmoid(gate.v[r]) * std::fabs(f.v[i]), 2.0,
                         ref.v[r * m + i], out);
    return b;
}

StepBound hc_update_bound(const Step& s, const Lookup& get, const Values& ref, Format out) {
    const Values &X = get(s.inputs.at(0)), &f = get(s.inputs.at(1)), &B = get(s.inputs.at(2));
    const Values& gamma = get(s.weights.at(0));
    const std::size_t n = gamma.v.size(), m = f.v.size();
    StepBound b{std::vector<double>(ref.v.size()), std::vector<double>(ref.v.size())};
    for (std::size_t r = 0; r < n; ++r)
        for (std::size_t i = 0; i < m; ++i) {
            double a = 2 * sigmoid(gamma.v[r]) * std::fabs(f.v[i]);
            for (std::size_t k = 0; k < n; ++k) a += std::fabs(B.v[r * n + k] * stream_at(X, k, m, i));
            weighted_sum(b, r * m + i, a, static_cast<double>(n + 1), ref.v[r * m + i], out);
        }
    return b;
}

}  // namespace

static StepBound step_bound_of(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref,
                               const Conventions& conv, Format out);

StepBound step_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref,
                     const Conventions& conv, Format out) {
    StepBound b = step_bound_of(c, s, get, ref, step_conventions(conv, s), out);
    b.granule = eta(out);
    return b;
}

StepBound step_bound_of(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref,
                        const Conventions& conv, Format out) {
    switch (s.kind) {
        case StepKind::norm:
        case StepKind::head_norm:
        case StepKind::l2_head: return norm_bound(c, s, get, ref, conv, out);
        case StepKind::matmul: return matmul_bound(c, s, get, ref, conv, out);
        case StepKind::silu:
        case StepKind::sigmoid: return logistic_bound(s, get, ref, conv, out);
        case StepKind::softcap: return softcap_bound(c, s, get, ref, conv, out);
        case StepKind::log_decay:
        case StepKind::gelu: return unary_bound(s, get, ref, out);
        case StepKind::short_conv:
            return short_conv_bound({get(s.inputs.at(0)), s.inputs.size() > 1 ? &get(s.inputs[1]) : nullptr,
                                     get(s.weights.at(0)), convention_value(conv, "conv_padding") == "same"},
                                    ref, c.dtype, out);
        case StepKind::int8_matmul: return int8_matmul_bound(ref, out);
        case StepKind::bounded_decay: return bounded_decay_bound({get(s.inputs.at(0)), get(s.weights.at(0)), c.decay_min}, ref, out);
        case StepKind::softplus_decay:
            return softplus_decay_bound({get(s.inputs.at(0)), get(s.weights.at(0)), get(s.weights.at(1))}, ref, out);
        case StepKind::embed: return exact_bound(ref);
        case StepKind::glu: return glu_bound(c, s, get, ref, conv, out);
        case StepKind::mul: return mul_bound(ref, out);
        case StepKind::add: return add_bound(c, s, get, ref, out);
        case StepKind::hc_mix: return hc_mix_bound(c, s, get, ref, out);
        case StepKind::hc_update: return hc_update_bound(s, get, ref, out);
        case StepKind::gated_write: return gated_write_bound(s, get, ref, out);
        case StepKind::attn_res:
        case StepKind::gated_read: return structured_step_bound(c, s, get, ref, conv, out);
        case StepKind::rope:
        case StepKind::attention:
        case StepKind::mla:
        case StepKind::gdn:
        case StepKind::kda:
        case StepKind::sinkhorn: return structured_step_bound(c, s, get, ref, conv, out);
        case StepKind::router: return router_step_bound(op_call(c, s, get, conv), ref, out);
        case StepKind::moe: return moe_step_bound(c, op_call(c, s, get, conv), get(s.inputs.at(1)), ref, out);
        case StepKind::latent_out: return latent_out_step_bound(c, op_call(c, s, get, conv), get(s.inputs.at(1)), ref, out);
    }
    throw std::invalid_argument(std::string("no local budget for step kind ") + name(s.kind));
}

}  // namespace conform::model
