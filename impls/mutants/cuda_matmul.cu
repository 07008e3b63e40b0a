// GPU mutants of the matrix product (docs/matmul.md, "GPU mutants"): the
// kernels of impls/cuda/matmul.cuh with one bug each.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/matmul.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct KTailDropped : MatmulNoBug {
    static constexpr bool kKTailDropped = true;
};
struct BFragmentSwapped : MatmulNoBug {
    static constexpr bool kBFragmentSwapped = true;
};
struct F16Accumulator : MatmulNoBug {
    static constexpr bool kF16Accumulator = true;
};
struct NTailDropped : MatmulNoBug {
    static constexpr bool kNTailDropped = true;
};
struct Tf32Operands : MatmulNoBug {
    static constexpr bool kTf32Operands = true;
};

template <class S, class Bug>
void add_matmul_mutant(Registry& r, Format f, const char* bug, const char* bug_class, const char* what) {
    KernelInfo k = matmul_info(mutant_kernel_info("matmul", bug, f, bug_class, what), f, f);
    with_matmul_launches<S, S, Bug>(k);
    r.add(std::move(k));
}

}  // namespace

void register_mutants_matmul(Registry& r) {
    add_matmul_mutant<__nv_bfloat16, KTailDropped>(r, Format::bf16, "k_tail_dropped", "16 tails",
                                     "K advanced in whole tiles of 32: the last partial tile is never loaded");
    add_matmul_mutant<__half, BFragmentSwapped>(r, Format::fp16, "b_fragment_swapped", "5 layout transposition",
                                  "the B fragment read with its k and n roles swapped (lane 4g + t takes k = g, "
                                  "columns 2t, 2t+1)");
    add_matmul_mutant<__half, F16Accumulator>(r, Format::fp16, "fp16_accumulator", "6 low-precision accumulation/storage",
                                "the accumulator rounded to FP16 after every mma (an mma with an f16 accumulator)");
    add_matmul_mutant<__nv_bfloat16, NTailDropped>(r, Format::bf16, "n_tail_dropped", "16 tails",
                                     "the grid covers whole 64-column tiles: columns past the last one are never written");
    add_matmul_mutant<float, Tf32Operands>(r, Format::fp32, "tf32_operands", "13 rounding/saturation",
                             "FP32 operands rounded to TF32 (10-bit fractions) before each FMA, as allow_tf32 does");
}

}  // namespace conform::CONFORM_CUDA_NS
