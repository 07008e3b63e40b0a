// CUDA kernels of the norm family (rms_norm with zero_centered, layer_norm,
// l2_norm; docs/norm.md for the formulas, special values and the bound):
// cuda.<op>.<fmt> for fp32, fp16 and bf16 storage.
//
// One block per row (grid-stride over rows), up to 256 threads striding
// over the row, every sum and product in double (declared acc fp64: the
// derived bound is then the output rounding plus about 2^-50 of the row's
// conditioning), block reductions by warp shuffles (reduce.cuh), one
// rounding into the storage format.  layer_norm is two-pass: the mean,
// then the sum of squared deviations from it, so large-mean rows keep
// their spread.  The IEEE special values of docs/norm.md follow from the
// arithmetic itself (a NaN or Inf reaches the sums; 0 * Inf is NaN).
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/norm.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

template <Norm Op>
void add_norm(Registry& r, const char* op, const char* what) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = kernel_info(op, f, what);
        k.description = std::string(what) + ", in double: one block per row, warp-shuffle block sums, one rounding "
                        "into " + name(f);
        with_launches(k, [f, kernel = k.name](Launch l) -> KernelFn {
            return [f, kernel, l](const KernelCall& c) { run_norm<Op>(c, f, kernel.c_str(), l); };
        });
        r.add(std::move(k));
    }
}

}  // namespace

void register_norm(Registry& r) {
    add_norm<Norm::rms>(r, "rms_norm", "w' x / sqrt(mean(x^2) + eps)");
    add_norm<Norm::layer>(r, "layer_norm", "two-pass: w (x - mean) / sqrt(var + eps) + b");
    add_norm<Norm::l2>(r, "l2_norm", "x / sqrt(sum(x^2) + eps)");
}

}  // namespace conform::CONFORM_CUDA_NS
