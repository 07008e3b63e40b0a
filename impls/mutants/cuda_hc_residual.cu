// GPU mutants of the Hyper-Connections mixings (docs/hc_residual.md, "GPU
// mutants"): the kernel of impls/cuda/hc_residual.cuh with one barrier
// missing, in FP32.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/hc_residual.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct NoBarrier : HcNoBug {
    static constexpr bool kNoBarrier = true;
};
struct NoTrailingBarrier : HcNoBug {
    static constexpr bool kNoTrailingBarrier = true;
};

template <bool kProject, class Bug>
void add_hc_residual_mutant(Registry& r, const char* bug, const char* what) {
    const Format f = Format::fp32;
    KernelInfo k = mutant_kernel_info(kProject ? "mhc_residual" : "hc_residual", bug, f, "16 GPU structure", what);
    k.acc = Format::fp32;
    // FP32 only: one storage type instantiated (build time).
    with_launches(k, [kernel = k.name](Launch l) -> KernelFn {
        return [kernel, l](const KernelCall& c) { run_hc_residual_as<float, kProject, Bug>(c, kernel.c_str(), l); };
    });
    r.add(std::move(k));
}

}  // namespace

void register_mutants_hc_residual(Registry& r) {
    add_hc_residual_mutant<true, NoBarrier>(r, "no_barrier",
                         "no barrier between the coefficients and the channels: threads mix with a, c and B before "
                         "the first threads and warp 0's projection wrote them");
    add_hc_residual_mutant<false, NoTrailingBarrier>(r, "no_trailing_barrier",
                                  "no barrier at the end of a token: with several tokens per block, fast threads "
                                  "write the next token's coefficients while slow ones still mix the current one");
}

}  // namespace conform::CONFORM_CUDA_NS
