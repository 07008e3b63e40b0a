// NSA (op nsa_attention, docs/nsa_attention.md): the kernels within the
// derived bound with every element judged, the oracle's selection by hand,
// its branches against the attention op (dense selection, the window alone),
// the uncompressed tail, and the ambiguity-aware verdict of tied blocks.
// The kernels' and mutants' property suites run in tests/sparse_test.cpp
// (family "sparse").
#include <cmath>
#include <string>

#include "impls/cpu/nsa.hpp"
#include "impls/cuda/cuda.hpp"
#include "kernel_suite.hpp"
#include "oracle/attention.hpp"
#include "oracle/nsa.hpp"
#include "oracle/structured.hpp"
#include "properties/generators.hpp"
#include "properties/verdict.hpp"

namespace nsa_attention_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

// Hq 4 over Hkv 2, Lq = Lk = 19 (blocks of 4: a tail of 3), D 8, Dv 8.
props::Case nsa_case(Format f, std::uint64_t seed, Params p = Params({{"block", 4}, {"n", 3}, {"window", 5}})) {
    props::CaseSpec s = props::structured_spec("nsa_attention", f, {4, 2, 19, 19, 8, 8, 0, 0}, p, props::Family::normal, 0, seed, 0);
    return props::build_case(s);
}

// One fp32 tensor of shape from values.
Tensor nsa_t(std::vector<std::int64_t> shape, const std::vector<double>& v) {
    Tensor t(Format::fp32, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, v.at(static_cast<std::size_t>(i)));
    return t;
}

}  // namespace

TEST(NsaKernel, WithinTheBoundEveryElementJudged) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        const KernelInfo* k = builtin_registry().find(std::string("cpu.scalar.nsa_attention.") + name(f));
        ASSERT_NE(k, nullptr);
        for (std::uint64_t seed = 1; seed <= 2; ++seed) {
            const props::Case c = nsa_case(f, seed);
            const props::CaseResult r = props::check_case(*k, c.params, c.views());
            EXPECT_TRUE(r.pass) << k->name << ": " << r.message;
            EXPECT_EQ(r.not_judged, 0) << k->name;
            EXPECT_EQ(r.judged, 4 * 19 * 8 + 2 * 19 * 3) << k->name;
        }
    }
}

// A key with an infinity whose logit is exactly -inf (q . k = -inf) weighs
// exactly 0: its infinite value must not reach o, in the compressed branch
// (block 0's pooled key and value are infinite) nor in the selected one
// (token 0).  The direct softmax once added such a value whole (the rule for
// an underflowed weight), which made o infinite.
TEST(NsaKernel, AMinusInfinityLogitHidesAnInfiniteValue) {
    const Tensor q = nsa_t({1, 8, 2}, {0.1, 0.2, 0.3, 0.1, 0.2, 0.2, 0.1, 0.1, 0.3, 0.2, 0.1, 0.1, 0.2, 0.3, -1, 0.5});
    const Tensor k = nsa_t({1, 8, 2}, {INFINITY, 0, 0.5, 0.5, 0.2, 0.1, 0.3, 0.4, 0.1, 0.2, 0.2, 0.3, 0.4, 0.1, 0.3, 0.3});
    const Tensor v = nsa_t({1, 8, 2}, {INFINITY, 1, 0.5, 0.5, 0.2, 0.1, 0.3, 0.4, 0.1, 0.2, 0.2, 0.3, 0.4, 0.1, 0.3, 0.3});
    std::vector<double> gates(8 * 3, 0.5);
    const Tensor g = nsa_t({1, 8, 3}, gates);
    const Params p({{"block", 4}, {"n", 4}, {"window", 4}});
    std::vector<const KernelInfo*> kernels = {builtin_registry().find("cpu.scalar.nsa_attention.fp32"),
                                              builtin_registry().find("cpu.naive.nsa_attention.fp32"),
                                              cuda_emu_registry().kernels.find("cuda.nsa_attention.fp32")};
    for (const KernelInfo* kn : kernels) {
        ASSERT_NE(kn, nullptr);
        const std::vector<TensorView> in = {q.view(), k.view(), v.view(), g.view()};
        const props::CaseResult r = props::check_case(*kn, p, in);
        EXPECT_TRUE(r.pass) << kn->name << ": " << r.message;
        const std::vector<Tensor> got = run_kernel(*kn, p, in);
        EXPECT_TRUE(std::isfinite(got[0].value(7 * 2))) << kn->name << ": o[0, 7, 0] = " << got[0].value(7 * 2);
    }
}

// Keys chosen so that the compressed blocks rank 2 > 0 > 1 for a query that
// sees them all: row t = 15 (own block 3) selects [3, 2, 0]; row 3 sees no
// complete block: [0, -1, -1]; row 7 (own block 1) sees block 0 only.
TEST(NsaOracle, SelectionByHand) {
    const std::int64_t lk = 16;
    std::vector<double> k(lk, 0.0), v(lk, 1.0), q(lk, 1.0), g(lk * 3, 0.0);
    for (std::int64_t j = 0; j < lk; ++j) k[static_cast<std::size_t>(j)] = j < 4 ? 1.0 : j < 8 ? -1.0 : j < 12 ? 2.0 : 0.0;
    const Tensor tq = nsa_t({1, lk, 1}, q), tk = nsa_t({1, lk, 1}, k), tv = nsa_t({1, lk, 1}, v), tg = nsa_t({1, lk, 3}, g);
    const Params p({{"block", 4}, {"n", 3}, {"window", 2}});
    const oracle::OpOutputs out = oracle::eval_nsa_attention(p, {tq.view(), tk.view(), tv.view(), tg.view()});
    auto row = [&](std::int64_t i) {
        std::vector<double> r;
        for (std::int64_t j = 0; j < 3; ++j) r.push_back(oracle::to_double(out.values[1][static_cast<std::size_t>(i * 3 + j)]));
        return r;
    };
    EXPECT_EQ(row(15), (std::vector<double>{3, 2, 0}));
    EXPECT_EQ(row(3), (std::vector<double>{0, -1, -1}));
    EXPECT_EQ(row(7), (std::vector<double>{1, 0, -1}));
    EXPECT_EQ(row(11), (std::vector<double>{2, 0, 1}));
    // v = 1 everywhere: every nonempty branch gives 1, the empty compressed branch 0.
    EXPECT_EQ(oracle::to_double(out.values[0][15]), 1.5);  // sigmoid(0) * 3
    EXPECT_EQ(oracle::to_double(out.values[0][2]), 1.0);   // no complete block yet
}

// n past the number of blocks: the selected branch is causal attention
// (the attention op's oracle), to oracle precision.
TEST(NsaOracle, DenseSelectionIsCausalAttention) {
    props::Case c = nsa_case(Format::fp32, 5, Params({{"block", 4}, {"n", 6}, {"window", 3}}));
    for (std::int64_t r = 0; r < c.inputs[3].numel() / 3; ++r) {
        c.inputs[3].set_value(r * 3, -INFINITY);
        c.inputs[3].set_value(r * 3 + 2, -INFINITY);
        c.inputs[3].set_value(r * 3 + 1, 0.0);
    }
    const oracle::OpOutputs nsa = oracle::eval_nsa_attention(c.params, c.views());
    const oracle::OpOutputs dense =
        oracle::eval_attention(Params({{"causal", 1}}), {c.inputs[0].view(), c.inputs[1].view(), c.inputs[2].view()});
    for (std::size_t e = 0; e < nsa.values[0].size(); ++e)
        EXPECT_LT(std::fabs(oracle::to_double(nsa.values[0][e] - dense.values[0][e] / 2)), 0x1p-100) << e;
}

// g_c = g_s = -inf: the scalar kernel is the gated_attention kernel with
// window w and gate g_w, bit for bit (the same FP32 flash path, sigmoid and
// one rounding).
TEST(NsaKernel, ClosedGatesAreTheGatedSlidingWindowKernelBitForBit) {
    for (Format f : {Format::fp32, Format::bf16}) {
        props::Case c = nsa_case(f, 9);
        for (std::int64_t r = 0; r < c.inputs[3].numel() / 3; ++r) {
            c.inputs[3].set_value(r * 3, -INFINITY);
            c.inputs[3].set_value(r * 3 + 1, -INFINITY);
        }
        Tensor g(f, {4, 19, 8});
        for (std::int64_t e = 0; e < g.numel(); ++e) g.set_bits(e, c.inputs[3].bits(e / 8 * 3 + 2));
        const auto a = run_kernel(*builtin_registry().find(std::string("cpu.scalar.nsa_attention.") + name(f)),
                                         c.params, c.views());
        const auto b = run_kernel(*builtin_registry().find(std::string("cpu.scalar.gated_attention.") + name(f)),
                                         Params({{"window", 5}}),
                                         {c.inputs[0].view(), c.inputs[1].view(), c.inputs[2].view(), g.view()});
        for (std::int64_t e = 0; e < a[0].numel(); ++e) ASSERT_EQ(a[0].bits(e), b[0].bits(e)) << name(f) << " o[" << e << "]";
    }
}

// Lk = 19 with blocks of 4: the tail 16..18 is no compressed block; with the
// selected and window gates closed, o does not move when the tail changes.
TEST(NsaOracle, TailIsNotCompressed) {
    props::Case c = nsa_case(Format::fp32, 3);
    for (std::int64_t r = 0; r < c.inputs[3].numel() / 3; ++r) {
        c.inputs[3].set_value(r * 3 + 1, -INFINITY);
        c.inputs[3].set_value(r * 3 + 2, -INFINITY);
    }
    props::Case t = c;
    for (std::int64_t g = 0; g < 2; ++g)
        for (std::int64_t j = 16 * 8; j < 19 * 8; ++j) t.inputs[1].set_value(g * 19 * 8 + j, 7.0), t.inputs[2].set_value(g * 19 * 8 + j, -3.0);
    const auto a = oracle::eval_nsa_attention(c.params, c.views()), b = oracle::eval_nsa_attention(t.params, t.views());
    for (std::size_t o = 0; o < 2; ++o)
        for (std::size_t e = 0; e < a.values[o].size(); ++e) EXPECT_TRUE(a.values[o][e] == b.values[o][e]) << o << " " << e;
}

// Tied blocks (block 1 a copy of block 0): a kernel breaking the tie toward
// the higher index passes, judged against the exact output of its own selection.
TEST(NsaVerdict, TiedBlocksEitherOrderPass) {
    props::CaseSpec s = props::structured_spec("nsa_attention", Format::fp32, {2, 1, 16, 16, 4, 4, 1, 0},
                                               Params({{"block", 4}, {"n", 2}, {"window", 2}}), props::Family::normal, 0, 4, 0);
    const props::Case c = props::build_case(s);
    KernelInfo k = *builtin_registry().find("cpu.scalar.nsa_attention.fp32");
    k.fn = [](const KernelCall& call) { cpu::nsa_call(call, false, {.ties_to_higher = true}); };
    const auto ref = run_kernel(*builtin_registry().find("cpu.scalar.nsa_attention.fp32"), c.params, c.views());
    const auto got = run_kernel(k, c.params, c.views());
    bool differs = false;
    for (std::int64_t e = 0; e < ref[1].numel(); ++e) differs = differs || ref[1].bits(e) != got[1].bits(e);
    EXPECT_TRUE(differs) << "the tie was not broken the other way";
    props::Stats st;
    const props::CaseResult r = props::check_case(k, c.params, c.views(), &st);
    EXPECT_TRUE(r.pass) << r.message;
    std::int64_t accepted = 0;
    for (const auto& [what, n] : st.notes())
        if (what.find("within the importance budget") != std::string::npos) accepted += n;
    EXPECT_GT(accepted, 0);
}

// Selections of blocks not fully observed are out of any budget: the
// indices fail (the unfinished own block without force_local; future blocks
// in free slots, the samples' masked top-k).
TEST(NsaVerdict, UnobservedBlocksFailAtTheIndices) {
    for (const char* bug : {"future_block", "masked_topk"}) {
        const props::Case c = nsa_case(Format::fp32, 2, Params({{"block", 4}, {"n", 3}, {"window", 5}, {"force_local", 0}}));
        const KernelInfo* m = builtin_registry().find(std::string("mutant.nsa_attention.") + bug + ".fp32");
        ASSERT_NE(m, nullptr);
        const props::CaseResult r = props::check_case(*m, c.params, c.views());
        EXPECT_FALSE(r.pass) << bug;
        const props::CaseEval e = props::evaluate_case(*m, c.params, c.views());
        std::int64_t wrong = 0;  // ids other than the reference's: the oracle kept its own row
        for (std::int64_t i = 0; i < e.outputs[1].got.numel(); ++i) wrong += e.outputs[1].got.bits(i) != e.outputs[1].ref.bits(i);
        EXPECT_GT(wrong, 0) << bug;
    }
}

// An infinite v at a key whose weight underflows (a logit 1e30 below the
// max: below MPFR's exponent range too) counts whole: the exact weight is
// positive, so o is +inf, as the kernels' careful accumulation gives.
TEST(NsaOracle, InfiniteValueUnderAnUnderflowingWeightCountsWhole) {
    const Tensor q = nsa_t({1, 2, 1}, {1.0, 1.0}), k = nsa_t({1, 2, 1}, {1.0, -1e30}), v = nsa_t({1, 2, 1}, {2.0, INFINITY});
    const Tensor g = nsa_t({1, 2, 3}, std::vector<double>(6, 0.0));
    const Params p({{"block", 4}, {"n", 1}, {"window", 2}});  // no complete block: o = (o_s + o_w) / 2
    const oracle::OpOutputs out = oracle::eval_nsa_attention(p, {q.view(), k.view(), v.view(), g.view()});
    EXPECT_EQ(oracle::to_double(out.values[0][1]), INFINITY);
    EXPECT_EQ(oracle::to_double(out.values[0][0]), 2.0);  // sigmoid(0) (v_0 + v_0)
    const auto got = run_kernel(*builtin_registry().find("cpu.scalar.nsa_attention.fp32"), p, {q.view(), k.view(), v.view(), g.view()});
    EXPECT_EQ(got[0].value(1), INFINITY);
}

TEST(NsaOracle, ShapeErrorsNameTheInput) {
    const Tensor q = nsa_t({2, 3, 2}, std::vector<double>(12, 0.0)), k = nsa_t({2, 2, 2}, std::vector<double>(8, 0.0));
    const Tensor v = nsa_t({2, 2, 1}, std::vector<double>(4, 0.0)), g = nsa_t({2, 3, 3}, std::vector<double>(18, 0.0));
    EXPECT_THROW(oracle::eval_nsa_attention(Params(), {q.view(), k.view(), v.view(), g.view()}), std::invalid_argument);  // Lk < Lq
    const Tensor g2 = nsa_t({2, 3, 2}, std::vector<double>(12, 0.0)), k3 = nsa_t({2, 3, 2}, std::vector<double>(12, 0.0));
    const Tensor v3 = nsa_t({2, 3, 1}, std::vector<double>(6, 0.0));
    try {
        oracle::eval_nsa_attention(Params(), {q.view(), k3.view(), v3.view(), g2.view()});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'g'"), std::string::npos) << e.what();
    }
}

}  // namespace nsa_attention_test
