// MPFR side of the positional oracle: inverse frequencies and cos/sin with
// guard bits (the error analysis is in docs/rope.md, "Oracle"), and the
// registry evaluators of sincos_pe and rope with their shape and parameter
// checks.
#include "oracle/rope.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace conform::oracle {
namespace {

// An mpfr_t of a given precision, cleared on scope exit.
class Mp {
public:
    explicit Mp(long bits) { mpfr_init2(v_, static_cast<mpfr_prec_t>(bits)); }
    ~Mp() { mpfr_clear(v_); }
    Mp(const Mp&) = delete;
    Mp& operator=(const Mp&) = delete;
    mpfr_ptr get() { return v_; }

private:
    mpfr_t v_;
};

mpfr_srcptr raw(const Real& x) { return x.backend().data(); }

// Round v to the thread's working precision.
Real to_working(mpfr_srcptr v) {
    Real r;
    mpfr_set(r.backend().data(), v, MPFR_RNDN);
    return r;
}

Real nan_real() { return from_double(std::numeric_limits<double>::quiet_NaN()); }

// e with |x| < 2^e for a regular x (MPFR's exponent convention), else 0.
long exponent_of(mpfr_srcptr x) { return mpfr_regular_p(x) ? static_cast<long>(mpfr_get_exp(x)) : 0; }

// Bits that cover the error of θ = b^ê when ê = fl(−2j/r): the relative error
// of θ is |ê − e|·|ln b| <= 2^-W |ln b|, and |ln b| < |exponent(b)| + 1.
long log_base_bits(const Real& b) {
    return std::bit_width(static_cast<unsigned long>(std::labs(exponent_of(raw(b))) + 3));
}

// θ_j = b^(−2j/r) at W bits (relative error <= 2^-W (|ln b| + 1)).
void inv_freq_at(mpfr_ptr theta, std::int64_t j, std::int64_t r, const Real& b) {
    Mp e(mpfr_get_prec(theta));
    mpfr_set_si(e.get(), static_cast<long>(-2 * j), MPFR_RNDN);
    mpfr_div_si(e.get(), e.get(), static_cast<long>(r), MPFR_RNDN);
    mpfr_pow(theta, raw(b), e.get(), MPFR_RNDN);
}

// Precision that keeps the angle's absolute error below 2^-(P+10): the angle
// m·θ has relative error <= 2^-W (|ln b| + 2) and magnitude
// <= |m| · max(1, 1/b) (θ_j lies between 1 and 1/b).
long angle_bits(const Real& m, const Real& b) {
    const long P = static_cast<long>(current_bits());
    const long m_bits = std::max(0L, exponent_of(raw(m)));
    const long inv_b_bits = std::max(0L, 1 - exponent_of(raw(b)));
    return P + 10 + m_bits + inv_b_bits + log_base_bits(b);
}

// ---- parameter and shape checks -------------------------------------------

void require_inputs(const std::string& op, const std::vector<TensorView>& in, std::size_t n, const char* names) {
    if (in.size() != n)
        throw std::invalid_argument(op + ": expects " + std::to_string(n) + " input(s) (" + names + "), got " +
                                    std::to_string(in.size()));
}

std::string num(double v) {
    std::string s = std::to_string(v);
    if (s.find('.') != std::string::npos) s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
}

double positive_param(const std::string& op, const Params& p, const std::string& name, double fallback) {
    const double v = p.get(name, fallback);
    if (!std::isfinite(v) || !(v > 0))
        throw std::invalid_argument(op + ": parameter '" + name + "' is " + num(v) + ", must be finite and > 0");
    return v;
}

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

// rotary_dim: 0 means the whole head dimension D; otherwise even, 2 <= r <= D.
std::int64_t rotary_dim_of(const std::string& op, const Params& p, std::int64_t D) {
    const std::int64_t r0 = integer_param(op, p, "rotary_dim", 0, 0, kMaxExactInteger);
    const std::int64_t r = r0 == 0 ? D : r0;
    if (r % 2 != 0 || r < 2 || r > D)
        throw std::invalid_argument(op + ": input 'x' dimension 2 (head dim D) is " + std::to_string(D) +
                                    "; rotary_dim " + std::to_string(r0) + (r0 == 0 ? " (= D)" : "") +
                                    " must be even, >= 2 and <= D");
    return r;
}

RopeScaling rope_scaling_of(const std::string& op, const Params& p) {
    RopeScaling sc;
    sc.kind = static_cast<RopeScalingKind>(integer_param(op, p, "scaling", 0, 0, 3));
    sc.factor = positive_param(op, p, "factor", 1.0);
    sc.low_freq_factor = positive_param(op, p, "low_freq_factor", 1.0);
    sc.high_freq_factor = positive_param(op, p, "high_freq_factor", 4.0);
    if (sc.kind == RopeScalingKind::llama3 && !(sc.high_freq_factor > sc.low_freq_factor))
        throw std::invalid_argument(op + ": parameter 'high_freq_factor' is " + num(sc.high_freq_factor) +
                                    ", must be > low_freq_factor (" + num(sc.low_freq_factor) + ")");
    sc.original_max_pos = positive_param(op, p, "original_max_pos", 8192.0);
    sc.beta_fast = positive_param(op, p, "beta_fast", 32.0);
    sc.beta_slow = positive_param(op, p, "beta_slow", 1.0);
    sc.truncate = integer_param(op, p, "truncate", 1, 0, 1) != 0;
    sc.attention_factor = positive_param(op, p, "attention_factor", 1.0);
    return sc;
}

// Extra bits for the scaled frequency: the multiplier g = w + (1 − w)/s is
// formed at W bits from ρ (llama3) or the correction range (yarn); an
// absolute error δ of w moves g by |1 − 1/s| δ, and g >= min(1, 1/s), so
// the relative error of g is at most (s + 1/s + 1) δ, with δ a small
// multiple of 2^-W times the conditioning of w's formula.
long scaling_bits(const RopeConfig& c, double b) {
    const RopeScaling& sc = c.scaling;
    if (sc.kind == RopeScalingKind::none || sc.kind == RopeScalingKind::linear) return 4;
    double cond = sc.factor + 1 / sc.factor + 1;
    if (sc.kind == RopeScalingKind::llama3) {
        cond *= (sc.high_freq_factor + sc.low_freq_factor + 1) / (sc.high_freq_factor - sc.low_freq_factor);
    } else {
        const auto [lo, hi] = rope_yarn_range<double>(c.rotary_dim, b, sc);
        const double r = static_cast<double>(c.rotary_dim);
        cond *= (r + std::fabs(lo) + std::fabs(hi) + 2) * (1 + r / std::fabs(2 * std::log(b))) / std::fabs(hi - lo);
    }
    return 8 + static_cast<long>(std::ceil(std::log2(cond)));
}

}  // namespace

RopeConfig rope_config(const std::string& op, const Params& p, std::int64_t D) {
    RopeConfig c;
    c.pairing = static_cast<RopePairing>(integer_param(op, p, "pairing", 0, 0, 1));
    c.rotary_dim = rotary_dim_of(op, p, D);
    c.base = positive_param(op, p, "base", 10000.0);
    c.ntk_scale = positive_param(op, p, "ntk_scale", 1.0);
    c.scaling = rope_scaling_of(op, p);
    if (c.scaling.kind == RopeScalingKind::yarn && c.base * c.ntk_scale == 1.0)
        throw std::invalid_argument(op + ": parameter 'base' times 'ntk_scale' is 1; yarn's correction range divides by its log");
    if (c.scaling.kind == RopeScalingKind::yarn && c.scaling.truncate) {
        // A correction range end within rounding of an integer: a kernel's
        // (or Hugging Face's) double floor/ceil may land on the other integer
        // than the exact one, moving a whole pair's frequency.  Not decided.
        RopeScaling raw = c.scaling;
        raw.truncate = false;
        const auto [lo, hi] = rope_yarn_range<double>(c.rotary_dim, c.base * c.ntk_scale, raw);
        for (const double v : {lo, hi})
            if (v > 0 && v < static_cast<double>(c.rotary_dim - 1) &&
                std::fabs(v - std::nearbyint(v)) <= 0x1p-40 * (std::fabs(v) + static_cast<double>(c.rotary_dim)))
                throw std::invalid_argument(op + ": yarn's correction range end " + num(v) +
                                            " lies within rounding of an integer: truncate's floor/ceil is not determined");
    }
    return c;
}

Real rope_inv_freq(std::int64_t j, std::int64_t r, const Real& b) {
    Mp theta(static_cast<long>(current_bits()) + 10 + log_base_bits(b));
    inv_freq_at(theta.get(), j, r, b);
    return to_working(theta.get());
}

CosSin<Real> rope_cos_sin(const Real& m, std::int64_t j, std::int64_t r, const Real& b) {
    if (!mpfr_number_p(raw(m))) return {nan_real(), nan_real()};  // sin(±Inf), cos(NaN): NaN
    // MPFR's sin/cos reduce their argument exactly, so all the error is in
    // the angle; W bits keep it below 2^-(P+10) (see angle_bits).
    const long W = angle_bits(m, b);
    Mp theta(W), angle(W), c(W), s(W);
    inv_freq_at(theta.get(), j, r, b);
    mpfr_mul(angle.get(), raw(m), theta.get(), MPFR_RNDN);
    mpfr_sin_cos(s.get(), c.get(), angle.get(), MPFR_RNDN);
    return {to_working(c.get()), to_working(s.get())};
}

CosSin<Real> rope_scaled_cos_sin(const Real& m, std::int64_t j, const RopeConfig& c) {
    const Real b = rope_effective_base<Real>(c);
    if (c.scaling.kind == RopeScalingKind::none) return rope_cos_sin(m, j, c.rotary_dim, b);
    if (!mpfr_number_p(raw(m))) return {nan_real(), nan_real()};
    const long W = angle_bits(m, b) + scaling_bits(c, to_double(b)) +
                   static_cast<long>(std::ceil(std::log2(std::max(1.0, 1 / c.scaling.factor))));
    Mp theta(W), angle(W), cs(W), sn(W);
    inv_freq_at(theta.get(), j, c.rotary_dim, b);
    {
        // g at W bits (Real arithmetic follows the thread's precision; b and
        // m are exact, θ carries W bits).
        PrecisionScope scope(static_cast<unsigned>(W));
        Real th;
        mpfr_set(th.backend().data(), theta.get(), MPFR_RNDN);
        const Real g = rope_freq_multiplier(j, c.rotary_dim, th, b, c.scaling);
        const Real af = from_double(c.scaling.attention_factor);
        mpfr_mul(angle.get(), raw(m), theta.get(), MPFR_RNDN);
        mpfr_mul(angle.get(), angle.get(), raw(g), MPFR_RNDN);
        mpfr_sin_cos(sn.get(), cs.get(), angle.get(), MPFR_RNDN);
        mpfr_mul(cs.get(), cs.get(), raw(af), MPFR_RNDN);
        mpfr_mul(sn.get(), sn.get(), raw(af), MPFR_RNDN);
    }
    return {to_working(cs.get()), to_working(sn.get())};
}

double rope_pow_units(const Params& p) { return 2 * std::max(1.0, p.get("declared.pow_ulps", 1)); }

TableError rope_table_error(const RopeTableModel& k, double angle, double abs_log_theta, double c, double s) {
    // θ̂_j: the exponent −2j/r rounds (relative error |ln θ_j| u after pow or
    // exp), pow/exp add k.pow_units u (one ulp: 2u), ln b (exp form) another
    // |ln θ_j| u, and one u more; m·θ̂ one u.
    return rope_scaled_table_error(k, angle, 2 * abs_log_theta + 1 + k.pow_units, c, s, 1.0);
}

TableError rope_scaled_table_error(const RopeTableModel& k, double angle, double theta_units, double c, double s,
                                   double af) {
    const double angle_err = std::fabs(angle) * (theta_units + 1) * k.angle_unit;  // m·θ̂' one more unit
    // |sin'| <= 1: the angle error passes through, times af; af·cos rounds once.
    const double pre = af * (angle_err + k.trig_abs_error);
    // af != 1: af itself converted to the arithmetic's format (Hugging Face's
    // Python float cast to FP32), then the product: two units.
    const double pc = pre + (af != 1 ? 2 * std::fabs(c) * k.angle_unit : 0), ps = pre + (af != 1 ? 2 * std::fabs(s) * k.angle_unit : 0);
    return {pc + 0.5 * ulp_at(k.table, std::fabs(c) + pc), ps + 0.5 * ulp_at(k.table, std::fabs(s) + ps)};
}

TableError rope_entry_error(const RopeTableModel& k, const RopeConfig& c, std::int64_t j, double theta, double angle,
                            double cv, double sv) {
    return rope_scaled_table_error(k, angle, rope_theta_error_units(c, j, theta, k.pow_units), cv, sv, c.scaling.attention_factor);
}

// The reference order (kernels in double, Hugging Face in FP32), u the unit:
//   linear  θ̂/s                                             (s converted: 1, division: 1)
//   llama3  λ = (1/θ̂)·2π; θ̂/s if λ > L0/l, θ̂ if λ < L0/h, else
//           σ = ((1/λ)·L0 − l)/(h − l), ((1 − σ)·θ̂)/s + σ·θ̂
//   yarn    ramp = (j − lo)/(hi − lo) clamped, e = 1 − ramp;
//           (1/(s·p))·(1 − e) + (1/p)·e with p = b^(2j/r)
// Units = ε (θ̂'s) + the scaling's roundings + the weight's absolute error
// δ (in units) times |1 − 1/s| / g, g = θ'/θ >= min(1, 1/s): the keep
// weight and its complement move together, so only their difference of
// slopes θ − θ/s carries δ.
double rope_theta_error_units(const RopeConfig& c, std::int64_t j, double theta, double pow_units) {
    const RopeScaling& sc = c.scaling;
    const double eps = 2 * std::fabs(std::log(theta)) + 1 + pow_units;
    if (sc.kind == RopeScalingKind::none) return eps;
    if (sc.kind == RopeScalingKind::linear) return eps + 2;
    const double b = c.base * c.ntk_scale, s = sc.factor;
    const double g = rope_freq_multiplier<double>(j, c.rotary_dim, theta, b, sc), slope = std::fabs(1 - 1 / s) / g;
    if (sc.kind == RopeScalingKind::llama3) {
        const double l = sc.low_freq_factor, h = sc.high_freq_factor;
        const double rho = sc.original_max_pos * theta / (2 * pi_of<double>()), rho_units = eps + 6;  // (1/θ̂)·2π, 1/λ, ·L0, L0
        const double margin = 2 * rho_units * 0x1p-20;  // far wider than any unit's rho_units·u
        if (rho > h * (1 + margin)) return eps;          // kept: both decisions agree
        if (rho < l * (1 - margin)) return eps + 2;      // θ̂/s
        // σ̂: ρ̂ off by ρ rho_units, ρ̂ − l and /(h − l) one unit each, h − l
        // converted one more; a flipped decision is within the same δσ.
        const double dsigma = (h * rho_units + (h - l) + l) / (h - l) + 3;
        return eps + 5 + dsigma * slope;
    }
    const auto [lo, hi] = rope_yarn_range<double>(c.rotary_dim, b, sc);
    const double ramp = (static_cast<double>(j) - lo) / (hi - lo);
    // lo, hi: exact integers when truncated, else off by 8|lo| + r/|ln b|
    // units (double logs; FP32 conversion); the ramp's three roundings.
    const bool integral = lo == std::floor(lo) && hi == std::floor(hi);
    const double r = static_cast<double>(c.rotary_dim), dl = integral ? 0 : 8 * std::fabs(lo) + r / std::fabs(std::log(b));
    const double dh = integral ? 0 : 8 * std::fabs(hi) + r / std::fabs(std::log(b));
    const double shift = (2 * dl + dh) / std::fabs(hi - lo);  // the ends' error, in units of the ramp
    // Clamped only where a computed ramp is clamped too (a margin far wider
    // than shift · u); near the clamps the between formula covers a flip.
    if (ramp < -shift * 0x1p-20 || (integral && !(ramp > 0))) return eps;     // e = 1 exactly: θ̂' = 1/p
    if (ramp > 1 + shift * 0x1p-20 || (integral && !(ramp < 1))) return eps + 3;  // e = 0: 1/(s p), s converted
    return eps + 6 + (shift + 3 + 1) * slope;
}

std::pair<double, double> rope_pair_bound(const RopeTableModel& k, const TableError& e, double xa, double xb, double c,
                                          double s, double ya, double yb) {
    if (!std::isfinite(xa) || !std::isfinite(xb)) return {INFINITY, INFINITY};
    const double u = unit_roundoff(k.arith), g2 = 2 * u / (1 - 2 * u);
    const double eta = min_subnormal(k.arith);  // underflowing products/sums
    const double ax = std::fabs(xa), bx = std::fabs(xb), ac = std::fabs(c), as = std::fabs(s);
    // y_a = x_a c − x_b s, y_b = x_a s + x_b c with table entries c + Δc, s + Δs.
    const double ta = ax * e.cos + bx * e.sin, tb = ax * e.sin + bx * e.cos;
    const double ra = g2 * (ax * (ac + e.cos) + bx * (as + e.sin)) + 3 * eta;
    const double rb = g2 * (ax * (as + e.sin) + bx * (ac + e.cos)) + 3 * eta;
    double ba = ta + ra, bb = tb + rb;
    if (info(k.out).precision < info(k.arith).precision) {  // a second rounding into the storage format
        ba += 0.5 * ulp_at(k.out, std::fabs(ya) + ba);
        bb += 0.5 * ulp_at(k.out, std::fabs(yb) + bb);
    }
    return {ba, bb};
}

OpOutputs eval_sincos_pe(const Params& params, const std::vector<TensorView>& in) {
    const std::string op = "sincos_pe";
    require_inputs(op, in, 1, "positions");
    const TensorView& positions = in[0];
    require_rank(op, "positions", positions, 1);
    const double dim_v = params.get("dim", 0);
    if (!std::isfinite(dim_v) || dim_v != std::floor(dim_v) || dim_v < 2 || dim_v > 1 << 24 ||
        static_cast<std::int64_t>(dim_v) % 2 != 0)
        throw std::invalid_argument(op + ": parameter 'dim' (output 'pe' dimension 1) is " + num(dim_v) +
                                    ", must be an even integer >= 2");
    const auto d = static_cast<std::int64_t>(dim_v);
    const Real base = from_double(positive_param(op, params, "base", 10000.0));

    const std::int64_t L = positions.shape[0];
    const std::vector<Real> pos = read_exact(positions);
    OpOutputs out{{"pe"}, {{L, d}}, {{}}};
    auto& pe = out.values[0];
    pe.reserve(static_cast<std::size_t>(L * d));
    for (std::int64_t l = 0; l < L; ++l)
        for (Real& v : sincos_pe_row(pos[l], d, base)) pe.push_back(std::move(v));
    return out;
}

OpOutputs eval_rope(const Params& params, const std::vector<TensorView>& in) {
    const std::string op = "rope";
    require_inputs(op, in, 1, "x");
    const TensorView& x = in[0];
    require_rank(op, "x", x, 3);
    const std::int64_t H = x.shape[0], L = x.shape[1], D = x.shape[2];
    const RopeConfig c = rope_config(op, params, D);
    const Real offset = from_double(static_cast<double>(
        integer_param(op, params, "offset", 0, -kMaxExactInteger, kMaxExactInteger)));

    const std::vector<Real> xs = read_exact(x);
    OpOutputs out{{"y"}, {{H, L, D}}, {std::vector<Real>(xs.size())}};
    auto& y = out.values[0];
    for (std::int64_t l = 0; l < L; ++l) {
        // Token l sits at position offset + l (exact: both are integers below 2^53).
        const auto row = rope_table_row(offset + from_double(static_cast<double>(l)), c);
        for (std::int64_t h = 0; h < H; ++h) {
            const auto first = xs.begin() + (h * L + l) * D;
            const auto yv = rope_apply(std::vector<Real>(first, first + D), row, c);
            std::copy(yv.begin(), yv.end(), y.begin() + (h * L + l) * D);
        }
    }
    return out;
}

// The verdict's per-element bound for `rope` kernels: the reference design
// of docs/rope.md (double angles, FP32 tables, FP32 rotation), output in
// out[0].  Exact c, s and angle come from the 128-bit tier; the bound uses
// them only as magnitudes.  Pass-through dims get bound 0: they must be
// copied bit for bit.
std::vector<std::vector<double>> rope_bound(const Params& params, const std::vector<TensorView>& in,
                                            const std::vector<std::vector<double>>& exact, Format acc,
                                            const std::vector<Format>& out) {
    const TensorView& x = in.at(0);
    const std::int64_t H = x.shape[0], L = x.shape[1], D = x.shape[2];
    const RopeConfig c = rope_config("rope", params, D);
    const double offset = params.get("offset", 0);
    RopeTableModel model;
    model.arith = acc;
    model.out = out.at(0);
    model.pow_units = rope_pow_units(params);
    PrecisionScope scope(kDefaultBits);
    const Real b = rope_effective_base<Real>(c);
    std::vector<double> bound(static_cast<std::size_t>(x.numel()), 0.0);
    const std::vector<double>& y = exact.at(0);
    for (std::int64_t l = 0; l < L; ++l) {
        const double m = offset + static_cast<double>(l);
        for (std::int64_t j = 0; j < c.rotary_dim / 2; ++j) {
            const CosSin<Real> cs = rope_scaled_cos_sin(from_double(m), j, c);
            const double cv = to_double(cs.cos), sv = to_double(cs.sin);
            const double theta = to_double(rope_inv_freq(j, c.rotary_dim, b));
            const TableError e = rope_entry_error(model, c, j, theta, rope_scaled_angle(c, m, j, theta), cv, sv);
            const auto [da, db] = rope_pair_dims(c.pairing, j, c.rotary_dim);
            for (std::int64_t h = 0; h < H; ++h) {
                const std::int64_t base = (h * L + l) * D;
                const auto ia = static_cast<std::size_t>(base + da), ib = static_cast<std::size_t>(base + db);
                const auto [ba, bb] = rope_pair_bound(model, e, x.value(base + da), x.value(base + db), cv, sv, y[ia], y[ib]);
                bound[ia] = ba;
                bound[ib] = bb;
            }
        }
    }
    return {bound};
}

}  // namespace conform::oracle
