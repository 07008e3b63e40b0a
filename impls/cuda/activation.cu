// CUDA kernels of the activation family (sigmoid, silu, gelu_erf, gelu_tanh,
// softplus, softcap): cuda.<op>.<fmt> for fp32, fp16 and bf16 storage.
//
// Each element is evaluated in double and rounded once into its storage
// format: CUDA's double exp, erfc, log1p and tanh are within a few double
// ulps, so the one final rounding keeps every result within 1 ulp of the
// correctly rounded one (docs/cuda.md, "Meeting the budget"), which the
// single-precision functions (expf: 2 ulp, erff: 2 ulp, tanhf: 2 ulp) cannot
// promise.  The formulas, special values included, are those of the CPU
// kernels' scalar path (impls/cpu/simd_math.hpp).
//
// The loop is grid-stride over 16-byte packs (4 fp32 or 8 fp16/bf16 values
// per load and store), then the tail of fewer than one pack.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/device_io.cuh"
#include "impls/cuda/activation_math.cuh"
#include "impls/cuda/elementwise.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

template <class Op>
Op plain(const Params&) {
    return Op{};
}
Softcap softcap(const Params& p) { return Softcap{p.get("beta", 30)}; }

}  // namespace

void register_activation(Registry& r) {
    add_elementwise<1>(r, "sigmoid", "1 / (1 + exp(-x))", plain<Sigmoid>);
    add_elementwise<1>(r, "silu", "x / (1 + exp(-x))", plain<Silu>);
    add_elementwise<1>(r, "gelu_erf", "x/2 erfc(-x/sqrt 2)", plain<GeluErf>);
    add_elementwise<1>(r, "gelu_tanh", "x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3)))", plain<GeluTanh>);
    add_elementwise<1>(r, "softplus", "max(x, 0) + log1p(exp(-|x|))", plain<Softplus>);
    add_elementwise<1>(r, "softcap", "beta tanh(x / beta)", softcap);
}

}  // namespace conform::CONFORM_CUDA_NS
