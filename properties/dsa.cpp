// Generators and properties of DeepSeek Sparse Attention (docs/dsa_attention.md,
// "Properties").
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "oracle/attention_bound.hpp"
#include "oracle/bound.hpp"
#include "oracle/dsa.hpp"
#include "properties/common.hpp"
#include "properties/verdict.hpp"

namespace conform::props {
namespace {

// The attention half's value families: ordinary magnitudes (the logits stay
// of order one after the 2^-ceil(log2(D) / 2) scaling below).
const std::vector<Family>& dsa_attention_families() {
    static const std::vector<Family> f{Family::normal, Family::uniform, Family::heavy_tail,
                                       Family::outlier, Family::constant, Family::tiny};
    return f;
}

Tensor dsa_filled(Format f, std::vector<std::int64_t> shape, Family fam, const CaseSpec& spec, std::size_t input,
                  std::mt19937_64& rng, int shift, bool specials) {
    CaseSpec unit = spec;
    if (shift != 0) unit.scale_exp = 0;
    Tensor t(f, std::move(shape));
    fill_values(t, fam, unit, input, rng);
    if (shift != 0)
        for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, std::ldexp(t.value(i), -shift));
    if (specials) inject_specials(t, spec.specials, rng);
    return t;
}

}  // namespace

// dims = {Lq, Lk, Hi, c, H, D, Dv, ties, v_from_kv}: Lk - Lq earlier keys
// (decode: Lq = 1 after many), exact ties in a third of the cases (index key
// 2m + 1 a copy of 2m: every query scores them equally), and v the first Dv
// columns of kv (MLA's latent entries as the values) in half of them.
rc::Gen<CaseSpec> gen_dsa_attention_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](std::int64_t lq, std::int64_t extra, std::int64_t hi, std::int64_t c, std::int64_t h, std::int64_t d,
              std::int64_t dv, std::int64_t k, int ties, int v_from_kv, double scale, Family fi, Family fk, Family fa,
              int scale_exp, std::uint64_t seed, int specials) {
            Params p({{"k", static_cast<double>(k)}, {"scale", scale}});
            CaseSpec s = structured_spec("dsa_attention", fmt, {lq, lq + extra, hi, c, h, d, dv, ties, v_from_kv}, p, fi,
                                         scale_exp, seed, specials);
            s.families = {fi, fk, Family::normal, fa, fa, fa};
            return s;
        },
        rc::gen::element<std::int64_t>(1, 2, 5, 9), rc::gen::element<std::int64_t>(0, 0, 3, 11),
        rc::gen::element<std::int64_t>(1, 2, 4), rc::gen::element<std::int64_t>(1, 4, 16),
        rc::gen::element<std::int64_t>(1, 2, 3), rc::gen::element<std::int64_t>(2, 8, 17),
        rc::gen::element<std::int64_t>(1, 4), rc::gen::element<std::int64_t>(1, 2, 4, 8), rc::gen::element(0, 0, 1),
        rc::gen::inRange(0, 2), rc::gen::element(0.0, 0.0, 0.3), rc::gen::elementOf(value_families()),
        rc::gen::elementOf(value_families()), rc::gen::elementOf(dsa_attention_families()), rc::gen::inRange(-3, 2),
        rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_dsa_attention_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const auto& dm = spec.dims;
    const std::int64_t lq = dm.at(0), lk = std::max(dm.at(1), lq), hi = dm.at(2), cd = dm.at(3), h = dm.at(4), d = dm.at(5),
                       dv = dm.at(6);
    const bool ties = dm.size() > 7 && dm[7], v_from_kv = dm.size() > 8 && dm[8] && dv <= d;
    const Family fi = spec.families.at(0), fk = spec.families.size() > 1 ? spec.families[1] : fi;
    const Family fa = spec.families.size() > 3 ? spec.families[3] : Family::normal;
    // Special values: every kind (NaN, +-Inf, +-0, +-max) into the indexer's
    // inputs, as lightning_indexer's generator; NaNs alone into q, kv and v,
    // as the attention op's (docs/dsa_attention.md, "Special values").
    // q and kv each scaled by 2^-max(1, ceil(log2(D) / 4)): q . k of order one, the softmax not saturated by construction.
    const int shift = std::max(1, static_cast<int>(std::ceil(std::log2(static_cast<double>(d)) / 4)));
    Tensor iq = dsa_filled(spec.format, {lq, hi, cd}, fi, spec, 0, rng, 0, true);
    Tensor ik = dsa_filled(spec.format, {lk, cd}, fk, spec, 1, rng, 0, true);
    Tensor iw = dsa_filled(spec.format, {lq, hi}, Family::normal, spec, 2, rng, 0, false);
    if (ties)
        for (std::int64_t s = 0; s + 1 < lk; s += 2)
            for (std::int64_t i = 0; i < cd; ++i) ik.set_bits((s + 1) * cd + i, ik.bits(s * cd + i));
    Tensor q = dsa_filled(spec.format, {h, lq, d}, fa, spec, 3, rng, shift, false);
    Tensor kv = dsa_filled(spec.format, {1, lk, d}, fa, spec, 4, rng, shift, false);
    Tensor v = dsa_filled(spec.format, {1, lk, dv}, fa, spec, 5, rng, 0, false);
    for (Tensor* t : {&q, &kv, &v})
        for (int n = 0; n < spec.specials && t->numel(); ++n) t->set_value(static_cast<std::int64_t>(rng() % t->numel()), NAN);
    if (v_from_kv)
        for (std::int64_t s = 0; s < lk; ++s)
            for (std::int64_t x = 0; x < dv; ++x) v.set_bits(s * dv + x, kv.bits(s * d + x));
    for (Tensor* t : {&iq, &ik, &iw, &q, &kv, &v}) c.inputs.push_back(std::move(*t));
    return c;
}

namespace {

CaseSpec dsa_plain_spec(const KernelInfo& k) {
    CaseSpec s = in_domain(*gen_dsa_attention_spec(k.in, GenOptions{}));
    s.specials = 0;
    return s;
}

std::string dsa_id(double v) { return std::isnan(v) ? "NaN" : std::to_string(static_cast<long long>(v)); }

// Every id a kernel returns is a token at or before the query's position,
// each at most once, and a query with p + 1 < k earlier tokens fills exactly
// p + 1 slots (the rest -1): selection never looks ahead.
Testable dsa_never_looks_ahead(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(dsa_plain_spec(k));
        const oracle::DsaSetup s = oracle::dsa_setup(c.params, c.views());
        const Tensor ids = run_kernel(k, c.params, c.views()).at(2);
        for (std::int64_t i = 0; i < s.lq; ++i) {
            if (std::isnan(ids.value(i * s.k))) continue;  // a NaN score in the row
            const std::int64_t pos = s.select.offset + i;
            std::set<double> seen;
            for (std::int64_t j = 0; j < s.k; ++j) {
                const double id = ids.value(i * s.k + j);
                if (id == -1) continue;
                if (!(id >= 0 && id <= static_cast<double>(pos) && id == std::floor(id)) || !seen.insert(id).second)
                    RC_FAIL("query " + std::to_string(i) + " (position " + std::to_string(pos) + ") slot " +
                            std::to_string(j) + ": token " + dsa_id(id) + " is after the query or chosen twice");
            }
            if (static_cast<std::int64_t>(seen.size()) != std::min(s.k, pos + 1))
                RC_FAIL("query " + std::to_string(i) + " (position " + std::to_string(pos) + "): " +
                        std::to_string(seen.size()) + " tokens selected, want min(k, p + 1) = " +
                        std::to_string(std::min(s.k, pos + 1)));
        }
    };
}

// With k >= Lk every eligible token is selected and o, lse are dense causal
// attention (bottom-right): the kernel is held to the attention op's own
// oracle and bound (attention_bound with causal = 1, no mask), a check of the
// selection's mask against attention's causal convention.
Testable dsa_dense_when_k_covers(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = dsa_plain_spec(k);
        spec.params.set("k", static_cast<double>(std::max(spec.dims[0], spec.dims[1])));
        const Case c = build_case(spec);
        const std::vector<TensorView> in = c.views(), attn{in[3], in[4], in[5]};
        const std::vector<Tensor> got = run_kernel(k, c.params, in);
        Params ap = c.params;
        ap.set("causal", 1);
        const std::vector<Format> fo{output_format(k, 0), output_format(k, 1)};
        const auto ex = oracle::evaluate_structured("attention", ap, attn, fo).exact;
        Params bp = ap;
        for (const auto& [key, value] : k.declared) bp.set("declared." + key, value);
        const std::vector<double> b = oracle::attention_bound(bp, attn, oracle::attention_outputs(attn, ex.at(0), ex.at(1)),
                                                              oracle::declared_flash_model(bp, fo));
        // Rows whose selection is NaN (a NaN eligible score) or not determined
        // (an indexer score may overflow FP32) are the selection's business.
        const oracle::DsaSetup s = oracle::dsa_setup(c.params, in);
        const oracle::DsaScores sc = oracle::dsa_scores(s, in);
        std::vector<char> skip(static_cast<std::size_t>(s.lq), 0);
        for (std::int64_t i = 0; i < s.lq; ++i) {
            skip[static_cast<std::size_t>(i)] = sc.undefined[static_cast<std::size_t>(i)];
            for (std::int64_t n = 0; n <= s.select.offset + i; ++n)
                if (std::isnan(sc.score[static_cast<std::size_t>(i * s.lk + n)])) skip[static_cast<std::size_t>(i)] = 1;
        }
        std::int64_t judged = 0;
        for (std::size_t o = 0; o < 2; ++o)
            for (std::size_t i = 0; i < ex[o].size(); ++i) {
                const double e = ex[o][i], bound = b[o == 0 ? i : ex[0].size() + i];
                const double x = got[o].value(static_cast<std::int64_t>(i));
                const std::size_t row = (o == 0 ? i / static_cast<std::size_t>(s.dv) : i) % static_cast<std::size_t>(s.lq);
                if (skip[row] || !std::isfinite(e) || !(bound >= 0) || !std::isfinite(bound)) continue;
                ++judged;
                if (!(std::fabs(x - e) <= bound))
                    RC_FAIL(std::string(o == 0 ? "o" : "lse") + "[" + std::to_string(i) + "] with k = " +
                            std::to_string(static_cast<long long>(c.params.get("k", 4))) + ": " + hexfloat(x) +
                            ", dense causal attention " + hexfloat(e) + " (bound " + hexfloat(bound) + ")\n" +
                            show_inputs(*c.op, c.params, in));
            }
        RC_PRE(judged > 0);
    };
}

// Rows [0, n) of a [rows, ...] tensor (first dimension), or of the second
// dimension of a [1, rows, w] one (kv, v).
Tensor dsa_prefix(const Tensor& t, std::int64_t n, bool second) {
    std::vector<std::int64_t> shape = t.shape();
    const std::int64_t row = t.numel() / (second ? shape[1] : shape[0]);
    shape[second ? 1 : 0] = n;
    Tensor r(t.format(), shape);
    for (std::int64_t i = 0; i < n * row; ++i) r.set_bits(i, t.bits(i));
    return r;
}

// Query row i of the reference run `ref` and of another run's outputs `got`
// (o, lse; `at(lse, h, x)` the other run's flat index of head h's element x)
// agree within twice the reference's bound on every judged element.
void dsa_row_within_twice(const CaseEval& ref, const std::vector<Tensor>& got, const oracle::DsaSetup& s, std::int64_t i,
                          const std::function<std::int64_t(bool, std::int64_t, std::int64_t)>& at, const std::string& what,
                          const std::string& inputs) {
    for (std::int64_t h = 0; h < s.h; ++h)
        for (std::int64_t x = 0; x <= s.dv; ++x) {  // x = Dv: the lse
            const bool lse = x == s.dv;
            const auto r = static_cast<std::size_t>(lse ? h * s.lq + i : (h * s.lq + i) * s.dv + x);
            const double bound = judged_bound(ref, lse ? 1 : 0, r);
            if (std::isnan(bound)) continue;
            const double want = ref.outputs[lse ? 1 : 0].got.value(static_cast<std::int64_t>(r));
            const double have = got[lse ? 1 : 0].value(at(lse, h, x));
            if (!(std::fabs(have - want) <= 2 * bound))
                RC_FAIL("head " + std::to_string(h) + ", query " + std::to_string(i) +
                        (lse ? ", lse" : ", o[" + std::to_string(x) + "]") + ": " + what + " " + hexfloat(have) +
                        ", reference " + hexfloat(want) + ": beyond twice the reference's bound " + hexfloat(bound) +
                        "\n" + inputs);
        }
}

// Decode equals prefill: query i alone (its index query, weights and every
// head's query) against the first Lk - Lq + i + 1 keys selects what the
// prefill's row i selects -- the same ids, or (where the kernel's own
// scores come out differently with the other shape) both within the
// indexer's budget; with the same ids, o and lse agree within twice the
// prefill's bound.
Testable dsa_decode_equals_prefill(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(dsa_plain_spec(k));
        const std::vector<TensorView> in = c.views();
        const oracle::DsaSetup s = oracle::dsa_setup(c.params, in);
        const CaseEval pre = evaluate_case(k, c.params, in);
        const std::int64_t i = *rc::gen::inRange<std::int64_t>(0, s.lq), n = s.select.offset + i + 1;
        Tensor iq(k.in, {1, s.hi, s.c}), iw(k.in, {1, s.hi}), q(k.in, {s.h, 1, s.d});
        for (std::int64_t x = 0; x < s.hi * s.c; ++x) iq.set_bits(x, c.inputs[0].bits(i * s.hi * s.c + x));
        for (std::int64_t x = 0; x < s.hi; ++x) iw.set_bits(x, c.inputs[2].bits(i * s.hi + x));
        for (std::int64_t h = 0; h < s.h; ++h)
            for (std::int64_t x = 0; x < s.d; ++x) q.set_bits(h * s.d + x, c.inputs[3].bits((h * s.lq + i) * s.d + x));
        const std::vector<Tensor> dec_in{iq, dsa_prefix(c.inputs[1], n, false), iw, q, dsa_prefix(c.inputs[4], n, true),
                                         dsa_prefix(c.inputs[5], n, true)};
        std::vector<TensorView> dv;
        for (const Tensor& t : dec_in) dv.push_back(t.view());
        const std::vector<Tensor> dec = run_kernel(k, c.params, dv);
        std::vector<double> a(static_cast<std::size_t>(s.k)), b(a.size());
        for (std::int64_t j = 0; j < s.k; ++j)
            a[static_cast<std::size_t>(j)] = pre.outputs[2].got.value(i * s.k + j), b[static_cast<std::size_t>(j)] = dec[2].value(j);
        const auto same = [](const std::vector<double>& x, const std::vector<double>& y) {
            for (std::size_t j = 0; j < x.size(); ++j)
                if (!(x[j] == y[j] || (std::isnan(x[j]) && std::isnan(y[j])))) return false;
            return true;
        };
        if (!same(a, b)) {
            const oracle::DsaScores sc = oracle::dsa_scores(s, in);
            const auto scores = oracle::dsa_row(s, sc.score, i), delta = oracle::dsa_row(s, sc.delta, i);
            if (!oracle::selection_admissible(s.select, scores, delta, i, a) ||
                !oracle::selection_admissible(s.select, scores, delta, i, b)) {
                std::string ta, tb;
                for (std::size_t j = 0; j < a.size(); ++j) ta += " " + dsa_id(a[j]), tb += " " + dsa_id(b[j]);
                RC_FAIL("query " + std::to_string(i) + ": prefill selects" + ta + ", decoded alone" + tb +
                        ", not both within the indexer's budget\n" + show_inputs(*c.op, c.params, in));
            }
            return;
        }
        dsa_row_within_twice(pre, dec, s, i, [&](bool lse, std::int64_t h, std::int64_t x) { return lse ? h : h * s.dv + x; },
                             "decoded alone", show_inputs(*c.op, c.params, in));
    };
}

// No positional term (seed 001 §1.5.2: the indexer scores content; RoPE is
// the caller's): the last query, which sees every key, selects the same
// tokens after the keys (ik, kv, v rows together) are permuted -- the ids
// mapped back through the permutation form an admissible selection of the
// original row -- and where the mapped ids are the same its o and lse agree
// within twice the original's bound.
Testable dsa_key_permutation(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(dsa_plain_spec(k));
        const std::vector<TensorView> in = c.views();
        const oracle::DsaSetup s = oracle::dsa_setup(c.params, in);
        const CaseEval orig = evaluate_case(k, c.params, in);
        std::vector<std::int64_t> perm(static_cast<std::size_t>(s.lk));  // original token t goes to perm[t]
        for (std::int64_t t = 0; t < s.lk; ++t) perm[static_cast<std::size_t>(t)] = t;
        std::shuffle(perm.begin(), perm.end(), std::mt19937_64(*rc::gen::arbitrary<std::uint64_t>()));
        const auto permuted = [&](const Tensor& t) {  // the Lk rows of [Lk, w] or of [1, Lk, w]
            Tensor r(t.format(), t.shape());
            const std::int64_t w = t.numel() / s.lk;
            for (std::int64_t x = 0; x < s.lk; ++x)
                for (std::int64_t e = 0; e < w; ++e) r.set_bits(perm[static_cast<std::size_t>(x)] * w + e, t.bits(x * w + e));
            return r;
        };
        const std::vector<Tensor> p_in{c.inputs[0], permuted(c.inputs[1]), c.inputs[2], c.inputs[3],
                                       permuted(c.inputs[4]), permuted(c.inputs[5])};
        std::vector<TensorView> pv;
        for (const Tensor& t : p_in) pv.push_back(t.view());
        const std::vector<Tensor> got = run_kernel(k, c.params, pv);
        const std::int64_t i = s.lq - 1;
        std::vector<std::int64_t> back(perm.size());
        for (std::size_t t = 0; t < perm.size(); ++t) back[static_cast<std::size_t>(perm[t])] = static_cast<std::int64_t>(t);
        std::vector<double> mapped(static_cast<std::size_t>(s.k)), before(mapped.size());
        for (std::int64_t j = 0; j < s.k; ++j) {
            const double id = got[2].value(i * s.k + j);
            mapped[static_cast<std::size_t>(j)] = id >= 0 ? static_cast<double>(back[static_cast<std::size_t>(id)]) : id;
            before[static_cast<std::size_t>(j)] = orig.outputs[2].got.value(i * s.k + j);
        }
        RC_PRE(!std::isnan(before[0]) && !std::isnan(mapped[0]));
        if (mapped != before) {
            const oracle::DsaScores sc = oracle::dsa_scores(s, in);
            if (!oracle::selection_admissible(s.select, oracle::dsa_row(s, sc.score, i), oracle::dsa_row(s, sc.delta, i), i,
                                              mapped)) {
                std::string ta, tb;
                for (std::size_t j = 0; j < mapped.size(); ++j) ta += " " + dsa_id(before[j]), tb += " " + dsa_id(mapped[j]);
                RC_FAIL("last query: selects" + ta + "; after permuting the keys (ids mapped back)" + tb +
                        ", not within the indexer's budget\n" + show_inputs(*c.op, c.params, in));
            }
            return;
        }
        dsa_row_within_twice(orig, got, s, i, [&](bool lse, std::int64_t h, std::int64_t x) {
            return lse ? h * s.lq + i : (h * s.lq + i) * s.dv + x;
        }, "keys permuted", show_inputs(*c.op, c.params, in));
    };
}

}  // namespace

void add_dsa_properties(std::vector<PropertyDef>& v) {
    auto dsa = [](const OpSpec& op) { return op.name == "dsa_attention"; };
    v.push_back({"never_looks_ahead",
                 "every selected token is at or before the query (distinct ids, min(k, p + 1) of them, -1 after)", dsa,
                 of_kernel(dsa_never_looks_ahead)});
    v.push_back({"dense_when_k_covers",
                 "with k >= Lk, o and lse are dense causal attention within the attention op's own bound", dsa,
                 of_kernel(dsa_dense_when_k_covers), 2});
    v.push_back({"decode_equals_prefill",
                 "query i alone over the first Lk - Lq + i + 1 keys selects what the prefill's row i selects (or both "
                 "within the indexer's budget), and then o, lse agree within twice the prefill's bound",
                 dsa, of_kernel(dsa_decode_equals_prefill), 2});
    v.push_back({"key_permutation",
                 "permuting the keys (index keys, kv and v rows together) leaves the last query's selection (ids mapped "
                 "back) admissible and, where it is the same, o and lse within twice the bound",
                 dsa, of_kernel(dsa_key_permutation), 2});
}

}  // namespace conform::props
