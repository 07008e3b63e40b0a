// GPU mutants of the MoE router (docs/moe.md, "GPU mutants"): the kernels
// of impls/cuda/moe.cuh with one bug each, in FP32.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/moe.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct RouterArgmaxHalfWarp : RouterNoBug {
    static constexpr bool kArgmaxHalfWarp = true;
};
struct UnbiasedGroups : RouterNoBug {
    static constexpr bool kUnbiasedGroups = true;
};
struct CapacitySlotMajor : RouterNoBug {
    static constexpr bool kCapacitySlotMajor = true;
};
struct Bf16Logits : RouterNoBug {
    static constexpr bool kBf16Logits = true;
};

template <class Bug>
void add_moe_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    KernelInfo k = mutant_kernel_info("moe_router", bug, Format::fp32, bug_class, what);
    k.out = Format::fp32;
    k.acc = Format::fp32;
    // FP32 only: one storage type instantiated (build time).
    k.fn = [kernel = k.name](const KernelCall& c) { run_router_as<float, Bug>(c, kernel.c_str(), Launch{}); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_moe(Registry& r) {
    add_moe_mutant<RouterArgmaxHalfWarp>(r, "argmax_half_warp", "16 GPU structure",
                                   "the top-k argmax butterfly spans 16 lanes: lane 0 records the best of its half-warp");
    add_moe_mutant<UnbiasedGroups>(r, "unbiased_group_scores", "17 discrete choices",
                                   "groups ranked by their scores without the selection bias (p, not p + b)");
    add_moe_mutant<CapacitySlotMajor>(r, "capacity_slot_major", "17 discrete choices",
                                      "capacity filled slot by slot (every token's first choice before any second one), "
                                      "not in token order");
    add_moe_mutant<Bf16Logits>(r, "bf16_logits", "6 low-precision accumulation/storage",
                               "the router GEMM's logits stored in bf16 before the softmax");
}

}  // namespace conform::CONFORM_CUDA_NS
