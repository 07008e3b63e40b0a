// The MoE layers moe and latent_moe (docs/moe.md, "The MoE layer"): the
// oracle on a layer small enough to write out, the ambiguity-aware verdict
// (another tie rule passes and is counted), the dense-masked baseline within
// budget, and the inputs' errors.  The property suites of the family's
// kernels and mutants run in moe_test (CONFORM_FAMILY_SUITES(Moe, "moe")).
#include <cmath>
#include <random>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "impls/cpu/moe.hpp"
#include "kernel_suite.hpp"
#include "oracle/structured.hpp"
#include "properties/verdict.hpp"

namespace moe_layer_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

Tensor tensor(std::vector<std::int64_t> shape, const std::vector<double>& v) { return conform::testing::fp32_tensor(std::move(shape), v); }

double silu(double z) { return z / (1 + std::exp(-z)); }

// One channel, two experts with F = 1: expert i maps v to silu(g_i v) u_i v d_i.
struct Tiny {
    Tensor x = tensor({1, 1}, {1.5}), router = tensor({1, 2}, {2, 1});
    Tensor gate_up = tensor({2, 1, 2}, {0.5, 2, -1, 3}), down = tensor({2, 1, 1}, {0.25, 4});
    Tensor shared_gu = tensor({1, 1, 2}, {1, 1}), shared_dn = tensor({1, 1, 1}, {0.5});
    double expert(int i, double v) const {
        return silu(gate_up.value(2 * i) * v) * gate_up.value(2 * i + 1) * v * down.value(i);
    }
};

std::string check_kernel(const std::string& name) {
    const KernelInfo* k = builtin_registry().find(name);
    if (!k) return "no kernel " + name;
    const auto r = props::run_suite(*k, conform::testing::env_config());
    std::string bad;
    for (const auto& p : r.properties)
        if (!p.passed) bad += p.name + ": " + p.message + "\n" + p.counterexample + "\n";
    return bad;
}

}  // namespace

TEST(MoeLayerOracle, SharedPlusWeightedRoutedExperts) {
    const Tiny m;
    const Params p({{"k", 1}});
    const auto r = oracle::evaluate_structured("moe", p,
                                               {m.x.view(), m.router.view(), m.gate_up.view(), m.down.view(),
                                                m.shared_gu.view(), m.shared_dn.view()},
                                               {Format::fp32, Format::fp32, Format::fp32});
    // Expert 0 wins (logit 3 against 1.5); k = 1 renormalized: weight 1.
    EXPECT_EQ(r.rounded[1].value(0), 0);
    EXPECT_EQ(r.rounded[2].value(0), 1);
    const double shared = silu(1.5) * 1.5 * 0.5;
    EXPECT_NEAR(r.exact[0][0], m.expert(0, 1.5) + shared, 1e-15);
}

TEST(MoeLayerOracle, LatentNormalizedAndPlain) {
    const Tiny m;
    const Tensor ld = tensor({1, 1}, {2}), lu = tensor({1, 1}, {-3});
    const std::vector<TensorView> in{m.x.view(), m.router.view(), ld.view(), lu.view(), m.gate_up.view(), m.down.view()};
    Params p({{"k", 2}, {"renormalize", 0}, {"eps", 0.25}});
    const auto norm = oracle::evaluate_structured("latent_moe", p, in, {Format::fp32});
    const double z = 3, e = std::exp(1.5) + 1;  // softmax of (3, 1.5)
    const double u = std::exp(1.5) / e * m.expert(0, z) + 1 / e * m.expert(1, z);
    EXPECT_NEAR(norm.exact[0][0], u / std::sqrt(u * u + 0.25) * -3, 1e-14);
    p.set("normalized", 0);
    const auto plain = oracle::evaluate_structured("latent_moe", p, in, {Format::fp32});
    EXPECT_NEAR(plain.exact[0][0], u * -3, 1e-12 * std::fabs(u));
}

TEST(MoeLayerOracle, NonFiniteMakesTheTokenNaN) {
    Tiny m;
    m.shared_dn.set_value(0, INFINITY);
    const auto r = oracle::evaluate_structured("moe", Params({{"k", 1}}),
                                               {m.x.view(), m.router.view(), m.gate_up.view(), m.down.view(),
                                                m.shared_gu.view(), m.shared_dn.view()},
                                               {Format::fp32});
    EXPECT_TRUE(std::isnan(r.rounded[0].value(0)));
}

TEST(MoeLayerOracle, InputsNamedInErrors) {
    const Tiny m;
    const Tensor bad_down = tensor({2, 2, 1}, {1, 1, 1, 1});
    try {
        oracle::evaluate_structured("moe", Params({{"k", 1}}), {m.x.view(), m.router.view(), m.gate_up.view(), bad_down.view()},
                                    {Format::fp32});
        FAIL() << "a down of the wrong F was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'down' dimension 1"), std::string::npos) << e.what();
    }
    EXPECT_THROW(oracle::evaluate_structured("moe", Params({{"k", 1}}),
                                             {m.x.view(), m.router.view(), m.gate_up.view(), m.down.view(), m.shared_gu.view()},
                                             {Format::fp32}),
                 std::invalid_argument);  // shared_gate_up without shared_down
}

// A router that breaks exact ties toward the higher index chooses another,
// equally correct, expert: y is judged for its choice and passes, and the
// report counts the selections accepted.
TEST(MoeLayerVerdict, TiesBrokenTheOtherWayPass) {
    for (const char* op : {"moe", "latent_moe"}) {
        KernelInfo k = *builtin_registry().find(std::string("cpu.scalar.") + op + ".fp32");
        k.name = std::string("test.ties_to_higher.") + op + ".fp32";
        const bool latent = std::string(op) == "latent_moe";
        k.fn = [latent](const KernelCall& c) {
            cpu::moe_layer_call(c, latent, false, cpu::ExpertForm::grouped, {.router = {.ties_to_higher = true}});
        };
        const auto r = props::run_suite(k, conform::testing::env_config());
        for (const auto& p : r.properties) EXPECT_TRUE(p.passed) << op << " " << p.name << ": " << p.message << "\n" << p.counterexample;
        std::int64_t accepted = 0;
        for (const auto& [what, n] : r.stats.notes)
            if (what.find("other than the oracle's") != std::string::npos) accepted += n;
        EXPECT_GT(accepted, 0) << op << ": no tie was broken the other way";
    }
}

// The dense-masked baselines are not gated by the suite, but they compute
// the same contract and must meet the same budget.
// shared_independent_of_routing redraws the router: a chosen expert whose
// FP32 softmax score underflows (far below the maximum, chosen through its
// selection bias) gets the renormalized weight 0 / 0 = NaN, and the routed
// experts' exact 0 times it is NaN.  The router's budget leaves that
// weight unbounded, so the property does not compare the token.  Seed
// 621559275 (commit 250c3deb) drew such a router for latent_moe: the
// property failed there with "y[1, 0]: 0x1.5cb28p+3 with one router, nan
// with another".
TEST(MoeLayerProperties, SharedIndependenceSkipsTokensWithUnboundedWeights) {
    const props::PropertyDef* def = nullptr;
    for (const props::PropertyDef& p : props::property_defs())
        if (p.name == "shared_independent_of_routing" && p.applies(*find_op("latent_moe"))) def = &p;
    ASSERT_NE(def, nullptr);
    KernelInfo k = *builtin_registry().find("cpu.scalar.latent_moe.fp32");
    k.name = "test.ties_to_higher.latent_moe.fp32";
    k.fn = [](const KernelCall& c) {
        cpu::moe_layer_call(c, true, false, cpu::ExpertForm::grouped, {.router = {.ties_to_higher = true}});
    };
    props::RunConfig cfg;
    cfg.seed = 621559275;
    const auto r = props::run_property(*def, k, cfg, nullptr);
    EXPECT_TRUE(r.passed) << r.message << "\n" << r.counterexample;
    // The skip leaves the property its teeth: shared experts scaled by the
    // first routing weight still fail it.
    const KernelInfo* weighted = builtin_registry().find("mutant.moe.shared_weighted.fp32");
    ASSERT_NE(weighted, nullptr);
    const props::PropertyDef* moe_def = nullptr;
    for (const props::PropertyDef& p : props::property_defs())
        if (p.name == "shared_independent_of_routing" && p.applies(*find_op("moe"))) moe_def = &p;
    ASSERT_NE(moe_def, nullptr);
    EXPECT_FALSE(props::run_property(*moe_def, *weighted, cfg, nullptr).passed);
}

TEST(MoeLayerVerdict, DenseMaskedBaselinesWithinBudget) {
    for (const char* name : {"cpu.dense.moe.fp32", "cpu.dense.moe.bf16", "cpu.dense.latent_moe.fp32", "cpu.dense.latent_moe.bf16"})
        EXPECT_EQ(check_kernel(name), "") << name;
}

// u = 3 eta: RMSNorm's w u (w = 1/8) and its quotient land in FP32's
// subnormals, where the kernel's roundings are absolute, not relative; the
// budget carries those terms (without them the error was 3x the bound).
TEST(MoeLayerVerdict, SubnormalRmsNormWithinBudget) {
    const Tensor x = tensor({1, 1}, {1}), router = tensor({1, 2}, {1, 0}), ld = tensor({1, 1}, {1}), lu = tensor({1, 1}, {1});
    const Tensor gu = tensor({2, 1, 2}, {128, 0x1p-60, 1, 1}), dn = tensor({2, 1, 1}, {3 * 0x1p-96, 1});
    const Tensor wn = tensor({1}, {0.125});
    const Tensor none(Format::fp32, {0});
    const std::vector<TensorView> in{x.view(), router.view(), ld.view(), lu.view(), gu.view(), dn.view(),
                                     none.view(), none.view(), wn.view()};
    const props::CaseResult r =
        props::check_case(*builtin_registry().find("cpu.scalar.latent_moe.fp32"), Params({{"k", 1}, {"eps", 1e-6}}), in);
    EXPECT_TRUE(r.passed()) << r.message;
}

// An infinite gate: the kernel's silu is NaN there, and the oracle's row is
// NaN too (not silu's limit -0), so the row is judged by class.
TEST(MoeLayerOracle, InfiniteGateMakesTheRowNaN) {
    Tiny m;
    m.gate_up.set_value(0, -INFINITY);
    const std::vector<TensorView> in{m.x.view(), m.router.view(), m.gate_up.view(), m.down.view()};
    const auto r = oracle::evaluate_structured("moe", Params({{"k", 1}}), in, {Format::fp32});
    EXPECT_TRUE(std::isnan(r.rounded[0].value(0)));
    const props::CaseResult c = props::check_case(*builtin_registry().find("cpu.scalar.moe.fp32"), Params({{"k", 1}}), in);
    EXPECT_TRUE(c.passed()) << c.message;
}

TEST(MoeLayerOracle, EpsBelowFp32NormalsRefused) {
    const Tiny m;
    const Tensor ld = tensor({1, 1}, {2}), lu = tensor({1, 1}, {-3});
    const std::vector<TensorView> in{m.x.view(), m.router.view(), ld.view(), lu.view(), m.gate_up.view(), m.down.view()};
    EXPECT_THROW(oracle::evaluate_structured("latent_moe", Params({{"k", 1}, {"eps", 1e-50}}), in, {Format::fp32}),
                 std::invalid_argument);
    EXPECT_NO_THROW(oracle::evaluate_structured("latent_moe", Params({{"k", 1}, {"eps", 1e-50}, {"normalized", 0}}), in,
                                                {Format::fp32}));
}

// The layers forward DeepSeek-V3's router parameters (groups, topk_groups,
// scaling) to their router: top 3 of 8 experts in 4 groups of 2, 2 kept, the
// weights scaled by 2.5, the kernels pass, every token's experts lie in at
// most 2 groups and its renormalized weights sum to 2.5; a router that
// scales before renormalizing fails the layer (y and weights).
TEST(MoeLayerVerdict, GroupLimitedScaledRouterForwarded) {
    std::mt19937_64 rng(11);
    std::normal_distribution<double> N(0, 0.5);
    const auto random = [&](std::vector<std::int64_t> shape) {
        Tensor t(Format::fp32, shape);
        for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, N(rng));
        return t;
    };
    const std::int64_t T = 6, C = 8, E = 8, F = 4;
    const Tensor x = random({T, C}), router = random({C, E}), gu = random({E, C, 2 * F}), dn = random({E, F, C});
    const Tensor sgu = random({1, C, 2 * F}), sdn = random({1, F, C}), bias = random({E});
    const std::vector<TensorView> in{x.view(), router.view(), gu.view(), dn.view(), sgu.view(), sdn.view(), bias.view()};
    const Params p({{"k", 3}, {"score", 1}, {"groups", 4}, {"topk_groups", 2}, {"scaling", 2.5}});
    for (const char* name : {"cpu.simd.moe.fp32", "cpu.scalar.moe.fp32"}) {
        const KernelInfo& k = *builtin_registry().find(name);
        const props::CaseResult r = props::check_case(k, p, in);
        EXPECT_TRUE(r.passed()) << name << ": " << r.message;
        const auto out = run_kernel(k, p, in);
        for (std::int64_t t = 0; t < T; ++t) {
            std::set<int> groups;
            double sum = 0;
            for (std::int64_t j = 0; j < 3; ++j) groups.insert(static_cast<int>(out[1].value(t * 3 + j)) / 2), sum += out[2].value(t * 3 + j);
            EXPECT_LE(groups.size(), 2u) << t;
            EXPECT_NEAR(sum, 2.5, 1e-6) << t;
        }
    }
    KernelInfo bad = *builtin_registry().find("cpu.scalar.moe.fp32");
    bad.name = "test.scaling_before_renormalize.moe.fp32";
    bad.fn = [](const KernelCall& c) {
        cpu::moe_layer_call(c, false, false, cpu::ExpertForm::grouped, {.router = {.scaling_before_renormalize = true}});
    };
    EXPECT_FALSE(props::check_case(bad, p, in).passed());
}

}  // namespace moe_layer_test
