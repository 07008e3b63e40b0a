#include "oracle/fp8.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "oracle/exact_dot.hpp"
#include "oracle/tensor_core.hpp"

namespace conform::oracle {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The largest magnitude of each block, NaN for a block holding NaN or +-Inf.
std::vector<double> block_amax(const TensorView& x, const Fp8QuantParams& qp, std::int64_t sr, std::int64_t sc) {
    std::vector<double> amax(static_cast<std::size_t>(sr * sc), 0.0);
    const std::int64_t cols = x.shape[1];
    for (std::int64_t i = 0; i < x.shape[0]; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
            double& m = amax[static_cast<std::size_t>(i / qp.br * sc + j / qp.bc)];
            const double v = std::fabs(x.value(i * cols + j));
            m = std::isfinite(v) ? (std::isnan(m) ? m : std::fmax(m, v)) : kNaN;
        }
    return amax;
}

// The candidate's scale when it is usable (staged call: positive, finite),
// else the defined one: codes are judged given the scale the kernel chose.
double judging_scale(const std::vector<TensorView>& in, std::size_t b, double defined) {
    if (in.size() != 3) return defined;
    const double s = in[2].value(static_cast<std::int64_t>(b));
    return s > 0 && std::isfinite(s) ? s : defined;
}

}  // namespace

double fp8_code_value(double x, double s, const Fp8QuantParams& qp) {
    const Overflow o = qp.saturate ? Overflow::saturate : Overflow::nonsaturating;
    return decode(qp.format, encode(qp.format, x / s, o));
}

OpOutputs eval_fp8_quantize(const Params& params, const std::vector<TensorView>& in) {
    const std::string op = "fp8_quantize";
    if (in.size() != 1 && in.size() != 3)
        throw std::invalid_argument(op + ": expects x (and, staged, the candidate's q and scale)");
    require_rank(op, "x", in[0], 2);
    const Fp8QuantParams qp = fp8_quant_params(params, in.size() == 3 ? std::optional(in[1].format) : std::nullopt);
    const std::int64_t rows = in[0].shape[0], cols = in[0].shape[1];
    const std::int64_t sr = ceil_div(rows, qp.br), sc = ceil_div(cols, qp.bc);
    if (in.size() == 3) {
        require_dim(op, "q", in[1], 0, rows, "R of x");
        require_dim(op, "scale", in[2], 0, sr, "ceil(R / br)");
        require_dim(op, "scale", in[2], 1, sc, "ceil(C / bc)");
    }
    const std::vector<double> amax = block_amax(in[0], qp, sr, sc);
    OpOutputs out{{"q", "scale"}, {{rows, cols}, {sr, sc}}, {{}, {}}};
    for (const double a : amax) out.values[1].push_back(from_double(fp8_block_scale(a, qp)));
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
            const auto b = static_cast<std::size_t>(i / qp.br * sc + j / qp.bc);
            const double s = fp8_block_scale(amax[b], qp);
            // A non-finite block has no scale: every code NaN, whatever the candidate stored.
            const double q = std::isnan(s) ? kNaN : fp8_code_value(in[0].value(i * cols + j), judging_scale(in, b, s), qp);
            out.values[0].push_back(from_double(q));
        }
    return out;
}

std::vector<std::vector<double>> fp8_quantize_bound(const Params&, const std::vector<TensorView>&,
                                                    const std::vector<std::vector<double>>& exact, Format,
                                                    const std::vector<Format>&) {
    return {std::vector<double>(exact.at(0).size(), 0.0), std::vector<double>(exact.at(1).size(), 0.0)};
}

OpOutputs eval_fp8_gemm(const Params& params, const std::vector<TensorView>& in) {
    const Fp8GemmDims d = fp8_gemm_dims(in, params);
    const std::int64_t nb = ceil_div(d.k, d.block), sbn = ceil_div(d.n, d.block);
    OpOutputs out{{"y"}, {{d.m, d.n}}, {{}}};
    ExactDot full(d.block), tail(d.k - (nb - 1) * d.block);
    std::vector<Real> terms(static_cast<std::size_t>(nb));
    std::vector<mpfr_ptr> ptrs(terms.size());
    const std::vector<double> a = decoded_values(in[0]), w = decoded_values(in[2]);
    for (std::int64_t i = 0; i < d.m; ++i)
        for (std::int64_t j = 0; j < d.n; ++j) {
            // Block sums exact (IEEE specials), then times both scales: the
            // formula's own grouping, so 0 * inf lands where a kernel meets it.
            for (std::int64_t b = 0; b < nb; ++b) {
                const std::int64_t k0 = b * d.block, len = std::min(d.block, d.k - k0);
                ExactDot& dot = len == d.block ? full : tail;
                for (std::int64_t t = 0; t < len; ++t)
                    dot.set(static_cast<std::size_t>(t), a[static_cast<std::size_t>(i * d.k + k0 + t)],
                            w[static_cast<std::size_t>((k0 + t) * d.n + j)]);
                Real& term = terms[static_cast<std::size_t>(b)];
                term = dot.sum() * from_double(in[1].value(i * nb + b)) * from_double(in[3].value(b * sbn + j / d.block));
                ptrs[static_cast<std::size_t>(b)] = term.backend().data();
            }
            Real y;
            mpfr_sum(y.backend().data(), ptrs.data(), static_cast<unsigned long>(ptrs.size()), MPFR_RNDN);
            out.values[0].push_back(y);
        }
    return out;
}

// docs/fp8.md, "Error budget".  A term a_ik b_kj reaches the block sum
// through at most blk roundings of u_b (its product's and the additions
// after it: any order, any tree); the block sum then meets two scale
// products and at most nb additions in acc, all of unit roundoff u:
//   |y^ - y| <= sum_kb |sa sb| (gamma_blk(u_b) S_kb (1 + gamma_{nb+2}(u)) + gamma_{nb+2}(u) |P_kb|)
//            <= ((1 + gamma_blk(u_b)) (1 + gamma_{nb+2}(u)) - 1) W.
// Nonzero code products are at least 2^-32 and block sums below 2^39:
// nothing underflows or overflows inside a block.  Each scale product may underflow: at most
// eta/2 absolutely, then multiplied by the other factor (at most c) or, for
// the product s_a s_b formed first, by the block sum (|P| <= 2 S_kb).  Where
// a promotion step itself may overflow (P s_a, s_a s_b) or an infinite scale
// meet a product that underflows to 0, the element is undefined.  A kernel
// declaring mma_k forms each block sum on tensor cores: gamma_blk(u_b) is
// then the block_fma_chain's relative error, plus its absolute part per
// block times the block's scales.
std::vector<std::vector<double>> fp8_gemm_bound(const Params& params, const std::vector<TensorView>& in,
                                                const std::vector<std::vector<double>>& exact, Format acc,
                                                const std::vector<Format>& out) {
    const Fp8GemmDims d = fp8_gemm_dims(in, params);
    const std::int64_t nb = ceil_div(d.k, d.block), sbn = ceil_div(d.n, d.block);
    const double u = unit_roundoff(acc), eta = ulp_at(acc, 0.0);
    const double u_b = std::ldexp(1.0, -static_cast<int>(params.get("declared.block_bits", info(acc).precision)));
    const double blk = static_cast<double>(std::min(d.block, d.k)), outer = static_cast<double>(nb + 2);
    // Block sums on tensor cores (declared mma_k): the chain of ceil(blk /
    // mma_k) block FMAs, in both tiers (docs/fp8.md, "Tensor cores").
    const int mma_k = static_cast<int>(params.get("declared.mma_k", 0));
    const int emin = block_fma_emin(Format::fp16);  // codes widened to FP16 or BF16: FP16's, the larger
    const ChainError chain = block_fma_chain(std::max(mma_k, 1), blk, std::ceil(blk / std::max(mma_k, 1)), emin);
    const double g_blk = mma_k > 0 ? chain.rel : gamma(blk, u_b), g_blk_rig = mma_k > 0 ? chain.rel : gamma_rigorous(blk, u_b);
    const double rel = (1 + g_blk) * (1 + gamma(outer, u)) - 1;
    const double rel_rig = (1 + g_blk_rig) * (1 + gamma_rigorous(outer, u)) - 1;
    const bool narrower = info(out.at(0)).precision < info(acc).precision;
    std::vector<double> bound(static_cast<std::size_t>(d.m * d.n));
    for (std::int64_t i = 0; i < d.m; ++i)
        for (std::int64_t j = 0; j < d.n; ++j) {
            double w = 0, c = 1, sums = 0;  // the finite terms' magnitudes, the largest scale, sum of block sums
            double chain_abs = 0;           // tensor cores: the block chains' absolute parts, scaled
            bool fragile = false;           // the promotion itself may overflow or underflow (docs/fp8.md)
            for (std::int64_t b = 0; b < nb; ++b) {
                const double sa = std::fabs(in[1].value(i * nb + b)), sb = std::fabs(in[3].value(b * sbn + j / d.block));
                c = std::fmax(c, std::fmax(sa, sb));
                double s = 0, m = 0;  // sum |a b| over the block; its largest finite code of a's row and b's column
                for (std::int64_t k = b * d.block; k < std::min(d.k, (b + 1) * d.block); ++k) {
                    const double x = in[0].value(i * d.k + k), z = in[2].value(k * d.n + j);
                    s += std::fabs(x * z);
                    for (double v : {x, z})
                        if (std::isfinite(v)) m = std::fmax(m, std::fabs(v));
                }
                if (std::isfinite(s * sa * sb)) w += s * sa * sb;
                if (mma_k > 0 && std::isfinite(sa * sb))
                    chain_abs += (chain.abs + chain.sub * chain_operand_bound(m, emin)) * sa * sb;
                if (std::isfinite(s)) sums += s;
                // P s_a, P s_b or s_a s_b past FP32's range while y is not, or
                // an infinite scale times a block sum the other scale
                // underflows (Inf * 0: NaN where y is Inf).
                const double hi = s * (1 + gamma_rigorous(blk, u_b)) * std::fmax(sa, sb);
                if ((std::isfinite(sa) && std::isfinite(sb) && (hi >= max_finite(acc) || sa * sb >= max_finite(acc))) ||
                    ((std::isinf(sa) || std::isinf(sb)) && s > 0 && s * std::fmin(sa, sb) < 0x1p-126))
                    fragile = true;
            }
            const auto e = static_cast<std::size_t>(i * d.n + j);
            // Subnormal roundings: each promotion's scale product (or product
            // by one scale) errs by eta/2, times the block sum (up to |P| <=
            // S_b (1 + gamma)) or the other scale.
            const double y = exact.at(0).at(e),
                         err = rel * w + (1 + gamma_rigorous(outer, u)) * chain_abs + static_cast<double>(nb) * eta * (1 + c) +
                               eta * sums * 2;
            if (std::isnan(y)) bound[e] = kNaN;  // NaN in any order
            else if (fragile || w * (1 + rel_rig) >= max_finite(acc)) bound[e] = kUndefined;
            else if (!std::isfinite(y)) bound[e] = kNaN;  // an infinite term: compare classes
            else bound[e] = err + (narrower ? 0.5 * ulp_at(out[0], std::fabs(y) + err) : 0.0);
        }
    return {bound};
}

}  // namespace conform::oracle
