// The registry op int8_block (docs/int8.md "int8_block as an op"): its
// staged oracle and the local budget of every stage.
//
// Inputs 0..10 are the block's (h, ln1_g, ln1_b, wq, wk, wv, wo, ln2_g,
// ln2_b, w1, w2); a verdict appends the candidate's 11 outputs (OpSpec::staged)
// and each output's reference is then the exact stage applied to the
// candidate's own stage inputs.  With the inputs alone every stage takes the
// oracle's own exact predecessors: the all-real block.
#include <cmath>
#include <stdexcept>

#include "oracle/bound.hpp"
#include "oracle/int8.hpp"
#include "numerics/int8_block_slots.hpp"
#include "oracle/int8_block.hpp"
#include "oracle/norm.hpp"
#include "oracle/softmax.hpp"

namespace conform::oracle {
namespace {

using namespace int8_block_slots;

using RVec = std::vector<Real>;


// Row-wise LayerNorm of x [rows, d] (oracle/norm.hpp per row).
RVec layer_norm_rows(const RVec& x, std::int64_t rows, std::int64_t d, const RVec& g, const RVec& b, double eps) {
    RVec y;
    y.reserve(x.size());
    for (std::int64_t i = 0; i < rows; ++i) {
        const RVec row(x.begin() + i * d, x.begin() + (i + 1) * d);
        for (Real& v : layer_norm(row, g, b, eps)) y.push_back(std::move(v));
    }
    return y;
}

// x [m, k] w [k, n], every term (a 0 times a NaN is NaN, as in the INT8 GEMM).
RVec matmul(const RVec& x, const RVec& w, std::int64_t m, std::int64_t k, std::int64_t n) {
    RVec y(ix(m * n), Real(0));
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t p = 0; p < k; ++p)
            for (std::int64_t j = 0; j < n; ++j) y[ix(i * n + j)] += x[ix(i * k + p)] * w[ix(p * n + j)];
    return y;
}

// Per head: s = q_h k_h^T / sqrt(dh) for j <= i, -inf for j > i.
RVec scores(const RVec& q, const RVec& k, const Dims& g) {
    const Real c = Real(1) / sqrt(Real(static_cast<double>(g.dh)));
    RVec s(ix(g.heads * g.t * g.t), neg_inf<Real>());
    for (std::int64_t hd = 0; hd < g.heads; ++hd)
        for (std::int64_t i = 0; i < g.t; ++i)
            for (std::int64_t j = 0; j <= i; ++j) {
                Real acc(0);
                for (std::int64_t e = 0; e < g.dh; ++e) acc += q[ix(i * g.d + hd * g.dh + e)] * k[ix(j * g.d + hd * g.dh + e)];
                s[ix((hd * g.t + i) * g.t + j)] = acc * c;
            }
    return s;
}

RVec softmax_rows(const RVec& s, std::int64_t rows, std::int64_t n) {
    RVec p;
    p.reserve(s.size());
    for (std::int64_t i = 0; i < rows; ++i)
        for (Real& v : softmax_row(RVec(s.begin() + i * n, s.begin() + (i + 1) * n)).y) p.push_back(std::move(v));
    return p;
}

// o [T, d]: head hd's columns are p_h [T, T] v_h [T, dh] (all T keys).
RVec attend(const RVec& p, const RVec& v, const Dims& g) {
    RVec o(ix(g.t * g.d), Real(0));
    for (std::int64_t hd = 0; hd < g.heads; ++hd)
        for (std::int64_t i = 0; i < g.t; ++i)
            for (std::int64_t j = 0; j < g.t; ++j)
                for (std::int64_t e = 0; e < g.dh; ++e)
                    o[ix(i * g.d + hd * g.dh + e)] += p[ix((hd * g.t + i) * g.t + j)] * v[ix(j * g.d + hd * g.dh + e)];
    return o;
}

RVec plus(RVec a, const RVec& b) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
}

RVec relu(RVec a) {
    for (Real& v : a)
        if (!isnan(v) && !(v > 0)) v = 0;
    return a;
}

}  // namespace

OpOutputs eval_int8_block(const Params& p, const std::vector<TensorView>& in) {
    const Dims g = block_dims(p, in);
    const bool staged = in.size() == std::size_t{n_inputs} + n_outputs;
    const double eps = p.get("eps", 1e-5);
    OpOutputs r{{"out", "x1", "q", "k", "v", "s", "p", "o", "u", "x2", "a"}, {}, std::vector<RVec>(n_outputs)};
    r.shapes = {{g.t, g.d}, {g.t, g.d}, {g.t, g.d}, {g.t, g.d}, {g.t, g.d}, {g.heads, g.t, g.t}, {g.heads, g.t, g.t},
                {g.t, g.d}, {g.t, g.d}, {g.t, g.d}, {g.t, g.ffn}};
    // A stage's input: the candidate's output when given, else the oracle's own.
    auto from = [&](int o) { return staged ? read_exact(in[n_inputs + o]) : r.values[ix(o)]; };
    auto w = [&](int i) { return read_exact(in[i]); };
    const RVec h = w(h_in);
    r.values[x1_o] = layer_norm_rows(h, g.t, g.d, w(ln1_g), w(ln1_b), eps);
    const RVec x1 = from(x1_o);
    r.values[q_o] = matmul(x1, w(wq), g.t, g.d, g.d);
    r.values[k_o] = matmul(x1, w(wk), g.t, g.d, g.d);
    r.values[v_o] = matmul(x1, w(wv), g.t, g.d, g.d);
    r.values[s_o] = scores(from(q_o), from(k_o), g);
    r.values[p_o] = softmax_rows(from(s_o), g.heads * g.t, g.t);
    r.values[o_o] = attend(from(p_o), from(v_o), g);
    r.values[u_o] = plus(h, matmul(from(o_o), w(wo), g.t, g.d, g.d));
    const RVec u = from(u_o);
    r.values[x2_o] = layer_norm_rows(u, g.t, g.d, w(ln2_g), w(ln2_b), eps);
    r.values[a_o] = relu(matmul(from(x2_o), w(w1), g.t, g.d, g.ffn));
    r.values[out_o] = plus(u, matmul(from(a_o), w(w2), g.t, g.ffn, g.d));
    return r;
}

}  // namespace conform::oracle
