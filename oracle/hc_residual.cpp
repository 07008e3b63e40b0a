// Tensor plumbing of the hc_residual and mhc_residual evaluators: each
// token's streams, coefficients and layer output read exactly, the mixings of
// hc_residual.hpp, outputs laid out row-major.
#include "oracle/hc_residual.hpp"

#include <string>

namespace conform::oracle {

HcShape hc_shape(const std::string& op, const std::vector<TensorView>& in) {
    if (in.size() != 5)
        throw std::invalid_argument(op + ": expects five inputs (x, f, a_logits, b, c_logits), got " +
                                    std::to_string(in.size()));
    const std::string b_name = op == "mhc_residual" ? "b_logits" : "b";
    require_rank(op, "x", in[0], 3);
    const HcShape s{in[0].shape[0], in[0].shape[1], in[0].shape[2]};
    require_rank(op, "f", in[1], 2);
    require_dim(op, "f", in[1], 0, s.tokens, "tokens of x");
    require_dim(op, "f", in[1], 1, s.d, "width of x");
    for (int k : {2, 4}) {
        const std::string name = k == 2 ? "a_logits" : "c_logits";
        require_rank(op, name, in[static_cast<std::size_t>(k)], 2);
        require_dim(op, name, in[static_cast<std::size_t>(k)], 0, s.tokens, "tokens of x");
        require_dim(op, name, in[static_cast<std::size_t>(k)], 1, s.n, "streams of x");
    }
    require_rank(op, b_name, in[3], 3);
    require_dim(op, b_name, in[3], 0, s.tokens, "tokens of x");
    require_dim(op, b_name, in[3], 1, s.n, "streams of x");
    require_dim(op, b_name, in[3], 2, s.n, "streams of x");
    return s;
}

namespace {

// Elements [first, first + count) of an exactly read tensor.
std::vector<Real> slice(const std::vector<Real>& all, std::int64_t first, std::int64_t count) {
    return {all.begin() + first, all.begin() + first + count};
}

Mat<Real> matrix(const std::vector<Real>& all, std::int64_t first, std::int64_t rows, std::int64_t cols) {
    Mat<Real> m(rows, cols);
    std::copy(all.begin() + first, all.begin() + first + rows * cols, m.a.begin());
    return m;
}

// Both ops; `project` says whether input 3 holds logits to project (mHC).
OpOutputs eval_mix(const std::string& op, const Params& params, const std::vector<TensorView>& in, bool project) {
    const HcShape s = hc_shape(op, in);
    const int iters = project ? sinkhorn_iters(params) : 0;
    const double eps = project ? sinkhorn_eps(params) : 0.0;
    const std::vector<Real> x = read_exact(in[0]), f = read_exact(in[1]), a = read_exact(in[2]), b = read_exact(in[3]),
                            c = read_exact(in[4]);
    OpOutputs out{{"h", "x_next"}, {{s.tokens, s.d}, {s.tokens, s.n, s.d}}, {{}, {}}};
    if (project) {
        out.names.push_back("b");
        out.shapes.push_back({s.tokens, s.n, s.n});
        out.values.emplace_back();
    }
    for (std::int64_t t = 0; t < s.tokens; ++t) {
        const Mat<Real> xt = matrix(x, t * s.n * s.d, s.n, s.d);
        const Mat<Real> bt =
            project ? sinkhorn(matrix(b, t * s.n * s.n, s.n, s.n), iters, {}, eps) : matrix(b, t * s.n * s.n, s.n, s.n);
        const std::vector<Real> h = hc_pre_mix(xt, slice(a, t * s.n, s.n));
        const Mat<Real> next = hc_post_mix(xt, bt, slice(c, t * s.n, s.n), slice(f, t * s.d, s.d));
        out.values[0].insert(out.values[0].end(), h.begin(), h.end());
        out.values[1].insert(out.values[1].end(), next.a.begin(), next.a.end());
        if (project) out.values[2].insert(out.values[2].end(), bt.a.begin(), bt.a.end());
    }
    return out;
}

}  // namespace

OpOutputs eval_hc_residual(const Params& params, const std::vector<TensorView>& in) {
    return eval_mix("hc_residual", params, in, false);
}

OpOutputs eval_mhc_residual(const Params& params, const std::vector<TensorView>& in) {
    return eval_mix("mhc_residual", params, in, true);
}

}  // namespace conform::oracle
