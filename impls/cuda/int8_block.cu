// CUDA int8_block (docs/int8.md, "int8_block as an op"): cuda.int8_block.fp16,
// seed 000's INT8 + FP16 pre-norm block with every kernel on the GPU --
// cuda.quantize (per token, per channel), the INT8 GEMM on integer tensor
// cores, cuda.layer_norm and cuda.softmax in FP16 -- composed by the CPU
// kernels' glue (impls/cpu/int8_block.cpp: dequantization in double, ReLU,
// FP32 residual adds, FP16 stores; cpu::BlockStages), so the two differ only
// in their stages.  Declared acc fp32, as the CPU kernels.
#include "impls/cpu/int8_block.hpp"
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/int8.cuh"
#include "impls/cuda/int8_quant.cuh"
#include "impls/cuda/norm.cuh"
#include "impls/cuda/softmax.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

constexpr const char* kBlock = "cuda.int8_block.fp16";

// acc = a b by the INT8 GEMM kernel (unit scales; its acc output, exact).
void gpu_matmul(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                std::int64_t n, const Launch& l) {
    const float one = 1.0f;
    const std::vector<TensorView> in = {
        TensorView::contiguous(const_cast<std::int8_t*>(a), Format::int8, {m, k}),
        TensorView::contiguous(const_cast<std::int8_t*>(b), Format::int8, {k, n}),
        TensorView::contiguous(const_cast<float*>(&one), Format::fp32, {1}),
        TensorView::contiguous(const_cast<float*>(&one), Format::fp32, {1})};
    Tensor exact(Format::fp64, {m, n}), y(Format::fp32, {m, n});
    run_int8_gemm_as<float>(KernelCall{Params(), in, {exact.view(), y.view()}}, kBlock, l);
    for (std::int64_t i = 0; i < m * n; ++i) acc[i] = static_cast<std::int32_t>(exact.value(i));
}

cpu::BlockStages gpu_stages(const Launch& l) {
    cpu::BlockStages st;
    st.quantize = [l](const KernelCall& c) { run_quantize_as<__half>(c, kBlock, l); };
    st.matmul = [l](const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                    std::int64_t n) { gpu_matmul(a, b, acc, m, k, n, l); };
    st.layer_norm = [l](const KernelCall& c) { run_norm_as<Norm::layer, __half>(c, kBlock, l); };
    st.softmax = [l](const KernelCall& c) { run_softmax_as<__half, false>(c, kBlock, l); };
    return st;
}

}  // namespace

void register_int8_block(Registry& r) {
    KernelInfo k = kernel_info("int8_block", Format::fp16, "");
    k.acc = Format::fp32;  // LayerNorm, softmax and the residual adds; the GEMMs are exact INT32
    k.description = "every stage a GPU kernel (cuda.quantize per token and channel, the INT8 GEMM on integer tensor "
                    "cores, cuda.layer_norm and cuda.softmax in fp16), composed by the CPU kernels' glue "
                    "(dequantization in double, FP32 residual adds, FP16 stores)";
    with_launches(k, [](Launch l) -> KernelFn {
        return [l](const KernelCall& c) { cpu::int8_block_call(c, gpu_stages(l)); };
    });
    r.add(std::move(k));
}

}  // namespace conform::CONFORM_CUDA_NS
