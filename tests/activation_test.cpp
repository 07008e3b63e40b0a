// Activation family: oracle closed forms, tails and special values, oracle
// self-consistency at twice the precision, and the property suite over
// every registered activation kernel and mutant.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_suite.hpp"
#include "oracle/activation.hpp"
#include "oracle/eval.hpp"

namespace activation_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;
using oracle::Real;

namespace {
double at(const char* op, double x, Params p = {}) { return oracle::to_double(oracle::eval_scalar(op, p, {x})); }
}  // namespace

TEST(ActivationOracle, ClosedForms) {
    EXPECT_EQ(at("sigmoid", 0), 0.5);
    EXPECT_EQ(at("silu", 0), 0.0);
    EXPECT_DOUBLE_EQ(at("silu", 1), 1 / (1 + std::exp(-1.0)));
    EXPECT_DOUBLE_EQ(at("softplus", 0), std::log(2.0));
    EXPECT_DOUBLE_EQ(at("gelu_erf", 1), 0.5 * std::erfc(-1 / std::sqrt(2.0)));
    EXPECT_DOUBLE_EQ(at("gelu_tanh", 1), 0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * (1 + 0.044715))));
    EXPECT_DOUBLE_EQ(at("softcap", 2, Params({{"beta", 4}})), 4 * std::tanh(0.5));
}

TEST(ActivationOracle, TailsKeepRelativeAccuracy) {
    // Forms without cancellation: relative accuracy deep in the tails.
    EXPECT_NEAR(at("sigmoid", -80) / std::exp(-80.0), 1, 1e-15);
    EXPECT_NEAR(at("softplus", -100) / std::exp(-100.0), 1, 1e-15);
    EXPECT_NEAR(at("softplus", 100) / 100, 1, 1e-15);
    EXPECT_NEAR(at("gelu_erf", -10) / (-5 * std::erfc(10 / std::sqrt(2.0))), 1, 1e-13);
    // 1 + tanh(z) for z ~ -49.7 is ~1.3e-43 relative to 1: the naive form
    // would need 142 bits at 128; the sigmoid form keeps it exact.
    const double x = -10.5, z = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
    EXPECT_NEAR(at("gelu_tanh", x) / (x / (1 + std::exp(-2 * z))), 1, 1e-12);
    EXPECT_NEAR(at("softplus", 1e30), 1e30, 0);  // no overflow through exp(x)
}

TEST(ActivationOracle, SpecialValueTable) {
    EXPECT_EQ(at("sigmoid", INFINITY), 1.0);
    EXPECT_EQ(at("sigmoid", -INFINITY), 0.0);
    EXPECT_TRUE(std::signbit(at("silu", -INFINITY)) && at("silu", -INFINITY) == 0);
    EXPECT_EQ(at("silu", INFINITY), INFINITY);
    EXPECT_TRUE(std::signbit(at("gelu_erf", -INFINITY)));
    EXPECT_EQ(at("gelu_tanh", INFINITY), INFINITY);
    EXPECT_EQ(at("softplus", -INFINITY), 0.0);
    EXPECT_EQ(at("softcap", -INFINITY, Params({{"beta", 30}})), -30.0);
    for (const char* op : {"sigmoid", "silu", "gelu_erf", "gelu_tanh", "softplus", "softcap"})
        EXPECT_TRUE(std::isnan(at(op, NAN))) << op;
}

TEST(ActivationOracle, AgreesWithItselfAtTwiceThePrecision) {
    // The oracle checks itself: 128-bit and 256-bit evaluations agree to far
    // below any kernel budget (here 2^-100 relative) on a spread of inputs.
    for (const char* op : {"sigmoid", "silu", "gelu_erf", "gelu_tanh", "softplus", "softcap"})
        for (double x = -60; x <= 60; x += 0.37) {
            const Real a = oracle::eval_scalar(op, Params({{"beta", 7}}), {x}, 128);
            oracle::PrecisionScope s(256);
            const Real b = oracle::eval_scalar(op, Params({{"beta", 7}}), {x}, 256);
            const Real rel = oracle::abs(a - b) / oracle::abs(b);
            EXPECT_LT(oracle::to_double(rel), std::ldexp(1.0, -100)) << op << " at " << x;
        }
}

TEST(ActivationOracle, CancellationFreeFormsEqualTheLiteralFormulas) {
    // The oracle's forms (x sigmoid(2z), x/2 erfc(-x/sqrt2), x + log1p(e^-x))
    // against the seed's literal formulas evaluated at 2048 bits, where the
    // literal form's cancellation (at most ~150 bits for |x| <= 12) is harmless.
    oracle::PrecisionScope s(2048);
    const Real half("0.5"), c = oracle::sqrt(Real(2) / oracle::pi());
    for (double x = -12; x <= 12; x += 0.173) {
        const Real X = oracle::from_double(x);
        const Real z = c * (X + Real("0.044715") * X * X * X);
        const Real literal_tanh = half * X * (Real(1) + oracle::tanh(z));
        Real erf_x;
        mpfr_erf(erf_x.backend().data(), (X / oracle::sqrt(Real(2))).backend().data(), MPFR_RNDN);
        const Real literal_erf = half * X * (Real(1) + erf_x);
        Real log_1p_ex;
        const Real ex = oracle::exp(X);
        mpfr_log((log_1p_ex).backend().data(), (Real(1) + ex).backend().data(), MPFR_RNDN);
        auto rel = [&](const char* op, const Real& want) {
            const Real got = oracle::eval_scalar(op, Params(), {x}, 256);
            return want == 0 ? oracle::to_double(oracle::abs(got)) : oracle::to_double(oracle::abs(got - want) / oracle::abs(want));
        };
        EXPECT_LT(rel("gelu_tanh", literal_tanh), 1e-70) << x;
        EXPECT_LT(rel("gelu_erf", literal_erf), 1e-70) << x;
        EXPECT_LT(rel("softplus", log_1p_ex), 1e-70) << x;
    }
}

TEST(ActivationOracle, CorrectRoundingNeedsZivOnlyRarely) {
    // All 65536 fp16 inputs of silu: every result rounds correctly and the
    // oracle reports how many needed more than 256 bits.
    Tensor x(Format::fp16, {1, 65536});
    for (int i = 0; i < 65536; ++i) x.set_bits(i, i);
    auto r = oracle::evaluate(*find_op("silu"), Params(), {x.view()}, Format::fp16);
    EXPECT_LT(r.recomputed, 10);
    // Spot check against double evaluation away from midpoints.
    for (int i = 0; i < 65536; i += 97) {
        const double v = x.value(i);
        if (!std::isfinite(v)) continue;
        const double d = v / (1 + std::exp(-v));
        EXPECT_EQ(r.rounded.bits(i), encode(Format::fp16, d)) << hexfloat(v);
    }
}

CONFORM_FAMILY_SUITES(Activation, "activation");

}  // namespace activation_test
