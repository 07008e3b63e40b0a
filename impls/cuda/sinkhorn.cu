// CUDA Sinkhorn–Knopp (docs/sinkhorn.md, "CUDA kernels"): cuda.sinkhorn.<fmt>
// for fp32, fp16 and bf16 storage, FP32 arithmetic (declared acc fp32, the
// CPU kernels' bound).  The kernel is sinkhorn.cuh's: one warp per matrix,
// a lane per column, row sums by warp butterflies, the log domain for
// unguarded wide matrices.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/sinkhorn.cuh"

namespace conform::CONFORM_CUDA_NS {

void register_sinkhorn(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = kernel_info("sinkhorn", f, "");
        k.acc = Format::fp32;
        k.description = std::string("one warp per matrix (n <= 32), a lane per column: expf of the row-shifted logits, "
                                    "row sums by warp butterflies, column sums per lane, IEEE division, FP32; the log "
                                    "domain for unguarded wide matrices; one rounding into ") +
                        name(f);
        with_launches(k, [f, kernel = k.name](Launch l) -> KernelFn {
            return [f, kernel, l](const KernelCall& c) { run_sinkhorn(c, f, kernel.c_str(), l); };
        });
        r.add(std::move(k));
    }
}

}  // namespace conform::CONFORM_CUDA_NS
