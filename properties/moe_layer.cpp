// Generators and properties of the MoE layers moe and latent_moe
// (docs/moe.md, "Properties").
#include <cmath>
#include <numeric>

#include "numerics/moe_slots.hpp"
#include "oracle/bound.hpp"
#include "oracle/moe_layer.hpp"
#include "properties/common.hpp"
#include "properties/verdict.hpp"

namespace conform::props {
namespace {

// dims = {T, C, E, F, S, L, has selection_bias, has norm_weight}.
struct LayerDims {
    std::int64_t t, c, e, f, s, l, bias, norm;
};
LayerDims layer_dims_of(const CaseSpec& s) {
    return {s.dims.at(0), s.dims.at(1), s.dims.at(2), s.dims.at(3), s.dims.at(4), s.dims.at(5), s.dims.at(6), s.dims.at(7)};
}

Tensor layer_tensor(Format f, std::vector<std::int64_t> shape, Family fam, const CaseSpec& spec, std::size_t input,
              std::mt19937_64& rng) {
    Tensor t(f, std::move(shape));
    fill_values(t, fam, spec, input, rng);
    return t;
}

}  // namespace

// Sizes small enough for the MPFR oracle of a whole layer (about 2^14
// products per case): past none of the matmul kernel's tiles, which its own
// suite covers.
rc::Gen<CaseSpec> gen_moe_layer_spec(const std::string& op, Format fmt, GenOptions opt) {
    const bool latent = op == "latent_moe";
    return rc::gen::apply(
        [fmt, op, latent](std::int64_t t, std::int64_t c, std::int64_t e, std::int64_t f, std::int64_t s, std::int64_t l,
                          int k, int score, int renorm, double capacity, int bias, int norm, int normalized, Family fx,
                          Family fw, int scale, std::uint64_t seed, int specials) {
            Params p({{"k", static_cast<double>(std::min<std::int64_t>(k, e))},
                      {"score", static_cast<double>(score)},
                      {"renormalize", static_cast<double>(renorm)},
                      {"capacity", capacity}});
            if (latent) p.set("normalized", normalized), p.set("eps", 1e-6);
            CaseSpec cs = structured_spec(op, fmt, {t, c, e, f, s, latent ? l : 0, bias, latent ? norm : 0}, p, fx, scale,
                                          seed, specials);
            cs.families = {fx, fw};
            return cs;
        },
        rc::gen::element<std::int64_t>(1, 3, 8), rc::gen::element<std::int64_t>(1, 4, 16),
        rc::gen::element<std::int64_t>(2, 4, 8), rc::gen::element<std::int64_t>(1, 4, 8),
        rc::gen::element<std::int64_t>(0, 1, 2), rc::gen::element<std::int64_t>(1, 4, 8), rc::gen::element(1, 2, 4),
        rc::gen::inRange(0, 2), rc::gen::inRange(0, 2), rc::gen::element(0.0, 0.0, 0.5, 1.25), rc::gen::inRange(0, 2),
        rc::gen::inRange(0, 2), rc::gen::element(1, 1, 0), rc::gen::elementOf(moe_families()),
        rc::gen::elementOf(moe_families()), rc::gen::inRange(-3, 2), rc::gen::arbitrary<std::uint64_t>(),
        opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

// Inputs in the op's order; absent optional ones are left out at the end,
// empty views in place before a present one.
Case build_moe_layer_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const LayerDims d = layer_dims_of(spec);
    const bool latent = spec.op == "latent_moe";
    const std::int64_t w = latent ? d.l : d.c;
    const Format f = spec.format;
    const Family fx = spec.families.at(0), fw = spec.families.size() > 1 ? spec.families[1] : fx;
    std::size_t input = 0;
    auto add = [&](std::vector<std::int64_t> shape, Family fam) {
        c.inputs.push_back(layer_tensor(f, std::move(shape), fam, spec, input++, rng));
    };
    add({d.t, d.c}, fx);
    add({d.c, d.e}, fw);
    if (latent) add({d.c, w}, fw), add({w, d.c}, fw);
    add({d.e, w, 2 * d.f}, fw);
    add({d.e, d.f, w}, fw);
    for (Tensor& t : c.inputs) inject_specials(t, spec.specials, rng);
    const bool want_norm = latent && d.norm, want_bias = d.bias != 0;
    if (d.s > 0) add({d.s, d.c, 2 * d.f}, fw), add({d.s, d.f, d.c}, fw);
    else if (want_norm || want_bias) c.inputs.emplace_back(f, std::vector<std::int64_t>{0}), c.inputs.emplace_back(f, std::vector<std::int64_t>{0});
    if (latent) {
        if (want_norm) {
            Tensor n(f, {w});
            std::normal_distribution<double> N;
            for (std::int64_t i = 0; i < w; ++i) n.set_value(i, 1 + 0.25 * N(rng));
            c.inputs.push_back(std::move(n));
        } else if (want_bias) {
            c.inputs.emplace_back(f, std::vector<std::int64_t>{0});
        }
    }
    if (want_bias) c.inputs.push_back(selection_bias(d.e, rng));
    return c;
}

namespace {

CaseSpec layer_spec(const KernelInfo& k) { return in_domain(*gen_moe_layer_spec(k.op, k.in, GenOptions{})); }

// "y[t, c]" of flat element i of y [T, C].
std::string at(const Tensor& y, std::int64_t i) {
    const std::int64_t c = y.shape()[1];
    return "y[" + std::to_string(i / c) + ", " + std::to_string(i % c) + "]";
}

std::vector<TensorView> layer_views(const std::vector<Tensor>& ts) {
    std::vector<TensorView> v;
    for (const Tensor& t : ts) v.push_back(t.view());
    return v;
}

// The tokens whose routing weights the router's budget leaves unbounded
// (kUndefined), for the kernel's selection where the budget admits it (the
// staged evaluation, as the verdict does): a chosen expert whose FP32 p
// underflows -- a softmax score far below the maximum, chosen through its
// selection bias -- makes its renormalized weight 0 / 0, and a NaN weight
// times the routed experts' exact 0 is NaN (docs/moe.md, "Error budget").
std::vector<char> unbounded_routing(const KernelInfo& k, const Params& p, const std::vector<Tensor>& in,
                                    const std::vector<Tensor>& out) {
    std::vector<TensorView> v = layer_views(in);
    for (const Tensor& o : out) v.push_back(o.view());
    const moe_slots::Layer l = moe_slots::read_layer(k.op, p, v);
    const std::vector<double> weight_err = oracle::layer_routing(l, p, v, k.acc).bound[1];
    std::vector<char> unbounded(static_cast<std::size_t>(l.t), 0);
    for (std::size_t at = 0; at < weight_err.size(); ++at)
        if (weight_err[at] == oracle::kUndefined) unbounded[at / static_cast<std::size_t>(l.k)] = 1;
    return unbounded;
}

// The routed experts' down weights set to 0 and the router redrawn: every
// routed expert then adds an exact 0, so y is the shared experts' alone and
// must not change (compared by value: +0 and -0 alike).  With no shared
// experts y is 0.  Not compared: a token whose routing weights either
// router leaves unbounded (unbounded_routing).
Testable shared_independent_of_routing(const KernelInfo& k) {
    return [&k] {
        CaseSpec s = layer_spec(k);
        s.families = {Family::normal, Family::normal};
        s.specials = 0;
        const Case c = build_case(s);
        const moe_slots::Layer l = moe_slots::read_layer(k.op, c.params, c.views());
        std::vector<Tensor> a = c.inputs;
        Tensor& dn = a[static_cast<std::size_t>(l.at[moe_slots::down])];
        for (std::int64_t i = 0; i < dn.numel(); ++i) dn.set_value(i, 0);
        std::vector<Tensor> b = a;
        Tensor& router = b[static_cast<std::size_t>(l.at[moe_slots::router])];
        std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
        std::normal_distribution<double> N;
        for (std::int64_t i = 0; i < router.numel(); ++i) router.set_value(i, 4 * N(rng));
        const auto ya = run_kernel(k, c.params, layer_views(a)), yb = run_kernel(k, c.params, layer_views(b));
        const std::vector<char> ua = unbounded_routing(k, c.params, a, ya), ub = unbounded_routing(k, c.params, b, yb);
        const std::int64_t width = ya[0].shape()[1];
        for (std::int64_t i = 0; i < ya[0].numel(); ++i) {
            const auto t = static_cast<std::size_t>(i / width);
            if (ua[t] || ub[t]) continue;
            const double va = ya[0].value(i), vb = yb[0].value(i);
            if (std::isnan(va) && std::isnan(vb)) continue;  // an overflowing shared expert: NaN both times
            if (!(va == vb))
                RC_FAIL(at(ya[0], i) + ": " + hexfloat(va) + " with one router, " +
                        hexfloat(vb) + " with another, the routed experts adding 0");
        }
    };
}

// The candidate (grouped) and the dense-masked baseline on one case: where
// both chose the same experts and capacity dropped the same, their y differ
// by at most twice the budget (each within it of the exact layer).
Testable grouped_equals_dense(const KernelInfo& k) {
    return [&k] {
        const KernelInfo* dense = builtin_registry().find("cpu.dense." + k.op + "." + name(k.in));
        RC_PRE(dense != nullptr);
        const Case c = build_case(layer_spec(k));
        const CaseEval e = evaluate_case(k, c.params, c.views());  // the kernel, staged oracle and bounds
        const auto d = run_kernel(*dense, c.params, c.views());
        const Tensor* g[] = {&e.outputs[0].got, &e.outputs[1].got, &e.outputs[2].got};
        const std::vector<double>& bound = e.outputs[0].rigorous;
        const std::int64_t T = g[0]->shape()[0], C = g[0]->shape()[1], K = g[1]->shape()[1];
        for (std::int64_t t = 0; t < T; ++t) {
            bool same = true;
            for (std::int64_t j = 0; j < K; ++j)  // the same experts, and the same ones dropped by capacity (weight 0)
                same = same && g[1]->bits(t * K + j) == d[1].bits(t * K + j) &&
                       (g[2]->value(t * K + j) == 0) == (d[2].value(t * K + j) == 0);
            if (!same) continue;
            for (std::int64_t i = t * C; i < (t + 1) * C; ++i) {
                const double b = bound[static_cast<std::size_t>(i)], vg = g[0]->value(i), vd = d[0].value(i);
                if (b == oracle::kUndefined) continue;
                if (std::isnan(b)) {
                    if (std::isnan(vg) != std::isnan(vd))
                        RC_FAIL(at(*g[0], i) + ": grouped " + hexfloat(vg) + ", dense " + hexfloat(vd));
                    continue;
                }
                if (!(std::fabs(vg - vd) <= 2 * b))
                    RC_FAIL(at(*g[0], i) + ": grouped " + hexfloat(vg) + ", dense-masked " +
                            hexfloat(vd) + ", more than twice the budget " + hexfloat(b) + " apart");
            }
        }
    };
}

}  // namespace

void add_moe_layer_properties(std::vector<PropertyDef>& v) {
    auto layer = [](const OpSpec& op) { return op.name == "moe" || op.name == "latent_moe"; };
    v.push_back({"shared_independent_of_routing",
                 "with the routed experts' down weights 0, another router leaves y (the shared experts') unchanged",
                 layer, of_kernel(shared_independent_of_routing)});
    v.push_back({"grouped_equals_dense",
                 "y of the kernel and of the dense-masked baseline within twice the budget where both chose alike", layer,
                 of_kernel(grouped_equals_dense)});
}

}  // namespace conform::props
