// Another project's GoogleTest suite using the installed conform package
// (find_package(conform), target conform::properties): its own SiLU kernel
// is described as a KernelInfo and run through conform's property suite,
// and a broken variant of it is rejected.
#include <gtest/gtest.h>

#include <cmath>

#include "impls/registry.hpp"
#include "properties/suite.hpp"

using namespace conform;

namespace {

// The project's kernel: x * sigmoid(x), evaluated in double, rounded once to
// fp32.  (Its first version returned -inf / (1 + inf) = NaN for x = -inf,
// where SiLU is -0: conform's special_values property caught it.)
void my_silu(const KernelCall& c) {
    for (std::int64_t i = 0; i < c.in[0].numel(); ++i) {
        const double x = c.in[0].value(i);
        const double y = std::isinf(x) ? (x > 0 ? x : -0.0) : x / (1 + std::exp(-x));
        c.out[0].set_bits(i, encode(Format::fp32, y));
    }
}

// A wrong one: the sigmoid-GELU approximation x * sigmoid(1.702 x) shipped as SiLU.
void my_broken_silu(const KernelCall& c) {
    for (std::int64_t i = 0; i < c.in[0].numel(); ++i) {
        const double x = c.in[0].value(i);
        c.out[0].set_bits(i, encode(Format::fp32, x / (1 + std::exp(-1.702 * x))));
    }
}

KernelInfo describe(const std::string& name, KernelFn fn) {
    KernelInfo k;
    k.name = name;
    k.op = "silu";
    k.variant = "consumer";
    k.backend = "consumer";
    k.in = k.out = Format::fp32;
    k.acc = Format::fp64;
    k.fn = std::move(fn);
    return k;
}

props::RunConfig config() {
    props::RunConfig cfg;
    cfg.cases = 40;
    cfg.max_n = 512;
    return cfg;
}

}  // namespace

TEST(Consumer, OwnKernelPassesConformsPropertySuite) {
    const report::KernelReport r = props::run_suite(describe("consumer.silu.fp32", my_silu), config());
    ASSERT_FALSE(r.properties.empty());
    for (const auto& p : r.properties) EXPECT_TRUE(p.passed) << p.name << ": " << p.message;
    EXPECT_TRUE(r.passed);
}

TEST(Consumer, BrokenKernelIsRejectedWithAReproduction) {
    const report::KernelReport r = props::run_suite(describe("consumer.broken_silu.fp32", my_broken_silu), config());
    EXPECT_FALSE(r.passed);
    bool reproduced = false;
    for (const auto& p : r.properties) reproduced |= !p.passed && !p.reproduce.empty();
    EXPECT_TRUE(reproduced);
}
