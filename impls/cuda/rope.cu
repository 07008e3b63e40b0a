// CUDA RoPE (docs/rope.md for the formula, pairings, NTK scaling, partial
// rotary and the bound): cuda.rope.<fmt> for fp32, fp16 and bf16 storage.
// The kernel is in rope.cuh.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/rope.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_rope(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = rope_info(kernel_info("rope", f, ""));
        k.description = std::string("one thread per element: theta, the angle (offset + l) theta, sincos and the "
                                    "rotation in double, one rounding into ") +
                        name(f) + "; both pairings, NTK, partial rotary";
        with_launches(k, [f, kernel = k.name](Launch l) -> KernelFn {
            return [f, kernel, l](const KernelCall& c) { run_rope(c, f, kernel.c_str(), l); };
        });
        r.add(std::move(k));
    }
}

}  // namespace conform::CONFORM_CUDA_NS
