// Gated DeltaNet oracle (docs/gdn.md): chunkwise == recurrent for every
// chunk size, sequence length and gate down to alpha = 1e-12, alpha = 1 and
// alpha = 0 (a reset);
// the seed's clamped ratio form is shown to break that equivalence; the FP64
// tier stays finite where 1/Gamma would overflow; context-parallel
// composition == sequential for every split; varlen == separate runs; beta =
// 0 is pure decay; alpha = beta = 1 overwrites the key direction; a
// hand-worked example; NaN causality; the decay gates; 128 vs 256 bits; the
// tensor evaluators.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "delta_rule_testing.hpp"
#include "oracle/gdn.hpp"

namespace gdn_oracle_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using namespace conform::testing;
using oracle::Mat;

namespace {

DeltaResult<Real> recurrent(const DeltaProblem<Real>& p) { return oracle::gdn_recurrent(p); }

oracle::DeltaRun<Real> chunkwise(std::int64_t c) {
    return [c](const DeltaProblem<Real>& p) { return oracle::gdn_chunkwise(p, c); };
}

DeltaProblem<Real> problem(std::int64_t T, std::uint64_t seed, Gates gates = Gates::mixed, bool state = true) {
    return random_problem(T, 2, 3, 2, DecayShape::per_head, seed, gates, state);
}

void expect_chunkwise_equals_recurrent(const DeltaProblem<Real>& p, std::int64_t max_chunk, const std::string& what) {
    const DeltaResult<Real> ref = recurrent(p);
    for (std::int64_t c = 1; c <= max_chunk; ++c)
        expect_same(oracle::gdn_chunkwise(p, c), ref, 200, what + " T=" + std::to_string(p.tokens) + " chunk " +
                                                               std::to_string(c));
}

// One head, every token alike: alpha, beta, k = e_0, v = 1, q = e_0.
DeltaProblem<Real> constant_tokens(std::int64_t T, const Real& alpha, const Real& beta) {
    DeltaProblem<Real> p;
    p.tokens = T, p.heads = 1, p.d_k = 2, p.d_v = 1;
    for (std::int64_t t = 0; t < T; ++t) {
        p.q.insert(p.q.end(), {Real(1), Real(0)});
        p.k.insert(p.k.end(), {Real(1), Real(0)});
        p.v.push_back(Real(1));
        p.g.push_back(ln(alpha));
        p.beta.push_back(beta);
    }
    return p;
}

// The seed's chunkwise sample (§1.6.2) in its own ratio form, one head:
// gamma_r = alpha_0 ... alpha_r within the chunk, V' = V / max(gamma, floor),
// (I + Diag(beta) tril(K K^T, -1)) E = Diag(beta) (V' - K S),
// O = Diag(gamma) (Q S + tril(Q K^T) E),  S <- gamma_last (S + K^T E).
// Exact for floor = 0; the sample's clamp_min(1e-6) is floor = 1e-6.
std::vector<Real> ratio_form_outputs(const DeltaProblem<Real>& p, std::int64_t chunk, const Real& floor) {
    const std::int64_t dk = p.d_k, dv = p.d_v;
    Mat<Real> s(dk, dv);
    std::vector<Real> y;
    for (std::int64_t t0 = 0; t0 < p.tokens; t0 += chunk) {
        const std::int64_t c = std::min(chunk, p.tokens - t0);
        std::vector<Real> gamma;
        Mat<Real> e(c, dv);
        for (std::int64_t r = 0; r < c; ++r) {
            const Real* k = &p.k[static_cast<std::size_t>((t0 + r) * dk)];
            gamma.push_back((r ? gamma.back() : Real(1)) * oracle::exp(p.g[static_cast<std::size_t>(t0 + r)]));
            const Real& beta = p.beta[static_cast<std::size_t>(t0 + r)];
            for (std::int64_t m = 0; m < dv; ++m) {
                Real rhs = p.v[static_cast<std::size_t>((t0 + r) * dv + m)] / std::max(gamma.back(), floor);
                for (std::int64_t j = 0; j < dk; ++j) rhs -= k[j] * s(j, m);
                for (std::int64_t i = 0; i < r; ++i)
                    rhs -= oracle::inner(k, &p.k[static_cast<std::size_t>((t0 + i) * dk)], dk) * e(i, m);
                e(r, m) = beta * rhs;
            }
        }
        for (std::int64_t r = 0; r < c; ++r) {
            const Real* q = &p.q[static_cast<std::size_t>((t0 + r) * dk)];
            for (std::int64_t m = 0; m < dv; ++m) {
                Real acc(0);
                for (std::int64_t j = 0; j < dk; ++j) acc += q[j] * s(j, m);
                for (std::int64_t i = 0; i <= r; ++i)
                    acc += oracle::inner(q, &p.k[static_cast<std::size_t>((t0 + i) * dk)], dk) * e(i, m);
                y.push_back(gamma[static_cast<std::size_t>(r)] * acc);
            }
        }
        for (std::int64_t j = 0; j < dk; ++j)
            for (std::int64_t m = 0; m < dv; ++m) {
                for (std::int64_t i = 0; i < c; ++i) s(j, m) += p.k[static_cast<std::size_t>((t0 + i) * dk + j)] * e(i, m);
                s(j, m) *= gamma.back();
            }
    }
    return y;
}

}  // namespace

TEST(GdnOracle, ChunkwiseEqualsRecurrentForEveryChunkSize) {
    oracle::PrecisionScope bits(256);
    for (std::int64_t T : {1, 2, 5, 7, 12, 16}) {
        expect_chunkwise_equals_recurrent(problem(T, 100 + static_cast<std::uint64_t>(T)), T + 1, "mixed gates");
        expect_chunkwise_equals_recurrent(problem(T, 200 + static_cast<std::uint64_t>(T), Gates::mixed, false), T,
                                          "zero initial state");
    }
}

TEST(GdnOracle, SaturatedAndUnitGatesAgree) {
    oracle::PrecisionScope bits(256);
    expect_chunkwise_equals_recurrent(problem(16, 301, Gates::tiny), 16, "alpha = 1e-12");
    expect_chunkwise_equals_recurrent(problem(16, 302, Gates::lower_bound), 16, "alpha = e^-5");
    DeltaProblem<Real> unit = problem(16, 303);
    for (Real& g : unit.g) g = 0;
    expect_chunkwise_equals_recurrent(unit, 16, "alpha = 1");
    // Long: 300 tokens (not a multiple of the chunks), cumulative log-decay
    // down to 64 ln(1e-12) = -1768 within a chunk.
    const DeltaProblem<Real> tiny = problem(300, 304, Gates::tiny);
    const DeltaResult<Real> ref = recurrent(tiny);
    for (std::int64_t c : {16, 64, 100}) expect_same(oracle::gdn_chunkwise(tiny, c), ref, 200, "long, alpha = 1e-12");
}

TEST(GdnOracle, ZeroGateResetsTheState) {
    oracle::PrecisionScope bits(256);
    // alpha = 0 (g = -inf) at token 4: from there on the run equals a fresh
    // run of tokens [4, T) from zero state, in both forms.
    DeltaProblem<Real> p = problem(11, 350);
    for (std::int64_t h = 0; h < p.heads; ++h) p.g[static_cast<std::size_t>(4 * p.heads + h)] = real(-INFINITY);
    const DeltaResult<Real> rec = recurrent(p), fresh = recurrent(oracle::delta_slice(p, 4, p.tokens));
    const std::int64_t w = p.heads * p.d_v;
    expect_same({token_rows(rec.y, 4, p.tokens, w), rec.state}, fresh, 200, "reset");
    expect_chunkwise_equals_recurrent(p, 11, "alpha = 0");
}

TEST(GdnOracle, SeedClampOnCumulativeDecayBreaksEquivalence) {
    oracle::PrecisionScope bits(128);
    // alpha = 1/2, beta = 1, k = q = e_0, v = 1: every token overwrites, so
    // y_t = 1 exactly.  One chunk of 64: gamma_r = 2^-(r+1) drops below 1e-6
    // at r = 19, where the clamped form returns gamma_r / 1e-6.
    const DeltaProblem<Real> p = constant_tokens(64, Real(1) / 2, Real(1));
    const DeltaResult<Real> rec = recurrent(p), chk = oracle::gdn_chunkwise(p, 64);
    const std::vector<Real> exact = ratio_form_outputs(p, 64, Real(0));
    const std::vector<Real> clamped = ratio_form_outputs(p, 64, real(1e-6));
    for (std::size_t t = 0; t < 64; ++t) {
        EXPECT_LE(oracle::to_double(oracle::abs(rec.y[t] - 1)), 0x1p-120) << t;
        EXPECT_LE(oracle::to_double(oracle::abs(chk.y[t] - 1)), 0x1p-110) << t;
        EXPECT_LE(oracle::to_double(oracle::abs(exact[t] - 1)), 0x1p-100) << t;  // the ratio form itself is right
    }
    EXPECT_LE(oracle::to_double(oracle::abs(clamped[18] - 1)), 0x1p-100);
    EXPECT_NEAR(oracle::to_double(clamped[19]), 0x1p-20 / 1e-6, 1e-12);  // 0.9537
    EXPECT_LT(oracle::to_double(clamped[63]), 1e-13);                    // 2^-64 / 1e-6
}

TEST(GdnOracle, DoubleTierStaysFiniteWhereOneOverGammaOverflows) {
    // 64 tokens of alpha = 1e-12 in a chunk: 1/gamma = 1e768 overflows double
    // (and every narrower format); exp(G_r - G_i) with r >= i never does.
    const DeltaProblem<Real> p = problem(200, 401, Gates::tiny);
    DeltaProblem<double> d;
    d.tokens = p.tokens, d.heads = p.heads, d.d_k = p.d_k, d.d_v = p.d_v;
    for (auto [to, from] : {std::pair{&d.q, &p.q}, {&d.k, &p.k}, {&d.v, &p.v}, {&d.g, &p.g}, {&d.beta, &p.beta},
                            {&d.s0, &p.s0}})
        for (const Real& x : *from) to->push_back(oracle::to_double(x));
    DeltaResult<Real> ref;
    {
        oracle::PrecisionScope bits(128);
        ref = recurrent(p);
    }
    const DeltaResult<double> got = oracle::gdn_chunkwise(d, 64);
    for (std::size_t i = 0; i < got.y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got.y[i])) << i;
        EXPECT_NEAR(got.y[i], oracle::to_double(ref.y[i]), 1e-13 * std::max(1.0, std::fabs(got.y[i]))) << i;
    }
}

TEST(GdnOracle, ContextParallelEqualsSequentialForEverySplit) {
    oracle::PrecisionScope bits(256);
    expect_context_parallel_equals_sequential(problem(9, 501), chunkwise(4), "chunkwise 4");
    expect_context_parallel_equals_sequential(problem(7, 502, Gates::mixed, false), recurrent, "recurrent, zero state");
    expect_context_parallel_equals_sequential(problem(6, 503, Gates::tiny), chunkwise(6), "alpha = 1e-12");
}

TEST(GdnOracle, VarlenEqualsSeparateRuns) {
    oracle::PrecisionScope bits(256);
    const std::vector<DeltaProblem<Real>> seqs{problem(3, 601), problem(0, 602), problem(5, 603), problem(4, 604)};
    expect_varlen_equals_separate_runs(seqs, recurrent, "recurrent");
    expect_varlen_equals_separate_runs(seqs, chunkwise(2), "chunkwise 2");
}

TEST(GdnOracle, BetaZeroIsPureDecay) {
    oracle::PrecisionScope bits(256);
    DeltaProblem<Real> p = problem(9, 701);
    for (Real& b : p.beta) b = 0;
    for (const DeltaResult<Real>& r : {recurrent(p), oracle::gdn_chunkwise(p, 4)}) {
        // S_t = exp(g_0 + ... + g_t) S_0 per head.
        std::vector<Real> y, state;
        for (std::int64_t h = 0; h < p.heads; ++h) {
            Real cum(0);
            for (std::int64_t t = 0; t < p.tokens; ++t) cum += p.g[static_cast<std::size_t>(t * p.heads + h)];
            for (std::int64_t i = 0; i < p.d_k * p.d_v; ++i)
                state.push_back(oracle::exp(cum) * p.s0[static_cast<std::size_t>(h * p.d_k * p.d_v + i)]);
        }
        for (std::int64_t t = 0; t < p.tokens; ++t)
            for (std::int64_t h = 0; h < p.heads; ++h) {
                Real cum(0);
                for (std::int64_t u = 0; u <= t; ++u) cum += p.g[static_cast<std::size_t>(u * p.heads + h)];
                for (std::int64_t m = 0; m < p.d_v; ++m) {
                    Real acc(0);
                    for (std::int64_t c = 0; c < p.d_k; ++c)
                        acc += p.s0[static_cast<std::size_t>((h * p.d_k + c) * p.d_v + m)] *
                               p.q[static_cast<std::size_t>((t * p.heads + h) * p.d_k + c)];
                    y.push_back(oracle::exp(cum) * acc);
                }
            }
        expect_same(r, DeltaResult<Real>{y, state}, 200, "beta = 0");
    }
}

TEST(GdnOracle, UnitGateFullWriteOverwritesTheKeyDirection) {
    oracle::PrecisionScope bits(128);
    // alpha = 1, beta = 1, |k| = 1: S_t = (I - k k^T) S_{t-1} + k v^T, so
    // k^T S_t = v_t^T and x^T S_t = x^T S_{t-1} for every x orthogonal to k.
    const Real f = Real(1) / 5;
    const std::vector<std::vector<Real>> keys{{3 * f, 4 * f, 0}, {0, 0, 1}, {0, 3 * f, -4 * f}, {1, 0, 0}};
    const std::vector<std::vector<Real>> orth{{4 * f, -3 * f, 0}, {1, 0, 0}, {1, 0, 0}, {0, 1, 0}};
    DeltaProblem<Real> p = random_problem(4, 1, 3, 2, DecayShape::per_head, 801);
    p.k.clear();
    for (const std::vector<Real>& k : keys) p.k.insert(p.k.end(), k.begin(), k.end());
    p.g.assign(4, Real(0));
    p.beta.assign(4, Real(1));
    auto column_dot = [](const std::vector<Real>& x, const std::vector<Real>& s, std::int64_t m) {
        Real acc(0);
        for (std::size_t c = 0; c < 3; ++c) acc += x[c] * s[c * 2 + static_cast<std::size_t>(m)];
        return acc;
    };
    std::vector<Real> prev = p.s0;
    for (std::int64_t n = 1; n <= 4; ++n) {
        DeltaProblem<Real> prefix = oracle::delta_slice(p, 0, n);
        prefix.s0 = p.s0;
        const std::vector<Real> rec = recurrent(prefix).state;
        const std::size_t t = static_cast<std::size_t>(n - 1);
        for (const std::vector<Real>& s : {rec, oracle::gdn_chunkwise(prefix, 3).state})
            for (std::int64_t m = 0; m < 2; ++m) {
                const Real written = column_dot(keys[t], s, m) - p.v[t * 2 + static_cast<std::size_t>(m)];
                const Real kept = column_dot(orth[t], s, m) - column_dot(orth[t], prev, m);
                EXPECT_LE(oracle::to_double(oracle::abs(written)), 0x1p-110) << "token " << t << " column " << m;
                EXPECT_LE(oracle::to_double(oracle::abs(kept)), 0x1p-110) << "token " << t << " column " << m;
            }
        prev = rec;
    }
}

TEST(GdnOracle, HandWorkedExample) {
    oracle::PrecisionScope bits(128);
    // d_k = 2, d_v = 1, S_0 = (1, 1)^T; by hand (and Python fractions):
    //  t0: alpha 1/2, beta 1/2, k (1,0), v 2:  S~ = (1/2,1/2), e = 3/2, S = (5/4, 1/2), y = q.S = 7/4 (q = (1,1))
    //  t1: alpha 1, beta 1, k (3/5,4/5), v 1:  e = 1 - 23/20 = -3/20, S = (29/25, 19/50), y = 19/50 (q = (0,1))
    //  t2: alpha 1/4, beta 1/4, k (0,1), v -1: S~ = (29/100, 19/200), e = -219/200, S = (29/100, -143/800),
    //      y = 29/100 + 143/800 = 15/32 (q = (1,-1))
    DeltaProblem<Real> p;
    p.tokens = 3, p.heads = 1, p.d_k = 2, p.d_v = 1;
    p.q = {1, 1, 0, 1, 1, -1};
    p.k = {1, 0, Real(3) / 5, Real(4) / 5, 0, 1};
    p.v = {2, 1, -1};
    p.g = {ln(Real(1) / 2), Real(0), ln(Real(1) / 4)};
    p.beta = {Real(1) / 2, 1, Real(1) / 4};
    p.s0 = {1, 1};
    const DeltaResult<Real> want{{Real(7) / 4, Real(19) / 50, Real(15) / 32}, {Real(29) / 100, Real(-143) / 800}};
    expect_same(recurrent(p), want, 120, "recurrent");
    for (std::int64_t c : {1, 2, 3}) expect_same(oracle::gdn_chunkwise(p, c), want, 120, "chunk " + std::to_string(c));
}

TEST(GdnOracle, NanPropagatesCausallyAndAlikeInBothForms) {
    oracle::PrecisionScope bits(128);
    const Real nan = oracle::nan_of<Real>();
    for (int where : {0, 1}) {  // a NaN in v_3 (value channel 1) or in k_3
        DeltaProblem<Real> p = problem(7, 901);
        if (where == 0) p.v[static_cast<std::size_t>((3 * p.heads) * p.d_v + 1)] = nan;
        else p.k[static_cast<std::size_t>((3 * p.heads) * p.d_k)] = nan;
        const DeltaResult<Real> rec = recurrent(p);
        for (std::int64_t t = 0; t < p.tokens; ++t)
            for (std::int64_t m = 0; m < p.d_v; ++m) {
                const bool poisoned = t >= 3 && (where == 1 || m == 1);
                EXPECT_EQ(oracle::isnan(rec.y[static_cast<std::size_t>((t * p.heads) * p.d_v + m)]), poisoned)
                    << where << " t " << t << " m " << m;
                EXPECT_FALSE(oracle::isnan(rec.y[static_cast<std::size_t>((t * p.heads + 1) * p.d_v + m)]))
                    << "head 1 is untouched";
            }
        for (std::int64_t c = 1; c <= 7; ++c) {
            const DeltaResult<Real> chk = oracle::gdn_chunkwise(p, c);
            for (std::size_t i = 0; i < rec.y.size(); ++i)
                EXPECT_EQ(oracle::isnan(chk.y[i]), oracle::isnan(rec.y[i])) << where << " chunk " << c << " at " << i;
            for (std::size_t i = 0; i < rec.state.size(); ++i)
                EXPECT_EQ(oracle::isnan(chk.state[i]), oracle::isnan(rec.state[i])) << where << " chunk " << c;
        }
    }
}

TEST(GdnOracle, DecayGates) {
    oracle::PrecisionScope bits(128);
    const Real tol = pow(Real(2), -120);
    // Lower-bounded: g = -5 sigmoid(e^A z); -5/2 at z = 0, inside (-5, 0), decreasing in z.
    EXPECT_EQ(oracle::lower_bounded_log_decay(Real(0), Real(3)), Real(-5) / 2);
    EXPECT_LE(oracle::abs(oracle::lower_bounded_log_decay(Real(1), ln(Real(2))) -
                          Real(-5) / (1 + oracle::exp(Real(-2)))),
              tol);
    EXPECT_LE(oracle::abs(oracle::lower_bounded_log_decay(Real(1), Real(0), Real(-3)) -
                          Real(-3) / (1 + oracle::exp(Real(-1)))),
              tol);
    Real prev(0);
    for (int z = -40; z <= 40; ++z) {
        const Real g = oracle::lower_bounded_log_decay(Real(z), Real(0));
        EXPECT_GT(g, -5);
        EXPECT_LT(g, prev);
        prev = g;
    }
    // Negative softplus: g = -e^A ln(1 + e^z); z = 0, A = 0 gives alpha = 1/2.
    EXPECT_LE(oracle::abs(oracle::exp(oracle::softplus_log_decay(Real(0), Real(0))) - Real(1) / 2), tol);
    EXPECT_LE(oracle::abs(oracle::softplus_log_decay(Real(2), ln(Real(3))) + 3 * ln(1 + oracle::exp(Real(2)))), tol);
    EXPECT_LT(oracle::softplus_log_decay(Real(1000), Real(0)), -999);  // no lower bound
}

TEST(GdnOracle, Precision128Vs256) {
    expect_precision_self_check(problem(16, 1001), recurrent, chunkwise(5));
}

TEST(GdnOracle, EvaluatorsReadLayoutAndParams) {
    oracle::PrecisionScope bits(128);
    const std::int64_t T = 5, H = 2, dk = 3, dv = 2;
    std::mt19937_64 gen(1101);
    const std::vector<double> q = dyadic(gen, T * H * dk), k = dyadic(gen, T * H * dk), v = dyadic(gen, T * H * dv),
                              s0 = dyadic(gen, H * dk * dv);
    const std::vector<double> g{-0.5, 0, -1, -0.25, -3, -0.125, -2, -0.5, 0, -1}, beta{1, 0.5, 0, 0.25, 0.75,
                                                                                         1, 0.5, 0.125, 1, 0};
    const std::vector<Tensor> t{tensor({T, H, dk}, q), tensor({T, H, dk}, k), tensor({T, H, dv}, v),
                                tensor({T, H}, g),     tensor({T, H}, beta),  tensor({H, dk, dv}, s0)};
    std::vector<TensorView> in;
    for (const Tensor& x : t) in.push_back(x.view());
    const Params prm({{"l2norm", 1}, {"scale", 0}, {"chunk", 2}});
    const oracle::OpOutputs rec = oracle::eval_gdn_recurrent(prm, in), chk = oracle::eval_gdn_chunkwise(prm, in);
    ASSERT_EQ(rec.names, (std::vector<std::string>{"y", "state"}));
    ASSERT_EQ(rec.shapes, (std::vector<std::vector<std::int64_t>>{{T, H, dv}, {H, dk, dv}}));
    expect_same({chk.values[0], chk.values[1]}, {rec.values[0], rec.values[1]}, 110, "evaluators");
    // The same problem by hand: normalized q and k, q scaled by 1/sqrt(3).
    DeltaProblem<Real> p;
    p.tokens = T, p.heads = H, p.d_k = dk, p.d_v = dv;
    for (auto [to, from] : {std::pair{&p.q, &q}, {&p.k, &k}, {&p.v, &v}, {&p.g, &g}, {&p.beta, &beta}, {&p.s0, &s0}})
        for (double x : *from) to->push_back(real(x));
    oracle::QkOptions<Real> o;
    o.l2norm = true;
    o.scale = 1 / oracle::sqrt(Real(3));
    expect_same({rec.values[0], rec.values[1]}, recurrent(oracle::prepare_qk(p, o)), 110, "by hand");
    // Without the initial state the run starts from zero; shapes are checked.
    in.pop_back();
    EXPECT_NO_THROW(oracle::eval_gdn_chunkwise(Params(), in));
    const Tensor bad_g = tensor({T, H, dk}, std::vector<double>(T * H * dk, 0.0)), bad_v = tensor({T, H + 1, dv}, {});
    std::vector<TensorView> wrong = in;
    wrong[3] = bad_g.view();
    EXPECT_THROW(oracle::eval_gdn_recurrent(Params(), wrong), std::invalid_argument);  // a KDA gate
    wrong = in;
    wrong[2] = bad_v.view();
    try {
        oracle::eval_gdn_chunkwise(Params(), wrong);
        ADD_FAILURE() << "no error for a bad v";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'v'"), std::string::npos) << e.what();
    }
    EXPECT_THROW(oracle::eval_gdn_chunkwise(Params({{"chunk", 0}}), in), std::invalid_argument);
}

}  // namespace gdn_oracle_test
