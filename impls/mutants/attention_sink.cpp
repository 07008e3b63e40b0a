// Sink-attention mutants (docs/sink_attention.md, "Mutants"): the scalar
// flash kernel of sink_attention with a wrong sink, so that the sink is the
// only thing a property can catch.
#include "impls/cpu/attention.hpp"

namespace conform {

void register_mutants_sink_attention(Registry& r) {
    struct Bug {
        const char *name, *bug_class, *what;
        SinkForm sink;
    };
    const Bug bugs[] = {
        {"sink_ignored", "12 silently ignored parameter", "sinks read and dropped: plain attention", SinkForm::dropped},
        {"sink_by_kv_head", "5 layout transposition",
         "query head h takes the sink of its KV head h / (Hq / Hkv), not its own", SinkForm::kv_head},
        {"sink_after_keys", "1 exp-range overflow",
         "the sink added after the key loop as e^(sink - m) with the keys' max m: it never enters the max (e^(sink - m) "
         "overflows once the sink exceeds every logit by 88.7, lse = +inf), and a row without keys ignores it (0, -inf)",
         SinkForm::late},
        {"lse_without_sink", "3 state hand-off",
         "o right, lse of the keys alone, log(l - e^(sink - m)) + m: a merge of partial states would count the sink "
         "again or lose it; a row without keys gets -inf",
         SinkForm::lse_keys},
    };
    for (const Bug& b : bugs)
        add_variant_mutants(r, "sink_attention", b.name, b.bug_class, b.what,
                            [sink = b.sink](const KernelCall& c, Format f) { sink_attention_call(c, f, sink); });
}

}  // namespace conform
