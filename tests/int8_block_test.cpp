// The SmoothQuant precision flow of one pre-norm block (oracle/int8_block.hpp):
// every INT8 GEMM of the flow within its local quantization-noise budget
// derived from its scales, the end-to-end error against the all-real block
// (reported), and SmoothQuant folded into LayerNorm and the weights: the real
// block unchanged, the flow's error reduced on activations with outlier
// channels (docs/int8.md "int8_block").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "oracle/int8_block.hpp"

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
