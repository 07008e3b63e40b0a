// CUDA attention (docs/attention.md for the formula, conventions and bound;
// docs/cuda.md for the kernels): cuda.attention.fp16 and .bf16 on tensor
// cores, cuda.attention.fp32 without; each returns o in its format and lse
// in FP32, splits the keys for decoding (Lq <= 16, long Lk) and merges the
// splits with lse_merge.  cuda.sink_attention.<fmt> are the same kernels
// whose merge adds each head's sink (docs/sink_attention.md), and
// cuda.gated_attention.<fmt> those whose merge applies the output gate
// (docs/gated_attention.md).
#include "impls/cuda/attention.cuh"
#include "impls/cuda/cuda.hpp"

namespace conform::CONFORM_CUDA_NS {

// The arithmetic the bound must cover (impls/registry.hpp, "declared"):
// up to kMaxSplits KV splits merged (max_splits); on tensor cores, dot
// products in block FMAs of 16 (mma_k) and the weights rounded to the input
// format before P V (p_unit, p_eta: that format's unit roundoff and half its
// smallest subnormal spacing).
KernelInfo attention_info(KernelInfo k, Format f) {
    k.acc = Format::fp32;
    k.out_formats = {f, Format::fp32};
    k.declared["max_splits"] = kMaxSplits;
    if (f == Format::fp32) return k;
    k.declared["mma_k"] = 16;
    k.declared["p_unit"] = f == Format::fp16 ? 0x1p-11 : 0x1p-8;
    k.declared["p_eta"] = f == Format::fp16 ? 0x1p-25 : 0x1p-134;
    return k;
}

namespace {

// What a registration adds to plain attention.
enum class Extra { none, sinks, gate };

// cuda.attention.<fmt>; with `nan_rows` cuda.attention.nan_rows.<fmt>: a
// query that sees no key gives NaN (declared masked_row = nan, PyTorch's
// math backend) instead of (0, -inf); with sinks cuda.sink_attention.<fmt>:
// the forward kernels write their partials and the merge adds the sink
// state (0, sink_h), one merged state more than the key splits (max_splits
// + 1, and the verdict's bound counts it: oracle/attention_sink_bound.cpp);
// with a gate cuda.gated_attention.<fmt>: the merge (exact for one split)
// multiplies each FP32 o_d by sigmoid(g_d) before the one rounding, the
// CPU kernels' arithmetic (docs/gated_attention.md).
void add_attention(Registry& r, bool nan_rows, Extra extra) {
    const char* op = extra == Extra::sinks ? "sink_attention" : extra == Extra::gate ? "gated_attention" : "attention";
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = attention_info(kernel_info(op, f, ""), f);
        if (nan_rows) make_nan_rows(k, op, f);
        k.description = f == Format::fp32
                            ? std::string("FP32 without tensor cores: a warp per query row, 32 keys a step, FMA dots; "
                                          "KV splits for decoding merged by lse_merge")
                            : std::string("FlashAttention-2 forward on tensor cores (mma.sync m16n8k16, FP32 "
                                          "accumulators), 16 query rows a warp, K/V tiles in shared memory, online "
                                          "softmax in FP32, P rounded to ") +
                                  name(f) + "; KV splits for decoding merged by lse_merge";
        if (nan_rows) k.description += "; a query that sees no key gives NaN (masked_row = nan)";
        if (extra == Extra::sinks) {
            k.declared["max_splits"] = kMaxSplits + 1;
            k.description += "; the partial (o, lse) merged with each head's sink state (0, sink)";
        }
        if (extra == Extra::gate)
            k.description += "; in the merge o_d times sigmoid(g_d) = (g >= 0 ? 1 : t) / (1 + t), t = expf(-|g|), in FP32";
        const std::string kernel = k.name;
        auto make = [f, kernel, nan_rows, extra](AttnLaunch l) -> KernelFn {
            l.nan_rows = nan_rows, l.sinks = extra == Extra::sinks, l.gated = extra == Extra::gate;
            return [f, kernel, l](const KernelCall& c) { run_attention(c, f, kernel.c_str(), l); };
        };
        k.fn = make({});
        k.launches = {{"one warp per block", make({1, 0})}, {"the keys in 3 splits", make({0, 3})}};
        r.add(std::move(k));
    }
}

}  // namespace

void run_attention_kernels(const KernelCall& c, Format f, const char* kernel, const AttnLaunch& l) {
    run_attention(c, f, kernel, l);
}

void register_attention(Registry& r) {
    add_attention(r, false, Extra::none);
    add_attention(r, true, Extra::none);
    add_attention(r, false, Extra::sinks);
    add_attention(r, false, Extra::gate);
}

}  // namespace conform::CONFORM_CUDA_NS
