// oneDNN 2.6 primitives as registry kernels (docs/onednn.md), through the
// library's documented C++ API: softmax_forward, layer_normalization_forward,
// eltwise_forward and matmul (float, and INT8 with output scales and a binary post-op).
// Each kernel is exactly what a oneDNN user gets: a primitive created for the
// call's shape and executed on the caller's buffers; conform only widens the
// [n] weight and bias of a 16-bit layer normalization to the FP32 oneDNN takes
// (exact) and stores INT32 accumulators as the op's fp64 `acc`.
#include <dnnl.hpp>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "impls/onednn/onednn.hpp"

namespace conform::onednn {
namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;
using Args = std::unordered_map<int, memory>;

dnnl::engine& engine() {
    static dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

// A stream per call: streams are not thread-safe and creating one is cheap.
void execute(const dnnl::primitive& p, const Args& args) {
    dnnl::stream s(engine());
    p.execute(s, args);
    s.wait();
}

dt data_type(Format f) {
    switch (f) {
        case Format::fp32: return dt::f32;
        case Format::fp16: return dt::f16;
        case Format::bf16: return dt::bf16;
        case Format::int8: return dt::s8;
        default: throw std::invalid_argument(std::string("oneDNN adapter: no data type for ") + name(f));
    }
}

memory::desc matrix(std::int64_t rows, std::int64_t cols, dt t) { return memory::desc({rows, cols}, t, tag::ab); }

// v as a dense [rows, cols] matrix.  oneDNN 2.6's normalization and eltwise
// take one descriptor for source and destination, so both must be packed
// (the suite's tensors are); a strided view is refused rather than misread.
memory::desc rows_of(const TensorView& v) {
    if (v.row_stride() != v.cols()) throw std::invalid_argument("oneDNN adapter: rows must be packed");
    return matrix(v.rows(), v.cols(), data_type(v.format));
}

memory wrap(const memory::desc& md, const TensorView& v) { return memory(md, engine(), v.data); }

// ---- softmax ------------------------------------------------------------------

dnnl::softmax_forward::primitive_desc softmax_pd(const memory::desc& md) {
    return {{dnnl::prop_kind::forward_inference, md, 1}, engine()};
}

void softmax_call(const KernelCall& c) {
    const memory::desc md = rows_of(c.in[0]);
    if (c.in[0].numel() == 0) return;
    execute(dnnl::softmax_forward(softmax_pd(md)), {{DNNL_ARG_SRC, wrap(md, c.in[0])}, {DNNL_ARG_DST, wrap(md, c.out[0])}});
}

// ---- layer normalization --------------------------------------------------------

dnnl::layer_normalization_forward::primitive_desc layer_norm_pd(const memory::desc& md, double eps) {
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    return {{dnnl::prop_kind::forward_inference, md, static_cast<float>(eps), flags}, engine()};
}

// An [n] vector widened to FP32 (exact from every float format).
std::vector<float> widened(const TensorView& v) {
    std::vector<float> out(static_cast<std::size_t>(v.numel()));
    for (std::int64_t i = 0; i < v.numel(); ++i) out[static_cast<std::size_t>(i)] = static_cast<float>(v.value(i));
    return out;
}

void layer_norm_call(const KernelCall& c) {
    const memory::desc md = rows_of(c.in[0]);
    if (c.in[0].numel() == 0) return;
    std::vector<float> w = widened(c.in[1]), b = widened(c.in[2]);
    const memory::desc vec({c.in[0].cols()}, dt::f32, tag::a);
    execute(dnnl::layer_normalization_forward(layer_norm_pd(md, c.params.get("eps", 1e-5))),
            {{DNNL_ARG_SRC, wrap(md, c.in[0])},
             {DNNL_ARG_DST, wrap(md, c.out[0])},
             {DNNL_ARG_SCALE, memory(vec, engine(), w.data())},
             {DNNL_ARG_SHIFT, memory(vec, engine(), b.data())}});
}

// ---- eltwise ----------------------------------------------------------------------

struct Eltwise {
    const char* op;
    const char* primitive;  // the algorithm's documented name
    dnnl::algorithm alg;
    float alpha;  // swish: the sigmoid's argument scale (1 for SiLU); ignored by the others
};

constexpr Eltwise kEltwise[] = {{"silu", "eltwise_swish", dnnl::algorithm::eltwise_swish, 1.f},
                                {"gelu_erf", "eltwise_gelu_erf", dnnl::algorithm::eltwise_gelu_erf, 0.f},
                                {"gelu_tanh", "eltwise_gelu_tanh", dnnl::algorithm::eltwise_gelu_tanh, 0.f},
                                {"sigmoid", "eltwise_logistic", dnnl::algorithm::eltwise_logistic, 0.f},
                                {"softplus", "eltwise_soft_relu", dnnl::algorithm::eltwise_soft_relu, 0.f}};

const Eltwise* find_eltwise(const std::string& op) {
    for (const auto& e : kEltwise)
        if (op == e.op) return &e;
    return nullptr;
}

dnnl::eltwise_forward::primitive_desc eltwise_pd(const Eltwise& e, const memory::desc& md) {
    return {{dnnl::prop_kind::forward_inference, e.alg, md, e.alpha, 0.f}, engine()};
}

KernelFn eltwise_kernel(const Eltwise& e) {
    return [&e](const KernelCall& c) {
        const memory::desc md = rows_of(c.in[0]);
        if (c.in[0].numel() == 0) return;
        execute(dnnl::eltwise_forward(eltwise_pd(e, md)), {{DNNL_ARG_SRC, wrap(md, c.in[0])}, {DNNL_ARG_DST, wrap(md, c.out[0])}});
    };
}

// ---- INT8 matmul ------------------------------------------------------------------
// acc: s8 x s8 -> s32.  y: s8 x s8 -> f32/f16 with the dequantization in the
// primitive's attributes: output scales s_b (per column, mask 1 << 1) with a
// per-tensor s_a folded in (fl32(s_a s_b[j]), oneDNN's fast path), or a
// per-token s_a as a binary-multiply post-op by an [M, 1] tensor.  Either way
// y = acc * s_a * s_b rounds three times in FP32 (docs/int8.md's budget).

dnnl::matmul::primitive_desc matmul_pd(const memory::desc& a, const memory::desc& b, const memory::desc& c,
                                       const dnnl::primitive_attr& attr = {}) {
    return {{a, b, c}, attr, engine()};
}

struct Dequant {
    dnnl::primitive_attr attr;
    std::vector<float> scale_a;  // per token, else empty
};

Dequant dequant(const TensorView& sa, const TensorView& sb, std::int64_t m) {
    Dequant d;
    const bool per_token = sa.numel() > 1;
    std::vector<float> out_scales(static_cast<std::size_t>(sb.numel()));
    for (std::int64_t j = 0; j < sb.numel(); ++j)
        out_scales[static_cast<std::size_t>(j)] =
            per_token ? static_cast<float>(sb.value(j)) : static_cast<float>(sb.value(j)) * static_cast<float>(sa.value(0));
    d.attr.set_output_scales(sb.numel() > 1 ? 1 << 1 : 0, out_scales);
    if (per_token) {
        d.scale_a = widened(sa);
        dnnl::post_ops po;
        po.append_binary(dnnl::algorithm::binary_mul, matrix(m, 1, dt::f32));
        d.attr.set_post_ops(po);
    }
    return d;
}

void int8_acc(const TensorView& a, const TensorView& b, const TensorView& acc_out) {
    const std::int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
    std::vector<std::int32_t> acc(static_cast<std::size_t>(m * n));
    const memory::desc ma = matrix(m, k, dt::s8), mb = matrix(k, n, dt::s8), mc = matrix(m, n, dt::s32);
    execute(dnnl::matmul(matmul_pd(ma, mb, mc)),
            {{DNNL_ARG_SRC, wrap(ma, a)}, {DNNL_ARG_WEIGHTS, wrap(mb, b)}, {DNNL_ARG_DST, memory(mc, engine(), acc.data())}});
    for (std::int64_t i = 0; i < m * n; ++i) acc_out.set_bits(i, encode(Format::fp64, acc[static_cast<std::size_t>(i)]));
}

void int8_gemm_call(const KernelCall& c) {
    const TensorView &a = c.in.at(0), &b = c.in.at(1), &y = c.out.at(1);
    const std::int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
    if (a.rank != 2 || b.rank != 2 || b.dim(0) != k) throw std::invalid_argument("int8_gemm: a [M, K], b [K, N]");
    if (m * n == 0) return;
    int8_acc(a, b, c.out.at(0));
    Dequant d = dequant(c.in.at(2), c.in.at(3), m);
    const memory::desc ma = matrix(m, k, dt::s8), mb = matrix(k, n, dt::s8), my = matrix(m, n, data_type(y.format));
    Args args{{DNNL_ARG_SRC, wrap(ma, a)}, {DNNL_ARG_WEIGHTS, wrap(mb, b)}, {DNNL_ARG_DST, wrap(my, y)}};
    if (!d.scale_a.empty())
        args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                     memory(matrix(m, 1, dt::f32), engine(), d.scale_a.data()));
    execute(dnnl::matmul(matmul_pd(ma, mb, my, d.attr)), args);
}

// ---- float matmul -------------------------------------------------------------------
// y = a b with a, b and y in one format: oneDNN accumulates in FP32.

void matmul_call(const KernelCall& c) {
    const TensorView &a = c.in.at(0), &b = c.in.at(1), &y = c.out.at(0);
    if (a.rank != 2 || b.rank != 2 || b.dim(0) != a.dim(1)) throw std::invalid_argument("matmul: a [M, K], b [K, N]");
    if (a.row_stride() != a.cols() || b.row_stride() != b.cols()) throw std::invalid_argument("oneDNN adapter: rows must be packed");
    const std::int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
    if (m * n == 0) return;
    const memory::desc ma = matrix(m, k, data_type(a.format)), mb = matrix(k, n, data_type(b.format)),
                       my = matrix(m, n, data_type(y.format));
    execute(dnnl::matmul(matmul_pd(ma, mb, my)), {{DNNL_ARG_SRC, wrap(ma, a)}, {DNNL_ARG_WEIGHTS, wrap(mb, b)}, {DNNL_ARG_DST, wrap(my, y)}});
}

std::string probe_matmul(Format f) {
    const dt t = data_type(f);
    return matmul_pd(matrix(8, 64, t), matrix(64, 8, t), matrix(8, 8, t)).impl_info_str();
}

// The primitives an int8_gemm kernel with output format `out` creates, on a small shape.
std::string probe_int8_gemm(Format out) {
    const memory::desc ma = matrix(8, 64, dt::s8), mb = matrix(64, 8, dt::s8);
    matmul_pd(ma, mb, matrix(8, 8, dt::s32));
    float one = 1;
    Tensor sa(Format::fp32, {8}), sb(Format::fp32, {8});
    std::string impl;
    for (const TensorView& s : {TensorView::contiguous(&one, Format::fp32, {1}), sa.view()})
        impl += std::string(impl.empty() ? "" : ", ") +
                matmul_pd(ma, mb, matrix(8, 8, data_type(out)), dequant(s, sb.view(), 8).attr).impl_info_str();
    return impl;  // per-tensor s_a, then per-token s_a
}

// ---- registration -------------------------------------------------------------------

const char* isa_text() {
    switch (dnnl::get_effective_cpu_isa()) {
        case dnnl::cpu_isa::sse41: return "sse41";
        case dnnl::cpu_isa::avx: return "avx";
        case dnnl::cpu_isa::avx2: return "avx2";
        case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
        case dnnl::cpu_isa::avx512_core: return "avx512_core";
        case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
        case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
        case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
        default: return "other";
    }
}

// A row/elementwise op's primitive on a [2, 64] tensor of format f: its
// implementation name, or dnnl::error when oneDNN has none here.
std::string probe_rows(const std::string& op, Format f) {
    const memory::desc md = matrix(2, 64, data_type(f));
    if (op == "softmax") return softmax_pd(md).impl_info_str();
    if (op == "layer_norm") return layer_norm_pd(md, 1e-5).impl_info_str();
    return eltwise_pd(*find_eltwise(op), md).impl_info_str();
}

KernelFn kernel_for(const std::string& op) {
    if (op == "softmax") return softmax_call;
    if (op == "layer_norm") return layer_norm_call;
    if (op == "int8_gemm") return int8_gemm_call;
    if (op == "matmul") return matmul_call;
    return eltwise_kernel(*find_eltwise(op));
}

std::string primitive_name(const std::string& op) {
    if (op == "softmax") return "softmax_forward";
    if (op == "layer_norm") return "layer_normalization_forward";
    if (op == "int8_gemm") return "matmul s8 x s8 (s32 acc; output scales, binary-mul post-op for per-token s_a)";
    if (op == "matmul") return "matmul (f32 accumulation)";
    return std::string("eltwise_forward ") + find_eltwise(op)->primitive;
}

KernelInfo kernel_info(const Wanted& w, const std::string& impl) {
    KernelInfo k;
    k.name = kernel_name(w.op, w.format);
    k.op = w.op;
    k.variant = "onednn";
    k.backend = "onednn";
    k.in = w.op == "int8_gemm" ? Format::int8 : w.format;
    k.out = w.format;
    k.acc = Format::fp32;  // oneDNN computes in FP32 (INT32 for the INT8 products)
    if (w.op == "int8_gemm") k.out_formats = {Format::fp64, w.format};
    if (w.op == "softmax") k.conventions = {{"masked_row", "nan"}};  // measured: an all -inf row gives NaN
    k.description = library_text() + " " + primitive_name(w.op) + " [" + impl + "]";
    k.fn = kernel_for(w.op);
    return k;
}

std::string refusal(const dnnl::error& e) {
    return std::string("oneDNN has no implementation here (") + e.what() +
           (e.status == dnnl_unimplemented ? ", status unimplemented" : "") + ") on ISA " + isa_text();
}

}  // namespace

std::string library_text() {
    const dnnl_version_t* v = dnnl::version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           " (cpu ISA " + isa_text() + ")";
}

void provide(const Wanted& w, BackendRegistry& r) {
    if (!w.absent.empty()) {
        r.not_provided.push_back({kernel_name(w.op, w.format), w.op, name(w.format), w.absent});
        return;
    }
    try {
        const std::string impl = w.op == "int8_gemm" ? probe_int8_gemm(w.format)
                                 : w.op == "matmul"  ? probe_matmul(w.format)
                                                     : probe_rows(w.op, w.format);
        r.kernels.add(kernel_info(w, impl));
    } catch (const dnnl::error& e) {
        r.not_provided.push_back({kernel_name(w.op, w.format), w.op, name(w.format), refusal(e)});
    }
}

}  // namespace conform::onednn
