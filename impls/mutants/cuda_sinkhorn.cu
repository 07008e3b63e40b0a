// GPU mutants of Sinkhorn–Knopp (docs/sinkhorn.md, "GPU mutants"): the
// kernel of impls/cuda/sinkhorn.cuh with one bug each, in FP32.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/sinkhorn.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct StaleColumnSums : SinkhornNoBug {
    static constexpr bool kStaleColumnSums = true;
};
struct ExpDomainOnly : SinkhornNoBug {
    static constexpr bool kExpDomainOnly = true;
};

template <class Bug>
void add_sinkhorn_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    const Format f = Format::fp32;
    KernelInfo k = mutant_kernel_info("sinkhorn", bug, f, bug_class, what);
    k.acc = Format::fp32;
    // FP32 only: one storage type instantiated (build time).
    k.fn = [kernel = k.name](const KernelCall& c) { run_sinkhorn_as<float, Bug>(c, kernel.c_str(), Launch{}); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_sinkhorn(Registry& r) {
    add_sinkhorn_mutant<StaleColumnSums>(r, "stale_column_sums", "14 reduction axis/granularity",
                         "the column step divides by column sums taken before the row step of the same iteration "
                         "(the previous iteration's)");
    add_sinkhorn_mutant<ExpDomainOnly>(r, "exp_domain_only", "1 exp-range overflow",
                       "wide matrices stay in the exp domain: a column far below its row maxima underflows and is lost");
}

}  // namespace conform::CONFORM_CUDA_NS
