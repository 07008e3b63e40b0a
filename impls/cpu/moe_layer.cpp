// CPU kernels of the MoE layers (docs/moe.md, "Kernels"): the router of
// moe_router_call, then per expert two GEMMs by the matmul kernel (FP32
// accumulation, results stored in x's format) around the SwiGLU product
// silu(h_gate) h_up in FP32 (stored), the weighted sum of the routed
// experts in FP32; latent_moe stores u, RMSNorm(u) and its latent_up
// product in x's format too; y = FP32 sum of shared and routed, stored once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "impls/cpu/matmul.hpp"
#include "impls/cpu/moe.hpp"
#include "numerics/moe_slots.hpp"

namespace conform::cpu {
namespace {

using moe_slots::Layer;

Tensor gemm(const TensorView& a, const TensorView& b, Format out, MatmulPath path) {
    Tensor y(out, {a.shape[0], b.shape[1]});
    matmul_into(a, b, y.view(), path);
    return y;
}

// a = silu(gate) up per row of h [n, 2F] in FP32, stored in h's format.
Tensor swiglu_rows(const Tensor& h, bool swapped) {
    const std::int64_t n = h.shape()[0], f = h.shape()[1] / 2;
    Tensor a(h.format(), {n, f});
    for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t i = 0; i < f; ++i) {
            float g = static_cast<float>(h.value(r * 2 * f + i)), u = static_cast<float>(h.value(r * 2 * f + f + i));
            if (swapped) std::swap(g, u);
            const float s = g / (1.0f + std::exp(-g));
            a.set_bits(r * f + i, encode(a.format(), s * u));
        }
    return a;
}

// Expert e of gate_up [n_e, W, 2F] and down [n_e, F, W] on the rows v [n, W].
Tensor expert(const TensorView& v, const TensorView& gu, const TensorView& dn, std::int64_t e, MatmulPath p, bool swapped) {
    const Tensor h = gemm(v, gu.at_first(e), v.format, p);
    const Tensor a = swiglu_rows(h, swapped);
    return gemm(a.view(), dn.at_first(e), v.format, p);
}

// Rows `rows` of v gathered into a dense tensor.
Tensor gather(const TensorView& v, const std::vector<std::int64_t>& rows) {
    const std::int64_t w = v.shape[1];
    const auto bytes = static_cast<std::size_t>(w * info(v.format).bytes);
    Tensor g(v.format, {static_cast<std::int64_t>(rows.size()), w});
    for (std::size_t r = 0; r < rows.size(); ++r)
        std::memcpy(static_cast<char*>(g.data()) + r * bytes, static_cast<const char*>(v.data) + v.offset(rows[r] * w) * info(v.format).bytes, bytes);
    return g;
}

struct Routing {
    std::vector<std::vector<std::int64_t>> tokens, slots;  // per expert: its kept (token, slot) pairs
    std::vector<char> bad;                                  // tokens the router found non-finite
};

Routing routing(const Layer& l, const TensorView& idx, const TensorView& kept) {
    Routing r{std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(l.e)),
              std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(l.e)), std::vector<char>(static_cast<std::size_t>(l.t), 0)};
    for (std::int64_t t = 0; t < l.t; ++t) {
        if (std::isnan(idx.value(t * l.k))) {
            r.bad[static_cast<std::size_t>(t)] = 1;
            continue;
        }
        for (std::int64_t j = 0; j < l.k; ++j)
            if (kept.value(t * l.k + j) == 1) {
                const auto e = static_cast<std::size_t>(idx.value(t * l.k + j));
                r.tokens[e].push_back(t), r.slots[e].push_back(j);
            }
    }
    return r;
}

// sum_j g_tj routed_{i_tj}(v_t) in FP32 [T, W]: grouped, one GEMM pair per
// expert on its gathered tokens, or dense, every expert on every token.
std::vector<float> routed_sum(const Layer& l, const KernelCall& c, const TensorView& v, const Routing& r, MatmulPath p,
                              ExpertForm form, bool swapped) {
    std::vector<float> acc(static_cast<std::size_t>(l.t * l.w), 0.0f);
    const TensorView &gu = l.in(c.in, moe_slots::gate_up), &dn = l.in(c.in, moe_slots::down), &wt = c.out[moe_slots::weights_o];
    for (std::int64_t e = 0; e < l.e; ++e) {
        const auto& tok = r.tokens[static_cast<std::size_t>(e)];
        const bool dense = form == ExpertForm::dense;
        if (tok.empty() && !dense) continue;
        const Tensor ye = expert(dense ? v : gather(v, tok).view(), gu, dn, e, p, swapped);
        for (std::size_t n = 0; n < tok.size(); ++n) {
            const std::int64_t t = tok[n], row = dense ? t : static_cast<std::int64_t>(n);
            const float g = static_cast<float>(wt.value(t * l.k + r.slots[static_cast<std::size_t>(e)][n]));
            for (std::int64_t i = 0; i < l.w; ++i) acc[static_cast<std::size_t>(t * l.w + i)] += g * static_cast<float>(ye.value(row * l.w + i));
        }
    }
    return acc;
}

// u stored, then RMSNorm(u) in FP32 (stored), times latent_up (stored): [T, C].
std::vector<float> latent_out(const Layer& l, const KernelCall& c, const std::vector<float>& acc, Format fmt, MatmulPath p,
                              bool skip_norm) {
    Tensor n(fmt, {l.t, l.w});
    for (std::int64_t t = 0; t < l.t; ++t) {
        std::vector<float> u(static_cast<std::size_t>(l.w));
        float ss = 0;
        for (std::int64_t i = 0; i < l.w; ++i) {
            u[static_cast<std::size_t>(i)] = static_cast<float>(decode(fmt, encode(fmt, acc[static_cast<std::size_t>(t * l.w + i)])));
            ss += u[static_cast<std::size_t>(i)] * u[static_cast<std::size_t>(i)];
        }
        const float r = std::sqrt(ss / static_cast<float>(l.w) + static_cast<float>(l.eps));
        for (std::int64_t i = 0; i < l.w; ++i) {
            const float wn = l.has(moe_slots::norm_weight) ? static_cast<float>(l.in(c.in, moe_slots::norm_weight).value(i)) : 1.0f;
            const float v = l.normalized && !skip_norm ? wn * u[static_cast<std::size_t>(i)] / r : u[static_cast<std::size_t>(i)];
            n.set_bits(t * l.w + i, encode(fmt, v));
        }
    }
    const Tensor y = gemm(n.view(), l.in(c.in, moe_slots::latent_up), fmt, p);
    std::vector<float> out(static_cast<std::size_t>(l.t * l.c));
    for (std::int64_t i = 0; i < l.t * l.c; ++i) out[static_cast<std::size_t>(i)] = static_cast<float>(y.value(i));
    return out;
}

// Rows of `width` FP32 values stored once into out; a row in `bad` or with a
// NaN or an infinity: NaN throughout.
void store_rows(const TensorView& out, const std::vector<float>& y, std::int64_t width, const std::vector<char>& bad) {
    const std::uint64_t nan = encode(out.format, std::numeric_limits<double>::quiet_NaN());
    for (std::size_t t = 0; t < bad.size(); ++t) {
        const float* row = y.data() + static_cast<std::int64_t>(t) * width;
        const bool b = bad[t] || !std::all_of(row, row + width, [](float v) { return std::isfinite(v); });
        for (std::int64_t i = 0; i < width; ++i)
            out.set_bits(static_cast<std::int64_t>(t) * width + i, b ? nan : encode(out.format, row[i]));
    }
}

}  // namespace

void moe_layer_call(const KernelCall& c, bool latent, bool simd, ExpertForm form, const LayerFlaws& f) {
    const Layer l = moe_slots::read_layer(latent ? "latent_moe" : "moe", c.params, c.in);
    Tensor kept(Format::fp32, {l.t, l.k}), loss(Format::fp32, {1});
    moe_router_call(KernelCall{c.params, moe_slots::router_inputs(l, c.in),
                               {c.out[moe_slots::indices_o], c.out[moe_slots::weights_o], kept.view(), loss.view()}},
                    simd, f.router);
    moe_experts_call(c, latent, simd, form, kept.view(), f);
}

namespace {

// y = acc (routed, or latent_up's product) + the shared experts of x in
// FP32, stored once; a token in `bad` or meeting a NaN or an infinity
// anywhere: NaN throughout.
void finish(const Layer& l, const KernelCall& c, std::vector<float> y, const std::vector<char>& bad, MatmulPath p,
            const LayerFlaws& f) {
    const TensorView& x = l.in(c.in, moe_slots::x);
    for (std::int64_t s = 0; s < l.s; ++s) {
        const Tensor ys = expert(x, l.in(c.in, moe_slots::shared_gate_up), l.in(c.in, moe_slots::shared_down), s, p, f.gate_up_swapped);
        for (std::int64_t t = 0; t < l.t; ++t) {
            const float g = f.shared_weighted && !bad[static_cast<std::size_t>(t)]
                                ? static_cast<float>(c.out[moe_slots::weights_o].value(t * l.k)) : 1.0f;
            for (std::int64_t i = 0; i < l.c; ++i) y[static_cast<std::size_t>(t * l.c + i)] += g * static_cast<float>(ys.value(t * l.c + i));
        }
    }
    store_rows(c.out[moe_slots::y_o], y, l.c, bad);
}

}  // namespace

void moe_experts_call(const KernelCall& c, bool latent, bool simd, ExpertForm form, const TensorView& kept,
                      const LayerFlaws& f, MoeStage stage) {
    const Layer l = moe_slots::read_layer(latent ? "latent_moe" : "moe", c.params, c.in);
    const TensorView& x = l.in(c.in, moe_slots::x);
    const MatmulPath p = simd ? best_matmul_path(x.format) : MatmulPath::scalar;
    const Routing r = routing(l, c.out[moe_slots::indices_o], kept);
    Tensor z;
    if (latent) z = gemm(x, l.in(c.in, moe_slots::latent_down), x.format, p);
    std::vector<float> y = routed_sum(l, c, latent ? z.view() : x, r, p, form, f.gate_up_swapped);
    if (stage == MoeStage::latent_u) return store_rows(c.out[moe_slots::y_o], y, l.w, r.bad);
    if (latent) y = latent_out(l, c, y, x.format, p, f.rmsnorm_skipped);
    finish(l, c, std::move(y), r.bad, p, f);
}

void moe_latent_out_call(const KernelCall& c, bool simd, const TensorView& u) {
    const Layer l = moe_slots::read_layer("latent_moe", c.params, c.in);
    const TensorView& x = l.in(c.in, moe_slots::x);
    const MatmulPath p = simd ? best_matmul_path(x.format) : MatmulPath::scalar;
    std::vector<float> uf(static_cast<std::size_t>(l.t * l.w));
    std::vector<char> bad(static_cast<std::size_t>(l.t), 0);
    for (std::int64_t i = 0; i < l.t * l.w; ++i) {
        uf[static_cast<std::size_t>(i)] = static_cast<float>(u.value(i));
        if (!std::isfinite(uf[static_cast<std::size_t>(i)])) bad[static_cast<std::size_t>(i / l.w)] = 1;
    }
    finish(l, c, latent_out(l, c, uf, x.format, p, false), bad, p, {});
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_moe_layer(Registry& r) {
    for (const bool latent : {false, true})
        for (Format f : {Format::fp32, Format::bf16})
            for (const char* variant : {"simd", "scalar", "dense"}) {
                const std::string v = variant;
                KernelInfo k;
                k.op = latent ? "latent_moe" : "moe";
                k.name = "cpu." + v + "." + k.op + "." + name(f);
                k.variant = v;
                k.in = f, k.out = f, k.acc = Format::fp32;
                k.out_formats = {f, Format::fp32, Format::fp32};
                const bool simd = v == "simd";
                const cpu::ExpertForm form = v == "dense" ? cpu::ExpertForm::dense : cpu::ExpertForm::grouped;
                if (v == "dense") k.role = Role::baseline;
                k.description = std::string(v == "dense" ? "dense-masked baseline: every expert on every token, the "
                                                           "chosen ones selected (cpu.scalar.matmul)"
                                                         : "grouped: each expert's tokens gathered, one GEMM pair per "
                                                           "expert by cpu." + v + ".matmul") +
                                "; router cpu." + (simd ? "simd" : "scalar") + ".moe_router; h, silu(h_gate) h_up, "
                                "expert outputs" + (latent ? ", z, u, RMSNorm(u) and u's latent_up product" : "") +
                                " stored in " + name(f) + "; sums in FP32";
                k.fn = [latent, simd, form](const KernelCall& c) { cpu::moe_layer_call(c, latent, simd, form); };
                r.add(std::move(k));
            }
}

}  // namespace conform
