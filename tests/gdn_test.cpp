// The gated delta-rule kernels (ops gdn and kda) through the property suite:
// within the derived bound of docs/gdn.md, special values (NaN) by class,
// chunk-size and split invariance, causality, finiteness for every allowed
// gate; every mutant killed; the demanding chunk solves the generator draws
// and the low-precision solve (bug class 15) only they expose.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_suite.hpp"
#include "properties/gdn.hpp"
#include "properties/generators.hpp"
#include "property_testing.hpp"

namespace gdn_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

namespace {

std::vector<props::CaseSpec> drawn_specs(const KernelInfo& k, int count) {
    const auto gen = k.op == "kda" ? props::gen_kda_spec(k.in, {}) : props::gen_gdn_spec(k.in, {});
    std::vector<props::CaseSpec> v;
    for (int i = 0; i < count; ++i) v.push_back(gen(rc::Random(500 + i), 100).value());
    return v;
}

// Smallest |cos| between two keys of head 0 in the first `n` tokens.
double least_key_alignment(const props::Case& c, std::int64_t n) {
    const Tensor& k = c.inputs[1];
    const std::int64_t H = k.shape()[1], dk = k.shape()[2];
    auto key = [&](std::int64_t t, std::int64_t i) { return k.value((t * H) * dk + i); };
    double least = 1;
    for (std::int64_t a = 0; a < n; ++a)
        for (std::int64_t b = a + 1; b < n; ++b) {
            double ab = 0, aa = 0, bb = 0;
            for (std::int64_t i = 0; i < dk; ++i) ab += key(a, i) * key(b, i), aa += key(a, i) * key(a, i), bb += key(b, i) * key(b, i);
            least = std::min(least, std::fabs(ab) / std::sqrt(aa * bb));
        }
    return least;
}

}  // namespace

// One case in five has a demanding chunk solve: near-parallel keys (|cos| >
// 0.9 for every pair of a chunk) with beta ~ 1 and alpha ~ 1, or
// chunks of 128 and 256 tokens with the models' gates.
TEST(GdnGenerator, DrawsDemandingChunkSolves) {
    for (const char* name : {"cpu.simd.gdn.fp32", "cpu.scalar.kda.bf16"}) {
        const KernelInfo& k = *builtin_registry().find(name);
        int near_parallel = 0, long_chunks = 0;
        for (const props::CaseSpec& s : drawn_specs(k, 300)) {
            long_chunks += s.params.at("chunk") > 64;
            if (s.dims.size() < 9 || s.dims[8] != props::near_parallel_keys) continue;
            ++near_parallel;
            EXPECT_EQ(s.dims[6], props::near_one_betas) << name;
            EXPECT_TRUE(s.dims[5] == props::unit_gates || s.dims[5] == props::near_one_gates) << name;
            const props::Case c = props::build_case(s);
            const auto chunk = static_cast<std::int64_t>(s.params.at("chunk"));
            ASSERT_GT(c.inputs[0].shape()[0], chunk) << name;
            EXPECT_GT(least_key_alignment(c, chunk), 0.9) << name;
            for (std::int64_t t = 0; t < c.inputs[4].numel(); ++t) EXPECT_GE(c.inputs[4].value(t), 0.75) << name;
        }
        EXPECT_GE(near_parallel, 10) << name;
        EXPECT_GE(long_chunks, 25) << name;
    }
}

// A low-precision chunk solve (bug class 15) that the generator's demanding
// solves kill and ordinary cases let through: the bf16_block_merge mutants
// solve 64-token blocks exactly and merge longer chunks in bf16, so every
// case with chunks of at most 64 -- all the generator drew before the
// demanding solves -- passes, and within_budget fails.
TEST(GdnSolve, Bf16BlockMergeOnlyFailsOnChunksPast64) {
    for (const char* name : {"mutant.gdn.bf16_block_merge.fp32", "mutant.kda.bf16_block_merge.bf16"}) {
        const KernelInfo& k = *builtin_registry().find(name);
        int judged = 0;
        for (const props::CaseSpec& s : drawn_specs(k, 60)) {
            if (s.params.at("chunk") > 64) continue;
            const props::Case c = props::build_case(s);
            const props::CaseResult r = props::check_case(k, c.params, c.views());
            EXPECT_TRUE(r.pass) << name << ": " << r.message;
            ++judged;
        }
        EXPECT_GE(judged, 40) << name;
        EXPECT_FALSE(conform::testing::run_named_property("within_budget", k).passed) << name;
    }
}

CONFORM_FAMILY_SUITES(Gdn, "gdn");

}  // namespace gdn_test
