// CUDA kernels of the gated family (swiglu, geglu, situ_glu, swiglu_clamp):
// h = gate factor(gate) * up factor(up), cuda.<op>.<fmt> for fp32, fp16 and
// bf16, evaluated in double and rounded once (docs/cuda.md; the formulas of
// the CPU kernels' scalar path, impls/cpu/gated.cpp).
#include "impls/cuda/activation_math.cuh"
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/elementwise.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

template <class Op>
void add(Registry& r, const char* op, const char* what, Op (*make)(const Params&)) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = kernel_info(op, f, what);
        with_launches(k, [f, make, kernel = k.name](Launch l) -> KernelFn {
            return [f, make, kernel, l](const KernelCall& c) { run_binary(c, f, make(c.params), kernel.c_str(), l); };
        });
        r.add(std::move(k));
    }
}

Glu<Silu> swiglu(const Params&) { return {}; }
Glu<GeluErf> geglu(const Params&) { return {}; }
SituGlu situ_glu(const Params& p) { return {{p.get("beta1", 4)}, {p.get("beta2", 25)}}; }
SwigluClamp swiglu_clamp(const Params& p) { return {p.get("limit", 10)}; }

}  // namespace

void register_gated(Registry& r) {
    add(r, "swiglu", "silu(gate) * up", swiglu);
    add(r, "geglu", "gelu_erf(gate) * up", geglu);
    add(r, "situ_glu", "beta1 tanh(g/beta1) sigmoid(g) * beta2 tanh(u/beta2)", situ_glu);
    add(r, "swiglu_clamp", "silu(min(g, L)) * clamp(u, -L, L)", swiglu_clamp);
}

}  // namespace conform::CONFORM_CUDA_NS
