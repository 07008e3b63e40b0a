// Sparse-attention selection (docs/sparse.md): the oracle on hand-made score
// rows (causal limits, forced blocks, -1 slots, NaN rows), the tie-aware
// verdict (a kernel breaking exact ties the other way passes and is
// counted), and the property suite over every registered kernel and mutant.
#include <cmath>
#include <string>

#include "impls/cpu/sparse.hpp"
#include "kernel_suite.hpp"
#include "oracle/sparse.hpp"
#include "properties/verdict.hpp"

namespace sparse_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

namespace {

Tensor rows(std::int64_t r, std::int64_t c, const std::vector<double>& v) { return conform::testing::fp32_matrix(r, c, v); }

std::vector<double> select(const Params& p, const Tensor& scores) {
    const auto r = oracle::evaluate_structured("topk_select", p, {scores.view()}, {Format::fp32});
    return r.exact.at(0);
}

}  // namespace

// Token level (r = 1), causal: query i sees keys j <= i; the first query has
// one candidate, the rest of its slots are -1.
TEST(SparseOracle, TokenCausalTopTwo) {
    const Tensor s = rows(3, 3, {5, 9, 7,  5, 9, 7,  5, 9, 7});
    const auto got = select(Params({{"k", 2}}), s);
    EXPECT_EQ(got, (std::vector<double>{0, -1, 1, 0, 1, 2}));
}

// Blocks of r = 2 with the fully-observed limit (CSA, QSA): query position p
// sees block b when 2b + 1 <= p; MSA's local block forced into the first
// slot; QSA's partial block in addition to the k.
TEST(SparseOracle, BlockCausalAndForcedBlocks) {
    const Tensor s = rows(1, 4, {1, 3, 2, 8});  // query at position 4: blocks 0, 1 observed, block 2 its own
    Params p({{"k", 2}, {"block", 2}, {"offset", 4}});
    EXPECT_EQ(select(p, s), (std::vector<double>{1, 0}));
    p.set("force_local", 1);
    EXPECT_EQ(select(p, s), (std::vector<double>{2, 1}));
    p.set("force_local", 2);
    EXPECT_EQ(select(p, s), (std::vector<double>{2, 1, 0}));
    p.set("causal", 2), p.set("force_local", 0);  // started blocks: 0, 1, 2
    EXPECT_EQ(select(p, s), (std::vector<double>{1, 2}));
}

TEST(SparseOracle, NaNScoreMakesTheRowNaNInfinitiesAreScores) {
    const Tensor s = rows(2, 3, {1, NAN, 2,  -INFINITY, INFINITY, 0});
    const auto got = select(Params({{"k", 2}, {"causal", 0}}), s);
    EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]));
    EXPECT_EQ(got[2], 1);
    EXPECT_EQ(got[3], 2);
}

TEST(SparseVerdict, AdmissibleAcceptsTiesOnlyAndKeepsTheLimits) {
    Params p({{"k", 2}, {"causal", 0}});
    const Tensor x = rows(1, 4, {3, 3, 1, 3});
    const auto s = oracle::select_setup(p, {x.view()});
    const std::vector<double> sc{3, 3, 1, 3}, zero(4, 0.0);
    EXPECT_TRUE(oracle::selection_admissible(s, sc, zero, 0, {0, 1}));
    EXPECT_TRUE(oracle::selection_admissible(s, sc, zero, 0, {3, 0}));   // a tie broken the other way
    EXPECT_FALSE(oracle::selection_admissible(s, sc, zero, 0, {0, 2}));  // 2 scores below the tied three
    EXPECT_FALSE(oracle::selection_admissible(s, sc, zero, 0, {0, 0}));  // chosen twice
    EXPECT_FALSE(oracle::selection_admissible(s, sc, zero, 0, {0, -1})); // a slot left empty with candidates left
    p.set("causal", 1);
    const auto c = oracle::select_setup(p, {x.view()});
    EXPECT_TRUE(oracle::selection_admissible(c, sc, zero, 0, {0, -1}));
    EXPECT_FALSE(oracle::selection_admissible(c, sc, zero, 0, {0, 1}));  // 1 is after the query
}

// With a nonzero budget (scores computed upstream, e.g. by the indexer) a
// choice is accepted exactly up to the edge: 2.5 + 1/4 meets 3 - 1/4, and
// any smaller budget rejects it.
TEST(SparseVerdict, AdmissibleExactlyToTheBudgetEdge) {
    const Tensor x = rows(1, 3, {3, 2.5, 1});
    const auto s = oracle::select_setup(Params({{"k", 1}, {"causal", 0}}), {x.view()});
    const std::vector<double> sc{3, 2.5, 1};
    EXPECT_TRUE(oracle::selection_admissible(s, sc, {0.25, 0.25, 0}, 0, {1}));
    const double less = 0.25 * (1 - 0x1p-20);
    EXPECT_FALSE(oracle::selection_admissible(s, sc, {less, less, 0}, 0, {1}));
    EXPECT_FALSE(oracle::selection_admissible(s, sc, {0.25, 0.25, 0}, 0, {2}));
}

// A kernel that breaks exact ties toward the higher index makes a different,
// equally correct choice: the verdict must not flag it, and the report
// counts the selections it accepted.
TEST(SparseVerdict, TiesBrokenTheOtherWayPass) {
    conform::testing::expect_other_tie_rule_passes(
        "cpu.scalar.topk_select.fp32", [](const KernelCall& c) { cpu::topk_select_call(c, false, {.ties_to_higher = true}); },
        "ties broken");
}

// I[t, s] = sum_h w_h ReLU(q_h . k_s): a negative dot product contributes
// nothing whatever its weight, a negative weight subtracts.
TEST(SparseIndexer, ReluPerHeadThenWeightedSum) {
    Tensor q(Format::fp32, {1, 2, 2}), k = rows(2, 2, {1, 0,  0, 1}), w = rows(1, 2, {2, -3});
    for (std::int64_t i = 0; i < 4; ++i) q.set_value(i, std::vector<double>{1, -1, -2, 4}[static_cast<std::size_t>(i)]);
    const auto r = oracle::evaluate_structured("lightning_indexer", Params{}, {q.view(), k.view(), w.view()}, {Format::fp32});
    // key 0: head 0 dot 1, head 1 dot -2 (ReLU 0): 2 * 1 = 2; key 1: head 0 dot -1 (0), head 1 dot 4: -3 * 4 = -12.
    EXPECT_EQ(r.exact.at(0), (std::vector<double>{2, -12}));
}

// The budget is earned: a score the kernel computes exactly gets a bound
// below 2^-20 relative on ordinary data, and the dot product's error term
// grows with c (gamma_c), so it is not a constant.
TEST(SparseIndexer, BudgetScalesWithTheDotLength) {
    const auto bound_for = [](std::int64_t c) {
        Tensor q(Format::fp32, {1, 1, c}), k(Format::fp32, {1, c}), w = rows(1, 1, {1});
        for (std::int64_t i = 0; i < c; ++i) q.set_value(i, 1), k.set_value(i, 1);
        const std::vector<TensorView> in{q.view(), k.view(), w.view()};
        return oracle::lightning_indexer_bound(Params{}, in, {{static_cast<double>(c)}}, Format::fp32, {Format::fp32})[0][0];
    };
    EXPECT_LT(bound_for(16) / 16, 0x1p-19);
    EXPECT_GT(bound_for(64) / 64, 1.5 * bound_for(16) / 16);
}

// A -inf dot product contributes exactly 0 (ReLU): the score stays finite
// and judged with a finite budget, so a kernel dropping the ReLU (-inf) or
// writing 0 fails there; an infinite weight on a dot of uncertain sign is
// undefined, not a NaN that a correct kernel's +inf would mismatch.
TEST(SparseIndexer, InfiniteInputsAreJudgedByClassOrBound) {
    Tensor q(Format::fp32, {1, 2, 2}), k = rows(1, 2, {1, 1}), w = rows(1, 2, {1, 1});
    for (std::int64_t i = 0; i < 4; ++i) q.set_value(i, std::vector<double>{-INFINITY, 1, 1, 1}[static_cast<std::size_t>(i)]);
    std::vector<TensorView> in{q.view(), k.view(), w.view()};
    const auto r = oracle::evaluate_structured("lightning_indexer", Params{}, in, {Format::fp32});
    EXPECT_EQ(r.exact[0][0], 2);
    const double b = oracle::lightning_indexer_bound(Params{}, in, r.exact, Format::fp32, {Format::fp32})[0][0];
    EXPECT_TRUE(b >= 0 && b < 1e-5) << b;
    // w = +inf on a dot of -2^-30 + 1 - 1 + 2^-30 (exactly 0, an FP32 loop may leave 2^-30).
    Tensor q2(Format::fp32, {1, 1, 4}), k2 = rows(1, 4, {1, 1, 1, 1}), w2 = rows(1, 1, {INFINITY});
    for (std::int64_t i = 0; i < 4; ++i) q2.set_value(i, std::vector<double>{-0x1p-30, 1, -1, 0x1p-30}[static_cast<std::size_t>(i)]);
    in = {q2.view(), k2.view(), w2.view()};
    const auto r2 = oracle::evaluate_structured("lightning_indexer", Params{}, in, {Format::fp32});
    EXPECT_TRUE(std::isnan(r2.exact[0][0]));
    EXPECT_EQ(oracle::lightning_indexer_bound(Params{}, in, r2.exact, Format::fp32, {Format::fp32})[0][0], oracle::kUndefined);
}

CONFORM_FAMILY_SUITES(Sparse, "sparse");

}  // namespace sparse_test
