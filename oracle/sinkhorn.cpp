// Tensor plumbing of the sinkhorn evaluator: read each [n, n] matrix of the
// batch exactly, run the exp-domain iteration of sinkhorn.hpp, lay B out
// row-major.
#include "oracle/sinkhorn.hpp"

#include <cmath>
#include <string>

namespace conform::oracle {

int sinkhorn_iters(const Params& params) {
    const double v = params.get("iters", 20.0);
    if (!(v >= 1) || v != std::floor(v) || v > 1e6)
        throw std::invalid_argument("sinkhorn: parameter 'iters' must be an integer in [1, 1e6], is " +
                                    std::to_string(v));
    return static_cast<int>(v);
}

double sinkhorn_eps(const Params& params) {
    const double v = params.get("eps", 0.0);
    if (!(v >= 0) || !std::isfinite(v))
        throw std::invalid_argument("sinkhorn: parameter 'eps' must be finite and >= 0, is " + std::to_string(v));
    // The kernels guard with eps rounded to FP32: a value that rounds to 0 (or
    // overflows) there would be guarded in the bound and unguarded in the
    // kernel (which then takes the log domain on wide matrices).
    const float f = static_cast<float>(v);
    if (v > 0 && (f == 0 || !std::isfinite(f)))
        throw std::invalid_argument("sinkhorn: parameter 'eps' must be 0 or representable in FP32 (>= 2^-149, <= FLT_MAX), is " +
                                    std::to_string(v));
    return v;
}

OpOutputs eval_sinkhorn(const Params& params, const std::vector<TensorView>& in) {
    const std::string op = "sinkhorn";
    if (in.size() != 1) throw std::invalid_argument(op + ": expects one input (logits), got " + std::to_string(in.size()));
    const TensorView& l = in[0];
    if (l.rank != 2 && l.rank != 3)
        throw std::invalid_argument(op + ": input 'logits' must have rank 2 ([n, n]) or 3 ([batch, n, n]), has " +
                                    std::to_string(l.rank));
    const std::int64_t n = l.shape[l.rank - 1];
    require_dim(op, "logits", l, l.rank - 2, n, "square matrices");
    const int iters = sinkhorn_iters(params);
    const double eps = sinkhorn_eps(params);
    const std::vector<Real> all = read_exact(l);
    const std::int64_t batch = n ? l.numel() / (n * n) : 0;
    OpOutputs out{{"b"}, {{l.shape.begin(), l.shape.begin() + l.rank}}, {{}}};
    out.values[0].reserve(all.size());
    for (std::int64_t m = 0; m < batch; ++m) {
        Mat<Real> logits(n, n);
        std::copy(all.begin() + m * n * n, all.begin() + (m + 1) * n * n, logits.a.begin());
        const Mat<Real> b = sinkhorn(logits, iters, {}, eps);
        out.values[0].insert(out.values[0].end(), b.a.begin(), b.a.end());
    }
    return out;
}

}  // namespace conform::oracle
