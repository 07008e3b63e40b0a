// Generator and properties of block_attn_res (docs/residual.md,
// "Properties").
#include <algorithm>
#include <cmath>
#include <numeric>

#include "oracle/attn_res.hpp"
#include "oracle/bound.hpp"
#include "oracle/norm.hpp"
#include "properties/common.hpp"

namespace conform::props {

// Values of the sources: every family whose sums stay inside FP32's range,
// near_eps (mean squares near eps: where eps's place in the root matters),
// subnormal and tiny (an FP32 sum of squares that underflows).
const std::vector<Family>& residual_families() {
    static const std::vector<Family> f = {Family::normal,   Family::normal,   Family::uniform, Family::heavy_tail,
                                          Family::outlier,  Family::constant, Family::near_eps, Family::tiny,
                                          Family::subnormal};
    return f;
}

// NaN, +-inf and +-0 at random elements (not +-max: a sum of squares of
// FP32 maxima overflows, outside the bound's domain).
void residual_inject(Tensor& t, int count, std::mt19937_64& rng) {
    const double vals[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0};
    for (int s = 0; s < count && t.numel(); ++s) t.set_value(static_cast<std::int64_t>(rng() % t.numel()), vals[rng() % 5]);
}

// dims = {N, T, d}; params eps (1e-6 most often; 1e-5, 0.1 where the root's
// eps matters, 0: exact scale invariance), "query_scale" (not an op
// parameter: the spread of w, read by the builder), "has_weight".
rc::Gen<CaseSpec> gen_block_attn_res_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](int N, int T, int d, Family f, int k, std::uint64_t seed, int specials, double eps) {
            CaseSpec s = structured_spec("block_attn_res", fmt, {N, T, d}, Params({{"eps", eps}}), f, k, seed, specials);
            return s;
        },
        rc::gen::element(1, 2, 3, 4, 4, 8, 9), rc::gen::element(1, 2, 3, 5), rc::gen::element(1, 7, 8, 16, 33, 64),
        rc::gen::elementOf(residual_families()), rc::gen::inRange(-4, 5), rc::gen::arbitrary<std::uint64_t>(),
        opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0), rc::gen::element(1e-6, 1e-6, 1e-6, 1e-5, 0.1, 0.0));
}

// v: the family, each source scaled by its own 2^s (s in [-6, 6]: sources of
// very different norms, what the keys' RMSNorm is for); w: N(0, 1) times
// 1/4, 1 or 4 (flat to peaked weights) or all 0 now and then (the mean);
// norm_weight 1 + N(0, 1)/4, absent in a quarter of the cases.
Case build_block_attn_res_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t N = spec.dims.at(0), T = spec.dims.at(1), d = spec.dims.at(2);
    Tensor v(spec.format, {N, T, d}), w(spec.format, {d}), g(spec.format, {d});
    fill_values(v, spec.families.at(0), spec, 0, rng);
    for (std::int64_t i = 0; i < N; ++i) {
        const int s = static_cast<int>(rng() % 13) - 6;
        for (std::int64_t e = i * T * d; e < (i + 1) * T * d; ++e) v.set_value(e, std::ldexp(v.value(e), s));
    }
    std::normal_distribution<double> n01;
    const double qs[] = {0.25, 1.0, 4.0, 1.0, 0.0};
    const double q = qs[rng() % 5];
    for (std::int64_t e = 0; e < d; ++e) w.set_value(e, q * n01(rng)), g.set_value(e, 1 + 0.25 * n01(rng));
    const bool has_g = rng() % 4 != 0;
    c.inputs.push_back(std::move(v));
    c.inputs.push_back(std::move(w));
    if (has_g) c.inputs.push_back(std::move(g));
    for (std::size_t k = 0; k < 2; ++k) residual_inject(c.inputs[k], spec.specials, rng);
    return c;
}

namespace {

bool attn_res_finite_token(const Case& c, std::int64_t t) {
    const Tensor& v = c.inputs[0];
    const std::int64_t N = v.shape()[0], T = v.shape()[1], d = v.shape()[2];
    for (std::int64_t i = 0; i < N; ++i)
        for (std::int64_t e = 0; e < d; ++e)
            if (!std::isfinite(v.value((i * T + t) * d + e))) return false;
    for (std::size_t k = 1; k < c.inputs.size(); ++k)
        for (std::int64_t e = 0; e < c.inputs[k].numel(); ++e)
            if (!std::isfinite(c.inputs[k].value(e))) return false;
    return true;
}

Case attn_res_case(const KernelInfo& k) {
    return build_case(in_domain(*gen_block_attn_res_spec(k.in, GenOptions{})));
}

// N = 1: alpha = e^0 / e^0 = 1 exactly, so h = v_0 bit for bit (by value).
Testable single_source_identity(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = in_domain(*gen_block_attn_res_spec(k.in, GenOptions{}));
        spec.dims[0] = 1;
        const Case c = build_case(spec);
        const auto out = run_kernel(k, c.params, c.views());
        const Tensor& v = c.inputs[0];
        const std::int64_t T = v.shape()[1], d = v.shape()[2];
        for (std::int64_t t = 0; t < T; ++t) {
            const bool finite = attn_res_finite_token(c, t);
            for (std::int64_t e = 0; e < d; ++e) {
                const double got = out[0].value(t * d + e), want = v.value(t * d + e);
                // eps = 0 and a zero source: 0/0 keys, NaN (docs/residual.md)
                if (finite && std::isnan(got) && c.params.get("eps", 1e-6) == 0) continue;
                if (finite ? !(got == want) : !std::isnan(got))
                    RC_FAIL("N = 1: h[" + std::to_string(t) + ", " + std::to_string(e) + "] = " + hexfloat(got) +
                            ", want v_0 = " + (finite ? hexfloat(want) : std::string("NaN")));
            }
        }
    };
}

// w = 0: every logit is 0, alpha_i = 1/N, h = the mean of the sources,
// within the op's bound (the exact mean in double, its own slip 2^-50).
Testable zero_query_mean(const KernelInfo& k) {
    return [&k] {
        Case c = attn_res_case(k);
        Tensor& w = c.inputs[1];
        for (std::int64_t e = 0; e < w.numel(); ++e) w.set_value(e, 0.0);
        const Tensor& v = c.inputs[0];
        const std::int64_t N = v.shape()[0], T = v.shape()[1], d = v.shape()[2];
        std::vector<double> mean(static_cast<std::size_t>(T * d), 0.0);
        for (std::int64_t i = 0; i < N; ++i)
            for (std::int64_t e = 0; e < T * d; ++e) mean[static_cast<std::size_t>(e)] += v.value(i * T * d + e) / static_cast<double>(N);
        const auto bound = oracle::block_attn_res_bound(c.params, c.views(), {mean}, k.acc, {output_format(k, 0)}).at(0);
        const auto out = run_kernel(k, c.params, c.views());
        for (std::int64_t t = 0; t < T; ++t) {
            if (!attn_res_finite_token(c, t)) continue;
            for (std::int64_t e = 0; e < d; ++e) {
                const auto i = static_cast<std::size_t>(t * d + e);
                const double b = bound[i];
                if (b == oracle::kUndefined || std::isnan(mean[i])) continue;
                const double got = out[0].value(t * d + e), tol = b + std::fabs(mean[i]) * 0x1p-50;
                if (!(std::fabs(got - mean[i]) <= tol))
                    RC_FAIL("w = 0: h[" + std::to_string(t) + ", " + std::to_string(e) + "] = " + hexfloat(got) +
                            ", the mean is " + hexfloat(mean[i]) + " (bound " + hexfloat(tol) + ")");
            }
        }
    };
}

// Permuting the sources leaves h unchanged: the two results agree within
// the sum of their bounds (both are within their bound of the same exact h).
Testable source_permutation(const KernelInfo& k) {
    return [&k] {
        const Case c = attn_res_case(k);
        const Tensor& v = c.inputs[0];
        const std::int64_t N = v.shape()[0], T = v.shape()[1], d = v.shape()[2];
        std::vector<std::int64_t> perm(static_cast<std::size_t>(N));
        std::iota(perm.begin(), perm.end(), 0);
        std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
        std::shuffle(perm.begin(), perm.end(), rng);
        Case p = c;
        for (std::int64_t i = 0; i < N; ++i)
            for (std::int64_t e = 0; e < T * d; ++e) p.inputs[0].set_bits(i * T * d + e, v.view().bits(perm[static_cast<std::size_t>(i)] * T * d + e));
        const Format of = output_format(k, 0);
        const auto exact = oracle::evaluate_structured("block_attn_res", c.params, c.views(), {of}).exact;
        const auto b1 = oracle::block_attn_res_bound(c.params, c.views(), exact, k.acc, {of}).at(0);
        const auto b2 = oracle::block_attn_res_bound(p.params, p.views(), exact, k.acc, {of}).at(0);
        const auto o1 = run_kernel(k, c.params, c.views()), o2 = run_kernel(k, p.params, p.views());
        for (std::int64_t e = 0; e < T * d; ++e) {
            const auto i = static_cast<std::size_t>(e);
            const double x = o1[0].value(e), y = o2[0].value(e);
            if (std::isnan(x) && std::isnan(y)) continue;
            if (b1[i] == oracle::kUndefined || b2[i] == oracle::kUndefined) continue;
            if (!(std::fabs(x - y) <= b1[i] + b2[i]))
                RC_FAIL("sources permuted: h[" + std::to_string(e) + "] = " + hexfloat(y) + ", unpermuted " + hexfloat(x) +
                        " (allowed " + hexfloat(b1[i] + b2[i]) + ")");
        }
    };
}

// eps = 0: scaling every source by 4 leaves every key bit for bit (the sum of
// squares scales by 16, the root by 4, g (4 v) by 4 and 1/r by 1/4, all
// exactly), so the weights too, and h scales by 4 exactly.  Tokens with a
// value outside [2^-40, 2^40] (where squares may underflow) are skipped.
Testable uniform_scale_exact(const KernelInfo& k) {
    return [&k] {
        Case c = attn_res_case(k);
        c.params.set("eps", 0.0);
        Tensor scaled;
        RC_PRE(scale_exact(c.inputs[0], 2, &scaled));
        Case s = c;
        s.inputs[0] = scaled;
        const auto o1 = run_kernel(k, c.params, c.views()), o2 = run_kernel(k, s.params, s.views());
        const Tensor& v = c.inputs[0];
        const std::int64_t N = v.shape()[0], T = v.shape()[1], d = v.shape()[2];
        for (std::int64_t t = 0; t < T; ++t) {
            bool plain = true;
            for (std::int64_t i = 0; i < N; ++i)
                for (std::int64_t e = 0; e < d; ++e) {
                    const double a = std::fabs(v.value((i * T + t) * d + e));
                    plain = plain && (a == 0 || (a >= 0x1p-40 && a <= 0x1p40));
                }
            // FP32 products alpha_i v_i below the normal range round
            // absolutely (so do outputs below the output format's): there
            // the scaling is not exact.
            std::vector<std::vector<double>> src(static_cast<std::size_t>(N));
            for (std::int64_t i = 0; i < N; ++i)
                for (std::int64_t e = 0; e < d; ++e) src[static_cast<std::size_t>(i)].push_back(v.value((i * T + t) * d + e));
            std::vector<double> w(static_cast<std::size_t>(d)), g(static_cast<std::size_t>(d), 1.0);
            for (std::int64_t e = 0; e < d; ++e) {
                w[static_cast<std::size_t>(e)] = c.inputs[1].value(e);
                if (c.inputs.size() > 2) g[static_cast<std::size_t>(e)] = c.inputs[2].value(e);
            }
            std::vector<double> a(static_cast<std::size_t>(N), 0.0);
            for (std::int64_t i = 0; i < N && plain; ++i) {
                const std::vector<double> key = oracle::rms_norm(src[static_cast<std::size_t>(i)], g, 0.0, false);
                for (std::int64_t e = 0; e < d; ++e) a[static_cast<std::size_t>(i)] += w[static_cast<std::size_t>(e)] * key[static_cast<std::size_t>(e)];
            }
            const double amax = plain ? *std::max_element(a.begin(), a.end()) : 0.0;
            for (std::int64_t i = 0; i < N && plain; ++i)
                for (std::int64_t e = 0; e < d; ++e) {
                    const double p = std::exp(a[static_cast<std::size_t>(i)] - amax) / static_cast<double>(N) * std::fabs(src[static_cast<std::size_t>(i)][static_cast<std::size_t>(e)]);
                    plain = plain && (src[static_cast<std::size_t>(i)][static_cast<std::size_t>(e)] == 0 || p >= 0x1p-100);
                }
            const Format of = output_format(k, 0);
            for (std::int64_t e = 0; e < d && plain; ++e) {
                const double x = o1[0].value(t * d + e), y = o2[0].value(t * d + e);
                if (std::isnan(x) && std::isnan(y)) continue;
                if (std::fabs(x) <= std::ldexp(1.0, info(of).emin + 1) || 4 * std::fabs(x) > max_finite(of)) continue;
                if (!(y == 4 * x))
                    RC_FAIL("eps = 0, every source times 4: h[" + std::to_string(t) + ", " + std::to_string(e) + "] = " +
                            hexfloat(y) + ", want 4 x " + hexfloat(x));
            }
        }
    };
}

// eps = 0: scaling one source j by c leaves its key (RMSNorm is scale
// invariant), so the weights too, and h is linear in that source's value:
// h(4 v_j) - h = 3 (h(2 v_j) - h) exactly.  The three kernel results, each
// within its bound of the exact one, satisfy it within b_4 + b + 3 (b_2 + b).
// A key that changes with the scale (raw keys) moves the weights and breaks it.
Testable one_source_scaled(const KernelInfo& k) {
    return [&k] {
        Case c = attn_res_case(k);
        c.params.set("eps", 0.0);
        const Tensor& v = c.inputs[0];
        const std::int64_t N = v.shape()[0], T = v.shape()[1], d = v.shape()[2];
        const std::int64_t j = *rc::gen::inRange<std::int64_t>(0, N);
        std::vector<Case> cs = {c, c, c};
        for (int s = 1; s <= 2; ++s)
            for (std::int64_t e = j * T * d; e < (j + 1) * T * d; ++e) {
                const double x = std::ldexp(v.value(e), s);
                RC_PRE(std::isfinite(x) && decode(v.format(), encode(v.format(), x)) == x);
                cs[static_cast<std::size_t>(s)].inputs[0].set_value(e, x);
            }
        const Format of = output_format(k, 0);
        std::vector<std::vector<double>> b(3);
        std::vector<Tensor> o(3);
        for (std::size_t s = 0; s < 3; ++s) {
            const auto ex = oracle::evaluate_structured("block_attn_res", cs[s].params, cs[s].views(), {of}).exact;
            b[s] = oracle::block_attn_res_bound(cs[s].params, cs[s].views(), ex, k.acc, {of}).at(0);
            o[s] = run_kernel(k, cs[s].params, cs[s].views()).at(0);
        }
        for (std::int64_t e = 0; e < T * d; ++e) {
            const auto i = static_cast<std::size_t>(e);
            const double h1 = o[0].value(e), h2 = o[1].value(e), h4 = o[2].value(e);
            bool skip = !std::isfinite(h1) || !std::isfinite(h2) || !std::isfinite(h4);
            for (std::size_t s = 0; s < 3; ++s) skip = skip || b[s][i] == oracle::kUndefined;
            if (skip) continue;
            const double lhs = (h4 - h1) - 3 * (h2 - h1);
            const double tol = b[2][i] + b[0][i] + 3 * (b[1][i] + b[0][i]) + 0x1p-50 * (std::fabs(h4) + 4 * std::fabs(h1) + 3 * std::fabs(h2));
            if (!(std::fabs(lhs) <= tol))
                RC_FAIL("eps = 0, source " + std::to_string(j) + " times 2 and 4: h[" + std::to_string(e) + "] = " + hexfloat(h1) +
                        ", " + hexfloat(h2) + ", " + hexfloat(h4) + " are not linear in the source (residual " + hexfloat(lhs) +
                        ", allowed " + hexfloat(tol) + ")");
        }
    };
}

}  // namespace

void add_attn_res_properties(std::vector<PropertyDef>& v) {
    auto is_op_ = [](const OpSpec& op) { return op.name == "block_attn_res"; };
    v.push_back({"single_source_identity", "N = 1: the weight is exactly 1 and h = v_0 bit for bit", is_op_,
                 of_kernel(single_source_identity)});
    v.push_back({"zero_query_mean", "w = 0: h is the mean of the sources within the bound", is_op_, of_kernel(zero_query_mean)});
    v.push_back({"source_permutation", "permuting the sources changes h by at most the two results' bounds", is_op_,
                 of_kernel(source_permutation)});
    v.push_back({"one_source_scaled", "eps = 0: one source times 2 and 4 leaves its key, so h is linear in it", is_op_,
                 of_kernel(one_source_scaled)});
    v.push_back({"uniform_scale_exact", "eps = 0: every source times 4 leaves the keys, so h is exactly 4 h", is_op_,
                 of_kernel(uniform_scale_exact)});
}

}  // namespace conform::props
