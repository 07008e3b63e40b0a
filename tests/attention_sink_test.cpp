// sink_attention (docs/sink_attention.md): the oracle against attention's
// by the sink's closed form, the kernels on hand-made cases and special
// sinks, the bound's exact rows, and each mutant caught.  The whole property
// suite runs over these kernels and mutants in tests/attention_test.cpp
// (family "attention").
#include <gtest/gtest.h>

#include <cmath>

#include "impls/registry.hpp"
#include "numerics/format.hpp"
#include "oracle/attention_bound.hpp"
#include "oracle/structured.hpp"
#include "properties/suite.hpp"
#include "properties/verdict.hpp"
#include "test_tensors.hpp"

namespace attention_sink_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

using conform::testing::filled;
const KernelInfo& kernel(const std::string& name) { return conform::testing::builtin_kernel(name); }

// Four query heads over two KV heads, 3 queries, 5 keys, D 8, Dv 4, and a
// sink per query head.
struct Heads {
    Tensor q, k, v, sinks;
};

Heads heads(Format f, std::vector<double> sinks) {
    Heads h{filled(f, {4, 3, 8}, 0.7), filled(f, {2, 5, 8}, 0.5), filled(f, {2, 5, 4}, 1.5), Tensor(f, {4})};
    for (std::int64_t i = 0; i < 4; ++i) h.sinks.set_value(i, sinks[static_cast<std::size_t>(i)]);
    return h;
}

oracle::StructuredResult exact(const std::string& op, const Params& p, const std::vector<TensorView>& in) {
    return oracle::evaluate_structured(op, p, in, {Format::fp32, Format::fp32});
}

}  // namespace

// The sink is one more logit with a zero value row: against attention of the
// same q, k, v, o_sink = o sigmoid(lse - sink) and lse_sink = logaddexp(lse,
// sink), to the oracle's precision; a -inf sink is attention itself.
TEST(SinkAttentionOracle, IsAttentionWithTheSinksShareRemoved) {
    const Heads h = heads(Format::fp32, {-1.5, 0.25, 3.0, -INFINITY});
    Params p;
    p.set("causal", 1);
    const auto plain = exact("attention", p, {h.q.view(), h.k.view(), h.v.view()});
    const auto sink = exact("sink_attention", p, {h.q.view(), h.k.view(), h.v.view(), h.sinks.view()});
    for (std::int64_t hd = 0; hd < 4; ++hd)
        for (std::int64_t i = 0; i < 3; ++i) {
            const double s = h.sinks.value(hd), lse = plain.exact[1][static_cast<std::size_t>(hd * 3 + i)];
            const double want_lse = std::isinf(s) ? lse : std::max(lse, s) + std::log1p(std::exp(-std::fabs(lse - s)));
            EXPECT_NEAR(sink.exact[1][static_cast<std::size_t>(hd * 3 + i)], want_lse, 1e-14) << hd << " " << i;
            const double share = std::isinf(s) ? 1 : 1 / (1 + std::exp(s - lse));
            for (std::int64_t d = 0; d < 4; ++d) {
                const auto e = static_cast<std::size_t>((hd * 3 + i) * 4 + d);
                EXPECT_NEAR(sink.exact[0][e], plain.exact[0][e] * share, 1e-14) << hd << " " << i << " " << d;
            }
        }
}

// A row that sees no key is (0, sink), whatever q holds (the sink's logit is
// not formed from q); a NaN or +inf sink makes its head's rows NaN; with
// every sink -inf the row is attention's empty state (0, -inf).
TEST(SinkAttentionOracle, RowsWithoutKeysAndSpecialSinks) {
    Heads h = heads(Format::fp32, {2.0, NAN, INFINITY, -INFINITY});
    h.q.set_value(0, NAN);  // head 0, query 0
    Tensor mask(Format::fp32, {3, 5});
    for (std::int64_t j = 0; j < 5; ++j) mask.set_value(j, -INFINITY);  // query 0 sees no key
    const auto r = exact("sink_attention", Params(), {h.q.view(), h.k.view(), h.v.view(), h.sinks.view(), mask.view()});
    EXPECT_EQ(r.exact[1][0], 2.0);
    for (std::size_t d = 0; d < 4; ++d) EXPECT_EQ(r.exact[0][d], 0.0);
    for (std::int64_t hd : {1, 2})
        for (std::int64_t i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(r.exact[1][static_cast<std::size_t>(hd * 3 + i)]));
    EXPECT_EQ(r.exact[1][9], -INFINITY);  // head 3 (no sink), query 0: no key
    for (std::size_t d = 36; d < 40; ++d) EXPECT_EQ(r.exact[0][d], 0.0);
}

// Every kernel is within its bound on the hand-made heads with a mask that
// empties a row, sinks of every kind but the poisoning ones, in each format.
TEST(SinkAttentionKernels, WithinBoundWithEmptyRowsAndFarSinks) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const char* variant : {"simd", "scalar"}) {  // the naive baseline rounds every step: not held to the bound
            const Heads h = heads(f, {-1.5, 100.0, -100.0, -INFINITY});
            Tensor mask(f, {3, 5});
            for (std::int64_t e = 0; e < 15; ++e) mask.set_value(e, e < 5 ? -INFINITY : 0.25 * static_cast<double>(e % 3));
            const std::string name = std::string("cpu.") + variant + ".sink_attention." + conform::name(f);
            for (double causal : {0.0, 1.0}) {
                Params p;
                p.set("causal", causal);
                const auto r = props::check_case(kernel(name), p, {h.q.view(), h.k.view(), h.v.view(), h.sinks.view(), mask.view()});
                EXPECT_TRUE(r.pass) << name << " causal " << causal << ": " << r.message;
                EXPECT_GT(r.judged, 0) << name;
            }
        }
}

// A row without keys: o = 0 and lse = the sink exactly (m = sink, l = 1).
TEST(SinkAttentionKernels, RowWithoutKeysIsZeroAndTheSink) {
    for (const char* name : {"cpu.simd.sink_attention.fp32", "cpu.scalar.sink_attention.bf16", "cpu.naive.sink_attention.fp16"}) {
        const KernelInfo& k = kernel(name);
        const Heads h = heads(k.in, {2.5, -3.0, 0.0, 7.0});
        Tensor mask(k.in, {3, 5});
        for (std::int64_t e = 0; e < 15; ++e) mask.set_value(e, -INFINITY);
        const auto y = run_kernel(k, Params(), {h.q.view(), h.k.view(), h.v.view(), h.sinks.view(), mask.view()});
        for (std::int64_t hd = 0; hd < 4; ++hd)
            for (std::int64_t i = 0; i < 3; ++i) EXPECT_EQ(y[1].value(hd * 3 + i), h.sinks.value(hd)) << name;
        for (std::int64_t e = 0; e < y[0].numel(); ++e) EXPECT_EQ(y[0].value(e), 0.0) << name;
    }
}

// With every sink -inf the kernels are the attention kernels, bit for bit.
TEST(SinkAttentionKernels, MinusInfinitySinksAreAttentionBitForBit) {
    for (const char* variant : {"simd", "scalar", "naive"})
        for (Format f : {Format::fp32, Format::bf16}) {
            const Heads h = heads(f, {-INFINITY, -INFINITY, -INFINITY, -INFINITY});
            Params p;
            p.set("window", 2);
            const std::string fmt = conform::name(f);
            const auto a = run_kernel(kernel(std::string("cpu.") + variant + ".attention." + fmt), p, {h.q.view(), h.k.view(), h.v.view()});
            const auto s = run_kernel(kernel(std::string("cpu.") + variant + ".sink_attention." + fmt), p,
                                      {h.q.view(), h.k.view(), h.v.view(), h.sinks.view()});
            for (std::size_t o = 0; o < 2; ++o)
                for (std::int64_t e = 0; e < a[o].numel(); ++e) EXPECT_EQ(s[o].bits(e), a[o].bits(e)) << variant << " " << fmt;
        }
}

// The bound of a row without keys is that of a one-key row: the sink alone,
// weight 1, o = 0 exactly.  Every o bound of such a row is 0 (the kernel
// must return 0), its lse bound a few dozen ulps of the sink (attention's
// bound of one key: the exp and tile terms of N_b = Lk + 1 tiles).
TEST(SinkAttentionBound, RowWithoutKeysIsTight) {
    const Heads h = heads(Format::bf16, {2.5, -3.0, 0.0, 7.0});
    Tensor mask(Format::bf16, {3, 5});
    for (std::int64_t e = 0; e < 15; ++e) mask.set_value(e, e < 5 ? -INFINITY : 0.0);
    const std::vector<TensorView> in{h.q.view(), h.k.view(), h.v.view(), h.sinks.view(), mask.view()};
    const auto ex = oracle::evaluate_structured("sink_attention", Params(), in, {Format::bf16, Format::fp32});
    const auto b = oracle::sink_attention_bound(Params(), in, ex.exact, Format::fp32, {Format::bf16, Format::fp32});
    ASSERT_EQ(b[0].size(), 48u);
    ASSERT_EQ(b[1].size(), 12u);
    for (std::int64_t hd = 0; hd < 4; ++hd) {
        for (std::int64_t d = 0; d < 4; ++d) EXPECT_LT(b[0][static_cast<std::size_t>(hd * 12 + d)], 1e-30) << hd;
        const double sink = h.sinks.value(hd);
        EXPECT_LT(b[1][static_cast<std::size_t>(hd * 3)], 64 * ulp_at(Format::fp32, std::max(std::fabs(sink), 1.0))) << hd;
        EXPECT_GT(b[1][static_cast<std::size_t>(hd * 3 + 1)], 0) << hd;  // rows with keys: not vacuous, not zero
    }
}

// Each mutant fails within_budget or key_count alone (the suite's own run
// over the mutants is tests/attention_test.cpp's MutantSuite).
TEST(SinkAttentionMutants, EachFailsTheSuite) {
    props::RunConfig cfg;
    cfg.cases = 40;
    cfg.shrink = false;
    cfg.fail_fast = true;
    for (const char* bug : {"sink_ignored", "sink_by_kv_head", "sink_after_keys", "lse_without_sink"})
        for (const char* f : {"fp32", "bf16"}) {
            const std::string name = std::string("mutant.sink_attention.") + bug + "." + f;
            EXPECT_FALSE(props::run_suite(kernel(name), cfg).passed) << name;
        }
}

}  // namespace attention_sink_test
