// Generator and properties of sinkhorn (docs/sinkhorn.md, "Properties").
#include <algorithm>
#include <cmath>

#include "numerics/sinkhorn_domain.hpp"
#include "oracle/sinkhorn.hpp"
#include "oracle/sinkhorn_bound.hpp"
#include "oracle/structured.hpp"
#include "properties/common.hpp"
#include "properties/fixed.hpp"
#include "properties/sinkhorn.hpp"

namespace conform::props {
namespace {

// The logit patterns, named by the value family that selects them (the
// families the other ops use, plus these readings for sinkhorn):
//   saturated   mHC's identity start: a I + 0.5 N(0, 1), a in {2, 8, 32}
//   around_cap  slow convergence: -a above the diagonal (a in [4, 24]), a
//               matrix close to one without total support, so iterates
//               still differ after 20 iterations
//   near_eps    huge logits: each row shifted by +-1e4 (exp(L) overflows;
//               the exact B is that of the unshifted matrix)
//   masked      -inf entries (structural zeros), sometimes a whole row
const std::vector<Family>& sinkhorn_families() {
    static const std::vector<Family> f = {
        Family::normal,     Family::normal,   Family::uniform,    Family::heavy_tail, Family::outlier,
        Family::constant,   Family::saturated, Family::saturated, Family::around_cap, Family::around_cap,
        Family::near_eps,   Family::masked,   Family::bit_patterns, Family::tiny};
    return f;
}

void fill_pattern(Tensor& t, const CaseSpec& spec, std::mt19937_64& rng) {
    const std::int64_t n = spec.dims[1], count = spec.dims[0];
    std::normal_distribution<double> N;
    auto at = [&](std::int64_t k, std::int64_t i, std::int64_t j) { return (k * n + i) * n + j; };
    for (std::int64_t k = 0; k < count; ++k) {
        const double a = spec.families[0] == Family::saturated ? std::ldexp(2.0, 2 * static_cast<int>(rng() % 3))
                                                               : 4.0 + static_cast<double>(rng() % 21);
        const bool dead_row = rng() % 4 == 0;
        for (std::int64_t i = 0; i < n; ++i) {
            const double shift = (rng() % 2 ? 1e4 : -1e4) + 100.0 * static_cast<double>(rng() % 16);
            for (std::int64_t j = 0; j < n; ++j) {
                double v = N(rng);
                switch (spec.families[0]) {
                    case Family::saturated: v = (i == j ? a : 0.0) + 0.5 * v; break;
                    case Family::around_cap: v = (j > i ? -a : 0.0) + 0.1 * v; break;
                    case Family::near_eps: v = shift + 2 * v; break;
                    default:  // masked
                        if (rng() % 4 == 0 || (dead_row && i == n / 2)) v = -INFINITY;
                }
                t.set_value(at(k, i, j), v);
            }
        }
    }
}

bool patterned(Family f) {
    return f == Family::saturated || f == Family::around_cap || f == Family::near_eps || f == Family::masked;
}

}  // namespace

// dims = {batch, n}: n = 4 most often (mHC's n_hc), batches across the eight
// SIMD lanes and their tails; iteration counts from 1 (where one iteration
// more or less is glaring) to 50.
rc::Gen<CaseSpec> gen_sinkhorn_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](int n, int batch, int iters, Family fam, int k, std::uint64_t seed, int specials) {
            if (n > 4) batch = 1 + batch % 3;
            return structured_spec("sinkhorn", fmt, {batch, n}, Params({{"iters", double(iters)}}), fam, k, seed,
                                   specials);
        },
        rc::gen::element(4, 4, 4, 1, 2, 3, 5, 8, 16), rc::gen::element(1, 2, 7, 8, 9, 16, 17, 20),
        rc::gen::element(20, 20, 20, 1, 2, 3, 5, 10, 50), rc::gen::elementOf(sinkhorn_families()),
        rc::gen::inRange(-4, 7), rc::gen::arbitrary<std::uint64_t>(),
        opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_sinkhorn_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t count = spec.dims.at(0), n = spec.dims.at(1);
    Tensor l(spec.format, {count, n, n});
    if (patterned(spec.families.at(0))) fill_pattern(l, spec, rng);
    else fill_values(l, spec.families.at(0), spec, 0, rng);
    inject_specials(l, spec.specials, rng);
    c.inputs.push_back(std::move(l));
    return c;
}

namespace {

// A kernel's output next to the oracle and the derived element bounds, one
// matrix at a time.
struct Judged {
    Case c;
    std::vector<Tensor> out;
    std::vector<double> exact, bound;
    std::int64_t n = 0, count = 0;

    Judged(const KernelInfo& k, Case given) : c(std::move(given)) {
        out = run_kernel(k, c.params, c.views());
        const std::vector<Format> fmt{output_format(k, 0)};
        exact = oracle::evaluate_structured("sinkhorn", c.params, c.views(), fmt).exact.at(0);
        bound = oracle::sinkhorn_bound(c.params, c.views(), {exact}, k.acc, fmt).at(0);
        n = c.inputs[0].shape().back();
        count = c.inputs[0].numel() / (n * n);
    }
    // Matrices the bound speaks about: finite oracle values, finite bounds.
    bool judged(std::int64_t m) const {
        for (std::int64_t e = m * n * n; e < (m + 1) * n * n; ++e)
            if (!std::isfinite(exact[static_cast<std::size_t>(e)]) || !std::isfinite(bound[static_cast<std::size_t>(e)]))
                return false;
        return true;
    }
    oracle::Mat<oracle::Real> kernel_matrix(std::int64_t m) const {
        oracle::Mat<oracle::Real> b(n, n);
        for (std::int64_t e = 0; e < n * n; ++e) b.a[static_cast<std::size_t>(e)] = oracle::from_double(out[0].value(m * n * n + e));
        return b;
    }
    // max_i |exact row sum - 1| + sum_j bound_ij: how far the kernel's row sums
    // may be from 1 (the exact values are doubles: n 2^-52 more).
    double row_slack(std::int64_t m) const {
        double worst = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            double r = 0, b = 0;
            for (std::int64_t j = 0; j < n; ++j) {
                r += exact[static_cast<std::size_t>((m * n + i) * n + j)];
                b += bound[static_cast<std::size_t>((m * n + i) * n + j)];
            }
            worst = std::max(worst, std::fabs(r - 1) + b + static_cast<double>(n) * 0x1p-52);
        }
        return worst;
    }
    // Matrix m runs in the log domain (wide, unguarded: docs/sinkhorn.md "The
    // wide domain"): no last normalization rounds its columns, so its column
    // sums are held to the exact ones (1) within the sum of the element bounds.
    bool log_domain(std::int64_t m) const {
        const TensorView l = c.inputs[0].view();
        return oracle::sinkhorn_eps(c.params) == 0 &&
               sinkhorn_wide(n, [&](std::int64_t i, std::int64_t j) { return l.value((m * n + i) * n + j); });
    }
    // sum_i bound_ij + n 2^-52: how far column j's sum may be from its exact 1.
    double column_slack(std::int64_t m, std::int64_t j) const {
        double b = static_cast<double>(n) * 0x1p-52;
        for (std::int64_t i = 0; i < n; ++i) b += bound[static_cast<std::size_t>((m * n + i) * n + j)];
        return b;
    }
    // The column factor of matrix m: the last normalization's bound, or the
    // largest column slack of a log-domain matrix.
    double column_limit(std::int64_t m, double column_bound) const {
        if (!log_domain(m)) return column_bound;
        double worst = 0;
        for (std::int64_t j = 0; j < n; ++j) worst = std::max(worst, column_slack(m, j));
        return worst;
    }
    // The limit on ||B||_2 of matrix m from the derived bounds (any nonnegative
    // matrix: ||B||_2^2 <= max row sum * max column sum).
    oracle::Real norm_limit(std::int64_t m, double column_bound) const {
        return oracle::sqrt(oracle::Real(1 + row_slack(m)) * oracle::Real(1 + column_limit(m, column_bound)));
    }
    bool exact_zero_column(std::int64_t m, std::int64_t j) const {
        for (std::int64_t i = 0; i < n; ++i)
            if (exact[static_cast<std::size_t>((m * n + i) * n + j)] != 0) return false;
        return true;
    }
};

// `check(r, m, column_bound)` on every matrix of case c that the bound speaks
// about, at 128 bits; the first violation, or "".
template <class Check>
std::string each_judged_matrix(const KernelInfo& k, const Case& c, Check&& check) {
    const Judged r(k, c);
    const double column_bound =
        oracle::sinkhorn_column_sum_bound(r.n, k.acc, output_format(k, 0), oracle::sinkhorn_eps(c.params) > 0);
    oracle::PrecisionScope scope(128);
    for (std::int64_t m = 0; m < r.count; ++m)
        if (r.judged(m))
            if (std::string f = check(r, m, column_bound); !f.empty()) return f;
    return "";
}

// A Testable running `check` on one generated case.
Testable on_generated_case(const KernelInfo& k, std::string (*check)(const KernelInfo&, const Case&)) {
    return [&k, check] {
        const std::string f = check(k, build_case(in_domain(*gen_sinkhorn_spec(k.in, GenOptions{}))));
        if (!f.empty()) RC_FAIL(f);
    };
}

// Each matrix's B does not depend on where it sits in the batch or on its
// neighbours (the SIMD lanes): the batch reversed gives the same bits.
Testable batch_independence(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(in_domain(*gen_sinkhorn_spec(k.in, GenOptions{true, 4096})));
        const Tensor& l = c.inputs[0];
        const std::int64_t n = l.shape().back(), nn = n * n, count = l.numel() / nn;
        Tensor rev(l.format(), l.shape());
        for (std::int64_t m = 0; m < count; ++m)
            for (std::int64_t e = 0; e < nn; ++e) rev.set_bits((count - 1 - m) * nn + e, l.bits(m * nn + e));
        const auto a = run_kernel(k, c.params, {l.view()}), b = run_kernel(k, c.params, {rev.view()});
        for (std::int64_t m = 0; m < count; ++m)
            for (std::int64_t e = 0; e < nn; ++e) {
                const double x = a[0].value(m * nn + e), y = b[0].value((count - 1 - m) * nn + e);
                if (a[0].bits(m * nn + e) != b[0].bits((count - 1 - m) * nn + e) && !(std::isnan(x) && std::isnan(y)))
                    RC_FAIL("matrix " + std::to_string(m) + " of " + std::to_string(count) + " entry " +
                            std::to_string(e) + " changes with its batch position: " + hexfloat(x) + " vs " + hexfloat(y));
            }
    };
}

// Free HC layers near the identity (what HC learns from an identity start).
std::vector<oracle::Mat<oracle::Real>> free_hc(std::int64_t n, std::int64_t depth, std::mt19937_64& g) {
    std::normal_distribution<double> N;
    std::vector<oracle::Mat<oracle::Real>> bs;
    for (std::int64_t l = 0; l < depth; ++l) {
        auto b = oracle::identity<oracle::Real>(n);
        for (auto& v : b.a) v += oracle::Real(0.1 * N(g));
        bs.push_back(std::move(b));
    }
    return bs;
}

}  // namespace

report::Curve depth_amplification_curve(const KernelInfo& k, std::uint64_t seed) {
    constexpr std::int64_t kN = 4, kDepth = 1000;
    const Case logits = build_case(structured_spec("sinkhorn", k.in, {kDepth, kN}, Params({{"iters", 20.0}}),
                                                   Family::normal, 0, seed, 0));
    const Judged r(k, logits);
    const double column_bound = oracle::sinkhorn_column_sum_bound(kN, k.acc, output_format(k, 0));
    std::mt19937_64 g(seed ^ 0x9e3779b97f4a7c15ULL);
    const auto hc = free_hc(kN, kDepth, g);
    oracle::PrecisionScope scope(128);
    report::Curve c{"depth_amplification", "depth L", "||B_L ... B_1||_2", {}, true, "free HC (I + 0.1 N(0, 1))"};
    auto p = oracle::identity<oracle::Real>(kN), p_hc = p;
    oracle::Real budget(1);
    const std::vector<std::int64_t> depths{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
    auto next = depths.begin();
    for (std::int64_t l = 0; l < kDepth; ++l) {
        p = oracle::matmul(r.kernel_matrix(l), p);
        p_hc = oracle::matmul(hc[static_cast<std::size_t>(l)], p_hc);
        // Unjudged matrices (non-finite bound) make the budget infinite: NaN
        // or overflow in the product still fails below.
        budget *= r.norm_limit(l, column_bound);
        if (l + 1 != *next) continue;
        const double err = oracle::to_double(oracle::spectral_norm(p).hi), b = oracle::to_double(budget);
        c.points.push_back({static_cast<double>(l + 1), err, b, oracle::to_double(oracle::spectral_norm(p_hc).value)});
        c.passed = c.passed && err <= b;  // NaN fails
        if (++next == depths.end()) break;
    }
    return c;
}

// After the final (column) normalization every column of the kernel's B sums
// to 1 within the rounding of that one step; a column the oracle says is 0
// (structural zeros) is 0.  With an eps guard the exact column sums are
// S / (S + eps) < 1: the kernel's are at most 1 + the guarded bound.
std::string column_marginals_check(const KernelInfo& k, const Case& c) {
    const bool guarded = oracle::sinkhorn_eps(c.params) > 0;
    return each_judged_matrix(k, c, [guarded](const Judged& r, std::int64_t m, double tol) -> std::string {
        const auto sums = oracle::col_sums(r.kernel_matrix(m));
        for (std::int64_t j = 0; j < r.n; ++j) {
            const double s = oracle::to_double(sums[static_cast<std::size_t>(j)]);
            const double want = r.exact_zero_column(m, j) ? 0.0 : 1.0;
            const double allowed = want == 0 ? 0.0 : (r.log_domain(m) ? r.column_slack(m, j) : tol);
            if (guarded && want != 0 && s >= 0 && s <= 1 + tol) continue;
            if (!(std::fabs(s - want) <= allowed))
                return "matrix " + std::to_string(m) + " column " + std::to_string(j) + " sums to " + hexfloat(s) +
                       ", want " + hexfloat(want) + " within " + hexfloat(allowed);
        }
        return "";
    });
}

// The eps guard (v / (sum + eps), docs/sinkhorn.md "The eps guard"): the
// generated cases with eps in {1e-6, 1e-3, 0.1, 1} (the guard from negligible
// to dominant: 0.1 and 1 are comparable to the line sums of the shifted start),
// every element within its derived bound and the guarded column sums.  Its own
// property so that the eps = 0 cases of within_budget (and their recorded
// profiles) stay as they were.
Testable eps_guard(const KernelInfo& k) {
    return [&k] {
        const double eps = *rc::gen::element(1e-6, 1e-3, 0.1, 1.0);
        CaseSpec spec = in_domain(*gen_sinkhorn_spec(k.in, GenOptions{}));
        spec.params.set("eps", eps);
        const Case c = build_case(spec);
        const CaseResult r = check_case(k, c.params, c.views(), nullptr);
        if (!r.pass) RC_FAIL("eps = " + hexfloat(eps) + ": " + r.message);
        if (const std::string f = column_marginals_check(k, c); !f.empty()) RC_FAIL("eps = " + hexfloat(eps) + ": " + f);
    };
}

void add_sinkhorn_properties(std::vector<PropertyDef>& v) {
    auto is_sinkhorn = [](const OpSpec& op) { return op.name == "sinkhorn"; };
    v.push_back({"column_marginals",
                 "after the final column normalization every column sums to 1 within that step's rounding",
                 is_sinkhorn, [](const KernelInfo& k, const RunConfig&, Stats*) { return on_generated_case(k, column_marginals_check); }, 2});
    v.push_back({"batch_independence", "a matrix's B is bit-identical wherever it sits in the batch", is_sinkhorn,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return batch_independence(k); }, 2});
    v.push_back({"eps_guard", "with v / (sum + eps), eps > 0: every element within its derived bound, column sums <= 1 + bound",
                 is_sinkhorn, [](const KernelInfo& k, const RunConfig&, Stats*) { return eps_guard(k); }, 2});
}

}  // namespace conform::props
