// Softmax family oracle: closed forms, shift invariance, the online form
// against the direct form for every partition, lse_merge algebra, special
// values, a precision self-check and shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "oracle/softmax.hpp"
#include "test_tensors.hpp"

namespace softmax_oracle_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using oracle::Real;
using conform::testing::tensor;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();


std::vector<Real> reals(const std::vector<double>& v) {
    std::vector<Real> r;
    for (double d : v) r.push_back(oracle::from_double(d));
    return r;
}

// Agreement of a with b to a relative 2^-k (NaN with NaN, -inf with -inf).
bool agree(const Real& a, const Real& b, int k) {
    if (oracle::isnan(a) || oracle::isnan(b)) return oracle::isnan(a) && oracle::isnan(b);
    if (oracle::isinf(a) || oracle::isinf(b)) return a == b;
    const Real scale = std::max(oracle::abs(b), Real(1e-300));
    return oracle::abs(a - b) <= scale * pow(Real(2), -k);
}

std::vector<double> random_row(std::mt19937_64& g, std::size_t n, double spread) {
    std::normal_distribution<double> d(0, spread);
    std::vector<double> r(n);
    for (double& v : r) v = d(g);
    return r;
}

}  // namespace

TEST(SoftmaxOracle, UniformRowIsOneOverN) {
    oracle::PrecisionScope p(256);
    for (int n = 1; n <= 9; ++n) {
        auto r = oracle::softmax_row(reals(std::vector<double>(n, -3.75)));
        for (const Real& y : r.y) EXPECT_TRUE(agree(y, Real(1) / n, 250)) << n;
        EXPECT_TRUE(agree(r.lse, Real(-3.75) + oracle::ln(Real(n)), 250)) << n;
        EXPECT_EQ(oracle::to_double(r.max), -3.75);
    }
}

TEST(SoftmaxOracle, TwoElementRowIsSigmoidOfTheDifference) {
    oracle::PrecisionScope p(256);
    for (auto [a, b] : {std::pair{0.5, -1.25}, {3.0, 3.0}, {-20.0, 17.5}, {1e4, -1e4}}) {
        auto r = oracle::softmax_row(reals({a, b}));
        const Real d = Real(a) - Real(b);
        EXPECT_TRUE(agree(r.y[0], Real(1) / (Real(1) + oracle::exp(-d)), 250)) << a << " " << b;
        EXPECT_TRUE(agree(r.y[1], Real(1) / (Real(1) + oracle::exp(d)), 250)) << a << " " << b;
    }
}

TEST(SoftmaxOracle, RowsSumToOne) {
    oracle::PrecisionScope p(256);
    std::mt19937_64 g(7);
    for (int t = 0; t < 20; ++t) {
        auto r = oracle::softmax_row(reals(random_row(g, 1 + t % 11, t < 10 ? 1.0 : 40.0)));
        Real s(0);
        for (const Real& y : r.y) s += y;
        EXPECT_TRUE(agree(s, Real(1), 245)) << t;
    }
}

TEST(SoftmaxOracle, ShiftInvarianceIsExactForPlusMinus1e4) {
    // x + c is exact in double for these dyadic x, and the oracle subtracts
    // the maximum exactly, so the probabilities are identical, not just close.
    oracle::PrecisionScope p(256);
    const std::vector<double> x{0.5, -1.25, 3.0, 2.75, -7.5, 0.0, -kInf};
    const auto base = oracle::softmax_row(reals(x));
    for (double c : {1e4, -1e4}) {
        std::vector<double> xc;
        for (double v : x) xc.push_back(v + c);
        const auto shifted = oracle::softmax_row(reals(xc));
        for (std::size_t j = 0; j < x.size(); ++j) EXPECT_TRUE(shifted.y[j] == base.y[j]) << c << " " << j;
        EXPECT_TRUE(agree(shifted.lse, base.lse + Real(c), 240)) << c;
    }
    EXPECT_EQ(oracle::to_double(base.y[6]), 0.0);
}

TEST(SoftmaxOracle, OnlineEqualsSoftmaxForEveryBlockLength) {
    oracle::PrecisionScope p(256);
    std::mt19937_64 g(11);
    std::vector<std::vector<double>> rows{
        random_row(g, 12, 1.0),
        random_row(g, 11, 30.0),                                   // large spread: many rescales
        {-kInf, -kInf, -kInf, 1.5, -2.0, -kInf, 0.25, 9.0, -kInf},  // all -inf prefix block for block <= 3
        {-kInf, 4.0},
        {5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0},                      // decreasing: never rescales
        {-1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0},                      // increasing: rescales at every block
    };
    for (std::size_t r = 0; r < rows.size(); ++r) {
        const auto x = reals(rows[r]);
        const auto ref = oracle::softmax_row(x);
        for (std::size_t block = 0; block <= x.size() + 1; ++block) {
            const auto on = oracle::online_softmax_row(x, block);
            EXPECT_TRUE(on.max == ref.max) << r << " block " << block;
            EXPECT_TRUE(agree(on.lse, ref.lse, 200)) << r << " block " << block;
            for (std::size_t j = 0; j < x.size(); ++j)
                EXPECT_TRUE(agree(on.y[j], ref.y[j], 200)) << r << " block " << block << " j " << j;
        }
    }
}

TEST(SoftmaxOracle, SpecialValueRows) {
    oracle::PrecisionScope p(128);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (std::size_t block : {0, 1, 2}) {
        // all -inf: the empty distribution, never NaN
        auto e = oracle::online_softmax_row(reals({-kInf, -kInf, -kInf}), block);
        for (const Real& y : e.y) EXPECT_EQ(oracle::to_double(y), 0.0);
        EXPECT_TRUE(oracle::isinf(e.lse) && e.lse < 0);
        EXPECT_TRUE(oracle::isinf(e.max) && e.max < 0);
        // NaN anywhere, or +inf: the whole row NaN
        for (double bad : {nan, kInf}) {
            auto r = oracle::online_softmax_row(reals({1.0, bad, -kInf}), block);
            for (const Real& y : r.y) EXPECT_TRUE(oracle::isnan(y));
            EXPECT_TRUE(oracle::isnan(r.lse));
        }
    }
    auto d = oracle::softmax_row(reals({-kInf, -kInf}));
    EXPECT_EQ(oracle::to_double(d.y[0]), 0.0);
    EXPECT_TRUE(oracle::isinf(d.lse));
    EXPECT_TRUE(oracle::isnan(oracle::softmax_row(reals({kInf, 1.0})).y[1]));
}

TEST(SoftmaxOracle, LseMergeIsAssociativeAndEmptyIsTheIdentity) {
    oracle::PrecisionScope p(256);
    using S = oracle::AttnState<Real>;
    const S a{reals({1.5, -2.0, 0.25}), Real(3.5)}, b{reals({-0.5, 4.0, 1.0}), Real(-1e4)},
        c{reals({0.0, 0.125, -8.0}), Real(2.75)};
    const S empty{reals({0, 0, 0}), oracle::neg_inf<Real>()};
    const S left = oracle::lse_merge(oracle::lse_merge(a, b), c), right = oracle::lse_merge(a, oracle::lse_merge(b, c));
    EXPECT_TRUE(agree(left.lse, right.lse, 240));
    for (int d = 0; d < 3; ++d) EXPECT_TRUE(agree(left.o[d], right.o[d], 240)) << d;
    // lse is log(e^a + e^b + e^c), the tiny state contributes below 2^-256
    const Real lse3 = oracle::ln(oracle::exp(Real(3.5)) + oracle::exp(Real(2.75)));
    EXPECT_TRUE(agree(left.lse, lse3, 240));
    for (const S& s : {a, b, c}) {
        for (const S& m : {oracle::lse_merge(s, empty), oracle::lse_merge(empty, s)}) {
            EXPECT_TRUE(m.lse == s.lse);
            for (int d = 0; d < 3; ++d) EXPECT_TRUE(m.o[d] == s.o[d]);
        }
    }
    const S ee = oracle::lse_merge(empty, empty);
    EXPECT_TRUE(oracle::isinf(ee.lse) && ee.lse < 0);
    for (const Real& v : ee.o) EXPECT_EQ(oracle::to_double(v), 0.0);  // not NaN
    // Equal lse: an even blend, lse + log 2.
    const S half = oracle::lse_merge(a, S{c.o, a.lse});
    EXPECT_TRUE(agree(half.lse, a.lse + oracle::ln(Real(2)), 250));
    EXPECT_TRUE(agree(half.o[0], (a.o[0] + c.o[0]) / 2, 250));
}

TEST(SoftmaxOracle, EvaluatorsLayOutRowsAndReadBlock) {
    oracle::PrecisionScope p(256);
    Tensor x = tensor({2, 3, 4}, {0.5, 1, -2, 3, -kInf, -kInf, -kInf, -kInf, 1, 1, 1, 1,
                                  7, -7, 0, 0.25, 1e4, 0, 0, 0, 2, 3, 4, 5});
    auto sm = oracle::eval_softmax(Params{}, {x.view()});
    ASSERT_EQ(sm.names, std::vector<std::string>{"y"});
    ASSERT_EQ(sm.shapes[0], (std::vector<std::int64_t>{2, 3, 4}));
    ASSERT_EQ(sm.values[0].size(), 24u);
    EXPECT_EQ(oracle::to_double(sm.values[0][5]), 0.0);
    EXPECT_EQ(oracle::to_double(sm.values[0][9]), 0.25);
    auto on = oracle::eval_online_softmax(Params({{"block", 3}}), {x.view()});
    ASSERT_EQ(on.names, (std::vector<std::string>{"y", "m", "lse"}));
    ASSERT_EQ(on.shapes[1], (std::vector<std::int64_t>{2, 3}));
    for (int i = 0; i < 24; ++i) EXPECT_TRUE(agree(on.values[0][i], sm.values[0][i], 200)) << i;
    EXPECT_EQ(oracle::to_double(on.values[1][0]), 3.0);
    EXPECT_EQ(oracle::to_double(on.values[1][4]), 1e4);
    EXPECT_TRUE(oracle::isinf(on.values[2][1]));
    EXPECT_TRUE(agree(on.values[2][2], oracle::ln(Real(4)) + 1, 250));

    Tensor oa = tensor({2, 2}, {1, 2, 3, 4}), la = tensor({2}, {0, -kInf}), ob = tensor({2, 2}, {5, 6, 7, 8}),
           lb = tensor({2}, {0, 1});
    auto m = oracle::eval_lse_merge(Params{}, {oa.view(), la.view(), ob.view(), lb.view()});
    EXPECT_TRUE(agree(m.values[0][0], Real(3), 250));   // even blend of 1 and 5
    EXPECT_EQ(oracle::to_double(m.values[0][2]), 7.0);  // row 1: a is empty
    EXPECT_EQ(oracle::to_double(m.values[1][1]), 1.0);
}

TEST(SoftmaxOracle, PrecisionSelfCheck128Versus256Bits) {
    std::mt19937_64 g(3);
    for (int t = 0; t < 10; ++t) {
        const auto row = random_row(g, 2 + t, 25.0);
        std::vector<double> lo;
        {
            oracle::PrecisionScope p(128);
            auto r = oracle::online_softmax_row(reals(row), 3);
            for (const Real& y : r.y) lo.push_back(oracle::to_double(y));
            lo.push_back(oracle::to_double(r.lse));
        }
        oracle::PrecisionScope p(256);
        auto r = oracle::softmax_row(reals(row));
        for (std::size_t j = 0; j < row.size(); ++j) EXPECT_TRUE(agree(Real(lo[j]), r.y[j], 52)) << t;
        EXPECT_TRUE(agree(Real(lo.back()), r.lse, 52)) << t;
        // and the 128-bit value itself agrees to ~2^-120 before the double rounding
        oracle::PrecisionScope q(128);
        auto r128 = oracle::softmax_row(reals(row));
        for (std::size_t j = 0; j < row.size(); ++j) EXPECT_TRUE(agree(Real(r128.y[j]), r.y[j], 115)) << t;
    }
}

TEST(SoftmaxOracle, ShapeAndParameterErrorsNameTheInput) {
    Tensor x = tensor({3}, {1, 2, 3});
    Tensor oa = tensor({2, 3}, {0, 0, 0, 0, 0, 0}), la = tensor({2}, {0, 0}), bad = tensor({3}, {0, 0, 0});
    auto message = [](auto f) {
        try {
            f();
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no throw");
    };
    EXPECT_NE(message([&] { oracle::eval_lse_merge(Params{}, {oa.view(), la.view(), oa.view(), bad.view()}); })
                  .find("'lse_b'"),
              std::string::npos);
    EXPECT_NE(message([&] { oracle::eval_lse_merge(Params{}, {oa.view(), bad.view(), oa.view(), la.view()}); })
                  .find("'lse_a'"),
              std::string::npos);
    EXPECT_NE(message([&] { oracle::eval_online_softmax(Params({{"block", -1}}), {x.view()}); }).find("'block'"),
              std::string::npos);
    EXPECT_NE(message([&] { oracle::eval_softmax(Params{}, {}); }).find("softmax"), std::string::npos);
}

}  // namespace softmax_oracle_test
