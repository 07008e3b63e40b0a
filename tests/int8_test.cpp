// The property suite over every registered int8 kernel and mutant
// (docs/int8.md "Properties" and "Mutants"), and the tie cases of quantize.
#include <cmath>
#include <string>

#include "kernel_suite.hpp"
#include "property_testing.hpp"
#include "oracle/structured.hpp"
#include "properties/generators.hpp"
#include "properties/verdict.hpp"

namespace int8_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

namespace {

// A quantize kernel that takes its codes as round(x * (1/s)) in FP32 (a
// `x * (1 / scale)` in the activations' precision): exact while s is a power
// of two; for s = m 2^e, m odd > 1, 1/s is inexact, and for some m (7, 13,
// 15, 41, 47, ...: where fl32(1/m) is off by nearly half an ulp) the product
// lands beside the tie (k + 1/2) s and rounds to the wrong neighbour.
// Scales are the real kernel's.
KernelInfo reciprocal_multiply(const KernelInfo& k) {
    KernelInfo m = k;
    m.name = "test.reciprocal_multiply." + k.name;
    m.role = Role::mutant;
    m.fn = [fn = k.fn](const KernelCall& c) {
        fn(c);
        for (std::int64_t i = 0; i < c.in[0].numel(); ++i) {
            const double x = c.in[0].value(i), s = c.out[1].value(i);
            if (std::isfinite(x) && std::isfinite(s) && s > 0)
                c.out[0].set_bits(i, encode(c.out[0].format, std::clamp<double>(std::nearbyint(float(x) * (1.0f / float(s))), -127, 127)));
        }
    };
    return m;
}

bool power_of_two(double s) {
    int e = 0;
    return s > 0 && std::frexp(s, &e) == 0.5;
}

struct TieCounts {
    int pow2 = 0, other = 0, other_static = 0, pow2_failed = 0, other_failed = 0;
};

// The tie cases the generator draws for kernel k (family around_cap),
// judged for kernel j; split by whether the case's scale is a power of two.
TieCounts judge_tie_cases(const KernelInfo& k, const KernelInfo& j, int draws) {
    const auto gen = props::gen_quantize_spec(k.in, {});
    TieCounts n;
    for (int i = 0; i < draws; ++i) {
        const props::CaseSpec spec = gen(rc::Random(77 + i), 100).value();
        if (spec.families[0] != props::Family::around_cap || spec.specials) continue;
        const props::Case c = props::build_case(spec);
        const Tensor scale =
            oracle::evaluate_structured("quantize", c.params, c.views(), {Format::int8, Format::fp32}).rounded.at(1);
        const bool p2 = power_of_two(scale.value(0));
        const bool failed = !props::check_case(j, c.params, c.views()).pass;
        (p2 ? n.pow2 : n.other) += 1;
        (p2 ? n.pow2_failed : n.other_failed) += failed;
        n.other_static += !p2 && c.params.get("scale", 0) > 0;
    }
    return n;
}

// Ties at scales that are not powers of two, in every format (static scales
// for bf16, whose 8 bits cannot hold 127 m): the reciprocal-multiply kernel
// passes every power-of-two tie case (the only ties the generator drew
// before) and fails about a third of the others, and ties_to_even.
TEST(QuantizeTies, NonPowerOfTwoScalesKillAReciprocalMultiply) {
    for (const char* name : {"cpu.scalar.quantize.fp32", "cpu.simd.quantize.fp16", "cpu.scalar.quantize.bf16"}) {
        const KernelInfo& k = *builtin_registry().find(name);
        const TieCounts good = judge_tie_cases(k, k, 300);
        EXPECT_EQ(good.pow2_failed + good.other_failed, 0) << name;
        const TieCounts bad = judge_tie_cases(k, reciprocal_multiply(k), 300);
        EXPECT_GE(bad.pow2, 5) << name;
        EXPECT_GE(bad.other, 20) << name;
        EXPECT_GE(bad.other_static, 5) << name;
        EXPECT_EQ(bad.pow2_failed, 0) << name;
        EXPECT_GE(bad.other_failed, bad.other / 5) << name;
        EXPECT_FALSE(conform::testing::run_named_property("ties_to_even", reciprocal_multiply(k)).passed) << name;
    }
}

}  // namespace

CONFORM_FAMILY_SUITES(Int8, "int8");

}  // namespace int8_test
