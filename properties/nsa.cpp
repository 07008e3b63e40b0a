// Generators and properties of native sparse attention (docs/nsa_attention.md,
// "Properties").
#include <algorithm>
#include <cmath>
#include <set>

#include "oracle/attention.hpp"
#include "oracle/nsa.hpp"
#include "properties/common.hpp"
#include "properties/verdict.hpp"

namespace conform::props {

namespace {

// Value families whose logits stay moderate, as attention's generators draw
// (bit patterns' logits overflow FP32: elements the bound leaves undefined;
// the special_values suite injects NaN, infinities and the extremes).
const std::vector<Family>& nsa_families() {
    static const std::vector<Family> v = {Family::normal, Family::uniform, Family::constant, Family::tiny,
                                          Family::subnormal, Family::heavy_tail};
    return v;
}

}  // namespace

// dims = {Hq, Hkv, Lq, Lk, D, Dv, ties, closed}: ties copies block 0's keys
// and values into block 1 (equal compressed keys: exactly tied importance);
// closed sets one gate of a third of the rows to -inf.
rc::Gen<CaseSpec> gen_nsa_attention_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](std::int64_t group, std::int64_t hkv, std::int64_t lk, int where, std::int64_t d, int dv_kind,
              std::int64_t block, std::int64_t n, std::int64_t window, int force, double scale, int ties, int closed,
              Family fam, int scale_exp, std::uint64_t seed, int specials) {
            const std::int64_t lq = where == 0 ? lk : where == 1 ? 1 : 1 + static_cast<std::int64_t>(seed % static_cast<std::uint64_t>(lk));
            const std::int64_t dv = dv_kind == 0 ? d : dv_kind == 1 ? 1 : 3;
            Params p({{"block", static_cast<double>(block)}, {"n", static_cast<double>(n)},
                      {"window", static_cast<double>(window)}, {"force_local", static_cast<double>(force)},
                      {"scale", scale}});
            return structured_spec("nsa_attention", fmt, {group * hkv, hkv, lq, lk, d, dv, ties, closed}, p, fam,
                                   scale_exp, seed, specials);
        },
        rc::gen::element<std::int64_t>(1, 2, 3), rc::gen::element<std::int64_t>(1, 2),
        rc::gen::element<std::int64_t>(1, 3, 6, 9, 13, 16, 23), rc::gen::inRange(0, 3),
        rc::gen::element<std::int64_t>(1, 2, 4, 8), rc::gen::element(0, 0, 1, 2), rc::gen::element<std::int64_t>(1, 2, 3, 4),
        rc::gen::element<std::int64_t>(1, 2, 3, 4, 8), rc::gen::element<std::int64_t>(1, 2, 4, 7),
        rc::gen::element(1, 1, 0), rc::gen::element(0.0, 0.0, 0.3), rc::gen::element(0, 0, 1), rc::gen::element(0, 0, 1),
        rc::gen::elementOf(nsa_families()), rc::gen::inRange(-3, 2), rc::gen::arbitrary<std::uint64_t>(),
        opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_nsa_attention_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const auto& dm = spec.dims;
    const std::int64_t hq = dm.at(0), hkv = dm.at(1), lq = dm.at(2), lk = dm.at(3), d = dm.at(4), dv = dm.at(5);
    const Family fam = spec.families.at(0);
    const std::vector<std::vector<std::int64_t>> shapes{{hq, lq, d}, {hkv, lk, d}, {hkv, lk, dv}, {hq, lq, 3}};
    for (std::size_t t = 0; t < shapes.size(); ++t) {
        Tensor x(spec.format, shapes[t]);
        fill_values(x, fam, spec, t, rng);
        c.inputs.push_back(std::move(x));
    }
    const auto l = static_cast<std::int64_t>(spec.params.get("block", 4));
    if (dm.size() > 6 && dm[6] && lk >= 2 * l)  // block 1 a copy of block 0: tied importance
        for (std::size_t t = 1; t <= 2; ++t) {
            Tensor& x = c.inputs[t];
            const std::int64_t w = x.shape()[2];
            for (std::int64_t g = 0; g < hkv; ++g)
                for (std::int64_t j = 0; j < l * w; ++j) x.set_bits((g * lk + l) * w + j, x.bits(g * lk * w + j));
        }
    if (dm.size() > 7 && dm[7])
        for (std::int64_t r = 0; r < hq * lq; ++r)
            if (rng() % 3 == 0) c.inputs[3].set_value(r * 3 + static_cast<std::int64_t>(rng() % 3), -INFINITY);
    for (std::size_t t = 0; t < 4; ++t) inject_specials(c.inputs[t], spec.specials, rng);
    return c;
}

namespace {

CaseSpec nsa_plain_spec(const KernelInfo& k) {
    CaseSpec s = in_domain(*gen_nsa_attention_spec(k.in, GenOptions{}));
    s.specials = 0;
    return s;
}

// The verdict's gating bound of o's element e (NaN where not judged).
double nsa_judged_bound(const CaseEval& e, std::size_t o, std::size_t i) {
    const OutputEval& out = e.outputs.at(o);
    if (out.rigorous.empty()) return NAN;
    const double b = e.model_breach.empty() ? out.probabilistic.at(i) : out.rigorous.at(i);
    if (!std::isfinite(b) || b < 0 || !std::isfinite(out.exact.at(i)) || b >= out.scale.at(i)) return NAN;
    return b;
}

// o of two evaluations of the same exact value (a kernel and another, or
// one kernel on inputs that leave o unchanged): every element judged by both
// within the sum of their bounds.  Returns the elements compared.
std::int64_t nsa_agree(const CaseEval& a, const CaseEval& b, const std::string& other, const Case& c) {
    std::int64_t judged = 0;
    for (std::size_t i = 0; i < a.outputs[0].exact.size(); ++i) {
        const double ba = nsa_judged_bound(a, 0, i), bb = nsa_judged_bound(b, 0, i);
        if (std::isnan(ba) || std::isnan(bb)) continue;
        const double x = a.outputs[0].got.value(static_cast<std::int64_t>(i)), y = b.outputs[0].got.value(static_cast<std::int64_t>(i));
        ++judged;
        if (!(std::fabs(x - y) <= ba + bb))
            RC_FAIL("o[" + std::to_string(i) + "]: " + hexfloat(x) + ", " + other + " " + hexfloat(y) +
                    ": beyond the sum of both bounds " + hexfloat(ba) + " + " + hexfloat(bb) + "\n" +
                    show_inputs(*c.op, c.params, c.views()));
    }
    return judged;
}

void nsa_set_gate(Case& c, int branch, double value) {
    Tensor& g = c.inputs[3];
    for (std::int64_t r = 0; r < g.numel() / 3; ++r) g.set_value(r * 3 + branch, value);
}

std::string nsa_id_text(double v) { return std::isnan(v) ? "NaN" : std::to_string(static_cast<long long>(v)); }

// Every id is the query's own block (slot 0, forced) or a complete block the
// query has fully observed (b l + l - 1 <= t); with force_local the own block
// is in slot 0.
Testable nsa_selection_observed(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(nsa_plain_spec(k));
        const oracle::NsaSetup s = oracle::nsa_setup(c.params, c.views());
        const Tensor ids = run_kernel(k, c.params, c.views()).at(1);
        for (std::int64_t g = 0; g < s.hkv; ++g)
            for (std::int64_t i = 0; i < s.lq; ++i)
                for (std::int64_t j = 0; j < s.n; ++j) {
                    const double id = ids.value((g * s.lq + i) * s.n + j);
                    const std::int64_t own = s.pos(i) / s.block;
                    const std::string where = "KV head " + std::to_string(g) + ", query " + std::to_string(i) +
                                              " (position " + std::to_string(s.pos(i)) + "), slot " + std::to_string(j);
                    if (std::isnan(id)) continue;  // a poisoned row (NaN importance)
                    if (j == 0 && s.force_local == 1 && id != static_cast<double>(own))
                        RC_FAIL(where + ": " + nsa_id_text(id) + " where the own block " + std::to_string(own) + " is forced");
                    if (std::isnan(id) || id == -1 || (j == 0 && s.force_local == 1)) continue;
                    const auto b = static_cast<std::int64_t>(id);
                    if (!(id == std::floor(id) && b >= 0 && b * s.block + s.block - 1 <= s.pos(i)))
                        RC_FAIL(where + ": block " + nsa_id_text(id) + " is not fully observed (block " +
                                std::to_string(s.block) + ")");
                }
    };
}

// With n past the number of blocks every observed block is selected with the
// own one: the selected branch is dense causal attention.  Gates c and w
// closed: o is sigmoid(g_s) times the attention op's exact causal output,
// within the kernel's own bound.
Testable nsa_dense_selection(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = nsa_plain_spec(k);
        spec.params.set("force_local", 1);
        Case c = build_case(spec);
        const std::int64_t lk = c.inputs[1].shape()[1], l = static_cast<std::int64_t>(c.params.get("block", 4));
        c.params.set("n", static_cast<double>((lk + l - 1) / l + 1));
        nsa_set_gate(c, 0, -INFINITY), nsa_set_gate(c, 2, -INFINITY);
        const CaseEval e = evaluate_case(k, c.params, c.views());
        Params ap;
        ap.set("causal", 1), ap.set("scale", c.params.get("scale", 0));
        const oracle::OpOutputs dense = oracle::eval_attention(ap, {c.inputs[0].view(), c.inputs[1].view(), c.inputs[2].view()});
        const std::int64_t dv = c.inputs[2].shape()[2];
        std::int64_t judged = 0;
        for (std::size_t i = 0; i < e.outputs[0].exact.size(); ++i) {
            const double b = nsa_judged_bound(e, 0, i);
            if (std::isnan(b)) continue;
            const double gs = c.inputs[3].value(static_cast<std::int64_t>(i) / dv * 3 + 1);
            const double want = oracle::to_double(oracle::sigmoid(oracle::from_double(gs)) * dense.values[0][i]);
            const double got = e.outputs[0].got.value(static_cast<std::int64_t>(i));
            ++judged;
            if (!(std::fabs(got - want) <= b * (1 + 0x1p-40) + 0x1p-52 * std::fabs(want)))
                RC_FAIL("o[" + std::to_string(i) + "]: " + hexfloat(got) + ", dense causal attention gives " + hexfloat(want) +
                        " (bound " + hexfloat(b) + ")\n" + show_inputs(*c.op, c.params, c.views()));
        }
        RC_PRE(judged > 0);
    };
}

// Gates c and s closed: o = sigmoid(g_w) o_w, sliding-window attention: the
// gated_attention kernel of the same format with window w and g_w on every
// column agrees within the sum of both bounds.
Testable nsa_window_only(const KernelInfo& k) {
    return [&k] {
        Case c = build_case(nsa_plain_spec(k));
        nsa_set_gate(c, 0, -INFINITY), nsa_set_gate(c, 1, -INFINITY);
        const KernelInfo* ga = builtin_registry().find(std::string("cpu.scalar.gated_attention.") + name(k.in));
        RC_PRE(ga != nullptr);
        const std::int64_t hq = c.inputs[0].shape()[0], lq = c.inputs[0].shape()[1], dv = c.inputs[2].shape()[2];
        Tensor g(k.in, {hq, lq, dv});
        for (std::int64_t e = 0; e < g.numel(); ++e) g.set_bits(e, c.inputs[3].bits(e / dv * 3 + 2));
        Params gp;
        gp.set("window", c.params.get("window", 4)), gp.set("scale", c.params.get("scale", 0));
        const CaseEval a = evaluate_case(k, c.params, c.views());
        const CaseEval b = evaluate_case(*ga, gp, {c.inputs[0].view(), c.inputs[1].view(), c.inputs[2].view(), g.view()});
        RC_PRE(nsa_agree(a, b, "gated sliding-window attention (" + ga->name + ")", c) > 0);
    };
}

// The last Lk mod l keys are no compressed block: other values there leave
// the indices and (with the selected and window gates closed) o within the
// two bounds of the same exact value.
Testable nsa_tail_not_compressed(const KernelInfo& k) {
    return [&k] {
        Case c = build_case(nsa_plain_spec(k));
        const std::int64_t lk = c.inputs[1].shape()[1], l = static_cast<std::int64_t>(c.params.get("block", 4));
        RC_PRE(lk % l != 0);
        nsa_set_gate(c, 1, -INFINITY), nsa_set_gate(c, 2, -INFINITY);
        Case t = c;
        std::mt19937_64 rng(lk * 7919 + l);
        for (std::size_t x = 1; x <= 2; ++x) {
            const std::int64_t w = t.inputs[x].shape()[2], hkv = t.inputs[x].shape()[0];
            for (std::int64_t g = 0; g < hkv; ++g)
                for (std::int64_t j = lk / l * l; j < lk; ++j)
                    for (std::int64_t y = 0; y < w; ++y)
                        t.inputs[x].set_value((g * lk + j) * w + y, std::ldexp(static_cast<double>(rng() % 2001) - 1000, -6));
        }
        const CaseEval a = evaluate_case(k, c.params, c.views()), b = evaluate_case(k, t.params, t.views());
        for (std::int64_t e = 0; e < a.outputs[1].got.numel(); ++e)
            if (a.outputs[1].got.bits(e) != b.outputs[1].got.bits(e))
                RC_FAIL("indices[" + std::to_string(e) + "]: " + nsa_id_text(a.outputs[1].got.value(e)) + " becomes " +
                        nsa_id_text(b.outputs[1].got.value(e)) + " when the uncompressed tail changes");
        nsa_agree(a, b, "with another uncompressed tail (compressed branch alone)", c);
    };
}

// The first `rows` query rows and `keys` keys of a prefill case (Lq = Lk).
Case nsa_prefix(const Case& c, std::int64_t q0, std::int64_t rows, std::int64_t keys) {
    Case p = c;
    for (std::size_t t = 0; t < 4; ++t) {
        const Tensor& x = c.inputs[t];
        const bool query = t == 0 || t == 3;
        const std::int64_t heads = x.shape()[0], len = x.shape()[1], w = x.shape()[2];
        const std::int64_t from = query ? q0 : 0, n = query ? rows : keys;
        Tensor y(x.format(), {heads, n, w});
        for (std::int64_t h = 0; h < heads; ++h)
            for (std::int64_t j = 0; j < n * w; ++j) y.set_bits(h * n * w + j, x.bits((h * len + from) * w + j));
        p.inputs[t] = std::move(y);
    }
    return p;
}

// Selection is causal: a prefill of L rows gives the same indices as the
// first L rows of a prefill of L + extra, and a one-row decode call at
// position t (keys 0..t) gives row t's.
Testable nsa_selection_causal(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = nsa_plain_spec(k);
        spec.dims[2] = spec.dims[3];  // a prefill
        const Case full = build_case(spec);
        const std::int64_t lk = spec.dims[3], hkv = spec.dims[1];
        RC_PRE(lk >= 2);
        const std::int64_t n = static_cast<std::int64_t>(full.params.get("n", 4)), len = 1 + static_cast<std::int64_t>(spec.seed % static_cast<std::uint64_t>(lk - 1));
        const Tensor whole = run_kernel(k, full.params, full.views()).at(1);
        const Case pre = nsa_prefix(full, 0, len, len);
        const Tensor part = run_kernel(k, pre.params, pre.views()).at(1);
        const Case dec = nsa_prefix(full, len - 1, 1, len);
        const Tensor one = run_kernel(k, dec.params, dec.views()).at(1);
        for (std::int64_t g = 0; g < hkv; ++g)
            for (std::int64_t j = 0; j < n; ++j) {
                for (std::int64_t i = 0; i < len; ++i)
                    if (part.bits((g * len + i) * n + j) != whole.bits((g * lk + i) * n + j))
                        RC_FAIL("KV head " + std::to_string(g) + ", query " + std::to_string(i) + ", slot " + std::to_string(j) +
                                ": " + nsa_id_text(part.value((g * len + i) * n + j)) + " with " + std::to_string(len) +
                                " tokens, " + nsa_id_text(whole.value((g * lk + i) * n + j)) + " with " + std::to_string(lk));
                if (one.bits(g * n + j) != part.bits((g * len + len - 1) * n + j))
                    RC_FAIL("KV head " + std::to_string(g) + ", query " + std::to_string(len - 1) + ", slot " +
                            std::to_string(j) + ": decode gives " + nsa_id_text(one.value(g * n + j)) + ", prefill " +
                            nsa_id_text(part.value((g * len + len - 1) * n + j)));
            }
    };
}

}  // namespace

void add_nsa_attention_properties(std::vector<PropertyDef>& v) {
    auto nsa = [](const OpSpec& op) { return op.name == "nsa_attention"; };
    v.push_back({"selection_observed",
                 "every selected block is the query's own (slot 0, forced) or complete and fully observed", nsa,
                 of_kernel(nsa_selection_observed), 1, {}, {"indices"}});
    v.push_back({"dense_when_n_covers",
                 "with n past the number of blocks and the other gates closed, o = sigmoid(g_s) times dense causal "
                 "attention (the attention op's oracle) within the kernel's bound",
                 nsa, of_kernel(nsa_dense_selection), 2});
    v.push_back({"closed_gates_sliding_window",
                 "g_c = g_s = -inf: o equals the gated_attention kernel with window w and gate g_w within the sum of "
                 "both bounds",
                 nsa, of_kernel(nsa_window_only), 2});
    v.push_back({"tail_not_compressed",
                 "the Lk mod l tail is no compressed block: changing it leaves the indices and the compressed branch "
                 "unchanged",
                 nsa, of_kernel(nsa_tail_not_compressed), 2, {}, {"indices"}});
    v.push_back({"selection_causal",
                 "indices of a prefill's first L rows equal a prefill of L, and a one-row decode call at position t "
                 "gives row t's",
                 nsa, of_kernel(nsa_selection_causal), 2, {}, {"indices"}});
}

}  // namespace conform::props
