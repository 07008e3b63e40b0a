// CUDA kernels of the INT8 family around the GEMM (docs/int8.md, "CUDA
// kernels"): cuda.quantize.<fmt> (x in fp32/fp16/bf16 -> int8 codes and
// fp32 scales), cuda.dequantize.<out> and cuda.smooth_quant.<fmt>, the CPU
// kernels' decisions and double arithmetic (declared acc fp64), so their
// outputs agree with cpu.scalar bit for bit.  The kernels are
// int8_quant.cuh's.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/int8_quant.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

// cuda.<op>.<f> running run(storage value, call, kernel name, launch), with the determinism launches.
template <class Run>
KernelInfo entry(const char* op, Format f, const std::string& what, Run run) {
    KernelInfo k = kernel_info(op, f, "");
    k.description = what;
    with_launches(k, [f, kernel = k.name, run](Launch l) -> KernelFn {
        return [f, kernel, l, run](const KernelCall& c) { by_storage(f, [&](auto s) { run(s, c, kernel.c_str(), l); }); };
    });
    return k;
}

}  // namespace

void register_int8_quant(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo q = entry("quantize", f,
                             "a block per group (tensor, row or column): NaN-sticky amax by block reduction, s = amax / "
                             "127 in FP32; a thread per element: RNE(x / s) with the quotient in double, clamped to "
                             "[-127, 127]",
                             [](auto s, const KernelCall& c, const char* kernel, const Launch& l) {
                                 run_quantize_as<decltype(s)>(c, kernel, l);
                             });
        q.out = Format::int8;
        q.out_formats = {Format::int8, Format::fp32};
        r.add(std::move(q));
        KernelInfo d = entry("dequantize", f, std::string("a thread per element: q * scale in double (exact), one rounding into ") + name(f),
                             [](auto s, const KernelCall& c, const char* kernel, const Launch& l) {
                                 run_dequantize_as<decltype(s)>(c, kernel, l);
                             });
        d.in = Format::int8;
        r.add(std::move(d));
        KernelInfo m = entry("smooth_quant", f,
                             "a thread per channel: maxima of x's column and w's row, s_j = exp(alpha ln ax - (1 - "
                             "alpha) ln aw) in double; a thread per element: xs = x (1 / s_j), ws = w s_j in double, "
                             "one rounding into " + std::string(name(f)),
                             [](auto s, const KernelCall& c, const char* kernel, const Launch& l) {
                                 run_smooth_quant_as<decltype(s)>(c, kernel, l);
                             });
        m.out_formats = {f, f, Format::fp32};
        r.add(std::move(m));
    }
}

}  // namespace conform::CONFORM_CUDA_NS
