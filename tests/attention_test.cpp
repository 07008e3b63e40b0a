// attention kernels through the suite (derived flash bound of
// docs/attention.md, causality, GQA replication), mutants killed, and the
// regressions the suite found when the kernels were first registered.
#include <gtest/gtest.h>

#include <cmath>

#include "impls/registry.hpp"
#include "kernel_suite.hpp"
#include "properties/verdict.hpp"

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

namespace {

Tensor filled(Format f, std::vector<std::int64_t> shape, double base) {
    Tensor t(f, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, base * std::sin(1.0 + static_cast<double>(i)));
    return t;
}

// A NaN in q with a softcap: vf::softcap alone maps NaN to +-cap (its exp
// clamps the argument), which made the AVX2 kernel return a finite row where
// the logit is NaN.  The row must be NaN.
TEST(AttentionKernels, SoftcapKeepsANanLogitNan) {
    for (const char* name : {"cpu.simd.attention.fp32", "cpu.scalar.attention.bf16"}) {
        const KernelInfo* k = builtin_registry().find(name);
        ASSERT_NE(k, nullptr);
        Tensor q = filled(k->in, {1, 2, 8}, 0.5), kk = filled(k->in, {1, 3, 8}, 0.25), v = filled(k->in, {1, 3, 8}, 1);
        q.set_value(2, NAN);  // query row 0
        Params p;
        p.set("softcap", 30);
        const auto r = props::check_case(*k, p, {q.view(), kk.view(), v.view()});
        EXPECT_TRUE(r.pass) << name << ": " << r.message;
        EXPECT_TRUE(std::isnan(r.outputs[0].value(0))) << name;
        EXPECT_FALSE(std::isnan(r.outputs[0].value(8))) << name << ": row 1 has no NaN";
    }
}

// A -inf mask entry hides its key like a structural mask, so a NaN in that
// key does not reach the row (the oracle's convention, docs/attention.md).
TEST(AttentionKernels, MinusInfMaskHidesANanKey) {
    for (const char* name : {"cpu.simd.attention.fp16", "cpu.scalar.attention.fp32"}) {
        const KernelInfo* k = builtin_registry().find(name);
        ASSERT_NE(k, nullptr);
        Tensor q = filled(k->in, {1, 1, 8}, 0.5), kk = filled(k->in, {1, 3, 8}, 0.25), v = filled(k->in, {1, 3, 8}, 1);
        kk.set_value(8 + 3, NAN);  // key 1
        Tensor mask(k->in, {1, 3});
        mask.set_value(0, 0), mask.set_value(1, -INFINITY), mask.set_value(2, 0);
        const auto r = props::check_case(*k, Params(), {q.view(), kk.view(), v.view(), mask.view()});
        EXPECT_TRUE(r.pass) << name << ": " << r.message;
        EXPECT_TRUE(std::isfinite(r.outputs[0].value(0))) << name;
    }
}

}  // namespace

CONFORM_FAMILY_SUITES(Attention, "attention");
