// GPU mutants of the INT8 family (docs/int8.md, "GPU mutants"): the GEMM
// kernel of impls/cuda/int8.cuh (fp32 y) and the quantize kernel of
// impls/cuda/int8_quant.cuh with one bug each.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/int8.cuh"
#include "impls/cuda/int8_quant.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

struct UnsignedA : Int8NoBug {
    static constexpr bool kUnsignedA = true;
};
struct Int16Acc : Int8NoBug {
    static constexpr bool kInt16Acc = true;
};

template <class Bug>
void add_int8_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    const Format out = Format::fp32;
    KernelInfo k = int8_gemm_info(mutant_kernel_info("int8_gemm", bug, out, bug_class, what), out);
    with_gemm_launches<Bug>(k, out);
    r.add(std::move(k));
}

struct TiesAway : QuantNoBug {
    static constexpr bool kTiesAway = true;
};

}  // namespace

void register_mutants_int8(Registry& r) {
    KernelInfo q = mutant_kernel_info("quantize", "ties_away", Format::fp16, "13 rounding/saturation",
                                      "codes by round() (half away from zero) instead of rint() (half to even)");
    q.out = Format::int8;
    q.out_formats = {Format::int8, Format::fp32};
    with_launches(q, [kernel = q.name](Launch l) -> KernelFn {
        return [kernel, l](const KernelCall& c) { run_quantize_as<__half, TiesAway>(c, kernel.c_str(), l); };
    });
    r.add(std::move(q));
    add_int8_mutant<UnsignedA>(r, "u8_times_s8", "13 rounding/saturation",
                   "mma .u8.s8: a's signed codes read as unsigned (q < 0 as 256 + q), as a dp4a or mma on the "
                   "wrong variant does");
    add_int8_mutant<Int16Acc>(r, "int16_accumulator", "6 low-precision accumulation/storage",
                  "each k step's products added into a wrapping INT16 accumulator");
}

}  // namespace conform::CONFORM_CUDA_NS
