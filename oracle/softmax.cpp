// Tensor plumbing of the softmax-family evaluators: read rows exactly, apply
// the row templates of softmax.hpp, lay the outputs out row-major.
#include "oracle/softmax.hpp"

#include <cmath>
#include <string>

namespace conform::oracle {
namespace {

std::vector<std::int64_t> shape_of(const TensorView& t) { return {t.shape.begin(), t.shape.begin() + t.rank}; }

std::vector<std::int64_t> leading_shape(const TensorView& t) {
    return {t.shape.begin(), t.shape.begin() + (t.rank > 0 ? t.rank - 1 : 0)};
}

void require_inputs(const std::string& op, const std::vector<TensorView>& in, std::size_t n) {
    if (in.size() != n)
        throw std::invalid_argument(op + ": expects " + std::to_string(n) + " inputs, got " + std::to_string(in.size()));
}

void require_row_tensor(const std::string& op, const std::string& name, const TensorView& t) {
    if (t.rank < 1)
        throw std::invalid_argument(op + ": input '" + name + "' must have rank >= 1 (the last dimension is the row)");
}

// A nonnegative integer parameter (a block length).
std::size_t count_param(const std::string& op, const Params& p, const std::string& name) {
    const double v = p.get(name, 0.0);
    if (!(v >= 0) || v != std::floor(v))
        throw std::invalid_argument(op + ": parameter '" + name + "' must be a nonnegative integer, is " +
                                    std::to_string(v));
    return static_cast<std::size_t>(v);
}

// Rows of x [..., n] as exact values.
std::vector<std::vector<Real>> rows_of(const TensorView& x) {
    const std::vector<Real> all = read_exact(x);
    const std::size_t n = static_cast<std::size_t>(x.cols());
    std::vector<std::vector<Real>> rows(static_cast<std::size_t>(x.rows()));
    for (std::size_t r = 0; r < rows.size(); ++r) rows[r].assign(all.begin() + r * n, all.begin() + (r + 1) * n);
    return rows;
}

}  // namespace

OpOutputs eval_softmax(const Params&, const std::vector<TensorView>& in) {
    require_inputs("softmax", in, 1);
    require_row_tensor("softmax", "x", in[0]);
    OpOutputs out{{"y"}, {shape_of(in[0])}, {{}}};
    for (const auto& row : rows_of(in[0])) {
        auto r = softmax_row(row);
        out.values[0].insert(out.values[0].end(), r.y.begin(), r.y.end());
    }
    return out;
}

OpOutputs eval_online_softmax(const Params& params, const std::vector<TensorView>& in) {
    require_inputs("online_softmax", in, 1);
    require_row_tensor("online_softmax", "x", in[0]);
    const std::size_t block = count_param("online_softmax", params, "block");
    OpOutputs out{{"y", "m", "lse"}, {shape_of(in[0]), leading_shape(in[0]), leading_shape(in[0])}, {{}, {}, {}}};
    for (const auto& row : rows_of(in[0])) {
        auto r = online_softmax_row(row, block);
        out.values[0].insert(out.values[0].end(), r.y.begin(), r.y.end());
        out.values[1].push_back(r.max);
        out.values[2].push_back(r.lse);
    }
    return out;
}

OpOutputs eval_lse_merge(const Params&, const std::vector<TensorView>& in) {
    const std::string op = "lse_merge";
    require_inputs(op, in, 4);
    const TensorView &oa = in[0], &la = in[1], &ob = in[2], &lb = in[3];
    require_row_tensor(op, "o_a", oa);
    require_rank(op, "lse_a", la, oa.rank - 1);
    for (int d = 0; d + 1 < oa.rank; ++d) require_dim(op, "lse_a", la, d, oa.shape[d], "o_a's leading dimensions");
    require_rank(op, "o_b", ob, oa.rank);
    for (int d = 0; d < oa.rank; ++d) require_dim(op, "o_b", ob, d, oa.shape[d], "the shape of o_a");
    require_rank(op, "lse_b", lb, la.rank);
    for (int d = 0; d < la.rank; ++d) require_dim(op, "lse_b", lb, d, la.shape[d], "the shape of lse_a");

    const auto ra = rows_of(oa), rb = rows_of(ob);
    const auto lsa = read_exact(la), lsb = read_exact(lb);
    OpOutputs out{{"o", "lse"}, {shape_of(oa), shape_of(la)}, {{}, {}}};
    for (std::size_t r = 0; r < ra.size(); ++r) {
        auto m = lse_merge<Real>({ra[r], lsa[r]}, {rb[r], lsb[r]});
        out.values[0].insert(out.values[0].end(), m.o.begin(), m.o.end());
        out.values[1].push_back(m.lse);
    }
    return out;
}

}  // namespace conform::oracle
