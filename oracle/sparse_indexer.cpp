// The lightning indexer (docs/sparse.md, "lightning_indexer"): oracle and
// budget.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "numerics/shape_check.hpp"
#include "oracle/bound.hpp"
#include "oracle/exact_dot.hpp"
#include "oracle/matmul.hpp"
#include "oracle/sparse.hpp"

namespace conform::oracle {
namespace {

constexpr double kIndexU = 0x1p-24;  // FP32's unit roundoff: the kernels' arithmetic
constexpr double kIndexNaN = std::numeric_limits<double>::quiet_NaN();

struct IndexerDims {
    std::int64_t lq, h, c, n;
};

IndexerDims indexer_dims(const std::vector<TensorView>& in) {
    const std::string op = "lightning_indexer";
    if (in.size() != 3) throw std::invalid_argument(op + ": expects q [Lq, H, c], k [N, c], w [Lq, H]");
    require_rank(op, "q", in[0], 3);
    require_rank(op, "k", in[1], 2);
    require_rank(op, "w", in[2], 2);
    const IndexerDims d{in[0].shape[0], in[0].shape[1], in[0].shape[2], in[1].shape[0]};
    require_dim(op, "k", in[1], 1, d.c, "c of q");
    require_dim(op, "w", in[2], 0, d.lq, "Lq of q");
    require_dim(op, "w", in[2], 1, d.h, "H of q");
    return d;
}

}  // namespace

OpOutputs eval_lightning_indexer(const Params&, const std::vector<TensorView>& in) {
    const IndexerDims d = indexer_dims(in);
    OpOutputs out{{"scores"}, {{d.lq, d.n}}, {{}}};
    ExactDot dot(d.c);
    for (std::int64_t t = 0; t < d.lq; ++t)
        for (std::int64_t s = 0; s < d.n; ++s) {
            Real sum(0);
            for (std::int64_t h = 0; h < d.h; ++h) {
                for (std::int64_t i = 0; i < d.c; ++i)
                    dot.set(static_cast<std::size_t>(i), in[0].value((t * d.h + h) * d.c + i), in[1].value(s * d.c + i));
                Real r = dot.sum();
                if (!isnan(r) && r < 0) r = 0;  // ReLU; NaN stays NaN
                sum += from_double(in[2].value(t * d.h + h)) * r;
            }
            out.values[0].push_back(sum);
        }
    return out;
}

// Per head: the FP32 dot d^ errs by eps = dot_budget(a, c) (a = sum |q k|);
// ReLU is 1-Lipschitz, so ReLU(d^) errs by eps too; w ReLU(d^) rounds once
// (u relative, eta/2 below FP32's normal range).  The head sum of H such
// terms in any order: gamma_H times their magnitudes plus the propagated
// errors.  |r - ReLU(d)| <= c 2^-52 a covers the double r the bound itself
// uses; the FP32 output (or a narrower one) rounds once more.
std::vector<std::vector<double>> lightning_indexer_bound(const Params&, const std::vector<TensorView>& in,
                                                         const std::vector<std::vector<double>>& exact, Format acc,
                                                         const std::vector<Format>& out) {
    const IndexerDims d = indexer_dims(in);
    const double u = std::max(unit_roundoff(acc), kIndexU);
    std::vector<double> b(static_cast<std::size_t>(d.lq * d.n));
    for (std::int64_t t = 0; t < d.lq; ++t)
        for (std::int64_t s = 0; s < d.n; ++s) {
            const std::size_t at = static_cast<std::size_t>(t * d.n + s);
            if (std::isnan(exact.at(0).at(at))) {
                b[at] = kIndexNaN;
                continue;
            }
            double prop = 0, mag = 0;
            bool overflow = false;
            for (std::int64_t h = 0; h < d.h; ++h) {
                double dd = 0, a = 0;
                for (std::int64_t i = 0; i < d.c; ++i) {
                    const double p = in[0].value((t * d.h + h) * d.c + i) * in[1].value(s * d.c + i);
                    dd += p, a += std::fabs(p);
                }
                const DotBudget db = dot_budget(a, d.c, acc);
                overflow = overflow || db.may_overflow || !std::isfinite(a);
                const double w = std::fabs(in[2].value(t * d.h + h));
                const double eps = db.err + static_cast<double>(d.c) * 0x1p-52 * a;
                const double r = std::max(dd, 0.0) + eps;  // >= the kernel's and the exact ReLU
                prop += w * eps + u * w * r + kEta / 2;
                mag += w * r * (1 + u) + kEta / 2;
            }
            const DotBudget sum = dot_budget(mag, d.h, acc);
            overflow = overflow || sum.may_overflow;
            double e = prop + sum.err;
            if (info(out.at(0)).precision < info(acc).precision) e += 0.5 * ulp_at(out[0], std::fabs(exact[0][at]) + e);
            b[at] = overflow ? kUndefined : e;
        }
    return {b};
}

}  // namespace conform::oracle
