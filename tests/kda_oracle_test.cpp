// Kimi Delta Attention oracle (docs/gdn.md): chunkwise == recurrent for
// every chunk size and length, including the g = -5 floor over 512 tokens,
// alpha = 1e-12 and alpha = 1; equal channels reduce to GDN; the decay acts
// on the key channels (rows of S) and before the delta update;
// context-parallel composition and varlen packing; hand-worked examples of
// the recurrence and of the output gate; 128 vs 256 bits; the evaluators.
#include <gtest/gtest.h>

#include "delta_rule_testing.hpp"
#include "oracle/gdn.hpp"
#include "oracle/kda.hpp"

namespace kda_oracle_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using namespace conform::testing;

namespace {

DeltaResult<Real> recurrent(const DeltaProblem<Real>& p) { return oracle::kda_recurrent(p); }

oracle::DeltaRun<Real> chunkwise(std::int64_t c) {
    return [c](const DeltaProblem<Real>& p) { return oracle::kda_chunkwise(p, c); };
}

DeltaProblem<Real> problem(std::int64_t T, std::uint64_t seed, Gates gates = Gates::mixed, std::int64_t d_k = 3,
                           std::int64_t d_v = 2) {
    return random_problem(T, 2, d_k, d_v, DecayShape::per_channel, seed, gates);
}

void expect_chunkwise_equals_recurrent(const DeltaProblem<Real>& p, const std::vector<std::int64_t>& chunks,
                                       const std::string& what) {
    const DeltaResult<Real> ref = recurrent(p);
    for (std::int64_t c : chunks)
        expect_same(oracle::kda_chunkwise(p, c), ref, 200, what + " T=" + std::to_string(p.tokens) + " chunk " +
                                                               std::to_string(c));
}

std::vector<std::int64_t> up_to(std::int64_t n) {
    std::vector<std::int64_t> v;
    for (std::int64_t c = 1; c <= n; ++c) v.push_back(c);
    return v;
}

}  // namespace

TEST(KdaOracle, ChunkwiseEqualsRecurrentForEveryChunkSize) {
    oracle::PrecisionScope bits(256);
    for (std::int64_t T : {1, 3, 8, 13, 16})
        expect_chunkwise_equals_recurrent(problem(T, 100 + static_cast<std::uint64_t>(T)), up_to(T + 1), "mixed");
    expect_chunkwise_equals_recurrent(problem(11, 150, Gates::mixed, 2, 4), up_to(11), "d_k = 2, d_v = 4");
}

TEST(KdaOracle, SaturatedAndUnitGatesAgree) {
    oracle::PrecisionScope bits(256);
    expect_chunkwise_equals_recurrent(problem(16, 201, Gates::lower_bound), up_to(16), "g = -5");
    expect_chunkwise_equals_recurrent(problem(16, 202, Gates::tiny), up_to(16), "alpha = 1e-12");
    DeltaProblem<Real> unit = problem(16, 203);
    for (Real& g : unit.g) g = 0;
    expect_chunkwise_equals_recurrent(unit, up_to(16), "alpha = 1");
    // The floor of the lower-bounded gate on every token over a long
    // sequence: cumulative log-decay -320 within a 64-token chunk (e^320
    // overflows FP32 / BF16 in the scaled-Q/K form, not here).
    expect_chunkwise_equals_recurrent(problem(512, 204, Gates::lower_bound), {16, 64, 100}, "long, g = -5");
}

TEST(KdaOracle, EqualChannelsEqualGdn) {
    oracle::PrecisionScope bits(256);
    const DeltaProblem<Real> gdn = random_problem(10, 2, 3, 2, DecayShape::per_head, 301);
    DeltaProblem<Real> kda = gdn;
    kda.decay = DecayShape::per_channel;
    kda.g.clear();
    for (const Real& g : gdn.g) kda.g.insert(kda.g.end(), 3, g);
    const DeltaResult<Real> ref = oracle::gdn_recurrent(gdn);
    expect_same(recurrent(kda), ref, 200, "recurrent");
    for (std::int64_t c : {1, 4, 10}) {
        expect_same(oracle::kda_chunkwise(kda, c), ref, 200, "chunkwise " + std::to_string(c));
        expect_same(oracle::kda_chunkwise(kda, c), oracle::gdn_chunkwise(gdn, c), 200, "both chunkwise");
    }
}

TEST(KdaOracle, BetaZeroDecaysEachKeyChannel) {
    oracle::PrecisionScope bits(256);
    // beta = 0: S_T = Diag(exp(sum_t g_t)) S_0, row c (key channel c) by its own decay.
    DeltaProblem<Real> p = problem(7, 401);
    for (Real& b : p.beta) b = 0;
    std::vector<Real> want;
    for (std::int64_t h = 0; h < p.heads; ++h)
        for (std::int64_t c = 0; c < p.d_k; ++c) {
            Real cum(0);
            for (std::int64_t t = 0; t < p.tokens; ++t)
                cum += p.g[static_cast<std::size_t>((t * p.heads + h) * p.d_k + c)];
            for (std::int64_t m = 0; m < p.d_v; ++m)
                want.push_back(oracle::exp(cum) * p.s0[static_cast<std::size_t>((h * p.d_k + c) * p.d_v + m)]);
        }
    EXPECT_LE(rel_diff_log2(recurrent(p).state, want), -200);
    for (std::int64_t c : {1, 3, 7}) EXPECT_LE(rel_diff_log2(oracle::kda_chunkwise(p, c).state, want), -200) << c;
}

TEST(KdaOracle, FullWriteOverwritesAfterThePerChannelDecay) {
    oracle::PrecisionScope bits(128);
    // beta = 1, |k| = 1: S_t = (I - k k^T) D_t S_{t-1} + k v^T gives k^T S_t = v_t^T
    // whatever the per-channel decay; decaying after the update would not.
    DeltaProblem<Real> p = problem(6, 501);
    p.beta.assign(p.beta.size(), Real(1));
    oracle::QkOptions<Real> exact;
    exact.l2norm = true;
    exact.l2_eps = 0;
    p = oracle::prepare_qk(p, exact);
    for (std::int64_t n = 1; n <= p.tokens; ++n) {
        DeltaProblem<Real> prefix = oracle::delta_slice(p, 0, n);
        prefix.s0 = p.s0;
        for (const DeltaResult<Real>& r : {recurrent(prefix), oracle::kda_chunkwise(prefix, 4)})
            for (std::int64_t h = 0; h < p.heads; ++h)
                for (std::int64_t m = 0; m < p.d_v; ++m) {
                    Real kts(0);
                    for (std::int64_t c = 0; c < p.d_k; ++c)
                        kts += p.k[static_cast<std::size_t>(((n - 1) * p.heads + h) * p.d_k + c)] *
                               r.state[static_cast<std::size_t>((h * p.d_k + c) * p.d_v + m)];
                    const Real& v = p.v[static_cast<std::size_t>(((n - 1) * p.heads + h) * p.d_v + m)];
                    EXPECT_LE(oracle::to_double(oracle::abs(kts - v)), 0x1p-110) << "token " << n - 1;
                }
    }
}

TEST(KdaOracle, ContextParallelEqualsSequentialForEverySplit) {
    oracle::PrecisionScope bits(256);
    expect_context_parallel_equals_sequential(problem(9, 601), chunkwise(4), "chunkwise 4");
    expect_context_parallel_equals_sequential(problem(6, 602, Gates::lower_bound), recurrent, "recurrent, g = -5");
}

TEST(KdaOracle, VarlenEqualsSeparateRuns) {
    oracle::PrecisionScope bits(256);
    const std::vector<DeltaProblem<Real>> seqs{problem(4, 701), problem(0, 702), problem(6, 703), problem(1, 704)};
    expect_varlen_equals_separate_runs(seqs, recurrent, "recurrent");
    expect_varlen_equals_separate_runs(seqs, chunkwise(4), "chunkwise 4");
}

TEST(KdaOracle, HandWorkedExample) {
    oracle::PrecisionScope bits(128);
    // d_k = 2, d_v = 1, S_0 = (2, 4)^T; by hand (and Python fractions):
    //  t0: alpha (1/2, 1/4), beta 1, k (1,0), v 3:      D S = (1, 1), e = 2, S = (3, 1), y = 5 (q = (1,2))
    //  t1: alpha (1, 1/2), beta 1/2, k (3/5,4/5), v -1: D S = (3, 1/2), e = -1 - 11/5 = -16/5,
    //      S = (3 - 24/25, 1/2 - 32/25) = (51/25, -39/50), y = 102/25 - 39/50 = 33/10 (q = (2,1))
    DeltaProblem<Real> p;
    p.tokens = 2, p.heads = 1, p.d_k = 2, p.d_v = 1, p.decay = DecayShape::per_channel;
    p.q = {1, 2, 2, 1};
    p.k = {1, 0, Real(3) / 5, Real(4) / 5};
    p.v = {3, -1};
    p.g = {ln(Real(1) / 2), ln(Real(1) / 4), Real(0), ln(Real(1) / 2)};
    p.beta = {1, Real(1) / 2};
    p.s0 = {2, 4};
    const DeltaResult<Real> want{{Real(5), Real(33) / 10}, {Real(51) / 25, Real(-39) / 50}};
    expect_same(recurrent(p), want, 120, "recurrent");
    for (std::int64_t c : {1, 2}) expect_same(oracle::kda_chunkwise(p, c), want, 120, "chunk " + std::to_string(c));
}

TEST(KdaOracle, OutputGateHandWorkedExample) {
    oracle::PrecisionScope bits(128);
    // H = 2, d_v = 2, d_model = 1, x = ln 3 so that sigmoid(+-x) = 3/4, 1/4,
    // sigmoid(0) = 1/2, sigmoid(2x) = 9/10; eps = 0.
    //  head 0: o~ = (1, -1), rms 1, normed = w ⊙ o~ = (2, -1/2)
    //  head 1: o~ = (2, 2),  rms 2, normed = (2, 1/2)
    //  W_g x = (x, -x, 0, 2x): gated = (3/2, -1/8, 1, 9/20)
    //  W_o = [[1, 2, 1, 0], [0, 0, -1, 20]]: y = (3/2 - 1/4 + 1, -1 + 9) = (9/4, 8)
    oracle::KdaGateProblem<Real> g;
    g.tokens = 1, g.heads = 2, g.d_v = 2, g.d_model = 1, g.d_out = 2, g.eps = 0;
    g.o = {1, -1, 2, 2};
    g.x = {ln(Real(3))};
    g.w_g = {1, -1, 0, 2};
    g.norm_w = {2, Real(1) / 2};
    g.w_o = {1, 2, 1, 0, 0, 0, -1, 20};
    const std::vector<Real> y = oracle::kda_output_gate(g);
    EXPECT_LE(rel_diff_log2(y, {Real(9) / 4, Real(8)}), -120);
    g.w_o.pop_back();
    EXPECT_THROW(oracle::kda_output_gate(g), std::invalid_argument);
}

TEST(KdaOracle, Precision128Vs256) {
    expect_precision_self_check(problem(16, 901), recurrent, chunkwise(6));
}

TEST(KdaOracle, EvaluatorsReadLayoutAndParams) {
    oracle::PrecisionScope bits(128);
    const DeltaProblem<Real> p = problem(5, 1001);
    auto doubles = [](const std::vector<Real>& v) {
        std::vector<double> d;
        for (const Real& x : v) d.push_back(oracle::to_double(x));
        return d;
    };
    const std::int64_t T = p.tokens, H = p.heads, dk = p.d_k, dv = p.d_v;
    const std::vector<Tensor> t{tensor({T, H, dk}, doubles(p.q)), tensor({T, H, dk}, doubles(p.k)),
                                tensor({T, H, dv}, doubles(p.v)), tensor({T, H, dk}, doubles(p.g)),
                                tensor({T, H}, doubles(p.beta)),  tensor({H, dk, dv}, doubles(p.s0))};
    std::vector<TensorView> in;
    for (const Tensor& x : t) in.push_back(x.view());
    DeltaProblem<Real> rounded = p;  // the problem as the tensors hold it
    for (auto [to, from] : {std::pair{&rounded.q, &p.q}, {&rounded.k, &p.k}, {&rounded.g, &p.g}})
        for (std::size_t i = 0; i < from->size(); ++i) (*to)[i] = real(oracle::to_double((*from)[i]));
    const oracle::OpOutputs rec = oracle::eval_kda_recurrent(Params(), in),
                            chk = oracle::eval_kda_chunkwise(Params({{"chunk", 3}}), in);
    expect_same({rec.values[0], rec.values[1]}, recurrent(rounded), 110, "recurrent evaluator");
    expect_same({chk.values[0], chk.values[1]}, recurrent(rounded), 110, "chunkwise evaluator");
    const Tensor gdn_gate = tensor({T, H}, std::vector<double>(static_cast<std::size_t>(T * H), -1.0));
    in[3] = gdn_gate.view();
    try {
        oracle::eval_kda_chunkwise(Params(), in);
        ADD_FAILURE() << "no error for a per-head gate";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'g'"), std::string::npos) << e.what();
    }
}

}  // namespace kda_oracle_test
