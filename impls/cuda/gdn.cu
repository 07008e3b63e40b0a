// CUDA chunkwise gated delta rule (docs/gdn.md, "CUDA kernels"):
// cuda.gdn.<fmt> and cuda.kda.<fmt>, fp32 and bf16 storage, FP32 state and
// arithmetic (declared acc fp32: the CPU kernels' bound), the bf16 kernels'
// state update on tensor cores (declared: the bound's tensor-core update).
// The kernel is gdn.cuh's: one block per (sequence, head), cu_seqlens in
// the grid.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/gdn.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

template <bool PerChannel>
void add_gdn(Registry& r) {
    const char* op = PerChannel ? "kda" : "gdn";
    for (Format f : {Format::fp32, Format::bf16}) {
        KernelInfo k = kernel_info(op, f, "");
        delta_declare(k, f);
        k.description = std::string("chunkwise (param chunk), one block per (sequence, head) with cu_seqlens in the "
                                    "grid, FP32 state and arithmetic, the chunk in shared memory where it fits; decay factors exp of "
                                    "running log-decay sums over i < r only") +
                        (PerChannel ? ", pairs across sub-chunks of 8 split into two factors <= 1" : "") +
                        "; the UT solve by forward substitution (a thread per column of V); " +
                        (f == Format::bf16 ? "the state update on tensor cores (mma.m16n8k16, K_e and V~ in bf16, "
                                             "FP32 accumulation; declared); "
                                           : "") +
                        "y rounded once to " + name(f) + ", state in fp32";
        with_launches(k, [f, kernel = k.name](Launch l) -> KernelFn {
            return [f, kernel, l](const KernelCall& c) { run_delta<PerChannel>(c, f, kernel.c_str(), l); };
        });
        r.add(std::move(k));
    }
}

}  // namespace

void register_gdn(Registry& r) {
    add_gdn<false>(r);
    add_gdn<true>(r);
}

}  // namespace conform::CONFORM_CUDA_NS
