// GPU mutants of native sparse attention (docs/nsa_attention.md, "GPU
// mutants"): the kernels of impls/cuda/nsa.cuh with one bug each.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/nsa.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct NsaCompressedUncausal : NsaNoBug {
    static constexpr bool kCompressedUncausal = true;
};
struct NsaFirstHeadImportance : NsaNoBug {
    static constexpr bool kFirstHeadImportance = true;
};
struct NsaGatesTransposed : NsaNoBug {
    static constexpr bool kGatesTransposed = true;
};

template <class Bug>
void add_nsa_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    const Format f = Format::fp32;  // one storage type instantiated (build time)
    KernelInfo k = nsa_info(mutant_kernel_info("nsa_attention", bug, f, bug_class, what), f);
    k.fn = [kernel = k.name](const KernelCall& c) { run_nsa_as<float, Bug>(c, kernel.c_str(), Launch{}); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_nsa(Registry& r) {
    add_nsa_mutant<NsaCompressedUncausal>(r, "compressed_uncausal", "2 mask geometry",
                                          "the compressed branch sees every complete block, future ones included");
    add_nsa_mutant<NsaFirstHeadImportance>(r, "first_head_importance", "14 reduction axis/granularity",
                                           "the selection ranks the group's first head's weights, not their sum over the group");
    add_nsa_mutant<NsaGatesTransposed>(r, "gates_transposed", "5 layout transposition",
                                       "the gates read as [3, Hq, Lq], not [Hq, Lq, 3]");
}

}  // namespace conform::CONFORM_CUDA_NS
