// GPU mutants of the residual reads (docs/residual.md, "GPU mutants"): the
// kernels of impls/cuda/residual.cuh with one bug each, in FP32.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/residual.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct SourcesTransposed : ResidualNoBug {
    static constexpr bool kSourcesTransposed = true;
};
struct ResidualHalfWarp : ResidualNoBug {
    static constexpr bool kHalfWarp = true;
};
struct PlainSigmoid : ResidualNoBug {
    static constexpr bool kPlainSigmoid = true;
};
struct RankTailDropped : ResidualNoBug {
    static constexpr bool kRankTailDropped = true;
};

template <class Bug, bool kGated>
void add_residual_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    KernelInfo k = mutant_kernel_info(kGated ? "gated_residual" : "block_attn_res", bug, Format::fp32, bug_class, what);
    k.acc = Format::fp32;
    // FP32 only: one storage type instantiated (build time).
    k.fn = [kernel = k.name](const KernelCall& c) {
        if constexpr (kGated) run_gated_res_as<float, Bug>(c, kernel.c_str(), Launch{});
        else run_attn_res_as<float, Bug>(c, kernel.c_str(), Launch{});
    };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_residual(Registry& r) {
    add_residual_mutant<SourcesTransposed, false>(r, "sources_transposed", "5 layout transposition",
                                                  "the sources read as [T, N, d] where v is [N, T, d]");
    add_residual_mutant<ResidualHalfWarp, false>(r, "half_warp", "16 GPU structure",
                                                 "block reductions whose butterflies span 16 lanes: half of each "
                                                 "warp's sum of squares and logit lost");
    add_residual_mutant<PlainSigmoid, true>(r, "plain_sigmoid", "1 exp-range overflow",
                                            "the gate 1 / (1 + expf(-l)): expf overflows below l = -88 and the gate is 0");
    add_residual_mutant<RankTailDropped, true>(r, "rank_tail_dropped", "16 tails",
                                               "y = z A computed for the ranks below the last multiple of 4 only, the "
                                               "rest left 0");
}

}  // namespace conform::CONFORM_CUDA_NS
