// Declared conventions (oracle/conventions.hpp): a kernel that returns NaN for
// empty rows passes only when it declares masked_row = nan, and a kernel that
// declares it must then really return NaN there.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "impls/registry.hpp"
#include "oracle/conventions.hpp"
#include "properties/verdict.hpp"

using namespace conform;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Tensor filled(Format f, std::vector<std::int64_t> shape, double base) {
    Tensor t(f, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, base * std::sin(1.0 + static_cast<double>(i)));
    return t;
}

// kernel `name` made "literal": every output of a row whose lse (attention)
// or input (softmax) says it is empty becomes NaN, as softmax(s) @ v gives.
KernelInfo literal(const std::string& name, bool declare) {
    KernelInfo k = *builtin_registry().find(name);
    const KernelFn inner = k.fn;
    const bool attention = k.op == "attention";
    k.fn = [inner, attention](const KernelCall& c) {
        inner(c);
        const TensorView& y = c.out[0];
        for (std::int64_t r = 0; r < y.rows(); ++r) {
            bool empty = true;
            if (attention) {
                empty = std::isinf(c.out[1].value(r));
                if (empty) c.out[1].set_bits(r, encode(c.out[1].format, kNaN));
            } else {
                for (std::int64_t j = 0; j < c.in[0].cols(); ++j) empty = empty && c.in[0].value(r * y.cols() + j) == kNegInf;
            }
            if (empty)
                for (std::int64_t j = 0; j < y.cols(); ++j) y.set_bits(r * y.cols() + j, encode(y.format, kNaN));
        }
    };
    if (declare) k.conventions = {{"masked_row", "nan"}};
    return k;
}

// Causal with Lq = 4 > Lk = 2: queries 0 and 1 sit before every key.
props::CaseResult check_attention(const KernelInfo& k) {
    const Tensor q = filled(k.in, {2, 4, 8}, 0.5), kk = filled(k.in, {1, 2, 8}, 0.25), v = filled(k.in, {1, 2, 4}, 1);
    Params p;
    p.set("causal", 1);
    return props::check_case(k, p, {q.view(), kk.view(), v.view()});
}

props::CaseResult check_softmax(const KernelInfo& k) {
    Tensor x = filled(k.in, {3, 5}, 4);
    for (std::int64_t j = 0; j < 5; ++j) x.set_value(5 + j, kNegInf);  // row 1 is empty
    return props::check_case(k, Params{}, {x.view()});
}

}  // namespace

TEST(Conventions, DeclaredNanMaskedRowsPassOnlyWhenDeclared) {
    for (const char* name : {"cpu.simd.attention.fp32", "cpu.scalar.attention.bf16"}) {
        const auto undeclared = check_attention(literal(name, false));
        EXPECT_FALSE(undeclared.pass) << name;
        EXPECT_NE(undeclared.message.find("o["), std::string::npos) << undeclared.message;
        const auto declared = check_attention(literal(name, true));
        EXPECT_TRUE(declared.pass) << name << ": " << declared.message;
        EXPECT_TRUE(std::isnan(declared.all_ref[1].value(0)));  // the reference itself follows the declaration
        EXPECT_FALSE(std::isnan(declared.all_ref[1].value(2)));  // rows with keys are untouched
    }
    for (const char* name : {"cpu.simd.softmax.fp32", "cpu.scalar.softmax.fp16"}) {
        EXPECT_FALSE(check_softmax(literal(name, false)).pass) << name;
        const auto declared = check_softmax(literal(name, true));
        EXPECT_TRUE(declared.pass) << name << ": " << declared.message;
    }
}

TEST(Conventions, DeclaringNanWhileReturningZeroFails) {
    KernelInfo k = *builtin_registry().find("cpu.simd.attention.fp32");
    k.conventions = {{"masked_row", "nan"}};
    EXPECT_FALSE(check_attention(k).pass);
    k.conventions = {{"masked_row", "zero"}};  // the oracle's own convention, declared explicitly
    EXPECT_TRUE(check_attention(k).pass);
    KernelInfo s = *builtin_registry().find("cpu.simd.softmax.fp32");
    s.conventions = {{"masked_row", "nan"}};
    EXPECT_FALSE(check_softmax(s).pass);
}

TEST(Conventions, UnknownKeysAndValuesAreErrors) {
    EXPECT_NO_THROW(oracle::check_conventions({{"masked_row", "nan"}}));
    try {
        oracle::check_conventions({{"masked_row", "banana"}});
        FAIL() << "accepted an unknown value";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("expected one of zero, nan"), std::string::npos) << e.what();
    }
    EXPECT_THROW(oracle::check_conventions({{"rope_pairing", "x"}}), std::invalid_argument);
    KernelInfo k = *builtin_registry().find("cpu.simd.attention.fp32");
    k.conventions = {{"masked_rows", "nan"}};  // a typo must not be ignored
    EXPECT_THROW(check_attention(k), std::invalid_argument);
}
