// Parameters and shapes of the FP8 ops (docs/fp8.md), shared by the oracle
// and the kernels so that both read a call alike and refuse the same bad
// input with the same message (kernels do not include oracle/ headers).
#pragma once
#include <cstdint>
#include <optional>

#include "numerics/format.hpp"
#include "numerics/op.hpp"

namespace conform {

// A block whose amax / fp8_max is below FP32's smallest normal takes this
// scale (amax = 0 included): no block ever divides by zero or by a subnormal.
inline constexpr double kFp8ScaleFloor = 0x1p-126;

struct Fp8QuantParams {
    std::int64_t br = 1, bc = 128;  // block rows and columns
    bool pow2 = false;              // scale kind 1: the smallest power of two with amax / s <= max
    bool saturate = true;           // codes past max become +-max (else Inf / E4M3's NaN)
    double static_scale = 0;        // > 0: every block's scale (FP32), no amax
    Format format = Format::fp8_e4m3;
};

// The parameters of an fp8_quantize call; `codes` is the format of the q
// tensor when one is given (a kernel's output, the staged candidate),
// else the parameter `format` decides.  std::invalid_argument names the
// parameter that is out of range.
Fp8QuantParams fp8_quant_params(const Params& p, std::optional<Format> codes);

// fp8_gemm's K block (the scales' block and the promotion interval).
std::int64_t fp8_gemm_block(const Params& p);

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The FP32 scale of a block of largest magnitude amax (docs/fp8.md):
// RN_fp32(max(amax / max, 2^-126)), or max(2^ceil(log2(amax / max)), 2^-126)
// for power-of-two scales; NaN for a non-finite amax.  Exact: amax / max is
// formed in double, and a 24-bit amax over a 3-bit max is never within 2^-53
// of an FP32 midpoint or a power of two without being on it.
double fp8_block_scale(double amax, const Fp8QuantParams& qp);

// Output shapes: fp8_quantize's q [R, C] and scale [ceil(R/br), ceil(C/bc)];
// fp8_gemm's y [M, N].
std::vector<std::vector<std::int64_t>> fp8_quantize_shapes(const std::vector<TensorView>& in, const Params& p);
std::vector<std::vector<std::int64_t>> fp8_gemm_shapes(const std::vector<TensorView>& in);

// Validates fp8_gemm's inputs a [M, K], scale_a [M, ceil(K/blk)], b [K, N],
// scale_b [ceil(K/blk), ceil(N/blk)] (errors name the input and dimension).
struct Fp8GemmDims {
    std::int64_t m, k, n, block;
};
Fp8GemmDims fp8_gemm_dims(const std::vector<TensorView>& in, const Params& p);

}  // namespace conform
