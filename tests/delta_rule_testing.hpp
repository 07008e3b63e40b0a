// Problems and comparisons shared by the GDN and KDA oracle tests
// (tests/gdn_oracle_test.cpp, tests/kda_oracle_test.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "oracle/decay.hpp"
#include "oracle/delta_rule.hpp"
#include "test_tensors.hpp"

namespace conform::testing {

using oracle::DecayShape;
using oracle::DeltaProblem;
using oracle::DeltaResult;
using oracle::Real;

inline Real ln(const Real& x) { return oracle::apply(mpfr_log, x); }
inline Real real(double x) { return oracle::from_double(x); }

// How the log-decays of a random problem are drawn.
enum class Gates {
    mixed,        // lower-bounded sigmoid, negative softplus and exact alpha = 1, interleaved
    tiny,         // alpha = 1e-12 on every token (and channel)
    lower_bound,  // g = -5 on every token (and channel): the KDA floor
};

inline Real draw_log_decay(std::mt19937_64& gen, Gates gates, std::size_t i) {
    if (gates == Gates::tiny) return ln(real(1e-12));
    if (gates == Gates::lower_bound) return Real(-5);
    std::uniform_int_distribution<int> z(-32, 32), a(-8, 8);
    const Real zz = Real(z(gen)) / 8, aa = Real(a(gen)) / 8;
    switch (i % 3) {
        case 0: return oracle::lower_bounded_log_decay(zz, aa);
        case 1: return oracle::softplus_log_decay(zz, aa);
        default: return Real(0);
    }
}

// q, v dyadic; k L2-normalized (so beta in [0, 1] keeps the transition a
// contraction, as in the models); beta multiples of 1/8 in [0, 1] (0 and 1
// included); an initial state when with_state.
inline DeltaProblem<Real> random_problem(std::int64_t T, std::int64_t H, std::int64_t d_k, std::int64_t d_v,
                                         DecayShape decay, std::uint64_t seed, Gates gates = Gates::mixed,
                                         bool with_state = true) {
    std::mt19937_64 gen(seed);
    auto reals = [&](std::int64_t n) {
        std::vector<Real> r;
        for (double x : dyadic(gen, static_cast<std::size_t>(n))) r.push_back(real(x));
        return r;
    };
    DeltaProblem<Real> p;
    p.tokens = T, p.heads = H, p.d_k = d_k, p.d_v = d_v, p.decay = decay;
    p.q = reals(T * H * d_k), p.k = reals(T * H * d_k), p.v = reals(T * H * d_v);
    for (std::int64_t i = 0; i < T * H * p.gate_width(); ++i)
        p.g.push_back(draw_log_decay(gen, gates, static_cast<std::size_t>(i)));
    std::uniform_int_distribution<int> b(0, 8);
    for (std::int64_t i = 0; i < T * H; ++i) p.beta.push_back(Real(b(gen)) / 8);
    if (with_state) p.s0 = reals(H * d_k * d_v);
    oracle::QkOptions<Real> o;
    o.l2norm = true;
    DeltaProblem<Real> normed = oracle::prepare_qk(p, o);
    normed.q = p.q;  // only k is normalized; q keeps its dyadic values
    return normed;
}

inline Real max_abs(const std::vector<Real>& v) {
    Real m(0);
    for (const Real& x : v) m = std::max(m, oracle::abs(x));
    return m;
}

// log2 of the largest |a - b| relative to max(1, max |b|) (-inf when equal).
inline double rel_diff_log2(const std::vector<Real>& a, const std::vector<Real>& b) {
    EXPECT_EQ(a.size(), b.size());
    Real m(0);
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, oracle::abs(a[i] - b[i]));
    const Real rel = m / std::max(Real(1), max_abs(b));
    return rel == 0 ? -1e9 : oracle::to_double(oracle::apply(mpfr_log2, rel));
}

// y and final state agree to 2^-bits relative to their magnitude.
inline void expect_same(const DeltaResult<Real>& a, const DeltaResult<Real>& b, double bits, const std::string& what) {
    EXPECT_LE(rel_diff_log2(a.y, b.y), -bits) << what << " (y)";
    EXPECT_LE(rel_diff_log2(a.state, b.state), -bits) << what << " (state)";
}

// Several independent problems packed along T (the [T, H, d] layout packs
// by concatenation), with their cu_seqlens and stacked initial states.
inline DeltaProblem<Real> pack(const std::vector<DeltaProblem<Real>>& seqs, std::vector<std::int64_t>& cu) {
    DeltaProblem<Real> p = seqs.front();
    p.tokens = 0;
    p.q.clear(), p.k.clear(), p.v.clear(), p.g.clear(), p.beta.clear(), p.s0.clear();
    cu = {0};
    for (const DeltaProblem<Real>& s : seqs) {
        for (auto [to, from] : {std::pair{&p.q, &s.q}, {&p.k, &s.k}, {&p.v, &s.v}, {&p.g, &s.g}, {&p.beta, &s.beta},
                                {&p.s0, &s.s0}})
            to->insert(to->end(), from->begin(), from->end());
        p.tokens += s.tokens;
        cu.push_back(p.tokens);
    }
    return p;
}

// The slice [t0, t1) of a [T, H, d] output.
inline std::vector<Real> token_rows(const std::vector<Real>& y, std::int64_t t0, std::int64_t t1, std::int64_t width) {
    return std::vector<Real>(y.begin() + t0 * width, y.begin() + t1 * width);
}

// The self-check of docs/gdn.md (GdnOracle/KdaOracle.Precision128Vs256):
// both forms at 128 bits agree with the recurrence at 256 bits to 2^-110.
inline void expect_precision_self_check(const DeltaProblem<Real>& p, const oracle::DeltaRun<Real>& recurrent,
                                        const oracle::DeltaRun<Real>& chunkwise) {
    DeltaResult<Real> lo_rec, lo_chk;
    {
        oracle::PrecisionScope bits(128);
        lo_rec = recurrent(p), lo_chk = chunkwise(p);
    }
    oracle::PrecisionScope bits(256);
    const DeltaResult<Real> hi = recurrent(p);
    expect_same(lo_rec, hi, 110, "recurrent 128 vs 256");
    expect_same(lo_chk, hi, 110, "chunkwise 128 vs 256");
}

// Context-parallel composition equals the sequential run for every single
// split point and for one segment per token, for y and the final state,
// both through the sequential pass (eq. 1.25) and the unrolled sum (eq. 1.26).
inline void expect_context_parallel_equals_sequential(const DeltaProblem<Real>& p, const oracle::DeltaRun<Real>& run,
                                                      const std::string& what) {
    const DeltaResult<Real> seq = run(p);
    std::vector<std::vector<std::int64_t>> splits;
    std::vector<std::int64_t> every;  // one segment per token
    for (std::int64_t t = 1; t < p.tokens; ++t) {
        splits.push_back({t});
        every.push_back(t);
    }
    splits.push_back(every);
    if (p.tokens >= 5) splits.push_back({1, p.tokens / 2, p.tokens - 1});
    for (const std::vector<std::int64_t>& s : splits) {
        const std::string where = what + " splits " + ::testing::PrintToString(s);
        expect_same(oracle::delta_context_parallel(p, s, run), seq, 200, where);
        EXPECT_LE(rel_diff_log2(oracle::delta_context_parallel_state(p, s, run), seq.state), -200) << where;
    }
}

// Packed sequences (one of them empty) equal separate runs; the same tokens
// run as one sequence differ from the second sequence on (a leak would).
inline void expect_varlen_equals_separate_runs(const std::vector<DeltaProblem<Real>>& seqs,
                                               const oracle::DeltaRun<Real>& run, const std::string& what) {
    std::vector<std::int64_t> cu;
    const DeltaProblem<Real> packed = pack(seqs, cu);
    const DeltaResult<Real> all = oracle::delta_varlen(packed, cu, run);
    const std::int64_t yw = packed.heads * packed.d_v, sw = packed.heads * packed.d_k * packed.d_v;
    for (std::size_t n = 0; n < seqs.size(); ++n) {
        const DeltaResult<Real> one = run(seqs[n]);
        const std::int64_t i = static_cast<std::int64_t>(n);
        DeltaResult<Real> part{token_rows(all.y, cu[n], cu[n + 1], yw), token_rows(all.state, i, i + 1, sw)};
        expect_same(part, one, 200, what + " sequence " + std::to_string(n));
    }
    DeltaProblem<Real> joined = packed;
    joined.s0 = seqs.front().s0;
    const DeltaResult<Real> leaked = run(joined);
    EXPECT_GT(rel_diff_log2(token_rows(leaked.y, cu[1], packed.tokens, yw), token_rows(all.y, cu[1], packed.tokens, yw)),
              -20)
        << what << ": running the packed tokens as one sequence must differ";
}

}  // namespace conform::testing
