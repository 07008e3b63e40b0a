// INT8 oracle: scales per tensor / token / channel, ties to even on exact
// tie vectors (k + 1/2) s, saturation to [-127, 127], monotonicity, the
// quantization error of a round trip, per-token isolation of an outlier, the
// exact integer GEMM (all operands -128, K = 65536), dequantization by the
// outer product of scales, dequantize and smooth_quant through their registry
// evaluators (specials, the zero-channel convention), and SmoothQuant's identity and its benefit on
// activations with outlier channels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "oracle/int8.hpp"

namespace int8_oracle_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using oracle::QuantAxis;
using oracle::Real;

namespace {

std::vector<double> normal(std::mt19937_64& g, std::size_t n, double sigma = 1) {
    std::normal_distribution<double> d(0, sigma);
    std::vector<double> v(n);
    for (double& x : v) x = static_cast<float>(d(g));  // FP32 inputs
    return v;
}

}  // namespace

TEST(Int8Oracle, ScalesPerTensorTokenAndChannel) {
    const std::vector<double> x = {1, -8, 2, 0.5, 3, -127 * 4.0, 0, 0, 0};  // [3, 3], row 2 all zero
    const auto t = oracle::quant_scales(x, 3, 3, QuantAxis::tensor);
    const auto r = oracle::quant_scales(x, 3, 3, QuantAxis::token);
    const auto c = oracle::quant_scales(x, 3, 3, QuantAxis::channel);
    ASSERT_EQ(t.size(), 1u);
    ASSERT_EQ(r.size(), 3u);
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(t[0], 4.0);
    EXPECT_EQ(r[0], static_cast<double>(8.0f / 127.0f));  // amax / 127 rounded once to FP32
    EXPECT_EQ(r[1], 4.0);
    EXPECT_EQ(r[2], 0.0);  // amax 0: scale 0, codes 0
    EXPECT_EQ(c[0], static_cast<double>(1.0f / 127.0f));
    EXPECT_EQ(c[2], 4.0);
    // The group maximum quantizes to +-127 exactly; a zero group to 0.
    const auto q = oracle::quantize(x, 3, 3, QuantAxis::token, r);
    EXPECT_EQ(q[1], -127);
    EXPECT_EQ(q[5], -127);
    EXPECT_EQ(q[6], 0);
    // A non-finite group: scale NaN, codes 0.
    const auto bad = oracle::quant_scales({1, NAN, 2, 3}, 2, 2, QuantAxis::token);
    EXPECT_TRUE(std::isnan(bad[0]));
    EXPECT_EQ(oracle::quantize({1, NAN, 2, 3}, 2, 2, QuantAxis::token, bad)[0], 0);
}

// x = (k + 1/2) s exactly: the even neighbour, on both signs, for every k.
TEST(Int8Oracle, TiesGoToEven) {
    for (double s : {1.0, 0.0078125, static_cast<double>(3.0f / 127.0f), 0x1.8p-130})
        for (int k = -127; k < 127; ++k) {
            const double x = (k + 0.5) * s;  // exact: 9-bit times 24-bit
            const int want = (k % 2 == 0) ? k : k + 1;
            EXPECT_EQ(oracle::quantize_value(x, s), want) << "k=" << k << " s=" << s;
            // One ulp either side of the tie decides by the side.
            EXPECT_EQ(oracle::quantize_value(std::nextafter(x, INFINITY), s), k + 1) << k;
            EXPECT_EQ(oracle::quantize_value(std::nextafter(x, -INFINITY), s), k) << k;
        }
}

TEST(Int8Oracle, SaturatesToPlusMinus127NeverMinus128) {
    const double s = 0.5;
    EXPECT_EQ(oracle::quantize_value(63.5, s), 127);
    EXPECT_EQ(oracle::quantize_value(63.75, s), 127);  // 127.5: saturates rather than rounding to 128
    EXPECT_EQ(oracle::quantize_value(-63.75, s), -127);
    EXPECT_EQ(oracle::quantize_value(-1e30, s), -127);
    EXPECT_EQ(oracle::quantize_value(1e30, s), 127);
    EXPECT_EQ(oracle::quantize_value(-0.0, s), 0);
    EXPECT_EQ(oracle::quantize_value(1, 0), 0);
}

TEST(Int8Oracle, MonotoneAndHalfAScaleRoundTrip) {
    std::mt19937_64 g(1);
    auto x = normal(g, 4096, 3);
    std::sort(x.begin(), x.end());
    const auto s = oracle::quant_scales(x, 1, 4096, QuantAxis::tensor);
    const auto q = oracle::quantize(x, 1, 4096, QuantAxis::tensor, s);
    const auto y = oracle::dequantize(q, 1, 4096, QuantAxis::tensor, s);
    for (std::size_t i = 1; i < q.size(); ++i) EXPECT_LE(q[i - 1], q[i]);
    for (std::size_t i = 0; i < q.size(); ++i) EXPECT_LE(std::fabs(y[i] - x[i]), s[0] / 2) << i;
}

// Per-token scales: a token with a 1000x outlier keeps every other token's
// codes; per-tensor, the outlier crushes them.
TEST(Int8Oracle, OutlierTokenLeavesOtherTokensUnderPerTokenScales) {
    std::mt19937_64 g(2);
    const std::int64_t T = 8, C = 64;
    auto x = normal(g, T * C);
    auto y = x;
    y[3 * C + 5] = 1000;
    const auto qx = oracle::quantize(x, T, C, QuantAxis::token, oracle::quant_scales(x, T, C, QuantAxis::token));
    const auto qy = oracle::quantize(y, T, C, QuantAxis::token, oracle::quant_scales(y, T, C, QuantAxis::token));
    const auto qt = oracle::quantize(y, T, C, QuantAxis::tensor, oracle::quant_scales(y, T, C, QuantAxis::tensor));
    int zeros_per_tensor = 0;
    for (std::int64_t i = 0; i < T * C; ++i) {
        if (i / C != 3) {
            EXPECT_EQ(qx[static_cast<std::size_t>(i)], qy[static_cast<std::size_t>(i)]) << i;
        }
        zeros_per_tensor += i / C != 3 && qt[static_cast<std::size_t>(i)] == 0;
    }
    EXPECT_GT(zeros_per_tensor, (T - 1) * C / 2);
}

TEST(Int8Oracle, IntegerGemmIsExactAtTheInt32Limit) {
    const std::int64_t K = 65536;
    const std::vector<std::int8_t> a(static_cast<std::size_t>(2 * K), -128), b(static_cast<std::size_t>(K * 3), -128);
    const auto c = oracle::int8_matmul(a, b, 2, K, 3);
    for (std::int64_t v : c) EXPECT_EQ(v, std::int64_t{1} << 30);  // 65536 * 128 * 128 = 2^30 < 2^31
    // A small product by hand: [1 -2; 3 4] [5; -6] = [17; -9].
    const auto d = oracle::int8_matmul({1, -2, 3, 4}, {5, -6}, 2, 2, 1);
    EXPECT_EQ(d, (std::vector<std::int64_t>{17, -9}));
    const auto y = oracle::int8_dequant_outer(d, 2, 1, {0.5, 0.25}, {2.0});
    EXPECT_EQ(y[0], 17);
    EXPECT_EQ(y[1], -4.5);
}

// (X diag(s)^-1)(diag(s) W) = X W to the working precision; by hand for
// alpha = 1/2: column maxima of X (4, 1), row maxima of W (1, 16) give
// s = (sqrt(4)/sqrt(1), sqrt(1)/sqrt(16)) = (2, 1/4).
TEST(Int8Oracle, SmoothQuantIdentity) {
    oracle::PrecisionScope scope(256);
    const std::vector<double> x = {4, 1, -2, 0.5}, w = {1, -0.5, 16, 8};  // X [2, 2], W [2, 2]
    const auto s = oracle::smooth_scales(x, 2, 2, w, 2, Real(0.5));
    EXPECT_LE(oracle::abs(s[0] - 2), pow(Real(2), -250));
    EXPECT_LE(oracle::abs(s[1] - Real(0.25)), pow(Real(2), -250));
    std::mt19937_64 g(3);
    const std::int64_t T = 5, C = 7, N = 3;
    const auto xr = normal(g, T * C), wr = normal(g, C * N);
    for (double alpha : {0.0, 0.5, 0.85, 1.0}) {
        const auto sm = oracle::smooth(xr, T, C, wr, N, oracle::smooth_scales(xr, T, C, wr, N, Real(alpha)));
        for (std::int64_t i = 0; i < T; ++i)
            for (std::int64_t j = 0; j < N; ++j) {
                Real p(0), q(0);
                for (std::int64_t k = 0; k < C; ++k) {
                    p += Real(xr[static_cast<std::size_t>(i * C + k)]) * Real(wr[static_cast<std::size_t>(k * N + j)]);
                    q += sm.x[static_cast<std::size_t>(i * C + k)] * sm.w[static_cast<std::size_t>(k * N + j)];
                }
                EXPECT_LE(oracle::abs(p - q), pow(Real(2), -240) * (1 + oracle::abs(p))) << alpha;
            }
    }
}

// W8A8 with per-token activation and per-channel weight scales on
// activations with two outlier channels (x50): smoothing (alpha = 0.5)
// moves the difficulty into the weights and cuts the product's error.
TEST(Int8Oracle, SmoothingReducesInt8ErrorOnOutlierChannels) {
    std::mt19937_64 g(4);
    const std::int64_t T = 32, C = 64, N = 32;
    auto x = normal(g, T * C);
    const auto w = normal(g, C * N, 0.1);
    for (std::int64_t i = 0; i < T; ++i) x[static_cast<std::size_t>(i * C + 7)] *= 50, x[static_cast<std::size_t>(i * C + 40)] *= 50;
    auto w8a8_error = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
        const auto sa = oracle::quant_scales(xs, T, C, QuantAxis::token), sb = oracle::quant_scales(ws, C, N, QuantAxis::channel);
        const auto acc = oracle::int8_matmul(oracle::quantize(xs, T, C, QuantAxis::token, sa),
                                             oracle::quantize(ws, C, N, QuantAxis::channel, sb), T, C, N);
        const auto y = oracle::int8_dequant_outer(acc, T, N, sa, sb);
        double err = 0, ref = 0;
        for (std::int64_t i = 0; i < T; ++i)
            for (std::int64_t j = 0; j < N; ++j) {
                double exact = 0;  // X W in double: far below the INT8 error
                for (std::int64_t k = 0; k < C; ++k) exact += x[static_cast<std::size_t>(i * C + k)] * w[static_cast<std::size_t>(k * N + j)];
                err += std::pow(oracle::to_double(y[static_cast<std::size_t>(i * N + j)]) - exact, 2);
                ref += exact * exact;
            }
        return std::sqrt(err / ref);
    };
    oracle::PrecisionScope scope(128);
    const auto s = oracle::smooth_scales(x, T, C, w, N, Real(0.5));
    const auto sm = oracle::smooth(x, T, C, w, N, s);
    std::vector<double> xs(sm.x.size()), ws(sm.w.size());
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(oracle::to_double(sm.x[i]));
    for (std::size_t i = 0; i < ws.size(); ++i) ws[i] = static_cast<float>(oracle::to_double(sm.w[i]));
    const double plain = w8a8_error(x, w), smoothed = w8a8_error(xs, ws);
    std::printf("W8A8 relative error (Frobenius) with two x50 outlier channels: plain %.4g, smoothed (alpha 0.5) %.4g\n",
                plain, smoothed);
    EXPECT_LT(smoothed, plain / 2);
}

namespace {

Tensor tensor_of(Format f, std::vector<std::int64_t> shape, const std::vector<double>& v) {
    Tensor t(f, std::move(shape));
    for (std::size_t i = 0; i < v.size(); ++i) t.set_value(static_cast<std::int64_t>(i), v[i]);
    return t;
}

}  // namespace

// dequantize's registry evaluator: q s per group by hand, IEEE specials (a
// NaN scale poisons its group, code 0 included; 0 inf is NaN), a scale of
// the wrong length named in the error.
TEST(Int8Oracle, DequantizeByHandAndSpecialScales) {
    oracle::PrecisionScope scope(128);
    const Tensor q = tensor_of(Format::int8, {2, 3}, {-128, 0, 3, 127, -1, 0});
    const Tensor per_token = tensor_of(Format::fp32, {2}, {0.5, NAN});
    auto y = oracle::eval_dequantize(Params({{"axis", 1}}), {q.view(), per_token.view()}).values[0];
    EXPECT_EQ(oracle::to_double(y[0]), -64);
    EXPECT_EQ(oracle::to_double(y[2]), 1.5);
    for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isnan(oracle::to_double(y[static_cast<std::size_t>(i)])));
    const Tensor per_channel = tensor_of(Format::fp32, {3}, {INFINITY, INFINITY, 0x1p-149});
    y = oracle::eval_dequantize(Params({{"axis", 2}}), {q.view(), per_channel.view()}).values[0];
    EXPECT_EQ(oracle::to_double(y[0]), -INFINITY);
    EXPECT_TRUE(std::isnan(oracle::to_double(y[1])));        // 0 * inf
    EXPECT_EQ(oracle::to_double(y[2]), 3 * 0x1p-149);        // exact below FP32's subnormals
    EXPECT_THROW(oracle::eval_dequantize(Params({{"axis", 1}}), {q.view(), per_channel.view()}), std::invalid_argument);
}

// smooth_quant's registry evaluator: s_j by hand for alpha 1 (max|x_j|) and
// 0 (1 / max|w_j|), the zero-channel convention s = 1, a NaN channel, and
// xs ws = x w to the working precision (the identity, in exact arithmetic).
TEST(Int8Oracle, SmoothQuantEvaluatorConventionsAndIdentity) {
    oracle::PrecisionScope scope(256);
    // x [2, 3]: column maxima 4, 0, 2; w [3, 2]: row maxima 8, 1, 0.5.
    const Tensor x = tensor_of(Format::fp32, {2, 3}, {4, 0, -2, -1, 0, 1});
    const Tensor w = tensor_of(Format::fp32, {3, 2}, {8, -1, 1, 0.5, 0.25, -0.5});
    auto s_of = [&](double alpha) { return oracle::eval_smooth_quant(Params({{"alpha", alpha}}), {x.view(), w.view()}).values[2]; };
    const auto s1 = s_of(1), s0 = s_of(0);
    EXPECT_EQ(oracle::to_double(s1[0]), 4);
    EXPECT_EQ(oracle::to_double(s1[1]), 1);  // zero activation channel
    EXPECT_EQ(oracle::to_double(s0[0]), 0.125);
    EXPECT_EQ(oracle::to_double(s0[2]), 2);
    const Tensor xn = tensor_of(Format::fp32, {2, 3}, {4, 0, -2, -1, NAN, 1});
    const auto out = oracle::eval_smooth_quant(Params(), {xn.view(), w.view()});
    EXPECT_TRUE(std::isnan(oracle::to_double(out.values[2][1])));
    EXPECT_TRUE(std::isnan(oracle::to_double(out.values[0][1])));   // xs[0, 1] = 0 / NaN
    EXPECT_TRUE(std::isnan(oracle::to_double(out.values[1][2])));   // ws[1, 0]
    EXPECT_FALSE(std::isnan(oracle::to_double(out.values[1][0])));  // other channels unaffected
    std::mt19937_64 g(6);
    const std::int64_t T = 4, C = 9, N = 5;
    const auto xr = normal(g, T * C), wr = normal(g, C * N);
    const Tensor xt = tensor_of(Format::fp32, {T, C}, xr), wt = tensor_of(Format::fp32, {C, N}, wr);
    for (double alpha : {0.0, 0.5, 0.85, 1.0}) {
        const auto sm = oracle::eval_smooth_quant(Params({{"alpha", alpha}}), {xt.view(), wt.view()});
        for (std::int64_t i = 0; i < T; ++i)
            for (std::int64_t j = 0; j < N; ++j) {
                Real p(0), q(0);
                for (std::int64_t k = 0; k < C; ++k) {
                    p += Real(xr[static_cast<std::size_t>(i * C + k)]) * Real(wr[static_cast<std::size_t>(k * N + j)]);
                    q += sm.values[0][static_cast<std::size_t>(i * C + k)] * sm.values[1][static_cast<std::size_t>(k * N + j)];
                }
                EXPECT_LE(oracle::abs(p - q), pow(Real(2), -240) * (1 + oracle::abs(p))) << alpha;
            }
    }
    EXPECT_THROW(oracle::eval_smooth_quant(Params({{"alpha", 1.5}}), {x.view(), w.view()}), std::invalid_argument);
}

}  // namespace int8_oracle_test
