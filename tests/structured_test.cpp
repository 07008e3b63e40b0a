// The structured-op oracle path: Ziv over whole ops with several outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "numerics/round.hpp"
#include "oracle/eval.hpp"
#include "oracle/rope.hpp"
#include "oracle/structured.hpp"

namespace structured_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

Tensor filled(Format f, std::vector<std::int64_t> shape, unsigned seed, double scale = 1) {
    Tensor t(f, std::move(shape));
    std::mt19937 gen(seed);
    std::normal_distribution<double> d;
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, scale * d(gen));
    return t;
}

// Two independent paths to the same correctly rounded softmax: the row-op
// path of oracle::evaluate and the structured path must agree bit for bit.
TEST(StructuredOracle, SoftmaxAgreesWithTheRowPath) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        const Tensor x = filled(f, {3, 17}, 7, 4);
        const auto row = oracle::evaluate(*find_op("softmax"), Params(), {x.view()}, f);
        const auto st = oracle::evaluate_structured("softmax", Params(), {x.view()}, {f});
        ASSERT_EQ(st.rounded.size(), 1u);
        EXPECT_EQ(st.names[0], "y");
        for (std::int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(st.rounded[0].bits(i), row.rounded.bits(i)) << i;
    }
}

// The accepted result equals the rounding of a 1024-bit evaluation, also at
// positions near 2^20 where the angle needs many bits.
TEST(StructuredOracle, RopeIsCorrectlyRoundedAtLongPositions) {
    const Tensor x = filled(Format::fp32, {2, 3, 8}, 3);
    Params p;
    p.set("offset", 1048573);
    p.set("pairing", 1);
    const auto st = oracle::evaluate_structured("rope", p, {x.view()}, {Format::fp16});
    oracle::PrecisionScope scope(1024);
    const oracle::OpOutputs ref = oracle::eval_rope(p, {x.view()});
    for (std::int64_t i = 0; i < x.numel(); ++i)
        EXPECT_EQ(st.rounded[0].bits(i), round_to_format(ref.values[0][i].backend().data(), Format::fp16)) << i;
    EXPECT_GE(st.max_bits, 256u);
}

// Several outputs with their own formats; a fully masked row is (0, -inf).
TEST(StructuredOracle, AttentionOutputsAndFormats) {
    const Tensor q = filled(Format::bf16, {2, 3, 4}, 1), k = filled(Format::bf16, {1, 5, 4}, 2),
                 v = filled(Format::bf16, {1, 5, 4}, 3);
    Tensor mask(Format::fp32, {3, 5});
    for (std::int64_t j = 0; j < 5; ++j) mask.set_value(j, -INFINITY);  // query row 0 sees nothing
    const auto st = oracle::evaluate_structured("attention", Params(), {q.view(), k.view(), v.view(), mask.view()},
                                                {Format::bf16, Format::fp32});
    ASSERT_EQ(st.names, (std::vector<std::string>{"o", "lse"}));
    EXPECT_EQ(st.rounded[0].format(), Format::bf16);
    EXPECT_EQ(st.rounded[1].format(), Format::fp32);
    EXPECT_EQ(st.rounded[0].shape(), (std::vector<std::int64_t>{2, 3, 4}));
    for (std::int64_t h = 0; h < 2; ++h) {
        EXPECT_EQ(st.rounded[1].value(h * 3), -INFINITY);
        for (std::int64_t d = 0; d < 4; ++d) EXPECT_EQ(st.rounded[0].value(h * 12 + d), 0.0);
        EXPECT_TRUE(std::isfinite(st.rounded[1].value(h * 3 + 1)));
    }
}

TEST(StructuredOracle, ErrorsNameTheOpAndInput) {
    const Tensor x = filled(Format::fp32, {2, 3, 7}, 3);  // odd head dim
    EXPECT_THROW(oracle::evaluate_structured("no_such_op", Params(), {x.view()}, {Format::fp32}),
                 std::invalid_argument);
    try {
        oracle::evaluate_structured("rope", Params(), {x.view()}, {Format::fp32});
        FAIL() << "odd head dim accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
    }
    EXPECT_THROW(oracle::evaluate_structured("softmax", Params(), {x.view()}, {Format::fp32, Format::fp16}),
                 std::invalid_argument);
}

TEST(StructuredOracle, TableNamesEveryStructuredOp) {
    for (const auto& name : oracle::structured_ops()) EXPECT_NE(oracle::find_structured(name), nullptr) << name;
    EXPECT_EQ(oracle::find_structured("rms_norm"), nullptr);
}

}  // namespace

}  // namespace structured_test
