// Gated DeltaNet: the scalar decay of the recurrence and the scalar decay
// mask of the chunkwise form.
#include "oracle/gdn.hpp"

namespace conform::oracle {
namespace {

const std::string kRecurrent = "gdn_recurrent", kChunkwise = "gdn_chunkwise";

// Eq. 1.12: the whole state decays by the head's alpha_t before the delta update.
template <class R>
void gdn_decay_state(Mat<R>& s, const R* g) {
    const R alpha = exp(*g);
    for (R& x : s.a) x *= alpha;
}

// Eqs. 1.19-1.20 with the delta correction.  One scalar mask
// Gamma_ri = alpha_{i+1} ... alpha_r, i <= r (the decay of tokens i+1..r),
// scales both Q K^T (the readout A) and K K^T (the UT system L); rows decayed
// to the chunk start use gamma_r = alpha_0 ... alpha_r, rows decayed to its
// end Gamma_{c-1,r}.  Every factor is a product of decays, never a quotient.
template <class R>
ChunkTerms<R> gdn_chunk_terms(const Mat<R>& q, const Mat<R>& k, const Mat<R>& alpha) {
    const std::int64_t c = q.rows, d = q.cols;
    const ChunkDecay<R> gamma = chunk_decay(alpha, 0);
    ChunkTerms<R> t{Mat<R>(c, c), Mat<R>(c, c), Mat<R>(c, d), Mat<R>(c, d), Mat<R>(c, d), {}};
    for (std::int64_t r = 0; r < c; ++r) {
        for (std::int64_t i = 0; i <= r; ++i) {
            t.A(r, i) = gamma.between(r, i) * inner(q.row(r), k.row(i), d);
            if (i < r) t.L(r, i) = gamma.between(r, i) * inner(k.row(r), k.row(i), d);
        }
        const R &from_start = gamma.from_start[static_cast<std::size_t>(r)], &to_end = gamma.between(c - 1, r);
        for (std::int64_t j = 0; j < d; ++j) {
            t.q_start(r, j) = from_start * q(r, j);
            t.k_start(r, j) = from_start * k(r, j);
            t.k_end(r, j) = to_end * k(r, j);
        }
    }
    t.state_decay.assign(static_cast<std::size_t>(d), gamma.from_start.back());
    return t;
}

}  // namespace

template <class R>
DeltaResult<R> gdn_recurrent(const DeltaProblem<R>& p) {
    check_delta_problem(kRecurrent, p, DecayShape::per_head);
    return delta_recurrent(p, gdn_decay_state<R>);
}

template <class R>
DeltaResult<R> gdn_chunkwise(const DeltaProblem<R>& p, std::int64_t chunk) {
    check_delta_problem(kChunkwise, p, DecayShape::per_head);
    return delta_chunkwise(p, chunk, gdn_chunk_terms<R>);
}

OpOutputs eval_gdn_recurrent(const Params& params, const std::vector<TensorView>& in) {
    return eval_delta(kRecurrent, params, in, DecayShape::per_head, gdn_recurrent<Real>);
}

OpOutputs eval_gdn_chunkwise(const Params& params, const std::vector<TensorView>& in) {
    const std::int64_t chunk = read_chunk(kChunkwise, params);
    return eval_delta(kChunkwise, params, in, DecayShape::per_head,
                      [chunk](const DeltaProblem<Real>& p) { return gdn_chunkwise(p, chunk); });
}

template DeltaResult<Real> gdn_recurrent<Real>(const DeltaProblem<Real>&);
template DeltaResult<double> gdn_recurrent<double>(const DeltaProblem<double>&);
template DeltaResult<Real> gdn_chunkwise<Real>(const DeltaProblem<Real>&, std::int64_t);
template DeltaResult<double> gdn_chunkwise<double>(const DeltaProblem<double>&, std::int64_t);

}  // namespace conform::oracle
