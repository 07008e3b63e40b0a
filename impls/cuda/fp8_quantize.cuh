// fp8_quantize's CUDA kernel and host call (fp8_quantize.cu registers
// cuda.fp8_quantize.<in>[.fp8_e5m2]; the GPU mutants of
// impls/mutants/cuda_fp8.cu instantiate it with one bug).  docs/fp8.md holds
// the formula and the budget (exact): one CUDA block per quantization
// block, grid-stride over the blocks; the block's amax by a block reduction
// of the magnitudes' bit patterns (a NaN or Inf is the largest pattern, so
// one reduction also says whether the block is finite); the scale as the
// CPU kernels form it (one FP32 division, or the power of two from amax's
// exponent); every code by fp8::quantize (impls/fp8_codes.hpp), the CPU
// kernels' own conversion: the FP32 quotient and its exact residual, which
// decides an FP8 midpoint -- not the hardware's cvt.rn.satfinite of the
// quotient, which rounds twice (the mutant fp32_quotient_cvt).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/reduce.cuh"
#include "impls/fp8_codes.hpp"
#include "numerics/fp8.hpp"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernel (kHalfWarp: NoBug's, the amax reduction).
struct Fp8QuantNoBug : NoBug {
    static constexpr bool kQuotientCvt = false;  // RN_fp8 of the FP32 quotient, ties to even: two roundings
};

struct Fp8QuantArgs {
    int rows, cols, br, bc, block_rows, block_cols;  // block_rows = ceil(rows / br), block_cols = ceil(cols / bc)
    int pow2, saturate;
    float static_scale, fmax;  // static_scale > 0: every block's scale; fmax: the codes' largest finite value
    fp8::Codec codec;
};

struct MaxBits {
    __device__ std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const { return a > b ? a : b; }
};

// A block's scale from the largest magnitude's bits (> 0x7F7FFFFF: a NaN or
// Inf in the block, which has no usable scale).
__device__ __forceinline__ float fp8_block_scale(std::uint32_t amax_bits, const Fp8QuantArgs& g) {
    if (g.static_scale > 0) return g.static_scale;
    if (amax_bits > 0x7F7FFFFFu) return NAN;
    const float amax = __uint_as_float(amax_bits), floor = 0x1p-126f;
    if (!g.pow2) return fmaxf(amax / g.fmax, floor);
    if (amax == 0) return floor;
    double s = ldexp(1.0, ilogbf(amax) - ilogbf(g.fmax));  // 2^(e - emax), or twice it when amax exceeds fmax s
    if (static_cast<double>(amax) > static_cast<double>(g.fmax) * s) s *= 2;
    return static_cast<float>(s > 0x1p-126 ? s : 0x1p-126);
}

template <class In, class Bug>
__global__ void fp8_quantize_kernel(const In* __restrict__ x, Fp8QuantArgs g, std::uint8_t* __restrict__ q,
                                    float* __restrict__ scale) {
    const long long blocks = static_cast<long long>(g.block_rows) * g.block_cols;
    for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
        const int bi = static_cast<int>(blk / g.block_cols), bj = static_cast<int>(blk % g.block_cols);
        const int r0 = bi * g.br, c0 = bj * g.bc;
        const int h = g.rows - r0 < g.br ? g.rows - r0 : g.br, w = g.cols - c0 < g.bc ? g.cols - c0 : g.bc;
        const long long n = static_cast<long long>(h) * w;
        auto at = [&](long long e) { return (static_cast<long long>(r0) + e / w) * g.cols + c0 + e % w; };
        std::uint32_t m = 0;  // magnitudes order like their bit patterns
        for (long long e = threadIdx.x; e < n; e += blockDim.x)
            m = MaxBits{}(m, __float_as_uint(static_cast<float>(load(x[at(e)]))) & 0x7FFFFFFFu);
        m = block_reduce<Bug>(m, MaxBits{}, 0u);
        const float s = fp8_block_scale(m, g);
        if (threadIdx.x == 0) scale[blk] = s;
        for (long long e = threadIdx.x; e < n; e += blockDim.x) {
            const float v = static_cast<float>(load(x[at(e)]));
            std::uint8_t code;
            if (isnan(s)) code = static_cast<std::uint8_t>(g.codec.nan_code);
            else if (Bug::kQuotientCvt) code = fp8::from_float(v / s, 0, g.codec, g.saturate != 0);
            else code = fp8::quantize(v, s, g.codec, g.saturate != 0);
            q[at(e)] = code;
        }
    }
}

inline Fp8QuantArgs fp8_quantize_args(const KernelCall& c, const char* kernel, Format in) {
    const std::string who = kernel;
    if (c.in.size() != 1 || c.out.size() != 2) throw std::invalid_argument(who + ": expects x -> q, scale");
    const TensorView &x = c.in[0], &q = c.out[0];
    if (x.format != in) throw std::invalid_argument(who + ": input 'x' must be " + name(in) + ", is " + name(x.format));
    if (x.rank != 2) throw std::invalid_argument(who + ": input 'x' must be [R, C]");
    const Fp8QuantParams qp = fp8_quant_params(c.params, q.format);  // names the parameter that is out of range
    for (std::int64_t v : {x.shape[0], x.shape[1], qp.br, qp.bc})
        if (v >= (std::int64_t{1} << 31)) throw std::invalid_argument(who + ": a dimension or block of 2^31 or more");
    Fp8QuantArgs g{};
    g.rows = static_cast<int>(x.shape[0]), g.cols = static_cast<int>(x.shape[1]);
    g.br = static_cast<int>(qp.br), g.bc = static_cast<int>(qp.bc);
    g.block_rows = static_cast<int>(ceil_div(g.rows, g.br)), g.block_cols = static_cast<int>(ceil_div(g.cols, g.bc));
    g.pow2 = qp.pow2, g.saturate = qp.saturate;
    g.static_scale = static_cast<float>(qp.static_scale);
    g.fmax = static_cast<float>(max_finite(qp.format));
    g.codec = qp.format == Format::fp8_e5m2 ? fp8::kE5m2 : fp8::kE4m3;
    return g;
}

template <class In, class Bug = Fp8QuantNoBug>
void run_fp8_quantize_as(const KernelCall& c, Format in, const char* kernel, const Launch& lc) {
    const Fp8QuantArgs g = fp8_quantize_args(c, kernel, in);
    Stream s(kernel);
    DeviceBuffer x(static_cast<std::size_t>(c.in[0].numel()) * sizeof(In), kernel);
    upload(c.in[0], x, s.get(), kernel);
    DeviceBuffer q(static_cast<std::size_t>(c.out[0].numel()), kernel), sc(static_cast<std::size_t>(c.out[1].numel()) * 4, kernel);
    poison(q, s.get(), kernel), poison(sc, s.get(), kernel);
    const long long blocks = static_cast<long long>(g.block_rows) * g.block_cols;
    if (blocks > 0) {
        auto* kernel_fn = fp8_quantize_kernel<In, Bug>;
        CONFORM_LAUNCH(kernel_fn, dim3(static_cast<unsigned>(std::min<long long>(blocks, lc.max_blocks))), dim3(lc.threads), 0,
                       s.get())(x.as<In>(), g, q.as<std::uint8_t>(), sc.as<float>());
        check_launch(s.get(), kernel);
    }
    download(q, c.out[0], s.get(), kernel);
    download(sc, c.out[1], s.get(), kernel);
}

// The entry of cuda.fp8_quantize.<in>[.fp8_e5m2] (or a mutant's, from
// `base`), with its launches: the codes' format named when not E4M3, as
// the CPU kernels'.
template <class Bug = Fp8QuantNoBug>
KernelInfo fp8_quantize_info(KernelInfo k, Format in, Format codes) {
    if (codes != Format::fp8_e4m3) k.name += std::string(".") + name(codes);
    k.in = in, k.out = codes, k.acc = Format::fp32;
    k.out_formats = {codes, Format::fp32};
    with_launches(k, [kernel = k.name, in](Launch l) -> KernelFn {
        return [kernel, in, l](const KernelCall& c) {
            if (in == Format::fp32) run_fp8_quantize_as<float, Bug>(c, in, kernel.c_str(), l);
            else run_fp8_quantize_as<__nv_bfloat16, Bug>(c, in, kernel.c_str(), l);
        };
    });
    return k;
}

}  // namespace conform::CONFORM_CUDA_NS
