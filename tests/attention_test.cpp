// attention kernels through the suite (derived flash bound of
// docs/attention.md, causality, GQA replication), mutants killed, and the
// regressions the suite found when the kernels were first registered.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "impls/registry.hpp"
#include "kernel_suite.hpp"
#include "oracle/attention.hpp"
#include "oracle/structured.hpp"
#include "properties/attention.hpp"
#include "properties/verdict.hpp"
#include "test_tensors.hpp"

namespace attention_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

namespace {

using conform::testing::filled;

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

// The case a 2000-case run found (seed 5, cpu.scalar.attention.bf16):
// subnormal q and k, so every logit is 1e4 + 2^-254 once the mask is shifted,
// which the oracle's working precision rounds to 1e4; o[40] cancels to a tiny
// negative number, -0 in bf16 with the plain mask and +0 with the shifted
// one.  Comparing the oracle with itself failed every kernel here.
props::Case subnormal_logits_case() {
    Params p({{"causal", 0.0}, {"window", 0.0}, {"softcap", 0.0}, {"scale", 0.0}});
    return props::build_case(props::structured_spec("attention", Format::bf16, {4, 2, 16, 65, 4, 1, 1}, p,
                                                    props::Family::subnormal, -4, 8724759671285972ull, 0));
}

// Values in FP32's subnormal range under weights spread by normal logits:
// every product w_j v_jd rounds absolutely (eta/2), whatever |v| is.  The
// bound covered only the weights' underflow (Lk eta max|v|, nothing for
// v ~ 2^-135), and both correct FP32 kernels failed here (utilization 2.2);
// sink_attention's far sinks, whose weights leave the keys e^-90, found it.
TEST(AttentionBound, ProductsRoundingBelowTheNormalRangeAreCovered) {
    std::mt19937_64 rng(3);
    const auto uniform = [&rng](double scale) { return scale * (2 * static_cast<double>(rng() >> 11) * 0x1p-53 - 1); };
    Tensor q(Format::fp32, {2, 3, 8}), k(Format::fp32, {1, 80, 8}), v(Format::fp32, {1, 80, 8});
    for (std::int64_t i = 0; i < q.numel(); ++i) q.set_value(i, uniform(4));
    for (std::int64_t i = 0; i < k.numel(); ++i) k.set_value(i, uniform(2));
    for (std::int64_t i = 0; i < v.numel(); ++i) v.set_value(i, uniform(0x1p-134));
    for (const char* name : {"cpu.scalar.attention.fp32", "cpu.simd.attention.fp32"}) {
        const props::CaseResult r = props::check_case(*builtin_registry().find(name), Params(), {q.view(), k.view(), v.view()});
        EXPECT_TRUE(r.pass) << name << ": " << r.message;
        EXPECT_GT(r.judged, 0);
    }
}

TEST(AttentionMaskShift, TheOraclesSignOfZeroNoLongerFailsACorrectKernel) {
    const KernelInfo& k = *builtin_registry().find("cpu.scalar.attention.bf16");
    props::Case c = subnormal_logits_case();
    const Tensor moved = props::shift_mask(c, 1e4);
    std::vector<TensorView> shifted = c.views();
    shifted[3] = moved.view();
    const Tensor a = oracle::evaluate_structured("attention", c.params, c.views(), {Format::bf16, Format::fp32}).rounded[0];
    const Tensor b = oracle::evaluate_structured("attention", c.params, shifted, {Format::bf16, Format::fp32}).rounded[0];
    int signed_zeros = 0;
    for (std::int64_t i = 0; i < a.numel(); ++i) {
        EXPECT_EQ(a.value(i), b.value(i)) << "element " << i;  // equal values ...
        signed_zeros += a.bits(i) != b.bits(i);                // ... up to the sign of zero
    }
    EXPECT_GT(signed_zeros, 0) << "the case no longer shows the oracle's -0 / +0";
    EXPECT_EQ(props::mask_shift_check(k, subnormal_logits_case(), 1e4), "");
}

// A kernel whose row max is taken over q.k before the additive mask is
// added (the mask applied in a later pass): exp(s + mask - max) is right for
// masks of order 1 and overflows (or underflows every key) once the mask is
// shifted by +-1e4.  In double, with the oracle's conventions otherwise.
void max_before_mask(const KernelCall& c) {
    const TensorView &q = c.in[0], &kk = c.in[1], &v = c.in[2], &mask = c.in[3];
    const std::int64_t hq = q.shape[0], lq = q.shape[1], d = q.shape[2], hkv = kk.shape[0], lk = kk.shape[1],
                       dv = v.shape[2];
    const double scale = c.params.get("scale", 0) != 0 ? c.params.get("scale", 0) : 1 / std::sqrt(double(d));
    const double cap = c.params.get("softcap", 0);
    const bool causal = c.params.get("causal", 0) != 0;
    const auto window = static_cast<std::int64_t>(c.params.get("window", 0));
    for (std::int64_t h = 0; h < hq; ++h)
        for (std::int64_t i = 0; i < lq; ++i) {
            const std::int64_t g = oracle::kv_head_of(h, hq, hkv);
            std::vector<double> s(static_cast<std::size_t>(lk), -INFINITY);
            double m = -INFINITY;
            for (std::int64_t j = 0; j < lk; ++j) {
                if (!oracle::key_visible(i, j, lq, lk, causal, window) || mask.value(i * lk + j) == -INFINITY) continue;
                double dot = 0;
                for (std::int64_t e = 0; e < d; ++e) dot += q.value((h * lq + i) * d + e) * kk.value((g * lk + j) * d + e);
                s[j] = cap > 0 ? cap * std::tanh(scale * dot / cap) : scale * dot;
                m = std::max(m, s[j]);
            }
            double l = 0;
            std::vector<double> o(static_cast<std::size_t>(dv), 0.0);
            for (std::int64_t j = 0; j < lk; ++j) {
                if (s[j] == -INFINITY) continue;
                const double w = std::exp(s[j] + mask.value(i * lk + j) - m);
                l += w;
                for (std::int64_t e = 0; e < dv; ++e) o[e] += w * v.value((g * lk + j) * dv + e);
            }
            for (std::int64_t e = 0; e < dv; ++e) c.out[0].set_bits((h * lq + i) * dv + e, encode(c.out[0].format, l > 0 ? o[e] / l : 0.0));
            c.out[1].set_bits(h * lq + i, encode(Format::fp32, l > 0 ? m + std::log(l) : -INFINITY));
        }
}

TEST(AttentionMaskShift, KillsAKernelThatTakesTheMaxBeforeTheMask) {
    KernelInfo k = *builtin_registry().find("cpu.scalar.attention.fp32");
    k.name = "test.max_before_mask.attention.fp32";
    k.acc = Format::fp64;
    k.fn = max_before_mask;
    int shifted_fails = 0;
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
        props::Case c = props::build_case(props::structured_spec(
            "attention", Format::fp32, {2, 1, 3, 17, 4, 4, 1}, Params({{"causal", double(seed % 2)}}), props::Family::normal,
            0, seed, 0));
        props::shift_mask(c, 1e4);  // the quantized mask: the kernel is right on it
        const props::CaseResult plain = props::check_case(k, c.params, c.views());
        EXPECT_TRUE(plain.pass) << "seed " << seed << ": " << plain.message;
        shifted_fails += !props::mask_shift_check(k, c, seed % 3 ? 1e4 : -1e4).empty();
    }
    EXPECT_EQ(shifted_fails, 12);
}

// Run alone, parameter_sensitivity passes every kernel and kills the
// mutants that ignore the softcap or drop the scale (docs/attention.md).
TEST(AttentionParameters, SensitivityAloneKillsTheIgnoredParameters) {
    const props::PropertyDef* d = nullptr;
    for (const props::PropertyDef* p : props::properties_for(*find_op("attention")))
        if (p->name == "parameter_sensitivity") d = p;
    ASSERT_NE(d, nullptr);
    props::RunConfig cfg;
    cfg.cases = 40;
    for (const char* name : {"cpu.simd.attention.fp16", "cpu.scalar.attention.bf16"})
        EXPECT_TRUE(props::run_property(*d, *builtin_registry().find(name), cfg, nullptr).passed) << name;
    for (const char* name : {"mutant.attention.softcap_ignored.fp16", "mutant.attention.scale_dropped.bf16"})
        EXPECT_FALSE(props::run_property(*d, *builtin_registry().find(name), cfg, nullptr).passed) << name;
}

}  // namespace

CONFORM_FAMILY_SUITES(Attention, "attention");

}  // namespace attention_test
