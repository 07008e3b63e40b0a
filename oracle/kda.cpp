// Kimi Delta Attention: the per-channel decay of the recurrence, the
// per-channel decay inside the chunkwise dot products, and the output gate.
#include "oracle/kda.hpp"

#include <stdexcept>

#include "oracle/activation.hpp"
#include "oracle/norm.hpp"

namespace conform::oracle {
namespace {

const std::string kKdaRecurrent = "kda_recurrent", kKdaChunkwise = "kda_chunkwise";

// Eq. 1.21: Diag(alpha_t) acts on the left of S, so key channel c (row c)
// decays by alpha_{t,c}, before the delta update reads S^T k_t.
template <class R>
void kda_decay_state(Mat<R>& s, const R* g) {
    for (std::int64_t c = 0; c < s.rows; ++c) {
        const R alpha = exp(g[c]);
        for (std::int64_t m = 0; m < s.cols; ++m) s(c, m) *= alpha;
    }
}

// Eq. 1.24 without its 1/Gamma: the decay of tokens i+1..r differs per
// channel, so it sits inside the dot products,
//   A_ri = sum_c q_rc Gamma^c_ri k_ic,  L_ri = sum_c k_rc Gamma^c_ri k_ic,
// Gamma^c_ri = alpha_{i+1,c} ... alpha_{r,c}: the (Gamma ⊙ Q)(K / Gamma)^T of
// eq. 1.24 with each ratio formed as a product of decays, never a quotient.
template <class R>
ChunkTerms<R> kda_chunk_terms(const Mat<R>& q, const Mat<R>& k, const Mat<R>& alpha) {
    const std::int64_t n = q.rows, d = q.cols;
    std::vector<ChunkDecay<R>> gamma;
    for (std::int64_t c = 0; c < d; ++c) gamma.push_back(chunk_decay(alpha, c));
    ChunkTerms<R> t{Mat<R>(n, n), Mat<R>(n, n), Mat<R>(n, d), Mat<R>(n, d), Mat<R>(n, d), std::vector<R>()};
    for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t i = 0; i <= r; ++i) {
            R a(0), l(0);
            for (std::int64_t c = 0; c < d; ++c) {
                const R decayed_k = gamma[static_cast<std::size_t>(c)].between(r, i) * k(i, c);
                a += q(r, c) * decayed_k;
                l += k(r, c) * decayed_k;
            }
            t.A(r, i) = a;
            if (i < r) t.L(r, i) = l;
        }
    for (std::int64_t c = 0; c < d; ++c) {
        const ChunkDecay<R>& g = gamma[static_cast<std::size_t>(c)];
        for (std::int64_t r = 0; r < n; ++r) {
            const R& from_start = g.from_start[static_cast<std::size_t>(r)];
            t.q_start(r, c) = from_start * q(r, c);
            t.k_start(r, c) = from_start * k(r, c);
            t.k_end(r, c) = g.between(n - 1, r) * k(r, c);
        }
        t.state_decay.push_back(g.from_start.back());
    }
    return t;
}

template <class R>
void check_gate_problem(const KdaGateProblem<R>& p) {
    const std::int64_t hv = p.heads * p.d_v;
    const bool ok = p.tokens >= 0 && p.heads >= 1 && p.d_v >= 1 && p.d_model >= 1 && p.d_out >= 1 &&
                    p.o.size() == static_cast<std::size_t>(p.tokens * hv) &&
                    p.x.size() == static_cast<std::size_t>(p.tokens * p.d_model) &&
                    p.w_g.size() == static_cast<std::size_t>(hv * p.d_model) &&
                    p.norm_w.size() == static_cast<std::size_t>(p.d_v) &&
                    p.w_o.size() == static_cast<std::size_t>(p.d_out * hv);
    if (!ok)
        throw std::invalid_argument("kda_output_gate: expects o [T, H, d_v], x [T, d_model], W_g [H d_v, d_model], "
                                    "norm weight [d_v], W_o [d_out, H d_v]");
}

}  // namespace

template <class R>
DeltaResult<R> kda_recurrent(const DeltaProblem<R>& p) {
    check_delta_problem(kKdaRecurrent, p, DecayShape::per_channel);
    return delta_recurrent(p, kda_decay_state<R>);
}

template <class R>
DeltaResult<R> kda_chunkwise(const DeltaProblem<R>& p, std::int64_t chunk) {
    check_delta_problem(kKdaChunkwise, p, DecayShape::per_channel);
    return delta_chunkwise(p, chunk, kda_chunk_terms<R>);
}

template <class R>
std::vector<R> kda_output_gate(const KdaGateProblem<R>& p) {
    check_gate_problem(p);
    const std::int64_t hv = p.heads * p.d_v;
    std::vector<R> y;
    y.reserve(static_cast<std::size_t>(p.tokens * p.d_out));
    for (std::int64_t t = 0; t < p.tokens; ++t) {
        const R* x = &p.x[static_cast<std::size_t>(t * p.d_model)];
        std::vector<R> gated;  // [H * d_v]
        for (std::int64_t h = 0; h < p.heads; ++h) {
            const auto o = p.o.begin() + (t * p.heads + h) * p.d_v;
            const std::vector<R> normed = rms_norm(std::vector<R>(o, o + p.d_v), p.norm_w, p.eps, false);
            for (std::int64_t m = 0; m < p.d_v; ++m) {
                const R* wg = &p.w_g[static_cast<std::size_t>((h * p.d_v + m) * p.d_model)];
                gated.push_back(sigmoid(inner(wg, x, p.d_model)) * normed[static_cast<std::size_t>(m)]);
            }
        }
        for (std::int64_t j = 0; j < p.d_out; ++j)
            y.push_back(inner(&p.w_o[static_cast<std::size_t>(j * hv)], gated.data(), hv));
    }
    return y;
}

OpOutputs eval_kda_recurrent(const Params& params, const std::vector<TensorView>& in) {
    return eval_delta(kKdaRecurrent, params, in, DecayShape::per_channel, kda_recurrent<Real>);
}

OpOutputs eval_kda_chunkwise(const Params& params, const std::vector<TensorView>& in) {
    const std::int64_t chunk = read_chunk(kKdaChunkwise, params);
    return eval_delta(kKdaChunkwise, params, in, DecayShape::per_channel,
                      [chunk](const DeltaProblem<Real>& p) { return kda_chunkwise(p, chunk); });
}

template DeltaResult<Real> kda_recurrent<Real>(const DeltaProblem<Real>&);
template DeltaResult<double> kda_recurrent<double>(const DeltaProblem<double>&);
template DeltaResult<Real> kda_chunkwise<Real>(const DeltaProblem<Real>&, std::int64_t);
template DeltaResult<double> kda_chunkwise<double>(const DeltaProblem<double>&, std::int64_t);
template std::vector<Real> kda_output_gate<Real>(const KdaGateProblem<Real>&);
template std::vector<double> kda_output_gate<double>(const KdaGateProblem<double>&);

}  // namespace conform::oracle
