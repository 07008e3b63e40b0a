// DeepSeek Sparse Attention (docs/dsa_attention.md): the oracle on hand-made
// cases (the shared selection, -1 slots of the first queries, NaN rows,
// attention over the selected latent entries), every kernel within the
// derived bound with every element judged, a kernel breaking exact ties
// the other way accepted (staged verdict), the bound's undefined rows.
// The kernel and mutant suites run with the family's, in sparse_test.cpp.
#include <cmath>
#include <string>

#include "impls/cpu/dsa.hpp"
#include "kernel_suite.hpp"
#include "oracle/attention.hpp"
#include "oracle/bound.hpp"
#include "oracle/dsa.hpp"
#include "properties/generators.hpp"
#include "properties/verdict.hpp"

namespace dsa_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

Tensor dsa_t(std::vector<std::int64_t> shape, const std::vector<double>& v) {
    return conform::testing::fp32_tensor(std::move(shape), v);
}

// Lq = Lk = 3, one index head (c = 1, w = 1: I[t, s] = ReLU(iq_t ik_s)),
// two attention heads, D = 2, Dv = 1.
struct HandCase {
    Tensor iq = dsa_t({3, 1, 1}, {1, 1, 1}), ik = dsa_t({3, 1}, {2, 5, 3}), iw = dsa_t({3, 1}, {1, 1, 1});
    Tensor q = dsa_t({2, 3, 2}, {1, 0, 0, 1, 1, 1,  0, 0, 2, 0, 0, 2});
    Tensor kv = dsa_t({1, 3, 2}, {1, 0, 0, 1, 1, 1});
    Tensor v = dsa_t({1, 3, 1}, {10, 20, 30});
    std::vector<TensorView> views() const { return {iq.view(), ik.view(), iw.view(), q.view(), kv.view(), v.view()}; }
};

oracle::StructuredResult dsa_eval(const Params& p, const std::vector<TensorView>& in) {
    return oracle::evaluate_structured("dsa_attention", p, in, {Format::fp32, Format::fp32, Format::fp32});
}

}  // namespace

// Token 1 scores highest, then 2, then 0; query t sees tokens s <= t.  With
// k = 2: query 0 [0, -1], query 1 [1, 0], query 2 [1, 2]; o is attention
// over exactly those tokens (the mask), the same selection for both heads.
TEST(DsaOracle, SharedSelectionAndAttentionOverIt) {
    const HandCase h;
    const Params p({{"k", 2}});
    const auto r = dsa_eval(p, h.views());
    EXPECT_EQ(r.exact.at(2), (std::vector<double>{0, -1, 1, 0, 1, 2}));
    const Tensor mask = dsa_t({3, 3}, {0, -INFINITY, -INFINITY, 0, 0, -INFINITY, -INFINITY, 0, 0});
    const auto a = oracle::evaluate_structured("attention", p, {h.q.view(), h.kv.view(), h.v.view(), mask.view()},
                                               {Format::fp32, Format::fp32});
    EXPECT_EQ(r.exact.at(0), a.exact.at(0));
    EXPECT_EQ(r.exact.at(1), a.exact.at(1));
    EXPECT_EQ(r.exact.at(0).at(0), 10);  // query 0 attends to token 0 alone
    // k >= Lk: dense causal attention.
    const auto dense = dsa_eval(Params({{"k", 3}}), h.views());
    const auto causal = oracle::evaluate_structured("attention", Params({{"causal", 1}}),
                                                    {h.q.view(), h.kv.view(), h.v.view()}, {Format::fp32, Format::fp32});
    EXPECT_EQ(dense.exact.at(0), causal.exact.at(0));
}

// Decode: one query at position Lk - 1 = 2 sees every key; the index keys'
// ReLU: a negative dot product scores 0, below a positive one, whatever
// the head weight's sign does afterwards.
TEST(DsaOracle, DecodeRowAndReluBeforeTheWeights) {
    const Tensor iq = dsa_t({1, 2, 1}, {1, -1}), ik = dsa_t({3, 1}, {-4, 1, 2}), iw = dsa_t({1, 2}, {1, -1});
    const Tensor q = dsa_t({1, 1, 1}, {0}), kv = dsa_t({1, 3, 1}, {0, 0, 0}), v = dsa_t({1, 3, 1}, {1, 2, 3});
    // I = ReLU(s) - ReLU(-s): -4 for token 0 (-ReLU(4)), 1 and 2: tokens 2, 1 first.
    const auto r = dsa_eval(Params({{"k", 2}}), {iq.view(), ik.view(), iw.view(), q.view(), kv.view(), v.view()});
    EXPECT_EQ(r.exact.at(2), (std::vector<double>{2, 1}));
    EXPECT_EQ(r.exact.at(0).at(0), 2.5);  // equal logits: the mean of v over tokens 1 and 2
}

// A NaN index score among a query's eligible tokens makes its indices, o
// and lse NaN (compared by class); a NaN score of a later token does not.
TEST(DsaOracle, NaNScoreOnlyWhereEligible) {
    HandCase h;
    h.ik.set_value(2, NAN);  // token 2: eligible for query 2 only
    const auto r = dsa_eval(Params({{"k", 2}}), h.views());
    EXPECT_EQ(r.exact[2][0], 0);
    EXPECT_EQ(r.exact[2][2], 1);
    EXPECT_TRUE(std::isnan(r.exact[2][4]) && std::isnan(r.exact[2][5]));
    EXPECT_TRUE(std::isnan(r.exact[1][2]) && std::isnan(r.exact[1][5]));  // lse of query 2, both heads
    EXPECT_FALSE(std::isnan(r.exact[1][1]));
    const auto b = oracle::dsa_attention_bound(Params({{"k", 2}}), h.views(), r.exact, Format::fp32,
                                               {Format::fp32, Format::fp32, Format::fp32});
    EXPECT_TRUE(std::isnan(b[2][4]));
    EXPECT_EQ(b[2][0], 0);
}

// Every kernel in every format: each case passes with every element judged.
TEST(DsaKernel, WithinTheBoundEveryElementJudged) {
    for (const KernelInfo& k : builtin_registry().all()) {
        if (k.op != "dsa_attention" || k.role != Role::kernel) continue;
        for (std::uint64_t seed = 1; seed <= 3; ++seed) {
            props::CaseSpec s = props::structured_spec("dsa_attention", k.in, {5, 9, 2, 16, 2, 8, 4, 0, 1},
                                                       Params({{"k", 3}}), props::Family::normal, 0, seed, 0);
            s.families = {props::Family::normal, props::Family::normal, props::Family::normal, props::Family::normal,
                          props::Family::normal, props::Family::normal};
            const props::Case c = props::build_case(s);
            const props::CaseResult r = props::check_case(k, c.params, c.views());
            EXPECT_TRUE(r.pass) << k.name << ": " << r.message;
            EXPECT_EQ(r.not_judged, 0) << k.name;
            EXPECT_EQ(r.judged, 2 * 5 * 4 + 2 * 5 + 5 * 3) << k.name;
        }
    }
}

// Exact ties (index keys 2m + 1 copies of 2m) broken toward the higher
// index: another correct selection, accepted and counted, and o judged over
// it; the masked_topk mutant on the same cases selects future tokens for
// the first query and fails.
TEST(DsaVerdict, TiesBrokenTheOtherWayPassFutureTokensFail) {
    const KernelInfo* base = builtin_registry().find("cpu.scalar.dsa_attention.fp32");
    const KernelInfo* mutant = builtin_registry().find("mutant.dsa_attention.masked_topk.fp32");
    ASSERT_NE(base, nullptr);
    ASSERT_NE(mutant, nullptr);
    KernelInfo other = *base;
    other.fn = [](const KernelCall& c) { cpu::dsa_call(c, cpu::DsaVariant::scalar, {.ties_to_higher = true}); };
    std::int64_t accepted = 0;
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        const props::Case c = props::build_case(props::structured_spec(
            "dsa_attention", Format::fp32, {6, 6, 2, 4, 2, 8, 4, 1, 0}, Params({{"k", 3}}), props::Family::normal, 0, seed, 0));
        const props::CaseEval e = props::evaluate_case(other, c.params, c.views());
        const props::CaseResult r = props::judge_case(e, props::profile_for(other));
        EXPECT_TRUE(r.pass) << r.message;
        for (const auto& [what, n] : e.notes)
            if (what.find("selections other than") != std::string::npos) accepted += n;
        const props::CaseResult m = props::check_case(*mutant, c.params, c.views());
        EXPECT_FALSE(m.pass);
        const Tensor ids = run_kernel(*mutant, c.params, c.views()).at(2);
        EXPECT_GT(ids.value(1), 0) << "query 0 should have selected a future token";
    }
    EXPECT_GT(accepted, 0);
}

// Scores that may overflow FP32: the row's selection is not determined
// (indices not judged); o and lse are still judged when the candidate's own
// selection was used.
TEST(DsaBound, OverflowingScoresLeaveTheSelectionUnjudged) {
    HandCase h;
    h.iq.set_value(2, 0x1p100), h.ik.set_value(0, 0x1p100);  // query 2's score of token 0: 2^200 in FP32
    const std::vector<Format> f{Format::fp32, Format::fp32, Format::fp32};
    const auto r = dsa_eval(Params({{"k", 2}}), h.views());
    const auto b = oracle::dsa_attention_bound(Params({{"k", 2}}), h.views(), r.exact, Format::fp32, f);
    EXPECT_EQ(b[2][4], oracle::kUndefined);
    EXPECT_EQ(b[2][0], 0);
    EXPECT_EQ(b[1][2], oracle::kUndefined);  // not staged: o and lse of query 2 unjudged too
    EXPECT_TRUE(b[1][1] >= 0 && std::isfinite(b[1][1]));
}

}  // namespace dsa_test
