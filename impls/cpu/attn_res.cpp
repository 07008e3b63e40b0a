// CPU kernels of block_attn_res (docs/residual.md, "Kernels"):
//   cpu.scalar.block_attn_res.<fmt>  FP32 arithmetic: per token and source
//                                    the RMSNorm root, the logit a_i = w . k_i
//                                    (k = (g v) (1 / r)), a max-subtracted
//                                    softmax, h = sum_i alpha_i v_i left to right
//   cpu.naive.block_attn_res.<fmt>   baseline: every intermediate rounded to
//                                    the storage format
#include "impls/cpu/attn_res.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "impls/cpu/elementwise.hpp"

namespace conform::cpu {

std::vector<float> widen_residual(const TensorView& t) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    for (std::int64_t e = 0; e < t.numel(); ++e) v[static_cast<std::size_t>(e)] = static_cast<float>(t.value(e));
    return v;
}

float residual_inv_rms(const float* x, std::int64_t d, double eps, bool eps_outside) {
    float ss = 0;
    for (std::int64_t c = 0; c < d; ++c) ss = ss + x[c] * x[c];
    const float mean = ss / static_cast<float>(d);
    // mean + eps in double, rounded once: eps itself is never rounded to FP32
    // (fl32(1e-6) and fl32(0.1) would bias every output of an eps-dominated row).
    const float t = static_cast<float>(static_cast<double>(mean) + eps);
    return 1.0f / (eps_outside ? std::sqrt(mean) + static_cast<float>(eps) : std::sqrt(t));
}

AttnResGeometry attn_res_geometry(const KernelCall& c) {
    if ((c.in.size() != 2 && c.in.size() != 3) || c.out.size() != 1)
        throw std::invalid_argument("block_attn_res kernel: expects v, w (, norm_weight) -> h");
    const TensorView& v = c.in[0];
    if (v.rank != 3 || v.shape[0] < 1) throw std::invalid_argument("block_attn_res kernel: v must be [N >= 1, T, d]");
    AttnResGeometry g{v.shape[0], v.shape[1], v.shape[2], c.in.size() == 3 && c.in[2].numel() > 0};
    if (c.in[1].numel() != g.d || (g.has_g && c.in[2].numel() != g.d) || c.out[0].numel() != g.tokens * g.d)
        throw std::invalid_argument("block_attn_res kernel: w, norm_weight and h must match v's width");
    return g;
}

namespace {

template <Format F>
void attn_res_scalar(const KernelCall& c, const AttnResFlaws& fl = {}) {
    const AttnResGeometry g = attn_res_geometry(c);
    const double eps = c.params.get("eps", 1e-6);
    const std::vector<float> v = widen_residual(c.in[0]), w = widen_residual(c.in[1]);
    const std::vector<float> nw = g.has_g && !fl.weight_ignored ? widen_residual(c.in[2]) : std::vector<float>(static_cast<std::size_t>(g.d), 1.0f);
    const auto N = static_cast<std::size_t>(g.n), d = static_cast<std::size_t>(g.d);
    std::vector<float> a(N), keys(N * d), alpha(N);
    for (std::int64_t t = 0; t < g.tokens; ++t) {
        bool finite = true;
        for (std::size_t i = 0; i < N; ++i) {
            const float* x = v.data() + (static_cast<std::int64_t>(i) * g.tokens + t) * g.d;
            const float inv = fl.raw_keys ? 1.0f : residual_inv_rms(x, g.d, eps, fl.eps_outside);
            float acc = 0;
            for (std::size_t k = 0; k < d; ++k) {
                const float key = (nw[k] * x[k]) * inv;
                keys[i * d + k] = key;
                acc = acc + w[k] * key;
            }
            a[i] = acc;
            finite = finite && std::isfinite(acc);
        }
        float m = a[0];
        for (float x : a) m = x > m ? x : m;
        float sum = 0;
        for (std::size_t i = 0; i < N; ++i) sum = sum + (alpha[i] = std::exp(a[i] - m));
        for (std::size_t i = 0; i < N; ++i) alpha[i] = alpha[i] / sum;
        for (std::size_t k = 0; k < d; ++k) {
            float h = 0;
            for (std::size_t i = 0; i < N; ++i) {
                const float val = fl.normalized_values ? keys[i * d + k] : v[(i * static_cast<std::size_t>(g.tokens) + static_cast<std::size_t>(t)) * d + k];
                h = i == 0 ? alpha[0] * val : h + alpha[i] * val;
            }
            if (!finite) h = std::numeric_limits<float>::quiet_NaN();
            c.out[0].set_bits(t * g.d + static_cast<std::int64_t>(k), encode(F, static_cast<double>(h)));
        }
    }
}

// Baseline: the same steps in double, each result rounded to the storage format.
template <Format F>
void attn_res_naive(const KernelCall& c) {
    const AttnResGeometry g = attn_res_geometry(c);
    auto fmt = [](double x) { return decode(F, encode(F, x)); };
    const double eps = fmt(c.params.get("eps", 1e-6));
    const TensorView &v = c.in[0], &w = c.in[1];
    auto nw = [&](std::int64_t k) { return g.has_g ? c.in[2].value(k) : 1.0; };
    auto val = [&](std::int64_t i, std::int64_t t, std::int64_t k) { return v.value((i * g.tokens + t) * g.d + k); };
    std::vector<double> a(static_cast<std::size_t>(g.n)), e(static_cast<std::size_t>(g.n));
    for (std::int64_t t = 0; t < g.tokens; ++t) {
        bool finite = true;
        for (std::int64_t i = 0; i < g.n; ++i) {
            double ss = 0;
            for (std::int64_t k = 0; k < g.d; ++k) ss = fmt(ss + fmt(val(i, t, k) * val(i, t, k)));
            const double inv = fmt(1 / fmt(std::sqrt(fmt(fmt(ss / static_cast<double>(g.d)) + eps))));
            double acc = 0;
            for (std::int64_t k = 0; k < g.d; ++k) acc = fmt(acc + fmt(w.value(k) * fmt(fmt(nw(k) * val(i, t, k)) * inv)));
            a[static_cast<std::size_t>(i)] = acc;
            finite = finite && std::isfinite(acc);
        }
        double m = a[0], sum = 0;
        for (double x : a) m = x > m ? x : m;
        for (std::size_t i = 0; i < a.size(); ++i) sum = fmt(sum + (e[i] = fmt(std::exp(fmt(a[i] - m)))));
        for (std::int64_t k = 0; k < g.d; ++k) {
            double h = 0;
            for (std::int64_t i = 0; i < g.n; ++i) h = fmt(h + fmt(fmt(e[static_cast<std::size_t>(i)] / sum) * val(i, t, k)));
            c.out[0].set_bits(t * g.d + k, encode(F, finite ? h : std::numeric_limits<double>::quiet_NaN()));
        }
    }
}

template <Format F>
void add_attn_res_format(Registry& r) {
    r.add(kernel_info("block_attn_res", "scalar", F, Format::fp32, Role::kernel,
                      "portable scalar FP32: RMSNorm keys (g v)(1/r), logits as left-to-right dots, max-subtracted "
                      "softmax, h = sum_i alpha_i v_i left to right",
                      [](const KernelCall& c) { attn_res_scalar<F>(c); }));
    r.add(kernel_info("block_attn_res", "naive", F, F, Role::baseline,
                      "baseline: every square, sum, root, key, logit, exp, weight and product rounded to the storage format",
                      [](const KernelCall& c) { attn_res_naive<F>(c); }));
}

}  // namespace

void block_attn_res_fp32(const KernelCall& c, const AttnResFlaws& flaws) { attn_res_scalar<Format::fp32>(c, flaws); }

}  // namespace conform::cpu

namespace conform {

void register_cpu_attn_res(Registry& r) {
    cpu::add_attn_res_format<Format::fp32>(r);
    cpu::add_attn_res_format<Format::fp16>(r);
    cpu::add_attn_res_format<Format::bf16>(r);
}

}  // namespace conform
