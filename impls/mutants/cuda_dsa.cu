// GPU mutants of DeepSeek Sparse Attention (docs/dsa_attention.md, "GPU
// mutants"): the kernels of impls/cuda/dsa.cuh with one bug each.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/dsa.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct DsaTopLeft : DsaNoBug {
    static constexpr bool kTopLeft = true;
};
struct DsaBf16Scores : DsaNoBug {
    static constexpr bool kBf16Scores = true;
};

template <class Bug>
void add_dsa_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    const Format f = Format::fp32;
    KernelInfo k = attention_info(mutant_kernel_info("dsa_attention", bug, f, bug_class, what), f);
    k.out_formats = {f, Format::fp32, Format::fp32};
    // FP32 only: one storage type instantiated (build time).
    k.fn = [kernel = k.name](const KernelCall& c) { run_dsa_as<float, Bug>(c, kernel.c_str(), AttnLaunch{}); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_dsa(Registry& r) {
    add_dsa_mutant<DsaTopLeft>(r, "top_left_selection", "2 mask geometry",
                               "the selection's causal limit aligned top-left (s <= i), not bottom-right (s <= Lk - Lq + i)");
    add_dsa_mutant<DsaBf16Scores>(r, "bf16_index_scores", "6 low-precision accumulation/storage",
                                  "the indexer's scores rounded to BF16 before the top-k selection");
}

}  // namespace conform::CONFORM_CUDA_NS
