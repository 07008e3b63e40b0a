// Generators and properties of compressed attention (docs/compressed_attention.md,
// "Properties").
#include <algorithm>
#include <cmath>
#include <set>

#include "oracle/compressed_attention.hpp"
#include "properties/common.hpp"
#include "properties/verdict.hpp"

namespace conform::props {

// dims = {H, L, c, Hi, periodic}: L = m * blocks + tail (a tail shorter
// than m in a third of the cases); periodic 1 makes every token's
// projections repeat with period m, so CSA's entries 1 .. N - 1 are equal
// and their scores tie exactly.  Parameters mode, m, k (fewer slots than
// entries mostly), window.
rc::Gen<CaseSpec> gen_compressed_attention_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](int mode, std::int64_t m, std::int64_t blocks, std::int64_t tail, std::int64_t h, std::int64_t c,
              std::int64_t hi, std::int64_t k, std::int64_t window, int periodic, Family fam, int scale,
              std::uint64_t seed, int specials) {
            const std::int64_t l = m * blocks + tail % m;
            Params p({{"mode", static_cast<double>(mode)},
                      {"m", static_cast<double>(m)},
                      {"k", static_cast<double>(k)},
                      {"window", static_cast<double>(window)},
                      {"scale", 0}});
            CaseSpec s = structured_spec("compressed_attention", fmt, {h, l, c, hi, periodic}, p, fam, scale, seed, specials);
            s.families = {fam, Family::normal};
            return s;
        },
        rc::gen::inRange(0, 2), rc::gen::element<std::int64_t>(1, 2, 3, 4), rc::gen::element<std::int64_t>(1, 2, 3, 5),
        rc::gen::element<std::int64_t>(0, 0, 1, 2), rc::gen::element<std::int64_t>(1, 2, 3),
        rc::gen::element<std::int64_t>(1, 4, 8), rc::gen::element<std::int64_t>(1, 2),
        rc::gen::element<std::int64_t>(1, 2, 4, 8), rc::gen::element<std::int64_t>(0, 1, 3, 8), rc::gen::element(0, 0, 1),
        rc::gen::element(Family::normal, Family::uniform, Family::heavy_tail, Family::outlier, Family::constant),
        rc::gen::inRange(-2, 2), rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

// Inputs in the op's order: q, raw, ca, cb of the spec's family; the gate
// logits, biases, index queries and weights normal (logits of order one).
// Specials go into q, za and iq (the logits' side).
Case build_compressed_attention_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t h = spec.dims.at(0), l = spec.dims.at(1), d = spec.dims.at(2), hi = spec.dims.at(3);
    const bool periodic = spec.dims.size() > 4 && spec.dims[4] != 0;
    const auto m = static_cast<std::int64_t>(spec.params.get("m", 4));
    const Format f = spec.format;
    const Family fam = spec.families.at(0), fn = spec.families.size() > 1 ? spec.families[1] : Family::normal;
    CaseSpec unit = spec;
    unit.scale_exp = 0;
    auto make = [&](std::vector<std::int64_t> shape, Family fa, const CaseSpec& sp, std::size_t input, bool specials) {
        Tensor t(f, std::move(shape));
        fill_values(t, fa, sp, input, rng);
        if (periodic && t.shape()[0] == l && input >= 2 && input <= 7) {  // token rows repeat with period m
            const std::int64_t w = t.numel() / l;
            for (std::int64_t r = m; r < l; ++r)
                for (std::int64_t x = 0; x < w; ++x) t.set_bits(r * w + x, t.bits((r % m) * w + x));
        }
        if (specials) inject_specials(t, sp.specials, rng);
        return t;
    };
    c.inputs.push_back(make({h, l, d}, fam, spec, 0, true));
    c.inputs.push_back(make({l, d}, fam, spec, 1, false));
    c.inputs.push_back(make({l, d}, fam, spec, 2, false));
    c.inputs.push_back(make({l, d}, fn, unit, 3, true));
    c.inputs.push_back(make({m, d}, fn, unit, 4, false));
    c.inputs.push_back(make({l, d}, fam, spec, 5, false));
    c.inputs.push_back(make({l, d}, fn, unit, 6, false));
    c.inputs.push_back(make({m, d}, fn, unit, 7, false));
    c.inputs.push_back(make({l, hi, d}, fn, unit, 8, true));
    c.inputs.push_back(make({l, hi}, fn, unit, 9, false));
    return c;
}

namespace {

CaseSpec csa_plain_spec(const KernelInfo& k) {
    CaseSpec s = in_domain(*gen_compressed_attention_spec(k.in, GenOptions{}));
    s.specials = 0;
    return s;
}

// The gating tier's bound of element i of output o, or NaN where it is not
// judged (not finite, undefined, vacuous, or the exact value not finite).
double csa_judged_bound(const CaseEval& e, std::size_t o, std::size_t i) {
    const OutputEval& out = e.outputs.at(o);
    if (out.rigorous.empty()) return NAN;
    const double b = e.model_breach.empty() ? out.probabilistic.at(i) : out.rigorous.at(i);
    if (!std::isfinite(b) || b < 0 || !std::isfinite(out.exact.at(i)) || b >= out.scale.at(i)) return NAN;
    return b;
}

std::string csa_id(double v) { return std::isnan(v) ? "NaN" : std::to_string(static_cast<long long>(v)); }

// Every id the kernel returns is -1 or an entry fully observed at its
// token: m (n + 1) - 1 <= t (CSA's selection and HCA's list alike).
Testable csa_never_unobserved(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(csa_plain_spec(k));
        const oracle::CsaSetup s = oracle::csa_setup(c.params, c.views());
        const Tensor ix = run_kernel(k, c.params, c.views()).at(2);
        for (std::int64_t t = 0; t < s.tokens; ++t)
            for (std::int64_t j = 0; j < s.slots; ++j) {
                const double id = ix.value(t * s.slots + j);
                if (id == -1) continue;
                if (!(id >= 0 && id < static_cast<double>(s.entries) && id == std::floor(id) &&
                      oracle::csa_observed(s, static_cast<std::int64_t>(id), t)))
                    RC_FAIL("token " + std::to_string(t) + " slot " + std::to_string(j) + ": entry " + csa_id(id) +
                            " is not fully observed (m = " + std::to_string(s.m) + ")");
            }
    };
}

// CSA with k >= N selects every fully observed entry: the attention is
// HCA-style dense over the visible entries (the rest of o is then judged by
// within_budget against that dense attention).
Testable csa_k_covers_every_entry(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = csa_plain_spec(k);
        spec.params.set("mode", 0);
        spec.params.set("k", static_cast<double>(spec.dims.at(1)));  // L >= N
        const Case c = build_case(spec);
        const oracle::CsaSetup s = oracle::csa_setup(c.params, c.views());
        const Tensor ix = run_kernel(k, c.params, c.views()).at(2);
        for (std::int64_t t = 0; t < s.tokens; ++t) {
            std::set<std::int64_t> want, got;
            for (std::int64_t n = 0; n < s.entries; ++n)
                if (oracle::csa_observed(s, n, t)) want.insert(n);
            for (std::int64_t j = 0; j < s.slots; ++j)
                if (const double id = ix.value(t * s.slots + j); id != -1) got.insert(static_cast<std::int64_t>(id));
            if (got != want)
                RC_FAIL("token " + std::to_string(t) + ": " + std::to_string(got.size()) + " entries selected, " +
                        std::to_string(want.size()) + " fully observed (k = " + std::to_string(s.k) + ")");
        }
    };
}

// Tokens appended (a whole entry and a tail) change neither the entries of
// the prefix (within the sum of both runs' bounds) nor the selections of
// its tokens (the same ids: a token's scores read only entries it sees,
// which are the same entries).  Covers the dropped tail: the prefix's own
// tail tokens are compressed in neither run until an entry completes.
Testable csa_prefix_unchanged(const KernelInfo& k) {
    return [&k] {
        const CaseSpec spec = csa_plain_spec(k);
        const std::int64_t m = static_cast<std::int64_t>(spec.params.get("m", 4));
        CaseSpec longer = spec;
        longer.dims[1] = spec.dims[1] + m + *rc::gen::inRange<std::int64_t>(0, m);
        longer.dims[4] = 0;
        const Case full = build_case(longer);
        const std::int64_t l = spec.dims[1], h = spec.dims[0], d = spec.dims[2];
        // The prefix: the first l tokens of every token-indexed input.
        Case pre = full;
        auto cut = [&](std::size_t i, std::int64_t rows_before, std::int64_t width) {
            const Tensor& src = full.inputs[i];
            Tensor t(src.format(), i == 0 ? std::vector<std::int64_t>{h, l, d}
                                          : i == 8 ? std::vector<std::int64_t>{l, src.shape()[1], d}
                                                   : std::vector<std::int64_t>{l, src.shape()[1]});
            const std::int64_t lf = full.inputs[1].shape()[0];
            for (std::int64_t b = 0; b < rows_before; ++b)
                for (std::int64_t e = 0; e < l * width; ++e) t.set_bits(b * l * width + e, src.bits(b * lf * width + e));
            pre.inputs[i] = std::move(t);
        };
        cut(0, h, d);
        for (const std::size_t i : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5}, std::size_t{6}}) cut(i, 1, d);
        cut(8, 1, full.inputs[8].shape()[1] * d);
        cut(9, 1, full.inputs[9].shape()[1]);
        const CaseEval a = evaluate_case(k, pre.params, pre.views()), b = evaluate_case(k, full.params, full.views());
        const std::int64_t n = a.outputs[1].got.shape()[0];
        for (std::int64_t e = 0; e < n * d; ++e) {
            const double ba = csa_judged_bound(a, 1, static_cast<std::size_t>(e)), bb = csa_judged_bound(b, 1, static_cast<std::size_t>(e));
            const double x = a.outputs[1].got.value(e), y = b.outputs[1].got.value(e);
            if (std::isnan(ba) || std::isnan(bb)) continue;
            if (!(std::fabs(x - y) <= ba + bb))
                RC_FAIL("comp[" + std::to_string(e / d) + ", " + std::to_string(e % d) + "]: " + hexfloat(x) + " for " +
                        std::to_string(l) + " tokens, " + hexfloat(y) + " with tokens appended");
        }
        const std::int64_t sa = a.outputs[2].got.shape()[1], sb = b.outputs[2].got.shape()[1];
        for (std::int64_t t = 0; t < l; ++t)
            for (std::int64_t j = 0; j < std::max(sa, sb); ++j) {
                const double x = j < sa ? a.outputs[2].got.value(t * sa + j) : -1, y = j < sb ? b.outputs[2].got.value(t * sb + j) : -1;
                if (!(x == y || (std::isnan(x) && std::isnan(y))))
                    RC_FAIL("token " + std::to_string(t) + " slot " + std::to_string(j) + ": entry " + csa_id(x) + " for " +
                            std::to_string(l) + " tokens, " + csa_id(y) + " with tokens appended");
            }
    };
}

// Adding a constant to one channel of the positional biases (every row of
// B^a and, in CSA, of B^b: every logit of that channel's softmax) leaves
// comp unchanged: softmax is shift-invariant.  Both runs lie within their
// own bounds of the same exact entries.
Testable csa_bias_shift_invariance(const KernelInfo& k) {
    return [&k] {
        Case c = build_case(csa_plain_spec(k));
        const oracle::CsaSetup s = oracle::csa_setup(c.params, c.views());
        const std::int64_t x = *rc::gen::inRange<std::int64_t>(0, s.dim);
        const double shift = *rc::gen::element(1.0, -2.0, 0.5);
        // The channel's biases on the grid 2^-4 Z within [-4, 4]: shifted by
        // 1, -2 or 1/2 they stay below 2^8 grid steps, exact in every format.
        for (const std::size_t i : {std::size_t{4}, std::size_t{7}})
            for (std::int64_t j = 0; j < s.m; ++j) {
                const double b = c.inputs[i].value(j * s.dim + x);
                c.inputs[i].set_value(j * s.dim + x, std::isfinite(b) ? std::clamp(std::round(b * 16) / 16, -4.0, 4.0) : 0.0);
            }
        Case moved = c;
        for (const std::size_t i : {std::size_t{4}, std::size_t{7}})
            for (std::int64_t j = 0; j < s.m; ++j)
                moved.inputs[i].set_value(j * s.dim + x, c.inputs[i].value(j * s.dim + x) + shift);
        const CaseEval a = evaluate_case(k, c.params, c.views()), b = evaluate_case(k, moved.params, moved.views());
        std::int64_t judged = 0;
        for (std::int64_t n = 0; n < s.entries; ++n) {
            const auto e = static_cast<std::size_t>(n * s.dim + x);
            const double ba = csa_judged_bound(a, 1, e), bb = csa_judged_bound(b, 1, e);
            if (std::isnan(ba) || std::isnan(bb)) continue;
            const double u = a.outputs[1].got.value(static_cast<std::int64_t>(e)), v = b.outputs[1].got.value(static_cast<std::int64_t>(e));
            ++judged;
            if (!(std::fabs(u - v) <= ba + bb))
                RC_FAIL("comp[" + std::to_string(n) + ", " + std::to_string(x) + "]: " + hexfloat(u) + ", " + hexfloat(v) +
                        " after the biases' channel shifted by " + std::to_string(shift) + ": beyond the sum of the bounds");
        }
        RC_PRE(judged > 0);
    };
}

// A raw row is read only by the tokens whose window holds it: raw[s] set
// to NaN leaves every o row with s outside (t - window, t] bit for bit,
// and comp and indices everywhere (the compressor and the indexer never
// read raw).
Testable csa_raw_read_only_in_the_window(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(csa_plain_spec(k));
        const oracle::CsaSetup s = oracle::csa_setup(c.params, c.views());
        const std::int64_t r = *rc::gen::inRange<std::int64_t>(0, s.tokens);
        Case poisoned = c;
        for (std::int64_t x = 0; x < s.dim; ++x) poisoned.inputs[1].set_value(r * s.dim + x, NAN);
        const std::vector<Tensor> a = run_kernel(k, c.params, c.views()), b = run_kernel(k, poisoned.params, poisoned.views());
        for (std::size_t o = 1; o < 3; ++o)
            for (std::int64_t e = 0; e < a[o].numel(); ++e)
                if (a[o].bits(e) != b[o].bits(e))
                    RC_FAIL(std::string(o == 1 ? "comp" : "indices") + " element " + std::to_string(e) +
                            " changed when raw row " + std::to_string(r) + " became NaN");
        for (std::int64_t h = 0; h < s.heads; ++h)
            for (std::int64_t t = 0; t < s.tokens; ++t) {
                if (r <= t && r > t - s.window) continue;  // in the window
                for (std::int64_t x = 0; x < s.dim; ++x) {
                    const std::int64_t e = (h * s.tokens + t) * s.dim + x;
                    if (a[0].bits(e) != b[0].bits(e))
                        RC_FAIL("o[" + std::to_string(h) + ", " + std::to_string(t) + ", " + std::to_string(x) + "]: " +
                                hexfloat(a[0].value(e)) + " became " + hexfloat(b[0].value(e)) + " when raw row " +
                                std::to_string(r) + ", outside the window (t - " + std::to_string(s.window) + ", t], became NaN");
                }
            }
    };
}

// HCA reads q, raw, ca, za, ba only: redrawing cb, zb, bb, iq and iw leaves
// every output bit for bit.
Testable csa_hca_ignores_csa_inputs(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = csa_plain_spec(k);
        spec.params.set("mode", 1);
        const Case c = build_case(spec);
        CaseSpec other = spec;
        other.seed = spec.seed + 1;
        const Case d = build_case(other);
        Case mixed = c;
        for (std::size_t i = 5; i < 10; ++i) mixed.inputs[i] = d.inputs[i];
        const std::vector<Tensor> a = run_kernel(k, c.params, c.views()), b = run_kernel(k, mixed.params, mixed.views());
        for (std::size_t o = 0; o < 3; ++o)
            for (std::int64_t e = 0; e < a[o].numel(); ++e)
                if (a[o].bits(e) != b[o].bits(e))
                    RC_FAIL(std::string(o == 0 ? "o" : o == 1 ? "comp" : "indices") + " element " + std::to_string(e) +
                            " depends on a CSA-only input (cb, zb, bb, iq or iw) in HCA mode");
    };
}

}  // namespace

void add_compressed_attention_properties(std::vector<PropertyDef>& v) {
    auto csa = [](const OpSpec& op) { return op.name == "compressed_attention"; };
    v.push_back({"csa_never_unobserved", "every selected or listed entry is fully observed at its token: m (i + 1) - 1 <= t",
                 csa, of_kernel(csa_never_unobserved)});
    v.push_back({"csa_k_covers_every_entry", "CSA with k >= N selects every fully observed entry (dense like HCA)", csa,
                 of_kernel(csa_k_covers_every_entry)});
    v.push_back({"csa_prefix_unchanged",
                 "appending tokens leaves the prefix's entries (within the sum of the bounds) and its tokens' "
                 "selections unchanged; a tail shorter than m is not compressed",
                 csa, of_kernel(csa_prefix_unchanged), 2});
    v.push_back({"csa_bias_shift_invariance",
                 "a constant added to one channel of every positional-bias row leaves comp unchanged (within the sum "
                 "of the bounds)",
                 csa, of_kernel(csa_bias_shift_invariance), 2});
    v.push_back({"csa_raw_read_only_in_the_window",
                 "a raw row set to NaN changes only the o rows whose window (t - window, t] holds it; comp and "
                 "indices never",
                 csa, of_kernel(csa_raw_read_only_in_the_window)});
    v.push_back({"csa_hca_ignores_csa_inputs", "in HCA mode cb, zb, bb, iq and iw change no output", csa,
                 of_kernel(csa_hca_ignores_csa_inputs)});
}

}  // namespace conform::props
