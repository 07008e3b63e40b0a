// GPU mutants of softmax and lse_merge (docs/cuda.md, "Mutants"; docs/softmax.md).
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/softmax.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct SkipRescale : NoBug {
    static constexpr bool kSkipRescale = true;
};
struct NaiveLogsumexp : LseMergeNoBug {
    static constexpr bool kNaiveLogsumexp = true;
};

}  // namespace

void register_mutants_softmax(Registry& r) {
    const Format f = Format::fp32;
    KernelInfo k = mutant_kernel_info(
        "softmax", "rescale_skipped", f, "14 reduction axis/granularity",
        "merging two threads' online states, one side's sum is not rescaled to the common maximum");
    k.acc = Format::fp32;  // as the kernel declares
    k.fn = [f, kernel = k.name](const KernelCall& c) { run_softmax<false, SkipRescale>(c, f, kernel.c_str()); };
    r.add(std::move(k));
    r.add(lse_merge_info<NaiveLogsumexp>(mutant_kernel_info("lse_merge", "naive_logsumexp", f, "1 exp-range overflow",
                                                            "lse = logf(expf(lse_a) + expf(lse_b)): overflows and "
                                                            "underflows beyond |lse| ~ 88"),
                                         f));
}

}  // namespace conform::CONFORM_CUDA_NS
