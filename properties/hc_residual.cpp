// Generator and properties of hc_residual and mhc_residual
// (docs/hc_residual.md, "Properties").
#include <algorithm>
#include <cmath>

#include "numerics/sinkhorn_domain.hpp"
#include "oracle/bound.hpp"
#include "oracle/sinkhorn_bound.hpp"
#include "properties/common.hpp"

namespace conform::props {
namespace {

// Values of x and f: every family whose sums stay inside FP32's range (near
// overflow and raw bit patterns would overflow the partial sums, outside the
// bound's domain; docs/hc_residual.md).
const std::vector<Family>& stream_families() {
    static const std::vector<Family> f = {Family::normal,   Family::normal, Family::uniform,   Family::heavy_tail,
                                          Family::outlier,  Family::constant, Family::subnormal, Family::tiny,
                                          Family::near_eps};
    return f;
}

// Patterns of the mixing coefficients, named by the family that selects them:
//   normal      logits N(0, 1)
//   heavy_tail  logits 8 N(0, 1) (saturating gates; mHC: large spreads)
//   saturated   the identity start: HC's B = I + 0.1 N(0, 1), mHC's logits
//               a I + 0.5 N(0, 1), a in {2, 8, 32}; gates at +-inf now and then
//   around_cap  mHC's slow convergence (-a above the diagonal, a in [4, 24]);
//               HC: B = N(0, 1) (a free matrix far from I)
//   masked      -inf logits (exact zeros of B) and zeros of a free B
const std::vector<Family>& coefficient_families() {
    static const std::vector<Family> f = {Family::normal, Family::normal, Family::heavy_tail, Family::saturated,
                                          Family::saturated, Family::around_cap, Family::masked};
    return f;
}

// One coefficient logit (a or c) of the pattern.
double gate_logit(Family p, std::mt19937_64& rng) {
    std::normal_distribution<double> N;
    if (p == Family::saturated && rng() % 8 == 0) return rng() % 2 ? INFINITY : -INFINITY;
    return std::clamp((p == Family::heavy_tail ? 8.0 : 1.0) * N(rng), -60.0, 60.0);
}

// Entry (i, j) of B (HC) or of its logits (mHC).
double mixing_entry(Family p, bool project, std::int64_t i, std::int64_t j, double a, std::mt19937_64& rng) {
    std::normal_distribution<double> N;
    const double v = N(rng);
    switch (p) {
        case Family::heavy_tail: return 8 * v;
        case Family::saturated: return project ? (i == j ? a : 0.0) + 0.5 * v : (i == j ? 1.0 : 0.0) + 0.1 * v;
        case Family::around_cap: return project ? (j > i ? -a : 0.0) + 0.1 * v : v;
        case Family::masked:
            if (rng() % 4 == 0) return project ? -INFINITY : 0.0;
            return v;
        default: return v;
    }
}

void fill_coefficients(Case& c, const CaseSpec& spec, bool project, std::mt19937_64& rng) {
    const std::int64_t T = spec.dims[0], n = spec.dims[1];
    const Family p = spec.families.at(1);
    Tensor a(spec.format, {T, n}), b(spec.format, {T, n, n}), cl(spec.format, {T, n});
    for (std::int64_t e = 0; e < T * n; ++e) a.set_value(e, gate_logit(p, rng)), cl.set_value(e, gate_logit(p, rng));
    for (std::int64_t t = 0; t < T; ++t) {
        const double s = p == Family::saturated ? std::ldexp(2.0, 2 * static_cast<int>(rng() % 3)) : 4.0 + static_cast<double>(rng() % 21);
        for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t j = 0; j < n; ++j) b.set_value((t * n + i) * n + j, mixing_entry(p, project, i, j, s, rng));
    }
    c.inputs.push_back(std::move(a));
    c.inputs.push_back(std::move(b));
    c.inputs.push_back(std::move(cl));
}

// NaN, +-inf and +-0 at random elements (not +-max: FP32 partial sums of
// bf16/fp32 maxima overflow, outside the bound's domain).
void inject(Tensor& t, int count, std::mt19937_64& rng) {
    const double vals[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0};
    for (int s = 0; s < count && t.numel(); ++s) t.set_value(static_cast<std::int64_t>(rng() % t.numel()), vals[rng() % 5]);
}

}  // namespace

// dims = {T, n, d}: n = 4 most often (DeepSeek's n_hc), d across the eight
// SIMD lanes and their tails.
rc::Gen<CaseSpec> gen_hc_residual_spec(const std::string& op, Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [op, fmt](int t, int n, int d, Family fx, Family fc, int k, std::uint64_t seed, int specials, int iters) {
            CaseSpec s = structured_spec(op, fmt, {t, n, d},
                                         op == "mhc_residual" ? Params({{"iters", double(iters)}}) : Params(), fx, k,
                                         seed, specials);
            s.families = {fx, fc};
            return s;
        },
        rc::gen::element(1, 2, 3, 5, 8), rc::gen::element(4, 4, 4, 1, 2, 3, 8),
        rc::gen::element(1, 7, 8, 9, 16, 17, 64), rc::gen::elementOf(stream_families()),
        rc::gen::elementOf(coefficient_families()), rc::gen::inRange(-4, 5), rc::gen::arbitrary<std::uint64_t>(),
        opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0), rc::gen::element(20, 20, 1, 2, 5, 50));
}

Case build_hc_residual_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t T = spec.dims.at(0), n = spec.dims.at(1), d = spec.dims.at(2);
    Tensor x(spec.format, {T, n, d}), f(spec.format, {T, d});
    fill_values(x, spec.families.at(0), spec, 0, rng);
    fill_values(f, spec.families.at(0), spec, 1, rng);
    c.inputs.push_back(std::move(x));
    c.inputs.push_back(std::move(f));
    fill_coefficients(c, spec, spec.op == "mhc_residual", rng);
    for (Tensor& t : c.inputs) inject(t, spec.specials, rng);
    return c;
}

namespace {

// Token t's projection runs in the log domain (wide logits, no guard:
// docs/sinkhorn.md "The wide domain"), which has no last column
// normalization: the column-sum arguments below do not apply to it (and
// within_budget judges it).  The generator draws no wide tokens.
bool log_domain_token(const Case& c, std::int64_t t) {
    const Tensor& l = c.inputs[3];
    const std::int64_t n = l.shape()[1];
    return c.params.get("eps", 0.0) == 0 &&
           sinkhorn_wide(n, [&](std::int64_t i, std::int64_t j) { return l.value((t * n + i) * n + j); });
}

// With f = 0 the update is x_next = B x, and for mHC every column of the
// kernel's B sums to 1 within the last normalization's rounding whatever
// happened before (docs/sinkhorn.md, "Column sums"), so per token and channel
//     sum_i |x_next_ik| <= (1 + column bound)(1 + gamma_n)(1 + u_out) sum_j |x_jk| + (n + 1) n tiny:
// the projected identity path never amplifies in the l1 norm over streams.
// A row-stochastic or unprojected B breaks it.
Testable streams_l1_nonexpansive(const KernelInfo& k) {
    return [&k] {
        Case c = build_case(in_domain(*gen_hc_residual_spec(k.op, k.in, GenOptions{})));
        Tensor& f = c.inputs[1];
        for (std::int64_t e = 0; e < f.numel(); ++e) f.set_value(e, 0.0);
        const auto out = run_kernel(k, c.params, c.views());
        const Tensor& x = c.inputs[0];
        const std::int64_t T = x.shape()[0], n = x.shape()[1], d = x.shape()[2];
        const Format acc = k.acc, of = output_format(k, 1);
        const double col = oracle::sinkhorn_column_sum_bound(n, acc, acc, c.params.get("eps", 0.0) > 0);
        const double narrow = info(of).precision < info(acc).precision ? unit_roundoff(of) : 0.0;
        const double grow = (1 + col) * (1 + oracle::gamma(static_cast<double>(n), unit_roundoff(acc))) * (1 + narrow);
        const double tiny = static_cast<double>((n + 1) * n) * (ulp_at(acc, 0.0) + ulp_at(of, 0.0));
        for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t e = 0; e < d && !log_domain_token(c, t); ++e) {
                double in = 0, got = 0;
                for (std::int64_t i = 0; i < n; ++i)
                    in += std::fabs(x.value((t * n + i) * d + e)), got += std::fabs(out[1].value((t * n + i) * d + e));
                if (!std::isfinite(in)) continue;  // the IEEE table, judged by within_budget
                if (!(got <= grow * in + tiny))
                    RC_FAIL("token " + std::to_string(t) + " channel " + std::to_string(e) + ": sum_i |x_next_i| = " +
                            hexfloat(got) + " exceeds " + hexfloat(grow * in + tiny) + " (sum_j |x_j| = " + hexfloat(in) + ")");
            }
    };
}

// B = I and C = 0 (HC: b = I, c_logits = -inf; mHC: b_logits 0 on the
// diagonal and -inf elsewhere, whose projection is exactly I) make the update
// the identity: x_next must be x bit for bit (every product is 1 x or 0 x and
// every sum adds exact zeros; -0 may come back as +0).
Testable identity_path_exact(const KernelInfo& k) {
    return [&k] {
        Case c = build_case(in_domain(*gen_hc_residual_spec(k.op, k.in, GenOptions{})));
        const bool project = k.op == "mhc_residual";
        Tensor &x = c.inputs[0], &b = c.inputs[3], &cl = c.inputs[4];
        const std::int64_t n = x.shape()[1];
        for (std::int64_t e = 0; e < b.numel(); ++e) {
            const bool diag = (e % (n * n)) / n == e % n;
            b.set_value(e, diag ? (project ? 0.0 : 1.0) : (project ? -INFINITY : 0.0));
        }
        for (std::int64_t e = 0; e < cl.numel(); ++e) cl.set_value(e, -INFINITY);
        for (std::int64_t e = 0; e < x.numel(); ++e)
            if (!std::isfinite(x.value(e))) x.set_value(e, 1.0);  // 0 * inf would be NaN
        const auto out = run_kernel(k, c.params, c.views());
        for (std::int64_t e = 0; e < x.numel(); ++e)  // by value: 0 x (-0) + (+0) may give +0 for -0
            if (!(out[1].value(e) == x.value(e)))
                RC_FAIL("x_next[" + std::to_string(e) + "] = " + hexfloat(out[1].value(e)) + " differs from x = " +
                        hexfloat(x.value(e)) + " with B = I, C = 0");
    };
}

// mHC's own B (output b): after the last column normalization every column
// of the kernel's projection sums to 1 within that step's rounding whatever
// happened before (docs/sinkhorn.md, "Column sums"), stored once in b's
// format; a column whose logits are all -inf sums to 0.  Poisoned tokens (a
// NaN or +inf logit) are NaN, judged by special_values.
Testable b_column_marginals(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(in_domain(*gen_hc_residual_spec(k.op, k.in, GenOptions{})));
        const auto out = run_kernel(k, c.params, c.views());
        const Tensor &l = c.inputs[3], &b = out.at(2);
        const std::int64_t n = l.shape()[1], nn = n * n;
        const bool guarded = c.params.get("eps", 0.0) > 0;  // sums S / (S + eps) < 1: the upper side only
        const double tol = oracle::sinkhorn_column_sum_bound(n, k.acc, output_format(k, 2), guarded) + static_cast<double>(n) * 0x1p-52;
        for (std::int64_t t = 0; t < l.shape()[0]; ++t) {
            bool poisoned = false;
            for (std::int64_t e = 0; e < nn; ++e) poisoned = poisoned || std::isnan(l.value(t * nn + e)) || l.value(t * nn + e) == INFINITY;
            if (poisoned || log_domain_token(c, t)) continue;
            for (std::int64_t j = 0; j < n; ++j) {
                double s = 0;
                bool dead = true;
                for (std::int64_t i = 0; i < n; ++i)
                    s += b.value(t * nn + i * n + j), dead = dead && l.value(t * nn + i * n + j) == -INFINITY;
                const double want = dead ? 0.0 : 1.0;
                if (guarded && !dead && s >= 0 && s <= 1 + tol) continue;
                if (!(std::fabs(s - want) <= (dead ? 0.0 : tol)))
                    RC_FAIL("token " + std::to_string(t) + " column " + std::to_string(j) + " of b sums to " + hexfloat(s) +
                            ", want " + hexfloat(want) + " within " + hexfloat(dead ? 0.0 : tol));
            }
        }
    };
}

}  // namespace

void add_hc_residual_properties(std::vector<PropertyDef>& v) {
    auto is_hc = [](const OpSpec& op) { return op.family == "hc_residual"; };
    auto is_mhc = [](const OpSpec& op) { return op.name == "mhc_residual"; };
    v.push_back({"identity_path_exact", "with B = I and C = 0 the update returns the streams bit for bit", is_hc,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return identity_path_exact(k); }});
    v.back().needs = {"x_next"};
    v.push_back({"streams_l1_nonexpansive",
                 "with f = 0, sum_i |x_next_i| <= (1 + column bound)(1 + gamma_n)(1 + u_out) sum_j |x_j| per channel",
                 is_mhc, [](const KernelInfo& k, const RunConfig&, Stats*) { return streams_l1_nonexpansive(k); }});
    v.back().needs = {"x_next"};
    v.push_back({"b_column_marginals", "every column of the returned projection b sums to 1 within the last normalization's rounding",
                 is_mhc, [](const KernelInfo& k, const RunConfig&, Stats*) { return b_column_marginals(k); }});
}

}  // namespace conform::props
