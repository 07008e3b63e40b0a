// Compressed attention (docs/compressed_attention.md): the oracle on
// hand-made cases (one softmax over the overlapped 2m rows, entry 0 of a
// alone, HCA's visible list and dropped tail, the window), every kernel
// within the derived bound with every element judged, the staged verdict
// (ties broken the other way pass and are counted), and each mutant failing
// on a case made for it.  The property suites of the kernels and mutants run
// in tests/sparse_test.cpp (family "sparse").
#include <cmath>
#include <string>
#include <vector>

#include "impls/cpu/compressed_attention.hpp"
#include "impls/cuda/cuda.hpp"
#include "kernel_suite.hpp"
#include "oracle/bound.hpp"
#include "oracle/compressed_attention.hpp"
#include "oracle/structured.hpp"
#include "properties/generators.hpp"
#include "properties/verdict.hpp"

namespace compressed_attention_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

// H 1, c 1, Hi 1: every input a column of values.
struct CsaHand {
    std::int64_t l, m;
    std::vector<Tensor> in;
    std::vector<TensorView> views() const {
        std::vector<TensorView> v;
        for (const Tensor& t : in) v.push_back(t.view());
        return v;
    }
};

Tensor csa_column(std::vector<std::int64_t> shape, const std::vector<double>& v) {
    Tensor t(Format::fp32, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, v.at(static_cast<std::size_t>(i)));
    return t;
}

CsaHand csa_hand(const std::vector<double>& ca, const std::vector<double>& za, const std::vector<double>& ba,
                 const std::vector<double>& cb, const std::vector<double>& zb, const std::vector<double>& bb) {
    const auto l = static_cast<std::int64_t>(ca.size()), m = static_cast<std::int64_t>(ba.size());
    CsaHand h{l, m, {}};
    const std::vector<double> ones(static_cast<std::size_t>(l), 1.0);
    h.in.push_back(csa_column({1, l, 1}, ones));
    h.in.push_back(csa_column({l, 1}, ones));
    h.in.push_back(csa_column({l, 1}, ca));
    h.in.push_back(csa_column({l, 1}, za));
    h.in.push_back(csa_column({m, 1}, ba));
    h.in.push_back(csa_column({l, 1}, cb));
    h.in.push_back(csa_column({l, 1}, zb));
    h.in.push_back(csa_column({m, 1}, bb));
    h.in.push_back(csa_column({l, 1, 1}, ones));
    h.in.push_back(csa_column({l, 1}, ones));
    return h;
}

double softmax_pool(const std::vector<double>& x, const std::vector<double>& v) {
    double mx = -INFINITY, l = 0, a = 0;
    for (double s : x) mx = std::max(mx, s);
    for (std::size_t i = 0; i < x.size(); ++i) l += std::exp(x[i] - mx), a += std::exp(x[i] - mx) * v[i];
    return a / l;
}

props::Case csa_case(Format f, int mode, std::uint64_t seed, bool periodic = false) {
    // H 2, L 11 (m 2: N 5 and a tail of 1), c 4, Hi 2; k 2 of 5 entries, window 3.
    props::CaseSpec s = props::structured_spec(
        "compressed_attention", f, {2, 11, 4, 2, periodic ? 1 : 0},
        Params({{"mode", static_cast<double>(mode)}, {"m", 2}, {"k", 2}, {"window", 3}, {"scale", 0}}),
        props::Family::normal, 0, seed, 0);
    s.families = {props::Family::normal, props::Family::normal};
    return props::build_case(s);
}

}  // namespace

// CSA: entry 1 is ONE softmax over a's tokens 2, 3 and b's tokens 0, 1 (each
// with its position's bias); entry 0 is a's tokens 0, 1 alone; the tail
// token 4 is not compressed.  HCA: a's rows only.
TEST(CsaOracle, OneSoftmaxOverTheOverlappedRows) {
    const std::vector<double> ca{1, 2, 3, 4, 5}, za{0.5, -1, 2, 0.25, 9}, ba{0.125, -0.5};
    const std::vector<double> cb{-1, 6, 7, -2, 5}, zb{1, 0, -0.75, 3, 9}, bb{0.25, 1};
    const CsaHand h = csa_hand(ca, za, ba, cb, zb, bb);
    const auto r = oracle::evaluate_structured("compressed_attention", Params({{"m", 2}, {"k", 1}}), h.views(),
                                               {Format::fp32, Format::fp32, Format::fp32});
    ASSERT_EQ(r.exact.at(1).size(), 2u);
    EXPECT_NEAR(r.exact[1][0], softmax_pool({0.5 + 0.125, -1 - 0.5}, {1, 2}), 1e-15);
    EXPECT_NEAR(r.exact[1][1], softmax_pool({2 + 0.125, 0.25 - 0.5, 1 + 0.25, 0 + 1}, {3, 4, -1, 6}), 1e-15);
    const auto hca = oracle::evaluate_structured("compressed_attention", Params({{"m", 2}, {"mode", 1}}), h.views(),
                                                 {Format::fp32, Format::fp32, Format::fp32});
    EXPECT_NEAR(hca.exact[1][1], softmax_pool({2 + 0.125, 0.25 - 0.5}, {3, 4}), 1e-15);
    // HCA's indices [L, N]: token t lists the entries with 2 (n + 1) - 1 <= t.
    EXPECT_EQ(hca.exact.at(2), (std::vector<double>{-1, -1, 0, -1, 0, -1, 0, 1, 0, 1}));
}

// The window: with window 1 and no entry observed yet (t = 0), o is the raw
// row itself; with window 0 and nothing observed, o is 0 (an empty row).
TEST(CsaOracle, WindowAndEmptyRows) {
    const CsaHand h = csa_hand({1, 2, 3, 4}, {0, 0, 0, 0}, {0, 0}, {1, 2, 3, 4}, {0, 0, 0, 0}, {0, 0});
    auto o_of = [&](double window) {
        return oracle::evaluate_structured("compressed_attention", Params({{"m", 2}, {"k", 1}, {"window", window}}), h.views(),
                                           {Format::fp32, Format::fp32, Format::fp32})
            .exact.at(0);
    };
    EXPECT_EQ(o_of(1)[0], 1);  // raw[0] = 1
    EXPECT_EQ(o_of(0)[0], 0);
    EXPECT_EQ(o_of(0)[1], 1.5);  // t = 1: entry 0 (mean of ca 1, 2 under equal gates) alone
}

// An infinite value whose weight underflows in FP32 (its logit 200 below
// the entry's maximum) still counts whole: the exact weight is positive, so
// the entry is +inf, never 0 * inf = NaN -- in the CPU kernels and the CUDA
// ones, both modes.
TEST(CsaKernel, AnInfiniteValueCountsWhereItsWeightUnderflows) {
    const CsaHand h = csa_hand({1, INFINITY, 1, 1, 1, 1}, {0, -200, 0, 0, 0, 0}, {0, 0}, {1, 1, 1, 1, 1, 1},
                               {0, 0, 0, 0, 0, 0}, {0, 0});
    for (const int mode : {0, 1}) {
        const Params p({{"mode", static_cast<double>(mode)}, {"m", 2}, {"k", 2}, {"window", 2}});
        for (const KernelInfo* k : {builtin_registry().find("cpu.scalar.compressed_attention.fp32"),
                                    builtin_registry().find("cpu.naive.compressed_attention.fp32"),
                                    cuda_emu_registry().kernels.find("cuda.compressed_attention.fp32")}) {
            ASSERT_NE(k, nullptr);
            const std::vector<Tensor> got = run_kernel(*k, p, h.views());
            EXPECT_EQ(got[1].value(0), INFINITY) << k->name << ", mode " << mode;
            const props::CaseResult r = props::check_case(*k, p, h.views());
            EXPECT_TRUE(r.pass) << k->name << ", mode " << mode << ": " << r.message;
        }
    }
}

TEST(CsaKernel, EveryKernelWithinTheBoundEveryElementJudged) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const char* variant : {"scalar", "naive"})
            for (int mode : {0, 1}) {
                const KernelInfo* k = builtin_registry().find(std::string("cpu.") + variant + ".compressed_attention." + name(f));
                ASSERT_NE(k, nullptr);
                for (std::uint64_t seed = 1; seed <= 2; ++seed) {
                    const props::Case c = csa_case(f, mode, seed);
                    const props::CaseResult r = props::check_case(*k, c.params, c.views());
                    EXPECT_TRUE(r.pass) << k->name << " mode " << mode << ": " << r.message;
                    EXPECT_EQ(r.not_judged, 0) << k->name << " mode " << mode;
                    EXPECT_EQ(r.judged, 2 * 11 * 4 + 5 * 4 + 11 * (mode == 0 ? 2 : 5)) << k->name;
                }
            }
}

// Periodic tokens make entries 1 .. 4 equal: their scores tie exactly.  A
// kernel that breaks ties toward the higher index passes, and the verdict
// counts the selections it accepted.
TEST(CsaVerdict, TiesBrokenTheOtherWayPassAndAreCounted) {
    KernelInfo k = *builtin_registry().find("cpu.naive.compressed_attention.fp32");
    k.name = "test.ties_to_higher.compressed_attention.fp32";
    k.fn = [](const KernelCall& c) { cpu::compressed_attention_call(c, true, {.ties_to_higher = true}); };
    std::int64_t accepted = 0;
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        const props::Case c = csa_case(Format::fp32, 0, seed, true);
        props::Stats st;
        const props::CaseResult r = props::check_case(k, c.params, c.views(), &st);
        EXPECT_TRUE(r.pass) << r.message;
        for (const auto& [what, n] : st.notes())
            if (what.find("indices:") != std::string::npos) accepted += n;
    }
    EXPECT_GT(accepted, 0);
}

// Each mutant fails the plain verdict on the case its bug shows in.
TEST(CsaMutants, EachFailsWhereItsBugShows) {
    const struct {
        const char* bug;
        int mode;
        const char* output;
    } cases[] = {{"no_overlap", 0, "comp"},        {"mean_pool", 1, "comp"},       {"separate_softmax", 0, "comp"},
                 {"bias_dropped", 0, "comp"},      {"bias_dropped", 1, "comp"},    {"entry_vs_token", 0, "indices"},
                 {"entry_vs_token", 1, "indices"}, {"window_plus_one", 0, "o"},    {"window_plus_one", 1, "o"}};
    for (const auto& m : cases) {
        const KernelInfo* k = builtin_registry().find(std::string("mutant.compressed_attention.") + m.bug + ".fp32");
        ASSERT_NE(k, nullptr) << m.bug;
        const props::Case c = csa_case(Format::fp32, m.mode, 5);
        const props::CaseResult r = props::check_case(*k, c.params, c.views());
        EXPECT_FALSE(r.pass) << m.bug << " mode " << m.mode;
        if (!r.pass) {
            EXPECT_EQ(find_op(k->op)->outputs.at(r.failed_output), m.output) << m.bug << ": " << r.message;
        }
    }
}

// A NaN index query at token 3 makes its scores NaN: its indices row and
// its o row are NaN (compared by class), the other tokens untouched.  An
// index query of 2^127 makes token 3's dot products overflow FP32: its
// indices are not judged (kUndefined), nor its o without a candidate's
// selection to judge it over; everything else keeps a finite bound.
TEST(CsaOracle, NaNScoresMakeTheRowNaNAndOverflowLeavesItUndefined) {
    CsaHand h = csa_hand({1, 2, 3, 4, 5, 6}, {0, 1, 0, 1, 0, 1}, {0, 0}, {1, 2, 3, 4, 5, 6}, {0, 0, 0, 0, 0, 0}, {0, 0});
    const Params p({{"m", 2}, {"k", 1}, {"window", 1}});
    const std::vector<Format> f{Format::fp32, Format::fp32, Format::fp32};
    h.in[8].set_value(3, NAN);
    const auto r = oracle::evaluate_structured("compressed_attention", p, h.views(), f);
    for (std::int64_t t = 0; t < 6; ++t) {
        EXPECT_EQ(std::isnan(r.exact[2][static_cast<std::size_t>(t)]), t == 3) << t;
        EXPECT_EQ(std::isnan(r.exact[0][static_cast<std::size_t>(t)]), t == 3) << t;
    }
    h.in[8].set_value(3, 0x1p127);
    const auto r2 = oracle::evaluate_structured("compressed_attention", p, h.views(), f);
    const auto b = oracle::find_structured_bound("compressed_attention")(p, h.views(), r2.exact, Format::fp32, f);
    for (std::int64_t t = 0; t < 6; ++t) {
        const double bi = b[2][static_cast<std::size_t>(t)], bo = b[0][static_cast<std::size_t>(t)];
        EXPECT_EQ(bi == oracle::kUndefined, t == 3) << t;
        if (t == 3) {
            EXPECT_EQ(bo, oracle::kUndefined);
        }
        else EXPECT_TRUE(std::isfinite(bo) && bo >= 0) << t << ": " << bo;
    }
}

// Token 3's index query 2^127 overflows its FP32 scores (the row is
// undefined).  A kernel's well-formed selection there is accepted and its o
// judged over it; a kernel whose overflowed scores read as NaN returns a NaN
// row, whose o is then not judged -- but o NaN beside a well-formed
// selection still fails.  (Seed 2838263984 failed the scalar kernel's
// special values on such a row: o was judged over the oracle's selection.)
TEST(CsaVerdict, AnOverflowingRowJudgesOOverTheCandidatesSelectionOnly) {
    CsaHand h = csa_hand({1, 2, 3, 4, 5, 6}, {0, 1, 0, 1, 0, 1}, {0, 0}, {1, 2, 3, 4, 5, 6}, {0, 0, 0, 0, 0, 0}, {0, 0});
    h.in[8].set_value(3, 0x1p127);
    const Params p({{"m", 2}, {"k", 1}, {"window", 1}});
    const KernelInfo& base = *builtin_registry().find("cpu.scalar.compressed_attention.fp32");
    const props::CaseResult plain = props::check_case(base, p, h.views());
    EXPECT_TRUE(plain.pass) << plain.message;
    EXPECT_EQ(plain.not_judged, 1);  // token 3's index
    auto poisoned = [&](bool nan_indices) {
        KernelInfo k = base;
        k.fn = [inner = base.fn, nan_indices](const KernelCall& c) {
            inner(c);
            c.out[0].set_bits(3, encode(Format::fp32, NAN));  // o [1, 6, 1]: token 3
            if (nan_indices) c.out[2].set_bits(3, encode(Format::fp32, NAN));
        };
        return props::check_case(k, p, h.views());
    };
    const props::CaseResult nan_row = poisoned(true);
    EXPECT_TRUE(nan_row.pass) << nan_row.message;
    EXPECT_EQ(nan_row.not_judged, 2);  // token 3's index and o
    EXPECT_FALSE(poisoned(false).pass);
}

}  // namespace compressed_attention_test
