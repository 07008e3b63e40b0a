// GPU mutants of compressed attention (docs/compressed_attention.md, "GPU
// mutants"): the kernels of impls/cuda/compressed_attention.cuh with one
// bug each.
#include "impls/cuda/compressed_attention.cuh"
#include "impls/cuda/cuda.hpp"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct CsaNoOverlap : CsaNoBug {
    static constexpr bool kNoOverlap = true;
};
struct CsaWindowPlusOne : CsaNoBug {
    static constexpr bool kWindowPlusOne = true;
};
struct CsaPartialEntries : CsaNoBug {
    static constexpr bool kPartialEntries = true;
};

template <class Bug>
void add_csa_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    const Format f = Format::fp32;  // one storage type instantiated (build time)
    KernelInfo k = compressed_attention_info(mutant_kernel_info("compressed_attention", bug, f, bug_class, what), f);
    k.fn = [kernel = k.name](const KernelCall& c) { run_compressed_attention_as<float, Bug>(c, kernel.c_str(), Launch{}); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_compressed_attention(Registry& r) {
    add_csa_mutant<CsaNoOverlap>(r, "no_overlap", "2 mask geometry",
                                 "grouping b pooled over the entry's own rows, not shifted onto the previous entry's");
    add_csa_mutant<CsaWindowPlusOne>(r, "window_plus_one", "2 mask geometry",
                                     "the sliding window opens raw rows [t - window, t]: window + 1 of them");
    add_csa_mutant<CsaPartialEntries>(r, "partial_entries", "17 discrete choices",
                                      "CSA's selection takes entries whose tokens are not all observed yet (a started "
                                      "entry is eligible)");
}

}  // namespace conform::CONFORM_CUDA_NS
