// GPU mutants of RoPE (docs/cuda.md, "Mutants").
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/rope.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct FastSincos : NoBug {
    static constexpr bool kFastSincos = true;
};

}  // namespace

void register_mutants_rope(Registry& r) {
    const Format f = Format::fp32;
    KernelInfo k = rope_info(mutant_kernel_info(
        "rope", "fast_sincos", f, "16 GPU structure",
        "the angle (offset + l) theta in float through __sinf/__cosf: wrong at long positions"));
    k.fn = [f, kernel = k.name](const KernelCall& c) { run_rope<FastSincos>(c, f, kernel.c_str()); };
    r.add(std::move(k));
}

}  // namespace conform::CONFORM_CUDA_NS
