// CPU kernels of native sparse attention (op `nsa_attention`,
// docs/nsa_attention.md "Kernels") and the switches their mutants turn on.
#pragma once
#include "impls/registry.hpp"

namespace conform {

void register_cpu_nsa(Registry& r);      // impls/cpu/nsa.cpp
void register_mutants_nsa(Registry& r);  // impls/mutants/nsa.cpp

namespace cpu {

// The ways NSA kernels go wrong; all off is the kernel.
struct NsaFlaws {
    bool gate_in_logits = false;       // sigmoid(g) multiplied into each branch's logits, branch outputs summed ungated
    bool cv_equals_ck = false;         // the seed sample's cv = ck: compressed values are the compressed keys
    bool future_block = false;         // a started, unfinished block is selectable (topk_select causal 2)
    bool local_missing = false;        // the own block never forced
    bool masked_topk = false;          // the samples' -inf masking, top-k over every block: future blocks fill free slots
    bool compressed_uncausal = false;  // the seed sample's compressed branch: every complete block visible
    bool ties_to_higher = false;       // equal importance: the higher block first (a legitimate rule: must pass)
};

// A call's dimensions and parameters, validated as the oracle validates
// them (oracle::nsa_setup: std::invalid_argument naming the input or
// parameter) and the outputs' shapes checked; shared with the CUDA kernels
// (impls/cuda/nsa.cuh).  offset = Lk - Lq: query row i sits at position
// offset + i; blocks = floor(Lk / l) compressed keys, cand = ceil(Lk / l)
// selectable blocks.
struct NsaShape {
    long hq, hkv, lq, lk, d, dv, group, l, n, w, force, offset, blocks, cand;
    float scale;
    long pos(long i) const { return offset + i; }
};
NsaShape nsa_dims(const KernelCall& c);

// The op on one call, FP32 arithmetic: K_cmp and V_cmp (FP32 block sums
// divided by l) stored in the input format; the compressed branch and the
// importance by one direct FP32 softmax per query row; the selection by
// topk_select's kernel over the group's FP32 importance sums; the selected
// and window branches by the FP32 attention kernel (cpu.scalar.attention:
// a 0/-inf mask per KV head, window w) or, `naive`, by the same direct
// FP32 softmax over the branch's keys; o = sigmoid32(g_c) o_c +
// sigmoid32(g_s) o_s + sigmoid32(g_w) o_w in FP32, rounded once.
void nsa_call(const KernelCall& c, bool naive, const NsaFlaws& flaws = {});

}  // namespace cpu
}  // namespace conform
