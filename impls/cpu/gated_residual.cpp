// CPU kernels of gated_residual (docs/residual.md, "Kernels"):
//   cpu.scalar.gated_residual.<fmt>  FP32 arithmetic: per token z_i = (g_i H_i)
//                                    (1 / r_i), y = z A and l = y B as
//                                    left-to-right dots, gate = sigmoid(l)
//                                    ((l >= 0 ? 1 : t) / (1 + t), t = e^-|l|, as
//                                    hc_residual's), h = sum_i gate_i z_i
//   cpu.naive.gated_residual.<fmt>   baseline: every intermediate rounded to
//                                    the storage format
#include "impls/cpu/gated_residual.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "impls/cpu/attn_res.hpp"  // widen_residual, residual_inv_rms
#include "impls/cpu/elementwise.hpp"

namespace conform::cpu {

GatedGeometry gated_geometry(const KernelCall& c) {
    if (c.in.size() != 4 || c.out.size() != 2)
        throw std::invalid_argument("gated_residual kernel: expects streams, g, A, B -> h, gate");
    const TensorView& x = c.in[0];
    if (x.rank != 3 || x.shape[0] < 1 || c.in[2].rank != 2)
        throw std::invalid_argument("gated_residual kernel: streams must be [n >= 1, T, d], A [n d, r]");
    GatedGeometry g{x.shape[0], x.shape[1], x.shape[2], c.in[2].shape[1]};
    const std::int64_t nd = g.n * g.d;
    if (c.in[1].numel() != nd || c.in[2].numel() != nd * g.rank || c.in[3].numel() != nd * g.rank ||
        c.out[0].numel() != g.tokens * g.d || c.out[1].numel() != g.tokens * nd)
        throw std::invalid_argument("gated_residual kernel: g, A, B, h and gate must match the streams");
    return g;
}

namespace {

float gated_sigmoid(float l) {
    const float t = std::exp(-std::fabs(l));
    return (std::signbit(l) ? t : 1.0f) / (1.0f + t);
}

template <Format F>
void gated_scalar(const KernelCall& c, const GatedFlaws& fl = {}) {
    const GatedGeometry g = gated_geometry(c);
    const double eps = c.params.get("eps", 1e-6);
    const std::vector<float> H = widen_residual(c.in[0]), nw = widen_residual(c.in[1]), A = widen_residual(c.in[2]),
                             B = widen_residual(c.in[3]);
    const auto n = static_cast<std::size_t>(g.n), d = static_cast<std::size_t>(g.d), r = static_cast<std::size_t>(g.rank),
               nd = n * d;
    std::vector<float> raw(nd), z(nd), y(r), w(nd);
    for (std::int64_t t = 0; t < g.tokens; ++t) {
        for (std::size_t i = 0; i < n; ++i) {
            const float* x = H.data() + (static_cast<std::int64_t>(i) * g.tokens + t) * g.d;
            const float inv = residual_inv_rms(x, g.d, eps);
            for (std::size_t k = 0; k < d; ++k) raw[i * d + k] = x[k], z[i * d + k] = (nw[i * d + k] * x[k]) * inv;
        }
        const std::vector<float>& gin = fl.gate_raw ? raw : z;
        for (std::size_t j = 0; j < r; ++j) {
            float acc = 0;
            for (std::size_t m = 0; m < nd; ++m) acc = m == 0 ? gin[0] * A[j] : acc + gin[m] * A[m * r + j];
            y[j] = acc;
        }
        for (std::size_t m = 0; m < nd; ++m) {
            float acc = 0;
            for (std::size_t j = 0; j < r; ++j) acc = j == 0 ? y[0] * B[m] : acc + y[j] * B[j * nd + m];
            w[m] = fl.softmax ? acc : gated_sigmoid(acc);
        }
        if (fl.softmax)  // over the streams, per channel
            for (std::size_t k = 0; k < d; ++k) {
                float mx = w[k], s = 0;
                for (std::size_t i = 1; i < n; ++i) mx = std::max(mx, w[i * d + k]);
                for (std::size_t i = 0; i < n; ++i) s = s + (w[i * d + k] = std::exp(w[i * d + k] - mx));
                for (std::size_t i = 0; i < n; ++i) w[i * d + k] = w[i * d + k] / s;
            }
        for (std::size_t k = 0; k < d; ++k) {
            float h = 0;
            for (std::size_t i = 0; i < n; ++i) {
                const std::size_t gi = fl.index_shift ? (i + n - 1) % n : i;  // stream i read with stream i-1's gate
                const float p = w[gi * d + k] * (fl.read_raw ? raw : z)[i * d + k];
                h = i == 0 ? p : h + p;
            }
            c.out[0].set_bits(t * g.d + static_cast<std::int64_t>(k), encode(F, static_cast<double>(h)));
        }
        for (std::size_t m = 0; m < nd; ++m)
            c.out[1].set_bits(t * static_cast<std::int64_t>(nd) + static_cast<std::int64_t>(m), encode(F, static_cast<double>(w[m])));
    }
}

// Baseline: the same steps in double, each result rounded to the storage
// format; the plain sigmoid 1 / (1 + e^-l).
template <Format F>
void gated_naive(const KernelCall& c) {
    const GatedGeometry g = gated_geometry(c);
    auto fmt = [](double x) { return decode(F, encode(F, x)); };
    const double eps = fmt(c.params.get("eps", 1e-6));
    const std::int64_t n = g.n, d = g.d, r = g.rank, nd = n * d;
    const TensorView &H = c.in[0], &nw = c.in[1], &A = c.in[2], &B = c.in[3];
    std::vector<double> z(static_cast<std::size_t>(nd)), y(static_cast<std::size_t>(r)), w(static_cast<std::size_t>(nd));
    for (std::int64_t t = 0; t < g.tokens; ++t) {
        for (std::int64_t i = 0; i < n; ++i) {
            const std::int64_t row = (i * g.tokens + t) * d;
            double ss = 0;
            for (std::int64_t k = 0; k < d; ++k) ss = fmt(ss + fmt(H.value(row + k) * H.value(row + k)));
            const double inv = fmt(1 / fmt(std::sqrt(fmt(fmt(ss / static_cast<double>(d)) + eps))));
            for (std::int64_t k = 0; k < d; ++k)
                z[static_cast<std::size_t>(i * d + k)] = fmt(fmt(nw.value(i * d + k) * H.value(row + k)) * inv);
        }
        for (std::int64_t j = 0; j < r; ++j) {
            double acc = 0;
            for (std::int64_t m = 0; m < nd; ++m) acc = fmt(acc + fmt(z[static_cast<std::size_t>(m)] * A.value(m * r + j)));
            y[static_cast<std::size_t>(j)] = acc;
        }
        for (std::int64_t m = 0; m < nd; ++m) {
            double acc = 0;
            for (std::int64_t j = 0; j < r; ++j) acc = fmt(acc + fmt(y[static_cast<std::size_t>(j)] * B.value(j * nd + m)));
            w[static_cast<std::size_t>(m)] = fmt(1 / fmt(1 + fmt(std::exp(-acc))));
            c.out[1].set_bits(t * nd + m, encode(F, w[static_cast<std::size_t>(m)]));
        }
        for (std::int64_t k = 0; k < d; ++k) {
            double h = 0;
            for (std::int64_t i = 0; i < n; ++i)
                h = fmt(h + fmt(w[static_cast<std::size_t>(i * d + k)] * z[static_cast<std::size_t>(i * d + k)]));
            c.out[0].set_bits(t * d + k, encode(F, h));
        }
    }
}

template <Format F>
void add_gated_format(Registry& r) {
    r.add(kernel_info("gated_residual", "scalar", F, Format::fp32, Role::kernel,
                      "portable scalar FP32: per-stream RMSNorm (g H)(1/r), z A and (z A) B as left-to-right dots, "
                      "sigmoid as (l >= 0 ? 1 : t) / (1 + t), h = sum_i gate_i z_i left to right",
                      [](const KernelCall& c) { gated_scalar<F>(c); }));
    r.add(kernel_info("gated_residual", "naive", F, F, Role::baseline,
                      "baseline: every square, sum, root, product, partial sum and the plain sigmoid 1 / (1 + e^-l) "
                      "rounded to the storage format",
                      [](const KernelCall& c) { gated_naive<F>(c); }));
}

}  // namespace

void gated_residual_fp32(const KernelCall& c, const GatedFlaws& flaws) { gated_scalar<Format::fp32>(c, flaws); }

}  // namespace conform::cpu

namespace conform {

void register_cpu_gated_residual(Registry& r) {
    cpu::add_gated_format<Format::fp32>(r);
    cpu::add_gated_format<Format::fp16>(r);
    cpu::add_gated_format<Format::bf16>(r);
}

}  // namespace conform
