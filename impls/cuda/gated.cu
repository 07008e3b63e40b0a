// CUDA kernels of the gated family (swiglu, geglu, situ_glu, swiglu_clamp):
// h = gate factor(gate) * up factor(up), cuda.<op>.<fmt> for fp32, fp16 and
// bf16, evaluated in double and rounded once (docs/cuda.md; the formulas of
// the CPU kernels' scalar path, impls/cpu/gated.cpp).
#include "impls/cuda/activation_math.cuh"
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/elementwise.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

Glu<Silu> swiglu(const Params&) { return {}; }
Glu<GeluErf> geglu(const Params&) { return {}; }
SituGlu situ_glu(const Params& p) { return {{p.get("beta1", 4)}, {p.get("beta2", 25)}}; }
SwigluClamp swiglu_clamp(const Params& p) { return {p.get("limit", 10)}; }

}  // namespace

void register_gated(Registry& r) {
    add_elementwise<2>(r, "swiglu", "silu(gate) * up", swiglu);
    add_elementwise<2>(r, "geglu", "gelu_erf(gate) * up", geglu);
    add_elementwise<2>(r, "situ_glu", "beta1 tanh(g/beta1) sigmoid(g) * beta2 tanh(u/beta2)", situ_glu);
    add_elementwise<2>(r, "swiglu_clamp", "silu(min(g, L)) * clamp(u, -L, L)", swiglu_clamp);
}

}  // namespace conform::CONFORM_CUDA_NS
