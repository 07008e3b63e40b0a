// CPU kernels of the gated delta rule (docs/gdn.md, "Kernels"): Gated
// DeltaNet (op gdn, one decay per head and token) and Kimi Delta Attention
// (op kda, one decay per key channel), chunkwise with an FP32 state, and
// their naive recurrent baselines; plus the mutants (impls/mutants/gdn.cpp).
#pragma once
#include <vector>

#include "impls/registry.hpp"

namespace conform {

namespace cpu {
// KDA's per-channel decay cannot be pulled out of the chunk's Gram matrices,
// so the chunk is cut into sub-chunks of this many tokens: pairs inside a
// sub-chunk take exp of their own log-decay difference, pairs across
// sub-chunks split it at the later sub-chunk's start into two factors <= 1.
inline constexpr long kKdaSubChunk = 8;
// Largest accepted value of the `chunk` parameter (workspace size).
inline constexpr long kDeltaMaxChunk = 1024;
// The AVX2 kernels' exp, in place over n floats (NaN kept, overflow +inf,
// one rounding into the subnormals); call only when has_avx2().  For tests.
void delta_exp_avx2(float* x, long n);

// One sequence's call (not packed) as the chunkwise kernels read it, every
// shape, format and parameter checked (std::invalid_argument naming what is
// wrong): the CPU kernels' and the CUDA kernels' (impls/cuda/gdn.cuh) checks.
struct DeltaCall {
    long tokens = 0, heads = 0, dk = 0, dv = 0;
    long chunk = 64;  // param chunk, 1 .. kDeltaMaxChunk
    bool l2norm = false, has_state = false;
    float l2_eps = 1e-6f;  // param l2_eps rounded to fp32
    float scale = 1;       // param scale, or 1/sqrt(d_k) when 0, rounded once to fp32
};
DeltaCall delta_call(const KernelCall& c, Format f, bool per_channel);
}  // namespace cpu

// A packed call (cu_seqlens, numerics/delta_varlen.hpp) run as one call of
// `run` per sequence: chunks restart at every sequence's first token, and
// sequence n starts from initial_state[n] (zero when not given).  With
// `carry_state` (a mutant's bug) sequence n > 0 instead starts from the
// final state of sequence n - 1.  An unpacked call goes to `run` as it is.
void delta_per_sequence(const KernelCall& call, const KernelFn& run, bool carry_state = false);

// ops "gdn" and "kda", formats fp32 and bf16 (every input in the kernel's
// format except initial_state, which may be in any format; y in the
// kernel's format, state in fp32):
//   cpu.simd.<op>.<fmt>    AVX2 chunkwise kernel (scalar path without AVX2)
//   cpu.scalar.<op>.<fmt>  the same chunkwise algorithm in portable scalar code
//   cpu.naive.<op>.<fmt>   baseline: the plain recurrence, FP32 state
// Param chunk (default 64, 1 .. kDeltaMaxChunk): tokens per chunk.  Packed
// calls through delta_per_sequence.
std::vector<KernelInfo> cpu_gdn_kernels();
void register_cpu_gdn(Registry& r);  // adds cpu_gdn_kernels()

// mutant.<op>.<bug>.<fmt>: one wrong delta-rule kernel per bug.
std::vector<KernelInfo> gdn_mutants();
void register_mutants_gdn(Registry& r);  // adds gdn_mutants()

}  // namespace conform
