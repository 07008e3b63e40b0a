// MLA kernels (docs/mla.md "Kernels", "Error budget"): the two forms
// within the derived bound on a DeepSeek-shaped case, the bound's forms,
// causality of the new tokens, and the property suite over every
// registered kernel and mutant.
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

#include "impls/cpu/mla.hpp"
#include "kernel_suite.hpp"
#include "oracle/bound.hpp"
#include "oracle/structured.hpp"
#include "properties/generators.hpp"
#include "properties/verdict.hpp"

namespace mla_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

namespace {

// H 2, L 3 after Lc 2 cached, d_model 16, d_c 8, d_nope 4, d_r 4, d_v 3, at offset 1000.
props::Case deepseek_like(Format f, std::uint64_t seed) {
    props::CaseSpec s = props::structured_spec("mla", f, {2, 3, 2, 16, 8, 4, 4, 3},
                                               Params({{"offset", 1000}, {"causal", 1}}), props::Family::normal, 0, seed, 0);
    s.families = {props::Family::normal, props::Family::normal};
    return props::build_case(s);
}

}  // namespace

TEST(MlaKernel, BothFormsWithinTheBoundEveryElementJudged) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const char* form : {"explicit", "absorbed"}) {
            const KernelInfo* k = builtin_registry().find(std::string("cpu.") + form + ".mla." + name(f));
            ASSERT_NE(k, nullptr) << form << " " << name(f);
            for (std::uint64_t seed = 1; seed <= 3; ++seed) {
                const props::Case c = deepseek_like(f, seed);
                props::Stats st;
                const props::CaseResult r = props::check_case(*k, c.params, c.views(), &st);
                EXPECT_TRUE(r.pass) << k->name << ": " << r.message;
                // Every element judged: the bound is finite and below the outputs' scale.
                EXPECT_EQ(r.not_judged, 0) << k->name;
                EXPECT_EQ(r.judged, 2 * 3 * 3 + 2 * 3) << k->name;
            }
        }
}

// The absorbed bound is its own derivation (magnitudes of W_uk^T q^C and c,
// not of q^C and k^C); undeclared, a kernel is held to the larger of the two.
TEST(MlaBound, FormsDifferAndUndeclaredTakesTheLarger) {
    const props::Case c = deepseek_like(Format::bf16, 7);
    const auto exact = oracle::evaluate_structured("mla", c.params, c.views(), {Format::bf16, Format::fp32}).exact;
    const auto bound = oracle::find_structured_bound("mla");
    ASSERT_NE(bound, nullptr);
    auto with_form = [&](double form) {
        Params p = c.params;
        if (form >= 0) p.set("declared.form", form);
        return bound(p, c.views(), exact, Format::fp32, {Format::bf16, Format::fp32});
    };
    const auto be = with_form(0), ba = with_form(1), bu = with_form(-1);
    bool differ = false;
    for (std::size_t o = 0; o < 2; ++o)
        for (std::size_t i = 0; i < be[o].size(); ++i) {
            ASSERT_TRUE(std::isfinite(be[o][i]) && std::isfinite(ba[o][i])) << o << " " << i;
            EXPECT_EQ(bu[o][i], std::max(be[o][i], ba[o][i]));
            differ = differ || be[o][i] != ba[o][i];
        }
    EXPECT_TRUE(differ);
}

// Zero queries weigh every visible key alike; two cached latents at BF16's
// max make the flash kernels' unnormalized sum exp(s_j - m) c_j overflow
// FP32 though the average (2/3 of it) and o (1/24 of it) do not.  Those
// elements of the absorbed form are undefined (not judged), and both forms
// pass: the absorbed kernel's o is +inf, far from the overflow threshold.
TEST(MlaBound, AnUnnormalizedSumPastFp32IsNotJudged) {
    props::Case c = deepseek_like(Format::bf16, 2);
    const std::int64_t d_c = 8, d_v = 3, heads = 2;
    for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i) c.inputs[0].set_value(i, 0.0);  // h = 0: q = 0, new c = 0
    for (std::int64_t j = 0; j < 2; ++j)
        for (std::int64_t k = 0; k < d_c; ++k) c.inputs[6].set_value(j * d_c + k, k == 0 ? max_finite(Format::bf16) : 0.0);
    for (std::int64_t r = 0; r < heads * d_v; ++r) c.inputs[3].set_value(r * d_c, 0x1p-4);  // W_uv's column 0
    for (const char* form : {"explicit", "absorbed"}) {
        const KernelInfo* k = builtin_registry().find(std::string("cpu.") + form + ".mla.bf16");
        ASSERT_NE(k, nullptr);
        const props::CaseResult r = props::check_case(*k, c.params, c.views());
        EXPECT_TRUE(r.pass) << form << ": " << r.message;
        // Absorbed: no o element judged (every row sums both cached latents);
        // explicit sums the values W_uv c_j, 1/16 of them: all judged.
        const bool absorbed = std::string(form) == "absorbed";
        EXPECT_EQ(r.not_judged, absorbed ? heads * 3 * d_v : 0) << form;
        EXPECT_EQ(r.judged, heads * 3 * (absorbed ? 1 : d_v + 1)) << form;
    }
}

// A scale above 1 takes a logit past FP32's range though its dot product
// stays inside: h 2^50 times its values makes the new tokens' q and k about
// 2^50, their dots about 2^103, and scale 2^30 about 2^133.  The kernels'
// FP32 logit is then ±inf and an inf - inf in the softmax makes the row NaN
// where the exact row is finite: those rows are not judged.  (No separate
// overflow test is needed for it: a logit near 2^128 carries an absolute
// error near 2^104, so exp's bound, and the row's, is already vacuous.)
TEST(MlaBound, ALogitPastFp32AfterTheScaleIsNotJudged) {
    props::Case c = deepseek_like(Format::fp32, 3);
    c.params.set("scale", 0x1p30);
    for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i) c.inputs[0].set_value(i, std::ldexp(c.inputs[0].value(i), 50));
    for (const char* form : {"explicit", "absorbed"}) {
        const KernelInfo* k = builtin_registry().find(std::string("cpu.") + form + ".mla.fp32");
        ASSERT_NE(k, nullptr);
        const auto got = run_kernel(*k, c.params, c.views());
        bool nan_row = false;  // the case does what it says: some row of the kernel is NaN
        for (std::int64_t r = 0; r < got[1].numel(); ++r) nan_row = nan_row || std::isnan(got[1].value(r));
        ASSERT_TRUE(nan_row) << form;
        const props::CaseResult r = props::check_case(*k, c.params, c.views());
        EXPECT_TRUE(r.pass) << form << ": " << r.message;
        EXPECT_GT(r.not_judged, 0) << form;
    }
}

// A NaN in the last new token's hidden state reaches only its own rows: the
// earlier tokens never see it (causal) and are bit-identical to the run
// without it; the last token's o and lse are NaN.
TEST(MlaKernel, LaterTokenNeverReachesEarlierRows) {
    for (const char* form : {"explicit", "absorbed"}) {
        const KernelInfo* k = builtin_registry().find(std::string("cpu.") + form + ".mla.bf16");
        ASSERT_NE(k, nullptr);
        props::Case c = deepseek_like(Format::bf16, 11);
        const auto clean = run_kernel(*k, c.params, c.views());
        for (std::int64_t x = 0; x < 16; ++x) c.inputs[0].set_value(2 * 16 + x, x == 5 ? NAN : 0.5);
        const auto dirty = run_kernel(*k, c.params, c.views());
        for (std::int64_t h = 0; h < 2; ++h)
            for (std::int64_t t = 0; t < 3; ++t) {
                EXPECT_EQ(std::isnan(dirty[1].value(h * 3 + t)), t == 2) << form << " lse " << h << " " << t;
                for (std::int64_t e = 0; e < 3 && t < 2; ++e)
                    EXPECT_EQ(dirty[0].bits((h * 3 + t) * 3 + e), clean[0].bits((h * 3 + t) * 3 + e)) << form;
            }
    }
}

// The MLA properties can fail: each rejects a kernel that breaks what it checks.
namespace {

const props::PropertyDef& mla_property(const std::string& name) {
    for (const props::PropertyDef& p : props::property_defs())
        if (p.name == name) return p;
    throw std::logic_error("no property " + name);
}

bool passes(const std::string& property, const KernelInfo& k) {
    props::RunConfig cfg;
    cfg.cases = 50;
    cfg.shrink = false;
    return props::run_property(mla_property(property), k, cfg, nullptr).passed;
}

}  // namespace

TEST(MlaProperties, AbsorbedEqualsExplicitRejectsTheUntransposedMutant) {
    EXPECT_TRUE(passes("absorbed_equals_explicit", *builtin_registry().find("cpu.absorbed.mla.bf16")));
    EXPECT_FALSE(passes("absorbed_equals_explicit", *builtin_registry().find("mutant.mla.uk_untransposed.fp32")));
}

// A kernel that places its new tokens at 0, 1, ... whatever the offset: its
// prefill is self-consistent, but a decode step at offset + t against a
// cache rotated at the true positions is not.
TEST(MlaProperties, PrefillEqualsCachedDecodeRejectsAKernelThatIgnoresTheOffset) {
    KernelInfo k = *builtin_registry().find("cpu.explicit.mla.fp32");
    k.name = "test.offset_ignored.mla.fp32";
    k.fn = [](const KernelCall& c) {
        Params p = c.params;
        p.set("offset", 0);
        p.set("cache_rotated", 1);
        cpu::mla_call(KernelCall{p, c.in, c.out}, cpu::MlaKernelForm::explicit_kv);
    };
    EXPECT_TRUE(passes("prefill_equals_cached_decode", *builtin_registry().find("cpu.explicit.mla.fp32")));
    EXPECT_FALSE(passes("prefill_equals_cached_decode", k));
}

CONFORM_FAMILY_SUITES(Mla, "mla");

}  // namespace mla_test
