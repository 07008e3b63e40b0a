// FP8 mutants (docs/fp8.md "Mutants"): the portable kernels with one flaw each.
#include "impls/cpu/fp8.hpp"

namespace conform {
namespace {

void add_quantize(Registry& r, Format codes, const char* bug, const char* bug_class, const char* what, cpu::Fp8Flaws f) {
    KernelInfo k = mutant_info("fp8_quantize", bug, Format::fp32, Format::fp32, bug_class, what,
                               [f](const KernelCall& c) { cpu::fp8_quantize_call(c, false, f); });
    k.out = codes;
    k.out_formats = {codes, Format::fp32};
    r.add(std::move(k));
}

void add_gemm(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::Fp8Flaws f) {
    KernelInfo k = mutant_info("fp8_gemm", bug, Format::fp8_e4m3, Format::fp32, bug_class, what,
                               [f](const KernelCall& c) { cpu::fp8_gemm_call(c, false, f); });
    k.out = Format::fp32;
    // The 14-bit accumulator declares its precision (its honest claim): it
    // must fail for the missing promotion, not for its bits.
    if (f.no_promotion) k.declared["block_bits"] = 14;
    r.add(std::move(k));
}

}  // namespace

void register_mutants_fp8(Registry& r) {
    add_quantize(r, Format::fp8_e4m3, "overflow_nan", "13 rounding/saturation",
                 "E4M3 codes past 448 become NaN even when the call asks for saturation", {.overflow_nan = true});
    add_quantize(r, Format::fp8_e4m3, "per_tensor_scale", "14 reduction axis/granularity",
                 "one amax over the whole tensor: every block stores the tensor's scale", {.per_tensor_scale = true});
    add_quantize(r, Format::fp8_e4m3, "truncated", "18 rounding mode", "x / s rounded toward zero into FP8",
                 {.truncate = true});
    add_quantize(r, Format::fp8_e5m2, "reciprocal", "13 rounding/saturation",
                 "x * fl(1 / s): a second rounding that flips a code where x / s is an FP8 midpoint", {.reciprocal = true});
    add_gemm(r, "no_promotion", "6 low-precision accumulation/storage",
             "no promotion: every scaled product added into one accumulator of 14 significant bits (Hopper's FP8 "
             "tensor cores) over all of K", {.no_promotion = true});
    add_gemm(r, "a_scale_by_column", "5 layout transposition",
             "scale_a read at B's column block j / 128 instead of the K block", {.a_scale_by_column = true});
}

}  // namespace conform
