// Exhaustive sweeps as tests: every FP16 and every BF16 input of every
// unary kernel (simd and scalar) within its ULP budget with no class
// mismatch.  The 2^32-pair gated sweeps take minutes per format; they run
// when CONFORM_EXHAUSTIVE_GATED=1 (and always through `conform exhaustive`).
#include <gtest/gtest.h>

#include <cstdlib>

#include "impls/registry.hpp"
#include "kernel_suite.hpp"
#include "properties/exhaustive.hpp"

namespace exhaustive_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::test_name;

namespace {

std::vector<std::string> kernels(OpKind kind) {
    std::vector<std::string> v;
    for (const auto& k : builtin_registry().all())
        if (k.role == Role::kernel && find_op(k.op)->kind == kind && (k.in == Format::fp16 || k.in == Format::bf16))
            v.push_back(k.name);
    return v;
}

void expect_pass(const report::ExhaustiveResult& r) {
    EXPECT_EQ(r.inputs, r.op == "situ_glu" || r.op == "swiglu" || r.op == "geglu" || r.op == "swiglu_clamp"
                            ? std::int64_t{1} << 32
                            : std::int64_t{65536});
    EXPECT_EQ(r.class_mismatches, 0) << r.worst_input;
    EXPECT_LE(r.max_ulp, r.budget_ulp) << r.worst_input;
    EXPECT_TRUE(r.passed);
}

}  // namespace

class UnarySweep : public ::testing::TestWithParam<std::string> {};
class GatedSweep : public ::testing::TestWithParam<std::string> {};

TEST_P(UnarySweep, EveryInputWithinBudget) {
    const KernelInfo& k = *builtin_registry().find(GetParam());
    props::SweepOptions opt;
    opt.threads = 1;  // ctest already runs one test per core
    expect_pass(props::sweep_unary(k, Params::defaults(*find_op(k.op)), opt));
}

TEST_P(GatedSweep, EveryPairWithinBudget) {
    if (!std::getenv("CONFORM_EXHAUSTIVE_GATED")) GTEST_SKIP() << "set CONFORM_EXHAUSTIVE_GATED=1 for the 2^32 sweeps";
    const KernelInfo& k = *builtin_registry().find(GetParam());
    expect_pass(props::sweep_gated(k, Params::defaults(*find_op(k.op)), {}));
}

INSTANTIATE_TEST_SUITE_P(Activation, UnarySweep, ::testing::ValuesIn(kernels(OpKind::unary)), test_name);
INSTANTIATE_TEST_SUITE_P(SituGlu, GatedSweep,
                         ::testing::Values("cpu.simd.situ_glu.fp16", "cpu.simd.situ_glu.bf16"), test_name);

}  // namespace exhaustive_test
