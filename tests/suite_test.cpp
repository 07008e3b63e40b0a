// The property runner (properties/suite.cpp): the worst passing case of each
// property is recorded with a reproduction string that replays exactly that
// case, and curves become checks of their own.
#include <gtest/gtest.h>

#include <rapidcheck.h>

#include "properties/common.hpp"
#include "properties/suite.hpp"

namespace suite_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using namespace conform::props;

namespace {

const PropertyDef& property(const std::string& name) {
    for (const auto& p : property_defs())
        if (p.name == name) return p;
    throw std::runtime_error("no property " + name);
}

// within_budget, except that about a third of the cases are discarded before
// anything is compared: the replay must follow RapidCheck's sizes and
// random splits across discards too.
PropertyDef discarding_within_budget() {
    PropertyDef d = property("within_budget");
    d.name = "discarding_within_budget";
    d.make = [](const KernelInfo& k, const RunConfig& cfg, Stats* stats) -> Testable {
        return [&k, cfg, stats] {
            RC_PRE(*rc::gen::resize(100, rc::gen::inRange(0, 3)) != 0);  // sized 100: not all zero at size 0
            GenOptions opt;
            opt.max_n = cfg.max_n;
            const Case c = build_case(*gen_spec(*find_op(k.op), k.in, opt));
            const CaseResult r = check_case(k, c.params, c.views(), stats);
            if (!r.pass) RC_FAIL(r.message);
        };
    };
    return d;
}

// Runs p on kernel `name`, then replays its worst case alone.
void expect_worst_case_replays(const PropertyDef& p, const std::string& name, const std::string& metric) {
    const KernelInfo& k = *builtin_registry().find(name);
    RunConfig cfg;
    cfg.seed = 5;
    cfg.cases = 40;
    Stats all;
    const report::PropertyOutcome first = run_property(p, k, cfg, &all);
    ASSERT_TRUE(first.passed) << first.message;
    EXPECT_EQ(first.worst_metric, metric);
    ASSERT_FALSE(first.worst_reproduce.empty());
    EXPECT_EQ(all.elements() > 0, true);  // merged into the kernel's statistics

    cfg.reproduce = first.worst_reproduce;
    const report::PropertyOutcome again = run_property(p, k, cfg, nullptr);
    EXPECT_TRUE(again.passed) << again.message;
    EXPECT_EQ(again.cases, 1);
    EXPECT_EQ(again.worst_value, first.worst_value) << name;
    EXPECT_EQ(again.worst_case, first.worst_case) << name;
    EXPECT_EQ(again.worst_reproduce, first.worst_reproduce);
}

}  // namespace

TEST(PropertyRunner, WorstUtilizationCaseReplaysExactly) {
    expect_worst_case_replays(property("within_budget"), "cpu.simd.rope.fp32", "util");
    expect_worst_case_replays(property("within_budget"), "cpu.simd.softmax.bf16", "util");
}

TEST(PropertyRunner, WorstUlpCaseReplaysExactly) {
    expect_worst_case_replays(property("within_budget"), "cpu.simd.silu.fp32", "ulp");
}

TEST(PropertyRunner, WorstCaseReplaysAcrossDiscards) {
    expect_worst_case_replays(discarding_within_budget(), "cpu.scalar.rms_norm.fp16", "util");
}

TEST(PropertyRunner, PropertiesWithoutOracleComparisonHaveNoWorstCase) {
    RunConfig cfg;
    cfg.cases = 10;
    const auto out = run_property(property("special_values"), *builtin_registry().find("cpu.simd.silu.fp32"), cfg, nullptr);
    EXPECT_TRUE(out.passed);
    EXPECT_EQ(out.worst_metric, "");
    EXPECT_EQ(out.worst_reproduce, "");
}

TEST(PropertyRunner, RopeKernelsGetTheInvarianceCurveAsACheck) {
    RunConfig cfg;
    cfg.cases = 4;
    const auto good = run_suite(*builtin_registry().find("cpu.scalar.rope.fp32"), cfg);
    ASSERT_EQ(good.curves.size(), 1u);
    EXPECT_EQ(good.curves[0].name, "rope_invariance");
    EXPECT_EQ(good.properties.back().name, "rope_invariance_curve");
    EXPECT_TRUE(good.properties.back().passed);
    const auto bad = run_suite(*builtin_registry().find("mutant.rope.fp32_angles.fp32"), cfg);
    EXPECT_FALSE(bad.properties.back().passed);
    EXPECT_NE(bad.properties.back().message.find("exceeds the budget"), std::string::npos);
    EXPECT_FALSE(bad.passed);
    EXPECT_TRUE(run_suite(*builtin_registry().find("cpu.simd.silu.fp32"), cfg).curves.empty());
}

// A failure of a row op, attention or the delta rule also names the
// smallest slice of the failing case that fails the same way, with its
// values: a one-element rms_norm row, one attention head and query, one
// gdn head and token.
TEST(SmallestFailingSlice, RowsAndAttentionQueriesReduceToWhatStillFails) {
    conform::props::RunConfig cfg;
    cfg.cases = 20;
    cfg.shrink = false;
    auto within = [&](const std::string& name) {
        const conform::KernelInfo& k = *conform::builtin_registry().find(name);
        for (const auto& p : conform::props::run_suite(k, cfg).properties)
            if (p.name == "within_budget") return p.message;
        return std::string();
    };
    const std::string norm = within("mutant.rms_norm.eps_dropped.fp32");
    EXPECT_NE(norm.find("smallest failing slice: row "), std::string::npos) << norm;
    EXPECT_NE(norm.find("(1 x 1)"), std::string::npos) << norm;
    EXPECT_EQ(norm.find("RC_FAIL"), std::string::npos) << norm;
    const std::string attention = within("mutant.attention.scale_dropped.fp32");
    EXPECT_NE(attention.find("alone (1 head, 1 query, keys "), std::string::npos) << attention;
    const std::string delta = within("mutant.gdn.initial_state_dropped.bf16");
    EXPECT_NE(delta.find("tokens 0..0 alone (1 head, 1 token)"), std::string::npos) << delta;
}

}  // namespace suite_test
