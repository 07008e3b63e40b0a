// INT8 projections of the block stack (model/int8_steps.hpp).
#include "model/int8_steps.hpp"

#include <cmath>
#include <stdexcept>

#include "model/layout.hpp"
#include "oracle/int8.hpp"

namespace conform::model {
namespace {

using oracle::QuantAxis;

// W [N, K] as W^T [K, N] values: output channel n is column n, the layout of
// int8_gemm's b (exact copies).
std::vector<double> transposed(const std::vector<double>& w, std::int64_t n, std::int64_t k) {
    std::vector<double> t(w.size());
    for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < k; ++j) t[static_cast<std::size_t>(j * n + i)] = w[static_cast<std::size_t>(i * k + j)];
    return t;
}

// The kernel of `op` taking `in` and giving `out` (the simd one when there is one).
const KernelInfo* int8_kernel(const std::string& op, Format in, Format out) {
    const KernelInfo* best = nullptr;
    for (const KernelInfo* k : builtin_registry().select(op, Role::kernel))
        if (k->in == in && k->out == out && (!best || k->variant == "simd")) best = k;
    if (!best) throw std::logic_error("run_int8_matmul: no built-in " + op + " kernel " + name(in) + " -> " + name(out));
    return best;
}

// The registry's quantize kernel on x [rows, cols] along `axis`: codes, and
// one scale per group (the kernel stores each element's group scale).
struct Quantized {
    Tensor q;
    Tensor scales;  // [rows] per token, [cols] per channel, FP32
};
Quantized quantized(const TensorView& x, QuantAxis axis) {
    const KernelInfo* k = int8_kernel("quantize", x.format, Format::int8);
    const std::vector<Tensor> out = run_kernel(*k, Params({{"axis", static_cast<double>(axis)}}), {x});
    const std::int64_t rows = x.shape[0], cols = x.shape[1], n = axis == QuantAxis::token ? rows : cols;
    Tensor s(Format::fp32, {n});
    for (std::int64_t g = 0; g < n; ++g) s.set_value(g, out.at(1).value(axis == QuantAxis::token ? g * cols : g));
    return {out.at(0), std::move(s)};
}

}  // namespace

Values eval_int8_matmul(const Values& x, const Values& w) {
    const std::int64_t T = x.shape.at(0), K = x.shape.at(1), N = w.shape.at(0);
    if (w.shape.at(1) != K) throw std::invalid_argument("int8 matmul: weight shape does not match the input width");
    const std::vector<double> sx = oracle::quant_scales(x.v, T, K, QuantAxis::token);
    const std::vector<double> wt = transposed(w.v, N, K);
    const std::vector<double> sw = oracle::quant_scales(wt, K, N, QuantAxis::channel);
    const auto acc = oracle::int8_matmul(oracle::quantize(x.v, T, K, QuantAxis::token, sx),
                                         oracle::quantize(wt, K, N, QuantAxis::channel, sw), T, K, N);
    const std::vector<oracle::Real> y = oracle::int8_dequant_outer(acc, T, N, sx, sw);
    Values out{{T, N}, std::vector<double>(y.size())};
    for (std::size_t i = 0; i < y.size(); ++i) out.v[i] = oracle::to_double(y[i]);
    return out;
}

Tensor run_int8_matmul(const TensorView& x, const TensorView& w, Format out, const KernelInfo* gemm) {
    const std::int64_t N = w.shape[0], K = w.shape[1];
    Tensor wt(w.format, {K, N});
    for (std::int64_t i = 0; i < N; ++i)
        for (std::int64_t j = 0; j < K; ++j) wt.set_bits(j * N + i, w.bits(i * K + j));
    const Quantized a = quantized(x, QuantAxis::token), b = quantized(wt.view(), QuantAxis::channel);
    if (!gemm) gemm = int8_kernel("int8_gemm", Format::int8, Format::fp32);
    const std::vector<Tensor> y = run_kernel(*gemm, Params{}, {a.q.view(), b.q.view(), a.scales.view(), b.scales.view()});
    Tensor r(out, shape_of(y.at(1).view()));
    for (std::int64_t i = 0; i < r.numel(); ++i) r.set_value(i, y.at(1).value(i));  // one rounding into out
    return r;
}

StepBound int8_matmul_bound(const Values& ref, Format out) {
    constexpr double u = 0x1p-24, eta32 = 0x1p-149;
    const bool rounds = info(out).precision < info(Format::fp32).precision;
    StepBound b{std::vector<double>(ref.v.size()), std::vector<double>(ref.v.size())};
    for (std::size_t i = 0; i < ref.v.size(); ++i) {
        const double y = std::fabs(ref.v[i]);
        if (!std::isfinite(y)) continue;  // special values: judged by class
        const double pre = y * ((1 + u) * (1 + u) * (1 + u) - 1) + 2 * eta32;
        b.budget[i] = pre + (rounds ? 0.5 * ulp_at(out, y + pre) : 0.0);
        b.oracle[i] = y * 0x1p-53;  // the exact product rounded once to double
    }
    return b;
}

}  // namespace conform::model
