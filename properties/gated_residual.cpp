// Generator and properties of gated_residual (docs/residual.md,
// "Properties").
#include <algorithm>
#include <cmath>
#include <numeric>

#include "oracle/bound.hpp"
#include "oracle/gated_residual.hpp"
#include "properties/common.hpp"
#include "properties/verdict.hpp"

namespace conform::props {

// dims = {n, T, d, r}: n = 4 most often (Qwen's hc_count), the rank small.
rc::Gen<CaseSpec> gen_gated_residual_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](int n, int T, int d, int r, Family f, int k, std::uint64_t seed, int specials, double eps) {
            return structured_spec("gated_residual", fmt, {n, T, d, r}, Params({{"eps", eps}}), f, k, seed, specials);
        },
        rc::gen::element(4, 4, 1, 2, 3), rc::gen::element(1, 2, 3), rc::gen::element(1, 7, 8, 16, 32),
        rc::gen::element(1, 2, 4, 8), rc::gen::elementOf(residual_families()), rc::gen::inRange(-4, 5),
        rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0),
        rc::gen::element(1e-6, 1e-6, 1e-6, 1e-5, 0.1, 0.0));
}

// H: the family, each stream scaled by its own 2^s (s in [-6, 6]); g 1 +
// N(0, 1)/4; A and B N(0, 1) / sqrt(fan-in) times 1/2, 2 or 8 (gates near
// 1/2 to saturated).
Case build_gated_residual_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t n = spec.dims.at(0), T = spec.dims.at(1), d = spec.dims.at(2), r = spec.dims.at(3);
    Tensor H(spec.format, {n, T, d}), g(spec.format, {n, d}), A(spec.format, {n * d, r}), B(spec.format, {r, n * d});
    fill_values(H, spec.families.at(0), spec, 0, rng);
    for (std::int64_t i = 0; i < n; ++i) {
        const int s = static_cast<int>(rng() % 13) - 6;
        for (std::int64_t e = i * T * d; e < (i + 1) * T * d; ++e) H.set_value(e, std::ldexp(H.value(e), s));
    }
    std::normal_distribution<double> n01;
    const double gains[] = {0.5, 2.0, 8.0};
    const double ga = gains[rng() % 3], gb = gains[rng() % 3];
    for (std::int64_t e = 0; e < g.numel(); ++e) g.set_value(e, 1 + 0.25 * n01(rng));
    for (std::int64_t e = 0; e < A.numel(); ++e) A.set_value(e, ga * n01(rng) / std::sqrt(static_cast<double>(n * d)));
    for (std::int64_t e = 0; e < B.numel(); ++e) B.set_value(e, gb * n01(rng) / std::sqrt(static_cast<double>(r)));
    c.inputs.push_back(std::move(H));
    c.inputs.push_back(std::move(g));
    c.inputs.push_back(std::move(A));
    c.inputs.push_back(std::move(B));
    residual_inject(c.inputs[0], spec.specials, rng);
    return c;
}

namespace {

Case gated_case(const KernelInfo& k) { return build_case(in_domain(*gen_gated_residual_spec(k.in, GenOptions{}))); }

bool gated_finite_token(const Case& c, std::int64_t t) {
    const Tensor& H = c.inputs[0];
    const std::int64_t n = H.shape()[0], T = H.shape()[1], d = H.shape()[2];
    for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t e = 0; e < d; ++e)
            if (!std::isfinite(H.value((i * T + t) * d + e))) return false;
    return true;
}

// A = 0 (n = 1 included): l = 0, every gate is sigma(0) = 1/2 exactly, and
// h = (1/2) sum_i RMSNorm(H_i) within the op's bound (the verdict of the
// case: the oracle and the bound on these inputs).
Testable zero_lowrank_half(const KernelInfo& k) {
    return [&k] {
        Case c = gated_case(k);
        Tensor& A = c.inputs[2];
        for (std::int64_t e = 0; e < A.numel(); ++e) A.set_value(e, 0.0);
        const CaseResult r = check_case(k, c.params, c.views());
        const Tensor& gate = r.outputs.at(1);
        const std::int64_t T = c.inputs[0].shape()[1], nd = gate.numel() / std::max<std::int64_t>(T, 1);
        for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t m = 0; m < nd && gated_finite_token(c, t); ++m) {
                const double got = gate.value(t * nd + m);
                if (std::isnan(got) && c.params.get("eps", 1e-6) == 0) continue;  // eps = 0 on a zero stream: 0/0
                if (!(got == 0.5))
                    RC_FAIL("A = 0: gate[" + std::to_string(t) + ", " + std::to_string(m) + "] = " + hexfloat(got) + ", want 1/2");
            }
        if (!r.pass) RC_FAIL("A = 0: " + r.message);
    };
}

// Permuting the streams with the rows of g, the row blocks of A and the
// column blocks of B leaves h unchanged and permutes the gate: the results
// agree within the sum of their bounds.
Testable stream_permutation(const KernelInfo& k) {
    return [&k] {
        const Case c = gated_case(k);
        const Tensor &H = c.inputs[0], &A = c.inputs[2], &B = c.inputs[3];
        const std::int64_t n = H.shape()[0], T = H.shape()[1], d = H.shape()[2], r = A.shape()[1], nd = n * d;
        std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
        std::iota(perm.begin(), perm.end(), 0);
        std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
        std::shuffle(perm.begin(), perm.end(), rng);
        auto src = [&](std::int64_t m) { return perm[static_cast<std::size_t>(m / d)] * d + m % d; };  // new index m <- old
        Case p = c;
        for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t e = 0; e < T * d; ++e) p.inputs[0].set_bits(i * T * d + e, H.view().bits(perm[static_cast<std::size_t>(i)] * T * d + e));
        for (std::int64_t m = 0; m < nd; ++m) {
            p.inputs[1].set_bits(m, c.inputs[1].view().bits(src(m)));
            for (std::int64_t j = 0; j < r; ++j) {
                p.inputs[2].set_bits(m * r + j, A.view().bits(src(m) * r + j));
                p.inputs[3].set_bits(j * nd + m, B.view().bits(j * nd + src(m)));
            }
        }
        const std::vector<Format> of = {output_format(k, 0), output_format(k, 1)};
        const auto e1 = oracle::evaluate_structured("gated_residual", c.params, c.views(), of).exact;
        const auto e2 = oracle::evaluate_structured("gated_residual", p.params, p.views(), of).exact;
        const auto b1 = oracle::gated_residual_bound(c.params, c.views(), e1, k.acc, of);
        const auto b2 = oracle::gated_residual_bound(p.params, p.views(), e2, k.acc, of);
        const auto o1 = run_kernel(k, c.params, c.views()), o2 = run_kernel(k, p.params, p.views());
        auto agree = [&](std::size_t o, std::int64_t e1i, std::int64_t e2i, const char* what) {
            const double x = o1[o].value(e1i), y = o2[o].value(e2i);
            const double a = b1[o][static_cast<std::size_t>(e1i)], b = b2[o][static_cast<std::size_t>(e2i)];
            if ((std::isnan(x) && std::isnan(y)) || a == oracle::kUndefined || b == oracle::kUndefined) return;
            if (!(std::fabs(x - y) <= a + b))
                RC_FAIL(std::string("streams permuted: ") + what + "[" + std::to_string(e2i) + "] = " + hexfloat(y) +
                        ", unpermuted " + hexfloat(x) + " (allowed " + hexfloat(a + b) + ")");
        };
        for (std::int64_t t = 0; t < T; ++t) {
            for (std::int64_t e = 0; e < d; ++e) agree(0, t * d + e, t * d + e, "h");
            for (std::int64_t m = 0; m < nd; ++m) agree(1, t * nd + src(m), t * nd + m, "gate");
        }
    };
}

// eps = 0: scaling one stream by 4 leaves its RMSNorm bit for bit (sum of
// squares x 16, root x 4, (g 4x)(1/(4r)) = (g x)(1/r) exactly), so the gate
// and h are bit-identical.  Tokens with a value outside [2^-40, 2^40] are
// skipped (squares may underflow).
Testable stream_scale_exact(const KernelInfo& k) {
    return [&k] {
        Case c = gated_case(k);
        c.params.set("eps", 0.0);
        const Tensor& H = c.inputs[0];
        const std::int64_t n = H.shape()[0], T = H.shape()[1], d = H.shape()[2], nd = n * d;
        const std::int64_t j = *rc::gen::inRange<std::int64_t>(0, n);
        Case s = c;
        for (std::int64_t e = j * T * d; e < (j + 1) * T * d; ++e) {
            const double v = std::ldexp(H.value(e), 2);
            RC_PRE(std::isfinite(v) && decode(H.format(), encode(H.format(), v)) == v);
            s.inputs[0].set_value(e, v);
        }
        const auto o1 = run_kernel(k, c.params, c.views()), o2 = run_kernel(k, s.params, s.views());
        for (std::int64_t t = 0; t < T; ++t) {
            bool plain = true;
            for (std::int64_t i = 0; i < n; ++i)
                for (std::int64_t e = 0; e < d; ++e) {
                    const double a = std::fabs(H.value((i * T + t) * d + e));
                    plain = plain && (a == 0 || (a >= 0x1p-40 && a <= 0x1p40));
                }
            if (!plain) continue;
            for (std::size_t o = 0; o < 2; ++o) {
                const std::int64_t w = o == 0 ? d : nd;
                for (std::int64_t e = t * w; e < (t + 1) * w; ++e) {
                    const double x = o1[o].value(e), y = o2[o].value(e);
                    if (!(x == y || (std::isnan(x) && std::isnan(y))))
                        RC_FAIL("eps = 0, stream " + std::to_string(j) + " times 4: " + (o == 0 ? "h[" : "gate[") +
                                std::to_string(e) + "] = " + hexfloat(y) + ", unscaled " + hexfloat(x));
                }
            }
        }
    };
}

}  // namespace

void add_gated_residual_properties(std::vector<PropertyDef>& v) {
    auto is_op_ = [](const OpSpec& op) { return op.name == "gated_residual"; };
    v.push_back({"zero_lowrank_half", "A = 0: every gate is 1/2 exactly and h = (1/2) sum_i RMSNorm(H_i) within the bound",
                 is_op_, of_kernel(zero_lowrank_half)});
    v.back().needs = {"gate"};
    v.push_back({"stream_permutation", "permuting the streams with g, A's row blocks and B's column blocks permutes the gate "
                 "and leaves h within the two results' bounds", is_op_, of_kernel(stream_permutation)});
    v.back().needs = {"gate"};
    v.push_back({"stream_scale_exact", "eps = 0: one stream times 4 leaves h and the gate bit for bit", is_op_,
                 of_kernel(stream_scale_exact)});
    v.back().needs = {"gate"};
}

}  // namespace conform::props
