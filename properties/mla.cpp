// Generators and properties of multi-head latent attention (docs/mla.md,
// "Properties").
#include <algorithm>
#include <cmath>

#include "oracle/mla.hpp"
#include "properties/common.hpp"
#include "properties/verdict.hpp"

namespace conform::props {
namespace {

// dims = {H, L, Lc, d_model, d_c, d_nope, d_r, d_v}.
struct MlaSpecDims {
    std::int64_t heads, tokens, cached, d_model, d_c, d_nope, d_r, d_v;
};
MlaSpecDims mla_dims_of(const CaseSpec& s) {
    const auto& d = s.dims;
    return {d.at(0), d.at(1), d.at(2), d.at(3), d.at(4), d.at(5), d.at(6), d.at(7)};
}

const std::vector<Family>& mla_families() {
    static const std::vector<Family> f{Family::normal, Family::uniform, Family::heavy_tail,
                                       Family::outlier, Family::constant, Family::tiny};
    return f;
}

// A weight [shape] with fan-in n: the family's values times 2^-ceil(log2(n) / 2)
// (about 1/sqrt(n), as initialised models are), so that the logits stay of
// order one and the softmax is not saturated by construction.
Tensor mla_weight(Format f, std::vector<std::int64_t> shape, std::int64_t fan_in, Family fam, const CaseSpec& spec,
                  std::size_t input, std::mt19937_64& rng) {
    CaseSpec unit = spec;
    unit.scale_exp = 0;
    Tensor t(f, std::move(shape));
    fill_values(t, fam, unit, input, rng);
    const int k = static_cast<int>(std::ceil(std::log2(static_cast<double>(std::max<std::int64_t>(fan_in, 1))) / 2));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, std::ldexp(t.value(i), -k));
    return t;
}

Tensor mla_data(Format f, std::vector<std::int64_t> shape, Family fam, const CaseSpec& spec, std::size_t input,
                std::mt19937_64& rng) {
    Tensor t(f, std::move(shape));
    fill_values(t, fam, spec, input, rng);
    inject_specials(t, spec.specials, rng);
    return t;
}

}  // namespace

// Sizes small enough for the MPFR oracle (every key of every head at two
// precisions): H up to 3 (shared rope key and per-head weights both
// matter), d_nope = d_c (a square W_uk, where a missing transpose still
// type-checks) and not, d_r = 0 (plain attention on up-projected KV).
rc::Gen<CaseSpec> gen_mla_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](std::int64_t h, std::int64_t l, std::int64_t lc, std::int64_t dm, std::int64_t dc, std::int64_t dn,
              std::int64_t dr, std::int64_t dv, int causal, double scale, int pairing, std::int64_t offset, int rotated,
              double base, int form, Family fh, Family fw, int scale_exp, std::uint64_t seed, int specials) {
            if (!rotated) offset += lc;  // a raw cache sits at positions offset - Lc ...
            if (dn + dr == 0) dn = 2;    // a query needs some head dim
            Params p({{"causal", static_cast<double>(causal)}, {"scale", scale}, {"pairing", static_cast<double>(pairing)},
                      {"offset", static_cast<double>(offset)}, {"cache_rotated", static_cast<double>(rotated)},
                      {"base", base}, {"form", static_cast<double>(form)}});
            CaseSpec s = structured_spec("mla", fmt, {h, l, lc, dm, dc, dn, dr, dv}, p, fh, scale_exp, seed, specials);
            s.families = {fh, fw};
            return s;
        },
        rc::gen::element<std::int64_t>(1, 2, 3), rc::gen::element<std::int64_t>(1, 2, 4),
        rc::gen::element<std::int64_t>(0, 0, 1, 3), rc::gen::element<std::int64_t>(1, 4, 8, 16),
        rc::gen::element<std::int64_t>(1, 4, 8), rc::gen::element<std::int64_t>(0, 2, 4, 8),
        rc::gen::element<std::int64_t>(0, 2, 4), rc::gen::element<std::int64_t>(1, 3, 4), rc::gen::element(1, 1, 0),
        rc::gen::element(0.0, 0.0, 0.3), rc::gen::inRange(0, 2), rc::gen::element<std::int64_t>(0, 3, 1000, 100000),
        rc::gen::element(1, 1, 0), rc::gen::element(10000.0, 500.0), rc::gen::inRange(0, 2),
        rc::gen::elementOf(mla_families()), rc::gen::element(Family::normal, Family::uniform, Family::heavy_tail),
        rc::gen::inRange(-3, 2), rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

// Inputs in the op's order; the cache (normal values) only when Lc > 0.
Case build_mla_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const MlaSpecDims d = mla_dims_of(spec);
    const Format f = spec.format;
    const Family fh = spec.families.at(0), fw = spec.families.size() > 1 ? spec.families[1] : Family::normal;
    c.inputs.push_back(mla_data(f, {d.tokens, d.d_model}, fh, spec, 0, rng));
    c.inputs.push_back(mla_weight(f, {d.d_c, d.d_model}, d.d_model, fw, spec, 1, rng));
    c.inputs.push_back(mla_weight(f, {d.heads, d.d_nope, d.d_c}, d.d_c, fw, spec, 2, rng));
    c.inputs.push_back(mla_weight(f, {d.heads, d.d_v, d.d_c}, d.d_c, fw, spec, 3, rng));
    c.inputs.push_back(mla_weight(f, {d.heads, d.d_nope + d.d_r, d.d_model}, d.d_model, fw, spec, 4, rng));
    c.inputs.push_back(mla_weight(f, {d.d_r, d.d_model}, d.d_model, fw, spec, 5, rng));
    if (d.cached > 0) {
        CaseSpec unit = spec;
        unit.scale_exp = 0;
        c.inputs.push_back(mla_data(f, {d.cached, d.d_c}, Family::normal, unit, 6, rng));
        c.inputs.push_back(mla_data(f, {d.cached, d.d_r}, Family::normal, unit, 7, rng));
    }
    return c;
}

namespace {

const KernelInfo* builtin_mla(Format f, const char* form) {
    return builtin_registry().find(std::string("cpu.") + form + ".mla." + name(f));
}

CaseSpec mla_spec(const KernelInfo& k) {
    CaseSpec s = in_domain(*gen_mla_spec(k.in, GenOptions{}));
    s.specials = 0;
    return s;
}

// The kernel against the built-in kernel of the other form (explicit for an
// absorbed one or one that declares no form): every element within the sum
// of both kernels' bounds, since each is within its own of the same exact value.
Testable absorbed_equals_explicit(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(mla_spec(k));
        const auto form = k.declared.find("form");
        const bool explicit_k = form != k.declared.end() && form->second == 0;
        const KernelInfo* other = builtin_mla(k.in, explicit_k ? "absorbed" : "explicit");
        RC_PRE(other != nullptr && other != &k);
        const CaseEval a = evaluate_case(k, c.params, c.views()), b = evaluate_case(*other, c.params, c.views());
        std::int64_t judged = 0;
        for (std::size_t o = 0; o < a.outputs.size(); ++o)
            for (std::size_t i = 0; i < a.outputs[o].exact.size(); ++i) {
                const double ba = judged_bound(a, o, i), bb = judged_bound(b, o, i);
                if (std::isnan(ba) || std::isnan(bb)) continue;
                const double x = a.outputs[o].got.value(static_cast<std::int64_t>(i));
                const double y = b.outputs[o].got.value(static_cast<std::int64_t>(i));
                ++judged;
                if (!(std::fabs(x - y) <= ba + bb))
                    RC_FAIL(a.outputs[o].name + "[" + std::to_string(i) + "]: " + k.name + " gives " + hexfloat(x) + ", " +
                            other->name + " " + hexfloat(y) + ": |difference| exceeds the sum of their bounds " +
                            hexfloat(ba) + " + " + hexfloat(bb) + "\n" + show_inputs(*c.op, c.params, c.views()));
            }
        RC_PRE(judged > 0);
    };
}

// Rows [r0, r1) of a [rows, w] tensor followed by `extra` rows (the cache
// grown by the new tokens' entries), in format f.
Tensor mla_grown(Format f, const Tensor* base, std::int64_t w, const std::vector<oracle::Real>& extra, std::int64_t n_extra) {
    const std::int64_t rows = base ? base->shape()[0] : 0;
    Tensor t(f, {rows + n_extra, w});
    for (std::int64_t i = 0; i < rows * w; ++i) t.set_bits(i, base->bits(i));
    // The exact entries rounded to nearest through double: within half an
    // ulp of f and 2^-53 relative, inside the latent's and rope key's
    // bounds that the prefill's own bound already carries.
    for (std::int64_t i = 0; i < n_extra * w; ++i) t.set_value(rows * w + i, oracle::to_double(extra[static_cast<std::size_t>(i)]));
    return t;
}

// Causal prefill of L tokens against L decode steps: step t gets token t
// alone at offset + t, with the cache grown by the entries of tokens < t
// (the oracle's mla_cache_entries stored in the kernel's format; the op
// returns no cache).  The prefill's bound of row t also bounds the decode
// step (the same stages on a cache within the latent's and rope key's
// bounds, over the same visible keys), so the two rows agree within twice it.
Testable prefill_equals_cached_decode(const KernelInfo& k) {
    return [&k] {
        CaseSpec s = mla_spec(k);
        s.params.set("causal", 1);
        if (s.params.get("cache_rotated", 1) == 0) s.params.set("cache_rotated", 1);
        s.dims[1] = std::max<std::int64_t>(s.dims[1], 2);
        const Case c = build_case(s);
        const MlaSpecDims d = mla_dims_of(s);
        const CaseEval pre = evaluate_case(k, c.params, c.views());
        const oracle::MlaProblem p = oracle::read_mla_problem(c.views());
        const oracle::MlaCacheEntries e = oracle::mla_cache_entries(p, oracle::read_mla_config(c.params, p));
        const Tensor* cc = d.cached ? &c.inputs[6] : nullptr;
        const Tensor* kc = d.cached ? &c.inputs[7] : nullptr;
        std::int64_t judged = 0;
        for (std::int64_t t = 0; t < d.tokens; ++t) {
            std::vector<Tensor> in(c.inputs.begin(), c.inputs.begin() + 6);
            in[0] = Tensor(k.in, {1, d.d_model});
            for (std::int64_t x = 0; x < d.d_model; ++x) in[0].set_bits(x, c.inputs[0].bits(t * d.d_model + x));
            if (d.cached + t > 0) {
                in.push_back(mla_grown(k.in, cc, d.d_c, e.c_kv, t));
                in.push_back(mla_grown(k.in, kc, d.d_r, e.k_r, t));
            }
            Params pt = c.params;
            pt.set("offset", c.params.get("offset", 0) + static_cast<double>(t));
            std::vector<TensorView> views;
            for (const Tensor& x : in) views.push_back(x.view());
            const std::vector<Tensor> dec = run_kernel(k, pt, views);
            for (std::int64_t h = 0; h < d.heads; ++h)
                for (std::int64_t x = 0; x <= d.d_v; ++x) {  // x = d_v: the lse
                    const bool lse = x == d.d_v;
                    const auto i = static_cast<std::size_t>(lse ? h * d.tokens + t : (h * d.tokens + t) * d.d_v + x);
                    const double b = judged_bound(pre, lse ? 1 : 0, i);
                    if (std::isnan(b)) continue;
                    const double want = pre.outputs[lse ? 1 : 0].got.value(static_cast<std::int64_t>(i));
                    const double got = dec[lse ? 1 : 0].value(lse ? h : h * d.d_v + x);
                    ++judged;
                    if (!(std::fabs(got - want) <= 2 * b))
                        RC_FAIL("head " + std::to_string(h) + ", token " + std::to_string(t) + (lse ? ", lse" : ", o[" + std::to_string(x) + "]") +
                                ": decode step gives " + hexfloat(got) + ", prefill " + hexfloat(want) +
                                ": beyond twice the prefill's bound " + hexfloat(b) + "\n" +
                                show_inputs(*c.op, c.params, c.views()));
                }
        }
        RC_PRE(judged > 0);
    };
}

}  // namespace

void add_mla_properties(std::vector<PropertyDef>& v) {
    auto mla = [](const OpSpec& op) { return op.name == "mla"; };
    auto gated = [](const KernelInfo& k) { return k.role != Role::baseline; };
    v.push_back({"absorbed_equals_explicit",
                 "the kernel and the built-in kernel of the other form (explicit vs absorbed) agree within the sum "
                 "of their derived bounds",
                 mla, [](const KernelInfo& k, const RunConfig&, Stats*) { return absorbed_equals_explicit(k); }, 2, gated});
    v.push_back({"prefill_equals_cached_decode",
                 "causal prefill of L tokens equals L one-token decode steps over the growing latent cache (each "
                 "row within twice the prefill's bound)",
                 mla, [](const KernelInfo& k, const RunConfig&, Stats*) { return prefill_equals_cached_decode(k); }, 2,
                 gated});
}

}  // namespace conform::props
