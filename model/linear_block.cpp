// Short causal convolution, lower-bounded and softplus decays (model/linear_block.hpp).
#include "model/linear_block.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "impls/cpu/attention.hpp"
#include "model/layout.hpp"
#include "oracle/attention_bound.hpp"
#include "oracle/bound.hpp"
#include "oracle/decay.hpp"

namespace conform::model {
namespace {

constexpr double kLbU64 = 0x1p-53, kLbEta64 = 0x1p-1074;
constexpr double kLbU = 0x1p-24, kLbEta = 0x1p-149;  // FP32
// The executor's FP32 exp (glibc expf, < 1 ulp): declared 2 ulps (4u), as
// the attention kernels declare theirs (oracle/attention_bound.hpp).
constexpr double kLbExp = 4 * kLbU;

struct ConvShape {
    std::int64_t T, F, K;
};

ConvShape conv_shape(const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& w) {
    if (x.size() != 2 || w.size() != 2 || w[0] != x[1] || w[1] < 1)
        throw std::invalid_argument("short_conv: expects x [T, F] and weight [F, K]");
    return {x[0], x[1], w[1]};
}

// The source row of tap j of output row t; -1 - r for cache row r (K - 1
// rows: r = K - 1 + s for s < 0); kNoRow past the end or before a missing cache.
constexpr std::int64_t kNoRow = -(std::int64_t{1} << 62);
std::int64_t tap_row(const ConvShape& c, std::int64_t t, std::int64_t j, bool same, bool cached) {
    const std::int64_t s = t - (same ? (c.K - 1) / 2 : c.K - 1) + j;
    if (s >= c.T) return kNoRow;
    if (s >= 0) return s;
    if (!cached || c.K - 1 + s < 0) return kNoRow;
    return -1 - (c.K - 1 + s);
}

// Visits every (output element, tap value, weight) of the convolution.
template <class XAt, class CacheAt, class Visit>
void each_tap(const ConvShape& c, bool same, bool cached, const XAt& x_at, const CacheAt& cache_at, Visit visit) {
    for (std::int64_t t = 0; t < c.T; ++t)
        for (std::int64_t f = 0; f < c.F; ++f)
            for (std::int64_t j = 0; j < c.K; ++j) {
                const std::int64_t r = tap_row(c, t, j, same, cached);
                if (r == kNoRow) continue;
                visit(t * c.F + f, f * c.K + j, r >= 0 ? x_at(r * c.F + f) : cache_at((-1 - r) * c.F + f));
            }
}

std::int64_t decay_head(std::int64_t i, std::int64_t width, std::int64_t heads) {
    return (i % width) / (width / heads);
}

}  // namespace

std::optional<ConvTap> conv_tap(std::int64_t T, std::int64_t F, std::int64_t K, std::int64_t t, std::int64_t f,
                                std::int64_t j, bool same, bool cached) {
    const std::int64_t r = tap_row({T, F, K}, t, j, same, cached);
    if (r == kNoRow) return std::nullopt;
    return r >= 0 ? ConvTap{false, r * F + f} : ConvTap{true, (-1 - r) * F + f};
}

Values eval_short_conv(const ShortConv& s) {
    const ConvShape c = conv_shape(s.x.shape, s.w.shape);
    Values y{{c.T, c.F}, std::vector<double>(static_cast<std::size_t>(c.T * c.F), 0.0)};
    const auto x_at = [&](std::int64_t i) { return s.x.v[static_cast<std::size_t>(i)]; };
    const auto cache_at = [&](std::int64_t i) { return s.cache->v[static_cast<std::size_t>(i)]; };
    each_tap(c, s.same, s.cache != nullptr, x_at, cache_at, [&](std::int64_t o, std::int64_t wi, double v) {
        y.v[static_cast<std::size_t>(o)] += s.w.v[static_cast<std::size_t>(wi)] * v;
    });
    return y;
}

Tensor run_short_conv(const TensorView& x, const TensorView* cache, const TensorView& w, bool same, Format out) {
    const ConvShape c = conv_shape(shape_of(x), shape_of(w));
    std::vector<float> acc(static_cast<std::size_t>(c.T * c.F), 0.0f);
    const auto x_at = [&](std::int64_t i) { return static_cast<float>(x.value(i)); };
    const auto cache_at = [&](std::int64_t i) { return static_cast<float>(cache->value(i)); };
    each_tap(c, same, cache != nullptr, x_at, cache_at, [&](std::int64_t o, std::int64_t wi, float v) {
        acc[static_cast<std::size_t>(o)] += static_cast<float>(w.value(wi)) * v;  // taps in order
    });
    Tensor y(out, {c.T, c.F});
    for (std::int64_t i = 0; i < y.numel(); ++i) y.set_value(i, acc[static_cast<std::size_t>(i)]);
    return y;
}

StepBound short_conv_bound(const ShortConv& s, const Values& ref, Format in, Format out) {
    const ConvShape c = conv_shape(s.x.shape, s.w.shape);
    AbsProducts p;
    p.a.assign(static_cast<std::size_t>(c.T * c.F), 0.0);
    p.terms = c.K;
    const auto x_at = [&](std::int64_t i) { return s.x.v[static_cast<std::size_t>(i)]; };
    const auto cache_at = [&](std::int64_t i) { return s.cache->v[static_cast<std::size_t>(i)]; };
    each_tap(c, s.same, s.cache != nullptr, x_at, cache_at, [&](std::int64_t o, std::int64_t wi, double v) {
        p.a[static_cast<std::size_t>(o)] += std::fabs(s.w.v[static_cast<std::size_t>(wi)] * v);
    });
    for (double& a : p.a) a *= 1 + oracle::gamma(static_cast<double>(c.K), kLbU64);  // the double sum of |w x|
    return {matmul_budget(p, ref.v, MatmulModel{in, Format::fp32, out}), matmul_oracle_bound(p)};
}

Values eval_bounded_decay(const BoundedDecay& d) {
    const std::int64_t width = d.z.shape.back(), heads = d.a.numel();
    Values g{d.z.shape, std::vector<double>(d.z.v.size())};
    for (std::size_t i = 0; i < g.v.size(); ++i) {
        const double a = std::exp(d.a.v[static_cast<std::size_t>(decay_head(static_cast<std::int64_t>(i), width, heads))]);
        g.v[i] = d.g_min * oracle::sigmoid_double(a * d.z.v[i]);
    }
    return g;
}

Tensor run_bounded_decay(const TensorView& z, const TensorView& a, double g_min, Format out) {
    const std::int64_t width = z.shape[z.rank - 1], heads = a.numel();
    if (width % heads != 0) throw std::invalid_argument("bounded_decay: width is not a multiple of the heads");
    Tensor g(out, shape_of(z));
    const float gm = static_cast<float>(g_min);  // exact: validate() requires it
    for (std::int64_t i = 0; i < z.numel(); ++i) {
        const float e = std::exp(static_cast<float>(a.value(decay_head(i, width, heads))));
        g.set_value(i, gm * cpu::sigmoid32(e * static_cast<float>(z.value(i))));
    }
    return g;
}

// docs/diverge.md, "Lower-bounded decay": y = e^A z; the kernel's y within
// Delta = |y| ((1 + e_exp)(1 + u) - 1) + eta/2; sigma' = S (1 - S) changes
// by at most e^Delta on each factor over that interval, so sigma moves by
// D <= S (1 - S) e^(2 Delta) Delta; its own evaluation (exp, add, divide)
// is within theta = (1 + e_exp)^2 (1 + u)^2 - 1 relative plus eta; the
// product by g_min rounds once (u) and the output once more.
StepBound bounded_decay_bound(const BoundedDecay& d, const Values& ref, Format out) {
    const std::int64_t width = d.z.shape.back(), heads = d.a.numel();
    const double theta = (1 + kLbExp) * (1 + kLbExp) * (1 + kLbU) * (1 + kLbU) - 1, gm = std::fabs(d.g_min);
    const bool rounds = info(out).precision < info(Format::fp32).precision;
    StepBound b{std::vector<double>(ref.v.size()), std::vector<double>(ref.v.size())};
    for (std::size_t i = 0; i < ref.v.size(); ++i) {
        const double y = std::exp(d.a.v[static_cast<std::size_t>(decay_head(static_cast<std::int64_t>(i), width, heads))]) * d.z.v[i];
        if (!std::isfinite(y) || !std::isfinite(ref.v[i])) continue;  // special values: judged by class (bound 0)
        const double delta = std::fabs(y) * ((1 + kLbExp) * (1 + kLbU) - 1) + kLbEta / 2;
        const double S = oracle::sigmoid_double(y), D = S * (1 - S) * std::exp(2 * delta) * delta;
        const double s_err = D + (S + D) * theta + kLbEta;
        const double pre = gm * s_err + kLbU * gm * (S + s_err);
        b.budget[i] = pre + (rounds ? 0.5 * ulp_at(out, std::fabs(ref.v[i]) + pre) : 0.0);
        // The FP64 tier: the same steps with u = 2^-53 and glibc's exp (< 1 ulp).
        b.oracle[i] = 16 * kLbU64 * (std::fabs(ref.v[i]) + gm * S * (1 - S) * std::fabs(y)) + kLbEta64;
    }
    return b;
}

namespace {

double head_value(const Values& v, std::size_t i, std::int64_t width) {
    return v.v[static_cast<std::size_t>(decay_head(static_cast<std::int64_t>(i), width, v.numel()))];
}

}  // namespace

Values eval_softplus_decay(const SoftplusDecay& d) {
    const std::int64_t width = d.z.shape.back();
    Values g{d.z.shape, std::vector<double>(d.z.v.size())};
    for (std::size_t i = 0; i < g.v.size(); ++i)
        g.v[i] = oracle::softplus_log_decay(d.z.v[i] + head_value(d.b, i, width), head_value(d.a, i, width));
    return g;
}

Tensor run_softplus_decay(const TensorView& z, const TensorView& a, const TensorView& b, Format out) {
    const std::int64_t width = z.shape[z.rank - 1], heads = a.numel();
    if (width % heads != 0 || b.numel() != heads)
        throw std::invalid_argument("softplus_decay: width is not a multiple of the heads, or A and b differ in size");
    Tensor g(out, shape_of(z));
    for (std::int64_t i = 0; i < z.numel(); ++i) {
        const std::int64_t h = decay_head(i, width, heads);
        const float y = static_cast<float>(z.value(i)) + static_cast<float>(b.value(h));
        const float sp = std::max(y, 0.0f) + std::log1p(std::exp(-std::fabs(y)));
        g.set_value(i, -(std::exp(static_cast<float>(a.value(h))) * sp));
    }
    return g;
}

// docs/diverge.md, "softplus_decay": y = z + b rounds once in FP32 (u), which
// moves softplus by at most D = sigma(y + |y| u) |y| u (its slope is sigma
// <= 1, increasing); the FP32 softplus is within theta = 1.5 e_exp + e_log +
// u of softplus(y^) relative -- max(y, 0) + log1p(e^-|y|) and PyTorch's
// log1p(e^y) (the 1.5: e_exp E / (1 + E) over softplus >= log 2 when y > 0)
// alike, and its threshold x > 20 returns x within e^-20 / 20 relative --;
// e^A within e_exp, the product one u, the store into `out` half an ulp.
StepBound softplus_decay_bound(const SoftplusDecay& d, const Values& ref, Format out) {
    const std::int64_t width = d.z.shape.back();
    const double theta = 1.5 * kLbExp + kLbExp + kLbU, prod = (1 + kLbExp) * (1 + theta) * (1 + kLbU) - 1;
    const bool rounds = info(out).precision < info(Format::fp32).precision;
    StepBound bd{std::vector<double>(ref.v.size()), std::vector<double>(ref.v.size())};
    for (std::size_t i = 0; i < ref.v.size(); ++i) {
        const double y = d.z.v[i] + head_value(d.b, i, width), ea = std::exp(head_value(d.a, i, width));
        if (!std::isfinite(y) || !std::isfinite(ea) || !std::isfinite(ref.v[i])) continue;  // judged by class
        const double sp = oracle::softplus(y), D = oracle::sigmoid_double(y + std::fabs(y) * kLbU) * std::fabs(y) * kLbU;
        // 4 eta: e^-|y| and log1p underflowing; 2 eta (sp + D)(1 + theta)(1 + u): e^A subnormal in FP32
        // (A < -87.3, an absolute error of an ulp, eta, for a 1-ulp exp).
        const double sub = ea < 0x1p-126 ? 2 * kLbEta * (sp + D) * (1 + theta) * (1 + kLbU) : 0.0;
        const double pre = ea * (D + (sp + D) * prod + 4 * kLbEta) + sub + kLbEta;
        bd.budget[i] = pre + (rounds ? 0.5 * ulp_at(out, std::fabs(ref.v[i]) + pre) : 0.0);
        // The FP64 tier: the same steps with u = 2^-53 and glibc's exp and log1p (< 1 ulp).
        bd.oracle[i] = 16 * kLbU64 * (std::fabs(ref.v[i]) + ea * oracle::sigmoid_double(y) * std::fabs(y)) +
                       4 * ea * kLbEta64 + kLbEta64;  // e^y subnormal in double (y < -708), times e^A
    }
    return bd;
}

}  // namespace conform::model
