// GPU mutants of the chunkwise gated delta rule (docs/gdn.md, "GPU
// mutants"): the kernel of impls/cuda/gdn.cuh with one bug each.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/gdn.cuh"

#include <type_traits>

namespace conform::CONFORM_CUDA_NS {
namespace {

struct DecayCarriedOver : DeltaNoBug {
    static constexpr bool kDecayCarriedOver = true;
};
struct Bf16Solve : DeltaNoBug {
    static constexpr bool kBf16Solve = true;
};
struct Bf16State : DeltaNoBug {
    static constexpr bool kBf16State = true;
};
struct GridIgnoresSequences : DeltaNoBug {
    static constexpr bool kGridIgnoresSequences = true;
};
struct FirstStateOnly : DeltaNoBug {
    static constexpr bool kFirstStateOnly = true;
};

template <bool PerChannel, class Bug, class S>
void add_gdn_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    const Format f = std::is_same_v<S, float> ? Format::fp32 : Format::bf16;
    KernelInfo k = mutant_kernel_info(PerChannel ? "kda" : "gdn", bug, f, bug_class, what);
    delta_declare(k, f);
    // Only the mutant's own storage type instantiated (build time).
    with_launches(k, [f, kernel = k.name](Launch l) -> KernelFn {
        return [f, kernel, l](const KernelCall& c) { run_delta_as<S, PerChannel, Bug>(c, f, kernel.c_str(), l); };
    });
    r.add(std::move(k));
}

}  // namespace

void register_mutants_gdn(Registry& r) {
    const char* hand_off = "3 state hand-off";
    const char* low = "6 low-precision accumulation/storage";
    add_gdn_mutant<false, DecayCarriedOver, float>(r, "decay_carried_over", hand_off,
                                 "each chunk's decay from its start begins with the previous chunk's last gate, "
                                 "already in the state: that token's decay applied twice");
    add_gdn_mutant<true, DecayCarriedOver, __nv_bfloat16>(r, "decay_carried_over", hand_off,
                                "per channel, each chunk's running decay from its start begins with the previous "
                                "chunk's last gate");
    add_gdn_mutant<true, Bf16Solve, float>(r, "bf16_solve", low,
                         "the UT solve's rows v~_r rounded to bf16 (the triangular solve in BF16)");
    add_gdn_mutant<false, Bf16State, __nv_bfloat16>(r, "bf16_state", low, "the state rounded to bf16 after every chunk");
    add_gdn_mutant<true, GridIgnoresSequences, float>(r, "grid_ignores_sequences", hand_off,
                                    "the grid is one block per head: packed sequences run one after another on one "
                                    "state (cu_seqlens ignored by the grid), each from the previous one's final state");
    add_gdn_mutant<false, FirstStateOnly, __nv_bfloat16>(r, "first_state_only", hand_off,
                               "initial_state read for the first packed sequence only: the others start from zero");
}

}  // namespace conform::CONFORM_CUDA_NS
