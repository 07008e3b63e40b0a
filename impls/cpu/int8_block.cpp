// cpu.{simd,scalar}.int8_block.fp16 (docs/int8.md "int8_block as an op"):
// seed 000's precision flow of a pre-norm block, every stage stored in FP16
// and returned (the verdict judges each against its local budget):
//   x1 = LN1(h)                       layer_norm kernel (FP32 inside)
//   q, k, v = int8(x1 W)              per-token x1, per-channel W, INT32 acc
//   s = int8(q_h k_h^T) / sqrt(d_h)   per query token, per key token; -inf for j > i
//   p = softmax(s)                    softmax kernel (FP32 inside)
//   o = int8(p_h v_h)                 per query token, per channel of v
//   u = fl16(fl32(h + fl16(int8(o W_o))))
//   x2 = LN2(u);  a = ReLU(int8(x2 W_1));  out = fl16(fl32(u + fl16(int8(a W_2))))
// Each INT8 GEMM dequantizes in double (acc * s_x * s_w * c) and rounds once
// into FP16.  The weights are quantized per call (a deployment quantizes them
// once; the codes are the same).
#include "impls/cpu/int8_block.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/int8_gemm.hpp"
#include "impls/cpu/isa.hpp"
#include "numerics/int8_block_slots.hpp"

namespace conform::cpu {
namespace {

using namespace int8_block_slots;


// Rows x columns copy of a view's [r0, r0 + rows) x [c0, c0 + cols) block
// (transposed when asked), in the view's format: exact.
Tensor block_of(const TensorView& v, std::int64_t r0, std::int64_t rows, std::int64_t c0, std::int64_t cols, bool transpose = false) {
    Tensor t(v.format, transpose ? std::vector<std::int64_t>{cols, rows} : std::vector<std::int64_t>{rows, cols});
    const std::int64_t n = v.cols();
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) t.set_bits(transpose ? j * rows + i : i * cols + j, v.bits((r0 + i) * n + c0 + j));
    return t;
}

struct Quantized {
    Tensor codes, scales;  // int8 [rows, cols]; fp32 [rows, cols], each element's group scale
};

// The quantize kernel on x (axis 0 tensor, 1 token, 2 channel).
Quantized quantize(const TensorView& x, int axis, const BlockStages& st) {
    Quantized q{Tensor(Format::int8, {x.shape[0], x.shape[1]}), Tensor(Format::fp32, {x.shape[0], x.shape[1]})};
    const Params p({{"axis", static_cast<double>(axis)}});
    st.quantize(KernelCall{p, {x}, {q.codes.view(), q.scales.view()}});
    return q;
}

// c X~ W~ in double, before its store: X [m, k] quantized per token (or per
// tensor: the mutant), W [k, n] per output channel, the product in INT32.
std::vector<double> int8_linear(const TensorView& x, const TensorView& w, double c, const BlockStages& st,
                                bool x_per_tensor = false) {
    const std::int64_t m = x.shape[0], k = x.shape[1], n = w.shape[1];
    const Quantized qx = quantize(x, x_per_tensor ? 0 : 1, st), qw = quantize(w, 2, st);
    std::vector<std::int32_t> acc(ix(m * n));
    const auto* a = static_cast<const std::int8_t*>(qx.codes.data());
    const auto* b = static_cast<const std::int8_t*>(qw.codes.data());
    st.matmul(a, b, acc.data(), m, k, n);
    // The group scales once (the quantize op stores them per element).
    const auto* sx = static_cast<const float*>(qx.scales.data());
    const auto* sw = static_cast<const float*>(qw.scales.data());
    std::vector<double> y(ix(m * n));
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j)
            y[ix(i * n + j)] = static_cast<double>(acc[ix(i * n + j)]) * sx[i * k] * sw[j] * c;
    return y;
}

double fp16(double v) { return decode(Format::fp16, encode(Format::fp16, v)); }

// A registered row kernel (layer_norm, softmax) of the fp16 family.
const KernelFn& row_kernel(const std::string& op, bool simd) {
    const KernelInfo* k = builtin_registry().find(std::string("cpu.") + (simd ? "simd." : "scalar.") + op + ".fp16");
    if (!k) throw std::logic_error("int8_block kernel: no " + op + " kernel");
    return k->fn;
}

void layer_norm(const TensorView& x, const TensorView& g, const TensorView& b, double eps, const TensorView& y,
                const BlockStages& st) {
    const Params p({{"eps", eps}});
    st.layer_norm(KernelCall{p, {x, g, b}, {y}});
}

// r + fl16(y) in FP32, stored in FP16; the residual quantized per token first
// for the residual_int8 mutant.
void residual(const TensorView& r, const std::vector<double>& y, const TensorView& out, const BlockStages& st,
              bool int8_residual) {
    Quantized rq;
    if (int8_residual) rq = quantize(r, 1, st);
    for (std::int64_t i = 0; i < out.numel(); ++i) {
        const double rv = int8_residual ? rq.codes.value(i) * rq.scales.value(i) : r.value(i);
        const float sum = static_cast<float>(rv) + static_cast<float>(fp16(y[ix(i)]));
        out.set_bits(i, encode(Format::fp16, sum));
    }
}

void store(const std::vector<double>& y, const TensorView& out) {
    for (std::int64_t i = 0; i < out.numel(); ++i) out.set_bits(i, encode(out.format, y[ix(i)]));
}

void check(const KernelCall& c) {
    int8_block_slots::block_dims(c.params, c.in);  // the shape errors the oracle gives
    for (const TensorView& v : c.in)
        if (v.format != Format::fp16) throw std::invalid_argument("int8_block kernel: inputs must be fp16");
    for (const TensorView& v : c.out)
        if (v.format != Format::fp16) throw std::invalid_argument("int8_block kernel: outputs must be fp16");
}

// Attention: s, p and o from q, k, v (outputs x1..v already written).
void attention(const KernelCall& c, const BlockStages& st, const BlockFlaws& f) {
    const TensorView &q = c.out[q_o], &k = c.out[k_o], &v = c.out[v_o], &s = c.out[s_o], &p = c.out[p_o], &o = c.out[o_o];
    const std::int64_t heads = s.shape[0], t = s.shape[1], d = q.shape[1], dh = d / heads;
    const double scale = f.unscaled_scores ? 1.0 : 1 / std::sqrt(static_cast<double>(dh));
    for (std::int64_t hd = 0; hd < heads; ++hd) {
        const std::vector<double> sh =
            int8_linear(block_of(q, 0, t, hd * dh, dh).view(), block_of(k, 0, t, hd * dh, dh, true).view(), scale, st);
        for (std::int64_t i = 0; i < t; ++i)
            for (std::int64_t j = 0; j < t; ++j)
                s.set_bits((hd * t + i) * t + j, encode(Format::fp16, j <= i ? sh[ix(i * t + j)] : -INFINITY));
    }
    const TensorView s_rows = TensorView::contiguous(s.data, s.format, {heads * t, t});
    const TensorView p_rows = TensorView::contiguous(p.data, p.format, {heads * t, t});
    st.softmax(KernelCall{Params(), {s_rows}, {p_rows}});
    for (std::int64_t hd = 0; hd < heads; ++hd) {
        const std::vector<double> oh =
            int8_linear(block_of(p_rows, hd * t, t, 0, t).view(), block_of(v, 0, t, hd * dh, dh).view(), 1, st, f.pv_per_tensor);
        for (std::int64_t i = 0; i < t; ++i)
            for (std::int64_t e = 0; e < dh; ++e) o.set_bits(i * d + hd * dh + e, encode(Format::fp16, oh[ix(i * dh + e)]));
    }
}

}  // namespace

void int8_block_call(const KernelCall& c, const BlockStages& st, const BlockFlaws& f) {
    check(c);
    const double eps = c.params.get("eps", 1e-5);
    const auto& in = c.in;
    const auto& out = c.out;
    layer_norm(in[h_in], in[ln1_g], in[ln1_b], eps, out[x1_o], st);
    store(int8_linear(out[x1_o], in[wq], 1, st), out[q_o]);
    store(int8_linear(out[x1_o], in[wk], 1, st), out[k_o]);
    store(int8_linear(out[x1_o], in[wv], 1, st), out[v_o]);
    attention(c, st, f);
    residual(in[h_in], int8_linear(out[o_o], in[wo], 1, st), out[u_o], st, f.residual_int8);
    layer_norm(out[u_o], in[ln2_g], in[ln2_b], eps, out[x2_o], st);
    std::vector<double> a = int8_linear(out[x2_o], in[w1], 1, st);
    for (double& v : a)
        if (!(v > 0) && !std::isnan(v)) v = 0;  // ReLU; NaN stays NaN
    store(a, out[a_o]);
    residual(out[u_o], int8_linear(out[a_o], in[w2], 1, st), out[out_o], st, f.residual_int8);
}

BlockStages cpu_block_stages(bool simd) {
    BlockStages st;
    st.quantize = [simd](const KernelCall& c) { quantize_call(c, simd); };
    st.matmul = [simd](const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                       std::int64_t n) {
        if (simd) int8_matmul_simd(a, b, acc, m, k, n);
        else int8_matmul_scalar(a, b, acc, m, k, n);
    };
    st.layer_norm = row_kernel("layer_norm", simd);
    st.softmax = row_kernel("softmax", simd);
    return st;
}

void int8_block_call(const KernelCall& c, bool simd, const BlockFlaws& f) { int8_block_call(c, cpu_block_stages(simd), f); }

}  // namespace conform::cpu

namespace conform {

void register_cpu_int8_block(Registry& r) {
    for (const bool simd : {true, false}) {
        KernelInfo k;
        k.name = std::string("cpu.") + (simd ? "simd" : "scalar") + ".int8_block.fp16";
        k.op = "int8_block";
        k.variant = simd ? "simd" : "scalar";
        k.in = k.out = Format::fp16;
        k.acc = Format::fp32;  // LayerNorm, softmax and the residual adds; the GEMMs are exact INT32
        k.description = std::string(simd ? "AVX2 quantize, the INT8 GEMM by the best path the CPU has (AMX, VNNI, vpmaddwd), simd layer_norm and softmax"
                                         : "scalar quantize, INT32 triple loop, scalar layer_norm and softmax") +
                        "; stages stored in FP16, residual adds in FP32";
        k.fn = [simd](const KernelCall& c) { cpu::int8_block_call(c, simd); };
        r.add(std::move(k));
    }
}

}  // namespace conform
