// Generators and metamorphic properties of attention (docs/attention.md).
#include <algorithm>
#include <cmath>

#include "numerics/conventions.hpp"
#include "numerics/ulp.hpp"
#include "properties/attention.hpp"
#include "properties/common.hpp"
#include "properties/domain.hpp"

namespace conform::props {

// Value families whose logits stay moderate (|s| up to ~1e3 with the scales
// drawn): an FP32 logit of magnitude M carries an absolute error ~D u M, so
// beyond M ~ 1e6 the derived bound is vacuous (e^(error) > 1e300) and the
// case could not tell a right kernel from a wrong one.
const std::vector<Family>& attention_families() {
    static const std::vector<Family> v = {Family::normal, Family::uniform, Family::constant, Family::tiny,
                                          Family::subnormal};
    return v;
}

namespace {

// sink_attention's sinks [Hq] (docs/sink_attention.md): learned logits of
// order 1 (GPT-OSS's lie within about +-5), some far above every logit (the
// sink takes nearly all the weight: the keys' weights e^-40 ... e^-80, o
// still in FP32's normal range for |v| of order 1, where the bound can judge
// it) or far below, and -inf (no sink: plain attention, empty rows again);
// with specials, NaN or +inf (the row is NaN).
Tensor sink_logits(const CaseSpec& spec, std::mt19937_64& rng) {
    Tensor t(spec.format, {spec.dims[0]});
    std::uniform_real_distribution<double> U(0, 1);
    for (std::int64_t h = 0; h < t.numel(); ++h) {
        const std::uint64_t pick = rng() % 8;
        const double v = pick == 0 ? -INFINITY : pick == 1 ? 40 + 40 * U(rng) : pick == 2 ? -40 - 40 * U(rng) : 16 * U(rng) - 8;
        t.set_value(h, v);
    }
    if (spec.specials > 0 && rng() % 2 == 0) t.set_value(static_cast<std::int64_t>(rng() % t.numel()), rng() % 2 ? NAN : INFINITY);
    return t;
}

// NaN at `count` random elements: a NaN logit poisons its row, a NaN value
// poisons the rows that see its key, a hidden key's NaN must not leak.
void inject_nans(Tensor& t, int count, std::mt19937_64& rng) {
    for (int s = 0; s < count && t.numel(); ++s) t.set_value(static_cast<std::int64_t>(rng() % t.numel()), NAN);
}

}  // namespace

// A head layout and sequence shape: Hkv KV heads, each shared by `group`
// query heads, Lq queries over Lk keys, head dims D (q, k) and Dv (v).
struct AttentionShape {
    int hkv, group, lq, lk, d, dv;
};

// Small heads: MHA, GQA up to 8 query heads per KV head and MQA; Lq < Lk
// (decoding with a cache), Lq > Lk (empty causal rows), the 64-key tile
// crossed (Lk 65, 80).
rc::Gen<AttentionShape> small_heads() {
    return rc::gen::apply([](int hkv, int group, int lq, int lk, int d,
                             int dv) { return AttentionShape{hkv, group, lq, lk, d, dv}; },
                          rc::gen::inRange(1, 3), rc::gen::element(1, 2, 4, 8), rc::gen::element(1, 2, 3, 7, 16),
                          rc::gen::element(1, 3, 8, 17, 65, 80), rc::gen::element(1, 4, 8, 16),
                          rc::gen::element(1, 4, 8));
}

// Multiply-adds of one oracle evaluation of a shape: Hq Lq Lk (D + Dv).
double oracle_macs(const AttentionShape& s) {
    return double(s.hkv) * s.group * s.lq * s.lk * (s.d + s.dv);
}

// The oracle runs at about 10-30 M multiply-adds a second, twice per case
// (Ziv's two precisions): a shape above 2^18 sheds queries, then query heads
// per KV head, so that no case costs much more than 0.1 s.
constexpr double kMaxOracleMacs = 1 << 18;

AttentionShape within_oracle_budget(AttentionShape s) {
    while (oracle_macs(s) > kMaxOracleMacs && s.lq > 1) --s.lq;
    while (oracle_macs(s) > kMaxOracleMacs && s.group > 1) s.group /= 2;
    return s;
}

// Model-sized heads (D = 64, 128, 256; Dv = D or 64) over up to 1024 keys:
// three to eight tiles of 128 keys and their tails (300 = 2 x 128 + 44,
// 385 = 3 x 128 + 1), one KV head shared by up to 8 query heads, Lq <= 3
// (decode and short chunked prefill), all within the oracle's budget.
rc::Gen<AttentionShape> model_heads() {
    return rc::gen::apply(
        [](int group, int lq, int lk, int d, bool dv_is_d) {
            return within_oracle_budget(AttentionShape{1, group, lq, lk, d, dv_is_d ? d : 64});
        },
        rc::gen::element(1, 2, 4, 8), rc::gen::element(1, 2, 3), rc::gen::element(17, 80, 300, 385, 640, 1024),
        rc::gen::element(64, 128, 256), rc::gen::element(true, true, false));
}

// dims = {Hq, Hkv, Lq, Lk, D, Dv, has_mask}: small heads, and 1 case in 16
// model-sized heads (weightedOneOf draws independently of RapidCheck's size
// and shrinks toward the small ones); causal, windows, softcap, scales.
rc::Gen<CaseSpec> gen_attention_spec(Format fmt, GenOptions opt, const std::string& op) {
    return rc::gen::apply(
        [fmt, op](AttentionShape sh, int mask, int causal, int window, double softcap, double scale, Family fam, int k,
              std::uint64_t seed, int specials) {
            return structured_spec(op, fmt, {sh.hkv * sh.group, sh.hkv, sh.lq, sh.lk, sh.d, sh.dv, mask},
                                   Params({{"causal", double(causal)},
                                           {"window", double(window)},
                                           {"softcap", softcap},
                                           {"scale", scale}}),
                                   fam, k, seed, specials);
        },
        rc::gen::weightedOneOf<AttentionShape>({{15, small_heads()}, {1, model_heads()}}),
        rc::gen::element(0, 0, 1), rc::gen::element(0, 1), rc::gen::element(0, 0, 0, 1, 3, 5, 200),
        rc::gen::element(0.0, 0.0, 5.0, 30.0), rc::gen::element(0.0, 0.0, 0.5, 2.0),
        rc::gen::elementOf(attention_families()), rc::gen::inRange(-4, 4), rc::gen::arbitrary<std::uint64_t>(),
        opt.specials ? rc::gen::inRange(1, 4) : rc::gen::just(0));
}

Case build_attention_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const auto& d = spec.dims;  // Hq, Hkv, Lq, Lk, D, Dv, has_mask
    const std::vector<std::vector<std::int64_t>> shapes = {{d[0], d[2], d[4]}, {d[1], d[3], d[4]}, {d[1], d[3], d[5]}};
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        Tensor t(spec.format, shapes[i]);
        fill_values(t, spec.families.at(0), spec, i, rng);
        inject_nans(t, spec.specials, rng);
        c.inputs.push_back(std::move(t));
    }
    if (spec.op == "gated_attention") c.inputs.push_back(gate_logits(spec, rng));
    if (spec.op == "sink_attention") c.inputs.push_back(sink_logits(spec, rng));
    if (d[6]) {  // additive mask: 0, small biases and -inf; now and then a fully masked row
        Tensor m(spec.format, {d[2], d[3]});  // the kernels take every input in their format
        for (std::int64_t i = 0; i < d[2]; ++i) {
            const bool all = rng() % 4 == 0;
            for (std::int64_t j = 0; j < d[3]; ++j)
                m.set_value(i * d[3] + j, all || rng() % 3 == 0 ? -INFINITY : static_cast<double>(rng() % 5) / 4 - 0.5);
        }
        c.inputs.push_back(std::move(m));
    }
    return c;
}

namespace {

Case attention_case(const KernelInfo& k, GenOptions opt = {}) {
    return build_case(in_domain(*gen_attention_spec(k.in, opt, k.op)));
}

bool top_left(const KernelInfo& k) { return convention(k.conventions, "causal") == "top_left"; }
// A query that sees no key: lse -inf, or NaN under a declared masked_row = nan.
bool nan_rows(const KernelInfo& k) { return convention(k.conventions, "masked_row") == "nan"; }

// Causality: with a causal or sliding mask, changing the keys and values that
// query row i cannot see leaves row i bit-identical (the last query sees the
// most keys; here every key after the first query's window is perturbed and
// row 0 must not move).
Testable causality(const KernelInfo& k) {
    return [&k] {
        Case c = attention_case(k);
        c.params.set("causal", 1);
        TensorView q = c.inputs[0].view();
        const std::int64_t lq = q.shape[1], lk = c.inputs[1].view().shape[1];
        // keys 0 .. lk - lq are visible to query 0 (bottom-right), key 0 alone top-left
        const std::int64_t visible = top_left(k) ? 1 : lk - lq + 1;
        RC_PRE(visible >= 1 && visible < lk);
        const auto before = run_kernel(k, c.params, c.views());
        for (std::size_t t = 1; t <= 2; ++t) {
            TensorView kv = c.inputs[t].view();
            const std::int64_t dim = kv.shape[2];
            for (std::int64_t h = 0; h < kv.shape[0]; ++h)
                for (std::int64_t j = visible; j < lk; ++j)
                    for (std::int64_t e = 0; e < dim; ++e) c.inputs[t].set_value((h * lk + j) * dim + e, t == 1 ? 3e4 : NAN);
        }
        const auto after = run_kernel(k, c.params, c.views());
        const std::int64_t dv = before[0].shape()[2];
        for (std::int64_t h = 0; h < q.shape[0]; ++h)
            for (std::int64_t e = 0; e < dv; ++e) {
                const std::int64_t i = (h * lq) * dv + e;
                if (before[0].bits(i) != after[0].bits(i))
                    RC_FAIL("query 0 of head " + std::to_string(h) + " changed when hidden keys/values changed: " +
                            hexfloat(before[0].value(i)) + " -> " + hexfloat(after[0].value(i)));
            }
    };
}

// GQA equals MHA with every KV head repeated Hq / Hkv times, bit for bit.
Testable gqa_replication(const KernelInfo& k) {
    return [&k] {
        const Case c = attention_case(k);
        const TensorView q = c.inputs[0].view(), kk = c.inputs[1].view(), v = c.inputs[2].view();
        const std::int64_t hq = q.shape[0], hkv = kk.shape[0], group = hq / hkv;
        RC_PRE(group > 1);
        Case mha = c;
        for (std::size_t t = 1; t <= 2; ++t) {
            const TensorView src = c.inputs[t].view();
            const std::int64_t per = src.shape[1] * src.shape[2];
            Tensor rep(src.format, {hq, src.shape[1], src.shape[2]});
            for (std::int64_t h = 0; h < hq; ++h)
                for (std::int64_t i = 0; i < per; ++i) rep.set_bits(h * per + i, src.bits((h / group) * per + i));
            mha.inputs[t] = std::move(rep);
        }
        (void)v;
        const auto a = run_kernel(k, c.params, c.views()), b = run_kernel(k, mha.params, mha.views());
        std::string where;
        if (!identical(a[0], b[0], &where)) RC_FAIL("GQA differs from MHA with replicated KV heads at o " + where);
        if (!identical(a[1], b[1], &where)) RC_FAIL("GQA differs from MHA with replicated KV heads at lse " + where);
    };
}

// Tile-size invariance: the kernel's key tile (param `block`) moves rounding
// only; every tile size stays within the derived bound (which assumes the
// worst tile count, N_b = Lk), and the oracle is independent of it.
Testable tile_invariance(const KernelInfo& k) {
    return [&k] {
        Case c = attention_case(k);
        // A kernel that declares its tiles (tunables, plug-in ABI v2) gets them.
        c.params.set("block", in_domain_param("block", *rc::gen::element(1.0, 3.0, 8.0, 24.0, 1000.0)));
        const CaseResult r = check_case(k, c.params, c.views());
        if (!r.pass) RC_FAIL("block " + std::to_string(static_cast<int>(c.params.at("block"))) + ": " + r.message);
    };
}

// Split-KV invariance: a kernel that splits the keys and merges the
// partial (o, lse) by lse_merge (declared max_splits > 1) stays within its
// bound for 1, 2, 7 and 32 splits (param splits): the split count moves
// rounding only.  32 splits of a short key range leave most splits empty,
// so the merge's empty state (0, -inf) is exercised too.
Testable split_invariance(const KernelInfo& k) {
    return [&k] {
        Case c = attention_case(k);
        c.params.set("splits", *rc::gen::element(1.0, 2.0, 7.0, 32.0));
        const CaseResult r = check_case(k, c.params, c.views());
        if (!r.pass) RC_FAIL(std::to_string(static_cast<int>(c.params.at("splits"))) + " splits: " + r.message);
    };
}

}  // namespace

// softmax(s + c) = softmax(s): the mask entries are quantized to multiples
// of ulp(2|c|) so that mask + c is exact, and the kernel must stay within its
// bound of the oracle on both masks.  The oracle's own two evaluations are
// not compared: they are the same real numbers, but with subnormal q and k a
// logit 1e4 + 2^-254 rounds to 1e4 at the working precision, so an o whose
// exact value cancels to a tiny negative number comes back -0 for one mask
// and +0 for the other -- a difference no kernel causes.
Tensor shift_mask(Case& c, double shift, Format declared) {
    Tensor& mask = c.inputs.at(attention_mask_input(c.op->name));
    const double q = std::max(ulp_at(mask.format(), 2 * std::fabs(shift)), ulp_at(declared, 2 * std::fabs(shift)));
    Tensor moved(mask.format(), mask.shape());
    for (std::int64_t i = 0; i < mask.numel(); ++i) {
        const double m = mask.value(i);
        if (!std::isinf(m)) mask.set_value(i, q * std::nearbyint(m / q));
        moved.set_value(i, std::isinf(m) ? m : mask.value(i) + shift);
    }
    return moved;
}

std::string mask_shift_check(const KernelInfo& k, Case c, double shift) {
    const auto declared = k.input_formats.find("mask");
    const Tensor moved = shift_mask(c, shift, declared == k.input_formats.end() ? Format::fp64 : declared->second);
    std::vector<TensorView> shifted = c.views();
    shifted[attention_mask_input(c.op->name)] = moved.view();
    if (const CaseResult b = check_case(k, c.params, shifted); !b.pass) return "mask + " + hexfloat(shift) + ": " + b.message;
    if (const CaseResult a = check_case(k, c.params, c.views()); !a.pass) return a.message;
    return "";
}

namespace {

Testable mask_shift_invariance(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = in_domain(*gen_attention_spec(k.in, GenOptions{}, k.op));
        spec.dims[6] = 1;
        const Case c = build_case(spec);
        const double shift = *rc::gen::element(1e4, -1e4, 1000.0, -64.0);
        if (const std::string f = mask_shift_check(k, c, shift); !f.empty()) RC_FAIL(f);
    };
}

// Keys query row i sees, counted from the mask geometry alone (not the
// oracle's predicate): the keys at positions (pos - W, pos] (no lower end
// without a window) that exist, pos = i + Lk - Lq bottom-right, pos = i
// top-left (the declared convention causal = top_left).
std::int64_t expected_keys(std::int64_t i, std::int64_t lq, std::int64_t lk, bool causal, std::int64_t window, bool tl) {
    if (!causal && window <= 0) return lk;
    const std::int64_t pos = tl ? i : i + lk - lq;  // top-left: pos may pass the last key
    const std::int64_t last = std::min(pos, lk - 1), first = window > 0 ? std::max<std::int64_t>(pos - window + 1, 0) : 0;
    return std::max<std::int64_t>(last - first + 1, 0);
}

// Exact key count per row: with q = 0 every visible logit is 0, so lse =
// log(count) and a fully hidden row has lse = -inf.  exp(lse) must round to
// the count the geometry gives, under causal and sliding masks.  With
// sinks, head h's sink is 0 for even h, one more e^0 in the count, and -inf
// for odd h.
Testable key_count(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = in_domain(*gen_attention_spec(k.in, GenOptions{}, k.op));
        spec.dims[6] = 0;
        Case c = build_case(spec);
        c.params.set("causal", *rc::gen::element(0.0, 1.0));
        c.params.set("window", *rc::gen::element(0.0, 1.0, 2.0, 5.0));
        for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i) c.inputs[0].set_value(i, 0.0);
        const bool sinks = k.op == "sink_attention";
        if (sinks)
            for (std::int64_t h = 0; h < spec.dims[0]; ++h) c.inputs[3].set_value(h, h % 2 ? -INFINITY : 0.0);
        const auto out = run_kernel(k, c.params, c.views());
        const std::int64_t hq = spec.dims[0], lq = spec.dims[2], lk = spec.dims[3];
        const bool causal = c.params.at("causal") != 0;
        const auto window = static_cast<std::int64_t>(c.params.at("window"));
        for (std::int64_t h = 0; h < hq; ++h)
            for (std::int64_t i = 0; i < lq; ++i) {
                const std::int64_t want = expected_keys(i, lq, lk, causal, window, top_left(k)) + (sinks && h % 2 == 0);
                const double lse = out[1].value(h * lq + i);
                const bool ok = want == 0 ? (nan_rows(k) ? std::isnan(lse) : lse == -INFINITY)
                                          : std::fabs(std::exp(lse) - double(want)) < 0.25;
                if (!ok)
                    RC_FAIL("head " + std::to_string(h) + " row " + std::to_string(i) + ": lse " + hexfloat(lse) +
                            " means ~" + std::to_string(std::exp(lse)) + " visible keys, the mask geometry gives " +
                            std::to_string(want) + (sinks && h % 2 == 0 ? " (with the sink, logit 0)" : ""));
            }
    };
}

// Parameters are read: changing the scale, the softcap or the window
// changes the output wherever it changes the correctly rounded one by more
// than any kernel's rounding could hide (kMovedUlps somewhere).  A case the
// setting cannot move at the output's precision (one-hot weights in both:
// o is the same value row) says nothing and is not asked.
constexpr std::uint64_t kMovedUlps = 16;

// The largest ulp distance between two correctly rounded outputs.
std::uint64_t max_ulp_apart(const Tensor& a, const Tensor& b) {
    std::uint64_t d = 0;
    for (std::int64_t i = 0; i < a.view().numel(); ++i)
        d = std::max(d, ulp_distance(a.format(), a.bits(i), b.bits(i)));
    return d;
}

Testable parameter_sensitivity(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = in_domain(*gen_attention_spec(k.in, GenOptions{}, k.op));
        spec.dims[2] = std::max<std::int64_t>(spec.dims[2], 2);
        spec.dims[3] = std::max<std::int64_t>(spec.dims[3], 8);
        spec.dims[6] = 0;
        spec.families = {Family::normal};
        spec.scale_exp = 1;  // logits of order 1..10: scale and a small cap both matter
        const Case c = build_case(spec);
        Params base = c.params;
        base.set("window", 0);
        base.set("softcap", 0);
        base.set("scale", 0);
        const EvalOptions refs{.reference_only = true};  // compares references: no bounds
        const CaseEval y = evaluate_case(k, base, c.views(), refs);
        for (const auto& [name, value] : std::vector<std::pair<const char*, double>>{
                 {"scale", 3.0}, {"softcap", 0.5}, {"window", 1.0}}) {
            Params q = base;
            q.set(name, value);
            const CaseEval z = evaluate_case(k, q, c.views(), refs);
            if (max_ulp_apart(y.outputs[0].ref, z.outputs[0].ref) < kMovedUlps) continue;
            std::string where;
            if (identical(y.outputs[0].got, z.outputs[0].got, &where))
                RC_FAIL(std::string("setting '") + name + "' left the output unchanged, though it moves the correctly "
                        "rounded output by " + std::to_string(max_ulp_apart(y.outputs[0].ref, z.outputs[0].ref)) +
                        " ulp");
        }
    };
}

// Values near 2^16 (60000 (1 + U/20), one sign per value column) with q = 0:
// every visible key weighs the same and o is their mean, finite in every
// format, while the unnormalized sum P V of two or more overflows an FP16
// accumulator (65504) -- an FP32-accumulating kernel stays within its bound.
Testable large_values(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = in_domain(*gen_attention_spec(k.in, GenOptions{}, k.op));
        spec.dims[6] = 0;
        Case c = build_case(spec);
        std::mt19937_64 rng(spec.seed);
        std::uniform_real_distribution<double> U(0, 1);
        for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i) c.inputs[0].set_value(i, 0.0);
        Tensor& v = c.inputs[2];
        const std::int64_t dv = v.shape()[2];
        for (std::int64_t i = 0; i < v.numel(); ++i)
            v.set_value(i, ((i % dv) % 2 ? -1.0 : 1.0) * 60000 * (1 + U(rng) / 20));
        const CaseResult r = check_case(k, c.params, c.views());
        if (!r.pass) RC_FAIL("v near 2^16, q = 0 (o the mean of the visible values): " + r.message);
    };
}

}  // namespace

void add_attention_properties(std::vector<PropertyDef>& v) {
    v.push_back({"key_count", "with q = 0, exp(lse) is the number of keys the causal/sliding geometry leaves visible",
                 [](const OpSpec& op) { return softmax_attention_op(op.name); },
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return key_count(k); }, 2});
    v.back().needs = {"lse"};
    v.push_back({"parameter_sensitivity",
                 "changing scale, softcap or window changes the output wherever it moves the correctly rounded output",
                 [](const OpSpec& op) { return softmax_attention_op(op.name); },
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return parameter_sensitivity(k); }, 4});
    v.push_back({"tile_invariance", "every key-tile size (param block 1 ... 1000) stays within the derived bound",
                 [](const OpSpec& op) { return softmax_attention_op(op.name); },
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return tile_invariance(k); }, 2});
    v.push_back({"mask_shift_invariance",
                 "the mask shifted by c (up to +-1e4, exact) keeps the kernel within its bound",
                 [](const OpSpec& op) { return softmax_attention_op(op.name); },
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return mask_shift_invariance(k); }, 2});
    auto attn = [](const OpSpec& op) { return softmax_attention_op(op.name); };
    v.push_back({"split_invariance", "KV splits 1, 2, 7 and 32 merged by lse_merge each stay within the derived bound",
                 attn, [](const KernelInfo& k, const RunConfig&, Stats*) { return split_invariance(k); }, 2});
    v.back().for_kernel = [](const KernelInfo& k) {
        const auto s = k.declared.find("max_splits");
        return s != k.declared.end() && s->second > 1;
    };
    v.push_back({"causality", "causal: perturbing keys and values a query cannot see leaves its output bit-identical",
                 attn, [](const KernelInfo& k, const RunConfig&, Stats*) { return causality(k); }, 2});
    v.push_back({"gqa_replication", "GQA output equals MHA with the KV heads repeated, bit for bit", attn,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return gqa_replication(k); }, 2});
    v.push_back({"large_values", "v near 2^16 with equal weights: o is their mean, though P V overflows a 16-bit accumulator",
                 attn, [](const KernelInfo& k, const RunConfig&, Stats*) { return large_values(k); }, 4});
}

}  // namespace conform::props
