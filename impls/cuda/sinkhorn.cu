// CUDA Sinkhorn–Knopp (docs/sinkhorn.md, "CUDA kernels"): cuda.sinkhorn.<fmt>
// for fp32, fp16 and bf16 storage, FP32 arithmetic (declared acc fp32, the
// CPU kernels' bound).  The kernel is sinkhorn.cuh's: one warp per matrix,
// a lane per column, row sums by warp butterflies, the log domain for
// unguarded wide matrices.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/sinkhorn.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_sinkhorn(Registry& r) {
    add_per_format(r, "sinkhorn", {Format::fp32, Format::fp16, Format::bf16}, std::nullopt, Format::fp32,
                   "one warp per matrix (n <= 32), a lane per column: expf of the row-shifted logits, row sums by warp "
                   "butterflies, column sums per lane, IEEE division, FP32; the log domain for unguarded wide matrices",
                   true, [](const KernelCall& c, Format f, const char* kernel, Launch l) { run_sinkhorn(c, f, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
