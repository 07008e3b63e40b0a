// Sinkhorn / Hyper-Connections oracle: a hand-worked 2x2 example, exp and
// log domains, row-shift exactness for huge logits, the spectral norm
// against closed forms, the Schur bound on every iterate, exact doubly
// stochastic matrices and their products, the depth-L amplification of mHC
// against free HC, the residual update, special values, convergence, a
// precision self-check and the evaluator's validation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "oracle/hc_residual.hpp"
#include "oracle/sinkhorn.hpp"
#include "test_tensors.hpp"

namespace sinkhorn_oracle_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using oracle::Mat;
using oracle::Real;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <class R = Real> Mat<R> matrix(std::int64_t n, const std::vector<double>& v) {
    Mat<R> m(n, n);
    for (std::size_t i = 0; i < v.size(); ++i) m.a[i] = R(v[i]);
    return m;
}

template <class R = Real> Mat<R> random_logits(std::mt19937_64& g, std::int64_t n, double spread) {
    std::normal_distribution<double> d(0, spread);
    Mat<R> m(n, n);
    for (auto& v : m.a) v = R(d(g));
    return m;
}

bool close(const Real& a, const Real& b, int k) { return oracle::abs(a - b) <= pow(Real(2), -k) * std::max(Real(1), oracle::abs(b)); }

void expect_close(const Mat<Real>& a, const Mat<Real>& b, int k, const std::string& what) {
    for (std::size_t i = 0; i < a.a.size(); ++i)
        EXPECT_TRUE(close(a.a[i], b.a[i], k)) << what << " entry " << i << ": " << oracle::to_double(a.a[i]) << " vs "
                                              << oracle::to_double(b.a[i]);
}

// A doubly stochastic matrix with exact marginals: a convex combination of
// `terms` random permutation matrices with weights k/16 (exact in Real).
Mat<Real> birkhoff(std::mt19937_64& g, std::int64_t n, int terms) {
    std::vector<int> w(static_cast<std::size_t>(terms), 0);
    for (int k = 0; k < 16; ++k) ++w[g() % terms];
    Mat<Real> m(n, n);
    std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
    for (int t = 0; t < terms; ++t) {
        for (std::int64_t i = 0; i < n; ++i) perm[static_cast<std::size_t>(i)] = i;
        std::shuffle(perm.begin(), perm.end(), g);
        for (std::int64_t i = 0; i < n; ++i) m(i, perm[static_cast<std::size_t>(i)]) += Real(w[t]) / 16;
    }
    return m;
}

}  // namespace

// K = exp(L) = [[1, 1], [1, 3]].  Iteration 1: rows [1/2 1/2; 1/4 3/4], column
// sums (3/4, 5/4) -> [2/3 2/5; 1/3 3/5].  Iteration 2: rows [5/8 3/8; 5/14
// 9/14], column sums (55/56, 57/56) -> [7/11 7/19; 4/11 12/19].  The limit is
// [p 1-p; 1-p p] with p^2 / (1-p)^2 = K00 K11 / (K01 K10) = 3: p = (3 - sqrt 3)/2.
TEST(SinkhornOracle, HandWorkedTwoByTwo) {
    oracle::PrecisionScope scope(256);
    Mat<Real> l(2, 2);
    l(1, 1) = oracle::ln(Real(3));
    const auto one = oracle::sinkhorn(l, 1), two = oracle::sinkhorn(l, 2);
    const Real want1[] = {Real(2) / 3, Real(2) / 5, Real(1) / 3, Real(3) / 5};
    const Real want2[] = {Real(7) / 11, Real(7) / 19, Real(4) / 11, Real(12) / 19};
    for (int i = 0; i < 4; ++i) {
        EXPECT_TRUE(close(one.a[i], want1[i], 250)) << i << ": " << oracle::to_double(one.a[i]);
        EXPECT_TRUE(close(two.a[i], want2[i], 250)) << i << ": " << oracle::to_double(two.a[i]);
    }
    const auto run = oracle::sinkhorn_to_tolerance(l, pow(Real(2), -240), 1000);
    const Real p = (Real(3) - oracle::sqrt(Real(3))) / 2;
    EXPECT_TRUE(close(run.b(0, 0), p, 235) && close(run.b(1, 1), p, 235) && close(run.b(0, 1), 1 - p, 235));
    EXPECT_LE(run.residual, pow(Real(2), -240));
    EXPECT_GT(run.iters, 2);
}

// The eps guard, by hand: L = [0 0; -ln 3 0] (row maxima 0, so the shifted
// start is K = [1 1; 1/3 1]), eps = 1.  Rows: sums 2 and 4/3, divided by 3 and
// 7/3: [1/3 1/3; 1/7 3/7].  Columns: sums 10/21 and 16/21, divided by 31/21
// and 37/21: [7/31 7/37; 3/31 9/37] -- columns sum to 10/31 and 16/37, not 1.
// A constant added to a row changes nothing (the start subtracts the row
// maximum, and the guard is relative to that start), eps = 0 is the unguarded
// iteration exactly, and a small eps still changes the result.
TEST(SinkhornOracle, EpsGuardByHand) {
    oracle::PrecisionScope scope(256);
    Mat<Real> l(2, 2);
    l(1, 0) = -oracle::ln(Real(3));
    const auto b = oracle::sinkhorn(l, 1, {}, 1.0);
    const Real want[] = {Real(7) / 31, Real(7) / 37, Real(3) / 31, Real(9) / 37};
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(close(b.a[i], want[i], 250)) << i << ": " << oracle::to_double(b.a[i]);
    Mat<Real> scaled = l;
    scaled(0, 0) = scaled(0, 1) = Real(-1);  // exp(L) of row 0 is e^-1 (1 1); after the shift 1 1 again
    EXPECT_TRUE(close(oracle::sinkhorn(scaled, 1, {}, 1.0).a[0], want[0], 250));
    expect_close(oracle::sinkhorn(l, 3, {}, 0.0), oracle::sinkhorn(l, 3), 256, "eps = 0");
    EXPECT_FALSE(close(oracle::sinkhorn(l, 3, {}, 1e-3).a[0], oracle::sinkhorn(l, 3).a[0], 40)) << "eps ignored";
}

TEST(SinkhornOracle, ExpAndLogDomainsAgree) {
    oracle::PrecisionScope scope(256);
    std::mt19937_64 g(5);
    for (std::int64_t n : {1, 2, 3, 4, 7, 16})
        for (double spread : {0.5, 3.0, 30.0})
            for (int iters : {1, 2, 20, 50}) {
                Mat<Real> l = random_logits(g, n, spread);
                if (n > 2 && iters == 2) l(1, 2) = Real(-kInf);  // a structural zero
                const std::string what = "n=" + std::to_string(n) + " spread=" + std::to_string(spread) +
                                         " iters=" + std::to_string(iters);
                expect_close(oracle::sinkhorn(l, iters), oracle::sinkhorn_log(l, iters), 240, what);
            }
}

// Adding a constant to a row is absorbed exactly by the first row
// normalization: B(L + c 1ᵀ) = B(L) for every iteration count, c = +-1e4
// included (exp(L) itself would overflow every format).  A column shift is
// absorbed only in the limit.
TEST(SinkhornOracle, HugeRowShiftsAreExact) {
    oracle::PrecisionScope scope(256);
    std::mt19937_64 g(6);
    for (int iters : {1, 3, 20}) {
        const Mat<Real> l = random_logits(g, 4, 2.0);
        Mat<Real> shifted = l, col_shifted = l;
        for (std::int64_t i = 0; i < 4; ++i)
            for (std::int64_t j = 0; j < 4; ++j) {
                shifted(i, j) += Real(i % 2 ? 1e4 : -1e4) + Real(i);
                col_shifted(i, j) += Real(j % 2 ? 1e4 : -3e4);
            }
        expect_close(oracle::sinkhorn(shifted, iters), oracle::sinkhorn(l, iters), 245, "row shift");
        expect_close(oracle::sinkhorn_log(shifted, iters), oracle::sinkhorn(l, iters), 230, "row shift, log domain");
        const Real tol = pow(Real(2), -200);
        expect_close(oracle::sinkhorn_to_tolerance(col_shifted, tol, 5000).b,
                     oracle::sinkhorn_to_tolerance(l, tol, 5000).b, 195, "column shift, limit");
    }
}

TEST(SinkhornOracle, SpectralNormMatchesClosedForms) {
    oracle::PrecisionScope scope(256);
    const Real phi = (1 + oracle::sqrt(Real(5))) / 2;  // ||[1 1; 0 1]||_2
    const std::pair<Mat<Real>, Real> cases[] = {
        {matrix(2, {1, 1, 0, 1}), phi},
        {matrix(3, {2, 0, 0, 0, -5, 0, 0, 0, 0.5}), Real(5)},
        {matrix(4, std::vector<double>(16, 0.25)), Real(1)},  // (1/n) 11ᵀ
        {matrix(3, {0, -1, 0, 0, 0, 1, 1, 0, 0}), Real(1)},  // a signed permutation
        {matrix(2, {0, 0, 0, 0}), Real(0)},
    };
    for (const auto& [b, want] : cases) {
        const auto s = oracle::spectral_norm(b);
        EXPECT_TRUE(close(s.value, want, 240)) << oracle::to_double(s.value);
        EXPECT_LE(s.lo, want);
        EXPECT_GE(s.hi, want);
        EXPECT_LE(s.hi - s.lo, pow(Real(2), -100));
    }
    EXPECT_TRUE(oracle::isnan(oracle::spectral_norm(matrix(2, {1, NAN, 0, 1})).value));
}

// ||B||_2 <= sqrt(max row sum * max column sum) holds for every nonnegative
// matrix; here for every half-step iterate of random runs, including the
// first ones whose marginals are far from 1, checked against the enclosure.
TEST(SinkhornOracle, SchurBoundHoldsOnEveryIterate) {
    oracle::PrecisionScope scope(160);
    std::mt19937_64 g(7);
    int checked = 0;
    for (std::int64_t n : {2, 3, 4, 8})
        for (double spread : {1.0, 8.0}) {
            const Mat<Real> l = random_logits(g, n, spread);
            oracle::sinkhorn<Real>(l, 6, [&](const Mat<Real>& m, oracle::SinkhornAxis) {
                const auto s = oracle::spectral_norm(m);
                EXPECT_LE(s.lo, oracle::schur_bound(m)) << "n=" << n;
                ++checked;
            });
        }
    EXPECT_EQ(checked, 8 * 12);
}

// Exact marginals: ||B||_2 = 1 (1 is the singular value of the all-ones
// vector, and the Schur bound is 1), and products of doubly stochastic
// matrices are doubly stochastic, exactly.
TEST(SinkhornOracle, ExactMarginalsGiveNormOneAndProductsStayDoublyStochastic) {
    oracle::PrecisionScope scope(256);
    std::mt19937_64 g(8);
    for (std::int64_t n : {2, 3, 4, 6}) {
        Mat<Real> p = oracle::identity<Real>(n);
        for (int l = 0; l < 12; ++l) {
            const Mat<Real> b = birkhoff(g, n, 3);
            ASSERT_EQ(oracle::marginal_residual(b), 0);
            const auto s = oracle::spectral_norm(b);
            EXPECT_LE(s.lo, 1);
            EXPECT_GE(s.hi, 1);
            EXPECT_LE(s.hi, 1 + pow(Real(2), -200));
            p = oracle::matmul(b, p);
            EXPECT_EQ(oracle::marginal_residual(p), 0) << "product of " << l + 1 << " layers, n=" << n;
            EXPECT_LE(oracle::spectral_norm(p).hi, 1 + pow(Real(2), -200));
        }
    }
}

// Depth L = 1000, n_hc = 4: the mHC identity path B_L ... B_1 never amplifies
// (||prod||_2 <= prod of the layers' Schur bounds, ~1 + L * residual), while
// free HC matrices near the identity (I + 0.1 N(0, 1), what HC learns from
// an identity initialization) amplify the signal exponentially in depth.
TEST(SinkhornOracle, DepthProductNeverAmplifiesUnlikeFreeHc) {
    std::mt19937_64 g(9);
    std::normal_distribution<double> N;
    constexpr int kDepth = 1000;
    std::vector<Mat<Real>> mhc, hc;
    Real schur_product(1);
    {
        oracle::PrecisionScope scope(128);
        for (int l = 0; l < kDepth; ++l) {
            mhc.push_back(oracle::sinkhorn(random_logits(g, 4, 1.0), 20));
            schur_product *= oracle::schur_bound(mhc.back());
            Mat<Real> b = oracle::identity<Real>(4);
            for (auto& v : b.a) v += Real(0.1 * N(g));
            hc.push_back(b);
        }
        const auto gain_mhc = oracle::amplification(mhc), gain_hc = oracle::amplification(hc);
        for (int l = 0; l < kDepth; ++l) EXPECT_LE(gain_mhc[l].lo, schur_product) << "depth " << l + 1;
        EXPECT_LE(gain_mhc.back().hi, 1 + 1e-12);
        EXPECT_GE(gain_mhc.back().lo, 1 - 1e-12);  // converges to (1/n) 11ᵀ, whose norm is 1
        EXPECT_GT(gain_hc.back().lo, 1e3);
        std::printf("amplification ||B_L...B_1||_2 at L = 1, 10, 100, 1000:\n  mHC:");
        for (int l : {1, 10, 100, 1000}) std::printf(" %.6g", oracle::to_double(gain_mhc[l - 1].value));
        std::printf("\n  HC (free, I + 0.1 N(0,1)):");
        for (int l : {1, 10, 100, 1000}) std::printf(" %.6g", oracle::to_double(gain_hc[l - 1].value));
        std::printf("\n  prod of the mHC layers' Schur bounds: 1 + %.3g\n", oracle::to_double(schur_product - 1));
    }
}

// X' = B X + C F(A X): a hand-worked n = 2, d = 1 case, and the mHC identity
// path conserving the stream sum (1ᵀ B = 1ᵀ after the column normalization).
TEST(SinkhornOracle, ResidualUpdate) {
    oracle::PrecisionScope scope(256);
    using V = std::vector<Real>;
    const auto twice = [](const V& h) {
        V y(h);
        for (Real& v : y) v *= 2;
        return y;
    };
    // A = sigma(0) = (1/2, 1/2), C = 2 sigma(0) = (1, 1), B = [1 2; 3 4], X = (1, 3):
    // A X = 2, F = 4, X' = (1 + 6 + 4, 3 + 12 + 4) = (11, 19).
    Mat<Real> x(2, 1);
    x(0, 0) = 1, x(1, 0) = 3;
    const auto y = oracle::hc_residual(x, V{0, 0}, matrix(2, {1, 2, 3, 4}), V{0, 0}, twice);
    EXPECT_EQ(y(0, 0), 11);
    EXPECT_EQ(y(1, 0), 19);

    std::mt19937_64 g(10);
    const auto zero = [](const V& h) { return V(h.size(), Real(0)); };
    const Mat<Real> s = random_logits(g, 4, 1.0);
    Mat<Real> stream(4, 8);
    for (auto& v : stream.a) v = Real(std::normal_distribution<double>()(g));
    const auto sum = [](const Mat<Real>& m) {
        Real t(0);
        for (const Real& v : m.a) t += v;
        return t;
    };
    const auto next = oracle::mhc_residual(stream, V(4, Real(0)), s, V(4, Real(0)), zero);
    EXPECT_TRUE(close(sum(next), sum(stream), 240));
}

TEST(SinkhornOracle, ToToleranceStopsAtTheFirstIterationWithinTolerance) {
    oracle::PrecisionScope scope(192);
    std::mt19937_64 g(11);
    for (double tol : {1e-3, 1e-12, 1e-40}) {
        const Mat<Real> l = random_logits(g, 5, 4.0);
        const auto run = oracle::sinkhorn_to_tolerance(l, Real(tol), 10000);
        EXPECT_LE(run.residual, tol);
        ASSERT_GE(run.iters, 1);
        EXPECT_GT(oracle::marginal_residual(oracle::sinkhorn(l, run.iters - 1)), tol);
        expect_close(run.b, oracle::sinkhorn(l, run.iters), 180, "to tolerance vs fixed count");
    }
}

TEST(SinkhornOracle, SpecialValues) {
    oracle::PrecisionScope scope(128);
    for (double bad : {double(NAN), kInf}) {
        const auto b = oracle::sinkhorn(matrix(3, {0, 1, 2, 3, bad, 5, 6, 7, 8}), 20);
        for (const Real& v : b.a) EXPECT_TRUE(oracle::isnan(v));
    }
    // -inf entries are structural zeros; an all -inf row stays a zero row and
    // the columns still normalize: column sums 1, row 1 sums to 0.
    const auto b = oracle::sinkhorn(matrix(3, {0, -kInf, 1, -kInf, -kInf, -kInf, 2, 0, -kInf}), 20);
    EXPECT_EQ(b(0, 1), 0);
    EXPECT_EQ(b(2, 2), 0);
    for (std::int64_t j = 0; j < 3; ++j) EXPECT_EQ(b(1, j), 0);
    for (const Real& c : oracle::col_sums(b)) EXPECT_TRUE(close(c, Real(1), 120));
    for (const Real& v : oracle::sinkhorn(matrix(2, {-kInf, -kInf, -kInf, -kInf}), 20).a) EXPECT_EQ(v, 0);
    EXPECT_EQ(oracle::sinkhorn(matrix(1, {-123.0}), 20)(0, 0), 1);
}

// The working precision is the accuracy: 128 and 256 bits agree far below
// any kernel budget, huge spreads included.
TEST(SinkhornOracle, PrecisionSelfCheck) {
    std::mt19937_64 g(12);
    for (double spread : {1.0, 20.0, 300.0}) {
        const auto l = random_logits<double>(g, 4, spread);
        Mat<Real> lo, hi;
        auto run = [&](unsigned bits) {
            oracle::PrecisionScope scope(bits);
            Mat<Real> lr(4, 4);
            for (std::size_t i = 0; i < 16; ++i) lr.a[i] = oracle::from_double(l.a[i]);
            return oracle::sinkhorn(lr, 20);
        };
        lo = run(128), hi = run(256);
        oracle::PrecisionScope scope(256);
        for (std::size_t i = 0; i < 16; ++i)
            EXPECT_LE(oracle::abs(lo.a[i] - hi.a[i]), pow(Real(2), -110) * hi.a[i]) << "spread " << spread;
    }
}

TEST(SinkhornOracle, EvaluatorLayoutAndValidation) {
    std::mt19937_64 g(13);
    const auto v = conform::testing::dyadic(g, 2 * 9);
    const Tensor batch = conform::testing::tensor({2, 3, 3}, v, Format::fp32);
    const auto out = oracle::evaluate_structured("sinkhorn", Params({{"iters", 7}}), {batch.view()}, {Format::fp32});
    ASSERT_EQ(out.names, std::vector<std::string>{"b"});
    ASSERT_EQ(out.rounded[0].shape(), (std::vector<std::int64_t>{2, 3, 3}));
    oracle::PrecisionScope scope(128);
    for (int m = 0; m < 2; ++m) {
        Mat<Real> l(3, 3);
        for (int i = 0; i < 9; ++i) l.a[static_cast<std::size_t>(i)] = Real(v[static_cast<std::size_t>(9 * m + i)]);
        const auto b = oracle::sinkhorn(l, 7);
        for (int i = 0; i < 9; ++i)
            EXPECT_EQ(out.rounded[0].value(9 * m + i), static_cast<float>(oracle::to_double(b.a[static_cast<std::size_t>(i)])));
    }
    const Tensor flat = conform::testing::tensor({4}, {0, 0, 0, 0}), oblong = conform::testing::tensor({2, 3}, {v.begin(), v.begin() + 6});
    EXPECT_THROW(oracle::evaluate_structured("sinkhorn", Params(), {flat.view()}, {Format::fp32}), std::invalid_argument);
    EXPECT_THROW(oracle::evaluate_structured("sinkhorn", Params(), {oblong.view()}, {Format::fp32}), std::invalid_argument);
    EXPECT_THROW(oracle::evaluate_structured("sinkhorn", Params({{"iters", 0}}), {batch.view()}, {Format::fp32}),
                 std::invalid_argument);
    EXPECT_THROW(oracle::evaluate_structured("sinkhorn", Params({{"iters", 2.5}}), {batch.view()}, {Format::fp32}),
                 std::invalid_argument);
}

}  // namespace sinkhorn_oracle_test
