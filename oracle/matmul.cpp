#include "oracle/matmul.hpp"

#include "oracle/exact_dot.hpp"
#include "oracle/tensor_core.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace conform::oracle {
namespace {

struct Dims {
    std::int64_t m, k, n;
};

Dims check(const std::vector<TensorView>& in) {
    const std::string op = "matmul";
    if (in.size() != 2) throw std::invalid_argument(op + ": expects a [M, K] and b [K, N]");
    require_rank(op, "a", in[0], 2);
    require_rank(op, "b", in[1], 2);
    require_dim(op, "b", in[1], 0, in[0].shape[1], "K of a");
    return {in[0].shape[0], in[0].shape[1], in[1].shape[1]};
}

}  // namespace

OpOutputs eval_matmul(const Params&, const std::vector<TensorView>& in) {
    const Dims d = check(in);
    OpOutputs out{{"y"}, {{d.m, d.n}}, {{}}};
    out.values[0].reserve(static_cast<std::size_t>(d.m * d.n));
    ExactDot dot(d.k);
    const std::vector<double> a = decoded_values(in[0]), b = decoded_values(in[1]);
    for (std::int64_t i = 0; i < d.m; ++i)
        for (std::int64_t j = 0; j < d.n; ++j) {
            for (std::int64_t k = 0; k < d.k; ++k)
                dot.set(static_cast<std::size_t>(k), a[static_cast<std::size_t>(i * d.k + k)],
                        b[static_cast<std::size_t>(k * d.n + j)]);
            out.values[0].push_back(dot.sum());
        }
    return out;
}

// docs/matmul.md, "Error budget".  Each term a_ik b_kj reaches y_ij through
// at most K roundings in acc (its product's, or the FMA that adds it, and
// the additions after it), whatever the order or blocking: |err| <=
// gamma_K S_ij.  A product that underflows errs by at most eta/2 absolutely
// beyond that (K of them).  A narrower output adds one rounding of the
// computed value, |y| + err at most.  The analysis holds while no partial
// sum overflows: every one is at most S (1 + gamma_K) in magnitude, so an
// element whose finite terms reach acc's overflow threshold that way is
// left undefined (an FP32 accumulator may overflow there in some order,
// whatever the exact sum): not judged, and counted.
DotBudget dot_budget(double s, std::int64_t k, Format acc) {
    const double u = unit_roundoff(acc), kd = static_cast<double>(k);
    const double half_eta = min_subnormal(acc) / 2;
    return {gamma(kd, u) * s + kd * half_eta, s * (1 + gamma_rigorous(kd, u)) >= max_finite(acc)};
}

namespace {

// A kernel declaring mma_k accumulates y_ij on tensor cores: a chain of
// ceil(K / mma_k) block FMAs of mma_k products (the last one partial), each
// block's c the previous d, from c = +0 (docs/matmul.md, "Tensor cores").
// Its error is block_fma_chain's, in both tiers (truncations lean toward
// zero): rel S_ij + abs + sub M_ij, M_ij the largest |a_ik|, |b_kj| of the
// chain (at least 2^emin: what a subnormal factor's exponent field can raise
// a block's exponent to).

DotBudget tensor_core_budget(double s, double largest, std::int64_t k, int mma_k, Format in) {
    const int emin = block_fma_emin(in);
    const double n = std::ceil(static_cast<double>(k) / mma_k);
    const ChainError ce = block_fma_chain(mma_k, static_cast<double>(k), n, emin);
    return {ce.rel * s + ce.abs + ce.sub * chain_operand_bound(largest, emin),
            s * (1 + ce.rel) >= max_finite(Format::fp32)};
}

// The largest finite |x| of each row (by_row) or column of a [rows, cols] matrix.
std::vector<double> largest_finite(const TensorView& x, std::int64_t rows, std::int64_t cols, bool by_row) {
    std::vector<double> m(static_cast<std::size_t>(by_row ? rows : cols), 0.0);
    for (std::int64_t i = 0; i < rows * cols; ++i) {
        const double v = std::fabs(x.value(i));
        double& slot = m[static_cast<std::size_t>(by_row ? i / cols : i % cols)];
        if (std::isfinite(v)) slot = std::max(slot, v);
    }
    return m;
}

}  // namespace

std::vector<std::vector<double>> matmul_bound(const Params& params, const std::vector<TensorView>& in,
                                              const std::vector<std::vector<double>>& exact, Format acc,
                                              const std::vector<Format>& out) {
    const Dims d = check(in);
    const bool narrower = info(out.at(0)).precision < info(acc).precision;
    const int mma_k = static_cast<int>(params.get("declared.mma_k", 0));
    std::vector<double> row_max, col_max;
    if (mma_k > 0) row_max = largest_finite(in[0], d.m, d.k, true), col_max = largest_finite(in[1], d.k, d.n, false);
    std::vector<double> b(static_cast<std::size_t>(d.m * d.n));
    for (std::int64_t i = 0; i < d.m; ++i)
        for (std::int64_t j = 0; j < d.n; ++j) {
            const std::size_t e = static_cast<std::size_t>(i * d.n + j);
            const double y = exact.at(0).at(e);
            double s = 0;  // the finite terms' magnitudes
            for (std::int64_t k = 0; k < d.k; ++k) {
                const double t = std::fabs(in[0].value(i * d.k + k) * in[1].value(k * d.n + j));
                if (std::isfinite(t)) s += t;
            }
            const DotBudget db = mma_k > 0 ? tensor_core_budget(s, std::max(row_max[static_cast<std::size_t>(i)],
                                                                            col_max[static_cast<std::size_t>(j)]),
                                                                   d.k, mma_k, in[0].format)
                                           : dot_budget(s, d.k, acc);
            if (std::isnan(y)) b[e] = std::numeric_limits<double>::quiet_NaN();  // NaN in any order
            else if (db.may_overflow) b[e] = kUndefined;
            else if (!std::isfinite(y)) b[e] = std::numeric_limits<double>::quiet_NaN();  // an infinite term
            else b[e] = db.err + (narrower ? 0.5 * ulp_at(out[0], std::fabs(y) + db.err) : 0.0);
        }
    return {b};
}

}  // namespace conform::oracle
