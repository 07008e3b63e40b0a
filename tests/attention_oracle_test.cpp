// Attention oracle: head mapping, mask alignment and key counts, fully
// masked rows, softcap and scale, the flash form against the direct form,
// split-KV merging, QK-norm and the G1 gate, a precision self-check and
// shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "oracle/attention.hpp"
#include "test_tensors.hpp"

namespace attention_oracle_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using oracle::Real;
using conform::testing::tensor;
using conform::testing::dyadic;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();



bool agree(const Real& a, const Real& b, int k) {
    if (oracle::isnan(a) || oracle::isnan(b)) return oracle::isnan(a) && oracle::isnan(b);
    if (oracle::isinf(a) || oracle::isinf(b)) return a == b;
    const Real scale = std::max(oracle::abs(b), Real(1e-300));
    return oracle::abs(a - b) <= scale * pow(Real(2), -k);
}

// Elementwise agreement of two evaluations, output by output.
void expect_agree(const oracle::OpOutputs& a, const oracle::OpOutputs& b, int k, const std::string& what) {
    ASSERT_EQ(a.shapes, b.shapes) << what;
    for (std::size_t o = 0; o < a.values.size(); ++o)
        for (std::size_t e = 0; e < a.values[o].size(); ++e)
            EXPECT_TRUE(agree(a.values[o][e], b.values[o][e], k)) << what << " output " << o << " element " << e;
}

// KV heads repeated G times each, consecutive (repeat_interleave): [K0, K0, K1, K1].
Tensor repeat_heads(const std::vector<double>& x, std::int64_t h, std::int64_t l, std::int64_t d, std::int64_t g) {
    std::vector<double> r;
    for (std::int64_t i = 0; i < h; ++i)
        for (std::int64_t c = 0; c < g; ++c) r.insert(r.end(), x.begin() + i * l * d, x.begin() + (i + 1) * l * d);
    return tensor({h * g, l, d}, r);
}

// With q = 0 every visible key has logit 0, so p is uniform over the visible
// set: exp(lse) is the number of visible keys, and with v_j = [1, j] the
// output is [1, mean visible index], which pins a contiguous set down.
struct Seen {
    double count, mean_index;
    bool empty;
};
std::vector<Seen> visible_sets(std::int64_t lq, std::int64_t lk, Params params) {
    Tensor q = tensor({1, lq, 2}, std::vector<double>(lq * 2, 0.0)), k = tensor({1, lk, 2}, std::vector<double>(lk * 2, 1));
    std::vector<double> v;
    for (std::int64_t j = 0; j < lk; ++j) v.insert(v.end(), {1.0, static_cast<double>(j)});
    auto out = oracle::eval_attention(params, {q.view(), k.view(), tensor({1, lk, 2}, v).view()});
    std::vector<Seen> r;
    for (std::int64_t i = 0; i < lq; ++i) {
        const Real& lse = out.values[1][i];
        const bool empty = oracle::isinf(lse);
        r.push_back({empty ? 0 : oracle::to_double(oracle::exp(lse)), oracle::to_double(out.values[0][2 * i + 1]), empty});
    }
    return r;
}

}  // namespace

TEST(AttentionOracle, MaskPredicateIsBottomRightAligned) {
    // Lq = 2, Lk = 5: query 0 sits at position 3, query 1 at position 4.
    EXPECT_TRUE(oracle::key_visible(0, 3, 2, 5, true, 0));
    EXPECT_FALSE(oracle::key_visible(0, 4, 2, 5, true, 0));
    EXPECT_TRUE(oracle::key_visible(0, 1, 2, 5, true, 0));  // top-left alignment would show key 0 only
    // window 2 at position 3: keys 2 and 3 only
    EXPECT_FALSE(oracle::key_visible(0, 1, 2, 5, false, 2));
    EXPECT_TRUE(oracle::key_visible(0, 2, 2, 5, false, 2));
    EXPECT_FALSE(oracle::key_visible(0, 4, 2, 5, false, 2));
    EXPECT_EQ(oracle::kv_head_of(5, 8, 2), 1);  // not 5 mod 4
    EXPECT_EQ(oracle::kv_head_of(3, 8, 2), 0);
}

TEST(AttentionOracle, CausalBottomRightKeyCountsAreExact) {
    oracle::PrecisionScope p(256);
    const std::int64_t lq = 3, lk = 7;
    auto seen = visible_sets(lq, lk, Params({{"causal", 1}}));
    for (std::int64_t i = 0; i < lq; ++i) {
        const double n = static_cast<double>(i + lk - lq + 1);  // keys 0 ..= i + 4
        EXPECT_NEAR(seen[i].count, n, 1e-12) << i;
        EXPECT_NEAR(seen[i].mean_index, (n - 1) / 2, 1e-12) << i;
    }
    // Lq > Lk: the first Lq - Lk queries see nothing.
    auto wide = visible_sets(5, 3, Params({{"causal", 1}}));
    EXPECT_TRUE(wide[0].empty && wide[1].empty);
    EXPECT_NEAR(wide[2].count, 1, 1e-12);
    EXPECT_NEAR(wide[4].count, 3, 1e-12);
    // Not causal: every query sees every key.
    for (const Seen& s : visible_sets(3, 7, Params{})) EXPECT_NEAR(s.count, 7, 1e-12);
}

TEST(AttentionOracle, SlidingWindowSeesExactlyWKeys) {
    oracle::PrecisionScope p(256);
    for (std::int64_t w : {1, 3, 4}) {
        for (auto [lq, lk] : {std::pair<std::int64_t, std::int64_t>{10, 10}, {4, 9}}) {
            auto seen = visible_sets(lq, lk, Params({{"window", static_cast<double>(w)}, {"causal", 1}}));
            for (std::int64_t i = 0; i < lq; ++i) {
                const std::int64_t pos = i + lk - lq, first = std::max<std::int64_t>(0, pos - w + 1);
                const double n = static_cast<double>(pos - first + 1);
                EXPECT_NEAR(seen[i].count, n, 1e-12) << w << " " << i;
                EXPECT_NEAR(seen[i].mean_index, (first + pos) / 2.0, 1e-12) << w << " " << i;
            }
            // the window implies the causal bound: same sets without causal = 1
            auto no_causal = visible_sets(lq, lk, Params({{"window", static_cast<double>(w)}}));
            for (std::int64_t i = 0; i < lq; ++i) EXPECT_EQ(no_causal[i].count, seen[i].count);
        }
    }
}

TEST(AttentionOracle, SingleKeyReturnsVExactly) {
    oracle::PrecisionScope p(128);
    Tensor q = tensor({2, 2, 3}, {0.5, -1, 2, 7, 7, 7, -3, 0.25, 1, 0, 0, 0}), k = tensor({1, 1, 3}, {1, -2, 0.5}),
           v = tensor({1, 1, 2}, {0.1, -123.456});
    for (double block : {0.0, 1.0}) {
        auto out = oracle::eval_attention(Params({{"block", block}}), {q.view(), k.view(), v.view()});
        for (int r = 0; r < 4; ++r) {
            EXPECT_EQ(oracle::to_double(out.values[0][2 * r]), 0.1);
            EXPECT_EQ(oracle::to_double(out.values[0][2 * r + 1]), -123.456);
        }
        // lse = the single logit: q.k / sqrt(3)
        EXPECT_TRUE(agree(out.values[1][0], Real(3.5) / oracle::sqrt(Real(3)), 120));
    }
}

// A visible key whose weight underflows MPFR's exponent range (a logit gap
// of 1e30) still carries an infinite value whole: o is that infinity (the
// exact weight is positive), not 0 * inf = NaN, in both forms.
TEST(AttentionOracle, UnderflowedWeightKeepsAnInfiniteValue) {
    const double inf = std::numeric_limits<double>::infinity();
    Tensor q = tensor({1, 1, 1}, {1}), k = tensor({1, 2, 1}, {1, -1e30}), v = tensor({1, 2, 1}, {2, inf});
    for (double block : {0.0, 1.0}) {
        auto out = oracle::eval_attention(Params({{"block", block}, {"scale", 1}}), {q.view(), k.view(), v.view()});
        EXPECT_EQ(oracle::to_double(out.values[0][0]), inf) << "block " << block;
    }
}

TEST(AttentionOracle, GqaAndMqaEqualMhaWithKvReplicated) {
    oracle::PrecisionScope p(128);
    std::mt19937_64 g(5);
    const std::int64_t hq = 4, lq = 3, lk = 5, d = 4, dv = 3;
    Tensor q = tensor({hq, lq, d}, dyadic(g, hq * lq * d));
    for (std::int64_t hkv : {1, 2}) {
        const std::int64_t group = hq / hkv;
        const auto kx = dyadic(g, hkv * lk * d), vx = dyadic(g, hkv * lk * dv);
        Tensor k = tensor({hkv, lk, d}, kx), v = tensor({hkv, lk, dv}, vx);
        const Params params({{"causal", 1}});
        auto gqa = oracle::eval_attention(params, {q.view(), k.view(), v.view()});
        auto mha = oracle::eval_attention(
            params, {q.view(), repeat_heads(kx, hkv, lk, d, group).view(), repeat_heads(vx, hkv, lk, dv, group).view()});
        for (std::size_t o = 0; o < 2; ++o)
            for (std::size_t e = 0; e < gqa.values[o].size(); ++e) EXPECT_TRUE(gqa.values[o][e] == mha.values[o][e]);
        if (hkv == 2) {
            // the h mod Hkv mapping (KV heads tiled [K0, K1, K0, K1]) gives a different answer
            std::vector<double> kt, vt;
            for (int c = 0; c < group; ++c) kt.insert(kt.end(), kx.begin(), kx.end()), vt.insert(vt.end(), vx.begin(), vx.end());
            auto tiled = oracle::eval_attention(params, {q.view(), tensor({hq, lk, d}, kt).view(), tensor({hq, lk, dv}, vt).view()});
            bool differs = false;
            for (std::size_t e = 0; e < gqa.values[1].size(); ++e) differs |= !(gqa.values[1][e] == tiled.values[1][e]);
            EXPECT_TRUE(differs);
        }
    }
}

TEST(AttentionOracle, FullyMaskedRowsAreZeroWithNegInfLse) {
    oracle::PrecisionScope p(128);
    std::mt19937_64 g(9);
    const std::int64_t lq = 3, lk = 4;
    Tensor q = tensor({1, lq, 2}, dyadic(g, lq * 2)), k = tensor({1, lk, 2}, dyadic(g, lk * 2));
    std::vector<double> vx = dyadic(g, lk * 2);
    vx[0] = std::numeric_limits<double>::quiet_NaN();  // key 0 is masked everywhere: must not leak
    Tensor v = tensor({1, lk, 2}, vx);
    Tensor mask = tensor({lq, lk}, {-kInf, -kInf, -kInf, -kInf, -kInf, 0, 0.5, -1, -kInf, -kInf, -kInf, 2});
    for (double block : {0.0, 1.0, 2.0}) {
        auto out = oracle::eval_attention(Params({{"block", block}}), {q.view(), k.view(), v.view(), mask.view()});
        EXPECT_EQ(oracle::to_double(out.values[0][0]), 0.0);
        EXPECT_EQ(oracle::to_double(out.values[0][1]), 0.0);
        EXPECT_TRUE(oracle::isinf(out.values[1][0]) && out.values[1][0] < 0);
        for (std::size_t e = 2; e < 6; ++e) EXPECT_FALSE(oracle::isnan(out.values[0][e])) << e;
        // row 2 sees key 3 only
        EXPECT_EQ(oracle::to_double(out.values[0][4]), vx[6]);
        EXPECT_EQ(oracle::to_double(out.values[0][5]), vx[7]);
    }
}

TEST(AttentionOracle, AdditiveNegInfMaskEqualsStructuralMask) {
    oracle::PrecisionScope p(128);
    std::mt19937_64 g(13);
    const std::int64_t hq = 2, lq = 4, lk = 6, d = 3;
    Tensor q = tensor({hq, lq, d}, dyadic(g, hq * lq * d)), k = tensor({1, lk, d}, dyadic(g, lk * d)),
           v = tensor({1, lk, 2}, dyadic(g, lk * 2));
    const std::int64_t w = 3;
    std::vector<double> m(lq * lk);
    for (std::int64_t i = 0; i < lq; ++i)
        for (std::int64_t j = 0; j < lk; ++j) m[i * lk + j] = oracle::key_visible(i, j, lq, lk, true, w) ? 0.0 : -kInf;
    auto additive = oracle::eval_attention(Params{}, {q.view(), k.view(), v.view(), tensor({lq, lk}, m).view()});
    auto structural = oracle::eval_attention(Params({{"causal", 1}, {"window", 3}}), {q.view(), k.view(), v.view()});
    for (std::size_t o = 0; o < 2; ++o)
        for (std::size_t e = 0; e < additive.values[o].size(); ++e) EXPECT_TRUE(additive.values[o][e] == structural.values[o][e]);
    // a finite -5e4 sentinel is not a mask: a row masked that way is a uniform
    // average with a finite lse, not the empty state
    std::vector<double> all_masked(lq * lk, -kInf), sentinel_row(lq * lk, -5e4);
    auto empty = oracle::eval_attention(Params{}, {q.view(), k.view(), v.view(), tensor({lq, lk}, all_masked).view()});
    auto sentinel = oracle::eval_attention(Params{}, {q.view(), k.view(), v.view(), tensor({lq, lk}, sentinel_row).view()});
    EXPECT_TRUE(oracle::isinf(empty.values[1][0]));
    EXPECT_FALSE(oracle::isinf(sentinel.values[1][0]));
}

TEST(AttentionOracle, SoftcapWithHugeCapIsNoCapToOrderOneOverCSquared) {
    oracle::PrecisionScope p(256);
    std::mt19937_64 g(17);
    const std::int64_t lq = 3, lk = 5, d = 4;
    Tensor q = tensor({1, lq, d}, dyadic(g, lq * d)), k = tensor({1, lk, d}, dyadic(g, lk * d)),
           v = tensor({1, lk, 2}, dyadic(g, lk * 2));
    auto plain = oracle::eval_attention(Params{}, {q.view(), k.view(), v.view()});
    for (double c : {1e3, 1e6}) {
        auto capped = oracle::eval_attention(Params({{"softcap", c}}), {q.view(), k.view(), v.view()});
        // |c tanh(s/c) - s| <= |s|^3 / (3 c^2), |s| <= 8; p moves by <= 2 max|ds|, |v| <= 2
        const double tol = 2 * 2 * 2 * 512.0 / (3 * c * c);
        for (std::size_t e = 0; e < plain.values[0].size(); ++e) {
            const double diff = oracle::to_double(oracle::abs(capped.values[0][e] - plain.values[0][e]));
            EXPECT_LE(diff, tol) << c << " " << e;
        }
        EXPECT_FALSE(capped.values[1][0] == plain.values[1][0]);  // the cap is applied, not ignored
    }
    // a small cap bounds every logit: lse <= c + log Lk
    auto tight = oracle::eval_attention(Params({{"softcap", 0.5}, {"scale", 100}}), {q.view(), k.view(), v.view()});
    for (const Real& l : tight.values[1]) EXPECT_LE(oracle::to_double(l), 0.5 + std::log(5.0) + 1e-12);
}

TEST(AttentionOracle, ScaleZeroMeansOneOverSqrtD) {
    oracle::PrecisionScope p(128);
    std::mt19937_64 g(19);
    Tensor q = tensor({1, 2, 4}, dyadic(g, 8)), k = tensor({1, 3, 4}, dyadic(g, 12)), v = tensor({1, 3, 1}, dyadic(g, 3));
    auto dflt = oracle::eval_attention(Params{}, {q.view(), k.view(), v.view()});
    auto half = oracle::eval_attention(Params({{"scale", 0.5}}), {q.view(), k.view(), v.view()});
    auto one = oracle::eval_attention(Params({{"scale", 1.0}}), {q.view(), k.view(), v.view()});
    for (std::size_t e = 0; e < 2; ++e) {
        EXPECT_TRUE(dflt.values[1][e] == half.values[1][e]);
        EXPECT_FALSE(dflt.values[1][e] == one.values[1][e]);
    }
}

TEST(AttentionOracle, FlashFormEqualsDirectFormForEveryTile) {
    oracle::PrecisionScope p(256);
    std::mt19937_64 g(23);
    const std::int64_t hq = 2, lq = 5, lk = 9, d = 3;
    std::vector<double> qx = dyadic(g, hq * lq * d);
    for (double& x : qx) x *= 8;  // logits up to ~70: many rescales
    Tensor q = tensor({hq, lq, d}, qx), k = tensor({1, lk, d}, dyadic(g, lk * d)), v = tensor({1, lk, 2}, dyadic(g, lk * 2));
    std::vector<double> m = dyadic(g, lq * lk);
    for (std::int64_t j = 0; j < 4; ++j) m[j] = -kInf;  // query 0: an all -inf prefix for tiles <= 4
    const Tensor mask = tensor({lq, lk}, m);
    for (const Params& base : {Params{}, Params({{"causal", 1}}), Params({{"window", 3}, {"softcap", 5}})}) {
        auto direct = oracle::eval_attention(base, {q.view(), k.view(), v.view(), mask.view()});
        for (int block = 1; block <= lk + 1; ++block) {
            Params tiled = base;
            tiled.set("block", block);
            expect_agree(oracle::eval_attention(tiled, {q.view(), k.view(), v.view(), mask.view()}), direct, 200,
                         "block " + std::to_string(block));
        }
    }
}

TEST(AttentionOracle, SplitKvMergedEqualsAttentionOverAllKeys) {
    oracle::PrecisionScope p(256);
    std::mt19937_64 g(29);
    const std::int64_t hq = 2, lq = 3, lk = 7, d = 4, dv = 2;
    const auto qx = dyadic(g, hq * lq * d), kx = dyadic(g, lk * d), vx = dyadic(g, lk * dv), mx = dyadic(g, lq * lk);
    Tensor q = tensor({hq, lq, d}, qx);
    auto full = oracle::eval_attention(Params{}, {q.view(), tensor({1, lk, d}, kx).view(), tensor({1, lk, dv}, vx).view(),
                                                  tensor({lq, lk}, mx).view()});
    // keys [lo, hi) of k, v and the mask's columns
    auto part = [&](std::int64_t lo, std::int64_t hi) {
        std::vector<double> m;
        for (std::int64_t i = 0; i < lq; ++i) m.insert(m.end(), mx.begin() + i * lk + lo, mx.begin() + i * lk + hi);
        return oracle::eval_attention(
            Params{}, {q.view(), tensor({1, hi - lo, d}, {kx.begin() + lo * d, kx.begin() + hi * d}).view(),
                       tensor({1, hi - lo, dv}, {vx.begin() + lo * dv, vx.begin() + hi * dv}).view(),
                       tensor({lq, hi - lo}, m).view()});
    };
    for (std::int64_t a = 0; a <= lk; ++a) {
        auto x = part(0, a), y = part(a, lk);
        for (std::int64_t r = 0; r < hq * lq; ++r) {
            oracle::AttnState<Real> sa{{x.values[0].begin() + r * dv, x.values[0].begin() + (r + 1) * dv}, x.values[1][r]};
            oracle::AttnState<Real> sb{{y.values[0].begin() + r * dv, y.values[0].begin() + (r + 1) * dv}, y.values[1][r]};
            auto m = oracle::lse_merge(sa, sb);
            EXPECT_TRUE(agree(m.lse, full.values[1][r], 240)) << a << " " << r;
            for (std::int64_t e = 0; e < dv; ++e) EXPECT_TRUE(agree(m.o[e], full.values[0][r * dv + e], 200)) << a << " " << r;
        }
    }
}

TEST(AttentionOracle, QkNormHandCheckedCases) {
    oracle::PrecisionScope p(256);
    // q = [3, 4], keys [3, 4] and [-4, 3]: L2-normalized [0.6, 0.8], [0.6, 0.8], [-0.8, 0.6],
    // logits (scale 1) 1 and 0; with RMS they are sqrt(2) times larger: 2 and 0.
    Tensor q = tensor({1, 1, 2}, {3, 4}), k = tensor({1, 2, 2}, {3, 4, -4, 3}), v = tensor({1, 2, 1}, {1, -1});
    Tensor ones = tensor({2}, {1, 1}), w = tensor({2}, {2, 0.5});
    auto l2 = oracle::eval_qk_norm_attention(Params({{"qk_norm", 2}, {"eps", 0}, {"scale", 1}}),
                                             {q.view(), k.view(), v.view(), ones.view(), ones.view()});
    const Real p0 = Real(1) / (Real(1) + oracle::exp(Real(-1)));
    EXPECT_TRUE(agree(l2.values[0][0], 2 * p0 - 1, 240));
    EXPECT_TRUE(agree(l2.values[1][0], oracle::ln(oracle::exp(Real(1)) + 1), 240));
    auto rms = oracle::eval_qk_norm_attention(Params({{"qk_norm", 1}, {"eps", 0}, {"scale", 1}}),
                                              {q.view(), k.view(), v.view(), ones.view(), ones.view()});
    EXPECT_TRUE(agree(rms.values[0][0], 2 / (Real(1) + oracle::exp(Real(-2))) - 1, 240));
    // weights [2, 0.5] on q only: q' = sqrt2 [1.2, 0.4]; logits sqrt2 sqrt2 [0.72 + 0.32, -0.96 + 0.24] = [2.08, -1.44]
    auto weighted = oracle::eval_qk_norm_attention(Params({{"eps", 0}, {"scale", 1}}),
                                                   {q.view(), k.view(), v.view(), w.view(), ones.view()});
    const Real d = Real("2.08") + Real("1.44");
    EXPECT_TRUE(agree(weighted.values[0][0], 2 / (Real(1) + oracle::exp(-d)) - 1, 240));
    // eps is inside the square root: eps = 12.5 halves the mean square of q's row (rms 3.5355 -> 5)
    auto with_eps = oracle::eval_qk_norm_attention(Params({{"eps", 12.5}, {"scale", 1}}),
                                                   {q.view(), tensor({1, 1, 2}, {3, 4}).view(), tensor({1, 1, 1}, {1}).view(),
                                                    ones.view(), ones.view()});
    EXPECT_TRUE(agree(with_eps.values[1][0], Real(25) / 25, 240));  // (q/5).(k/5) = 25/25
}

TEST(AttentionOracle, GatedAttentionMultipliesBySigmoidOfG) {
    oracle::PrecisionScope p(256);
    std::mt19937_64 g(31);
    const std::int64_t hq = 2, lq = 2, lk = 3, d = 2, dv = 2;
    Tensor q = tensor({hq, lq, d}, dyadic(g, hq * lq * d)), k = tensor({1, lk, d}, dyadic(g, lk * d)),
           v = tensor({1, lk, dv}, dyadic(g, lk * dv));
    const std::vector<double> gx{0, 1e4, -1e4, 2, -2, 0.5, 0, 0};
    Tensor gate = tensor({hq, lq, dv}, gx);
    auto plain = oracle::eval_attention(Params({{"causal", 1}}), {q.view(), k.view(), v.view()});
    auto gated = oracle::eval_gated_attention(Params({{"causal", 1}}), {q.view(), k.view(), v.view(), gate.view()});
    EXPECT_TRUE(gated.values[0][0] == plain.values[0][0] / 2);   // sigma(0) = 1/2
    EXPECT_TRUE(agree(gated.values[0][1], plain.values[0][1], 250));  // sigma(1e4) = 1 - e^-1e4
    EXPECT_LT(oracle::to_double(oracle::abs(gated.values[0][2])), 1e-300);  // sigma(-1e4) ~ e^-1e4
    EXPECT_TRUE(agree(gated.values[0][3] + gated.values[0][3] * oracle::exp(Real(-2)), plain.values[0][3], 240));
    for (std::size_t e = 0; e < plain.values[1].size(); ++e) EXPECT_TRUE(gated.values[1][e] == plain.values[1][e]);
}

TEST(AttentionOracle, NaNLogitPoisonsTheRowOnly) {
    oracle::PrecisionScope p(128);
    Tensor q = tensor({1, 2, 2}, {std::numeric_limits<double>::quiet_NaN(), 1, 1, 1}), k = tensor({1, 2, 2}, {1, 0, 0, 1}),
           v = tensor({1, 2, 1}, {1, 3});
    auto out = oracle::eval_attention(Params{}, {q.view(), k.view(), v.view()});
    EXPECT_TRUE(oracle::isnan(out.values[0][0]) && oracle::isnan(out.values[1][0]));
    EXPECT_TRUE(agree(out.values[0][1], Real(2), 120));  // equal logits: mean of 1 and 3
}

TEST(AttentionOracle, PrecisionSelfCheck128Versus256Bits) {
    std::mt19937_64 g(37);
    const std::int64_t hq = 2, lq = 4, lk = 6, d = 8;
    std::vector<double> qx = dyadic(g, hq * lq * d);
    for (double& x : qx) x *= 4;
    Tensor q = tensor({hq, lq, d}, qx), k = tensor({1, lk, d}, dyadic(g, lk * d)), v = tensor({1, lk, 3}, dyadic(g, lk * 3));
    const Params params({{"causal", 1}, {"softcap", 30}, {"block", 4}});
    std::vector<Real> lo;
    {
        oracle::PrecisionScope p(128);
        auto r = oracle::eval_attention(params, {q.view(), k.view(), v.view()});
        lo = r.values[0];
        lo.insert(lo.end(), r.values[1].begin(), r.values[1].end());
    }
    oracle::PrecisionScope p(256);
    auto r = oracle::eval_attention(params, {q.view(), k.view(), v.view()});
    std::vector<Real> hi = r.values[0];
    hi.insert(hi.end(), r.values[1].begin(), r.values[1].end());
    ASSERT_EQ(lo.size(), hi.size());
    for (std::size_t e = 0; e < hi.size(); ++e) {
        const Real scale = std::max(oracle::abs(hi[e]), Real(1));  // o may cancel: compare against |v| ~ 1
        EXPECT_LE(oracle::to_double(oracle::abs(Real(lo[e]) - hi[e]) / scale), std::ldexp(1.0, -115)) << e;
    }
}

TEST(AttentionOracle, ShapeErrorsNameTheInput) {
    Tensor q = tensor({4, 2, 3}, std::vector<double>(24, 0)), k = tensor({2, 5, 3}, std::vector<double>(30, 0)),
           v = tensor({2, 5, 2}, std::vector<double>(20, 0));
    auto message = [](auto f) {
        try {
            f();
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no throw");
    };
    auto names = [&](const std::string& msg, const std::string& input) {
        EXPECT_NE(msg.find("'" + input + "'"), std::string::npos) << msg;
    };
    Tensor k_bad_d = tensor({2, 5, 4}, std::vector<double>(40, 0)), k_bad_h = tensor({3, 5, 3}, std::vector<double>(45, 0)),
           v_bad = tensor({2, 4, 2}, std::vector<double>(16, 0)), mask_bad = tensor({2, 4}, std::vector<double>(8, 0)),
           g_bad = tensor({4, 2, 3}, std::vector<double>(24, 0)), w_bad = tensor({2}, {1, 1}), w = tensor({3}, {1, 1, 1});
    names(message([&] { oracle::eval_attention(Params{}, {q.view(), k_bad_d.view(), v.view()}); }), "k");
    names(message([&] { oracle::eval_attention(Params{}, {q.view(), k_bad_h.view(), v.view()}); }), "k");
    names(message([&] { oracle::eval_attention(Params{}, {q.view(), k.view(), v_bad.view()}); }), "v");
    names(message([&] { oracle::eval_attention(Params{}, {q.view(), k.view(), v.view(), mask_bad.view()}); }), "mask");
    names(message([&] { oracle::eval_attention(Params{}, {k.view(), k.view(), w.view()}); }), "v");
    names(message([&] { oracle::eval_gated_attention(Params{}, {q.view(), k.view(), v.view(), g_bad.view()}); }), "g");
    names(message([&] { oracle::eval_qk_norm_attention(Params{}, {q.view(), k.view(), v.view(), w_bad.view(), w.view()}); }),
          "q_weight");
    names(message([&] { oracle::eval_qk_norm_attention(Params{}, {q.view(), k.view(), v.view(), w.view(), w_bad.view()}); }),
          "k_weight");
    names(message([&] { oracle::eval_attention(Params({{"window", -1}}), {q.view(), k.view(), v.view()}); }), "window");
    names(message([&] { oracle::eval_qk_norm_attention(Params({{"qk_norm", 3}}), {q.view(), k.view(), v.view(), w.view(), w.view()}); }),
          "qk_norm");
    EXPECT_NO_THROW(oracle::eval_attention(Params{}, {q.view(), k.view(), v.view()}));
}

}  // namespace attention_oracle_test
