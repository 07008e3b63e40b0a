// The SmoothQuant precision flow of one pre-norm block (oracle/int8_block.hpp),
// and the registry op int8_block's CPU kernel judged stage by stage:
// every INT8 GEMM of the flow within its local quantization-noise budget
// derived from its scales, the end-to-end error against the all-real block
// (reported), and SmoothQuant folded into LayerNorm and the weights: the real
// block unchanged, the flow's error reduced on activations with outlier
// channels (docs/int8.md "int8_block").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>

#include "impls/registry.hpp"
#include "oracle/int8_block.hpp"
#include "properties/generators.hpp"
#include "properties/verdict.hpp"

namespace int8_block_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

constexpr std::int64_t kT = 16, kD = 32, kHeads = 2, kFfn = 64;

std::vector<double> gaussian(std::mt19937_64& g, std::size_t n, double mean, double sigma) {
    std::normal_distribution<double> d(mean, sigma);
    std::vector<double> v(n);
    for (double& x : v) x = d(g);
    return v;
}

oracle::BlockWeights weights(std::mt19937_64& g) {
    oracle::BlockWeights w;
    w.d = kD, w.heads = kHeads, w.ffn = kFfn;
    const double sd = 1 / std::sqrt(static_cast<double>(kD));
    w.ln1_g = gaussian(g, kD, 1, 0.1), w.ln1_b = gaussian(g, kD, 0, 0.1);
    w.ln2_g = gaussian(g, kD, 1, 0.1), w.ln2_b = gaussian(g, kD, 0, 0.1);
    // LLM-style outlier channels: LN1's gamma large on two channels.
    w.ln1_g[3] = 40, w.ln1_g[17] = -30, w.ln2_g[9] = 25;
    for (auto* m : {&w.wq, &w.wk, &w.wv, &w.wo}) *m = gaussian(g, kD * kD, 0, sd);
    w.w1 = gaussian(g, kD * kFfn, 0, sd), w.w2 = gaussian(g, kFfn * kD, 0, 1 / std::sqrt(static_cast<double>(kFfn)));
    return w;
}

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
    double e = 0, r = 0;
    for (std::size_t i = 0; i < got.size(); ++i) e += std::pow(got[i] - want[i], 2), r += want[i] * want[i];
    return std::sqrt(e / r);
}

}  // namespace

TEST(Int8Block, EveryGemmWithinItsLocalNoiseBudget) {
    std::mt19937_64 g(41);
    const auto w = weights(g);
    const auto h = gaussian(g, kT * kD, 0, 1);
    const auto flow = oracle::block_int8_flow(h, kT, w);
    ASSERT_EQ(flow.stages.size(), 4u + 2 * kHeads + 2);
    std::printf("INT8 GEMMs of the flow, max |error| and budget utilization (local, on the flow's own inputs):\n");
    for (const auto& s : flow.stages) {
        std::printf("  %-10s max error %.3g  max util %.3f\n", s.name.c_str(), s.max_error, s.max_util);
        EXPECT_LE(s.max_util, 1) << s.name;
        EXPECT_GT(s.max_util, 0) << s.name;  // the quantization does make an error
    }
    const double e = relative_error(flow.out, oracle::block_real(h, kT, w));
    std::printf("end to end against the all-real block: relative error %.4g (SQNR %.1f dB)\n", e, -20 * std::log10(e));
    EXPECT_TRUE(std::isfinite(e));
}

TEST(Int8Block, SmoothingKeepsTheRealBlockAndReducesTheFlowError) {
    std::mt19937_64 g(42);
    const auto w = weights(g);
    const auto h = gaussian(g, kT * kD, 0, 1);
    const auto s = oracle::smooth_block(w, h, kT, 0.5);
    const auto real = oracle::block_real(h, kT, w);
    EXPECT_LE(relative_error(oracle::block_real(h, kT, s), real), 1e-12);  // an exact identity, FP64 tier
    const double plain = relative_error(oracle::block_int8_flow(h, kT, w).out, real);
    const auto smoothed_flow = oracle::block_int8_flow(h, kT, s);
    const double smoothed = relative_error(smoothed_flow.out, real);
    std::printf("end-to-end relative error with outlier channels: plain %.4g, smoothed (alpha 0.5) %.4g\n", plain, smoothed);
    EXPECT_LT(smoothed, plain);
    for (const auto& st : smoothed_flow.stages) EXPECT_LE(st.max_util, 1) << st.name;
}

// ---- the registry op int8_block: the CPU kernel judged stage by stage ----------

namespace {

const char* const kStages[] = {"out", "x1", "q", "k", "v", "s", "p", "o", "u", "x2", "a"};

Tensor fp16_tensor(const std::vector<double>& v, std::vector<std::int64_t> shape) {
    Tensor t(Format::fp16, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, v[static_cast<std::size_t>(i)]);
    return t;
}

// The test block of weights() in FP16, h [kT, kD] with one massive
// activation (h[5, 7] = 300) as LLM residual streams have.
std::vector<Tensor> block_inputs(std::uint64_t seed) {
    std::mt19937_64 g(seed);
    const auto w = weights(g);
    auto h = gaussian(g, kT * kD, 0, 1);
    h[5 * kD + 7] = 300;
    return {fp16_tensor(h, {kT, kD}),         fp16_tensor(w.ln1_g, {kD}),      fp16_tensor(w.ln1_b, {kD}),
            fp16_tensor(w.wq, {kD, kD}),      fp16_tensor(w.wk, {kD, kD}),     fp16_tensor(w.wv, {kD, kD}),
            fp16_tensor(w.wo, {kD, kD}),      fp16_tensor(w.ln2_g, {kD}),      fp16_tensor(w.ln2_b, {kD}),
            fp16_tensor(w.w1, {kD, kFfn}),    fp16_tensor(w.w2, {kFfn, kD})};
}

std::vector<TensorView> views(const std::vector<Tensor>& ts) {
    std::vector<TensorView> v;
    for (const auto& t : ts) v.push_back(t.view());
    return v;
}

const Params kBlockParams({{"heads", double(kHeads)}, {"eps", 1e-5}});

// Max |kernel - exact stage of the kernel's own stage inputs| / local budget, per output.
std::vector<double> stage_utilization(const KernelInfo& k, const std::vector<Tensor>& in, const Params& p = kBlockParams) {
    const auto got = run_kernel(k, p, views(in));
    std::vector<TensorView> staged = views(in);
    for (const auto& t : got) staged.push_back(t.view());
    const std::vector<Format> formats(got.size(), Format::fp16);
    const auto ref = oracle::evaluate_structured("int8_block", p, staged, formats);
    const auto bound = oracle::int8_block_bound(p, staged, ref.exact, k.acc, formats);
    std::vector<double> util(got.size(), 0.0);
    for (std::size_t o = 0; o < got.size(); ++o)
        for (std::int64_t i = 0; i < got[o].numel(); ++i) {
            const double e = ref.exact[o][static_cast<std::size_t>(i)], v = got[o].value(i);
            if (!std::isfinite(e) && !std::isfinite(v)) continue;
            const double err = std::fabs(v - e), b = bound[o][static_cast<std::size_t>(i)];
            util[o] = std::max(util[o], err == 0 ? 0.0 : err / b);
        }
    return util;
}

}  // namespace

TEST(Int8BlockOp, KernelStagesWithinTheirLocalBudgets) {
    const auto in = block_inputs(41);
    for (const char* name : {"cpu.simd.int8_block.fp16", "cpu.scalar.int8_block.fp16"}) {
        const KernelInfo* k = builtin_registry().find(name);
        ASSERT_NE(k, nullptr) << name;
        const auto r = props::check_case(*k, kBlockParams, views(in));
        EXPECT_TRUE(r.pass) << name << ": " << r.message;
        const auto util = stage_utilization(*k, in);
        std::printf("%s, max utilization of the local budget per stage:\n ", name);
        for (std::size_t o = 0; o < util.size(); ++o) {
            std::printf(" %s %.3f", kStages[o], util[o]);
            EXPECT_LE(util[o], 1) << name << " " << kStages[o];
        }
        std::printf("\n");
        for (std::size_t o : {2u, 3u, 4u, 5u, 7u, 10u}) EXPECT_GT(util[o], 0) << kStages[o];  // the GEMMs do quantize
    }
}

// Each mutant fails, and first on the stage its flaw is in: every stage
// before it within its local budget, that one not.  A generated block of 48
// tokens with diffuse attention (W_q scaled by 1/32: small scores): row 0 of
// P is (1, 0, ...), so one scale per head is 1/127 while the later rows' own
// maxima are near 1/(i + 1), and their probabilities lose their digits.
TEST(Int8BlockOp, MutantsFailFirstOnTheStageTheyBreak) {
    const auto spec = props::structured_spec("int8_block", Format::fp16, {48, 32, 2, 64},
                                             Params({{"heads", 2.0}, {"eps", 1e-5}}), props::Family::outlier, 0, 7, 0);
    props::Case c = props::build_case(spec);
    for (std::int64_t i = 0; i < c.inputs[3].numel(); ++i) c.inputs[3].set_value(i, c.inputs[3].value(i) / 32);
    const std::tuple<const char*, std::size_t, std::vector<std::size_t>> cases[] = {
        {"mutant.int8_block.pv_per_tensor.fp16", 7, {1, 2, 3, 4, 5, 6}},
        {"mutant.int8_block.residual_int8.fp16", 8, {1, 2, 3, 4, 5, 6, 7}},
        {"mutant.int8_block.unscaled_scores.fp16", 5, {1, 2, 3, 4}}};
    for (const auto& [name, stage, upstream] : cases) {
        const KernelInfo* k = builtin_registry().find(name);
        ASSERT_NE(k, nullptr) << name;
        EXPECT_FALSE(props::check_case(*k, c.params, c.views()).pass) << name;
        const auto util = stage_utilization(*k, c.inputs, c.params);
        std::printf("%s: %s at utilization %.3g\n", name, kStages[stage], util[stage]);
        EXPECT_GT(util[stage], 1) << name << " " << kStages[stage];
        for (std::size_t o : upstream) EXPECT_LE(util[o], 1) << name << " " << kStages[o];
    }
    EXPECT_TRUE(props::check_case(*builtin_registry().find("cpu.simd.int8_block.fp16"), c.params, c.views()).pass);
}

// The kernel's block against the all-real block (measured: the local
// budgets are the gate, docs/int8.md), beside the FP64 tier's flow.
TEST(Int8BlockOp, EndToEndErrorMatchesTheFlowOracle) {
    std::mt19937_64 g(41);
    const auto w = weights(g);
    auto h = gaussian(g, kT * kD, 0, 1);
    h[5 * kD + 7] = 300;
    const auto in = block_inputs(41);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = in[0].value(static_cast<std::int64_t>(i));  // FP16 values
    oracle::BlockWeights w16 = w;
    for (auto [dst, t] : {std::pair{&w16.ln1_g, 1}, {&w16.ln1_b, 2}, {&w16.wq, 3}, {&w16.wk, 4}, {&w16.wv, 5},
                          {&w16.wo, 6}, {&w16.ln2_g, 7}, {&w16.ln2_b, 8}, {&w16.w1, 9}, {&w16.w2, 10}})
        for (std::size_t i = 0; i < dst->size(); ++i) (*dst)[i] = in[static_cast<std::size_t>(t)].value(static_cast<std::int64_t>(i));
    const auto real = oracle::block_real(h, kT, w16);
    const auto got = run_kernel(*builtin_registry().find("cpu.simd.int8_block.fp16"), kBlockParams, views(in));
    std::vector<double> out(real.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = got[0].value(static_cast<std::int64_t>(i));
    const double kernel = relative_error(out, real), flow = relative_error(oracle::block_int8_flow(h, kT, w16).out, real);
    std::printf("end to end against the all-real block: kernel %.4g, FP64-tier flow %.4g\n", kernel, flow);
    // The same quantization decisions up to the FP32 LayerNorm and softmax:
    // the same error to within a fraction of itself.
    EXPECT_LT(std::fabs(kernel - flow), 0.25 * flow);
}

// The propagated budget against the all-real block on generated blocks: never
// exceeded, and how much of it the kernel uses (docs/int8.md, "The propagated
// budget": the measured ratios).
TEST(Int8BlockOp, PropagatedBudgetHoldsAndItsUtilizationIsReported) {
    const KernelInfo& k = *builtin_registry().find("cpu.simd.int8_block.fp16");
    std::vector<double> worst(std::size(kStages), 0.0), finite(std::size(kStages), 0.0), count(std::size(kStages), 0.0);
    for (std::uint64_t seed = 0; seed < 12; ++seed) {
        const std::int64_t t = seed % 2 ? 16 : 5, d = seed % 3 ? 32 : 16, heads = seed % 4 ? 2 : 1;
        const auto spec = props::structured_spec("int8_block", Format::fp16, {t, d, heads, 64},
                                                 Params({{"heads", double(heads)}, {"eps", 1e-5}}),
                                                 seed % 3 ? props::Family::normal : props::Family::outlier, 0, seed, 0);
        const props::Case c = props::build_case(spec);
        const auto got = run_kernel(k, c.params, c.views());
        std::vector<TensorView> staged = c.views();
        for (const auto& g : got) staged.push_back(g.view());
        const std::vector<Format> formats(got.size(), Format::fp16);
        const auto local = oracle::evaluate_structured("int8_block", c.params, staged, formats);
        const auto real = oracle::evaluate_structured("int8_block", c.params, c.views(), formats);
        const auto e = oracle::int8_block_propagated(c.params, staged, local.exact, real.exact, k.acc, formats);
        for (std::size_t o = 0; o < got.size(); ++o)
            for (std::int64_t i = 0; i < got[o].numel(); ++i) {
                const double want = real.exact[o][static_cast<std::size_t>(i)], b = e[o][static_cast<std::size_t>(i)];
                if (!std::isfinite(want)) continue;  // masked scores: -inf, matched as a class
                const double err = std::fabs(got[o].value(i) - want);
                EXPECT_LE(err, b) << kStages[o] << "[" << i << "], seed " << seed;
                finite[o] += std::isfinite(b), count[o] += 1;
                if (err > 0 && std::isfinite(b)) worst[o] = std::max(worst[o], err / b);
            }
    }
    std::printf("propagated budget over 12 blocks, per stage: max utilization where finite (finite fraction):\n ");
    for (std::size_t o = 0; o < worst.size(); ++o) std::printf(" %s %.3g (%.2f)", kStages[o], worst[o], finite[o] / count[o]);
    std::printf("\n");
    // Up to the attention the bound is finite everywhere and used.
    for (std::size_t o : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u}) {
        EXPECT_EQ(finite[o], count[o]) << kStages[o];
        EXPECT_GT(worst[o], 0) << kStages[o];
    }
}

// Shapes and parameters the op cannot have are errors before any tensor is
// touched (no division by zero heads, no read of an empty scale tensor).
TEST(Int8BlockOp, BadShapesAndHeadsAreErrorsNotCrashes) {
    const auto in = block_inputs(3);
    const KernelInfo& k = *builtin_registry().find("cpu.simd.int8_block.fp16");
    for (double heads : {0.0, -1.0, double(kD + 1), 3.0})
        EXPECT_THROW(run_kernel(k, Params({{"heads", heads}, {"eps", 1e-5}}), views(in)), std::invalid_argument) << heads;
    auto no_ffn = block_inputs(3);
    no_ffn[9] = fp16_tensor({}, {kD, 0}), no_ffn[10] = fp16_tensor({}, {0, kD});
    EXPECT_THROW(run_kernel(k, kBlockParams, views(no_ffn)), std::invalid_argument);
    auto short_wq = block_inputs(3);
    short_wq[3] = fp16_tensor(std::vector<double>((kD - 1) * kD, 0.5), {kD - 1, kD});
    EXPECT_THROW(run_kernel(k, kBlockParams, views(short_wq)), std::invalid_argument);
}

}  // namespace int8_block_test
