// GPU mutants of the MoE layers (docs/moe.md, "GPU mutants"): the kernels
// of impls/cuda/moe_layer.cuh with one bug each.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/moe_layer.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct LayerDownByToken : LayerNoBug {
    static constexpr bool kDownByToken = true;
};
struct LayerDroppedKept : LayerNoBug {
    static constexpr bool kDroppedKept = true;
};
struct LayerNormUnweighted : LayerNoBug {
    static constexpr bool kNormUnweighted = true;
};

template <class Bug>
void add_moe_layer_mutant(Registry& r, bool latent, const char* bug, const char* bug_class, const char* what) {
    const Format f = Format::fp32;  // one storage type instantiated (build time)
    KernelInfo k = moe_layer_info(mutant_kernel_info(latent ? "latent_moe" : "moe", bug, f, bug_class, what), f);
    k.fn = [latent, kernel = k.name](const KernelCall& c) { run_moe_layer_as<float, Bug>(c, latent, kernel.c_str(), Launch{}); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_moe_layer(Registry& r) {
    add_moe_layer_mutant<LayerDownByToken>(r, false, "down_by_token", "5 layout transposition",
                                           "the down projection reads the activation row of the token (slot 0's), not "
                                           "of the slot");
    add_moe_layer_mutant<LayerDroppedKept>(r, false, "capacity_ignored", "12 silently ignored parameter",
                                           "the slots dropped by the capacity computed and added with their weight 0: "
                                           "a dropped slot's non-finite expert output poisons the token's row");
    add_moe_layer_mutant<LayerNormUnweighted>(r, true, "norm_unweighted", "12 silently ignored parameter",
                                              "latent_moe's RMSNorm weight never applied");
}

}  // namespace conform::CONFORM_CUDA_NS
