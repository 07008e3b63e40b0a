// GPU mutants of attention (docs/attention.md, "GPU mutants"): the
// tensor-core kernel with one bug each, in BF16 (the FP16 accumulator in
// FP16), each a bug GPU attention libraries have shipped.
#include "impls/cuda/attention.cuh"
#include "impls/cuda/cuda.hpp"

namespace conform::CONFORM_CUDA_NS {
namespace {

#define CONFORM_ATTN_BUG(Name, flag) \
    struct Name : AttnNoBug {        \
        static constexpr bool flag = true; \
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

template <class Bug>
void add(Registry& r, const char* bug, Format f, const char* bug_class, const char* what) {
    KernelInfo k = attention_info(mutant_kernel_info("attention", bug, f, bug_class, what), f);
    k.fn = [f, kernel = k.name](const KernelCall& c) { run_attention<Bug>(c, f, kernel.c_str()); };
    r.add(std::move(k));
}

}  // namespace

void register_mutants_attention(Registry& r) {
    const Format b = Format::bf16;
    add<CausalPerTile>(r, "causal_per_tile", b, "2 mask geometry",
                       "the causal mask decides whole key tiles: in the diagonal tile a query sees keys after its own");
    add<TopLeft>(r, "top_left_causal", b, "2 mask geometry", "causal aligned top-left (j <= i) when Lq < Lk");
    add<TileMaxOnly>(r, "tile_max_only", b, "14 reduction axis/granularity",
                     "the running max is not carried across key tiles: each tile's weights against its own max");
    add<SkipORescale>(r, "o_rescale_skipped", b, "14 reduction axis/granularity",
                      "when the max grows the running sum is rescaled, the output accumulator is not");
    add<UnguardedMinusInf>(r, "unguarded_minus_inf", b, "7 empty-row semantics",
                           "exp(s - m) formed with m = -inf: -inf - (-inf) = NaN in a fully masked tile");
    add<Fp16Accumulator>(r, "fp16_accumulator", Format::fp16, "6 low-precision accumulation",
                         "P V accumulated in FP16 (mma with an f16 accumulator)");
    add<GqaModulo>(r, "gqa_modulo", b, "5 layout transposition", "KV head h mod Hkv instead of h / (Hq / Hkv)");
    add<SoftcapAfterMask>(r, "softcap_after_mask", b, "9 scale/offset convention",
                          "softcap applied to the masked logit, cap(s + mask), instead of cap(s) + mask");
    add<EmptySplitLseZero>(r, "empty_split_lse_zero", b, "7 empty-row semantics",
                           "the split-KV merge reads an empty split's -inf lse as 0: its zero output dilutes the row");
}

}  // namespace conform::CONFORM_CUDA_NS
