// The verdict core (properties/verdict.hpp, profile.hpp, statistics.hpp,
// sensitivity.hpp; docs/numerics.md "Verdicts"): two tiers of every bound,
// elements not judged, accuracy profiles, rounding-bias statistics, the
// probabilistic model's breaches and the sensitivity search.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "golden/golden.hpp"
#include "oracle/bound.hpp"
#include "properties/sensitivity.hpp"
#include "properties/statistics.hpp"
#include "properties/verdict.hpp"
#include "test_tensors.hpp"

namespace verdict_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using namespace conform::props;
using conform::testing::tensor;

namespace {

const KernelInfo& kernel(const std::string& name) {
    const KernelInfo* k = builtin_registry().find(name);
    if (!k) throw std::runtime_error("no kernel " + name);
    return *k;
}

// A one-output case judged by hand: values, references and bounds as given.
CaseEval handmade(Format f, const std::vector<double>& got, const std::vector<double>& exact,
                  const std::vector<double>& bound, std::vector<std::int64_t> shape = {}) {
    if (shape.empty()) shape = {static_cast<std::int64_t>(got.size())};
    static const KernelInfo k = kernel("cpu.simd.rms_norm.fp32");
    CaseEval e;
    e.kernel = &k;
    e.op = find_op("rms_norm");
    OutputEval o;
    o.name = "y";
    o.format = f;
    o.got = tensor(shape, got, f);
    std::vector<double> rounded;
    for (double x : exact) rounded.push_back(decode(f, encode(f, x)));
    o.ref = tensor(shape, rounded, f);
    o.exact = exact;
    o.rigorous = o.probabilistic = bound;
    for (double x : exact) o.scale.push_back(std::fabs(x)), o.region.push_back(Region::normal);
    e.outputs.push_back(std::move(o));
    return e;
}

// rows x n values drawn around `mean` with uniform spread +-`spread`, in fp32.
Tensor rows_around(double mean, double spread, std::int64_t rows, std::int64_t n, std::uint64_t seed) {
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<double> u(-spread, spread);
    std::vector<double> v(static_cast<std::size_t>(rows * n));
    for (double& x : v) x = mean + u(g);
    return tensor({rows, n}, v, Format::fp32);
}

}  // namespace

// gamma_k answers for the tier in scope: rigorous k u / (1 - k u), or the
// smaller of that and Higham-Mary's exp(lambda sqrt(k) u + k u^2/(1-u)) - 1.
TEST(Tiers, GammaAnswersForTheTierInScope) {
    const double u = 0x1p-24;
    EXPECT_DOUBLE_EQ(oracle::gamma(4096, u), 4096 * u / (1 - 4096 * u));  // no scope: rigorous
    {
        oracle::TierScope s(oracle::Tier::probabilistic);
        EXPECT_DOUBLE_EQ(oracle::gamma(4096, u), std::expm1(10 * 64 * u + 4096 * u * u / (1 - u)));
        EXPECT_TRUE(s.sharpened());
    }
    {
        oracle::TierScope s(oracle::Tier::probabilistic);
        EXPECT_DOUBLE_EQ(oracle::gamma(50, u), 50 * u / (1 - 50 * u));  // lambda sqrt(50) > 50: rigorous is smaller
        EXPECT_FALSE(s.sharpened());
    }
    EXPECT_EQ(oracle::gamma_rigorous(300, 0x1p-8), INFINITY);  // k u >= 1: no finite rigorous constant
    EXPECT_LT(oracle::tier_failure_probability(oracle::kLambda, 0x1p-8), 6e-22);
}

TEST(Profiles, ParseTextAndErrors) {
    EXPECT_EQ(parse_profile("").text(), "strict");
    EXPECT_EQ(parse_profile("ulp:4+ftz").text(), "ulp:4+ftz");
    EXPECT_EQ(parse_profile("ieee+faithful").text(), "faithful+ieee");
    EXPECT_EQ(parse_profile("ulp:1").rank, kRankStrict);
    EXPECT_LT(parse_profile("cr").rank, parse_profile("faithful").rank);
    EXPECT_LT(parse_profile("rigorous").rank, parse_profile("ulp:2").rank);
    for (const char* bad : {"ulp:", "ulp:0", "ulp:x", "strict+cr", "ftz+ftz", "loose"})
        EXPECT_THROW(parse_profile(bad), std::invalid_argument) << bad;
}

// One fp32 element per rung: the correctly rounded value, the other
// neighbour of the exact value, an error within the bound, two ulps outside it.
TEST(Verdict, EachElementMeetsTheTightestRungItCan) {
    const double x = 1 + 0x1p-25 + 0x1p-30;  // between 1 and 1 + 2^-23, nearer 1
    const double next = 1 + 0x1p-23;
    const CaseEval e = handmade(Format::fp32, {1, next, next, 1 + 0x1p-21}, {x, x, x, x},
                                {1, 1, 2 * 0x1p-23, 2 * 0x1p-23});
    Stats s;
    const CaseResult strict = judge_case(e, parse_profile("strict"), &s);
    EXPECT_FALSE(strict.pass);  // the last element: 3.9 ulp, beyond its bound
    EXPECT_NE(strict.message.find("exceeds the probabilistic bound"), std::string::npos) << strict.message;
    EXPECT_EQ(tightest_profile(s), "ulp:4");
    EXPECT_TRUE(judge_case(e, parse_profile("ulp:4")).pass);
    EXPECT_FALSE(judge_case(e, parse_profile("ulp:3")).pass);
    const CaseEval first_two = handmade(Format::fp32, {1, next}, {x, x}, {1, 1});
    EXPECT_TRUE(judge_case(first_two, parse_profile("faithful")).pass);
    EXPECT_FALSE(judge_case(first_two, parse_profile("cr")).pass);
    // A bound tighter than faithful rounding: faithful is no looser than strict.
    const CaseEval tight = handmade(Format::fp32, {1, next}, {x, x}, {0x1p-24, 0x1p-24});
    EXPECT_FALSE(judge_case(tight, parse_profile("faithful")).pass);
    EXPECT_FALSE(judge_case(tight, parse_profile("strict")).pass);
    EXPECT_TRUE(judge_case(tight, parse_profile("ulp:2")).pass);
}

// An infinity where the exact value is finite: the rounding of a value past
// the overflow threshold (max + half an ulp = 2^128 - 2^103 in FP32) passes
// when the bound reaches it on the same side, with utilization (threshold -
// |exact|) / bound; a bound short of it, or the other sign, is a class
// mismatch (lse_merge of two rows of FLT_MAX: weights summing to 1 + u).
TEST(Verdict, AnOverflowWithinTheBoundOfTheThresholdPasses) {
    const double max = 0x1.fffffep+127;
    Stats s;
    const CaseResult ok = judge_case(handmade(Format::fp32, {INFINITY}, {max}, {0x1p106}), parse_profile("strict"), &s);
    EXPECT_TRUE(ok.pass) << ok.message;
    EXPECT_EQ(ok.judged, 1);
    EXPECT_DOUBLE_EQ(s.max_util(), 0x1p103 / 0x1p106);
    const CaseResult short_of = judge_case(handmade(Format::fp32, {INFINITY}, {max}, {0x1p100}), parse_profile("strict"));
    EXPECT_FALSE(short_of.pass);
    EXPECT_NE(short_of.message.find("special-value class mismatch (want finite, got +Inf)"), std::string::npos)
        << short_of.message;
    EXPECT_FALSE(judge_case(handmade(Format::fp32, {-INFINITY}, {max}, {0x1p106}), parse_profile("strict")).pass);
    EXPECT_FALSE(judge_case(handmade(Format::fp32, {INFINITY}, {2}, {1}), parse_profile("strict")).pass);
}

// An infinite bound or one at least the result's magnitude judges nothing:
// the element is counted, never passed; a case of nothing else is no pass.
TEST(Verdict, VacuousBoundsLeaveElementsNotJudged) {
    const CaseEval e = handmade(Format::fp32, {2.5, 7}, {2, 2}, {INFINITY, 2});
    Stats s;
    const CaseResult r = judge_case(e, parse_profile("strict"), &s);
    EXPECT_TRUE(r.pass);
    EXPECT_EQ(r.judged, 0);
    EXPECT_EQ(r.not_judged, 2);
    EXPECT_FALSE(r.passed());
    EXPECT_EQ(s.not_judged_reasons().at("y: infinite bound"), 1);
    EXPECT_EQ(s.not_judged_reasons().at("y: bound at least the result's magnitude"), 1);
    // The correctly rounded result needs no bound: judged (and passed) even so.
    const CaseResult exact = judge_case(handmade(Format::fp32, {2}, {2}, {INFINITY}), parse_profile("strict"));
    EXPECT_TRUE(exact.passed());
    // A finite, meaningful bound judges: 2.5 against 2 +- 0.4 fails.
    EXPECT_FALSE(judge_case(handmade(Format::fp32, {2.5}, {2}, {0.4}), parse_profile("strict")).pass);
}

// layer_norm of a constant row with eps = 0 is 0/0 (docs/norm.md): a
// textbook two-pass kernel gives NaN or +-w + b there, and neither is judged.
TEST(Verdict, ConstantRowWithZeroEpsIsNotJudged) {
    const Tensor x = tensor({2, 5}, {0.1, 0.1, 0.1, 0.1, 0.1, 3, 3, 3, 3, 3}, Format::fp32);
    const Tensor w = tensor({5}, {1, 2, 3, 4, 5}, Format::fp32), b = tensor({5}, {0, 1, 0, 1, 0}, Format::fp32);
    const Params p({{"eps", 0.0}});
    for (const char* name : {"cpu.naive.layer_norm.fp32", "cpu.simd.layer_norm.fp32"}) {
        Stats s;
        const CaseResult r = check_case(kernel(name), p, {x.view(), w.view(), b.view()}, &s);
        EXPECT_TRUE(r.pass) << name << ": " << r.message;
        EXPECT_EQ(r.judged, 0) << name;
        EXPECT_FALSE(r.passed()) << name;
        EXPECT_EQ(s.not_judged(), 10) << name;
    }
    // With eps > 0 the same rows are judged (y = b exactly).
    EXPECT_TRUE(check_case(kernel("cpu.naive.layer_norm.fp32"), Params({{"eps", 1e-5}}), {x.view(), w.view(), b.view()}).passed());
}

// Rows with mean >> spread: the one-pass E[x^2] - E[x]^2 cancels and fails;
// the textbook two-pass kernel passes; the built-in kernel, whose mean
// follows the spread (declared centred_mean), is judged to a far tighter bound.
TEST(Verdict, OnePassVarianceFailsOnLargeMeanRows) {
    const Tensor x = rows_around(1000, 1, 8, 256, 7);
    const Tensor w = tensor(std::vector<std::int64_t>{256}, std::vector<double>(256, 1.0), Format::fp32);
    const Tensor b = tensor(std::vector<std::int64_t>{256}, std::vector<double>(256, 0.0), Format::fp32);
    const Params p({{"eps", 1e-5}});
    const std::vector<TensorView> in{x.view(), w.view(), b.view()};
    EXPECT_FALSE(check_case(kernel("mutant.layer_norm.one_pass_var.fp32"), p, in).pass);
    EXPECT_TRUE(check_case(kernel("cpu.naive.layer_norm.fp32"), p, in).passed());
    Stats simd;
    EXPECT_TRUE(check_case(kernel("cpu.simd.layer_norm.fp32"), p, in, &simd).passed());
    KernelInfo undeclared = kernel("cpu.simd.layer_norm.fp32");
    undeclared.declared.clear();
    Stats plain;
    EXPECT_TRUE(check_case(undeclared, p, in, &plain).passed());
    EXPECT_GT(simd.max_util(), 10 * plain.max_util()) << "the centred-mean bound is not sharper";
}

// Terms absorbed below half an ulp of the running sum all err one way: the
// probabilistic model does not hold, the case falls back to the rigorous
// tier, and a correct sequential kernel passes there although it exceeds
// the probabilistic bound.
TEST(ModelBreach, AbsorbedTermsFallBackToTheRigorousTier) {
    const std::int64_t n = 4096;
    std::vector<double> v(static_cast<std::size_t>(n));
    std::mt19937_64 g(3);
    std::uniform_real_distribution<double> u(0.95, 0.99);  // x^2 < 1 = half an ulp of 2^24
    for (double& t : v) t = u(g);
    v[0] = 4096;  // x^2 = 2^24 first: every later square is absorbed
    const Tensor x = tensor({1, n}, v, Format::fp32);
    const Tensor w = tensor(std::vector<std::int64_t>{n}, std::vector<double>(static_cast<std::size_t>(n), 1.0), Format::fp32);
    const std::vector<TensorView> in{x.view(), w.view()};
    const Params p({{"eps", 0.0}});
    const OpSpec& op = *find_op("rms_norm");
    EXPECT_NE(probabilistic_model_breach(op, p, in, Format::fp32).find("absorbed"), std::string::npos);
    const KernelInfo& naive = kernel("cpu.naive.rms_norm.fp32");  // sequential fp32 sum
    CaseEval e = evaluate_case(naive, p, in);
    EXPECT_TRUE(judge_case(e, parse_profile("strict")).passed());
    // Were the breach ignored, the probabilistic bound would fail this correct kernel.
    e.model_breach.clear();
    {
        oracle::TierScope scope(oracle::Tier::probabilistic);
        oracle::RowData row;
        row.x = v, row.w.assign(v.size(), 1.0), row.y = e.outputs[0].exact;
        e.outputs[0].probabilistic = oracle::row_bound(op, p, row, Format::fp32, Format::fp32);
    }
    EXPECT_FALSE(judge_case(e, parse_profile("strict")).pass);
}

// Nearly equal terms round alike: a softmax row of tiny logits has every
// exponential within 2^-13 of 1.  Term i sits just under half an ulp of the
// running sum (about i) below 1 (0.8 to 0.95 of one), so the textbook FP32
// sum drops each 1 - e^(x-m) the same way.  The case breaches (clustered
// terms) and the correct kernel passes on the rigorous tier, beyond the
// probabilistic bound it would have failed (a heavy-tailed row of scale
// 2^-20 failed so in CI, seed 244586516: utilization 1.28).
TEST(ModelBreach, ClusteredTermsFallBackToTheRigorousTier) {
    const std::int64_t n = 4096;
    std::vector<double> v(static_cast<std::size_t>(n));
    std::mt19937_64 g(5);
    std::uniform_real_distribution<double> jitter(0.8, 0.95);  // distinct values, not repeated ones
    for (std::int64_t i = 1; i < n; ++i) {
        const int e = std::ilogb(static_cast<double>(i));  // the running sum lies in [2^e, 2^(e+1))
        v[static_cast<std::size_t>(i)] = static_cast<float>(-jitter(g) * std::ldexp(1.0, e - 24));
    }
    v[0] = 0;  // the max: every exponential in (1 - 2^-13, 1]
    const Tensor x = tensor({1, n}, v, Format::fp32);
    const std::vector<TensorView> in{x.view()};
    const OpSpec& op = *find_op("softmax");
    EXPECT_NE(probabilistic_model_breach(op, Params{}, in, Format::fp32).find("rounded alike"), std::string::npos);
    CaseEval e = evaluate_case(kernel("cpu.scalar.softmax.fp32"), Params{}, in);  // sequential fp32 sum
    EXPECT_TRUE(judge_case(e, parse_profile("strict")).passed());
    e.model_breach.clear();
    {
        oracle::TierScope scope(oracle::Tier::probabilistic);
        oracle::RowData row;
        row.x = v, row.y = e.outputs[0].exact;
        e.outputs[0].probabilistic = oracle::row_bound(op, Params{}, row, Format::fp32, Format::fp32);
    }
    EXPECT_FALSE(judge_case(e, parse_profile("strict")).pass);
    // Two clusters, 45 % of the row just below 1 and 45 % just below 1/2,
    // the rest spread: no one cluster holds half the row, together they drift.
    std::uniform_real_distribution<double> unit(0, 1);
    for (std::int64_t i = 0; i < n; ++i) {
        const double t = i % 20 < 9 ? 1 - 0x1p-14 * unit(g) : i % 20 < 18 ? 0.5 - 0x1p-15 * unit(g) : unit(g);
        v[static_cast<std::size_t>(i)] = static_cast<float>(std::log(t));
    }
    v[0] = 0;
    const Tensor two = tensor({1, n}, v, Format::fp32);
    EXPECT_NE(probabilistic_model_breach(op, Params{}, {two.view()}, Format::fp32).find("rounded alike"), std::string::npos);
    // Logits spread over many roundings of the sum do not cluster.
    std::uniform_real_distribution<double> u(-0x1p-8, 0);
    for (double& t : v) t = static_cast<float>(u(g));
    const Tensor spread = tensor({1, n}, v, Format::fp32);
    EXPECT_EQ(probabilistic_model_breach(op, Params{}, {spread.view()}, Format::fp32), "");
}

TEST(Statistics, SignTestTail) {
    EXPECT_DOUBLE_EQ(sign_test_tail(50, 50), 1.0);
    EXPECT_NEAR(sign_test_tail(100, 0), 2 * std::exp(-50.0), 1e-30);
    Stats fair, biased;
    for (int i = 0; i < 500; ++i) fair.add_direction_vote(i % 2 ? 1 : -1, i % 3 ? 1 : -1);
    for (int i = 0; i < 500; ++i) biased.add_direction_vote(i % 2 ? 1 : -1, i % 10 ? -1 : 1);
    EXPECT_EQ(rounding_bias(fair, "elements"), "");
    EXPECT_NE(rounding_bias(biased, "elements").find("toward zero in 450 of 500 elements"), std::string::npos)
        << rounding_bias(biased, "elements");
}

// Misses one ulp away from the correctly rounded result, all away from
// zero: where the exact value lies just below the midpoint (a kernel that
// evaluates in double and misrounds only there, the direction fixed by its
// formula) they cast no vote; 0.2 ulp below it they do, and are a bias.
TEST(Statistics, MissesAtATieCastNoVote) {
    auto votes_for_misses = [](double below_midpoint_ulps) {
        Stats s;
        for (int i = 0; i < 200; ++i) {  // 200 cases of one element (a row op votes once per case)
            const double g = 1 + i * 0x1p-20;  // an fp32 value; its ulp is 2^-23
            const CaseEval e = handmade(Format::fp32, {g + 0x1p-23}, {g + 0x1p-24 - below_midpoint_ulps * 0x1p-23},
                                        {0x1p-22}, {1, 1});  // got: the neighbour away from zero
            EXPECT_TRUE(judge_case(e, parse_profile("strict"), &s).pass);
        }
        return s;
    };
    const Stats at_tie = votes_for_misses(0x1p-20);
    EXPECT_EQ(at_tie.votes_for()[1] + at_tie.votes_against()[1], 0);
    EXPECT_EQ(rounding_bias(at_tie, "cases"), "");
    const Stats inside = votes_for_misses(0.2);
    EXPECT_EQ(inside.votes_for()[1], 200);
    EXPECT_NE(rounding_bias(inside, "cases").find("lie above in 200 of 200 cases"), std::string::npos)
        << rounding_bias(inside, "cases");
}

// A row op votes once per case: 200 rows of one case that all miss the same
// way (repeated rows, or one normalizer shared through eps) are one vote.
TEST(Statistics, ARowOpsCaseVotesOnce) {
    std::vector<double> got, exact;
    for (int i = 0; i < 200; ++i) {
        const double g = 1 + i * 0x1p-20;
        exact.push_back(g + 0x1p-24 - 0.2 * 0x1p-23), got.push_back(g + 0x1p-23);
    }
    Stats s;
    EXPECT_TRUE(judge_case(handmade(Format::fp32, got, exact, std::vector<double>(200, 0x1p-22), {200, 1}),
                           parse_profile("strict"), &s).pass);
    EXPECT_EQ(s.votes_for()[1] + s.votes_against()[1], 1);
    EXPECT_STREQ(vote_unit(*find_op("rms_norm")), "cases");
    EXPECT_STREQ(vote_unit(*find_op("silu")), "elements");
}

// A bf16 silu that truncates is within 1 ulp everywhere: only the rounding
// statistics reject it.
TEST(Statistics, TruncatingKernelFailsOnlyTheRoundingBias) {
    RunConfig cfg;
    cfg.cases = 60;
    const report::KernelReport r = run_suite(kernel("mutant.silu.truncated.bf16"), cfg);
    for (const auto& p : r.properties)
        EXPECT_EQ(p.passed, p.name != "rounding_bias") << p.name << ": " << p.message;
    EXPECT_TRUE(run_suite(kernel("cpu.simd.silu.bf16"), cfg).passed);
}

// Twice the error of the built-in rms_norm: every element stays within its
// bound; the drift from the recorded error profile rejects it.
TEST(Sensitivity, DoubledErrorIsRejectedByTheErrorProfile) {
    const KernelInfo& k = kernel("cpu.simd.rms_norm.fp32");
    RunConfig cfg;  // the recorded seed and case count: the cases pair with the profile's
    const std::vector<CaseEval> cases = sample_cases(k, cfg);
    ASSERT_GT(cases.size(), 100u);
    const auto recorded = golden::read_profile(golden::profile_file(golden::default_dir(), k.name));
    ASSERT_TRUE(recorded.has_value());
    const SampleCheck drift = [&](const Stats& s) { return golden::drift(*recorded, k, s); };
    EXPECT_FALSE(judge_sample(cases, profile_for(k), 1, {drift}).rejected);
    EXPECT_FALSE(judge_sample(cases, profile_for(k), 2, {}).rejected) << "the bounds alone reject x2 here";
    const SampleVerdict twice = judge_sample(cases, profile_for(k), 2, {drift});
    EXPECT_TRUE(twice.rejected);
    EXPECT_NE(twice.why.find("worst utilization per case"), std::string::npos) << twice.why;
    const Sensitivity s = find_sensitivity(cases, profile_for(k), {drift});
    EXPECT_EQ(s.status, Sensitivity::Status::detected);
    EXPECT_LE(s.factor, 2.0);
}

// Amplification moves each finite result to exact + f (got - exact),
// rounded; exact results and special values stay.
TEST(Sensitivity, AmplifyMovesEachResultAwayFromTheExactValue) {
    const CaseEval e = handmade(Format::fp32, {1 + 0x1p-22, 2, NAN}, {1, 2, NAN}, {1, 1, 1});
    const CaseEval a = amplify(e, 3);
    EXPECT_EQ(a.outputs[0].got.value(0), 1 + 3 * 0x1p-22);
    EXPECT_EQ(a.outputs[0].got.value(1), 2);
    EXPECT_TRUE(std::isnan(a.outputs[0].got.value(2)));
}

namespace {

// silu in double, rounded once to fp32, with a twist applied to its input
// and result (the elementwise kernels' contract otherwise).
KernelInfo silu_variant(const std::string& name, double (*in)(double), double (*out)(double, double)) {
    KernelInfo k = kernel("cpu.scalar.silu.fp32");
    k.name = name;
    k.fn = [in, out](const KernelCall& c) {
        for (std::int64_t i = 0; i < c.in[0].numel(); ++i) {
            const double x = c.in[0].value(i), xf = in(x);
            c.out[0].set_bits(i, encode(Format::fp32, out(xf, xf / (1 + std::exp(-xf)))));
        }
    };
    return k;
}

double flush(double v) { return v != 0 && std::fabs(v) < 0x1p-126 ? std::copysign(0.0, v) : v; }
double same(double v) { return v; }

}  // namespace

// A kernel that flushes subnormal inputs and outputs fails strict on them
// and meets strict+ftz; one that evaluates x * sigmoid(x) literally gives
// NaN at -inf (the oracle's limit is -0) and meets strict+ieee.  The report
// names the tightest profile met and where the errors lie.
TEST(Profiles, FlushToZeroAndIeeeSpecialsAreNamed) {
    const Tensor x = tensor({1, 6}, {0x1p-130, -0x1.8p-128, 1.5, -2, 0x1p-149, 0x1.7p-127}, Format::fp32);
    const KernelInfo ftz = silu_variant("ftz.silu", flush, [](double, double y) { return flush(decode(Format::fp32, encode(Format::fp32, y))); });
    Stats s;
    EXPECT_FALSE(judge_case(evaluate_case(ftz, {}, {x.view()}, {true}), parse_profile("strict"), &s).pass);
    EXPECT_TRUE(tightest_profile(s) == "cr+ftz" || tightest_profile(s) == "faithful+ftz") << tightest_profile(s);
    EXPECT_GT(s.region_beyond_strict()[static_cast<std::size_t>(Region::subnormal)], 0);
    EXPECT_EQ(s.region_beyond_strict()[static_cast<std::size_t>(Region::normal)], 0);
    EXPECT_TRUE(judge_case(evaluate_case(ftz, {}, {x.view()}, {true}), parse_profile("strict+ftz")).passed());

    const Tensor xi = tensor({1, 4}, {1.5, -2, -INFINITY, INFINITY}, Format::fp32);
    const KernelInfo literal = silu_variant("literal.silu", same, [](double xf, double) { return xf * (1 / (1 + std::exp(-xf))); });
    Stats t;
    const CaseResult strict = judge_case(evaluate_case(literal, {}, {xi.view()}, {true}), parse_profile("strict"), &t);
    EXPECT_FALSE(strict.pass);
    EXPECT_NE(strict.message.find("special-value class mismatch"), std::string::npos) << strict.message;
    EXPECT_TRUE(tightest_profile(t) == "cr+ieee" || tightest_profile(t) == "faithful+ieee") << tightest_profile(t);
    EXPECT_EQ(t.region_beyond_strict()[static_cast<std::size_t>(Region::special)], 1);
    EXPECT_TRUE(judge_case(evaluate_case(literal, {}, {xi.view()}, {true}), parse_profile("strict+ieee")).passed());
    KernelInfo declared = literal;
    declared.profile = "strict+ieee";
    EXPECT_TRUE(check_case(declared, {}, {xi.view()}).passed());
    EXPECT_FALSE(check_case(literal, {}, {xi.view()}).pass);
}

}  // namespace verdict_test
