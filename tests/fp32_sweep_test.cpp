// Dense fp32 sweeps of the cpu.simd fp32 activation and gated kernels
// (docs/activation.md §4, docs/gated.md §4): millions of inputs over the
// whole float range against a long double reference, max <= 1 ulp and the
// oracle's special-value classes.  The MPFR oracle is too slow for millions
// of points; it still decides every non-finite input and result.
//
// Why long double is a trusted reference here: x87 extended precision has a
// 64-bit significand and glibc's long double expl/erfcl/tanhl/log1pl are
// accurate to a few ulps of it (2^-61 relative), so each formula below, a
// handful of such steps in cancellation-free forms, carries a relative error
// below ~2^-55 (the worst is gelu_tanh and gelu_erf deep in the negative
// tail, where the argument of exp / erfc is up to ~110 and its 2^-64
// relative rounding becomes ~2^-57 in the result).  The test does not trust
// any single rounding of it: the correctly rounded value is known to lie
// between RN(y (1 - 2^-50)) and RN(y (1 + 2^-50)), and the kernel must be
// within 1 ulp of *both* (where they differ, the point is counted as
// ambiguous; it is essentially never).
//
// Default: every 1021st bit pattern (4.2 M inputs per unary op, all
// binades and specials) and a ~2000 x 1000 (gate, up) grid per gated op and
// parameter set, a few seconds each.  CONFORM_FP32_SWEEP_STEP=1 sweeps every fp32 input of
// the unary ops (minutes per op; opt-in, like the 2^32 16-bit gated sweeps).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "impls/registry.hpp"
#include "numerics/format.hpp"
#include "numerics/tensor.hpp"
#include "numerics/ulp.hpp"
#include "oracle/eval.hpp"

namespace fp32_sweep_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

using LD = long double;

// ---- the long double reference, in the oracle's cancellation-free forms ----

LD sigmoid_ld(LD x) { return 1 / (1 + std::exp(-x)); }
LD silu_ld(LD x) { return x / (1 + std::exp(-x)); }
LD gelu_erf_ld(LD x) { return x / 2 * std::erfc(-x * 0.707106781186547524400844362104849039L); }
LD gelu_tanh_ld(LD x) {
    const LD z = 0.797884560802865355879892119868763737L * (x + 0.044715L * x * x * x);
    return x / (1 + std::exp(-2 * z));
}
LD softplus_ld(LD x) { return std::max(x, LD{0}) + std::log1p(std::exp(-std::fabs(x))); }
LD softcap_ld(LD x, LD beta) { return beta * std::tanh(x / beta); }

// ---- one sweep ---------------------------------------------------------

struct Worst {
    std::uint64_t max_ulp = 0, off_by_one = 0, ambiguous = 0, points = 0;
    std::string where;
    bool where_ambiguous = true;
};

float as_float(std::uint32_t b) { return std::bit_cast<float>(b); }

// The kernel's output bits against the reference y (finite inputs, finite y).
void judge(std::uint64_t got, LD y, const std::string& at, Worst& w) {
    const LD eta = std::ldexp(LD{1}, -50);
    const float a = static_cast<float>(y - std::fabs(y) * eta), b = static_cast<float>(y + std::fabs(y) * eta);
    const std::uint64_t ra = std::bit_cast<std::uint32_t>(a), rb = std::bit_cast<std::uint32_t>(b);
    std::uint64_t worst = 0;
    for (std::uint64_t r : {ra, rb}) {
        const UlpCompare c = compare_bits(Format::fp32, r, got);
        const std::uint64_t u = c.class_match ? (c.ref_class == ValueClass::finite ? c.ulps : 0) : ~std::uint64_t{0};
        worst = std::max(worst, u);
    }
    ++w.points;
    const bool ambiguous = a != b;  // as values: -0 and +0 (an underflowed y) agree
    if (ambiguous) ++w.ambiguous;
    else if (worst == 1) ++w.off_by_one;  // not the correctly rounded value (known exactly here)
    // Report the worst case, preferring one whose correct rounding is known.
    if (worst > w.max_ulp || (worst == w.max_ulp && !ambiguous && w.where_ambiguous)) {
        w.max_ulp = worst;
        w.where_ambiguous = ambiguous;
        w.where = at + " -> kernel " + hexfloat(decode(Format::fp32, got)) + ", reference " +
                  hexfloat(static_cast<double>(y));
    }
}

// The kernel on `in` (one tensor per input), output bits.
std::vector<std::uint32_t> run(const std::string& kernel, const Params& p, const std::vector<Tensor>& in) {
    const KernelInfo& k = *builtin_registry().find(kernel);
    Tensor out(Format::fp32, in[0].shape());
    KernelCall call{p, {}, {out.view()}};
    for (const Tensor& t : in) call.in.push_back(t.view());
    k.fn(call);
    std::vector<std::uint32_t> bits(static_cast<std::size_t>(out.numel()));
    std::memcpy(bits.data(), out.data(), bits.size() * 4);
    return bits;
}

Tensor fp32_tensor(const std::vector<std::uint32_t>& bits) {
    Tensor t(Format::fp32, {1, static_cast<std::int64_t>(bits.size())});
    std::memcpy(t.data(), bits.data(), bits.size() * 4);
    return t;
}

// Infinite inputs (and any non-finite reference): the oracle's correctly
// rounded class and value.  A NaN input must give NaN (the documented policy)
// and is checked directly.
void judge_specials(const std::string& op, const Params& p, const std::vector<std::vector<std::uint32_t>>& in,
                    const std::vector<std::uint32_t>& got, Worst& w, std::string& mismatch) {
    auto where = [&](std::size_t i) {
        std::string at = op + "(";
        for (const auto& b : in) at += hexfloat(as_float(b[i])) + " ";
        return at + ") = " + hexfloat(as_float(got[i]));
    };
    std::vector<std::vector<std::uint32_t>> rest(in.size());
    std::vector<std::uint32_t> rest_got;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const bool nan_in = std::any_of(in.begin(), in.end(), [&](const auto& b) { return std::isnan(as_float(b[i])); });
        if (!nan_in) {
            for (std::size_t k = 0; k < in.size(); ++k) rest[k].push_back(in[k][i]);
            rest_got.push_back(got[i]);
        } else if (++w.points; !std::isnan(as_float(got[i]))) {
            mismatch += where(i) + ", NaN expected\n";
        }
    }
    if (rest_got.empty()) return;
    std::vector<Tensor> tensors;
    std::vector<TensorView> views;
    for (const auto& b : rest) tensors.push_back(fp32_tensor(b));
    for (const auto& t : tensors) views.push_back(t.view());
    const auto ref = oracle::evaluate(*find_op(op), p, views, Format::fp32);
    for (std::size_t i = 0; i < rest_got.size(); ++i) {
        const auto r = ref.rounded.bits(static_cast<std::int64_t>(i));
        const UlpCompare c = compare_bits(Format::fp32, r, rest_got[i]);
        ++w.points;
        if (!c.class_match || (c.ref_class == ValueClass::finite && c.ulps > 1)) {
            std::string at = op + "(";
            for (const auto& b : rest) at += hexfloat(as_float(b[i])) + " ";
            mismatch += at + ") = " + hexfloat(as_float(rest_got[i])) + ", oracle " + hexfloat(decode(Format::fp32, r)) + "\n";
        }
    }
}

// One line per sweep (the docs quote them), then the verdict: <= 1 ulp
// everywhere, special values as the oracle says.
void report(const std::string& what, const Worst& w, const std::string& mismatch) {
    std::printf("%-18s fp32: %llu points, max %llu ulp, %llu not correctly rounded, %llu undecided (reference at a "
                "midpoint); worst %s\n",
                what.c_str(), static_cast<unsigned long long>(w.points), static_cast<unsigned long long>(w.max_ulp),
                static_cast<unsigned long long>(w.off_by_one), static_cast<unsigned long long>(w.ambiguous),
                w.where.c_str());
    EXPECT_LE(w.max_ulp, 1u) << w.where;
    EXPECT_EQ(mismatch, "");
}

std::uint64_t sweep_step() {
    const char* s = std::getenv("CONFORM_FP32_SWEEP_STEP");
    return s ? std::max<std::uint64_t>(1, std::strtoull(s, nullptr, 10)) : 1021;
}

// A finite reference beyond fp32's range is fine: its RN is +-inf, as the kernel's must be.
bool finite_ld(LD v) { return std::isfinite(v); }

// Every step-th fp32 pattern (in chunks of 2^22 to bound memory); with
// `magnitudes`, every step-th magnitude in [lo, hi] (bit patterns) with
// both signs instead, and no special values.
struct Magnitudes {
    std::uint32_t lo, hi;
};
void sweep_unary(const std::string& op, const Params& p, const std::function<LD(LD)>& ref,
                 std::optional<Magnitudes> magnitudes = std::nullopt, std::uint64_t step = sweep_step()) {
    Worst w;
    std::string mismatch;
    std::vector<std::uint32_t> xs;
    auto flush = [&] {
        const auto got = run("cpu.simd." + op + ".fp32", p, {fp32_tensor(xs)});
        std::vector<std::uint32_t> sx, sg;
        for (std::size_t i = 0; i < xs.size(); ++i) {
            const float x = as_float(xs[i]);
            const LD y = std::isfinite(x) ? ref(x) : LD{0};
            if (!std::isfinite(x) || !finite_ld(y)) {
                sx.push_back(xs[i]);
                sg.push_back(got[i]);
            } else {
                judge(got[i], y, op + "(" + hexfloat(x) + ")", w);
            }
        }
        judge_specials(op, p, {sx}, sg, w, mismatch);
        xs.clear();
    };
    const auto add = [&](std::uint32_t b) {
        xs.push_back(b);
        if (xs.size() == (std::size_t{1} << 22)) flush();
    };
    if (magnitudes) {
        for (std::uint32_t sign : {0u, 0x80000000u})
            for (std::uint64_t b = magnitudes->lo; b <= magnitudes->hi; b += step) add(sign | static_cast<std::uint32_t>(b));
    } else {
        for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += step) add(static_cast<std::uint32_t>(b));
        for (std::uint32_t s : {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x80000000u, 0x7F7FFFFFu, 0xFF7FFFFFu, 1u})
            xs.push_back(s);
    }
    flush();
    report(op + (magnitudes ? " range" : " sweep"), w, mismatch);
}

// Every 127th float of a table kernel's range |x| < top (both signs;
// CONFORM_FP32_SWEEP_STEP=1: every one), for the 16-lane table kernels of
// AVX-512 machines (docs/activation.md §4).
void sweep_table_range(const std::string& op, const std::function<LD(LD)>& ref, float top) {
    const char* s = std::getenv("CONFORM_FP32_SWEEP_STEP");
    sweep_unary(op, Params(), ref, Magnitudes{0, std::bit_cast<std::uint32_t>(top) - 1}, s ? sweep_step() : 127);
}

// A (gate, up) grid of finite values: gates at every (2^22 + 1)-th pattern
// plus a dense run of [-24, 24] (where the activation bends), ups at every
// (2^22 + 3)-th pattern -- 2 M pairs over all magnitudes and both signs --
// and each special value (+-inf, NaN, +-0) against 64 values of the other input.
// `gates`, if given, replaces the gates (the specials stay).
void sweep_gated(const std::string& op, const Params& p, const std::function<LD(LD, LD)>& ref,
                 std::vector<std::uint32_t> gates = {}, const std::string& what = " grid") {
    auto finite_patterns = [](std::uint64_t step) {
        std::vector<std::uint32_t> v;
        for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += step)
            if (std::isfinite(as_float(static_cast<std::uint32_t>(b)))) v.push_back(static_cast<std::uint32_t>(b));
        return v;
    };
    const std::vector<std::uint32_t> ups = finite_patterns((1u << 22) + 3);
    if (gates.empty()) {
        gates = finite_patterns((1u << 22) + 1);
        for (float v = -24; v <= 24; v += 48.0f / 1024) gates.push_back(std::bit_cast<std::uint32_t>(v * 1.0001f));
    }
    std::vector<std::uint32_t> gv, uv;
    for (std::uint32_t g : gates)
        for (std::uint32_t u : ups) gv.push_back(g), uv.push_back(u);
    for (std::uint32_t s : {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x80000000u, 0u})
        for (std::size_t i = 0; i < 64; ++i) {
            gv.push_back(s), uv.push_back(ups[i * ups.size() / 64]);
            gv.push_back(gates[i * gates.size() / 64]), uv.push_back(s);
            gv.push_back(s), uv.push_back(0x7F800000u ^ static_cast<std::uint32_t>(i % 2) << 31);
        }
    Worst w;
    std::string mismatch;
    const auto got = run("cpu.simd." + op + ".fp32", p, {fp32_tensor(gv), fp32_tensor(uv)});
    std::vector<std::uint32_t> sg, su, sgot;
    for (std::size_t i = 0; i < gv.size(); ++i) {
        const float g = as_float(gv[i]), u = as_float(uv[i]);
        const LD y = std::isfinite(g) && std::isfinite(u) ? ref(g, u) : LD{0};
        if (!std::isfinite(g) || !std::isfinite(u) || !finite_ld(y)) {
            sg.push_back(gv[i]), su.push_back(uv[i]), sgot.push_back(got[i]);
        } else {
            judge(got[i], y, op + "(" + hexfloat(g) + ", " + hexfloat(u) + ")", w);
        }
    }
    judge_specials(op, p, {sg, su}, sgot, w, mismatch);
    report(op + what, w, mismatch);
}

}  // namespace

TEST(Fp32Sweep, Sigmoid) { sweep_unary("sigmoid", Params(), sigmoid_ld); }
TEST(Fp32Sweep, Silu) { sweep_unary("silu", Params(), silu_ld); }
TEST(Fp32Sweep, GeluErf) { sweep_unary("gelu_erf", Params(), gelu_erf_ld); }
// The ranges of the 16-lane table kernels (sweep_table_range): 17 M points
// each; CONFORM_FP32_SWEEP_STEP=1 takes every float there (2.2 * 10^9).
TEST(Fp32Sweep, GeluErfTableRange) { sweep_table_range("gelu_erf", gelu_erf_ld, 3.9f); }
TEST(Fp32Sweep, GeluTanh) { sweep_unary("gelu_tanh", Params(), gelu_tanh_ld); }
TEST(Fp32Sweep, GeluTanhTableRange) { sweep_table_range("gelu_tanh", gelu_tanh_ld, 3.9f); }
TEST(Fp32Sweep, SigmoidTableRange) { sweep_table_range("sigmoid", sigmoid_ld, 7.875f); }
TEST(Fp32Sweep, SiluTableRange) { sweep_table_range("silu", silu_ld, 7.875f); }
TEST(Fp32Sweep, SoftplusTableRange) { sweep_table_range("softplus", softplus_ld, 7.875f); }
TEST(Fp32Sweep, Softplus) { sweep_unary("softplus", Params(), softplus_ld); }
TEST(Fp32Sweep, Softcap) {
    for (double beta : {30.0, 0x1p-20, 0x1p40})
        sweep_unary("softcap", Params({{"beta", beta}}), [beta](LD x) { return softcap_ld(x, beta); });
}

TEST(Fp32Sweep, Swiglu) { sweep_gated("swiglu", Params(), [](LD g, LD u) { return silu_ld(g) * u; }); }
TEST(Fp32Sweep, Geglu) { sweep_gated("geglu", Params(), [](LD g, LD u) { return gelu_erf_ld(g) * u; }); }
// The gates of the 16-lane table kernel (AVX-512 machines: |g| < 3.9,
// docs/gated.md §4): 4000 gate magnitudes spread over [0, 3.9), both
// signs, against the grid's ups (every magnitude: products below 2^-100
// and past FLT_MAX among them), 8 M pairs.
// n magnitudes spread over the bit patterns below `top`, each with both signs.
std::vector<std::uint32_t> spread_gates(float top, std::uint32_t n) {
    std::vector<std::uint32_t> gates;
    const std::uint32_t t = std::bit_cast<std::uint32_t>(top);
    for (std::uint32_t i = 0; i < n; ++i)
        for (std::uint32_t sign : {0u, 0x80000000u}) gates.push_back(sign | static_cast<std::uint32_t>(std::uint64_t{t} * i / n + i % 7));
    return gates;
}
TEST(Fp32Sweep, GegluTableRange) {
    sweep_gated("geglu", Params(), [](LD g, LD u) { return gelu_erf_ld(g) * u; }, spread_gates(3.9f, 4000), " range");
}
TEST(Fp32Sweep, SituGlu) {
    for (auto [b1, b2] : {std::pair{4.0, 25.0}, std::pair{1.0, 3.0}, std::pair{0x1p40, 0x1p40}})
        sweep_gated("situ_glu", Params({{"beta1", b1}, {"beta2", b2}}), [b1, b2](LD g, LD u) {
            return softcap_ld(g, b1) * sigmoid_ld(g) * softcap_ld(u, b2);
        });
}
// The gates of the 16-lane table kernel at the default caps (AVX-512
// machines: -4.125 <= g < 3.875, |u| < 8.75; docs/gated.md §4) against the
// grid's ups, 8 M pairs.
TEST(Fp32Sweep, SituGluTableRange) {
    std::vector<std::uint32_t> gates = spread_gates(4.125f, 4000);
    std::erase_if(gates, [](std::uint32_t b) { return !(as_float(b) < 3.875f); });
    sweep_gated("situ_glu", Params(), [](LD g, LD u) { return softcap_ld(g, 4) * sigmoid_ld(g) * softcap_ld(u, 25); },
                gates, " range");
}
TEST(Fp32Sweep, SwigluClamp) {
    for (double limit : {10.0, 7.0, 0.1})  // 0.1 is not a float: the double path throughout
        sweep_gated("swiglu_clamp", Params({{"limit", limit}}), [limit](LD g, LD u) {
            const LD l = limit;
            return silu_ld(std::min(g, l)) * std::clamp(u, -l, l);
        });
}

}  // namespace fp32_sweep_test
