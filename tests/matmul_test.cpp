// The matrix product (docs/matmul.md): the oracle's exact sum, the bound's
// special entries, the kernels' paths against the scalar chain bit for bit,
// and the property suite over every registered kernel and mutant.
#include <cmath>
#include <random>
#include <string>

#include "impls/cpu/convert.hpp"
#include "impls/cpu/isa.hpp"
#include "impls/cpu/matmul.hpp"
#include "kernel_suite.hpp"
#include "oracle/bound.hpp"
#include "oracle/matmul.hpp"

namespace matmul_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

namespace {

Tensor matrix(Format f, std::int64_t rows, std::int64_t cols, const std::vector<double>& v) {
    Tensor t(f, {rows, cols});
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, v.at(static_cast<std::size_t>(i)));
    return t;
}

Tensor random_matrix(Format f, std::int64_t rows, std::int64_t cols, std::mt19937_64& rng, double tiny_share = 0) {
    std::normal_distribution<double> N;
    std::uniform_real_distribution<double> U;
    Tensor t(f, {rows, cols});
    for (std::int64_t i = 0; i < t.numel(); ++i)
        t.set_value(i, U(rng) < tiny_share ? std::ldexp(N(rng), -130) : N(rng));  // subnormal in fp32 and bf16
    return t;
}

Tensor product(const Tensor& a, const Tensor& b, Format out, cpu::MatmulPath p) {
    Tensor y(out, {a.shape()[0], b.shape()[1]});
    const Params params;
    cpu::matmul_call(KernelCall{params, {a.view(), b.view()}, {y.view()}}, p);
    return y;
}

// y_ij as the FP32 chain acc = fma(a, b, acc) over k ascending, or with
// pairs swapped (1, 0, 3, 2, ...).
Tensor chain(const Tensor& a, const Tensor& b, bool pairs_swapped) {
    const std::int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
    Tensor y(Format::fp32, {m, n});
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            float acc = 0;
            for (std::int64_t p = 0; p < k; ++p) {
                const std::int64_t q = pairs_swapped ? (p % 2 ? p - 1 : (p + 1 < k ? p + 1 : p)) : p;
                acc = std::fma(static_cast<float>(a.value(i * k + q)), static_cast<float>(b.value(q * n + j)), acc);
            }
            y.set_value(i * n + j, acc);
        }
    return y;
}

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
    for (std::int64_t i = 0; i < want.numel(); ++i)
        ASSERT_EQ(got.bits(i), want.bits(i)) << what << ": element " << i << " got " << got.value(i) << ", want " << want.value(i);
}

}  // namespace

TEST(MatmulOracle, ExactSumSurvivesCancellationAtAnyPrecision) {
    // 2^100 + 2^-100 - 2^100: a 128-bit (or 256-bit) running sum returns 0.
    const Tensor a = matrix(Format::fp32, 1, 3, {0x1p100, 0x1p-100, -0x1p100}), b = matrix(Format::fp32, 3, 1, {1, 1, 1});
    const auto r = oracle::evaluate_structured("matmul", Params(), {a.view(), b.view()}, {Format::fp32});
    EXPECT_EQ(r.rounded.at(0).value(0), 0x1p-100);
}

TEST(MatmulOracle, SpecialValuesFollowIeee) {
    // Row 0: 0 * inf = NaN; row 1: inf - inf = NaN; row 2: -inf + finite = -inf; row 3: an empty-looking -0 sum is +0.
    const Tensor a = matrix(Format::fp32, 4, 2, {0, 1, INFINITY, -INFINITY, -INFINITY, 1, -0.0, -0.0});
    const Tensor b = matrix(Format::fp32, 2, 1, {INFINITY, 2});
    const Tensor b2 = matrix(Format::fp32, 2, 1, {1, 1});
    const auto r = oracle::evaluate_structured("matmul", Params(), {a.view(), b.view()}, {Format::fp32});
    EXPECT_TRUE(std::isnan(r.rounded[0].value(0)));
    const auto r2 = oracle::evaluate_structured("matmul", Params(), {a.view(), b2.view()}, {Format::fp32});
    EXPECT_TRUE(std::isnan(r2.rounded[0].value(1)));
    EXPECT_EQ(r2.rounded[0].value(2), -INFINITY);
    EXPECT_EQ(r2.rounded[0].value(3), 0.0);
}

TEST(MatmulBound, UndefinedWhereTheAccumulatorMayOverflowAndNaNWhereTheValueIsNot) {
    // Row 0: 2^127 + 2^127 - 2^127 is finite (2^127) but a left-to-right FP32
    // sum overflows: undefined.  Row 1: ordinary.  Row 2: NaN input: NaN bound.
    const Tensor a = matrix(Format::fp32, 3, 3, {0x1p127, 0x1p127, -0x1p127, 1, 2, 3, NAN, 1, 1});
    const Tensor b = matrix(Format::fp32, 3, 1, {1, 1, 1});
    const auto r = oracle::evaluate_structured("matmul", Params(), {a.view(), b.view()}, {Format::fp32});
    const auto bound = oracle::find_structured_bound("matmul")(Params(), {a.view(), b.view()}, r.exact, Format::fp32, {Format::fp32});
    EXPECT_EQ(bound.at(0).at(0), oracle::kUndefined);
    EXPECT_GT(bound[0][1], 0);
    EXPECT_LT(bound[0][1], 6 * 4 * 0x1p-24);  // gamma_3 * 6 + 3 eta / 2
    EXPECT_TRUE(std::isnan(bound[0][2]));
}

TEST(MatmulKernel, EveryFmaPathIsTheScalarChainBitForBit) {
    std::mt19937_64 rng(7);
    for (const Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const auto& [m, k, n] : {std::tuple{1, 1, 1}, {4, 101, 37}, {3, 64, 16}, {13, 517, 33}, {97, 31, 65}, {5, 1031, 17}}) {
            const Tensor a = random_matrix(f, m, k, rng, 0.05), b = random_matrix(f, k, n, rng, 0.05);
            const Tensor want = chain(a, b, f == Format::bf16);  // BF16: vdpbf16ps's order on every path
            expect_same_bits(product(a, b, Format::fp32, cpu::MatmulPath::scalar), want, "scalar");
            if (cpu::has_avx2()) expect_same_bits(product(a, b, Format::fp32, cpu::MatmulPath::fma256), want, "fma256");
            if (cpu::has_avx512()) expect_same_bits(product(a, b, Format::fp32, cpu::MatmulPath::fma512), want, "fma512");
            // Rounded once into a 16-bit output.
            const Tensor y16 = product(a, b, Format::bf16, cpu::best_matmul_path(Format::fp32));
            for (std::int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(y16.bits(i), encode(Format::bf16, want.value(i)));
        }
}

TEST(MatmulKernel, Dpbf16IsThePairSwappedChainAndFallsBackOnSubnormals) {
    if (!cpu::has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
    std::mt19937_64 rng(11);
    for (const auto& [m, k, n] : {std::tuple{1, 1, 1}, {13, 517, 33}, {97, 31, 65}, {5, 1031, 17}}) {
        const Tensor a = random_matrix(Format::bf16, m, k, rng), b = random_matrix(Format::bf16, k, n, rng);
        ASSERT_TRUE(cpu::dpbf16_exact_range(a.view(), b.view()));
        expect_same_bits(product(a, b, Format::fp32, cpu::MatmulPath::dpbf16), chain(a, b, true), "dpbf16");
        // One subnormal entry: the guard sends the call to the FMA chain.
        const Tensor s = random_matrix(Format::bf16, m, k, rng, 0.01);
        Tensor s1 = s;
        s1.set_value(0, 0x1p-130);
        ASSERT_FALSE(cpu::dpbf16_exact_range(s1.view(), b.view()));
        expect_same_bits(product(s1, b, Format::fp32, cpu::MatmulPath::dpbf16), chain(s1, b, true), "dpbf16 guarded");
    }
}

TEST(MatmulKernel, Dpbf16GuardCountsExponents) {
    const Tensor a = matrix(Format::bf16, 1, 2, {0x1p-56, 3}), b = matrix(Format::bf16, 2, 1, {0x1p-56, 0});
    EXPECT_TRUE(cpu::dpbf16_exact_range(a.view(), b.view()));  // -56 - 56 = -112: products multiples of 2^-126
    const Tensor b2 = matrix(Format::bf16, 2, 1, {0x1p-57, INFINITY});
    EXPECT_FALSE(cpu::dpbf16_exact_range(a.view(), b2.view()));
    const Tensor z = matrix(Format::bf16, 1, 2, {0, NAN});
    EXPECT_TRUE(cpu::dpbf16_exact_range(z.view(), b2.view()));  // no nonzero finite entry in a
    // A subnormal facing an infinity (either side; the other side's only
    // other entries zeros): read as 0 it would make 0 * inf = NaN.
    const Tensor sub = matrix(Format::bf16, 1, 2, {0x1p-130, 0}), inf_zero = matrix(Format::bf16, 2, 1, {-INFINITY, -0.0});
    EXPECT_FALSE(cpu::dpbf16_exact_range(sub.view(), inf_zero.view()));
    EXPECT_FALSE(cpu::dpbf16_exact_range(matrix(Format::bf16, 1, 2, {INFINITY, 0}).view(),
                                         matrix(Format::bf16, 2, 1, {0x1p-133, 0}).view()));
    // Rows of 70: the 32-lane scan and its tail.
    for (const std::int64_t col : {35, 68}) {
        Tensor big = matrix(Format::bf16, 3, 70, std::vector<double>(210, 1.5));
        const Tensor small = matrix(Format::bf16, 1, 1, {0x1p-13});
        EXPECT_TRUE(cpu::dpbf16_exact_range(big.view(), small.view()));
        big.set_value(70 + col, -0x1p-99);  // -99 - 13 = -112
        EXPECT_TRUE(cpu::dpbf16_exact_range(big.view(), small.view())) << col;
        big.set_value(70 + col, 0x1p-100);  // -113
        EXPECT_FALSE(cpu::dpbf16_exact_range(big.view(), small.view())) << col;
        big.set_value(70 + col, 0x1p-130);  // subnormal
        EXPECT_FALSE(cpu::dpbf16_exact_range(big.view(), matrix(Format::bf16, 1, 1, {1}).view())) << col;
        big.set_value(70 + col, INFINITY);
        EXPECT_TRUE(cpu::dpbf16_exact_range(big.view(), small.view())) << col;
        EXPECT_FALSE(cpu::dpbf16_exact_range(big.view(), matrix(Format::bf16, 1, 1, {0x1p-131}).view())) << col;
    }
}

// The case the lightning indexer met (8 rows: the packed path): subnormal
// query entries against an index key of -0 and -inf give -inf (or NaN where
// the exact product is -inf * 0), the scalar chain's bits.
TEST(MatmulKernel, Dpbf16SubnormalTimesInfinityIsInfinite) {
    const Tensor a = matrix(Format::bf16, 8, 1, {-INFINITY, -0.0, 0x1.ccp-127, 0x1.2p-128, 0x1.2p-127, 0x1.54p-127, 0x1p-130, -0x1.7p-127});
    const Tensor b = matrix(Format::bf16, 1, 2, {-0.0, -INFINITY});
    const Tensor y = product(a, b, Format::fp32, cpu::best_matmul_path(Format::bf16)), want = chain(a, b, true);
    for (std::int64_t i = 0; i < y.numel(); ++i)  // NaN's sign is not the product's business
        EXPECT_TRUE(std::isnan(want.value(i)) ? std::isnan(y.value(i)) : y.bits(i) == want.bits(i)) << i;
    EXPECT_EQ(y.value(2 * 2 + 1), -INFINITY);
    EXPECT_EQ(y.value(7 * 2 + 1), INFINITY);
}

TEST(MatmulKernel, Dpbf16FlushesWhatTheGuardProtects) {
    // The instruction itself (what the daz mutant runs): a subnormal input is read as 0.
    if (!cpu::has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
    const Tensor a = matrix(Format::bf16, 1, 1, {0x1p-130}), b = matrix(Format::bf16, 1, 1, {0x1p100});
    Tensor y(Format::fp32, {1, 1});
    const Params params;
    cpu::matmul_call(KernelCall{params, {a.view(), b.view()}, {y.view()}}, cpu::MatmulPath::dpbf16, false);
    EXPECT_EQ(y.value(0), 0.0);
    EXPECT_EQ(product(a, b, Format::fp32, cpu::MatmulPath::dpbf16).value(0), 0x1p-30);
}

CONFORM_FAMILY_SUITES(Matmul, "matmul");

}  // namespace matmul_test
