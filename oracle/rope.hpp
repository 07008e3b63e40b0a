// Oracle of the positional family (docs/rope.md): the sinusoidal positional
// encoding and rotary embedding (RoPE), with NTK-aware base scaling, partial
// rotary dimensions and a position offset.
//
// Both reduce to cos/sin of an angle m · θ_j, θ_j = b^(−2j/r).  Positions
// reach 2^20 and beyond, so an angle computed at the working precision P would
// lose log2(m) bits to argument reduction; the Real overload of
// rope_cos_sin() therefore computes the angle with enough guard bits that cos
// and sin come back within 2^-P (absolute) of the exact values at every
// position.  The double overloads serve the FP64 tier of the same templates.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "numerics/format.hpp"
#include "oracle/real.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

// Which two dimensions of the rotated block form pair j (0 <= j < r/2).
enum class RopePairing {
    interleaved = 0,  // (2j, 2j+1): GPT-J, the RoFormer paper, seed 001 §3's code
    half_split = 1,   // (j, j + r/2): GPT-NeoX / Llama "rotate_half"
};

inline std::pair<std::int64_t, std::int64_t> rope_pair_dims(RopePairing p, std::int64_t j, std::int64_t r) {
    return p == RopePairing::interleaved ? std::pair{2 * j, 2 * j + 1} : std::pair{j, j + r / 2};
}

template <class R>
struct CosSin {
    R cos, sin;
};

// θ_j = b^(−2j/r): inverse frequency of pair j of an r-dimensional rotated
// block, b the effective base (RoPE: base · ntk_scale; sin-cos PE: base, r = d).
Real rope_inv_freq(std::int64_t j, std::int64_t r, const Real& b);
inline double rope_inv_freq(std::int64_t j, std::int64_t r, double b) {
    return std::pow(b, -2.0 * static_cast<double>(j) / static_cast<double>(r));
}

// cos and sin of m · θ_j.  Real: within 2^-P of the exact values for any
// position (guard bits cover log2|m θ_j| and the error of the exponent);
// non-finite m gives NaN.  double: plain libm, the FP64 tier.
CosSin<Real> rope_cos_sin(const Real& m, std::int64_t j, std::int64_t r, const Real& b);
inline CosSin<double> rope_cos_sin(double m, std::int64_t j, std::int64_t r, double b) {
    const double a = m * rope_inv_freq(j, r, b);
    return {std::cos(a), std::sin(a)};
}

// The 2x2 rotation (3.4): (y0, y1) = (x0 c − x1 s, x0 s + x1 c), in IEEE
// semantics (a NaN or Inf stays inside its pair; Inf · 0 = NaN).
template <class R>
std::pair<R, R> rotate_pair(const R& x0, const R& x1, const CosSin<R>& cs) {
    return {x0 * cs.cos - x1 * cs.sin, x0 * cs.sin + x1 * cs.cos};
}

// Frequency scaling for contexts longer than the trained one (docs/rope.md,
// "Frequency scaling"): θ'_j = θ_j (w_j + (1 − w_j)/s) with the keep weight
// w_j ∈ [0, 1] of pair j, s = factor:
//   none    w = 1
//   linear  w = 0 (position interpolation, m/s)
//   llama3  ρ = L0 θ_j / (2π): w = 1 for ρ > h, 0 for ρ < l, else (ρ − l)/(h − l)
//   yarn    w = 1 − clamp((j − lo)/(hi − lo), 0, 1), [lo, hi] the correction range
// and cos, sin multiplied by attention_factor (YaRN's mscale).
enum class RopeScalingKind { none = 0, linear = 1, llama3 = 2, yarn = 3 };

struct RopeScaling {
    RopeScalingKind kind = RopeScalingKind::none;
    double factor = 1.0;              // s
    double low_freq_factor = 1.0;     // l (llama3)
    double high_freq_factor = 4.0;    // h (llama3), > l
    double original_max_pos = 8192;   // L0 (llama3, yarn)
    double beta_fast = 32, beta_slow = 1;  // yarn's rotation counts
    bool truncate = true;             // yarn: lo, hi rounded out to integers
    double attention_factor = 1.0;    // multiplies cos and sin
};

struct RopeConfig {
    RopePairing pairing = RopePairing::interleaved;
    std::int64_t rotary_dim = 0;  // r: even, 2 <= r <= D; the first r dims rotate
    double base = 10000.0;        // θ of (3.3)
    double ntk_scale = 1.0;       // s of (3.6): effective base b = base · s
    RopeScaling scaling{};
};

// The op's parameters (docs/rope.md, "Validation") for a head dimension D;
// std::invalid_argument naming op and parameter.
RopeConfig rope_config(const std::string& op, const Params& p, std::int64_t D);

// YaRN's correction range [lo, hi] over pair indices, in R:
// lo/hi = r ln(L0 / (2π β)) / (2 ln b) for β = beta_fast / beta_slow, floored
// / ceiled when truncate, clipped to [0, r − 1]; hi += 0.001 when they meet.
template <class R>
std::pair<R, R> rope_yarn_range(std::int64_t r, const R& b, const RopeScaling& sc) {
    using std::ceil;
    using std::floor;
    using std::log;
    const R two_pi = 2 * pi_of<R>(), L0 = R(sc.original_max_pos);
    const auto dim_of = [&](double beta) { return R(static_cast<double>(r)) * log(L0 / (two_pi * R(beta))) / (2 * log(b)); };
    R lo = dim_of(sc.beta_fast), hi = dim_of(sc.beta_slow);
    if (sc.truncate) lo = floor(lo), hi = ceil(hi);
    if (lo < 0) lo = R(0);
    if (hi > R(static_cast<double>(r - 1))) hi = R(static_cast<double>(r - 1));
    if (lo == hi) hi += R(0.001);
    return {lo, hi};
}

// w_j of pair j given its unscaled θ_j (see RopeScaling).
template <class R>
R rope_keep_weight(std::int64_t j, std::int64_t r, const R& theta, const R& b, const RopeScaling& sc) {
    switch (sc.kind) {
    case RopeScalingKind::none: return R(1);
    case RopeScalingKind::linear: return R(0);
    case RopeScalingKind::llama3: {
        const R rho = R(sc.original_max_pos) * theta / (2 * pi_of<R>());
        const R l = R(sc.low_freq_factor), h = R(sc.high_freq_factor);
        if (rho > h) return R(1);
        if (rho < l) return R(0);
        return (rho - l) / (h - l);
    }
    case RopeScalingKind::yarn: {
        const auto [lo, hi] = rope_yarn_range(r, b, sc);
        R ramp = (R(static_cast<double>(j)) - lo) / (hi - lo);
        if (ramp < 0) ramp = R(0);
        if (ramp > 1) ramp = R(1);
        return 1 - ramp;
    }
    }
    return R(1);
}

// θ'_j / θ_j = w_j + (1 − w_j)/s.
template <class R>
R rope_freq_multiplier(std::int64_t j, std::int64_t r, const R& theta, const R& b, const RopeScaling& sc) {
    if (sc.kind == RopeScalingKind::none) return R(1);
    const R w = rope_keep_weight(j, r, theta, b, sc);
    return w + (1 - w) / R(sc.factor);
}

// Effective base of (3.6), b = base · s: exact for Real (a product of two
// doubles has at most 106 significant bits), rounded once for double.
template <class R>
R rope_effective_base(const RopeConfig& c) {
    if constexpr (std::is_same_v<R, Real>) return from_double(c.base) * from_double(c.ntk_scale);
    else return R(c.base) * R(c.ntk_scale);
}

// m θ'_j in double, θ_j given (b = base · ntk_scale rounded once).
inline double rope_scaled_angle(const RopeConfig& c, double m, std::int64_t j, double theta) {
    return m * theta * rope_freq_multiplier(j, c.rotary_dim, theta, c.base * c.ntk_scale, c.scaling);
}

// cos and sin of m θ'_j, the scaled frequency, times attention_factor.
// Real: within 2^-P max(1, af) of the exact values (rope_cos_sin's guard
// bits plus those the scaling's conditioning needs); double: the FP64 tier.
CosSin<Real> rope_scaled_cos_sin(const Real& m, std::int64_t j, const RopeConfig& c);
inline CosSin<double> rope_scaled_cos_sin(double m, std::int64_t j, const RopeConfig& c) {
    const double a = rope_scaled_angle(c, m, j, rope_inv_freq(j, c.rotary_dim, rope_effective_base<double>(c)));
    const double af = c.scaling.attention_factor;
    return {af * std::cos(a), af * std::sin(a)};
}

// One table row: cos/sin of every pair j < r/2 at position m (shared by every
// head and by both pairings).
template <class R>
std::vector<CosSin<R>> rope_table_row(const R& m, const RopeConfig& c) {
    std::vector<CosSin<R>> row;
    row.reserve(static_cast<std::size_t>(c.rotary_dim / 2));
    for (std::int64_t j = 0; j < c.rotary_dim / 2; ++j) row.push_back(rope_scaled_cos_sin(m, j, c));
    return row;
}

// RoPE of one head vector x (length D) given its table row: pairs of the
// first r dims rotate, dims r..D-1 pass through unchanged (bit for bit).
template <class R>
std::vector<R> rope_apply(const std::vector<R>& x, const std::vector<CosSin<R>>& row, const RopeConfig& c) {
    std::vector<R> y = x;
    for (std::int64_t j = 0; j < c.rotary_dim / 2; ++j) {
        const auto [a, b] = rope_pair_dims(c.pairing, j, c.rotary_dim);
        auto [ya, yb] = rotate_pair(x[a], x[b], row[j]);
        y[a] = std::move(ya);
        y[b] = std::move(yb);
    }
    return y;
}

// f(x, m) = R_{Θ,m} x of (3.3) for one head vector at position m.
template <class R>
std::vector<R> rope_vector(const std::vector<R>& x, const R& m, const RopeConfig& c) {
    return rope_apply(x, rope_table_row(m, c), c);
}

// (3.1)-(3.2): PE[pos, 2i] = sin(pos · base^(−2i/d)), PE[pos, 2i+1] = cos(...),
// for an even d.
template <class R>
std::vector<R> sincos_pe_row(const R& pos, std::int64_t d, const R& base) {
    std::vector<R> pe(static_cast<std::size_t>(d));
    for (std::int64_t i = 0; i < d / 2; ++i) {
        auto cs = rope_cos_sin(pos, i, d, base);
        pe[2 * i] = std::move(cs.sin);
        pe[2 * i + 1] = std::move(cs.cos);
    }
    return pe;
}

// ---- error budget (docs/rope.md, "Error budget") ------------------------------

// A RoPE kernel that looks cos/sin up in tables: θ_j and m·θ_j computed with
// unit roundoff angle_unit, cos/sin evaluated with absolute error
// trig_abs_error, stored in `table`, the 2x2 rotation done in `arith`, the
// result stored in `out`.  The defaults are the reference CPU design: double
// angles, FP32 tables, FP32 arithmetic and output.
struct RopeTableModel {
    double angle_unit = 0x1p-53;
    double trig_abs_error = 0x1p-52;  // libm cos/sin: <= 1 ulp of a value <= 1
    Format table = Format::fp32;
    Format arith = Format::fp32;
    Format out = Format::fp32;
    // pow's relative error in units of angle_unit: 2 for a pow within one
    // ulp (glibc); a kernel declaring declared.pow_ulps = n gets 2n (CUDA's
    // double pow: 2 ulp, 4 units).  rope_pow_units reads the declaration.
    double pow_units = 2;
};
double rope_pow_units(const Params& p);

// Bound on |cos^ − cos(mθ_j)| and |sin^ − sin(mθ_j)| of the model's table
// entries, given the exact angle mθ_j and |ln θ_j|, and the exact c, s.
struct TableError {
    double cos, sin;
};
TableError rope_table_error(const RopeTableModel& k, double angle, double abs_log_theta, double c, double s);

// The same for a scaled frequency (RopeScaling): θ̂'_j has relative error at
// most theta_units · k.angle_unit (rope_theta_error_units), the angle one more
// unit; c, s are the exact entries af·cos(m θ'_j), af·sin(m θ'_j), and
// af ≠ 1 adds the product af·cos's rounding (in angle_unit's arithmetic).
TableError rope_scaled_table_error(const RopeTableModel& k, double angle, double theta_units, double c, double s,
                                   double af);

// Relative error of θ̂'_j in units of the arithmetic's unit roundoff, for the
// reference order of operations (docs/rope.md, "Frequency scaling"): θ̂_j =
// 1/b^(2j/r) or pow(b, −2j/r) (2|ln θ_j| + 1 + pow_units units), then the scaling's own
// operations, each rounding once.  theta is the exact θ_j.
double rope_theta_error_units(const RopeConfig& c, std::int64_t j, double theta, double pow_units = 2);

// The table error of pair j of c at the scaled angle (rope_scaled_angle):
// rope_scaled_table_error with θ̂'_j's units and c's attention factor; cv, sv
// the exact entries.
TableError rope_entry_error(const RopeTableModel& k, const RopeConfig& c, std::int64_t j, double theta, double angle,
                            double cv, double sv);

// Per-element bound |ŷ − y| for the pair (x_a, x_b) with exact outputs
// (y_a, y_b), exact c, s and table errors e: the table term, the rotation's
// arithmetic (γ_2 of `arith`), and half an output ulp when `out` is narrower
// than `arith`.  Infinite when an input is not finite (classes are compared
// instead).
std::pair<double, double> rope_pair_bound(const RopeTableModel& k, const TableError& e, double xa, double xb, double c,
                                          double s, double ya, double yb);

// Registry evaluators (oracle/structured.hpp).
//   sincos_pe: input positions [L]; params dim (required, even >= 2),
//              base (10000); output pe [L, dim].
//   rope:      input x [H, L, D]; params pairing (0), base (10000),
//              ntk_scale (1), rotary_dim (0 = D), offset (0; token l sits at
//              position offset + l); output y [H, L, D].
OpOutputs eval_sincos_pe(const Params& params, const std::vector<TensorView>& in);
OpOutputs eval_rope(const Params& params, const std::vector<TensorView>& in);

// Per-element bound of a rope kernel (see oracle/bound.hpp, StructuredBoundFn).
std::vector<std::vector<double>> rope_bound(const Params& params, const std::vector<TensorView>& in,
                                            const std::vector<std::vector<double>>& exact, Format acc,
                                            const std::vector<Format>& out);

}  // namespace conform::oracle
