// GPU mutants of sparse attention's selection (docs/sparse.md, "GPU
// mutants"): the kernels of impls/cuda/sparse.cuh with one bug each, in FP32.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/sparse.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct SelectArgmaxHalfWarp : SparseNoBug {
    static constexpr bool kArgmaxHalfWarp = true;
};
struct ForcedInPool : SparseNoBug {
    static constexpr bool kForcedInPool = true;
};
struct WeightsTransposed : SparseNoBug {
    static constexpr bool kWeightsTransposed = true;
};
struct ReluAfterSum : SparseNoBug {
    static constexpr bool kReluAfterSum = true;
};

template <class Bug, bool kIndexer>
void add_sparse_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    KernelInfo k = mutant_kernel_info(kIndexer ? "lightning_indexer" : "topk_select", bug, Format::fp32, bug_class, what);
    k.out = k.acc = Format::fp32;
    // FP32 only: one storage type instantiated (build time).
    k.fn = [kernel = k.name](const KernelCall& c) {
        if constexpr (kIndexer) run_indexer_as<float, Bug>(c, kernel.c_str(), Launch{});
        else run_topk_select_as<float, Bug>(c, kernel.c_str(), Launch{});
    };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_sparse(Registry& r) {
    add_sparse_mutant<SelectArgmaxHalfWarp, false>(r, "argmax_half_warp", "16 GPU structure",
                                             "the argmax butterfly spans 16 lanes: lane 0 records the best of its half-warp");
    add_sparse_mutant<ForcedInPool, false>(r, "forced_in_pool", "17 discrete choices",
                                           "the forced block also competes for the k slots: it can appear twice");
    add_sparse_mutant<WeightsTransposed, true>(r, "weights_transposed", "5 layout transposition",
                                               "the head weights read as [H, Lq] where w is [Lq, H]");
    add_sparse_mutant<ReluAfterSum, true>(r, "relu_after_head_sum", "11 wrong function variant",
                                          "ReLU(sum_h w q.k) for sum_h w ReLU(q.k): a negative head cancels a positive one");
}

}  // namespace conform::CONFORM_CUDA_NS
