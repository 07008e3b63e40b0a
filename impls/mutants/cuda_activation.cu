// GPU mutants of the activation family (docs/cuda.md, "Mutants").
#include "impls/cuda/activation_math.cuh"
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/elementwise.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct DropTail : NoBug {
    static constexpr bool kDropTail = true;
};
struct NoGridStride : NoBug {
    static constexpr bool kNoGridStride = true;
};
struct TruncateBf16 : NoBug {
    static constexpr bool kTruncateBf16 = true;
};

// softplus through the fast intrinsic in float: __expf loses accuracy as
// |x| grows, and log1pf adds its own.
struct FastSoftplus {
    __device__ double operator()(double xd) const {
        return f(static_cast<float>(xd));
    }
    __device__ float f(float x) const { return fmaxf(x, 0.0f) + log1pf(__expf(-fabsf(x))); }
};

template <class Bug, class Op>
void add_activation_mutant(Registry& r, const char* op, const char* bug, Format f, const char* bug_class, const char* what) {
    KernelInfo k = mutant_kernel_info(op, bug, f, bug_class, what);
    float_path(k);
    with_launches(k, [f, kernel = k.name](Launch l) -> KernelFn {
        return [f, kernel, l](const KernelCall& c) { run_unary<Bug>(c, f, Op{}, kernel.c_str(), l); };
    });
    r.add(std::move(k));
}

}  // namespace

void register_mutants_activation(Registry& r) {
    add_activation_mutant<DropTail, Silu>(r, "silu", "tail_dropped", Format::fp32, "16 GPU structure",
                        "the elements after the last whole 16-byte pack are never written");
    add_activation_mutant<TruncateBf16, Silu>(r, "silu", "bf16_truncated", Format::bf16, "18 rounding mode",
                            "bf16 stored by __float2bfloat16_rz of the float result");
    add_activation_mutant<NoBug, FastSoftplus>(r, "softplus", "fast_expf", Format::fp32, "16 GPU structure",
                             "max(x, 0) + log1pf(__expf(-|x|)) in float");
    add_activation_mutant<NoGridStride, Sigmoid>(r, "sigmoid", "no_grid_stride", Format::fp32, "16 GPU structure",
                               "each thread takes one pack and stops: right only while the grid covers the tensor");
}

}  // namespace conform::CONFORM_CUDA_NS
