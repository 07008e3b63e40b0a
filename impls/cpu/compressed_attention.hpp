// CPU kernels of DeepSeek-V4 compressed attention (op `compressed_attention`,
// docs/compressed_attention.md "Kernels") and the switches their mutants
// turn on.
#pragma once
#include "impls/registry.hpp"

namespace conform {

void register_cpu_compressed_attention(Registry& r);      // impls/cpu/compressed_attention.cpp
void register_mutants_compressed_attention(Registry& r);  // impls/mutants/compressed_attention.cpp

namespace cpu {

// The ways compressed-attention kernels go wrong; all off is the kernel.
struct CsaFlaws {
    bool no_overlap = false;        // CSA: grouping b pooled over [m i, m (i + 1)) like a (no shift, no overlap)
    bool mean_pool = false;         // HCA: the entry is the plain mean of C over its m rows (no softmax gate)
    bool separate_softmax = false;  // one softmax per grouping, the two pooled results added (the seed sample)
    bool bias_dropped = false;      // the positional biases B^a, B^b never added to the gate logits
    bool entry_vs_token = false;    // eligible when entry index i <= token index t (tril(ones(L, n_blk)))
    bool window_plus_one = false;   // the sliding branch keeps raw rows [t - window, t]: window + 1 of them
    bool ties_to_higher = false;    // equal scores: the higher index first (a legitimate rule: must pass)
};

// A call's dimensions and parameters, validated as the oracle validates
// them (oracle::csa_setup: std::invalid_argument naming the input or
// parameter) and the outputs' shapes checked; shared with the CUDA kernels
// (impls/cuda/compressed_attention.cuh).  n = floor(L / m) entries; slots
// k (CSA) or n (HCA); scale resolved (0: 1/sqrt(c)).
struct CsaKDims {
    std::int64_t mode, m, k, window, h, l, c, hi, n, slots;
    double scale;
};
CsaKDims csa_dims(const KernelCall& c);

// The op on one call.  The compressor in FP32 (z + b, max-shifted expf, the
// weighted sum divided by the sum), each entry stored in the inputs' format
// (the KV cache); then either the suite's own kernels (`naive` false:
// cpu.scalar.lightning_indexer's dots, topk_select's partial sort,
// cpu.scalar.attention over [entries; raw] with a 0/-inf mask) or plain
// loops for every stage (`naive`: the baseline).
void compressed_attention_call(const KernelCall& c, bool naive, const CsaFlaws& flaws = {});

// What these kernels declare to the bound: the pooling passes over at most
// kAttnKeyTile rows at once (one pass over its 2m or m rows: N_b = 1 while
// 2m <= 64), and the core attention is cpu.scalar.attention's key tiles of
// kAttnKeyTile (the naive loop: one pass, fewer tiles still).
void declare_csa_tiles(KernelInfo& k);

}  // namespace cpu
}  // namespace conform
