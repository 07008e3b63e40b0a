// hc_residual and mhc_residual: the property suite over every registered
// kernel and mutant, a hand-worked update, the special-value table, and the
// identity path through 1000 layers of each kernel's own updates
// (docs/hc_residual.md).
#include "kernel_suite.hpp"

#include <cmath>
#include <cstdio>
#include <random>

#include "oracle/bound.hpp"
#include "oracle/hc_residual.hpp"
#include "oracle/sinkhorn_bound.hpp"
#include "test_tensors.hpp"

namespace hc_residual_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

CONFORM_FAMILY_SUITES(HcResidual, "hc_residual");

namespace {

std::vector<const KernelInfo*> gated(const char* op) { return builtin_registry().select(op, Role::kernel); }

// Inputs of one call: x [T, n, d], f [T, d], a [T, n], b [T, n, n], c [T, n].
struct Inputs {
    std::vector<Tensor> t;
    std::vector<TensorView> views() const {
        std::vector<TensorView> v;
        for (const auto& e : t) v.push_back(e.view());
        return v;
    }
};

Inputs inputs(Format fmt, std::int64_t T, std::int64_t n, std::int64_t d, const std::vector<double>& x,
              const std::vector<double>& f, const std::vector<double>& a, const std::vector<double>& b,
              const std::vector<double>& c) {
    using conform::testing::tensor;
    return {{tensor({T, n, d}, x, fmt), tensor({T, d}, f, fmt), tensor({T, n}, a, fmt), tensor({T, n, n}, b, fmt),
             tensor({T, n}, c, fmt)}};
}

// v repeated `times` times, element by element: one channel value over d channels.
std::vector<double> spread(const std::vector<double>& v, int times) {
    std::vector<double> out;
    for (double e : v)
        for (int k = 0; k < times; ++k) out.push_back(e);
    return out;
}

}  // namespace

// A = sigma(0) = (1/2, 1/2), C = 2 sigma(0) = (1, 1), B = [1 2; 3 4], X = (1, 3),
// f = 4: h = A X = 2, x_next = B X + C f = (1 + 6 + 4, 3 + 12 + 4) = (11, 19);
// every step is exact, so every kernel must return exactly this (over nine
// channels: one SIMD register and a scalar tail).
TEST(HcResidualKernels, HandWorkedUpdate) {
    for (const KernelInfo* k : gated("hc_residual")) {
        const Inputs in = inputs(k->in, 1, 2, 9, spread({1, 3}, 9), spread({4}, 9), {0, 0}, {1, 2, 3, 4}, {0, 0});
        const auto out = run_kernel(*k, Params(), in.views());
        for (int e = 0; e < 9; ++e) {
            EXPECT_EQ(out[0].value(e), 2) << k->name;
            EXPECT_EQ(out[1].value(e), 11) << k->name;
            EXPECT_EQ(out[1].value(9 + e), 19) << k->name;
        }
    }
    // mHC with b_logits 0 on the diagonal and -inf elsewhere: B = I exactly,
    // so x_next = X + C f = (5, 7).
    const double ninf = -INFINITY;
    for (const KernelInfo* k : gated("mhc_residual")) {
        const Inputs in = inputs(k->in, 1, 2, 9, spread({1, 3}, 9), spread({4}, 9), {0, 0}, {0, ninf, ninf, 0}, {0, 0});
        const auto out = run_kernel(*k, Params(), in.views());
        for (int e = 0; e < 9; ++e) {
            EXPECT_EQ(out[1].value(e), 5) << k->name;
            EXPECT_EQ(out[1].value(9 + e), 7) << k->name;
        }
        EXPECT_EQ(out[2].value(0), 1) << k->name;
        EXPECT_EQ(out[2].value(1), 0) << k->name;
    }
}

// The special-value table (docs/hc_residual.md): token 0 has a NaN pre-mixing
// logit (h NaN, x_next finite); token 1 a NaN post-mixing logit of stream 1
// (that stream NaN, the other finite, h finite); token 2 gates at +-inf
// (sigma = 1 and 0 exactly); token 3 (mHC) a NaN mixing logit (every
// x_next NaN, h finite) or (HC) an inf in B's row 0 (stream 0 inf).
TEST(HcResidualKernels, SpecialValueTable) {
    const double nan = NAN, inf = INFINITY;
    for (const char* op : {"hc_residual", "mhc_residual"}) {
        const bool mhc = std::string(op) == "mhc_residual";
        for (const KernelInfo* k : gated(op)) {
            const std::int64_t T = 4, n = 2, d = 9;
            std::vector<double> b = {0.5, 0.5, 0.25, 0.75, 0.5, 0.5, 0.25, 0.75, 0.5, 0.5, 0.25, 0.75,
                                     mhc ? nan : inf, 0.5, 0.25, 0.75};
            const Inputs in = inputs(k->in, T, n, d, std::vector<double>(T * n * d, 1.0), std::vector<double>(T * d, 2.0),
                                     {nan, 0, 0, 0, inf, -inf, 0, 0}, b, {0, 0, 0, nan, -inf, inf, 0, 0});
            const auto out = run_kernel(*k, Params(), in.views());
            auto h = [&](std::int64_t t, std::int64_t e) { return out[0].value(t * d + e); };
            auto y = [&](std::int64_t t, std::int64_t i, std::int64_t e) { return out[1].value((t * n + i) * d + e); };
            for (std::int64_t e = 0; e < d; ++e) {
                EXPECT_TRUE(std::isnan(h(0, e))) << k->name;
                EXPECT_TRUE(std::isfinite(y(0, 0, e)) && std::isfinite(y(0, 1, e))) << k->name;
                EXPECT_TRUE(std::isfinite(y(1, 0, e)) && std::isnan(y(1, 1, e))) << k->name;
                EXPECT_TRUE(std::isfinite(h(1, e))) << k->name;
                EXPECT_EQ(h(2, e), 1) << k->name << ": sigma(+inf) x_0 + sigma(-inf) x_1";
                // Rows of B sum to 1 (exactly for HC's B; within the projection's
                // residual and rounding for mHC's).
                const double tol = mhc ? 8 * unit_roundoff(k->out) : 0.0;
                EXPECT_NEAR(y(2, 0, e), 1, tol) << k->name << ": C_0 = 2 sigma(-inf) = 0";
                EXPECT_NEAR(y(2, 1, e), 1 + 4, 5 * tol) << k->name << ": C_1 = 2 sigma(+inf) = 2";
                EXPECT_TRUE(std::isfinite(h(3, e))) << k->name;
                if (mhc) {
                    EXPECT_TRUE(std::isnan(y(3, 0, e)) && std::isnan(y(3, 1, e))) << k->name;
                }
                else EXPECT_TRUE(std::isinf(y(3, 0, e)) && std::isfinite(y(3, 1, e))) << k->name;
            }
        }
    }
}

namespace {

// The l1 norm over streams of every channel of x [1, n, d], the largest.
double max_l1(const Tensor& x) {
    const std::int64_t n = x.shape()[1], d = x.shape()[2];
    double worst = 0;
    for (std::int64_t e = 0; e < d; ++e) {
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += std::fabs(x.value(i * d + e));
        worst = std::max(worst, s);
    }
    return worst;
}

// The identity path through `depth` layers of kernel k's own updates (f = 0,
// so x_{l+1} = B_l x_l), B_l from `entry`, from unit vectors x_0 = e_j:
// returns max_j sum_i |(B_L ... B_1)_ij|, the l1 norm of the product (1 for
// doubly stochastic layers; n pi_max > 1 for row-stochastic ones, whose
// product tends to 1 pi^T).
template <class Entry>
double depth_gain(const KernelInfo& k, int depth, Entry entry, std::uint64_t seed) {
    constexpr std::int64_t n = 4, d = 9;
    std::mt19937_64 g(seed);
    std::normal_distribution<double> N;
    std::vector<double> x0(n * d), b(n * n);
    for (std::int64_t i = 0; i < n; ++i)  // channel e holds the unit vector of stream e mod n: the gains are
        for (std::int64_t e = 0; e < d; ++e) x0[static_cast<std::size_t>(i * d + e)] = i == e % n;  // column sums
    Inputs in = inputs(k.in, 1, n, d, x0, std::vector<double>(d, 0.0), std::vector<double>(n, 0.0), b,
                       std::vector<double>(n, 0.0));
    const double start = max_l1(in.t[0]);
    for (int l = 0; l < depth; ++l) {
        for (std::int64_t e = 0; e < n * n; ++e) in.t[3].set_value(e, entry(e / n, e % n, N(g)));
        in.t[0] = run_kernel(k, Params(), in.views())[1];
    }
    return max_l1(in.t[0]) / start;
}

}  // namespace

// mHC's identity path through 1000 layers of each kernel's own updates stays
// within the product of the per-layer l1 limits (1 + column bound)(1 +
// gamma_n)(1 + u_out) of streams_l1_nonexpansive, while free HC layers near
// the identity (B = I + 0.1 N(0, 1)) amplify; the row-stochastic mutant's
// path leaves the limit.
TEST(HcResidualKernels, DepthNeverAmplifiesUnderMhcUnlikeFreeHc) {
    constexpr int kDepth = 1000;
    auto logits = [](std::int64_t, std::int64_t, double z) { return z; };
    for (const KernelInfo* k : gated("mhc_residual")) {
        const double col = oracle::sinkhorn_column_sum_bound(4, k->acc, k->acc);
        const double u_out = info(k->out).precision < info(k->acc).precision ? unit_roundoff(k->out) : 0.0;
        const double limit = std::pow((1 + col) * (1 + oracle::gamma(4, unit_roundoff(k->acc))) * (1 + u_out), kDepth);
        const double gain = depth_gain(*k, kDepth, logits, 7);
        std::printf("%s: l1 gain over %d layers %.9g (limit %.6g)\n", k->name.c_str(), kDepth, gain, limit);
        EXPECT_LE(gain, limit) << k->name;
        EXPECT_GT(gain, 0) << k->name;  // not NaN, not a vanished signal
    }
    auto free_b = [](std::int64_t i, std::int64_t j, double z) { return (i == j ? 1.0 : 0.0) + 0.1 * z; };
    const KernelInfo* hc = builtin_registry().find("cpu.simd.hc_residual.fp32");
    ASSERT_NE(hc, nullptr);
    const double hc_gain = depth_gain(*hc, kDepth, free_b, 7);
    std::printf("free HC: l1 gain over %d layers %.6g\n", kDepth, hc_gain);
    EXPECT_GT(hc_gain, 100);
    const KernelInfo* rows_only = builtin_registry().find("mutant.mhc_residual.rows_only.fp32");
    ASSERT_NE(rows_only, nullptr);
    const double bad = depth_gain(*rows_only, kDepth, logits, 7);
    const double col = oracle::sinkhorn_column_sum_bound(4, Format::fp32, Format::fp32);
    EXPECT_GT(bad, std::pow((1 + col) * (1 + oracle::gamma(4, 0x1p-24)), kDepth)) << "rows_only stays within the limit";
}

// The oracle evaluator against the hand-written update of oracle/hc_residual.hpp
// on the example above, and its shape validation.
TEST(HcResidualOracle, EvaluatorAndValidation) {
    const Inputs in = inputs(Format::fp32, 1, 2, 1, {1, 3}, {4}, {0, 0}, {1, 2, 3, 4}, {0, 0});
    oracle::PrecisionScope scope(128);
    const auto o = oracle::eval_hc_residual(Params(), in.views());
    ASSERT_EQ(o.values.size(), 2u);
    EXPECT_EQ(o.values[0][0], 2);
    EXPECT_EQ(o.values[1][0], 11);
    EXPECT_EQ(o.values[1][1], 19);
    Inputs wrong = in;  // a_logits [1, 3] for n = 2 streams
    wrong.t[2] = conform::testing::tensor({1, 3}, {0, 0, 0}, Format::fp32);
    EXPECT_THROW(oracle::eval_hc_residual(Params(), wrong.views()), std::invalid_argument);
    EXPECT_THROW(oracle::eval_mhc_residual(Params({{"iters", 0}}), in.views()), std::invalid_argument);
}

// mHC with the projection's eps guard (docs/sinkhorn.md, "The eps guard"):
// eps = 0.5 changes x_next and b, every element stays within its derived
// bound, and b's columns sum to S / (S + eps) < 1.
TEST(HcResidualKernels, MhcHonoursTheEpsGuard) {
    std::mt19937_64 g(9);
    std::normal_distribution<double> N;
    constexpr std::int64_t T = 9, n = 4, d = 9;
    auto draw = [&](std::size_t count) {
        std::vector<double> v(count);
        for (double& e : v) e = N(g);
        return v;
    };
    const auto x = draw(T * n * d), f = draw(T * d), a = draw(T * n), b = draw(T * n * n), c = draw(T * n);
    for (const KernelInfo* k : gated("mhc_residual")) {
        const Inputs in = inputs(k->in, T, n, d, x, f, a, b, c);
        const Params guarded({{"eps", 0.5}});
        const auto plain = run_kernel(*k, Params(), in.views()), with = run_kernel(*k, guarded, in.views());
        int differ = 0;
        for (std::int64_t e = 0; e < with[1].numel(); ++e) differ += plain[1].bits(e) != with[1].bits(e);
        EXPECT_GT(differ, T * n * d / 2) << k->name;
        for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t j = 0; j < n; ++j) {
                double s = 0;
                for (std::int64_t i = 0; i < n; ++i) s += with[2].value((t * n + i) * n + j);
                EXPECT_LT(s, 0.99) << k->name;
            }
        const auto r = props::check_case(*k, guarded, in.views());
        EXPECT_TRUE(r.pass) << k->name << ": " << r.message;
    }
}

}  // namespace hc_residual_test
