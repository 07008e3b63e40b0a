// CUDA compressed attention (docs/compressed_attention.md, "Kernels"):
// cuda.compressed_attention.<fmt> for fp32, fp16 and bf16 storage.  The
// kernels are compressed_attention.cuh's: the CPU kernels' compressor and
// selection arithmetic on the device (cuda.lightning_indexer's and
// cuda.topk_select's kernels), then FP32 attention under the mask.
#include "impls/cuda/compressed_attention.cuh"
#include "impls/cuda/cuda.hpp"

namespace conform::CONFORM_CUDA_NS {

KernelInfo compressed_attention_info(KernelInfo k, Format f) {
    k.acc = Format::fp32;
    k.out_formats = {f, f, Format::fp32};
    // The compressor is one pass over its 2m (or m) rows: within the model of
    // passes of at most 64 rows (N_b = ceil(2m / 64) >= 1).  The attention
    // takes 32 keys a step.
    k.declared["compressor_block"] = 64;
    k.declared["key_block"] = kSparseKeyStep;
    return k;
}

void register_compressed_attention(Registry& r) {
    add_composed(
        r, "compressed_attention", {Format::fp32, Format::fp16, Format::bf16}, compressed_attention_info,
        [](Format f) {
            return std::string("compressor a thread per (entry, channel): FP32 softmax pooling over the 2m or m rows "
                               "in order (z + b, max, expf, sums, one division), entries stored in ") +
                   name(f) + "; CSA: cuda.lightning_indexer's scores over the stored entries and cuda.topk_select's "
                             "selection (fully observed entries), HCA: the observed entries in order; FP32 attention "
                             "(a warp per row, 32 keys a step) over [entries; raw rows] under the selection's and the "
                             "window's mask, o rounded once; ids in FP32";
        },
        [](const KernelCall& c, Format f, const char* kernel, Launch l) { run_compressed_attention(c, f, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
