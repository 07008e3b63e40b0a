// gated_residual mutants (docs/residual.md "Mutants"): the scalar FP32 kernel
// (cpu::gated_residual_fp32) with one flaw each.
#include "impls/cpu/gated_residual.hpp"

namespace conform {
namespace {

void add_gated_mutant(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::GatedFlaws flaws) {
    r.add(mutant_info("gated_residual", bug, Format::fp32, Format::fp32, bug_class, what,
                      [flaws](const KernelCall& c) { cpu::gated_residual_fp32(c, flaws); }));
}

}  // namespace

void register_mutants_gated_residual(Registry& r) {
    add_gated_mutant(r, "gate_raw", "12 silently ignored parameter",
                     "the gate's low-rank map of the raw streams, not of RMSNorm(H)", {.gate_raw = true});
    add_gated_mutant(r, "read_raw", "12 silently ignored parameter", "h = sum_i gate_i * H_i: the raw streams read",
                     {.read_raw = true});
    add_gated_mutant(r, "index_shift", "5 layout transposition",
                     "stream i read with the gate of stream i - 1 (mod n): the gate block offset by one stream",
                     {.index_shift = true});
    add_gated_mutant(r, "softmax_gate", "14 reduction axis/granularity",
                     "the gate a softmax over the streams per channel instead of an element-wise sigmoid", {.softmax = true});
}

}  // namespace conform
