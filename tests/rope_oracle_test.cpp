// Positional family (sincos_pe, rope): oracle closed forms, the RoPE
// identities (relative-position invariance, norm preservation, pairing
// permutation, offset, NTK), the oracle's precision self-check, special
// values and shape errors.  Comparisons are at oracle precision: 256 bits,
// differences below 2^-200 of the magnitudes involved.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <cstdio>
#include <random>
#include <string>

#include "oracle/rope.hpp"
#include "test_tensors.hpp"

namespace rope_oracle_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using oracle::CosSin;
using oracle::Real;
using conform::testing::tensor;
using oracle::RopeConfig;
using oracle::RopePairing;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Real pow2(long e) {
    Real r;
    mpfr_set_ui_2exp(r.backend().data(), 1, e, MPFR_RNDN);
    return r;
}

// |a − b| <= scale · 2^-bits, evaluated in Real.
::testing::AssertionResult close(const Real& a, const Real& b, const Real& scale, long bits) {
    const Real gap = oracle::abs(a - b);
    if (gap <= scale * pow2(-bits)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "|a - b| = " << oracle::to_double(gap) << " > " << oracle::to_double(scale)
                                         << " * 2^-" << bits << " (a = " << oracle::to_double(a)
                                         << ", b = " << oracle::to_double(b) << ")";
}

std::vector<double> random_values(std::size_t n, unsigned seed) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<double> u(-2.0, 2.0);
    std::vector<double> v(n);
    for (double& x : v) x = u(gen);
    return v;
}

std::vector<Real> exact(const std::vector<double>& v) {
    std::vector<Real> r;
    for (double x : v) r.push_back(oracle::from_double(x));
    return r;
}


std::vector<Real> rope(const Tensor& x, std::map<std::string, double> params) {
    return oracle::eval_rope(Params(std::move(params)), {x.view()}).values[0];
}

Real dot(const std::vector<Real>& a, const std::vector<Real>& b) {
    Real s(0);
    for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

Real real(double v) { return oracle::from_double(v); }

// 60-digit references (mpmath).
const char* kCos1 = "0.540302305868139717400936607442976603732310420617922227670097";
const char* kSin1 = "0.841470984807896506652502321630298999622563060798371065672752";

RopeConfig config(RopePairing p, std::int64_t r, double base = 10000.0, double s = 1.0) {
    return RopeConfig{p, r, base, s};
}

}  // namespace

// ---- closed forms -------------------------------------------------------------

TEST(RopeOracle, PositionZeroIsTheIdentity) {
    oracle::PrecisionScope scope(256);
    const auto xs = random_values(2 * 1 * 12, 1);
    const Tensor x = tensor({2, 1, 12}, xs);
    for (double pairing : {0.0, 1.0}) {
        const auto y = rope(x, {{"pairing", pairing}, {"rotary_dim", 8}});
        ASSERT_EQ(y.size(), xs.size());
        for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(y[i], real(xs[i])) << "element " << i;
    }
}

TEST(RopeOracle, TwoDimsRotateByTheAngleMatrix) {
    // D = 2: θ_0 = b^0 = 1, so position 1 rotates by exactly 1 radian.
    oracle::PrecisionScope scope(256);
    const Tensor x = tensor({1, 1, 2}, {0.75, -2.0});
    const auto y = rope(x, {{"offset", 1}});
    const Real c(kCos1), s(kSin1), x0(0.75), x1(-2.0);
    EXPECT_TRUE(close(y[0], x0 * c - x1 * s, Real(1), 190));
    EXPECT_TRUE(close(y[1], x0 * s + x1 * c, Real(1), 190));
}

TEST(RopeOracle, PairingDecidesWhichDimsRotateTogether) {
    // D = 4, base 16, position 4: pair 0 turns by 4 rad, pair 1 by
    // 4 · 16^(-2/4) = 1 rad.  Interleaved pairs are (0,1),(2,3); half-split
    // pairs are (0,2),(1,3).
    oracle::PrecisionScope scope(256);
    const std::vector<double> xs{0.5, -1.25, 1.5, 0.25};
    const Tensor x = tensor({1, 1, 4}, xs);
    const Real c1(kCos1), s1(kSin1);
    const Real c4("-0.65364362086361191463916818309775038142413359664621824700701");
    const Real s4("-0.756802495307928251372639094511829094135912887336472571485417");
    auto check = [&](const std::vector<Real>& y, int a, int b, const Real& c, const Real& s) {
        EXPECT_TRUE(close(y[a], real(xs[a]) * c - real(xs[b]) * s, Real(4), 190)) << "dims " << a << "," << b;
        EXPECT_TRUE(close(y[b], real(xs[a]) * s + real(xs[b]) * c, Real(4), 190)) << "dims " << a << "," << b;
    };
    const auto yi = rope(x, {{"pairing", 0}, {"base", 16}, {"offset", 4}});
    check(yi, 0, 1, c4, s4);
    check(yi, 2, 3, c1, s1);
    const auto yh = rope(x, {{"pairing", 1}, {"base", 16}, {"offset", 4}});
    check(yh, 0, 2, c4, s4);
    check(yh, 1, 3, c1, s1);
}

TEST(RopeOracle, PartialRotaryFrequenciesAreOverTheRotaryDim) {
    // D = 8, r = 4, base 16, position 4: pair 1 turns by 4 · 16^(-2/4) = 1 rad.
    // Frequencies over the full head dim would give 4 · 16^(-2/8) = 2 rad.
    oracle::PrecisionScope scope(256);
    EXPECT_EQ(oracle::rope_inv_freq(1, 4, Real(16)), Real(0.25));
    const std::vector<double> xs{0.5, -1.25, 1.0, 0.0, 3, 4, 5, 6};
    const auto y = rope(tensor({1, 1, 8}, xs), {{"base", 16}, {"offset", 4}, {"rotary_dim", 4}});
    EXPECT_TRUE(close(y[2], Real(kCos1), Real(1), 190));
    EXPECT_TRUE(close(y[3], Real(kSin1), Real(1), 190));
    for (int d = 4; d < 8; ++d) EXPECT_EQ(y[d], real(xs[d]));
}

TEST(SincosPeOracle, KnownValues) {
    oracle::PrecisionScope scope(256);
    const Tensor pos = tensor({3}, {0, 1, 1048576}, Format::fp32);
    auto pe = oracle::eval_sincos_pe(Params({{"dim", 64}}), {pos.view()});
    ASSERT_EQ(pe.names, std::vector<std::string>{"pe"});
    ASSERT_EQ(pe.shapes[0], (std::vector<std::int64_t>{3, 64}));
    const auto& v = pe.values[0];
    for (int j = 0; j < 64; ++j) EXPECT_EQ(v[j], Real(j % 2 ? 1 : 0)) << "pos 0, column " << j;  // [0, 1, 0, 1, ...]
    // pos 1: columns 0,1 = sin 1, cos 1 (base^0 = 1).
    EXPECT_TRUE(close(v[64], Real(kSin1), Real(1), 190));
    EXPECT_TRUE(close(v[65], Real(kCos1), Real(1), 190));
    // pos 2^20, i = 1: angle 2^20 · 10000^(-2/64) = 786321.0704449892..., a
    // large argument whose reduction needs the guard bits (the reference is
    // mpmath at 120 digits: at 60 digits its own angle was off by 2e-56).
    EXPECT_TRUE(close(v[128 + 2], Real("-0.660280817247105236757610848423743707802822205277703172940153839725211789566"), Real(1), 190));
    EXPECT_TRUE(close(v[128 + 3], Real("0.751018802944037357685983090293954449341953028932161241044598887377815850097"), Real(1), 190));
    // dim 4, pos 1: 10000^(2/4) = 100, so columns 2,3 are sin(0.01), cos(0.01).
    const Tensor one = tensor({1}, {1});
    auto q = oracle::eval_sincos_pe(Params({{"dim", 4}}), {one.view()}).values[0];
    EXPECT_TRUE(close(q[2], Real("0.00999983333416666468254243826909972903896438536016915103387911"), Real(1), 190));
    EXPECT_TRUE(close(q[3], Real("0.999950000416665277780257933752206673212470583980277111122276"), Real(1), 190));
}

// ---- identities -----------------------------------------------------------------

TEST(RopeOracle, RelativePositionInvariance) {
    // <R(m)q, R(n)k> = <R(m+s)q, R(n+s)k>: both equal q^T R(n-m) k.
    oracle::PrecisionScope scope(256);
    const auto q = exact(random_values(16, 2)), k = exact(random_values(16, 3));
    const Real scale = oracle::sqrt(dot(q, q) * dot(k, k));
    struct Case { double m, n, s; };
    const Case cases[] = {{0, 5, 7}, {3, 0, 1000}, {1048576, 1048570, 0}, {1048576, 1048573, -1048000},
                          {0, 1048576, 1048576}, {17, 1048576, -17}, {524287, 1000003, 48573}};
    for (RopePairing p : {RopePairing::interleaved, RopePairing::half_split}) {
        for (std::int64_t r : {16, 10}) {
            const RopeConfig c = config(p, r, 10000.0, 2.0);
            for (const Case& t : cases) {
                const Real a = dot(oracle::rope_vector(q, real(t.m), c), oracle::rope_vector(k, real(t.n), c));
                const Real b =
                    dot(oracle::rope_vector(q, real(t.m + t.s), c), oracle::rope_vector(k, real(t.n + t.s), c));
                EXPECT_TRUE(close(a, b, scale, 200)) << "m " << t.m << " n " << t.n << " s " << t.s << " r " << r;
                // The score does depend on m - n, so the check has teeth.
                const Real moved =
                    dot(oracle::rope_vector(q, real(t.m + 1), c), oracle::rope_vector(k, real(t.n), c));
                EXPECT_FALSE(close(a, moved, scale, 20)) << "m " << t.m << " n " << t.n;
            }
        }
    }
}

TEST(RopeOracle, RotatedPairsKeepTheirNormAndPassThroughIsExact) {
    oracle::PrecisionScope scope(256);
    const std::int64_t H = 2, L = 3, D = 10, r = 6;
    const auto xs = random_values(H * L * D, 4);
    for (double pairing : {0.0, 1.0}) {
        const auto y = rope(tensor({H, L, D}, xs), {{"pairing", pairing}, {"rotary_dim", r}, {"offset", 1048574}});
        for (std::int64_t row = 0; row < H * L; ++row) {
            for (std::int64_t j = 0; j < r / 2; ++j) {
                const auto [a, b] = oracle::rope_pair_dims(static_cast<RopePairing>(pairing), j, r);
                const Real xa = real(xs[row * D + a]), xb = real(xs[row * D + b]);
                const Real& ya = y[row * D + a];
                const Real& yb = y[row * D + b];
                const Real n2 = xa * xa + xb * xb;
                EXPECT_TRUE(close(ya * ya + yb * yb, n2, n2, 248)) << "row " << row << " pair " << j;
                EXPECT_NE(ya, xa);  // it did rotate
            }
            for (std::int64_t d = r; d < D; ++d) EXPECT_EQ(y[row * D + d], real(xs[row * D + d]));
        }
    }
}

TEST(RopeOracle, InterleavedOnPermutedDimsEqualsHalfSplit) {
    // Moving half-split dim j to 2j and dim j + r/2 to 2j+1 (the permutation
    // applied to W_q/W_k when converting checkpoints) turns half-split RoPE
    // into interleaved RoPE: same pairs, same angles, bit for bit.
    oracle::PrecisionScope scope(256);
    const std::int64_t H = 2, L = 3, D = 12, r = 8;
    const auto half = random_values(H * L * D, 5);
    std::vector<double> inter = half;
    for (std::int64_t row = 0; row < H * L; ++row)
        for (std::int64_t j = 0; j < r / 2; ++j) {
            inter[row * D + 2 * j] = half[row * D + j];
            inter[row * D + 2 * j + 1] = half[row * D + j + r / 2];
        }
    const std::map<std::string, double> common{{"rotary_dim", r}, {"offset", 1000}, {"ntk_scale", 3}};
    auto with = [&](double pairing) { auto p = common; p["pairing"] = pairing; return p; };
    const auto yh = rope(tensor({H, L, D}, half), with(1));
    const auto yi = rope(tensor({H, L, D}, inter), with(0));
    const auto yi_unpermuted = rope(tensor({H, L, D}, half), with(0));
    bool pairing_matters = false;
    for (std::int64_t row = 0; row < H * L; ++row) {
        for (std::int64_t j = 0; j < r / 2; ++j) {
            EXPECT_EQ(yi[row * D + 2 * j], yh[row * D + j]);
            EXPECT_EQ(yi[row * D + 2 * j + 1], yh[row * D + j + r / 2]);
        }
        for (std::int64_t d = r; d < D; ++d) EXPECT_EQ(yi[row * D + d], yh[row * D + d]);
        for (std::int64_t d = 0; d < r; ++d) pairing_matters |= yi_unpermuted[row * D + d] != yh[row * D + d];
    }
    EXPECT_TRUE(pairing_matters);
}

TEST(RopeOracle, OffsetShiftsPositions) {
    // KV-cache decoding (seed 001 §1): tokens l of a chunk at offset o are
    // tokens o + l of the whole sequence.
    oracle::PrecisionScope scope(256);
    const std::int64_t H = 2, L = 3, D = 8, o = 5;
    const auto xs = random_values(H * L * D, 6);
    std::vector<double> full(H * (o + L) * D, 0.25);
    for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t l = 0; l < L; ++l)
            for (std::int64_t d = 0; d < D; ++d) full[(h * (o + L) + o + l) * D + d] = xs[(h * L + l) * D + d];
    for (double pairing : {0.0, 1.0}) {
        const auto chunk = rope(tensor({H, L, D}, xs), {{"pairing", pairing}, {"offset", o}});
        const auto whole = rope(tensor({H, o + L, D}, full), {{"pairing", pairing}});
        const auto unshifted = rope(tensor({H, L, D}, xs), {{"pairing", pairing}});
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t l = 0; l < L; ++l)
                for (std::int64_t d = 0; d < D; ++d) {
                    EXPECT_EQ(chunk[(h * L + l) * D + d], whole[(h * (o + L) + o + l) * D + d]);
                    EXPECT_NE(chunk[(h * L + l) * D + d], unshifted[(h * L + l) * D + d]);
                }
    }
    // A long-context offset: each token equals the single-vector formula at o + l.
    const double big = 1048573;
    const auto y = rope(tensor({1, L, D}, std::vector<double>(xs.begin(), xs.begin() + L * D)), {{"offset", big}});
    const RopeConfig c = config(RopePairing::interleaved, D);
    for (std::int64_t l = 0; l < L; ++l) {
        const auto ref = oracle::rope_vector(exact({xs.begin() + l * D, xs.begin() + (l + 1) * D}), real(big + l), c);
        for (std::int64_t d = 0; d < D; ++d) EXPECT_EQ(y[l * D + d], ref[d]);
    }
}

TEST(RopeOracle, NtkScaleMultipliesTheBase) {
    // (3.6): θ'_i = (b·s)^(-2i/r).
    oracle::PrecisionScope scope(256);
    const std::int64_t H = 1, L = 4, D = 8;
    const auto xs = random_values(H * L * D, 7);
    const Tensor x = tensor({H, L, D}, xs);
    const auto plain = rope(x, {{"offset", 100}});
    EXPECT_EQ(rope(x, {{"offset", 100}, {"ntk_scale", 1}}), plain);
    const auto scaled = rope(x, {{"offset", 100}, {"ntk_scale", 4}});
    EXPECT_EQ(rope(x, {{"offset", 100}, {"base", 40000}}), scaled);
    // θ_0 = 1 whatever the base: pair 0 is untouched by the scaling, the others move.
    for (std::int64_t l = 0; l < L; ++l) {
        EXPECT_EQ(scaled[l * D + 0], plain[l * D + 0]);
        EXPECT_EQ(scaled[l * D + 1], plain[l * D + 1]);
        for (std::int64_t d = 2; d < D; ++d) EXPECT_NE(scaled[l * D + d], plain[l * D + d]);
    }
    // base 16, s = 4, r = 4: θ_1 = 64^(-1/2) = 1/8 exactly.
    const RopeConfig c = config(RopePairing::interleaved, 4, 16.0, 4.0);
    EXPECT_EQ(oracle::rope_inv_freq(1, 4, oracle::rope_effective_base<Real>(c)), Real(0.125));
    const auto y = oracle::rope_vector(exact({0, 0, 1, 0}), Real(8), c);  // pair 1 turns by 8/8 = 1 rad
    EXPECT_TRUE(close(y[2], Real(kCos1), Real(1), 190));
    EXPECT_TRUE(close(y[3], Real(kSin1), Real(1), 190));
}

// ---- the oracle's own accuracy ---------------------------------------------------

TEST(RopeOracle, PrecisionSelfCheck128Vs256) {
    const std::int64_t H = 2, L = 6, D = 64;
    const auto xs = random_values(H * L * D, 8);
    const Tensor x = tensor({H, L, D}, xs);
    const std::map<std::string, double> p{{"offset", 1048570}, {"ntk_scale", 8}, {"pairing", 1}};
    std::vector<Real> lo, hi;
    {
        oracle::PrecisionScope scope(128);
        lo = rope(x, p);
    }
    oracle::PrecisionScope scope(256);
    hi = rope(x, p);
    ASSERT_EQ(lo.size(), hi.size());
    for (std::int64_t row = 0; row < H * L; ++row)
        for (std::int64_t j = 0; j < D / 2; ++j) {
            const auto [a, b] = oracle::rope_pair_dims(RopePairing::half_split, j, D);
            const Real mag = oracle::abs(real(xs[row * D + a])) + oracle::abs(real(xs[row * D + b]));
            EXPECT_TRUE(close(lo[row * D + a], hi[row * D + a], mag, 120));
            EXPECT_TRUE(close(lo[row * D + b], hi[row * D + b], mag, 120));
        }
    // sincos_pe at huge fp32 positions (2^24, 3e38): argument reduction of
    // angles up to 2^128 still leaves P correct bits.
    const Tensor pos = tensor({4}, {16777216, 16777215, 1e20, 3e38}, Format::fp32);
    std::vector<Real> plo, phi;
    {
        oracle::PrecisionScope s128(128);
        plo = oracle::eval_sincos_pe(Params({{"dim", 32}}), {pos.view()}).values[0];
    }
    phi = oracle::eval_sincos_pe(Params({{"dim", 32}}), {pos.view()}).values[0];
    for (std::size_t i = 0; i < plo.size(); ++i) EXPECT_TRUE(close(plo[i], phi[i], Real(1), 126)) << "element " << i;
}

TEST(RopeOracle, GuardBitsMatterAtLongPositions) {
    // cos/sin of m·θ_j at m = 2^20: the guarded 128-bit value agrees with a
    // 1024-bit reference to 2^-127; an angle formed at 128 bits loses ~20
    // bits (the check that the guard bits are needed, not decoration).
    std::vector<Real> ref_c;
    {
        oracle::PrecisionScope scope(1024);
        for (int j = 0; j < 8; ++j) ref_c.push_back(oracle::rope_cos_sin(Real(1048576), j, 16, Real(10000)).cos);
    }
    oracle::PrecisionScope scope(128);
    Real worst_naive(0);
    for (int j = 0; j < 8; ++j) {
        const Real c = oracle::rope_cos_sin(Real(1048576), j, 16, Real(10000)).cos;
        EXPECT_TRUE(close(c, ref_c[j], Real(1), 127)) << "pair " << j;
        const Real angle = Real(1048576) * oracle::rope_inv_freq(j, 16, Real(10000));
        const Real naive = oracle::apply(mpfr_cos, angle);
        worst_naive = std::max(worst_naive, oracle::abs(naive - ref_c[j]));
    }
    EXPECT_GT(worst_naive, pow2(-122));
}

// ---- special values ----------------------------------------------------------------

TEST(RopeOracle, SpecialValuesStayInTheirPair) {
    oracle::PrecisionScope scope(256);
    // Interleaved, D = 8, r = 6: pairs (0,1), (2,3), (4,5); dims 6, 7 pass through.
    const std::vector<double> xs{kNaN, 1.0, 0.5, -0.5, 2.0, kInf, kNaN, -kInf};
    const auto y = rope(tensor({1, 1, 8}, xs), {{"rotary_dim", 6}, {"offset", 3}});
    EXPECT_TRUE(oracle::isnan(y[0]) && oracle::isnan(y[1]));  // NaN poisons its pair
    EXPECT_FALSE(oracle::isnan(y[2]) || oracle::isinf(y[2]) || oracle::isnan(y[3]) || oracle::isinf(y[3]));
    // (2, Inf) at angle 3·θ_2: y4 = 2c − Inf·s, y5 = 2s + Inf·c, both infinite.
    const auto cs = oracle::rope_cos_sin(Real(3), 2, 6, Real(10000));
    EXPECT_TRUE(oracle::isinf(y[4]) && oracle::signbit(y[4]) == !oracle::signbit(cs.sin));
    EXPECT_TRUE(oracle::isinf(y[5]) && oracle::signbit(y[5]) == oracle::signbit(cs.cos));
    EXPECT_TRUE(oracle::isnan(y[6]));  // pass-through keeps its value, NaN included
    EXPECT_TRUE(oracle::isinf(y[7]) && oracle::signbit(y[7]));
    // At position 0 (c = 1, s = 0) IEEE gives Inf·0 = NaN: (1, Inf) -> (NaN, Inf).
    const auto z = rope(tensor({1, 1, 2}, {1.0, kInf}), {});
    EXPECT_TRUE(oracle::isnan(z[0]));
    EXPECT_TRUE(oracle::isinf(z[1]) && !oracle::signbit(z[1]));
    // sincos_pe: a non-finite position gives a NaN row, its neighbours are finite.
    const Tensor pos = tensor({3}, {kInf, 2, kNaN});
    const auto pe = oracle::eval_sincos_pe(Params({{"dim", 4}}), {pos.view()}).values[0];
    for (int i : {0, 1, 2, 3, 8, 9, 10, 11}) EXPECT_TRUE(oracle::isnan(pe[i])) << i;
    for (int i : {4, 5, 6, 7}) EXPECT_FALSE(oracle::isnan(pe[i])) << i;
}

// ---- shape and parameter errors ----------------------------------------------------

namespace {
void expect_invalid(const std::function<void()>& f, const std::vector<std::string>& needles) {
    try {
        f();
        ADD_FAILURE() << "no std::invalid_argument";
    } catch (const std::invalid_argument& e) {
        const std::string msg = e.what();
        for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    }
}
}  // namespace

TEST(RopeOracle, ShapeAndParameterErrorsNameOpInputAndDimension) {
    oracle::PrecisionScope scope(128);
    const Tensor x3 = tensor({1, 2, 4}, std::vector<double>(8, 1.0));
    const Tensor x2 = tensor({2, 4}, std::vector<double>(8, 1.0));
    const Tensor odd = tensor({1, 1, 5}, std::vector<double>(5, 1.0));
    auto run = [](const Tensor& t, std::map<std::string, double> p) { return [&t, p] { rope(t, p); }; };
    expect_invalid(run(x2, {}), {"rope", "'x'", "rank 3"});
    expect_invalid(run(odd, {}), {"rope", "'x'", "dimension 2", "5"});
    expect_invalid(run(x3, {{"rotary_dim", 6}}), {"rope", "'x'", "dimension 2", "rotary_dim"});
    expect_invalid(run(x3, {{"rotary_dim", 3}}), {"rope", "rotary_dim"});
    expect_invalid(run(x3, {{"pairing", 2}}), {"rope", "pairing"});
    expect_invalid(run(x3, {{"base", 0}}), {"rope", "base"});
    expect_invalid(run(x3, {{"ntk_scale", -1}}), {"rope", "ntk_scale"});
    expect_invalid(run(x3, {{"offset", 0.5}}), {"rope", "offset"});
    expect_invalid([&] { oracle::eval_rope(Params(), {x3.view(), x3.view()}); }, {"rope", "x"});
    const Tensor p2 = tensor({2, 1}, {0, 1});
    const Tensor p1 = tensor({2}, {0, 1});
    expect_invalid([&] { oracle::eval_sincos_pe(Params({{"dim", 4}}), {p2.view()}); }, {"sincos_pe", "'positions'"});
    expect_invalid([&] { oracle::eval_sincos_pe(Params({{"dim", 5}}), {p1.view()}); }, {"sincos_pe", "'dim'"});
    expect_invalid([&] { oracle::eval_sincos_pe(Params(), {p1.view()}); }, {"sincos_pe", "'dim'"});
}

// ---- the documented error budget against modelled kernels ------------------------

namespace {

// A table-driven RoPE kernel (interleaved, full rotary): θ_j, m·θ_j and
// cos/sin in `Angle` (double or float), table entries rounded to `table`,
// the rotation in float, the result rounded to `out`.
template <class Angle>
std::vector<double> table_kernel(const std::vector<double>& x, double m, double base, Format table, Format out) {
    const std::size_t D = x.size();
    std::vector<double> y(D);
    for (std::size_t j = 0; j < D / 2; ++j) {
        const Angle theta = std::pow(Angle(base), -Angle(2 * j) / Angle(D));
        const Angle a = Angle(m) * theta;
        const float c = static_cast<float>(decode(table, encode(table, std::cos(a))));
        const float s = static_cast<float>(decode(table, encode(table, std::sin(a))));
        const float x0 = static_cast<float>(x[2 * j]), x1 = static_cast<float>(x[2 * j + 1]);
        const float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
        y[2 * j] = decode(out, encode(out, y0));
        y[2 * j + 1] = decode(out, encode(out, y1));
    }
    return y;
}

struct BudgetCheck {
    double max_utilization = 0;   // max |ŷ − y| / bound
    double max_invariance = 0;    // max |Ŝ − S| / derived score budget
};

// Kernel outputs at positions m and m + shift for q, k: element utilization
// against rope_pair_bound and the score <ŷq(m), ŷk(n)> against the bound
// derived from the element bounds (the dot product itself is exact here).
template <class Angle>
BudgetCheck check_budget(Format table, Format out, const std::vector<double>& positions) {
    oracle::PrecisionScope scope(128);
    const std::size_t D = 64;
    const auto qd = random_values(D, 11), kd = random_values(D, 12);
    auto to_fp32 = [](std::vector<double> v) { for (double& e : v) e = static_cast<float>(e); return v; };
    const auto q = to_fp32(qd), k = to_fp32(kd);
    const RopeConfig c = config(RopePairing::interleaved, D);
    const oracle::RopeTableModel model{0x1p-53, 0x1p-52, Format::fp32, Format::fp32, out};
    BudgetCheck r;
    // Exact outputs, kernel outputs and element bounds of one vector at m.
    auto run = [&](const std::vector<double>& x, double m, std::vector<Real>& exact_y, std::vector<double>& got,
                   std::vector<double>& bound) {
        const auto row = oracle::rope_table_row(real(m), c);
        exact_y = oracle::rope_apply(exact(x), row, c);
        got = table_kernel<Angle>(x, m, 10000.0, table, out);
        bound.assign(D, 0);
        for (std::size_t j = 0; j < D / 2; ++j) {
            const double cj = oracle::to_double(row[j].cos), sj = oracle::to_double(row[j].sin);
            const double log_theta = 2.0 * j / D * std::log(10000.0);
            const auto e = oracle::rope_table_error(model, m * std::exp(-log_theta), log_theta, cj, sj);
            const auto [ba, bb] = oracle::rope_pair_bound(model, e, x[2 * j], x[2 * j + 1], cj, sj,
                                                          oracle::to_double(exact_y[2 * j]),
                                                          oracle::to_double(exact_y[2 * j + 1]));
            bound[2 * j] = ba, bound[2 * j + 1] = bb;
        }
        for (std::size_t i = 0; i < D; ++i)
            r.max_utilization = std::max(
                r.max_utilization, oracle::to_double(oracle::abs(real(got[i]) - exact_y[i])) / bound[i]);
    };
    auto score = [&](double m, double n) {
        std::vector<Real> eq, ek;
        std::vector<double> gq, gk, bq, bk;
        run(q, m, eq, gq, bq);
        run(k, n, ek, gk, bk);
        Real s(0);
        double budget = 0;
        for (std::size_t i = 0; i < D; ++i) {
            s += real(gq[i]) * real(gk[i]);
            budget += bq[i] * std::fabs(oracle::to_double(ek[i])) + std::fabs(oracle::to_double(eq[i])) * bk[i] +
                      bq[i] * bk[i];
        }
        return std::pair{s, budget};
    };
    // Ŝ(m, m − 5) and Ŝ(5, 0) share the exact score (relative position 5);
    // each is within its budget of it.
    for (double m : positions) {
        if (m < 5) continue;
        const auto [s_far, b_far] = score(m, m - 5);
        const auto [s_near, b_near] = score(5, 0);
        r.max_invariance =
            std::max(r.max_invariance, oracle::to_double(oracle::abs(s_far - s_near)) / (b_far + b_near));
    }
    return r;
}

const std::vector<double> kPositions{1, 2, 3, 7, 100, 4095, 65537, 524289, 1048575, 1048576};

}  // namespace

TEST(RopeBudget, Fp32TablesFromDoubleAnglesStayWithinBudget) {
    for (Format out : {Format::fp32, Format::bf16, Format::fp16}) {
        const auto r = check_budget<double>(Format::fp32, out, kPositions);
        EXPECT_LE(r.max_utilization, 1.0) << name(out);
        EXPECT_LE(r.max_invariance, 1.0) << name(out);
        // Not vacuous: the budget is within a small factor of what a correct kernel does.
        if (out == Format::fp32) {
            EXPECT_GT(r.max_utilization, 0.05);
        }
        std::printf("fp32 tables, %s out: max utilization %.3f, invariance %.3f\n", name(out),
                    r.max_utilization, r.max_invariance);
    }
}

TEST(RopeBudget, Fp32AnglesOrBf16TablesBreakIt) {
    // The seed's precompute_rope_params forms θ and m·θ in float32: at long
    // positions the angle is off by up to ulp(m θ)/2 = 2^-4 rad.
    const auto fp32_angles = check_budget<float>(Format::fp32, Format::fp32, {1048575, 1048576});
    EXPECT_GT(fp32_angles.max_utilization, 100.0);
    EXPECT_GT(fp32_angles.max_invariance, 1.0);
    // Tables cast to BF16 (`cos.to(x.dtype)`): 2^-9 relative table error.
    const auto bf16_tables = check_budget<double>(Format::bf16, Format::fp32, {7, 100});
    EXPECT_GT(bf16_tables.max_utilization, 100.0);
    std::printf("fp32 angles at 2^20: utilization %.3g, invariance %.3g; bf16 tables: utilization %.3g\n",
                fp32_angles.max_utilization, fp32_angles.max_invariance, bf16_tables.max_utilization);
}

// ---- frequency scaling (docs/rope.md, "Frequency scaling") -----------------------

namespace {

oracle::RopeScaling llama31() {
    oracle::RopeScaling sc;
    sc.kind = oracle::RopeScalingKind::llama3;
    sc.factor = 8, sc.low_freq_factor = 1, sc.high_freq_factor = 4, sc.original_max_pos = 8192;
    return sc;
}

oracle::RopeScaling deepseek_yarn() {
    oracle::RopeScaling sc;
    sc.kind = oracle::RopeScalingKind::yarn;
    sc.factor = 40, sc.original_max_pos = 4096, sc.beta_fast = 32, sc.beta_slow = 1;
    return sc;
}

}  // namespace

TEST(RopeOracleScaling, LinearIsPositionInterpolation) {
    oracle::PrecisionScope scope(128);
    RopeConfig c = config(RopePairing::interleaved, 16);
    c.scaling.kind = oracle::RopeScalingKind::linear;
    c.scaling.factor = 4;
    for (double m : {3.0, 1000.0, 1048573.0})
        for (std::int64_t j = 0; j < 8; ++j) {
            const CosSin<Real> got = oracle::rope_scaled_cos_sin(real(m), j, c);
            const CosSin<Real> want = oracle::rope_cos_sin(real(m) / 4, j, 16, Real(10000));
            EXPECT_TRUE(close(got.cos, want.cos, Real(1), 124)) << "m " << m << " j " << j;
            EXPECT_TRUE(close(got.sin, want.sin, Real(1), 124)) << "m " << m << " j " << j;
        }
}

// Llama 3.1's 128-dim heads (base 5e5): the fast pairs keep θ, the slow ones
// take θ/8, the ones between blend by σ = (L0 θ/2π − 1)/3; every band occurs.
TEST(RopeOracleScaling, Llama3KeepsBlendsAndDivides) {
    const oracle::RopeScaling sc = llama31();
    int kept = 0, blended = 0, divided = 0;
    for (std::int64_t j = 0; j < 64; ++j) {
        const double theta = std::pow(5e5, -2.0 * static_cast<double>(j) / 128), rho = 8192 * theta / (2 * M_PI);
        const double g = oracle::rope_freq_multiplier<double>(j, 128, theta, 5e5, sc);
        if (rho > 4) {
            ++kept;
            EXPECT_EQ(g, 1.0) << j;
        } else if (rho < 1) {
            ++divided;
            EXPECT_EQ(g, 0.125) << j;
        } else {
            ++blended;
            EXPECT_NEAR(g, (rho - 1) / 3 + (1 - (rho - 1) / 3) / 8, 1e-15) << j;
        }
    }
    EXPECT_GT(kept, 0);
    EXPECT_GT(blended, 0);
    EXPECT_GT(divided, 0);
}

// The blend meets both ends: w → 0 as ρ → l from above, w → 1 as ρ → h from
// below, so a decision that flips on rounding moves θ' by no more than the
// rounding itself (what rope_theta_error_units relies on).
TEST(RopeOracleScaling, Llama3IsContinuousAtItsBandEdges) {
    oracle::PrecisionScope scope(128);
    const oracle::RopeScaling sc = llama31();
    const Real two_pi = 2 * oracle::pi();
    for (const Real& d : {pow2(-40), -pow2(-40)}) {
        const Real at_low = two_pi * (1 + d) / 8192, at_high = two_pi * 4 * (1 + d) / 8192;
        const Real w_low = oracle::rope_keep_weight<Real>(5, 128, at_low, Real(5e5), sc);
        const Real w_high = oracle::rope_keep_weight<Real>(5, 128, at_high, Real(5e5), sc);
        EXPECT_TRUE(close(w_low, Real(0), Real(1), 40)) << oracle::to_double(w_low);
        EXPECT_TRUE(close(w_high, Real(1), Real(1), 39)) << oracle::to_double(w_high);
    }
}

// DeepSeek-V3's 64 rotary dims, base 1e4, L0 4096, β 32 / 1: the correction
// range is r ln(L0/(2πβ))/(2 ln b) = 10.47… and 22.51…, truncated to [10, 23].
TEST(RopeOracleScaling, YarnRangeAndRampOfDeepSeekV3) {
    oracle::PrecisionScope scope(128);
    oracle::RopeScaling sc = deepseek_yarn();
    const auto [lo, hi] = oracle::rope_yarn_range<Real>(64, Real(10000), sc);
    EXPECT_EQ(lo, Real(10));
    EXPECT_EQ(hi, Real(23));
    EXPECT_EQ(oracle::rope_yarn_range<double>(64, 10000.0, sc), (std::pair<double, double>{10, 23}));
    const Real theta(0.5);  // the weight depends on j alone
    EXPECT_EQ(oracle::rope_keep_weight<Real>(10, 64, theta, Real(10000), sc), Real(1));
    EXPECT_EQ(oracle::rope_keep_weight<Real>(23, 64, theta, Real(10000), sc), Real(0));
    EXPECT_TRUE(close(oracle::rope_keep_weight<Real>(16, 64, theta, Real(10000), sc), Real(7) / 13, Real(1), 126));
    EXPECT_TRUE(close(oracle::rope_freq_multiplier<Real>(30, 64, theta, Real(10000), sc), Real(1) / 40, Real(1), 126));
    sc.truncate = false;
    const auto [ulo, uhi] = oracle::rope_yarn_range<Real>(64, Real(10000), sc);
    EXPECT_NEAR(oracle::to_double(ulo), 64 * std::log(4096 / (64 * M_PI)) / (2 * std::log(1e4)), 1e-13);
    EXPECT_NEAR(oracle::to_double(uhi), 64 * std::log(4096 / (2 * M_PI)) / (2 * std::log(1e4)), 1e-13);
}

TEST(RopeOracleScaling, AttentionFactorScalesTheRotation) {
    oracle::PrecisionScope scope(128);
    RopeConfig plain = config(RopePairing::half_split, 16);
    plain.scaling = deepseek_yarn();
    RopeConfig scaled = plain;
    scaled.scaling.attention_factor = 0.1 * std::log(40.0) + 1;
    const std::vector<Real> x = exact(random_values(16, 3));
    const auto a = oracle::rope_vector(x, real(77777), plain), b = oracle::rope_vector(x, real(77777), scaled);
    for (std::size_t i = 0; i < x.size(); ++i)
        EXPECT_TRUE(close(b[i], a[i] * real(scaled.scaling.attention_factor), Real(4), 124)) << i;
}

// The scaled angles keep their guard bits: 128-bit values agree with 256-bit
// ones at offset 2^20 for llama3, yarn and untruncated yarn.
TEST(RopeOracleScaling, PrecisionSelfCheck128Vs256) {
    const std::int64_t H = 1, L = 4, D = 64;
    const auto xs = random_values(H * L * D, 9);
    const Tensor x = tensor({H, L, D}, xs);
    const std::vector<std::map<std::string, double>> configs = {
        {{"offset", 1048570}, {"scaling", 2}, {"factor", 8}, {"original_max_pos", 64}, {"base", 500000}},
        {{"offset", 1048570}, {"scaling", 3}, {"factor", 40}, {"original_max_pos", 4096}},
        {{"offset", 1048570}, {"scaling", 3}, {"factor", 4}, {"truncate", 0}, {"attention_factor", 1.1386}},
    };
    for (const auto& p : configs) {
        std::vector<Real> lo, hi;
        {
            oracle::PrecisionScope scope(128);
            lo = rope(x, p);
        }
        oracle::PrecisionScope scope(256);
        hi = rope(x, p);
        for (std::size_t i = 0; i < lo.size(); ++i) EXPECT_TRUE(close(lo[i], hi[i], Real(4), 120)) << "element " << i;
    }
}

TEST(RopeOracleScaling, ParameterErrorsNameTheParameter) {
    const Tensor x = tensor({1, 1, 4}, {1, 2, 3, 4});
    const auto message = [&](std::map<std::string, double> p) {
        try {
            rope(x, std::move(p));
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message({{"scaling", 4}}).find("'scaling'"), std::string::npos);
    EXPECT_NE(message({{"scaling", 2}, {"low_freq_factor", 4}, {"high_freq_factor", 4}}).find("'high_freq_factor'"),
              std::string::npos);
    EXPECT_NE(message({{"scaling", 3}, {"base", 1}}).find("'base'"), std::string::npos);
    EXPECT_NE(message({{"scaling", 1}, {"factor", 0}}).find("'factor'"), std::string::npos);
    EXPECT_NE(message({{"attention_factor", -1}}).find("'attention_factor'"), std::string::npos);
    // A truncated yarn range whose end lies within 1e-16 of an integer (19.99999999999999995):
    // the kernels' double floor and the exact one differ by a pair.  Refused.
    const Tensor wide = tensor({1, 1, 128}, std::vector<double>(128, 1.0));
    try {
        rope(wide, {{"scaling", 3}, {"factor", 40}, {"original_max_pos", 4096}, {"base", 15448.855965331382}});
        ADD_FAILURE() << "an undetermined correction range was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("correction range end"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(rope(wide, {{"scaling", 3}, {"factor", 40}, {"original_max_pos", 4096}, {"base", 10000}}));
}

}  // namespace rope_oracle_test
