// CPU attention forward kernels and their mutants (docs/attention.md,
// "Kernels").  Registration hooks are declared here rather than in
// impls/registry.hpp; builtin_registry() (impls/registry.cpp) calls them.
#pragma once
#include <vector>

#include "impls/registry.hpp"

namespace conform {

namespace cpu {
// Tile sizes of cpu.simd.attention / cpu.scalar.attention: kAttnQueryTile
// query rows share each key tile while it is hot in cache; kAttnKeyTile keys
// per online-softmax step (one rescale per tile).  A kernel call overrides the
// key tile with the parameter `block` (> 0); the verdict's N_b = ceil(Lk / B_k).
inline constexpr long kAttnQueryTile = 32;
inline constexpr long kAttnKeyTile = 64;
}  // namespace cpu

// The output gate of the kernels: none (op attention), sigmoid (op
// gated_attention: o * sigmoid(g), docs/gated_attention.md), and the
// mutants' wrong gates: one_minus (o * sigmoid(-g) = o (1 - sigmoid(g))) and
// swapped (g * sigmoid(o): the sigmoid on the attention output), ignored
// (g read, o returned ungated).
enum class GateForm { none, sigmoid, one_minus, swapped, ignored };

// The sink logit of the kernels: none (ops attention, gated_attention),
// in_state (op sink_attention: each row's online softmax starts from the
// sink, m = sink, l = 1, acc = 0, docs/sink_attention.md), and the mutants'
// wrong sinks: dropped (read and ignored), kv_head (the sink of query head
// h's KV head), late (added after the key loop as e^(sink - m) with the
// keys' max m, so it never enters the max and a row without keys ignores
// it), lse_keys (o right, lse of the keys alone).
enum class SinkForm { none, in_state, dropped, kv_head, late, lse_keys };

namespace cpu {
// sigmoid(x) in FP32 without overflow (t = e^-|x|, then 1 / (1 + t) or
// t / (1 + t)), and element o of a finished row gated per `form` (an
// infinite o under a gate above -inf stays infinite: never inf * 0 = NaN).
float sigmoid32(float x);
float gate_output(float o, float g, GateForm form);
}  // namespace cpu

// op "attention", formats fp32/fp16/bf16 (FP32 accumulation):
//   cpu.simd.attention.<fmt>    AVX2 flash kernel (scalar path without AVX2)
//   cpu.scalar.attention.<fmt>  the same tiling in portable scalar code
//   cpu.naive.attention.<fmt>   baseline: materialized scores, plain softmax,
//                               every intermediate rounded to the format
// Inputs q [Hq, Lq, D], k [Hkv, Lk, D], v [Hkv, Lk, Dv], optional mask
// [Lq, Lk] (packed row-major, all in the kernel's format); outputs o
// [Hq, Lq, Dv] in the kernel's format and lse [Hq, Lq], computed in fp32 and
// stored into whatever format the caller allocated (allocate fp32: then it is
// the kernel's fp32 value unchanged).
// op "gated_attention": the same kernels (cpu.{simd,scalar,naive}.gated_attention.<fmt>)
// with inputs q, k, v, g [Hq, Lq, Dv] and the optional mask; each row's o_d
// is multiplied by sigmoid(g_d) in fp32 before the one rounding into the format.
// The kernels also as plain lists, which the kernel test and the benchmark
// use directly (Registry::add accepts only ops known to numerics/op.cpp,
// which declares "attention").
std::vector<KernelInfo> cpu_attention_kernels();
void register_cpu_attention(Registry& r);  // adds cpu_attention_kernels()
// op "sink_attention": the same kernels (cpu.{simd,scalar,naive}.sink_attention.<fmt>)
// with inputs q, k, v, sinks [Hq] and the optional mask.
// The scalar flash kernel of gated_attention in format f with the given gate,
// and of sink_attention with the given sink (the mutants' entry points).
void gated_attention_call(const KernelCall& c, Format f, GateForm gate);
void sink_attention_call(const KernelCall& c, Format f, SinkForm sink);

// Registers mutant.<op>.<bug>.{fp32,bf16}: `call` (one of the two above with
// a wrong form) in each format, o stored in it and lse in fp32.
void add_variant_mutants(Registry& r, const std::string& op, const std::string& bug, const std::string& bug_class,
                         const std::string& what, const std::function<void(const KernelCall&, Format)>& call);

// mutant.attention.<bug>.<fmt>: one wrong flash kernel per bug (in double,
// key tiles of 16), for fp32, fp16 and bf16.
std::vector<KernelInfo> attention_mutants();
void register_mutants_attention(Registry& r);  // adds attention_mutants()

// mutant.gated_attention.<bug>.<fmt>: the scalar gated kernel with a wrong
// gate (GateForm), fp32 and bf16 (impls/mutants/attention_gated.cpp).
void register_mutants_gated_attention(Registry& r);

// mutant.sink_attention.<bug>.<fmt>: the scalar sink kernel with a wrong
// sink (SinkForm), fp32 and bf16 (impls/mutants/attention_sink.cpp).
void register_mutants_sink_attention(Registry& r);

}  // namespace conform
