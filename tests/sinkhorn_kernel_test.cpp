// Sinkhorn kernels beyond the property suite: the special-value table on
// fixed matrices, how often generated matrices fall outside the FP32
// exp-domain's bounded domain, and mHC's 1000-layer product of each kernel's
// matrices against its budget (docs/sinkhorn.md; throughput is bench/sinkhorn_bench).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "impls/registry.hpp"
#include "oracle/sinkhorn.hpp"
#include "oracle/sinkhorn_bound.hpp"
#include "oracle/structured.hpp"
#include "properties/generators.hpp"
#include "properties/sinkhorn.hpp"
#include "properties/verdict.hpp"
#include "test_tensors.hpp"

namespace sinkhorn_kernel_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

constexpr double kInf = INFINITY;

std::vector<const KernelInfo*> gated_kernels() { return builtin_registry().select("sinkhorn", Role::kernel); }

}  // namespace

// Matrix 0: a NaN (all NaN); 1: an all -inf row (stays 0, columns still sum
// to 1); 2: rows shifted by +-1e4 (finite; for fp32 logits, where the shift
// is exact, equal to the unshifted matrix up to rounding); 3..8: plain, so that the SIMD kernel's eight lanes hold every
// kind at once.
TEST(SinkhornKernels, SpecialValueTable) {
    std::vector<double> v;
    const std::vector<double> plain = {0.5, -1, 2, 0, 1, 1, -3, 0.25, 0, 0, 0, 0, 2, -2, 1, -1};
    auto add = [&](std::vector<double> m) { v.insert(v.end(), m.begin(), m.end()); };
    add({0, 1, 2, 3, 4, NAN, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
    add({0, 1, 2, 3, -kInf, -kInf, -kInf, -kInf, 1, 0, 1, 0, -1, 2, 0, 1});
    std::vector<double> shifted = plain;
    for (int i = 0; i < 16; ++i) shifted[static_cast<std::size_t>(i)] += (i / 4) % 2 ? 1e4 : -1e4;
    add(shifted);
    for (int k = 3; k < 9; ++k) add(plain);
    for (const KernelInfo* k : gated_kernels()) {
        const Tensor l = conform::testing::tensor({9, 4, 4}, v, k->in);
        const auto b = run_kernel(*k, Params(), {l.view()})[0];
        for (int e = 0; e < 16; ++e) EXPECT_TRUE(std::isnan(b.value(e))) << k->name;
        for (int j = 0; j < 4; ++j) {
            EXPECT_EQ(b.value(16 + 4 + j), 0) << k->name << ": the -inf row";
            double col = 0;
            for (int i = 0; i < 4; ++i) col += b.value(16 + 4 * i + j);
            EXPECT_NEAR(col, 1, 4 * unit_roundoff(k->out)) << k->name;
        }
        for (int e = 0; e < 16; ++e) {
            EXPECT_TRUE(std::isfinite(b.value(32 + e))) << k->name << ": huge logits";
            if (k->in == Format::fp32) {  // +-1e4 + x is exact in fp32 only
                EXPECT_NEAR(b.value(32 + e), b.value(48 + e), 4 * unit_roundoff(k->out)) << k->name;
            }
        }
    }
}

// The share of generated matrices (all patterns, fp32) without a finite
// bound, where only the class is checked.  Wide matrices take the log domain
// (its own bound), so what is left are raw bit patterns with logits of
// 10^28..10^38, whose potentials FP32 resolves only to u |g|: 33 of 2884
// (84 before the log domain).  Kept small so that the derived bound speaks
// for almost every case.
TEST(SinkhornKernels, UnboundedDomainIsRare) {
    std::mt19937_64 g(21);
    int matrices = 0, unbounded = 0;
    for (int c = 0; c < 400; ++c) {
        const auto spec = props::gen_sinkhorn_spec(Format::fp32, {})(rc::Random(g()), 50).value();
        const auto cs = props::build_case(spec);
        const auto ref = oracle::evaluate_structured("sinkhorn", cs.params, cs.views(), {Format::fp32});
        const auto bound = oracle::sinkhorn_bound(cs.params, cs.views(), ref.exact, Format::fp32, {Format::fp32})[0];
        const std::int64_t n = spec.dims[1], nn = n * n;
        for (std::int64_t m = 0; m < spec.dims[0]; ++m) {
            ++matrices;
            for (std::int64_t e = 0; e < nn; ++e)
                if (std::isinf(bound[static_cast<std::size_t>(m * nn + e)])) {
                    ++unbounded;
                    break;
                }
        }
    }
    std::printf("generated matrices without a finite bound: %d of %d\n", unbounded, matrices);
    EXPECT_LT(unbounded * 40, matrices);
}

// mHC's identity path through 1000 layers of each kernel's own matrices stays
// within the product of the per-layer derived bounds, while free HC layers
// amplify exponentially; a row-stochastic-only mutant's product converges to
// 1 pi^T with ||.||_2 = sqrt(n) ||pi||_2 > 1 and leaves the budget.
TEST(SinkhornKernels, DepthProductStaysWithinItsBudgetUnlikeFreeHc) {
    for (const KernelInfo* k : gated_kernels()) {
        const report::Curve c = props::depth_amplification_curve(*k, 5);
        ASSERT_EQ(c.points.size(), 10u) << k->name;
        EXPECT_TRUE(c.passed) << k->name;
        EXPECT_EQ(c.points.back().x, 1000);
        EXPECT_GT(c.points.back().peer, 1e3) << k->name;
        std::printf("%s: ||B_1000...B_1||_2 = %.9g (budget %.9g), free HC %.3g\n", k->name.c_str(),
                    c.points.back().error, c.points.back().budget, c.points.back().peer);
    }
    const KernelInfo* rows_only = builtin_registry().find("mutant.sinkhorn.rows_only.fp32");
    ASSERT_NE(rows_only, nullptr);
    const report::Curve bad = props::depth_amplification_curve(*rows_only, 5);
    EXPECT_FALSE(bad.passed);
    EXPECT_GT(bad.points.back().error, 1.001);
}

// The eps guard: eps = 0 gives the unguarded kernel bit for bit; eps = 0.5
// changes the result, which stays within its derived bound (the verdict of
// every property) and has column sums below 1 + the guarded column bound; the
// kernel that ignores the guard (mutant eps_ignored) is out of bound.
TEST(SinkhornKernels, EpsGuardIsHonoured) {
    std::mt19937_64 g(8);
    std::normal_distribution<double> N;
    std::vector<double> v(9 * 16);
    for (double& x : v) x = N(g);
    for (const KernelInfo* k : gated_kernels()) {
        const Tensor l = conform::testing::tensor({9, 4, 4}, v, k->in);
        const auto plain = run_kernel(*k, Params(), {l.view()})[0];
        const auto zero = run_kernel(*k, Params({{"eps", 0.0}}), {l.view()})[0];
        const Params guarded({{"eps", 0.5}});
        const auto b = run_kernel(*k, guarded, {l.view()})[0];
        int differ = 0;
        for (std::int64_t e = 0; e < plain.numel(); ++e) {
            EXPECT_EQ(plain.bits(e), zero.bits(e)) << k->name;
            differ += plain.bits(e) != b.bits(e);
        }
        EXPECT_GT(differ, 100) << k->name;
        const double col = oracle::sinkhorn_column_sum_bound(4, k->acc, k->out, true);
        for (std::int64_t m = 0; m < 9; ++m)
            for (std::int64_t j = 0; j < 4; ++j) {
                double s = 0;
                for (std::int64_t i = 0; i < 4; ++i) s += b.value(m * 16 + i * 4 + j);
                EXPECT_LE(s, 1 + col) << k->name;
                EXPECT_LT(s, 0.99) << k->name << ": eps = 0.5 leaves visible mass out";
            }
        const auto r = props::check_case(*k, guarded, {l.view()});
        EXPECT_TRUE(r.pass) << k->name << ": " << r.message;
    }
    const KernelInfo* ignored = builtin_registry().find("mutant.sinkhorn.eps_ignored.fp32");
    ASSERT_NE(ignored, nullptr);
    const Tensor l = conform::testing::tensor({9, 4, 4}, v, Format::fp32);
    EXPECT_FALSE(props::check_case(*ignored, Params({{"eps", 0.5}}), {l.view()}).pass);
}

// An eps that FP32 cannot hold (rounds to 0 or overflows) is refused by the
// kernels and by the oracle alike: the kernel guards in FP32, so such an eps
// would be "guarded" in the bound and unguarded in the kernel.
TEST(SinkhornKernels, EpsThatFp32CannotHoldIsAnError) {
    const Tensor l = conform::testing::tensor({1, 4, 4}, std::vector<double>(16, 0.25), Format::fp32);
    for (double eps : {1e-300, 1e300}) {
        const Params p({{"eps", eps}});
        for (const KernelInfo* k : gated_kernels()) {
            const Tensor lk = conform::testing::tensor({1, 4, 4}, std::vector<double>(16, 0.25), k->in);
            EXPECT_THROW(run_kernel(*k, p, {lk.view()}), std::invalid_argument) << k->name << " eps " << eps;
        }
        EXPECT_THROW(oracle::sinkhorn_eps(p), std::invalid_argument) << eps;
    }
    EXPECT_EQ(oracle::sinkhorn_eps(Params({{"eps", 0x1p-149}})), 0x1p-149);
    EXPECT_NO_THROW(run_kernel(*builtin_registry().find("cpu.simd.sinkhorn.fp32"), Params({{"eps", 0x1p-149}}), {l.view()}));
}

// The wide domain (docs/sinkhorn.md, "The wide domain"): column 0 lies 200
// below every row maximum, so the exp-domain start underflows the whole
// column in FP32 (e^-200 < 2^-149) and the iteration would keep it a zero
// column, while the exact B scales it back to sum 1.  The kernels take the
// log domain there: every element gets a finite derived bound and meets it,
// and column 0 sums to 1 (exactly so after the exact final column
// normalization) within the sum of its elements' bounds.
TEST(SinkhornKernels, WideMatricesTakeTheLogDomainWithinAFiniteBound) {
    const std::vector<double> wide = {-200, 0, 1, 2, -201, 1, 0, -1, -199, 2, -2, 0, -200.5, -1, 0.5, 1};
    std::vector<double> v;
    for (int k = 0; k < 9; ++k) v.insert(v.end(), wide.begin(), wide.end());  // every SIMD lane and a tail
    for (const KernelInfo* k : gated_kernels()) {
        const Tensor l = conform::testing::tensor({9, 4, 4}, v, k->in);
        const auto ref = oracle::evaluate_structured("sinkhorn", Params(), {l.view()}, {k->out});
        const auto bound = oracle::sinkhorn_bound(Params(), {l.view()}, ref.exact, k->acc, {k->out})[0];
        for (double b : bound) EXPECT_TRUE(std::isfinite(b)) << k->name;
        const auto b = run_kernel(*k, Params(), {l.view()})[0];
        for (std::int64_t m = 0; m < 9; ++m) {
            double col0 = 0, allowed = 4 * 0x1p-52;
            for (std::int64_t i = 0; i < 4; ++i)
                col0 += b.value(m * 16 + i * 4), allowed += bound[static_cast<std::size_t>(m * 16 + i * 4)];
            EXPECT_NEAR(col0, 1, allowed) << k->name;
            EXPECT_LT(allowed, 1e-3 + 4 * unit_roundoff(k->out)) << k->name << ": a bound that says something";
            if (m == 0) std::printf("%s: column 0 sums to %.9g, allowed 1 +- %.3g\n", k->name.c_str(), col0, allowed);
        }
        const auto r = props::check_case(*k, Params(), {l.view()});
        EXPECT_TRUE(r.pass) << k->name << ": " << r.message;
    }
}

}  // namespace sinkhorn_kernel_test
