#include "numerics/fp8.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "numerics/shape_check.hpp"

namespace conform {
namespace {

double param(const Params& p, const char* name, double fallback) { return p.get(name, fallback); }

std::int64_t block_param(const std::string& op, const Params& p, const char* name, double fallback) {
    const double v = param(p, name, fallback);
    if (!(v >= 1 && v <= 65536) || v != std::floor(v))
        throw std::invalid_argument(op + ": parameter '" + name + "' must be a whole number in [1, 65536], is " +
                                    std::to_string(v));
    return static_cast<std::int64_t>(v);
}

bool flag_param(const std::string& op, const Params& p, const char* name, double fallback) {
    const double v = param(p, name, fallback);
    if (v != 0 && v != 1) throw std::invalid_argument(op + ": parameter '" + name + "' must be 0 or 1, is " + std::to_string(v));
    return v == 1;
}

}  // namespace

Fp8QuantParams fp8_quant_params(const Params& p, std::optional<Format> codes) {
    const std::string op = "fp8_quantize";
    Fp8QuantParams q;
    q.br = block_param(op, p, "br", 1);
    q.bc = block_param(op, p, "bc", 128);
    q.pow2 = flag_param(op, p, "scale", 0);
    q.saturate = flag_param(op, p, "saturate", 1);
    const double s = param(p, "static_scale", 0);
    if (!(s >= 0) || !std::isfinite(s))
        throw std::invalid_argument(op + ": parameter 'static_scale' must be finite and >= 0, is " + std::to_string(s));
    q.static_scale = decode(Format::fp32, encode(Format::fp32, s));
    if (s > 0 && !(q.static_scale >= kFp8ScaleFloor))
        throw std::invalid_argument(op + ": parameter 'static_scale' must be 0 or >= 2^-126, is " + std::to_string(s));
    q.format = flag_param(op, p, "format", 0) ? Format::fp8_e5m2 : Format::fp8_e4m3;
    if (codes) {
        if (!is_fp8(*codes))
            throw std::invalid_argument(op + ": output 'q' must be fp8_e4m3 or fp8_e5m2, is " + std::string(name(*codes)));
        q.format = *codes;
    }
    return q;
}

std::int64_t fp8_gemm_block(const Params& p) { return block_param("fp8_gemm", p, "block", 128); }

double fp8_block_scale(double amax, const Fp8QuantParams& qp) {
    if (qp.static_scale > 0) return qp.static_scale;
    if (!std::isfinite(amax)) return NAN;
    const double r = amax / max_finite(qp.format);
    if (r < kFp8ScaleFloor) return kFp8ScaleFloor;
    if (!qp.pow2) return decode(Format::fp32, encode(Format::fp32, r));
    int e;
    const double m = std::frexp(r, &e);  // r = m 2^e, m in [1/2, 1)
    return std::ldexp(1.0, m == 0.5 ? e - 1 : e);
}

std::vector<std::vector<std::int64_t>> fp8_quantize_shapes(const std::vector<TensorView>& in, const Params& p) {
    if (in.empty() || in[0].rank != 2) throw std::invalid_argument("fp8_quantize: expects x [R, C]");
    const Fp8QuantParams qp = fp8_quant_params(p, std::nullopt);
    const std::int64_t r = in[0].shape[0], c = in[0].shape[1];
    return {{r, c}, {ceil_div(r, qp.br), ceil_div(c, qp.bc)}};
}

std::vector<std::vector<std::int64_t>> fp8_gemm_shapes(const std::vector<TensorView>& in) {
    if (in.size() != 4 || in[0].rank != 2 || in[2].rank != 2)
        throw std::invalid_argument("fp8_gemm: expects a [M, K], scale_a, b [K, N], scale_b");
    return {{in[0].shape[0], in[2].shape[1]}};
}

Fp8GemmDims fp8_gemm_dims(const std::vector<TensorView>& in, const Params& p) {
    const std::string op = "fp8_gemm";
    if (in.size() != 4) throw std::invalid_argument(op + ": expects a [M, K], scale_a, b [K, N], scale_b");
    require_rank(op, "a", in[0], 2);
    require_rank(op, "scale_a", in[1], 2);
    require_rank(op, "b", in[2], 2);
    require_rank(op, "scale_b", in[3], 2);
    const Fp8GemmDims d{in[0].shape[0], in[0].shape[1], in[2].shape[1], fp8_gemm_block(p)};
    require_dim(op, "b", in[2], 0, d.k, "K of a");
    require_dim(op, "scale_a", in[1], 0, d.m, "M of a");
    require_dim(op, "scale_a", in[1], 1, ceil_div(d.k, d.block), "ceil(K / block)");
    require_dim(op, "scale_b", in[3], 0, ceil_div(d.k, d.block), "ceil(K / block)");
    require_dim(op, "scale_b", in[3], 1, ceil_div(d.n, d.block), "ceil(N / block)");
    return d;
}

}  // namespace conform
