// block_sparse_attention (docs/block_sparse_attention.md): the oracle's
// selection on hand-made index inputs (MSA max pooling and its forced slot 0,
// QSA's own block before the k, RoPE at p_b = b r), dense attention when k
// covers every block, the budget's scale, and the ambiguity-aware verdict (a
// kernel breaking exact ties the other way passes).  The kernels' and
// mutants' suites run with the family's in tests/sparse_test.cpp.
#include <cmath>
#include <string>
#include <vector>

#include "impls/cpu/block_sparse.hpp"
#include "kernel_suite.hpp"
#include "oracle/attention.hpp"
#include "oracle/block_sparse.hpp"
#include "properties/verdict.hpp"

namespace block_sparse_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

Tensor bsa_tensor(std::vector<std::int64_t> shape, const std::vector<double>& v) {
    return conform::testing::fp32_tensor(std::move(shape), v);
}

Tensor bsa_filled(std::vector<std::int64_t> shape, double step) {
    Tensor t(Format::fp32, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, std::sin(step * static_cast<double>(i + 1)));
    return t;
}

struct BsaInputs {
    std::vector<Tensor> t;
    std::vector<TensorView> views() const {
        std::vector<TensorView> v;
        for (const Tensor& x : t) v.push_back(x.view());
        return v;
    }
};

// One head, one group, D = 2: q, k, v smooth; iq, ik as given; zero norm weights.
BsaInputs bsa_case(std::int64_t l, std::int64_t gi, std::int64_t di, const std::vector<double>& iq, const std::vector<double>& ik) {
    BsaInputs in;
    in.t.push_back(bsa_filled({1, l, 2}, 0.7));
    in.t.push_back(bsa_filled({1, l, 2}, 1.3));
    in.t.push_back(bsa_filled({1, l, 2}, 0.4));
    in.t.push_back(bsa_tensor({gi, l, di}, iq));
    in.t.push_back(bsa_tensor({l, di}, ik));
    in.t.push_back(bsa_tensor({di}, std::vector<double>(static_cast<std::size_t>(di), 0.0)));
    in.t.push_back(bsa_tensor({di}, std::vector<double>(static_cast<std::size_t>(di), 0.0)));
    return in;
}

std::vector<double> bsa_indices(const Params& p, const BsaInputs& in) {
    return oracle::evaluate_structured("block_sparse_attention", p, in.views(), {Format::fp32, Format::fp32}).exact.at(1);
}

}  // namespace

// MSA, blocks of 2, Di = 1, iq = 1: token scores are ik.  Block 0 holds
// {3, -5} (max 3, mean -1), block 1 {1, 1} (max 1, mean 1), block 2 {2, 0}.
// Query 6 (its own block 3): slot 0 = 3, then max pooling ranks block 0
// first; mean pooling would pick block 2.  Query 0 has no earlier block:
// -1 in the free slot.
TEST(BlockSparseOracle, MsaMaxPoolingAndForcedSlotZero) {
    const BsaInputs in = bsa_case(7, 1, 1, std::vector<double>(7, 1.0), {3, -5, 1, 1, 2, 0, 9});
    const auto got = bsa_indices(Params({{"mode", 0}, {"block", 2}, {"k", 2}}), in);
    ASSERT_EQ(got.size(), 14u);
    EXPECT_EQ(got[0], 0);
    EXPECT_EQ(got[1], -1);
    EXPECT_EQ(got[12], 3);
    EXPECT_EQ(got[13], 0);
    EXPECT_EQ(got[4 * 2], 2);  // query 4: own block 2, then block 0 (3 > 1)
    EXPECT_EQ(got[4 * 2 + 1], 0);
}

// QSA: r = 2, one index head, Di = 2 (rope_dim 0: Di/2 rounded down to even,
// no rotation);
// the own (partial) block comes first, then the best fully observed block;
// a query in block 1 at position 2 sees block 0 only once it is complete.
TEST(BlockSparseOracle, QsaOwnBlockBeforeTheK) {
    const BsaInputs in = bsa_case(5, 1, 2, {1, 0, 1, 0, 1, 0, 1, 0, 1, 0}, {1, 0, 1, 0, -1, 0, -1, 0, 1, 0});
    const auto got = bsa_indices(Params({{"mode", 1}, {"block", 2}, {"k", 1}}), in);
    ASSERT_EQ(got.size(), 10u);  // [1, 5, 2]
    EXPECT_EQ(got[0], 0);        // query 0: own block 0, nothing complete
    EXPECT_EQ(got[1], -1);
    EXPECT_EQ(got[2], 0);  // query 1: block 0 is its own (complete only at 1, but own)
    EXPECT_EQ(got[3], -1);
    EXPECT_EQ(got[4], 1);  // query 2: own block 1, then block 0
    EXPECT_EQ(got[5], 0);
    EXPECT_EQ(got[8], 2);  // query 4: own block 2; blocks 0 and 1 complete: 0 scores ReLU(+) > block 1's ReLU(-) = 0
    EXPECT_EQ(got[9], 0);
}

// With k above the number of blocks every visible token is attended: o
// equals the attention op's causal oracle.
TEST(BlockSparseOracle, KCoveringEveryBlockIsDenseCausalAttention) {
    for (int mode : {0, 1}) {
        BsaInputs in = bsa_case(7, 1, 4, std::vector<double>(28, 0.5), std::vector<double>(28, 0.25));
        in.t[3] = bsa_filled({1, 7, 4}, 0.9), in.t[4] = bsa_filled({7, 4}, 1.7);
        const Params p({{"mode", static_cast<double>(mode)}, {"block", 3}, {"k", 4}});
        const auto o = oracle::evaluate_structured("block_sparse_attention", p, in.views(), {Format::fp32, Format::fp32}).exact.at(0);
        const auto dense = oracle::evaluate_structured("attention", Params({{"causal", 1}}),
                                                       {in.t[0].view(), in.t[1].view(), in.t[2].view()}, {Format::fp32, Format::fp32})
                               .exact.at(0);
        EXPECT_EQ(o, dense) << "mode " << mode;
    }
}

// QSA's block keys sit at p_b = b r.  Di = 2 rotates fully at unit
// frequency; every index query and key is (1, 0), so q~_t . K_b = c^2
// cos(t - p_b).  Query 9 (own block 2, r = 4): block 0 at p = 0 scores
// ReLU(cos 9) = 0, block 1 at p = 4 ReLU(cos 5) > 0: block 1.  Rotated at
// p = b, block 1 would score ReLU(cos 8) = 0 and the tie go to block 0.
TEST(BlockSparseOracle, QsaRopePositionIsTheBlockStart) {
    std::vector<double> ones(20, 0.0);
    for (std::size_t i = 0; i < 20; i += 2) ones[i] = 1;
    const BsaInputs in = bsa_case(10, 1, 2, ones, ones);
    const Params p({{"mode", 1}, {"block", 4}, {"k", 1}, {"rope_dim", 2}});
    const auto got = bsa_indices(p, in);
    EXPECT_EQ(got[9 * 2], 2);
    EXPECT_EQ(got[9 * 2 + 1], 1);
    for (const char* name : {"cpu.scalar.block_sparse_attention.fp32", "mutant.block_sparse_attention.rope_at_block_index.fp32"}) {
        const KernelInfo* k = builtin_registry().find(name);
        ASSERT_NE(k, nullptr) << name;
        const auto e = props::evaluate_case(*k, p, in.views());
        EXPECT_EQ(e.outputs[1].got.value(9 * 2 + 1), k->role == Role::mutant ? 0 : 1) << name;
    }
}

// The block scores' budget is earned: far below the scores on ordinary data,
// and MSA's grows with Di (gamma_Di of the FP32 dot product).
TEST(BlockSparseOracle, ScoreBudgetIsSmallAndGrowsWithTheDotLength) {
    const auto worst = [](std::int64_t di, int mode) {
        const std::vector<double> zeros(static_cast<std::size_t>(8 * di), 0.0);
        BsaInputs in = bsa_case(8, 1, di, zeros, zeros);
        in.t[3] = bsa_filled({1, 8, di}, 0.3), in.t[4] = bsa_filled({8, di}, 0.8);
        const Params p({{"mode", static_cast<double>(mode)}, {"block", 2}, {"k", 2}});
        const auto s = oracle::block_sparse_setup(p, in.views());
        const auto sc = oracle::block_sparse_scores(s, in.views());
        double rel = 0;
        for (std::size_t i = 0; i < sc.delta.size(); ++i) {
            EXPECT_GE(sc.delta[i], 0);
            if (sc.delta[i] > 0) rel = std::max(rel, sc.delta[i] / std::max(std::fabs(sc.score[i]), 0.1));
        }
        for (char u : sc.undefined) EXPECT_EQ(u, 0);
        return rel;
    };
    EXPECT_LT(worst(4, 0), 0x1p-18);
    EXPECT_GT(worst(64, 0), 2 * worst(4, 0));
    EXPECT_LT(worst(8, 1), 0x1p-10);  // QSA: relative to Di |q~| |K_b| (~ Di), not to a small score
}

// A kernel breaking exact ties toward the higher block makes an equally
// correct choice: the verdict passes it and counts the selections it accepted.
TEST(BlockSparseVerdict, TiesBrokenTheOtherWayPass) {
    conform::testing::expect_other_tie_rule_passes(
        "cpu.scalar.block_sparse_attention.fp32",
        [](const KernelCall& c) { cpu::block_sparse_call(c, Format::fp32, false, {.select = {.ties_to_higher = true}}); },
        "block scores' budget");
}

// An unselected token is never read: a NaN in its key and value leaves the
// oracle's o finite and the kernel passes (with a 0/-inf additive mask the
// attention oracle's NaN + -inf would poison the row).  MSA, blocks of 2,
// k = 1: query 5 attends its own block {4, 5} only; token 0 holds the NaNs.
TEST(BlockSparseOracle, UnselectedTokensAreNeverRead) {
    BsaInputs in = bsa_case(6, 1, 1, std::vector<double>(6, 1.0), {3, 1, 2, 0, 1, 1});
    in.t[1].set_value(0, NAN), in.t[2].set_value(1, NAN);  // token 0's k[0] and v[0]
    const Params p({{"mode", 0}, {"block", 2}, {"k", 1}});
    const auto r = oracle::evaluate_structured("block_sparse_attention", p, in.views(), {Format::fp32, Format::fp32});
    for (std::int64_t t = 2; t < 6; ++t)
        for (std::int64_t d = 0; d < 2; ++d) EXPECT_TRUE(std::isfinite(r.exact[0][static_cast<std::size_t>(t * 2 + d)])) << t;
    EXPECT_TRUE(std::isnan(r.exact[0][0]));  // query 0 reads token 0
    const KernelInfo* k = builtin_registry().find("cpu.scalar.block_sparse_attention.fp32");
    ASSERT_NE(k, nullptr);
    const auto res = props::check_case(*k, p, in.views());
    EXPECT_TRUE(res.pass) << res.message;
}

// A NaN index score leaves the row's budget undefined: its indices are not
// judged, and o is judged over the kernel's selection only where that is a
// valid one.  The kernel's NaN row (no selection) is not judged either.
TEST(BlockSparseOracle, NaNIndexScoreRowIsUndefined) {
    BsaInputs in = bsa_case(6, 1, 1, std::vector<double>(6, 1.0), {3, NAN, 2, 0, 1, 1});
    const Params p({{"mode", 0}, {"block", 2}, {"k", 2}});
    const KernelInfo* k = builtin_registry().find("cpu.scalar.block_sparse_attention.fp32");
    ASSERT_NE(k, nullptr);
    const auto e = props::evaluate_case(*k, p, in.views());
    // Queries 2..5 have block 0 (holding the NaN) in their pool: undefined rows.
    for (std::int64_t t = 2; t < 6; ++t) EXPECT_EQ(e.outputs[1].rigorous[static_cast<std::size_t>(t * 2 + 1)], oracle::kUndefined) << t;
    EXPECT_EQ(e.outputs[1].rigorous[0], 0);  // query 0: nothing eligible, judged
    EXPECT_TRUE(props::check_case(*k, p, in.views()).pass);
}

}  // namespace block_sparse_test
