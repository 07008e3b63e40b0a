// GPU mutants of the FP8 family (docs/fp8.md, "GPU mutants"): the kernels
// of impls/cuda/fp8_gemm.cuh and fp8_quantize.cuh with one bug each.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/fp8_gemm.cuh"
#include "impls/cuda/fp8_quantize.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct BlockSumCarried : Fp8NoBug {
    static constexpr bool kBlockSumCarried = true;
};
struct ScaleBByRow : Fp8NoBug {
    static constexpr bool kScaleBByRow = true;
};
struct LastBlockDropped : Fp8NoBug {
    static constexpr bool kLastBlockDropped = true;
};

struct QuotientCvt : Fp8QuantNoBug {
    static constexpr bool kQuotientCvt = true;
};
struct AmaxHalfWarp : Fp8QuantNoBug {
    static constexpr bool kHalfWarp = true;
};

template <class Bug>
void add_quantize(Registry& r, const char* bug, const char* bug_class, const char* what) {
    r.add(fp8_quantize_info<Bug>(mutant_kernel_info("fp8_quantize", bug, Format::fp32, bug_class, what), Format::fp32,
                                 Format::fp8_e4m3));
}

template <class Bug>
void add_fp8_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    KernelInfo k = mutant_kernel_info("fp8_gemm", bug, Format::fp8_e4m3, bug_class, what);
    r.add(fp8_gemm_info<Bug>(std::move(k), Format::fp8_e4m3, Format::fp32));
}

}  // namespace

void register_mutants_fp8(Registry& r) {
    add_fp8_mutant<BlockSumCarried>(r, "block_sum_carried", "6 low-precision accumulation/storage",
                         "the block sum's fragments not zeroed at a K block's start: every earlier block is promoted "
                         "again with each later block's scales");
    add_fp8_mutant<ScaleBByRow>(r, "scale_b_by_row", "5 layout transposition",
                     "scale_b's column block taken from the output's row index instead of its column");
    add_fp8_mutant<LastBlockDropped>(r, "last_block_dropped", "16 tails",
                          "K / block whole blocks only: a partial last K block is never added");
    add_quantize<QuotientCvt>(r, "fp32_quotient_cvt", "13 rounding/saturation",
                              "the FP32 quotient x / s converted as the hardware's cvt.rn.satfinite does, ties to "
                              "even: two roundings, a code off where the quotient lands on an FP8 midpoint");
    add_quantize<AmaxHalfWarp>(r, "amax_half_warp", "14 reduction axis/granularity",
                               "the block's amax reduced over 16 lanes of each warp: half the lanes' maxima lost");
}

}  // namespace conform::CONFORM_CUDA_NS
