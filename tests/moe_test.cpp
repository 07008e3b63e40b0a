// MoE routing (docs/moe.md): the oracle on hand-made routers, the
// ambiguity-aware verdict (a kernel breaking ties another way passes, an
// out-of-budget choice fails), and the property suite over every registered
// kernel and mutant.
#include <cmath>
#include <string>

#include "impls/cpu/moe.hpp"
#include "kernel_suite.hpp"
#include "oracle/moe.hpp"
#include "properties/verdict.hpp"

namespace moe_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

namespace {

Tensor matrix(std::int64_t rows, std::int64_t cols, const std::vector<double>& v) {
    return conform::testing::fp32_matrix(rows, cols, v);
}

oracle::StructuredResult route(const Params& p, const std::vector<TensorView>& in) {
    return oracle::evaluate_structured("moe_router", p, in, {Format::fp32});
}

}  // namespace

TEST(MoeOracle, SoftmaxTopTwoRenormalized) {
    const Tensor x = matrix(1, 1, {1}), w = matrix(1, 4, {1, 2, 3, 4});
    const auto r = route(Params({{"k", 2}}), {x.view(), w.view()});
    EXPECT_EQ(r.rounded[0].value(0), 3);
    EXPECT_EQ(r.rounded[0].value(1), 2);
    EXPECT_NEAR(r.exact[1][0], 1 / (1 + std::exp(-1.0)), 1e-15);  // e^4 / (e^4 + e^3)
    EXPECT_NEAR(r.exact[1][1], 1 / (1 + std::exp(1.0)), 1e-15);
    // loss = E sum f_i P_i: f_3 = f_2 = 1, P_i = p_i.
    const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(4.0);
    EXPECT_NEAR(r.exact[3][0], 4 * (std::exp(4.0) + std::exp(3.0)) / z, 1e-14);
}

TEST(MoeOracle, BiasChoosesButNeverWeighs) {
    const Tensor x = matrix(1, 1, {1}), w = matrix(1, 3, {3, 2, 1}), b = Tensor(Format::fp32, {3});
    Tensor bias = b;
    bias.set_value(2, 1.0);  // lifts expert 2 (p ~ 0.09) above expert 0 (p ~ 0.67)
    const auto r = route(Params({{"k", 1}, {"renormalize", 0}}), {x.view(), w.view(), bias.view()});
    EXPECT_EQ(r.rounded[0].value(0), 2);
    const double z = std::exp(3.0) + std::exp(2.0) + std::exp(1.0);
    EXPECT_NEAR(r.exact[1][0], std::exp(1.0) / z, 1e-15);  // p_2, not p_2 + 1
}

TEST(MoeOracle, TiesGoToTheLowerIndexAndCapacityDropsLaterTokens) {
    // Four tokens, two identical experts: every token picks expert 0; capacity
    // 0.5 gives floor(0.5 * 4 * 1 / 2) = 1 assignment per expert.
    const Tensor x = matrix(4, 1, {1, 2, 3, 4}), w = matrix(1, 2, {1, 1});
    const auto r = route(Params({{"k", 1}, {"capacity", 0.5}}), {x.view(), w.view()});
    for (std::int64_t t = 0; t < 4; ++t) {
        EXPECT_EQ(r.rounded[0].value(t), 0) << t;
        EXPECT_EQ(r.rounded[2].value(t), t == 0 ? 1 : 0) << t;
        EXPECT_EQ(r.rounded[1].value(t), t == 0 ? 1 : 0) << t;  // dropped: weight 0
    }
}

TEST(MoeOracle, NonFiniteLogitsMakeTheTokenNaN) {
    const Tensor x = matrix(2, 1, {1, NAN}), w = matrix(1, 2, {1, 2});
    const auto r = route(Params({{"k", 1}}), {x.view(), w.view()});
    EXPECT_EQ(r.rounded[0].value(0), 1);
    EXPECT_TRUE(std::isnan(r.rounded[0].value(1)));
    EXPECT_TRUE(std::isnan(r.rounded[1].value(1)));
    EXPECT_TRUE(std::isnan(r.rounded[3].value(0)));
}

TEST(MoeVerdict, AdmissibleMeansWithinTheScoresBudget) {
    const Tensor x = matrix(1, 1, {1}), w = matrix(1, 3, {1, 1, 0});  // experts 0 and 1 tie, 2 far below
    const auto s = oracle::router_setup(Params({{"k", 1}}), {x.view(), w.view()});
    const auto b = oracle::router_token_budget(s, {x.view(), w.view()}, 0);
    EXPECT_TRUE(oracle::router_admissible(b, {0}));
    EXPECT_TRUE(oracle::router_admissible(b, {1}));   // the tie broken the other way
    EXPECT_FALSE(oracle::router_admissible(b, {2}));  // far outside
    EXPECT_FALSE(oracle::router_admissible(b, {3}));  // no such expert
    const auto s2 = oracle::router_setup(Params({{"k", 2}}), {x.view(), w.view()});
    EXPECT_FALSE(oracle::router_admissible(b, {0, 0}));  // routed twice
    EXPECT_TRUE(oracle::router_admissible(b, {1, 0}));
    EXPECT_EQ(s2.k, 2);
}

// A kernel that breaks exact ties toward the higher index makes a different,
// equally correct choice: the verdict must not flag it, and the report
// counts the selections it accepted.
TEST(MoeVerdict, TiesBrokenTheOtherWayPass) {
    conform::testing::expect_other_tie_rule_passes(
        "cpu.scalar.moe_router.fp32", [](const KernelCall& c) { cpu::moe_router_call(c, false, {.ties_to_higher = true}); },
        "other than the oracle's");
}

// DeepSeek-V3's router: sigmoid scores, 4 groups of 2 experts, the best
// group by the sum of its two largest scores (group 1: 2 sigma(2) = 1.76
// beats group 0: sigma(3) + sigma(-3) = 1, whose largest score is the
// largest), k = 2 within it, renormalized and scaled by 2.5.
TEST(MoeOracle, GroupLimitedSelectionAndScaling) {
    const Tensor x = matrix(1, 1, {1}), w = matrix(1, 8, {3, -3, 2, 2, -1, -1, 0, -5});
    const Params p({{"k", 2}, {"score", 1}, {"groups", 4}, {"topk_groups", 1}, {"scaling", 2.5}});
    const auto r = route(p, {x.view(), w.view()});
    EXPECT_EQ(r.rounded[0].value(0), 2);
    EXPECT_EQ(r.rounded[0].value(1), 3);
    EXPECT_EQ(r.exact[1][0], 1.25);
    EXPECT_EQ(r.exact[1][1], 1.25);
    const auto ungrouped = route(Params({{"k", 2}, {"score", 1}}), {x.view(), w.view()});
    EXPECT_EQ(ungrouped.rounded[0].value(0), 0);  // without groups: experts 0 and 2
    EXPECT_EQ(ungrouped.rounded[0].value(1), 2);
    const auto b = oracle::router_token_budget(oracle::router_setup(p, {x.view(), w.view()}), {x.view(), w.view()}, 0);
    EXPECT_TRUE(oracle::router_admissible(b, {2, 3}));
    EXPECT_TRUE(oracle::router_admissible(b, {3, 2}));   // the tie within the group
    EXPECT_FALSE(oracle::router_admissible(b, {0, 2}));  // the ungrouped choice: group 0 is out of budget
    EXPECT_FALSE(oracle::router_admissible(b, {2, 6}));  // two groups where one is kept
    for (const auto& [name, value] : std::vector<std::pair<const char*, double>>{{"groups", 3}, {"topk_groups", 5}, {"scaling", 0}}) {
        Params q = p;
        q.set(name, value);
        EXPECT_THROW(route(q, {x.view(), w.view()}), std::invalid_argument) << name;
    }
}

// DeepSeek-V2's group_limited_greedy (group_top 1): the same router ranks
// its groups by their largest score, so group 0 (sigma(3)) beats group 1
// (2 sigma(2) summed, sigma(2) alone); k = 2 within group 0, expert 0 then
// 1.  The maximum is exact, so the top-2 choice is out of budget; group_top
// 2 needs groups of two, 3 is no rule.
TEST(MoeOracle, GroupTopOneRanksGroupsByTheirLargestScore) {
    const Tensor x = matrix(1, 1, {1}), w = matrix(1, 8, {3, -3, 2, 2, -1, -1, 0, -5});
    const std::vector<TensorView> in{x.view(), w.view()};
    const Params p({{"k", 2}, {"score", 1}, {"groups", 4}, {"topk_groups", 1}, {"group_top", 1}});
    const auto r = route(p, in);
    EXPECT_EQ(r.rounded[0].value(0), 0);
    EXPECT_EQ(r.rounded[0].value(1), 1);
    const auto b = oracle::router_token_budget(oracle::router_setup(p, in), in, 0);
    EXPECT_TRUE(oracle::router_admissible(b, {0, 1}));
    EXPECT_FALSE(oracle::router_admissible(b, {2, 3}));  // the top-2 sum's group
    Params q = p;
    q.set("group_top", 3);
    EXPECT_THROW(route(q, in), std::invalid_argument);
    q.set("group_top", 2), q.set("groups", 8), q.set("k", 1);  // groups of one expert
    EXPECT_THROW(route(q, in), std::invalid_argument);
    q.set("group_top", 1);
    EXPECT_NO_THROW(route(q, in));
}

// The group decision is judged ambiguity-aware: groups 0 and 1 tie exactly
// (the same two scores), so either is a correct choice; group 2, below
// beyond the budget, is not; nor is the kept group's lower expert.
TEST(MoeVerdict, GroupChoiceWithinTheGroupScoresBudget) {
    const Tensor x = matrix(1, 1, {1}), w = matrix(1, 8, {1, 0.5, 0.5, 1, -2, -2, -2, -2});
    const Params p({{"k", 1}, {"score", 1}, {"groups", 4}, {"topk_groups", 1}});
    const std::vector<TensorView> in{x.view(), w.view()};
    const auto b = oracle::router_token_budget(oracle::router_setup(p, in), in, 0);
    EXPECT_TRUE(oracle::router_admissible(b, {0}));
    EXPECT_TRUE(oracle::router_admissible(b, {3}));   // group 1: the group tie broken the other way
    EXPECT_FALSE(oracle::router_admissible(b, {1}));  // group 0's lower expert
    EXPECT_FALSE(oracle::router_admissible(b, {4}));  // group 2: out of the group scores' budget
    EXPECT_TRUE(oracle::ambiguous(b, oracle::router_order(b), 1));
    EXPECT_EQ(route(p, in).rounded[0].value(0), 0);  // the tie to the lower group
}

// Hugging Face's DeepSeek-V3 router adds 1e-20 to the chosen scores' sum
// before renormalizing: the weights' budget admits it (docs/moe.md, "Error
// budget"); with ties broken toward the higher index (experts and groups)
// as well, every property passes.
TEST(MoeVerdict, RenormalizingEpsilonAndOtherTieRulePass) {
    conform::testing::expect_other_tie_rule_passes(
        "cpu.scalar.moe_router.fp32",
        [](const KernelCall& c) { cpu::moe_router_call(c, false, {.ties_to_higher = true, .renorm_eps = true}); },
        "other than the oracle's");
}

CONFORM_FAMILY_SUITES(Moe, "moe");

}  // namespace moe_test
