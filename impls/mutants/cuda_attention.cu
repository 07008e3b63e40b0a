// GPU mutants of attention (docs/attention.md, "GPU mutants"): the
// tensor-core kernel with one bug each, in BF16 (the FP16 accumulator in
// FP16), each a bug GPU attention libraries have shipped.
#include "impls/cuda/attention.cuh"
#include "impls/cuda/cuda.hpp"

namespace conform::CONFORM_CUDA_NS {
namespace {

#define CONFORM_ATTN_BUG(Name, flag)              \
    struct Name : AttnNoBug {                     \
        static constexpr bool flag = true;        \
        static constexpr bool kTwoPaddings = true; \
    };
CONFORM_ATTN_BUG(CausalPerTile, kCausalPerTile)
CONFORM_ATTN_BUG(TopLeft, kTopLeft)
CONFORM_ATTN_BUG(TileMaxOnly, kTileMaxOnly)
CONFORM_ATTN_BUG(SkipORescale, kSkipORescale)
CONFORM_ATTN_BUG(UnguardedMinusInf, kUnguardedMinusInf)
CONFORM_ATTN_BUG(Fp16Accumulator, kFp16Accumulator)
CONFORM_ATTN_BUG(GqaModulo, kGqaModulo)
CONFORM_ATTN_BUG(SoftcapAfterMask, kSoftcapAfterMask)
CONFORM_ATTN_BUG(EmptySplitLseZero, kEmptySplitLseZero)
#undef CONFORM_ATTN_BUG

// Only the mutant's own storage type is instantiated (not run_attention's
// three), with two head-dimension paddings (kTwoPaddings) instead of four:
// nine bugs times the kernel's instantiations were most of the CUDA build
// time on the 2-core CI machine.
template <class Bug, class S = __nv_bfloat16>
void add_attention_mutant(Registry& r, const char* bug, const char* bug_class, const char* what) {
    const Format f = std::is_same_v<S, __half> ? Format::fp16 : Format::bf16;
    KernelInfo k = attention_info(mutant_kernel_info("attention", bug, f, bug_class, what), f);
    k.fn = [kernel = k.name](const KernelCall& c) { run_attention_as<S, Bug>(c, kernel.c_str(), AttnLaunch{}); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_attention(Registry& r) {
    add_attention_mutant<CausalPerTile>(r, "causal_per_tile", "2 mask geometry",
                       "the causal mask decides whole key tiles: in the diagonal tile a query sees keys after its own");
    add_attention_mutant<TopLeft>(r, "top_left_causal", "2 mask geometry", "causal aligned top-left (j <= i) when Lq < Lk");
    add_attention_mutant<TileMaxOnly>(r, "tile_max_only", "14 reduction axis/granularity",
                     "the running max is not carried across key tiles: each tile's weights against its own max");
    add_attention_mutant<SkipORescale>(r, "o_rescale_skipped", "14 reduction axis/granularity",
                      "when the max grows the running sum is rescaled, the output accumulator is not");
    add_attention_mutant<UnguardedMinusInf>(r, "unguarded_minus_inf", "7 empty-row semantics",
                           "exp(s - m) formed with m = -inf: -inf - (-inf) = NaN in a fully masked tile");
    add_attention_mutant<Fp16Accumulator, __half>(r, "fp16_accumulator", "6 low-precision accumulation",
                         "P V accumulated in FP16 (mma with an f16 accumulator)");
    add_attention_mutant<GqaModulo>(r, "gqa_modulo", "5 layout transposition", "KV head h mod Hkv instead of h / (Hq / Hkv)");
    add_attention_mutant<SoftcapAfterMask>(r, "softcap_after_mask", "9 scale/offset convention",
                          "softcap applied to the masked logit, cap(s + mask), instead of cap(s) + mask");
    add_attention_mutant<EmptySplitLseZero>(r, "empty_split_lse_zero", "7 empty-row semantics",
                           "the split-KV merge reads an empty split's -inf lse as 0: its zero output dilutes the row");
    // A launch switch of the merge, not a kernel template: no instantiation more.
    KernelInfo k = attention_info(mutant_kernel_info("sink_attention", "sink_by_kv_head", Format::bf16, "5 layout transposition",
                                                     "the merge adds the sink of query head h's KV head h / (Hq / Hkv)"),
                                  Format::bf16);
    k.declared["max_splits"] = kMaxSplits + 1;
    AttnLaunch launch;
    launch.sinks = launch.sink_kv_head = true;
    k.fn = [kernel = k.name, launch](const KernelCall& c) { run_attention_kernels(c, Format::bf16, kernel.c_str(), launch); };
    r.add(std::move(k));
    KernelInfo gk = attention_info(mutant_kernel_info("gated_attention", "gate_by_kv_head", Format::fp16, "5 layout transposition",
                                                      "the merge reads the gate row of query head h's KV head h / (Hq / Hkv)"),
                                   Format::fp16);
    AttnLaunch gated;
    gated.gated = gated.gate_kv_head = true;
    gk.fn = [kernel = gk.name, gated](const KernelCall& c) { run_attention_kernels(c, Format::fp16, kernel.c_str(), gated); };
    r.add(std::move(gk));
}

}  // namespace conform::CONFORM_CUDA_NS
