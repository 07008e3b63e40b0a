// INT8 mutants (docs/int8.md "Mutants"): the scalar quantize and GEMM kernels
// with one flaw each (cpu::QuantizeFlaws, cpu::GemmFlaws).
#include "impls/cpu/int8_block.hpp"
#include "impls/cpu/int8_gemm.hpp"

namespace conform {
namespace {

using Rounding = cpu::QuantizeFlaws::Rounding;

void add_quantize(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::QuantizeFlaws flaws) {
    KernelInfo k = mutant_info("quantize", bug, Format::fp32, Format::fp64, bug_class, what,
                               [flaws](const KernelCall& c) { cpu::quantize_scalar(c, flaws); });
    k.out = Format::int8;
    k.out_formats = {Format::int8, Format::fp32};
    r.add(std::move(k));
}

void add_gemm(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::GemmFlaws flaws) {
    KernelInfo k = mutant_info("int8_gemm", bug, Format::int8, Format::fp32, bug_class, what,
                               [flaws](const KernelCall& c) { cpu::int8_gemm_call(c, false, flaws); });
    k.name = std::string("mutant.int8_gemm.") + bug + ".fp32";
    k.out = Format::fp32;
    k.out_formats = {Format::fp64, Format::fp32};
    r.add(std::move(k));
}

void add_block(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::BlockFlaws flaws) {
    r.add(mutant_info("int8_block", bug, Format::fp16, Format::fp32, bug_class, what,
                      [flaws](const KernelCall& c) { cpu::int8_block_call(c, true, flaws); }));
}

// A mutant with the kernel's own formats (in, out, and per output).
void add_as(Registry& r, KernelInfo k, const KernelInfo& like) {
    k.in = like.in;
    k.out = like.out;
    k.out_formats = like.out_formats;
    r.add(std::move(k));
}

}  // namespace

void register_mutants_int8(Registry& r) {
    add_quantize(r, "ties_away", "13 rounding/saturation", "round half away from zero (std::round) instead of to even",
                 {.rounding = Rounding::half_away});
    add_quantize(r, "truncation", "13 rounding/saturation", "x / s truncated toward zero", {.rounding = Rounding::truncate});
    add_quantize(r, "wrap", "13 rounding/saturation", "codes past 127 wrap around modulo 256 instead of saturating",
                 {.wrap = true});
    add_quantize(r, "amax_wrong_axis", "14 reduction axis/granularity",
                 "per-token scales from column maxima, per-channel scales from row maxima", {.amax_wrong_axis = true});
    add_quantize(r, "token_is_tensor", "14 reduction axis/granularity",
                 "\"per-token\" quantization with one per-tensor scale", {.token_is_tensor = true});
    add_gemm(r, "int16_acc", "6 low-precision accumulation/storage", "accumulation in a saturating INT16 lane",
             {.int16_acc = true});
    add_gemm(r, "maddubs", "13 rounding/saturation",
             "vpmaddubsw on (a + 128) as u8 times b: pair sums saturate at 32767 (255 * 127 * 2 = 64770)",
             {.maddubs = true});
    add_gemm(r, "scale_a_tensor", "14 reduction axis/granularity", "per-token scales of a read as one per-tensor scale",
             {.scale_a_tensor = true});
    add_as(r,
           mutant_info("dequantize", "scale_wrong_axis", Format::fp32, Format::fp64, "14 reduction axis/granularity",
                       "the scale vector broadcast along the other axis (numpy's q * s for q * s[:, None])",
                       [](const KernelCall& c) { cpu::dequantize_scalar(c, true); }),
           *r.find("cpu.scalar.dequantize.fp32"));
    add_as(r,
           mutant_info("smooth_quant", "scale_inverted", Format::fp32, Format::fp64, "9 scale/offset convention",
                       "smoothing scale inverted: s_j = max|w_j|^(1 - alpha) / max|x_j|^alpha",
                       [](const KernelCall& c) { cpu::smooth_quant_scalar(c, true); }),
           *r.find("cpu.scalar.smooth_quant.fp32"));
    add_block(r, "pv_per_tensor", "14 reduction axis/granularity",
              "the attention probabilities P quantized with one scale per head instead of per query token",
              {.pv_per_tensor = true});
    add_block(r, "residual_int8", "10 cast order",
              "the residual stream h quantized to INT8 (per token) before the residual add, not kept in FP16",
              {.residual_int8 = true});
    add_block(r, "unscaled_scores", "9 scale/offset convention", "scores q k^T without the 1/sqrt(d_h)",
              {.unscaled_scores = true});
}

}  // namespace conform
