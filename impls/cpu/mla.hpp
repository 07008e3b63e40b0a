// CPU kernels of multi-head latent attention (op `mla`, docs/mla.md
// "Kernels"): the explicit form (prefill: per-head keys and values
// up-projected from the latents) and the absorbed form (decode: W_uk folded
// into the query, attention over the latents, W_uv after the average), and
// the switches their mutants turn on.
#pragma once
#include "impls/registry.hpp"
#include "numerics/mla_dims.hpp"

namespace conform {

void register_cpu_mla(Registry& r);      // impls/cpu/mla.cpp
void register_mutants_mla(Registry& r);  // impls/mutants/mla.cpp

namespace cpu {

enum class MlaKernelForm { explicit_kv, absorbed };

// mla's shapes and scalar parameters of one call, validated (the CPU and
// CUDA kernels'): H heads, L new tokens, Lc cached, the widths; the first
// new token's position, causal, whether the cache's rope keys are rotated,
// the softmax scale (0: 1/sqrt(d_nope + d_r) in FP32, two roundings), and
// RoPE's pairing and base.
using conform::MlaDims;  // numerics/mla_dims.hpp, shared with the oracle's bound
struct MlaSetup {
    MlaDims d;
    std::int64_t offset;
    bool causal, cache_rotated;
    float scale;
    int pairing;
    double base;
};
MlaSetup mla_setup(const KernelCall& c);

// The ways MLA kernels go wrong; all off is the kernel.
struct MlaFlaws {
    bool rope_key_per_head = false;  // new tokens' k^R from head i's own rope query rows (MHA habit), not W_kr
    bool uk_untransposed = false;    // absorbed: W_uk[i] [d_nope, d_c] read as [d_c, d_nope] (no transpose)
    bool cache_rerotated = false;    // cached rope keys rotated on read although the cache holds them rotated
};

// The op on one call, in FP32 arithmetic with the storage format of h for
// every stored intermediate (latent, rope key, queries, k^C and v or the
// absorbed query and the averaged latent, o); lse in FP32.  `naive` rounds
// every accumulation step to the storage format too (the baseline).
void mla_call(const KernelCall& c, MlaKernelForm form, const MlaFlaws& flaws = {}, bool naive = false);

}  // namespace cpu
}  // namespace conform
