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

RopeConfig rope_config(const std::string& op, const Params& p, std::int64_t D) {
    RopeConfig c;
    c.pairing = static_cast<RopePairing>(integer_param(op, p, "pairing", 0, 0, 1));
    c.rotary_dim = rotary_dim_of(op, p, D);
    c.base = positive_param(op, p, "base", 10000.0);
    c.ntk_scale = positive_param(op, p, "ntk_scale", 1.0);
    return c;
}

}  // namespace

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

TableError rope_table_error(const RopeTableModel& k, double angle, double abs_log_theta, double c, double s) {
    // θ̂_j: the exponent −2j/r rounds (relative error |ln θ_j| u after pow or
    // exp), pow/exp add <= 2u, ln b (exp form) another |ln θ_j| u; m·θ̂ one u.
    const double angle_err = std::fabs(angle) * (2 * abs_log_theta + 4) * k.angle_unit;
    const double pre = angle_err + k.trig_abs_error;  // |sin' | <= 1: angle error passes through
    return {pre + 0.5 * ulp_at(k.table, std::fabs(c) + pre), pre + 0.5 * ulp_at(k.table, std::fabs(s) + pre)};
}

std::pair<double, double> rope_pair_bound(const RopeTableModel& k, const TableError& e, double xa, double xb, double c,
                                          double s, double ya, double yb) {
    if (!std::isfinite(xa) || !std::isfinite(xb)) return {INFINITY, INFINITY};
    const double u = unit_roundoff(k.arith), g2 = 2 * u / (1 - 2 * u);
    const FormatInfo& fa = info(k.arith);
    const double eta = std::ldexp(1.0, fa.emin - fa.precision + 1);  // underflowing products/sums
    const double ax = std::fabs(xa), bx = std::fabs(xb), ac = std::fabs(c), as = std::fabs(s);
    // y_a = x_a c − x_b s, y_b = x_a s + x_b c with table entries c + Δc, s + Δs.
    const double ta = ax * e.cos + bx * e.sin, tb = ax * e.sin + bx * e.cos;
    const double ra = g2 * (ax * (ac + e.cos) + bx * (as + e.sin)) + 3 * eta;
    const double rb = g2 * (ax * (as + e.sin) + bx * (ac + e.cos)) + 3 * eta;
    double ba = ta + ra, bb = tb + rb;
    if (info(k.out).precision < fa.precision) {  // a second rounding into the storage format
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
    PrecisionScope scope(kDefaultBits);
    const Real b = rope_effective_base<Real>(c);
    const double abs_log_b = std::fabs(std::log(to_double(b)));
    std::vector<double> bound(static_cast<std::size_t>(x.numel()), 0.0);
    const std::vector<double>& y = exact.at(0);
    for (std::int64_t l = 0; l < L; ++l) {
        const double m = offset + static_cast<double>(l);
        for (std::int64_t j = 0; j < c.rotary_dim / 2; ++j) {
            const CosSin<Real> cs = rope_cos_sin(from_double(m), j, c.rotary_dim, b);
            const double cv = to_double(cs.cos), sv = to_double(cs.sin);
            const double log_theta = 2.0 * static_cast<double>(j) / static_cast<double>(c.rotary_dim) * abs_log_b;
            const double angle = m * to_double(rope_inv_freq(j, c.rotary_dim, b));
            const TableError e = rope_table_error(model, angle, log_theta, cv, sv);
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
