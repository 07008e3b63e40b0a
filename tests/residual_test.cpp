// block_attn_res and gated_residual (family residual): the property suite
// over every registered kernel and mutant, hand-worked reads, the special
// values, the evaluators' validation and the double-precision templates the
// model's FP64 tier calls (docs/residual.md).
#include "kernel_suite.hpp"

#include <cmath>

#include "oracle/attn_res.hpp"
#include "oracle/bound.hpp"
#include "oracle/gated_residual.hpp"
#include "oracle/structured.hpp"
#include "test_tensors.hpp"

namespace residual_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

CONFORM_FAMILY_SUITES(Residual, "residual");

namespace {

std::vector<const KernelInfo*> residual_kernels(const char* op) { return builtin_registry().select(op, Role::kernel); }

std::vector<TensorView> views(const std::vector<Tensor>& t) {
    std::vector<TensorView> v;
    for (const auto& e : t) v.push_back(e.view());
    return v;
}

// v repeated `times` times.
std::vector<double> repeat(const std::vector<double>& v, int times) {
    std::vector<double> out;
    for (double e : v)
        for (int k = 0; k < times; ++k) out.push_back(e);
    return out;
}

}  // namespace

// w = 0: alpha = (1/2, 1/2) exactly, h = (1 + 3)/2 = 2; N = 1: h = v_0; a
// NaN in token 1 of a source makes token 1 NaN and leaves token 0.
TEST(ResidualKernels, AttnResHandWorked) {
    using conform::testing::tensor;
    for (const KernelInfo* k : residual_kernels("block_attn_res")) {
        const std::vector<Tensor> in = {tensor({2, 1, 9}, repeat({1, 3}, 9), k->in), tensor({9}, repeat({0}, 9), k->in)};
        const auto out = run_kernel(*k, Params(), views(in));
        for (int e = 0; e < 9; ++e) EXPECT_EQ(out[0].value(e), 2) << k->name;
        std::vector<double> v = {1, -2, 3, 0.5, 4, -1, 2, 7};
        std::vector<Tensor> one = {tensor({1, 2, 4}, v, k->in), tensor({4}, {0.3, -1, 2, 0.5}, k->in),
                                   tensor({4}, {1, 2, 0.5, 1}, k->in)};
        auto o1 = run_kernel(*k, Params(), views(one));
        for (int e = 0; e < 8; ++e) EXPECT_EQ(o1[0].value(e), v[static_cast<std::size_t>(e)]) << k->name;
        one[0].set_value(5, NAN);
        o1 = run_kernel(*k, Params(), views(one));
        for (int e = 0; e < 4; ++e) EXPECT_EQ(o1[0].value(e), v[static_cast<std::size_t>(e)]) << k->name;
        for (int e = 4; e < 8; ++e) EXPECT_TRUE(std::isnan(o1[0].value(e))) << k->name;
    }
}

// A = 0 and n = 1: the gate is 1/2, h = RMSNorm(H_1) / 2 = 1/2 for H_1 = (2,
// 2, 2, 2) with eps = 0; an infinite stream value makes its token NaN.
TEST(ResidualKernels, GatedResidualHandWorked) {
    using conform::testing::tensor;
    const Params eps0({{"eps", 0.0}});
    for (const KernelInfo* k : residual_kernels("gated_residual")) {
        std::vector<Tensor> in = {tensor({1, 2, 4}, {2, 2, 2, 2, -3, -3, -3, -3}, k->in), tensor({1, 4}, {1, 1, 1, 1}, k->in),
                                  tensor({4, 2}, repeat({0}, 8), k->in), tensor({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}, k->in)};
        auto out = run_kernel(*k, eps0, views(in));
        for (int e = 0; e < 4; ++e) {
            EXPECT_EQ(out[0].value(e), 0.5) << k->name;
            EXPECT_EQ(out[0].value(4 + e), -0.5) << k->name;
            EXPECT_EQ(out[1].value(e), 0.5) << k->name;
        }
        in[0].set_value(6, INFINITY);
        out = run_kernel(*k, eps0, views(in));
        for (int e = 0; e < 4; ++e) {
            EXPECT_EQ(out[0].value(e), 0.5) << k->name;
            EXPECT_TRUE(std::isnan(out[0].value(4 + e))) << k->name;
            EXPECT_TRUE(std::isnan(out[1].value(4 + e))) << k->name;
        }
    }
}

// The evaluators name the input and dimension that do not fit; the optional
// norm_weight may be left out.
TEST(ResidualOracle, EvaluatorValidation) {
    using conform::testing::tensor;
    const Tensor v = tensor({2, 1, 3}, {1, 2, 3, 4, 5, 6}), w = tensor({3}, {0, 0, 0}), w4 = tensor({4}, {0, 0, 0, 0});
    EXPECT_NO_THROW(oracle::eval_block_attn_res(Params(), {v.view(), w.view()}));
    try {
        oracle::eval_block_attn_res(Params(), {v.view(), w4.view()});
        FAIL() << "a w of the wrong width was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("w"), std::string::npos) << e.what();
    }
    const Tensor H = tensor({2, 1, 3}, {1, 2, 3, 4, 5, 6}), g = tensor({2, 3}, repeat({1}, 6)), A = tensor({6, 2}, repeat({0}, 12)),
                 B = tensor({2, 6}, repeat({0}, 12)), Bbad = tensor({3, 6}, repeat({0}, 18));
    EXPECT_NO_THROW(oracle::eval_gated_residual(Params(), {H.view(), g.view(), A.view(), B.view()}));
    EXPECT_THROW(oracle::eval_gated_residual(Params(), {H.view(), g.view(), A.view(), Bbad.view()}), std::invalid_argument);
    const Params negative({{"eps", -1.0}});
    EXPECT_THROW(oracle::eval_block_attn_res(negative, {v.view(), w.view()}), std::invalid_argument);
    EXPECT_THROW(oracle::eval_gated_residual(negative, {H.view(), g.view(), A.view(), B.view()}), std::invalid_argument);
}

// A token whose FP32 sum of squares may overflow is undefined (not judged),
// the others keep a finite, nonzero bound; a token with a NaN source is
// judged by class (bound 0).
TEST(ResidualOracle, BoundsUndefinedOnlyWhereAStageMayOverflow) {
    using conform::testing::tensor;
    const Tensor v = tensor({2, 3, 2}, {1, 2, 1e30, 3e30, NAN, 1, 3, 4, 5, 6, 7, 8}, Format::fp32), w = tensor({2}, {0.5, -1}, Format::fp32);
    const auto ex = oracle::evaluate_structured("block_attn_res", Params(), {v.view(), w.view()}, {Format::fp32}).exact;
    const auto b = oracle::block_attn_res_bound(Params(), {v.view(), w.view()}, ex, Format::fp32, {Format::fp32}).at(0);
    EXPECT_TRUE(b[0] > 0 && std::isfinite(b[0]));
    EXPECT_EQ(b[2], oracle::kUndefined);
    EXPECT_TRUE(std::isnan(ex.at(0)[4]));
    EXPECT_EQ(b[4], 0);
    const Tensor H = tensor({1, 2, 2}, {1, 2, 1e30, 3e30}, Format::fp32), g = tensor({1, 2}, {1, 1}, Format::fp32),
                 A = tensor({2, 1}, {0.5, 0.25}, Format::fp32), B = tensor({1, 2}, {1, -1}, Format::fp32);
    const std::vector<TensorView> in = {H.view(), g.view(), A.view(), B.view()};
    const auto gx = oracle::evaluate_structured("gated_residual", Params(), in, {Format::fp32}).exact;
    const auto gb = oracle::gated_residual_bound(Params(), in, gx, Format::fp32, {Format::fp32});
    EXPECT_TRUE(gb[0][0] > 0 && std::isfinite(gb[0][0]) && gb[1][0] > 0 && std::isfinite(gb[1][0]));
    EXPECT_EQ(gb[0][2], oracle::kUndefined);
    EXPECT_EQ(gb[1][2], oracle::kUndefined);
}

// The double templates (the model's FP64 tier) agree with the MPFR
// evaluators to double precision.
TEST(ResidualOracle, DoubleTemplatesMatchMpfr) {
    using conform::testing::tensor;
    const std::vector<double> v = {1, -2, 3, 0.5, 4, -1, 2, 7, 0.25, 0.5, -8, 1}, w = {0.3, -1, 2, 0.5};
    const auto ex = oracle::eval_block_attn_res(Params(), {tensor({3, 1, 4}, v).view(), tensor({4}, w).view()});
    const std::vector<std::vector<double>> src = {{1, -2, 3, 0.5}, {4, -1, 2, 7}, {0.25, 0.5, -8, 1}};
    const auto h = oracle::attn_res_read<double>(src, w, {1, 1, 1, 1}, 1e-6);
    for (int e = 0; e < 4; ++e)
        EXPECT_NEAR(h[static_cast<std::size_t>(e)], oracle::to_double(ex.values[0][static_cast<std::size_t>(e)]), 1e-14);
    const std::vector<double> a = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8}, b = {1, -1, 0.5, 2, -0.25, 0.75, 1.5, -2};
    const auto gx = oracle::eval_gated_residual(Params(), {tensor({2, 1, 2}, {1, 2, -3, 0.5}).view(), tensor({2, 2}, {1, 0.5, 2, 1}).view(),
                                                           tensor({4, 2}, a).view(), tensor({2, 4}, b).view()});
    oracle::Mat<double> H(2, 2), g(2, 2), A(4, 2), B(2, 4);
    H.a = {1, 2, -3, 0.5}, g.a = {1, 0.5, 2, 1}, A.a = a, B.a = b;
    const auto r = oracle::gated_residual_read<double>(H, g, A, B, 1e-6);
    for (int e = 0; e < 2; ++e)
        EXPECT_NEAR(r.h[static_cast<std::size_t>(e)], oracle::to_double(gx.values[0][static_cast<std::size_t>(e)]), 1e-14);
    for (int e = 0; e < 4; ++e)
        EXPECT_NEAR(r.gate[static_cast<std::size_t>(e)], oracle::to_double(gx.values[1][static_cast<std::size_t>(e)]), 1e-15);
}

}  // namespace residual_test
