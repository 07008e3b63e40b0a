// Generators and properties of the lightning indexer (docs/sparse.md,
// "Properties").
#include <algorithm>
#include <cmath>
#include <numeric>

#include "oracle/sparse.hpp"
#include "properties/common.hpp"

namespace conform::props {

// dims = {Lq, N, H, c}; weights of either sign (DSA's come from a projection).
rc::Gen<CaseSpec> gen_lightning_indexer_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](std::int64_t lq, std::int64_t n, std::int64_t h, std::int64_t c, Family fq, Family fk, int scale,
              std::uint64_t seed, int specials) {
            CaseSpec s = structured_spec("lightning_indexer", fmt, {lq, n, h, c}, Params{}, fq, scale, seed, specials);
            s.families = {fq, fk, Family::normal};
            return s;
        },
        rc::gen::element<std::int64_t>(1, 3, 8), rc::gen::element<std::int64_t>(1, 5, 16, 33),
        rc::gen::element<std::int64_t>(1, 2, 4, 8), rc::gen::element<std::int64_t>(1, 4, 16, 64),
        rc::gen::elementOf(value_families()), rc::gen::elementOf(value_families()), rc::gen::inRange(-3, 2),
        rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_lightning_indexer_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t lq = spec.dims.at(0), n = spec.dims.at(1), h = spec.dims.at(2), d = spec.dims.at(3);
    Tensor q(spec.format, {lq, h, d}), k(spec.format, {n, d}), w(spec.format, {lq, h});
    fill_values(q, spec.families.at(0), spec, 0, rng);
    fill_values(k, spec.families.at(1), spec, 1, rng);
    fill_values(w, spec.families.size() > 2 ? spec.families[2] : Family::normal, spec, 2, rng);  // weights: ordinary
    inject_specials(q, spec.specials, rng);
    inject_specials(k, spec.specials, rng);
    c.inputs.push_back(std::move(q));
    c.inputs.push_back(std::move(k));
    c.inputs.push_back(std::move(w));
    return c;
}

namespace {

Case indexer_case(const KernelInfo& k) { return build_case(in_domain(*gen_lightning_indexer_spec(k.in, GenOptions{}))); }

// The exact scores and their budget for the kernel's formats.
struct IndexerReference {
    std::vector<double> exact, bound;
};
IndexerReference reference(const KernelInfo& k, const Case& c) {
    const auto r = oracle::evaluate_structured("lightning_indexer", c.params, c.views(), {k.out});
    return {r.exact.at(0), oracle::lightning_indexer_bound(c.params, c.views(), r.exact, k.acc, {k.out}).at(0)};
}

// Permuting the heads (q's head axis with w's columns) changes only the
// order of the head sum: both results lie within the budget of the same
// exact score, so they differ by at most twice it.
Testable head_permutation_invariance(const KernelInfo& k) {
    return [&k] {
        const Case c = indexer_case(k);
        const std::int64_t lq = c.inputs[0].shape()[0], h = c.inputs[0].shape()[1], d = c.inputs[0].shape()[2];
        std::vector<std::int64_t> perm(static_cast<std::size_t>(h));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), std::mt19937_64(*rc::gen::arbitrary<std::uint64_t>()));
        Tensor q = c.inputs[0], w = c.inputs[2];
        for (std::int64_t t = 0; t < lq; ++t)
            for (std::int64_t j = 0; j < h; ++j) {
                const std::int64_t o = perm[static_cast<std::size_t>(j)];
                w.set_bits(t * h + j, c.inputs[2].bits(t * h + o));
                for (std::int64_t i = 0; i < d; ++i) q.set_bits((t * h + j) * d + i, c.inputs[0].bits((t * h + o) * d + i));
            }
        const IndexerReference ref = reference(k, c);
        const Tensor a = run_kernel(k, c.params, c.views()).at(0);
        const Tensor b = run_kernel(k, c.params, {q.view(), c.inputs[1].view(), w.view()}).at(0);
        for (std::int64_t i = 0; i < a.numel(); ++i) {
            const double x = a.value(i), y = b.value(i), e = ref.bound[static_cast<std::size_t>(i)];
            if (!std::isfinite(ref.exact[static_cast<std::size_t>(i)]) || !(e >= 0)) continue;  // special or undefined
            if (!(std::fabs(x - y) <= 2 * e))
                RC_FAIL("score " + std::to_string(i) + ": " + hexfloat(x) + " before the head permutation, " + hexfloat(y) +
                        " after (budget " + hexfloat(e) + ")");
        }
    };
}

}  // namespace

void add_sparse_indexer_properties(std::vector<PropertyDef>& v) {
    auto ind = [](const OpSpec& op) { return op.name == "lightning_indexer"; };
    v.push_back({"head_permutation_invariance", "permuting the heads moves a score by at most twice its budget", ind,
                 of_kernel(head_permutation_invariance)});
}

}  // namespace conform::props
