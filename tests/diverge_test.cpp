// The divergence analysis (docs/diverge.md): the matmul budget against hand
// cases (tight within a known factor; a BF16 accumulation exceeds it), the
// metrics, then whole synthetic models run by the built-in kernels: clean
// stacks pass with a negligible FP64-tier bound, a mutant is found at its
// layer and point, a dump made under another convention is named, and the
// CLI refuses bad dumps with exit status 2 naming the file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/model_dump.hpp"
#include "model/diverge.hpp"
#include "model/diverge_report.hpp"
#include "model/metrics.hpp"
#include "model/step_bound.hpp"

namespace fs = std::filesystem;
using namespace conform;
using namespace conform::model;

namespace {

Values values(std::vector<std::int64_t> shape, std::vector<double> v) { return Values{std::move(shape), std::move(v)}; }

// y = x W^T with every sum accumulated left to right in `acc` (fp32 or a
// narrower format: each partial sum rounded into it), stored into `out`.
std::vector<double> sequential_matmul(const Values& x, const Values& w, Format acc, Format out) {
    const std::int64_t K = x.shape.back(), T = x.numel() / K, N = w.shape[0];
    std::vector<double> y(static_cast<std::size_t>(T * N));
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < N; ++j) {
            float s = 0;
            for (std::int64_t k = 0; k < K; ++k) {
                s = static_cast<float>(s + static_cast<float>(x.v[t * K + k] * w.v[j * K + k]));
                s = static_cast<float>(decode(acc, encode(acc, s)));
            }
            y[static_cast<std::size_t>(t * N + j)] = decode(out, encode(out, s));
        }
    return y;
}

std::vector<double> exact_matmul(const Values& x, const Values& w) {
    const std::int64_t K = x.shape.back(), T = x.numel() / K, N = w.shape[0];
    std::vector<double> y(static_cast<std::size_t>(T * N));
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < N; ++j) {
            long double s = 0;  // the hand cases below are exact in long double
            for (std::int64_t k = 0; k < K; ++k) s += static_cast<long double>(x.v[t * K + k]) * w.v[j * K + k];
            y[static_cast<std::size_t>(t * N + j)] = static_cast<double>(s);
        }
    return y;
}

double max_utilization(const std::vector<double>& got, const std::vector<double>& exact, const std::vector<double>& bound) {
    double m = 0;
    for (std::size_t i = 0; i < got.size(); ++i) m = std::max(m, std::fabs(got[i] - exact[i]) / bound[i]);
    return m;
}

Values random_values(std::vector<std::int64_t> shape, Format f, std::uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<double> n(0, 1);
    Values v{shape, {}};
    std::int64_t count = 1;
    for (auto d : shape) count *= d;
    for (std::int64_t i = 0; i < count; ++i) v.v.push_back(decode(f, encode(f, n(g))));
    return v;
}

}  // namespace

// 1 + 63 terms of 2^-24 (1 + 2^-23): each FP32 add lands just above a
// midpoint and rounds up by almost u, so the error is 63 u (1 - 2^-23) against
// the bound gamma_64(u) (1 + 63 2^-24 ...) ~ 64 u: utilization 63/64 within
// 1e-3.  The bound is tight for this order, not an overestimate by K.
TEST(MatmulBound, TightWithinAKnownFactorOnAnAdversarialSum) {
    const std::int64_t K = 64;
    Values x = values({1, K}, std::vector<double>(K, 1.0));
    Values w = values({1, K}, std::vector<double>(K, std::ldexp(1 + std::ldexp(1, -23), -24)));
    w.v[0] = 1;
    const std::vector<double> got = sequential_matmul(x, w, Format::fp32, Format::fp32), exact = exact_matmul(x, w);
    const std::vector<double> bound = matmul_budget(abs_products(x, w, nullptr), exact, {Format::fp32, Format::fp32, Format::fp32});
    const double util = max_utilization(got, exact, bound);
    EXPECT_LE(util, 1.0);
    EXPECT_NEAR(util, 63.0 / 64.0, 2e-3);
}

// Random bf16 inputs, K = 512: an FP32-accumulating kernel stays inside the
// bound (errors grow like sqrt(K), so far inside); the same sums accumulated
// in BF16 (bug class 6) exceed it.
TEST(MatmulBound, Bf16AccumulationExceedsWhatFp32AccumulationMeets) {
    const Values x = random_values({4, 512}, Format::bf16, 1), w = random_values({16, 512}, Format::bf16, 2);
    const std::vector<double> exact = exact_matmul(x, w);
    const MatmulModel m{Format::bf16, Format::fp32, Format::bf16};
    const std::vector<double> bound = matmul_budget(abs_products(x, w, nullptr), exact, m);
    EXPECT_LE(max_utilization(sequential_matmul(x, w, Format::fp32, Format::bf16), exact, bound), 1.0);
    EXPECT_GT(max_utilization(sequential_matmul(x, w, Format::bf16, Format::bf16), exact, bound), 1.0);
}

// The FP64 tier's own matmul bound is 2^-29 of the FP32 one (before the output rounding).
TEST(MatmulBound, OracleBoundIsFarBelowTheBudget) {
    const Values x = random_values({2, 64}, Format::fp32, 3), w = random_values({8, 64}, Format::fp32, 4);
    const AbsProducts p = abs_products(x, w, nullptr);
    const std::vector<double> exact = exact_matmul(x, w);
    const std::vector<double> b = matmul_budget(p, exact, {Format::fp32, Format::fp32, Format::fp32});
    const std::vector<double> o = matmul_oracle_bound(p);
    for (std::size_t i = 0; i < b.size(); ++i) EXPECT_LT(o[i] / b[i], 1e-8);
}

TEST(UlpWindow, OneUlpAroundOneInBf16) {
    // Up: 1 + 2^-7; down: 1 - 2^-8 (the binade below is finer).
    EXPECT_EQ(ulp_window(Format::bf16, 1.0, 0, 1), std::ldexp(1, -7));
    EXPECT_EQ(ulp_window(Format::bf16, 1.0, 0, 0), 0.0);
    // Half-way between 1 and 1 + 2^-7 rounds to either: half an ulp, then one more.
    EXPECT_EQ(ulp_window(Format::bf16, 1 + std::ldexp(1, -8), 0, 1), std::ldexp(1, -8) + std::ldexp(1, -7));
    EXPECT_EQ(ulp_window(Format::bf16, -1.0, 0, 1), std::ldexp(1, -7));
}

TEST(Metrics, EqualVectors) {
    const ErrorMetrics m = compare({1, -2, 0.5}, {1, -2, 0.5}, {0, 0, 0}, Format::fp32);
    EXPECT_EQ(m.max_ulp, 0);
    EXPECT_EQ(m.utilization, 0);
    EXPECT_EQ(m.cosine, 1);
    EXPECT_TRUE(std::isinf(m.sqnr_db));
    EXPECT_FALSE(exceeds(m));
}

TEST(Metrics, UlpRelativeSqnrUtilizationAndWorst) {
    const double up = 1 + std::ldexp(1, -7);  // one bf16 ulp above 1
    const ErrorMetrics m = compare({1, up, 4}, {1, 1, 4.0 + 1.0 / 16}, {1, 0.005, 0.125}, Format::bf16);
    EXPECT_EQ(m.max_ulp, 2);  // 4 + 1/16 rounds to 4 + 1/16 (bf16 spacing 1/32 at 4): two ulps from 4
    EXPECT_DOUBLE_EQ(m.max_rel, (1.0 / 16) / (4.0 + 1.0 / 16));
    EXPECT_DOUBLE_EQ(m.utilization, std::ldexp(1, -7) / 0.005);
    EXPECT_EQ(m.worst, 1);
    const double ee = std::ldexp(1, -14) + 1.0 / 256, rr = 1 + 1 + (4.0 + 1.0 / 16) * (4.0 + 1.0 / 16);
    EXPECT_NEAR(m.sqnr_db, 10 * std::log10(rr / ee), 1e-9);
    EXPECT_TRUE(exceeds(m));
    EXPECT_LT(m.cosine, 1);
}

TEST(Metrics, SpecialValuesAreClassesFirst) {
    const double inf = INFINITY, nan = NAN;
    EXPECT_TRUE(compare({nan}, {1}, {1}, Format::fp32).class_mismatch);   // NaN the reference lacks
    EXPECT_TRUE(compare({1}, {inf}, {1}, Format::fp32).class_mismatch);   // Inf the candidate lacks
    EXPECT_TRUE(compare({nan}, {nan}, {1}, Format::fp32).class_mismatch); // a NaN reference never passes
    EXPECT_FALSE(compare({inf}, {inf}, {0}, Format::fp32).class_mismatch);
    EXPECT_TRUE(compare({-inf}, {inf}, {1}, Format::fp32).class_mismatch);
    // A finite reference whose rounding overflows fp16 matches the Inf a correct kernel returns.
    EXPECT_FALSE(compare({inf}, {70000}, {1}, Format::fp16).class_mismatch);
    // NaN inherited from the step's inputs: both sides NaN is not a local failure.
    EXPECT_FALSE(compare({nan}, {nan}, {1}, Format::fp32, true).class_mismatch);
    const ErrorMetrics m = compare({1, nan}, {1, 1}, {1, 1}, Format::fp32);
    EXPECT_EQ(m.worst, 1);
    EXPECT_TRUE(exceeds(m));
    EXPECT_TRUE(exceeds(compare({1.5}, {1}, {0}, Format::fp32)));  // a zero allowance demands equality
}
