// GPU mutants of the norm family (docs/cuda.md, "Mutants"): the cuda
// kernels of impls/cuda/norm.cuh with one bug each (reduce.cuh's NoBug
// flags), registered in the cuda and cuda-emu backends with role mutant.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/norm.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct HalfWarp : NoBug {
    static constexpr bool kHalfWarp = true;
};
struct EarlyRead : NoBug {
    static constexpr bool kEarlyRead = true;
};
struct Fp16Sum : NoBug {
    static constexpr bool kFp16Sum = true;
};
struct PlainWeight : NoBug {
    static constexpr bool kPlainWeight = true;
};

template <Norm Op, class Bug>
void add_norm_mutant(Registry& r, const char* op, const char* bug, Format f, const char* bug_class, const char* what) {
    KernelInfo k = mutant_kernel_info(op, bug, f, bug_class, what);
    k.fn = [f, kernel = k.name](const KernelCall& c) { run_norm<Op, Bug>(c, f, kernel.c_str()); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_norm(Registry& r) {
    add_norm_mutant<Norm::rms, HalfWarp>(r, "rms_norm", "half_warp", Format::fp32, "16 GPU structure",
                             "warp butterfly over 16 lanes (xor offsets 8..1): each warp's sum misses the other half");
    add_norm_mutant<Norm::layer, EarlyRead>(r, "layer_norm", "early_read", Format::fp32, "16 GPU structure",
                                "warp 0 reads the other warps' partial sums before __syncthreads");
    add_norm_mutant<Norm::l2, EarlyRead>(r, "l2_norm", "early_read", Format::bf16, "16 GPU structure",
                             "warp 0 reads the other warps' partial sums before __syncthreads");
    add_norm_mutant<Norm::rms, Fp16Sum>(r, "rms_norm", "fp16_sum", Format::fp16, "6 low-precision accumulation/storage",
                            "each thread's sum of squares accumulated in fp16");
    add_norm_mutant<Norm::rms, PlainWeight>(r, "rms_norm", "plain_weight", Format::bf16, "9 scale/offset convention",
                                "zero_centered = 1 ignored: w applied instead of 1 + w");
}

}  // namespace conform::CONFORM_CUDA_NS
