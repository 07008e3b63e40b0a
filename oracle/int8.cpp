#include "oracle/int8.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "oracle/bound.hpp"    // gamma
#include "oracle/softmax.hpp"  // ln

namespace conform::oracle {
namespace {

// Enough bits that every product and difference below is exact: x and s have
// at most 53-bit significands, k + 1/2 at most 9 bits, and they are compared
// only where |x| < 127.5 s (so their exponents are close).
constexpr unsigned kExactBits = 256;

void require_size(const char* what, std::size_t got, std::int64_t want) {
    if (static_cast<std::int64_t>(got) != want)
        throw std::invalid_argument(std::string("int8: ") + what + " has " + std::to_string(got) + " values, expected " +
                                    std::to_string(want));
}

}  // namespace

std::int64_t scale_count(QuantAxis axis, std::int64_t rows, std::int64_t cols) {
    return axis == QuantAxis::tensor ? 1 : axis == QuantAxis::token ? rows : cols;
}

std::int64_t scale_index(QuantAxis axis, std::int64_t i, std::int64_t j) {
    return axis == QuantAxis::tensor ? 0 : axis == QuantAxis::token ? i : j;
}

std::vector<double> quant_scales(const std::vector<double>& x, std::int64_t rows, std::int64_t cols, QuantAxis axis) {
    require_size("x", x.size(), rows * cols);
    std::vector<double> amax(static_cast<std::size_t>(scale_count(axis, rows, cols)), 0.0);
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
            double& a = amax[static_cast<std::size_t>(scale_index(axis, i, j))];
            const double v = x[static_cast<std::size_t>(i * cols + j)];
            a = std::isfinite(v) && !std::isnan(a) ? std::max(a, std::fabs(v)) : NAN;
        }
    PrecisionScope scope(kExactBits);
    for (double& a : amax) {
        if (std::isnan(a) || a == 0) continue;
        const Real s = from_double(a) / kInt8Max;
        a = decode(Format::fp32, round_to_format(s.backend().data(), Format::fp32));
    }
    return amax;
}

std::int8_t quantize_value(double x, double s) {
    if (!std::isfinite(x) || !(s > 0) || !std::isfinite(s)) return 0;
    PrecisionScope scope(kExactBits);
    const Real rx = from_double(x), rs = from_double(s);
    const Real limit = Real(kInt8Max + 0.5) * rs;  // |x| beyond (127 + 1/2) s saturates
    if (rx >= limit) return kInt8Max;
    if (rx <= -limit) return -kInt8Max;
    // k = floor(x / s), then corrected so that 0 <= r = x - k s < s exactly.
    Real k = floor(rx / rs), r = rx - k * rs;
    while (r < 0) k -= 1, r += rs;
    while (r >= rs) k += 1, r -= rs;
    const Real twice = 2 * r;  // compare r with s / 2: ties go to the even neighbour
    const bool up = twice > rs || (twice == rs && static_cast<long>(to_double(k)) % 2 != 0);
    const long q = static_cast<long>(to_double(k)) + (up ? 1 : 0);
    return static_cast<std::int8_t>(std::clamp(q, -static_cast<long>(kInt8Max), static_cast<long>(kInt8Max)));
}

std::vector<std::int8_t> quantize(const std::vector<double>& x, std::int64_t rows, std::int64_t cols, QuantAxis axis,
                                  const std::vector<double>& scales) {
    require_size("x", x.size(), rows * cols);
    require_size("scales", scales.size(), scale_count(axis, rows, cols));
    std::vector<std::int8_t> q(x.size());
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
            const double s = scales[static_cast<std::size_t>(scale_index(axis, i, j))];
            q[static_cast<std::size_t>(i * cols + j)] = quantize_value(x[static_cast<std::size_t>(i * cols + j)], s);
        }
    return q;
}

std::vector<double> dequantize(const std::vector<std::int8_t>& q, std::int64_t rows, std::int64_t cols, QuantAxis axis,
                               const std::vector<double>& scales) {
    require_size("q", q.size(), rows * cols);
    require_size("scales", scales.size(), scale_count(axis, rows, cols));
    std::vector<double> y(q.size());
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
            y[static_cast<std::size_t>(i * cols + j)] =
                q[static_cast<std::size_t>(i * cols + j)] * scales[static_cast<std::size_t>(scale_index(axis, i, j))];
    return y;
}

std::vector<std::int64_t> int8_matmul(const std::vector<std::int8_t>& a, const std::vector<std::int8_t>& b,
                                      std::int64_t m, std::int64_t k, std::int64_t n) {
    require_size("A", a.size(), m * k);
    require_size("B", b.size(), k * n);
    std::vector<std::int64_t> c(static_cast<std::size_t>(m * n), 0);
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t p = 0; p < k; ++p) {
            const std::int64_t av = a[static_cast<std::size_t>(i * k + p)];
            for (std::int64_t j = 0; j < n; ++j) c[static_cast<std::size_t>(i * n + j)] += av * b[static_cast<std::size_t>(p * n + j)];
        }
    return c;
}

std::vector<Real> int8_dequant_outer(const std::vector<std::int64_t>& acc, std::int64_t m, std::int64_t n,
                                     const std::vector<double>& sa, const std::vector<double>& sb) {
    require_size("acc", acc.size(), m * n);
    if (sa.size() != 1) require_size("sa", sa.size(), m);
    if (sb.size() != 1) require_size("sb", sb.size(), n);
    std::vector<Real> y(acc.size());
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j)
            y[static_cast<std::size_t>(i * n + j)] = Real(acc[static_cast<std::size_t>(i * n + j)]) *
                                                     from_double(sa[sa.size() == 1 ? 0 : static_cast<std::size_t>(i)]) *
                                                     from_double(sb[sb.size() == 1 ? 0 : static_cast<std::size_t>(j)]);
    return y;
}

namespace {

// max |v| over `count` values `stride` apart; NaN when one is NaN or infinite.
double amax_strided(const double* v, std::int64_t count, std::int64_t stride) {
    double a = 0;
    for (std::int64_t i = 0; i < count; ++i) {
        const double e = v[i * stride];
        if (!std::isfinite(e)) return NAN;
        a = std::max(a, std::fabs(e));
    }
    return a;
}

// s_j from the channel maxima (the conventions of smooth_scales).
Real smooth_scale(double ax, double aw, const Real& alpha) {
    if (std::isnan(ax) || std::isnan(aw)) return Real(NAN);
    if (ax == 0 || aw == 0) return Real(1);
    return exp(alpha * ln(from_double(ax)) - (1 - alpha) * ln(from_double(aw)));
}

// The codes of an int8 input (any format holding integers in [-128, 127]).
std::vector<std::int8_t> int8_codes(const std::string& op, const TensorView& t, const char* name) {
    std::vector<std::int8_t> v(static_cast<std::size_t>(t.numel()));
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        const double c = t.value(i);
        if (c != std::floor(c) || c < -128 || c > 127)
            throw std::invalid_argument(op + ": input '" + name + "' holds a non-int8 value " + std::to_string(c));
        v[static_cast<std::size_t>(i)] = static_cast<std::int8_t>(c);
    }
    return v;
}

}  // namespace

std::vector<Real> smooth_scales(const std::vector<double>& x, std::int64_t t, std::int64_t c,
                                const std::vector<double>& w, std::int64_t n, const Real& alpha) {
    require_size("X", x.size(), t * c);
    require_size("W", w.size(), c * n);
    std::vector<Real> s(static_cast<std::size_t>(c));
    for (std::int64_t j = 0; j < c; ++j)
        s[static_cast<std::size_t>(j)] = smooth_scale(amax_strided(x.data() + j, t, c), amax_strided(w.data() + j * n, n, 1), alpha);
    return s;
}

std::vector<double> column_amax(const TensorView& x) {
    const std::vector<double> v = decoded_values(x);
    std::vector<double> a(static_cast<std::size_t>(x.cols()));
    for (std::int64_t j = 0; j < x.cols(); ++j) a[static_cast<std::size_t>(j)] = amax_strided(v.data() + j, x.rows(), x.cols());
    return a;
}

std::vector<double> row_amax(const TensorView& w) {
    const std::vector<double> v = decoded_values(w);
    std::vector<double> a(static_cast<std::size_t>(w.rows()));
    for (std::int64_t j = 0; j < w.rows(); ++j) a[static_cast<std::size_t>(j)] = amax_strided(v.data() + j * w.cols(), w.cols(), 1);
    return a;
}

Smoothed smooth(const std::vector<double>& x, std::int64_t t, std::int64_t c, const std::vector<double>& w,
                std::int64_t n, const std::vector<Real>& s) {
    require_size("s", s.size(), c);
    Smoothed out{std::vector<Real>(x.size()), std::vector<Real>(w.size())};
    for (std::int64_t i = 0; i < t; ++i)
        for (std::int64_t j = 0; j < c; ++j)
            out.x[static_cast<std::size_t>(i * c + j)] = from_double(x[static_cast<std::size_t>(i * c + j)]) / s[static_cast<std::size_t>(j)];
    for (std::int64_t j = 0; j < c; ++j)
        for (std::int64_t k = 0; k < n; ++k)
            out.w[static_cast<std::size_t>(j * n + k)] = from_double(w[static_cast<std::size_t>(j * n + k)]) * s[static_cast<std::size_t>(j)];
    return out;
}

QuantAxis quant_axis(const Params& params) {
    const double a = params.get("axis", 0.0);
    if (a != 0 && a != 1 && a != 2)
        throw std::invalid_argument("quantize: parameter 'axis' must be 0 (tensor), 1 (token) or 2 (channel), is " +
                                    std::to_string(a));
    return static_cast<QuantAxis>(static_cast<int>(a));
}

double static_scale(const Params& params) {
    const double s = params.get("scale", 0.0);
    if (!(s >= 0) || !std::isfinite(s))
        throw std::invalid_argument("quantize: parameter 'scale' must be finite and >= 0, is " + std::to_string(s));
    return decode(Format::fp32, encode(Format::fp32, s));
}

double smooth_alpha(const Params& params) {
    const double a = params.get("alpha", 0.5);
    if (!(a >= 0 && a <= 1)) throw std::invalid_argument("smooth_quant: parameter 'alpha' must be in [0, 1], is " + std::to_string(a));
    return a;
}

OpOutputs eval_quantize(const Params& params, const std::vector<TensorView>& in) {
    if (in.size() != 1) throw std::invalid_argument("quantize: expects one input (x)");
    require_rank("quantize", "x", in[0], 2);
    const std::int64_t rows = in[0].shape[0], cols = in[0].shape[1];
    const QuantAxis axis = quant_axis(params);
    std::vector<double> x(static_cast<std::size_t>(rows * cols));
    for (std::int64_t i = 0; i < rows * cols; ++i) x[static_cast<std::size_t>(i)] = in[0].value(i);
    const double fixed = static_scale(params);
    const std::vector<double> scales = fixed > 0 ? std::vector<double>(static_cast<std::size_t>(scale_count(axis, rows, cols)), fixed)
                                                 : quant_scales(x, rows, cols, axis);
    const auto q = quantize(x, rows, cols, axis, scales);
    OpOutputs out{{"q", "scale"}, {{rows, cols}, {rows, cols}}, {{}, {}}};
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
            out.values[0].push_back(Real(static_cast<int>(q[static_cast<std::size_t>(i * cols + j)])));
            out.values[1].push_back(from_double(scales[static_cast<std::size_t>(scale_index(axis, i, j))]));
        }
    return out;
}

OpOutputs eval_int8_gemm(const Params&, const std::vector<TensorView>& in) {
    const std::string op = "int8_gemm";
    if (in.size() != 4) throw std::invalid_argument(op + ": expects a, b, scale_a, scale_b");
    require_rank(op, "a", in[0], 2);
    require_rank(op, "b", in[1], 2);
    const std::int64_t m = in[0].shape[0], k = in[0].shape[1], n = in[1].shape[1];
    require_dim(op, "b", in[1], 0, k, "K of a");
    require_rank(op, "scale_a", in[2], 1);
    require_rank(op, "scale_b", in[3], 1);
    if (in[2].shape[0] != 1) require_dim(op, "scale_a", in[2], 0, m, "M of a, or 1");
    if (in[3].shape[0] != 1) require_dim(op, "scale_b", in[3], 0, n, "N of b, or 1");
    const auto acc = int8_matmul(int8_codes(op, in[0], "a"), int8_codes(op, in[1], "b"), m, k, n);
    OpOutputs out{{"acc", "y"}, {{m, n}, {m, n}}, {{}, int8_dequant_outer(acc, m, n, decoded_values(in[2]), decoded_values(in[3]))}};
    for (std::int64_t v : acc) out.values[0].push_back(Real(v));
    return out;
}

OpOutputs eval_dequantize(const Params& params, const std::vector<TensorView>& in) {
    const std::string op = "dequantize";
    if (in.size() != 2) throw std::invalid_argument(op + ": expects q and scale");
    require_rank(op, "q", in[0], 2);
    require_rank(op, "scale", in[1], 1);
    const std::int64_t rows = in[0].shape[0], cols = in[0].shape[1];
    const QuantAxis axis = quant_axis(params);
    require_dim(op, "scale", in[1], 0, scale_count(axis, rows, cols), "the group count of axis");
    const auto q = int8_codes(op, in[0], "q");
    OpOutputs out{{"y"}, {{rows, cols}}, {{}}};
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
            out.values[0].push_back(Real(static_cast<int>(q[static_cast<std::size_t>(i * cols + j)])) *
                                    from_double(in[1].value(scale_index(axis, i, j))));
    return out;
}

OpOutputs eval_smooth_quant(const Params& params, const std::vector<TensorView>& in) {
    const std::string op = "smooth_quant";
    if (in.size() != 2) throw std::invalid_argument(op + ": expects x and w");
    require_rank(op, "x", in[0], 2);
    require_rank(op, "w", in[1], 2);
    const std::int64_t t = in[0].shape[0], c = in[0].shape[1], n = in[1].shape[1];
    require_dim(op, "w", in[1], 0, c, "C of x");
    const Real alpha = from_double(smooth_alpha(params));
    const std::vector<double> ax = column_amax(in[0]), aw = row_amax(in[1]);
    OpOutputs out{{"xs", "ws", "s"}, {{t, c}, {c, n}, {c}}, {{}, {}, {}}};
    for (std::int64_t j = 0; j < c; ++j)
        out.values[2].push_back(smooth_scale(ax[static_cast<std::size_t>(j)], aw[static_cast<std::size_t>(j)], alpha));
    const std::vector<Real>& s = out.values[2];
    for (std::int64_t i = 0; i < t * c; ++i) out.values[0].push_back(from_double(in[0].value(i)) / s[static_cast<std::size_t>(i % c)]);
    for (std::int64_t i = 0; i < c * n; ++i) out.values[1].push_back(from_double(in[1].value(i)) * s[static_cast<std::size_t>(i / n)]);
    return out;
}

std::vector<std::vector<double>> quantize_bound(const Params&, const std::vector<TensorView>& in,
                                                const std::vector<std::vector<double>>&, Format,
                                                const std::vector<Format>&) {
    const auto n = static_cast<std::size_t>(in.at(0).numel());
    return {std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
}

std::vector<std::vector<double>> int8_gemm_bound(const Params&, const std::vector<TensorView>&,
                                                 const std::vector<std::vector<double>>& exact, Format acc,
                                                 const std::vector<Format>& out) {
    const double u = unit_roundoff(acc), rel = (1 + u) * (1 + u) * (1 + u) - 1, eta = 0.5 * ulp_at(acc, 0.0);
    const bool narrower = info(out.at(1)).precision < info(acc).precision;
    std::vector<double> y(exact.at(1).size());
    for (std::size_t i = 0; i < y.size(); ++i) {
        const double v = std::fabs(exact[1][i]);
        y[i] = v * rel + 2 * eta + (narrower ? 0.5 * ulp_at(out[1], v * (1 + rel) + 2 * eta) : 0.0);
    }
    return {std::vector<double>(exact.at(0).size(), 0.0), y};
}

std::vector<std::vector<double>> dequantize_bound(const Params&, const std::vector<TensorView>& in,
                                                  const std::vector<std::vector<double>>& exact, Format acc,
                                                  const std::vector<Format>& out) {
    constexpr int kProductBits = 7 + 24;  // |q| <= 128 = 2^7, an FP32 scale
    const bool exact_product = info(acc).precision >= kProductBits;
    const double u = unit_roundoff(acc), rel = exact_product ? 0.0 : (1 + u) * (1 + u) - 1, eta = 0.5 * ulp_at(acc, 0.0);
    std::vector<double> b(exact.at(0).size());
    for (std::size_t i = 0; i < b.size(); ++i) {
        const double y = std::fabs(exact[0][i]);
        if (exact_product) {
            b[i] = 0.5 * ulp_at(out.at(0), y);
            continue;
        }
        b[i] = y * rel + (std::fabs(in[0].value(static_cast<std::int64_t>(i))) + 1) * eta;
    }
    return {b};
}

double smooth_scale_rel_error(double ax, double aw, double alpha, double u) {
    if (!(ax > 0) || !(aw > 0)) return 0;  // s = 1 by convention: exact
    const double e_libm = 2 * kLibmUlps * u;
    // t = alpha ln ax - (1 - alpha) ln aw: each term through log, 1 - alpha,
    // the product and the difference: (1 + e_libm)(1 + u)^3 <= 1 + gamma_8.
    const double a = gamma(8, u) * (alpha * std::fabs(std::log(ax)) + (1 - alpha) * std::fabs(std::log(aw)));
    return (1 + std::expm1(a)) * (1 + e_libm) - 1;  // exp(t^) = exp(t) e^(t^ - t), then exp's own error
}

std::vector<std::vector<double>> smooth_quant_bound(const Params& p, const std::vector<TensorView>& in,
                                                    const std::vector<std::vector<double>>& exact, Format acc,
                                                    const std::vector<Format>& out) {
    const double u = unit_roundoff(acc), eta = 0.5 * ulp_at(acc, 0.0), alpha = smooth_alpha(p);
    const std::vector<double> ax = column_amax(in.at(0)), aw = row_amax(in.at(1));
    const std::int64_t c = in[0].cols(), n = in[1].cols();
    std::vector<double> ds(ax.size());
    for (std::size_t j = 0; j < ds.size(); ++j) ds[j] = smooth_scale_rel_error(ax[j], aw[j], alpha, u);
    // One rounding of a value v known to rel and abs into format f.
    auto rounded = [](Format f, double v, double rel, double abs) { return v * rel + abs + 0.5 * ulp_at(f, v * (1 + rel) + abs); };
    std::vector<std::vector<double>> b(3);
    for (std::size_t i = 0; i < exact.at(0).size(); ++i) {  // xs = x * fl(1 / s^): two roundings over 1 + delta_s
        const double d = ds[i % static_cast<std::size_t>(c)];
        b[0].push_back(rounded(out.at(0), std::fabs(exact[0][i]), (1 + u) * (1 + u) / (1 - d) - 1, 2 * eta));
    }
    for (std::size_t i = 0; i < exact.at(1).size(); ++i) {  // ws = w * s^: one rounding
        const double d = ds[i / static_cast<std::size_t>(n)];
        b[1].push_back(rounded(out.at(1), std::fabs(exact[1][i]), (1 + d) * (1 + u) - 1, eta));
    }
    for (std::size_t j = 0; j < exact.at(2).size(); ++j) b[2].push_back(rounded(out.at(2), std::fabs(exact[2][j]), ds[j], 0));
    return b;
}

}  // namespace conform::oracle
