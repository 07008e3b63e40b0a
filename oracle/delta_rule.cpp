// The delta-rule forms shared by GDN and KDA: recurrent and chunkwise
// drivers, the UT transform of one chunk, context-parallel composition,
// variable-length packing, and the tensor plumbing of the evaluators.
#include "oracle/delta_rule.hpp"

#include "numerics/delta_varlen.hpp"

#include <algorithm>
#include <cmath>

#include "oracle/norm.hpp"

namespace conform::oracle {
namespace {


// A value at the thread's working precision.  Boost keeps the precision of
// the source on copies and of the wider operand in arithmetic, so a problem
// built at 70 bits would otherwise keep every sum of its own values (the
// cumulative log-decays, the state) at 70 bits inside a 256-bit evaluation.
double working(double x) { return x; }
Real working(const Real& x) {
    Real r;
    mpfr_set(r.backend().data(), x.backend().data(), MPFR_RNDN);
    return r;
}

template <class R>
std::vector<R> working(const std::vector<R>& v) {
    std::vector<R> w;
    w.reserve(v.size());
    for (const R& x : v) w.push_back(working(x));
    return w;
}

// Rows t0 .. t0+c-1 of head h of a [T, H, d] tensor, and back.
template <class R>
Mat<R> head_rows(const std::vector<R>& x, std::int64_t heads, std::int64_t d, std::int64_t h, std::int64_t t0,
                 std::int64_t c) {
    Mat<R> m(c, d);
    for (std::int64_t r = 0; r < c; ++r)
        std::copy_n(x.begin() + ((t0 + r) * heads + h) * d, d, m.a.begin() + r * d);
    return m;
}
template <class R>
void put_head_rows(std::vector<R>& x, std::int64_t heads, std::int64_t h, std::int64_t t0, const Mat<R>& m) {
    for (std::int64_t r = 0; r < m.rows; ++r)
        std::copy_n(m.a.begin() + r * m.cols, m.cols, x.begin() + ((t0 + r) * heads + h) * m.cols);
}

// The H stacked [d_k, d_v] states of a [H, d_k, d_v] tensor.
template <class R>
Mat<R> state_of(const std::vector<R>& states, std::int64_t h, std::int64_t d_k, std::int64_t d_v) {
    Mat<R> s(d_k, d_v);
    if (!states.empty()) std::copy_n(states.begin() + h * d_k * d_v, d_k * d_v, s.a.begin());
    return s;
}
template <class R>
void put_state(std::vector<R>& states, std::int64_t h, const Mat<R>& s) {
    std::copy(s.a.begin(), s.a.end(), states.begin() + h * s.rows * s.cols);
}

template <class R>
DeltaResult<R> zero_result(const DeltaProblem<R>& p) {
    return {std::vector<R>(ix(p.tokens * p.heads * p.d_v), R(0)), std::vector<R>(ix(p.heads * p.d_k * p.d_v), R(0))};
}

// lower b for a lower-triangular `lower` whose entries above the diagonal are
// never read: row r of the result depends on rows <= r of b only, so a NaN
// in a later token cannot reach an earlier output (0 * NaN would).
template <class R>
Mat<R> mul_lower(const Mat<R>& lower, const Mat<R>& b) {
    Mat<R> c(lower.rows, b.cols);
    for (std::int64_t r = 0; r < lower.rows; ++r)
        for (std::int64_t i = 0; i <= r; ++i)
            for (std::int64_t j = 0; j < b.cols; ++j) c(r, j) += lower(r, i) * b(i, j);
    return c;
}

template <class R>
void subtract(Mat<R>& a, const Mat<R>& b) {
    for (std::size_t i = 0; i < a.a.size(); ++i) a.a[i] -= b.a[i];
}
template <class R>
void add(Mat<R>& a, const Mat<R>& b) {
    for (std::size_t i = 0; i < a.a.size(); ++i) a.a[i] += b.a[i];
}

// The UT transform T = (I + Diag(beta) L)^{-1} Diag(beta) of a chunk: the
// unit lower-triangular inverse by forward substitution,
// X_r = e_r - beta_r sum_{i<r} L_ri X_i, then T_ri = X_ri beta_i.
template <class R>
Mat<R> ut_transform(const Mat<R>& l, const std::vector<R>& beta) {
    const std::int64_t c = l.rows;
    Mat<R> x(c, c);
    for (std::int64_t r = 0; r < c; ++r) {
        x(r, r) = R(1);
        for (std::int64_t j = 0; j < r; ++j) {
            R acc(0);
            for (std::int64_t i = j; i < r; ++i) acc += l(r, i) * x(i, j);
            x(r, j) = -beta[ix(r)] * acc;
        }
    }
    for (std::int64_t r = 0; r < c; ++r)
        for (std::int64_t i = 0; i <= r; ++i) x(r, i) *= beta[ix(i)];
    return x;
}

// One chunk: outputs [c, d_v]; advances s from the chunk's entering state to
// its leaving state.  W and U depend on the chunk's own tokens only (the
// parallel part); the state enters through V~ = U - W S (eq. 1.24).
template <class R>
Mat<R> ut_chunk(const ChunkTerms<R>& ct, const std::vector<R>& beta, const Mat<R>& v, Mat<R>& s) {
    const Mat<R> t = ut_transform(ct.L, beta);
    const Mat<R> w = mul_lower(t, ct.k_start);
    Mat<R> v_tilde = mul_lower(t, v);  // U
    subtract(v_tilde, matmul(w, s));
    Mat<R> o = matmul(ct.q_start, s);
    add(o, mul_lower(ct.A, v_tilde));
    Mat<R> next = matmul(transpose(ct.k_end), v_tilde);
    for (std::int64_t i = 0; i < s.rows; ++i)
        for (std::int64_t j = 0; j < s.cols; ++j) next(i, j) += ct.state_decay[ix(i)] * s(i, j);
    s = std::move(next);
    return o;
}

// The decay factors alpha = e^g of head h's tokens t0 .. t0+c-1, [c, gate_width].
template <class R>
Mat<R> chunk_alpha(const DeltaProblem<R>& p, std::int64_t h, std::int64_t t0, std::int64_t c) {
    Mat<R> alpha = head_rows(p.g, p.heads, p.gate_width(), h, t0, c);
    for (R& x : alpha.a) x = exp(x);
    return alpha;
}

template <class R>
std::vector<R> head_betas(const DeltaProblem<R>& p, std::int64_t h, std::int64_t t0, std::int64_t c) {
    std::vector<R> b(ix(c));
    for (std::int64_t r = 0; r < c; ++r) b[ix(r)] = p.beta[ix((t0 + r) * p.heads + h)];
    return b;
}

// The delta update of eqs. 1.13-1.14 on the decayed state:
// e = v - S^T k (prediction error), S <- S + beta k e^T.
template <class R>
void delta_write(Mat<R>& s, const R* k, const R* v, const R& beta) {
    for (std::int64_t m = 0; m < s.cols; ++m) {
        R e = v[m];
        for (std::int64_t c = 0; c < s.rows; ++c) e -= s(c, m) * k[c];
        for (std::int64_t c = 0; c < s.rows; ++c) s(c, m) += beta * k[c] * e;
    }
}

// y = S^T q.
template <class R>
void read_out(const Mat<R>& s, const R* q, R* y) {
    for (std::int64_t m = 0; m < s.cols; ++m) {
        R acc(0);
        for (std::int64_t c = 0; c < s.rows; ++c) acc += s(c, m) * q[c];
        y[m] = std::move(acc);
    }
}

std::vector<std::int64_t> segment_bounds(std::int64_t tokens, const std::vector<std::int64_t>& splits) {
    std::vector<std::int64_t> b{0};
    for (std::int64_t s : splits) {
        if (s <= b.back() || s >= tokens)
            throw std::invalid_argument("delta_context_parallel: split points must be strictly increasing inside (0, " +
                                        std::to_string(tokens) + "), got " + std::to_string(s));
        b.push_back(s);
    }
    b.push_back(tokens);
    return b;
}

// What one context-parallel rank computes for its segment [a, b), without
// knowing the state that enters it: the local run from zero, the
// accumulated transition M(t<-a) per head for its last token, and the
// transported queries M(t<-a)^T q_t [len, H, d_k].
template <class R>
struct SegmentLocal {
    std::int64_t len = 0;
    DeltaResult<R> local;
    std::vector<Mat<R>> transition;
    std::vector<R> transported_q;
};

template <class R>
SegmentLocal<R> run_segment(const DeltaProblem<R>& p, std::int64_t a, std::int64_t b, const DeltaRun<R>& run) {
    SegmentLocal<R> seg{b - a, run(delta_slice(p, a, b)), {}, std::vector<R>(ix((b - a) * p.heads * p.d_k))};
    for (std::int64_t h = 0; h < p.heads; ++h) {
        Mat<R> m = identity<R>(p.d_k);
        for (std::int64_t t = a; t < b; ++t) {
            m = matmul(delta_transition(p, t, h), m);
            Mat<R> q = head_rows(p.q, p.heads, p.d_k, h, t, 1);
            put_head_rows(seg.transported_q, p.heads, h, t - a, matmul(q, m));  // (M^T q)^T = q^T M
        }
        seg.transition.push_back(std::move(m));
    }
    return seg;
}

template <class R>
std::vector<SegmentLocal<R>> run_segments(const DeltaProblem<R>& p, const std::vector<std::int64_t>& splits,
                                          const DeltaRun<R>& run) {
    const std::vector<std::int64_t> b = segment_bounds(p.tokens, splits);
    std::vector<SegmentLocal<R>> segs;
    for (std::size_t i = 0; i + 1 < b.size(); ++i) segs.push_back(run_segment(p, b[i], b[i + 1], run));
    return segs;
}

void require(bool ok, const std::string& op, const std::string& what) {
    if (!ok) throw std::invalid_argument(op + ": " + what);
}


}  // namespace

template <class R>
DeltaProblem<R> at_working_precision(const DeltaProblem<R>& p) {
    DeltaProblem<R> w = p;
    for (std::vector<R>* x : {&w.q, &w.k, &w.v, &w.g, &w.beta, &w.s0}) *x = working(*x);
    return w;
}

template <class R>
void check_delta_problem(const std::string& op, const DeltaProblem<R>& p, DecayShape expected) {
    require(p.decay == expected, op,
            std::string("expects a ") + (expected == DecayShape::per_head ? "per-head" : "per-channel") + " decay");
    require(p.tokens >= 0 && p.heads >= 1 && p.d_k >= 1 && p.d_v >= 1, op, "needs T >= 0, H, d_k, d_v >= 1");
    const std::int64_t th = p.tokens * p.heads;
    require(p.q.size() == ix(th * p.d_k) && p.k.size() == ix(th * p.d_k), op, "q and k must be [T, H, d_k]");
    require(p.v.size() == ix(th * p.d_v), op, "v must be [T, H, d_v]");
    require(p.g.size() == ix(th * p.gate_width()), op, "g must be [T, H] (per head) or [T, H, d_k] (per channel)");
    require(p.beta.size() == ix(th), op, "beta must be [T, H]");
    require(p.s0.empty() || p.s0.size() == ix(p.heads * p.d_k * p.d_v), op, "initial state must be [H, d_k, d_v]");
}

template <class R>
DeltaProblem<R> prepare_qk(const DeltaProblem<R>& in, const QkOptions<R>& o) {
    DeltaProblem<R> p = at_working_precision(in);
    for (std::int64_t row = 0; row < p.tokens * p.heads; ++row) {
        if (o.l2norm)
            for (std::vector<R>* x : {&p.q, &p.k}) {
                const auto b = x->begin() + row * p.d_k;
                const std::vector<R> n = l2_norm(std::vector<R>(b, b + p.d_k), o.l2_eps);
                std::copy(n.begin(), n.end(), b);
            }
        for (std::int64_t c = 0; c < p.d_k; ++c) p.q[ix(row * p.d_k + c)] *= o.scale;
    }
    return p;
}

template <class R>
DeltaResult<R> delta_recurrent(const DeltaProblem<R>& in, DecayState<R> decay_state) {
    const DeltaProblem<R> p = at_working_precision(in);
    DeltaResult<R> out = zero_result(p);
    const std::int64_t w = p.gate_width();
    for (std::int64_t h = 0; h < p.heads; ++h) {
        Mat<R> s = state_of(p.s0, h, p.d_k, p.d_v);
        for (std::int64_t t = 0; t < p.tokens; ++t) {
            const std::int64_t th = t * p.heads + h;
            decay_state(s, &p.g[ix(th * w)]);
            delta_write(s, &p.k[ix(th * p.d_k)], &p.v[ix(th * p.d_v)], p.beta[ix(th)]);
            read_out(s, &p.q[ix(th * p.d_k)], &out.y[ix(th * p.d_v)]);
        }
        put_state(out.state, h, s);
    }
    return out;
}

template <class R>
DeltaResult<R> delta_chunkwise(const DeltaProblem<R>& in, std::int64_t chunk, ChunkTermsOf<R> terms) {
    const DeltaProblem<R> p = at_working_precision(in);
    if (chunk < 1) throw std::invalid_argument("delta_chunkwise: chunk size must be >= 1, is " + std::to_string(chunk));
    DeltaResult<R> out = zero_result(p);
    for (std::int64_t h = 0; h < p.heads; ++h) {
        Mat<R> s = state_of(p.s0, h, p.d_k, p.d_v);
        for (std::int64_t t0 = 0; t0 < p.tokens; t0 += chunk) {
            const std::int64_t c = std::min(chunk, p.tokens - t0);
            const ChunkTerms<R> ct = terms(head_rows(p.q, p.heads, p.d_k, h, t0, c),
                                           head_rows(p.k, p.heads, p.d_k, h, t0, c),
                                           chunk_alpha(p, h, t0, c));
            const Mat<R> o = ut_chunk(ct, head_betas(p, h, t0, c), head_rows(p.v, p.heads, p.d_v, h, t0, c), s);
            put_head_rows(out.y, p.heads, h, t0, o);
        }
        put_state(out.state, h, s);
    }
    return out;
}

template <class R>
ChunkDecay<R> chunk_decay(const Mat<R>& alpha, std::int64_t column) {
    const std::int64_t c = alpha.rows;
    ChunkDecay<R> d{Mat<R>(c, c), std::vector<R>()};
    for (std::int64_t i = 0; i < c; ++i) {
        d.between(i, i) = R(1);
        for (std::int64_t r = i + 1; r < c; ++r) d.between(r, i) = d.between(r - 1, i) * alpha(r, column);
        d.from_start.push_back(i ? d.from_start.back() * alpha(i, column) : alpha(0, column));
    }
    return d;
}

template <class R>
DeltaProblem<R> delta_slice(const DeltaProblem<R>& p, std::int64_t t0, std::int64_t t1) {
    DeltaProblem<R> s;
    s.tokens = t1 - t0, s.heads = p.heads, s.d_k = p.d_k, s.d_v = p.d_v, s.decay = p.decay;
    auto rows = [&](const std::vector<R>& x, std::int64_t width) {
        return std::vector<R>(x.begin() + t0 * p.heads * width, x.begin() + t1 * p.heads * width);
    };
    s.q = rows(p.q, p.d_k), s.k = rows(p.k, p.d_k), s.v = rows(p.v, p.d_v);
    s.g = rows(p.g, p.gate_width()), s.beta = rows(p.beta, 1);
    return s;
}

template <class R>
Mat<R> delta_transition(const DeltaProblem<R>& p, std::int64_t t, std::int64_t h) {
    const std::int64_t th = t * p.heads + h, w = p.gate_width();
    const R* k = &p.k[ix(th * p.d_k)];
    const R& beta = p.beta[ix(th)];
    Mat<R> m(p.d_k, p.d_k);
    for (std::int64_t j = 0; j < p.d_k; ++j) {
        const R alpha = exp(p.g[ix(th * w + (w == 1 ? 0 : j))]);
        for (std::int64_t i = 0; i < p.d_k; ++i) m(i, j) = (R(i == j ? 1 : 0) - beta * k[i] * k[j]) * alpha;
    }
    return m;
}

template <class R>
DeltaResult<R> delta_context_parallel(const DeltaProblem<R>& p, const std::vector<std::int64_t>& splits,
                                      const DeltaRun<R>& run) {
    const std::vector<SegmentLocal<R>> segs = run_segments(p, splits, run);  // independent: one per rank
    DeltaResult<R> out = zero_result(p);
    for (std::int64_t h = 0; h < p.heads; ++h) {
        Mat<R> s_in = state_of(p.s0, h, p.d_k, p.d_v);
        std::int64_t a = 0;
        for (const SegmentLocal<R>& seg : segs) {
            const std::int64_t len = seg.len;
            Mat<R> y = matmul(head_rows(seg.transported_q, p.heads, p.d_k, h, 0, len), s_in);
            add(y, head_rows(seg.local.y, p.heads, p.d_v, h, 0, len));
            put_head_rows(out.y, p.heads, h, a, y);
            Mat<R> s = matmul(seg.transition[ix(h)], s_in);
            add(s, state_of(seg.local.state, h, p.d_k, p.d_v));
            s_in = std::move(s);
            a += len;
        }
        put_state(out.state, h, s_in);
    }
    return out;
}

template <class R>
std::vector<R> delta_context_parallel_state(const DeltaProblem<R>& p, const std::vector<std::int64_t>& splits,
                                            const DeltaRun<R>& run) {
    const std::vector<SegmentLocal<R>> segs = run_segments(p, splits, run);
    std::vector<R> out(ix(p.heads * p.d_k * p.d_v), R(0));
    for (std::int64_t h = 0; h < p.heads; ++h) {
        // Walk the segments backwards, carrying M[n] ... M[j+1].
        Mat<R> later = identity<R>(p.d_k), total(p.d_k, p.d_v);
        for (std::size_t j = segs.size(); j-- > 0;) {
            add(total, matmul(later, state_of(segs[j].local.state, h, p.d_k, p.d_v)));
            later = matmul(later, segs[j].transition[ix(h)]);
        }
        add(total, matmul(later, state_of(p.s0, h, p.d_k, p.d_v)));
        put_state(out, h, total);
    }
    return out;
}

template <class R>
DeltaResult<R> delta_varlen(const DeltaProblem<R>& p, const std::vector<std::int64_t>& cu, const DeltaRun<R>& run) {
    require(cu.size() >= 2 && cu.front() == 0 && cu.back() == p.tokens && std::is_sorted(cu.begin(), cu.end()),
            "delta_varlen", "cu_seqlens must be nondecreasing from 0 to T = " + std::to_string(p.tokens));
    const std::int64_t n = static_cast<std::int64_t>(cu.size()) - 1, state = p.heads * p.d_k * p.d_v;
    require(p.s0.empty() || p.s0.size() == ix(n * state), "delta_varlen", "initial states must be [N, H, d_k, d_v]");
    DeltaResult<R> out{std::vector<R>(ix(p.tokens * p.heads * p.d_v), R(0)), std::vector<R>(ix(n * state), R(0))};
    for (std::int64_t i = 0; i < n; ++i) {
        DeltaProblem<R> seq = delta_slice(p, cu[ix(i)], cu[ix(i + 1)]);
        if (!p.s0.empty()) seq.s0.assign(p.s0.begin() + i * state, p.s0.begin() + (i + 1) * state);
        const DeltaResult<R> r = run(seq);
        std::copy(r.y.begin(), r.y.end(), out.y.begin() + cu[ix(i)] * p.heads * p.d_v);
        std::copy(r.state.begin(), r.state.end(), out.state.begin() + i * state);
    }
    return out;
}

namespace {

QkOptions<Real> read_qk_options(const std::string& op, const Params& params, std::int64_t d_k) {
    QkOptions<Real> o;
    o.l2norm = integer_param(op, params, "l2norm", 0, 0, 1) != 0;
    o.l2_eps = params.get("l2_eps", 1e-6);
    require(o.l2_eps >= 0 && std::isfinite(o.l2_eps), op, "parameter 'l2_eps' must be finite and >= 0");
    const double scale = params.get("scale", 1.0);
    require(std::isfinite(scale), op, "parameter 'scale' must be finite");
    o.scale = scale != 0 ? from_double(scale) : Real(1) / sqrt(Real(static_cast<double>(d_k)));
    return o;
}

}  // namespace

DeltaProblem<Real> read_delta_problem(const std::string& op, const Params& params, const std::vector<TensorView>& in,
                                      DecayShape decay) {
    require(in.size() >= 5 && in.size() <= 7, op,
            "expects inputs q, k, v, g, beta and optionally initial_state, cu_seqlens; got " +
                std::to_string(in.size()));
    const TensorView &q = in[0], &k = in[1], &v = in[2], &g = in[3], &beta = in[4];
    require_rank(op, "q", q, 3);
    require_rank(op, "k", k, 3);
    require_rank(op, "v", v, 3);
    require_rank(op, "g", g, decay == DecayShape::per_channel ? 3 : 2);
    require_rank(op, "beta", beta, 2);
    DeltaProblem<Real> p;
    p.decay = decay;
    p.tokens = q.shape[0], p.heads = q.shape[1], p.d_k = q.shape[2], p.d_v = v.shape[2];
    require(p.heads >= 1 && p.d_k >= 1 && p.d_v >= 1, op, "needs H, d_k, d_v >= 1");
    for (int d = 0; d < 3; ++d) require_dim(op, "k", k, d, q.shape[d], "as q");
    require_dim(op, "v", v, 0, p.tokens, "tokens T of q");
    require_dim(op, "v", v, 1, p.heads, "heads H of q");
    for (int d = 0; d < g.rank; ++d) require_dim(op, "g", g, d, q.shape[d], "as q");
    require_dim(op, "beta", beta, 0, p.tokens, "tokens T of q");
    require_dim(op, "beta", beta, 1, p.heads, "heads H of q");
    if (delta_input_given(in, kDeltaInitialState)) {
        // Packed calls (cu_seqlens) hold one state per sequence, [N, H, d_k, d_v].
        const TensorView& s0 = in[kDeltaInitialState];
        const int lead = delta_packed(in) ? 1 : 0;
        require_rank(op, "initial_state", s0, 3 + lead);
        if (lead) require_dim(op, "initial_state", s0, 0, in[kDeltaCuSeqlens].numel() - 1, "sequences N of cu_seqlens");
        require_dim(op, "initial_state", s0, lead, p.heads, "heads H of q");
        require_dim(op, "initial_state", s0, lead + 1, p.d_k, "key dim d_k of q");
        require_dim(op, "initial_state", s0, lead + 2, p.d_v, "value dim d_v of v");
        p.s0 = read_exact(s0);
    }
    p.q = read_exact(q), p.k = read_exact(k), p.v = read_exact(v), p.g = read_exact(g), p.beta = read_exact(beta);
    const QkOptions<Real> o = read_qk_options(op, params, p.d_k);
    return prepare_qk(p, o);
}

std::int64_t read_chunk(const std::string& op, const Params& params) {
    return integer_param(op, params, "chunk", 64, 1, 0x1p31);
}

OpOutputs eval_delta(const std::string& op, const Params& params, const std::vector<TensorView>& in, DecayShape decay,
                     const DeltaRun<Real>& run) {
    const DeltaProblem<Real> p = read_delta_problem(op, params, in, decay);
    std::vector<std::int64_t> state_shape{p.heads, p.d_k, p.d_v};
    DeltaResult<Real> r;
    if (delta_packed(in)) {
        std::vector<std::int64_t> cu;
        try {
            cu = delta_cu_seqlens(in, p.tokens);
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument(op + ": " + e.what());
        }
        state_shape.insert(state_shape.begin(), static_cast<std::int64_t>(cu.size()) - 1);
        r = delta_varlen(p, cu, run);
    } else {
        r = run(p);
    }
    return {{"y", "state"}, {{p.tokens, p.heads, p.d_v}, state_shape}, {std::move(r.y), std::move(r.state)}};
}

#define CONFORM_DELTA_RULE_INSTANTIATE(R)                                                                          \
    template void check_delta_problem<R>(const std::string&, const DeltaProblem<R>&, DecayShape);                 \
    template DeltaProblem<R> prepare_qk<R>(const DeltaProblem<R>&, const QkOptions<R>&);                                 \
    template DeltaResult<R> delta_recurrent<R>(const DeltaProblem<R>&, DecayState<R>);                            \
    template DeltaResult<R> delta_chunkwise<R>(const DeltaProblem<R>&, std::int64_t, ChunkTermsOf<R>);            \
    template DeltaProblem<R> delta_slice<R>(const DeltaProblem<R>&, std::int64_t, std::int64_t);                  \
    template ChunkDecay<R> chunk_decay<R>(const Mat<R>&, std::int64_t);                                           \
    template Mat<R> delta_transition<R>(const DeltaProblem<R>&, std::int64_t, std::int64_t);                      \
    template DeltaResult<R> delta_context_parallel<R>(const DeltaProblem<R>&, const std::vector<std::int64_t>&,   \
                                                      const DeltaRun<R>&);                                        \
    template std::vector<R> delta_context_parallel_state<R>(const DeltaProblem<R>&,                               \
                                                            const std::vector<std::int64_t>&, const DeltaRun<R>&); \
    template DeltaResult<R> delta_varlen<R>(const DeltaProblem<R>&, const std::vector<std::int64_t>&,             \
                                            const DeltaRun<R>&);

CONFORM_DELTA_RULE_INSTANTIATE(Real)
CONFORM_DELTA_RULE_INSTANTIATE(double)

}  // namespace conform::oracle
