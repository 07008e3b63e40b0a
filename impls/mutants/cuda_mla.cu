// GPU mutants of multi-head latent attention (docs/mla.md, "GPU mutants"):
// the kernels of impls/cuda/mla.cuh with one bug each, in FP32.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/mla.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct MlaCausalOffByOne : MlaNoBug {
    static constexpr bool kCausalOffByOne = true;
};
struct MlaLatentScale : MlaNoBug {
    static constexpr bool kLatentScale = true;
};

template <class Bug>
void add_mla_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    KernelInfo k = mla_info(mutant_kernel_info("mla", bug, Format::fp32, bug_class, what), Format::fp32);
    // FP32 only: one storage type instantiated (build time).
    k.fn = [kernel = k.name](const KernelCall& c) { run_mla_as<float, Bug>(c, kernel.c_str(), Launch{}); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_mla(Registry& r) {
    add_mla_mutant<MlaCausalOffByOne>(r, "causal_off_by_one", "2 mask geometry",
                                      "the causal limit j <= Lc + t + 1: each new token also sees the next one");
    add_mla_mutant<MlaLatentScale>(r, "latent_width_scale", "9 scale/offset convention",
                                   "the logits scaled by 1/sqrt(d_c), the absorbed query's width, not "
                                   "1/sqrt(d_nope + d_r), the head dimension the scores belong to");
}

}  // namespace conform::CONFORM_CUDA_NS
