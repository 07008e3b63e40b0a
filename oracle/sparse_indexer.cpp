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
    const std::vector<double> q = decoded_values(in[0]), k = decoded_values(in[1]);
    for (std::int64_t t = 0; t < d.lq; ++t)
        for (std::int64_t s = 0; s < d.n; ++s) {
            Real sum(0);
            for (std::int64_t h = 0; h < d.h; ++h) {
                for (std::int64_t i = 0; i < d.c; ++i)
                    dot.set(static_cast<std::size_t>(i), q[static_cast<std::size_t>((t * d.h + h) * d.c + i)],
                            k[static_cast<std::size_t>(s * d.c + i)]);
                Real r = dot.sum();
                if (!isnan(r) && r < 0) r = 0;  // ReLU; NaN stays NaN
                sum += from_double(in[2].value(t * d.h + h)) * r;
            }
            out.values[0].push_back(sum);
        }
    return out;
}

// Per head: the FP32 dot d^ errs by eps = dot_budget(a, c) (a = sum |q k|
// over the finite products); ReLU is 1-Lipschitz, so ReLU(d^) errs by eps
// too; w ReLU(d^) rounds once (u relative, eta/2 below FP32's normal range).
// The head sum of H such terms in any order: gamma_H times their magnitudes
// plus the propagated errors.  |r - ReLU(d)| <= c 2^-52 a covers the double
// r the bound itself uses; the FP32 output (or a narrower one) rounds once
// more.  Special values: a head whose exact dot is -inf contributes exactly
// 0 (its finite products must not overflow first); a non-finite exact score
// is compared by class (NaN bound); an infinite weight on a dot within eps
// of 0 is undefined (inf * 0 = NaN or inf * tiny = inf, by the dot's last bit).
namespace {

// One head's dot product q[t, h] . k[s] in double: its finite products'
// sum and magnitude, and the sum of its infinite (or NaN) products.
struct HeadDot {
    double dd = 0, a = 0, special = 0;
};
HeadDot head_dot(const std::vector<TensorView>& in, const IndexerDims& d, std::int64_t t, std::int64_t h, std::int64_t s) {
    HeadDot r;
    for (std::int64_t i = 0; i < d.c; ++i) {
        const double p = in[0].value((t * d.h + h) * d.c + i) * in[1].value(s * d.c + i);
        if (std::isfinite(p)) r.dd += p, r.a += std::fabs(p);
        else r.special += p;
    }
    return r;
}

double score_bound(const std::vector<TensorView>& in, const IndexerDims& d, std::int64_t t, std::int64_t s, double exact,
                   Format acc, Format out) {
    const double u = std::max(unit_roundoff(acc), kIndexU);
    double prop = 0, mag = 0;
    bool undefined = false;
    for (std::int64_t h = 0; h < d.h; ++h) {
        const HeadDot hd = head_dot(in, d, t, h, s);
        const DotBudget db = dot_budget(hd.a, d.c, acc);
        undefined = undefined || db.may_overflow;  // the finite products may overflow before an infinite one joins
        const double w = std::fabs(in[2].value(t * d.h + h)), eps = db.err + static_cast<double>(d.c) * 0x1p-52 * hd.a;
        // An infinite weight on a dot within eps of 0: inf * 0 = NaN or inf * tiny = inf, by the dot's last bit.
        if (std::isinf(w) && hd.special == 0 && std::fabs(hd.dd) <= eps) undefined = true;
        if (hd.special != 0 || !std::isfinite(w)) continue;  // -inf: ReLU gives exactly 0; the rest makes the score non-finite
        const double r = std::max(hd.dd, 0.0) + eps;  // >= the kernel's and the exact ReLU
        prop += w * eps + u * w * r + kEta / 2;
        mag += w * r * (1 + u) + kEta / 2;
    }
    const DotBudget sum = dot_budget(mag, d.h, acc);
    if (undefined || sum.may_overflow) return kUndefined;
    if (!std::isfinite(exact)) return kIndexNaN;  // compared by class
    double e = prop + sum.err;
    if (info(out).precision < info(acc).precision) e += 0.5 * ulp_at(out, std::fabs(exact) + e);
    return e;
}

}  // namespace

std::vector<std::vector<double>> lightning_indexer_bound(const Params&, const std::vector<TensorView>& in,
                                                         const std::vector<std::vector<double>>& exact, Format acc,
                                                         const std::vector<Format>& out) {
    const IndexerDims d = indexer_dims(in);
    std::vector<double> b(static_cast<std::size_t>(d.lq * d.n));
    for (std::int64_t t = 0; t < d.lq; ++t)
        for (std::int64_t s = 0; s < d.n; ++s) {
            const std::size_t at = static_cast<std::size_t>(t * d.n + s);
            b[at] = score_bound(in, d, t, s, exact.at(0).at(at), acc, out.at(0));
        }
    return {b};
}

}  // namespace conform::oracle
