// Machinery shared by the gated delta-rule linear attentions: Gated DeltaNet
// (oracle/gdn.hpp, one decay per head and token) and Kimi Delta Attention
// (oracle/kda.hpp, one decay per key channel).  docs/gdn.md has the formulas,
// the chunkwise derivation and the conventions.
//
// Per head, with state S in R^{d_k x d_v} (row = key channel, column = value
// channel) and D_t = Diag(alpha_t) (alpha_t I for GDN):
//   S_t = (I - beta_t k_t k_t^T) D_t S_{t-1} + beta_t k_t v_t^T,   y_t = S_t^T q_t.
// Gates are given as log-decays g = ln alpha (what the decay
// parameterizations of oracle/decay.hpp produce and chunkwise kernels take).
//
// Everything is a template over the number type (Real: the MPFR oracle;
// double: the FP64 tier), defined in delta_rule.cpp and instantiated there
// for both.  The forms evaluate at the thread's working precision
// (PrecisionScope) whatever the precision the problem's values were built
// at: inputs are rounded to it on entry.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "oracle/structured.hpp"

namespace conform::oracle {

// Small dense row-major matrix (Eigen over MPFR is slow to compile, and the
// oracle needs nothing beyond products and a triangular solve).
template <class R>
struct Mat {
    std::int64_t rows = 0, cols = 0;
    std::vector<R> a;
    Mat() = default;
    Mat(std::int64_t r, std::int64_t c) : rows(r), cols(c), a(static_cast<std::size_t>(r * c), R(0)) {}
    R& operator()(std::int64_t i, std::int64_t j) { return a[static_cast<std::size_t>(i * cols + j)]; }
    const R& operator()(std::int64_t i, std::int64_t j) const { return a[static_cast<std::size_t>(i * cols + j)]; }
    const R* row(std::int64_t i) const { return &a[static_cast<std::size_t>(i * cols)]; }
};

template <class R> Mat<R> identity(std::int64_t n) {
    Mat<R> m(n, n);
    for (std::int64_t i = 0; i < n; ++i) m(i, i) = R(1);
    return m;
}

template <class R> Mat<R> matmul(const Mat<R>& a, const Mat<R>& b) {
    Mat<R> c(a.rows, b.cols);
    for (std::int64_t i = 0; i < a.rows; ++i)
        for (std::int64_t k = 0; k < a.cols; ++k)
            for (std::int64_t j = 0; j < b.cols; ++j) c(i, j) += a(i, k) * b(k, j);
    return c;
}

template <class R> Mat<R> transpose(const Mat<R>& m) {
    Mat<R> t(m.cols, m.rows);
    for (std::int64_t i = 0; i < m.rows; ++i)
        for (std::int64_t j = 0; j < m.cols; ++j) t(j, i) = m(i, j);
    return t;
}

// sum_i a_i b_i, in index order.
template <class R>
R inner(const R* a, const R* b, std::int64_t n) {
    R s(0);
    for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

enum class DecayShape {
    per_head = 0,     // GDN: g [T, H], the same decay on every key channel
    per_channel = 1,  // KDA: g [T, H, d_k]
};

// One evaluation: T tokens of H heads (a batch is one call per sequence, or
// one packed call through delta_varlen).
template <class R>
struct DeltaProblem {
    std::int64_t tokens = 0, heads = 0, d_k = 0, d_v = 0;
    DecayShape decay = DecayShape::per_head;
    std::vector<R> q, k;  // [T, H, d_k]
    std::vector<R> v;     // [T, H, d_v]
    std::vector<R> g;     // log-decay ln(alpha): [T, H] or [T, H, d_k] (see DecayShape)
    std::vector<R> beta;  // [T, H] write strength
    std::vector<R> s0;    // [H, d_k, d_v] initial state; empty means zero
                          // (delta_varlen: [N, H, d_k, d_v], one per sequence)

    std::int64_t gate_width() const { return decay == DecayShape::per_channel ? d_k : 1; }
};

template <class R>
struct DeltaResult {
    std::vector<R> y;      // [T, H, d_v]
    std::vector<R> state;  // [H, d_k, d_v] after the last token (delta_varlen: [N, H, d_k, d_v])
};

// Sizes consistent with the dimensions (std::invalid_argument naming `op`).
template <class R>
void check_delta_problem(const std::string& op, const DeltaProblem<R>& p, DecayShape expected);

// Optional preprocessing of q and k, applied once before any form:
// q, k <- q / sqrt(|q|^2 + eps), k / sqrt(|k|^2 + eps) per token and head when
// l2norm; then q <- scale q (the readout y_t = S_t^T (scale q_t)).
template <class R>
struct QkOptions {
    bool l2norm = false;
    double l2_eps = 1e-6;
    R scale = R(1);
};
template <class R>
DeltaProblem<R> prepare_qk(const DeltaProblem<R>& p, const QkOptions<R>& o);

// ---- the two forms, parameterized by the decay-specific part -------------

// Recurrent form: per token S <- D_t S (decay_state), then the delta update
// e = v_t - S^T k_t, S <- S + beta_t k_t e^T (eqs. 1.12-1.14), y_t = S^T q_t.
// decay_state gets the token's gate_width() log-decays.
template <class R>
using DecayState = void (*)(Mat<R>& s, const R* g_t);
template <class R>
DeltaResult<R> delta_recurrent(const DeltaProblem<R>& p, DecayState<R> decay_state);

// The decay-dependent quantities of one chunk of c tokens (local rows
// r = 0..c-1), with D(r<-i) = D_{i+1} ... D_r the decay of tokens i+1..r
// (the identity for r = i) and D(r<-start) = D_0 ... D_r:
template <class R>
struct ChunkTerms {
    Mat<R> L;        // [c, c] strictly lower: L_ri = k_r^T D(r<-i) k_i
    Mat<R> A;        // [c, c] lower, diagonal included: A_ri = q_r^T D(r<-i) k_i
    Mat<R> q_start;  // [c, d_k] rows D(r<-start) q_r
    Mat<R> k_start;  // [c, d_k] rows D(r<-start) k_r
    Mat<R> k_end;    // [c, d_k] rows D(c-1<-r) k_r
    std::vector<R> state_decay;  // [d_k] diagonal of D(c-1<-start)
};
// q, k: [c, d_k]; alpha: [c, gate_width] the tokens' decay factors e^g.
template <class R>
using ChunkTermsOf = ChunkTerms<R> (*)(const Mat<R>& q, const Mat<R>& k, const Mat<R>& alpha);

// The decay products of one column (channel) of alpha within a chunk:
// between(r, i) = alpha_{i+1} ... alpha_r for i <= r (1 on the diagonal, 0
// above it, never read), from_start[r] = alpha_0 ... alpha_r.  Running
// products of factors in (0, 1]: no 1/Gamma is formed, nothing overflows,
// and alpha = 0 (g = -inf, a full reset) stays exact.  (A kernel forms the
// same numbers as exp(G_r - G_i) from within-chunk cumulative sums;
// docs/gdn.md "Finite-precision formulation".)
template <class R>
struct ChunkDecay {
    Mat<R> between;
    std::vector<R> from_start;
};
template <class R>
ChunkDecay<R> chunk_decay(const Mat<R>& alpha, std::int64_t column);

// Chunkwise (UT / WY) form: chunks [0, C), [C, 2C), ... (the last one may be
// shorter); within a chunk W = T K_start and U = T V with
// T = (I + Diag(beta) L)^{-1} Diag(beta) need no state, then
// V~ = U - W S, O = Q_start S + A V~, S <- D(end<-start) S + K_end^T V~.
template <class R>
DeltaResult<R> delta_chunkwise(const DeltaProblem<R>& p, std::int64_t chunk, ChunkTermsOf<R> terms);

// ---- compositions --------------------------------------------------------

template <class R>
using DeltaRun = std::function<DeltaResult<R>(const DeltaProblem<R>&)>;

// Tokens [t0, t1) of p as a problem of their own, starting from zero state.
template <class R>
DeltaProblem<R> delta_slice(const DeltaProblem<R>& p, std::int64_t t0, std::int64_t t1);

// Token t's transition M_t = (I - beta_t k_t k_t^T) D_t of head h, [d_k, d_k].
template <class R>
Mat<R> delta_transition(const DeltaProblem<R>& p, std::int64_t t, std::int64_t h);

// Context-parallel composition (eq. 1.25): split the tokens at `splits`
// (strictly increasing, inside (0, T)); each segment [a, b) runs from zero
// state with `run`, independently of the others, and also yields its
// accumulated transition M(t<-a) = M_t ... M_a.  A sequential pass then
// restores the true states and outputs:
//   S_t = S~_t + M(t<-a) S_in,   y_t = y~_t + S_in^T (M(t<-a)^T q_t).
template <class R>
DeltaResult<R> delta_context_parallel(const DeltaProblem<R>& p, const std::vector<std::int64_t>& splits,
                                      const DeltaRun<R>& run);
// The final state in the unrolled form of eq. 1.26, no sequential pass:
//   S_T = sum_j M[n] ... M[j+1] S~[j] + M[n] ... M[1] S_0
// over segments j = 1..n (M[j] the whole segment's transition).
template <class R>
std::vector<R> delta_context_parallel_state(const DeltaProblem<R>& p, const std::vector<std::int64_t>& splits,
                                            const DeltaRun<R>& run);

// Packed variable-length sequences: cu_seqlens = {0, t_1, ..., T}
// (nondecreasing); sequence n is tokens [cu[n], cu[n+1]), starts from
// p.s0[n] (p.s0 is [N, H, d_k, d_v] or empty) and never sees another
// sequence's state.  Returns y [T, H, d_v] and the final states [N, H, d_k, d_v].
template <class R>
DeltaResult<R> delta_varlen(const DeltaProblem<R>& p, const std::vector<std::int64_t>& cu_seqlens,
                            const DeltaRun<R>& run);

// ---- tensor plumbing for the structured-op evaluators ---------------------

// Inputs q [T, H, d_k], k [T, H, d_k], v [T, H, d_v], g [T, H] or
// [T, H, d_k], beta [T, H], optionally initial_state [H, d_k, d_v] (packed
// calls: [N, H, d_k, d_v]; an empty view is no state), read exactly; then
// prepare_qk with params l2norm [0], l2_eps [1e-6], scale [1; 0 means
// 1/sqrt(d_k)].  cu_seqlens is read by eval_delta.
DeltaProblem<Real> read_delta_problem(const std::string& op, const Params& params, const std::vector<TensorView>& in,
                                      DecayShape decay);
// Param chunk [64]: an integer >= 1.
std::int64_t read_chunk(const std::string& op, const Params& params);
// A structured-op evaluator: `run` on the call's problem, or sequence by
// sequence through delta_varlen when cu_seqlens is given.  Outputs
// y [T, H, d_v], state [H, d_k, d_v] (packed: [N, H, d_k, d_v]).
OpOutputs eval_delta(const std::string& op, const Params& params, const std::vector<TensorView>& in, DecayShape decay,
                     const DeltaRun<Real>& run);

}  // namespace conform::oracle
