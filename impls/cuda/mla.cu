// CUDA multi-head latent attention (docs/mla.md, "Kernels"):
// cuda.mla.<fmt> for fp32, fp16 and bf16 storage, the absorbed form
// (declared form = 1) in FP32 arithmetic with the CPU absorbed kernel's
// stored stages.  The kernels are mla.cuh's: a block per key row for the
// latent cache, a block per (head, token) for the attention.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/mla.cuh"
#include "impls/cuda/rope.cuh"  // kCudaPowUlps

namespace conform::CONFORM_CUDA_NS {

// The registry entry of cuda.mla.<fmt> or of a mutant built on it.
KernelInfo mla_info(KernelInfo k, Format f) {
    k.acc = Format::fp32;
    k.out_formats = {f, Format::fp32};
    k.declared["form"] = 1;
    k.declared["exp_ulps"] = 2;  // CUDA's expf (the bound's Lemma 4 takes the kernel's ulps)
    k.declared["pow_ulps"] = kCudaPowUlps;  // and its double pow (the RoPE tables' angles)
    k.conventions["mla_form"] = "absorbed";
    return k;
}

void register_mla(Registry& r) {
    add_composed(
        r, "mla", {Format::fp32, Format::fp16, Format::bf16}, mla_info,
        [](Format f) {
            return std::string("absorbed form: a block per key row (latent c = W_dkv h and RoPE(W_kr h), fmaf chains, "
                               "stored in ") +
                   name(f) + "), a block per (head, token): q, a = W_uk^T q^C stored, a thread per key for the logits, "
                             "a thread per latent channel for the expf-weighted sum in key order, c-bar stored, o = "
                             "W_uv c-bar; the CPU absorbed kernel's arithmetic and order";
        },
        [](const KernelCall& c, Format f, const char* kernel, Launch l) { run_mla(c, f, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
