// gated_attention (docs/gated_attention.md): the kernels against attention's
// on hand-made cases, the special values of the gate, the bound's exact
// cases, and each gate property alone killing the mutants it names.  The
// whole property suite runs over these kernels and mutants in
// tests/attention_test.cpp (family "attention").
#include <gtest/gtest.h>

#include <cmath>

#include "impls/registry.hpp"
#include "numerics/format.hpp"
#include "oracle/attention_bound.hpp"
#include "oracle/structured.hpp"
#include "properties/suite.hpp"
#include "properties/verdict.hpp"
#include "test_tensors.hpp"

namespace attention_gated_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

using conform::testing::filled;
const KernelInfo& kernel(const std::string& name) { return conform::testing::builtin_kernel(name); }

struct Heads {
    Tensor q, k, v;
};

// Two query heads over one KV head, 3 queries, 5 keys, D 8, Dv 4.
Heads heads(Format f) { return {filled(f, {2, 3, 8}, 0.7), filled(f, {1, 5, 8}, 0.5), filled(f, {1, 5, 4}, 1.5)}; }

Tensor gate(Format f, double value) {
    Tensor g(f, {2, 3, 4});
    for (std::int64_t e = 0; e < g.numel(); ++e) g.set_value(e, value);
    return g;
}

// sigmoid(0) = 1/2 exactly and the gated kernel keeps attention's FP32 o
// before its one rounding: in fp32 the gated output is the attention
// kernel's output halved, bit for bit (no value here is subnormal).
TEST(GatedAttentionKernels, ZeroGateHalvesTheAttentionKernelExactly) {
    for (const char* variant : {"simd", "scalar"}) {
        const Heads h = heads(Format::fp32);
        const Tensor g = gate(Format::fp32, 0);
        const auto a = run_kernel(kernel(std::string("cpu.") + variant + ".attention.fp32"), Params(),
                                  {h.q.view(), h.k.view(), h.v.view()});
        const auto y = run_kernel(kernel(std::string("cpu.") + variant + ".gated_attention.fp32"), Params(),
                                  {h.q.view(), h.k.view(), h.v.view(), g.view()});
        for (std::int64_t e = 0; e < a[0].numel(); ++e) EXPECT_EQ(y[0].value(e), a[0].value(e) / 2) << variant << " " << e;
        for (std::int64_t r = 0; r < a[1].numel(); ++r) EXPECT_EQ(y[1].bits(r), a[1].bits(r)) << "lse is ungated";
    }
}

// The special values of the gate: -inf gives exactly 0, +inf exactly o, NaN
// a NaN in its element alone; a row that sees no key is 0 (its lse -inf),
// NaN under a NaN gate; all judged within budget by the verdict.
TEST(GatedAttentionKernels, SpecialGateValues) {
    for (const char* name : {"cpu.simd.gated_attention.bf16", "cpu.scalar.gated_attention.fp16", "cpu.naive.gated_attention.fp32"}) {
        const KernelInfo& k = kernel(name);
        const Heads h = heads(k.in);
        Tensor g = gate(k.in, 1);
        g.set_value(0, -INFINITY), g.set_value(1, INFINITY), g.set_value(2, NAN);
        Tensor mask(k.in, {3, 5});  // query 1 sees no key
        for (std::int64_t j = 0; j < 5; ++j) mask.set_value(j, 0), mask.set_value(5 + j, -INFINITY), mask.set_value(10 + j, 0.25);
        g.set_value(4 + 1, NAN);  // head 0, query 1 (no key), element 1
        const auto r = props::check_case(k, Params(), {h.q.view(), h.k.view(), h.v.view(), g.view(), mask.view()});
        if (k.role == Role::kernel) {
            EXPECT_TRUE(r.pass) << name << ": " << r.message;
        }
        const Tensor& o = r.outputs[0];
        EXPECT_EQ(o.value(0), 0.0) << name;
        EXPECT_NE(o.value(1), 0.0) << name;
        EXPECT_TRUE(std::isnan(o.value(2))) << name;
        EXPECT_FALSE(std::isnan(o.value(3))) << name;
        EXPECT_EQ(o.value(4), 0.0) << name << ": no key, finite gate";
        EXPECT_TRUE(std::isnan(o.value(5))) << name << ": no key, NaN gate";
        EXPECT_EQ(r.outputs[1].value(1), -INFINITY) << name;
    }
}

// An infinite value at a visible key makes o infinite; a gate logit of
// -200 has sigmoid32 = 0 (e^-200 underflows), yet the exact gate is
// positive: the output is infinite, not inf * 0 = NaN.
TEST(GatedAttentionKernels, AnInfiniteOutputSurvivesAnUnderflowingGate) {
    for (const char* name : {"cpu.simd.gated_attention.fp32", "cpu.scalar.gated_attention.bf16"}) {
        const KernelInfo& k = kernel(name);
        Heads h = heads(k.in);
        h.v.set_value(0, INFINITY);  // key 0, column 0: every query sees it
        const Tensor g = gate(k.in, -200);
        const auto r = props::check_case(k, Params(), {h.q.view(), h.k.view(), h.v.view(), g.view()});
        EXPECT_TRUE(r.pass) << name << ": " << r.message;
        EXPECT_EQ(r.outputs[0].value(0), INFINITY) << name;
        EXPECT_EQ(r.outputs[0].value(1), 0.0) << name << ": a finite o under the same gate underflows to 0";
    }
}

// Both masked-row conventions: causal with Lq = 3 > Lk = 2 leaves query 0
// without a key.  The kernel's (0, -inf) passes undeclared and fails under
// a declared masked_row = nan; the same kernel writing NaN in that row (o and
// lse, as softmax(s) @ v does) passes only when it declares it.
TEST(GatedAttentionKernels, BothMaskedRowConventions) {
    for (const char* name : {"cpu.simd.gated_attention.fp32", "cpu.scalar.gated_attention.bf16"}) {
        const KernelInfo& base = kernel(name);
        const Tensor q = filled(base.in, {2, 3, 8}, 0.5), kk = filled(base.in, {1, 2, 8}, 0.25),
                     v = filled(base.in, {1, 2, 4}, 1), g = filled(base.in, {2, 3, 4}, 3);
        const std::vector<TensorView> in{q.view(), kk.view(), v.view(), g.view()};
        const Params causal({{"causal", 1}});
        KernelInfo zero = base, nan = base;
        nan.fn = [&base](const KernelCall& c) {
            base.fn(c);
            for (std::int64_t r = 0; r < c.out[1].numel(); ++r) {
                if (c.out[1].value(r) != -INFINITY) continue;
                c.out[1].set_bits(r, encode(c.out[1].format, NAN));
                for (std::int64_t d = 0; d < 4; ++d) c.out[0].set_bits(r * 4 + d, encode(c.out[0].format, NAN));
            }
        };
        EXPECT_TRUE(props::check_case(zero, causal, in).pass) << name;
        EXPECT_FALSE(props::check_case(nan, causal, in).pass) << name << ": NaN rows undeclared";
        zero.conventions = nan.conventions = {{"masked_row", "nan"}};
        EXPECT_FALSE(props::check_case(zero, causal, in).pass) << name << ": 0 declared as NaN";
        const auto declared = props::check_case(nan, causal, in);
        EXPECT_TRUE(declared.pass) << name << ": " << declared.message;
        EXPECT_TRUE(std::isnan(declared.all_ref[0].value(0))) << "the reference follows the declaration";
        EXPECT_FALSE(std::isnan(declared.all_ref[0].value(4))) << "rows with keys are untouched";
    }
}

// The bound's exact cases: 0 where the row sees no key and where g = -inf
// (the kernel must return 0 exactly); NaN for a NaN gate; for g = +inf
// attention's FP32 bound plus one rounding of the product and the output's.
TEST(GatedAttentionBound, ExactCasesAndTheOpenGate) {
    const Heads h = heads(Format::bf16);
    Tensor g = gate(Format::bf16, INFINITY);
    g.set_value(0, -INFINITY), g.set_value(1, NAN);
    Tensor mask(Format::bf16, {3, 5});
    for (std::int64_t j = 0; j < 5; ++j) mask.set_value(j, 0), mask.set_value(5 + j, -INFINITY), mask.set_value(10 + j, 0);
    const std::vector<TensorView> in{h.q.view(), h.k.view(), h.v.view(), g.view(), mask.view()};
    const auto ex = oracle::evaluate_structured("gated_attention", Params(), in, {Format::bf16, Format::fp32});
    const auto b = oracle::gated_attention_bound(Params(), in, ex.exact, Format::fp32, {Format::bf16, Format::fp32});
    const auto ea = oracle::evaluate_structured("attention", Params(), {in[0], in[1], in[2], in[4]}, {Format::fp32});
    const auto ba = oracle::attention_bound(Params(), {in[0], in[1], in[2], in[4]},
                                            oracle::attention_outputs({in[0], in[1], in[2]}, ea.exact[0], ea.exact[1]),
                                            oracle::declared_flash_model(Params(), {Format::fp32, Format::fp32}));
    EXPECT_EQ(b[0][0], 0.0) << "a closed gate: exactly 0";
    EXPECT_TRUE(std::isnan(b[0][1]));
    for (std::int64_t d = 0; d < 4; ++d) EXPECT_EQ(b[0][4 + d], 0.0) << "query 1 sees no key";
    for (std::size_t e = 8; e < 12; ++e) {  // head 0, query 2: gate +inf
        EXPECT_GE(b[0][e], ba[e]);
        EXPECT_LE(b[0][e], ba[e] * (1 + 0x1p-20) + 0x1p-22 * (std::fabs(ea.exact[0][e]) + ba[e]) +
                               0.5 * ulp_at(Format::bf16, std::fabs(ex.exact[0][e]) * 1.01));
    }
}

// A failure names the failing query alone with its gate row (one head, one
// query, its visible keys): the slice a reader can replay by hand.
TEST(GatedAttentionProperties, AFailureReducesToOneQueryWithItsGates) {
    props::RunConfig cfg;
    cfg.cases = 20;
    cfg.shrink = false;
    std::string message;
    for (const auto& p : props::run_suite(kernel("mutant.gated_attention.one_minus_sigma.fp32"), cfg).properties)
        if (p.name == "within_budget") message = p.message;
    EXPECT_NE(message.find("alone (1 head, 1 query, keys "), std::string::npos) << message;
    EXPECT_NE(message.find("\ng fp32 [1x"), std::string::npos) << "the slice shows its gate logits: " << message;
}

// Each gate property run alone: every kernel passes; gate_closed kills the
// mutants that do not zero a closed gate, gate_open those that do not pass
// an open gate through, gate_commutes all three.
TEST(GatedAttentionProperties, EachPropertyAloneKillsItsMutants) {
    const auto defs = props::properties_for(*find_op("gated_attention"));
    const auto run = [&](const char* property, const std::string& kernel_name) {
        for (const props::PropertyDef* p : defs)
            if (p->name == property) {
                props::RunConfig cfg;
                cfg.cases = 30;
                return props::run_property(*p, kernel(kernel_name), cfg, nullptr).passed;
            }
        ADD_FAILURE() << "no property " << property;
        return false;
    };
    for (const char* property : {"gate_closed", "gate_open", "gate_commutes"})
        for (const char* k : {"cpu.simd.gated_attention.fp16", "cpu.scalar.gated_attention.bf16"})
            EXPECT_TRUE(run(property, k)) << property << " failed " << k;
    const std::pair<const char*, const char*> kills[] = {
        {"gate_closed", "mutant.gated_attention.sigma_of_output.fp32"},
        {"gate_closed", "mutant.gated_attention.one_minus_sigma.bf16"},
        {"gate_closed", "mutant.gated_attention.gate_ignored.fp32"},
        {"gate_open", "mutant.gated_attention.sigma_of_output.bf16"},
        {"gate_open", "mutant.gated_attention.one_minus_sigma.fp32"},
        {"gate_commutes", "mutant.gated_attention.sigma_of_output.fp32"},
        {"gate_commutes", "mutant.gated_attention.one_minus_sigma.bf16"},
        {"gate_commutes", "mutant.gated_attention.gate_ignored.bf16"},
    };
    for (const auto& [property, mutant] : kills) EXPECT_FALSE(run(property, mutant)) << property << " let " << mutant << " pass";
}

}  // namespace

}  // namespace attention_gated_test
