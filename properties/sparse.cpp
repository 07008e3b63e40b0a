// Generators and properties of sparse-attention selection (docs/sparse.md,
// "Properties").
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "oracle/sparse.hpp"
#include "properties/common.hpp"

namespace conform::props {

// dims = {Lq, N, duplicated columns}: with duplicates, candidate 2m + 1 scores
// exactly as 2m (ties).  Parameters: k, block r, causal, offset (0, the
// decode alignment N r - Lq, or anywhere in [0, N r]), force_local.
rc::Gen<CaseSpec> gen_topk_select_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](std::int64_t lq, std::int64_t n, std::int64_t k, std::int64_t r, int causal, int force, int where,
              int duplicate, Family fam, int scale, std::uint64_t seed, int specials) {
            const std::int64_t span = n * r;
            const std::int64_t offset = where == 0 ? 0 : where == 1 ? std::max<std::int64_t>(0, span - lq)
                                                                    : static_cast<std::int64_t>(seed % static_cast<std::uint64_t>(span + 1));
            Params p({{"k", static_cast<double>(k)},
                      {"block", static_cast<double>(r)},
                      {"causal", static_cast<double>(causal)},
                      {"offset", static_cast<double>(offset)},
                      {"force_local", static_cast<double>(force)}});
            return structured_spec("topk_select", fmt, {lq, n, duplicate}, p, fam, scale, seed, specials);
        },
        rc::gen::element<std::int64_t>(1, 2, 5, 16), rc::gen::element<std::int64_t>(1, 3, 8, 17, 40),
        rc::gen::element<std::int64_t>(1, 2, 4, 8), rc::gen::element<std::int64_t>(1, 1, 2, 4), rc::gen::inRange(0, 3),
        rc::gen::inRange(0, 3), rc::gen::inRange(0, 3), rc::gen::element(0, 0, 1), rc::gen::elementOf(value_families()),
        rc::gen::inRange(-3, 2), rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_topk_select_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t lq = spec.dims.at(0), n = spec.dims.at(1);
    Tensor s(spec.format, {lq, n});
    fill_values(s, spec.families.at(0), spec, 0, rng);
    if (spec.dims.at(2))
        for (std::int64_t i = 0; i < lq; ++i)
            for (std::int64_t m = 0; m + 1 < n; m += 2) s.set_bits(i * n + m + 1, s.bits(i * n + m));
    inject_specials(s, spec.specials, rng);
    c.inputs.push_back(std::move(s));
    return c;
}

namespace {

Case plain_case(const KernelInfo& k) { return build_case(in_domain(*gen_topk_select_spec(k.in, GenOptions{}))); }

std::string id_text(double v) { return std::isnan(v) ? "NaN" : std::to_string(static_cast<long long>(v)); }

// Every id a kernel returns is the forced block or a candidate the row's
// causal limit allows: selection never looks ahead.
Testable never_past_the_limit(const KernelInfo& k) {
    return [&k] {
        const Case c = plain_case(k);
        const oracle::SelectSetup s = oracle::select_setup(c.params, c.views());
        const Tensor out = run_kernel(k, c.params, c.views()).at(0);
        for (std::int64_t i = 0; i < s.queries; ++i)
            for (std::int64_t j = 0; j < s.slots; ++j) {
                const double id = out.value(i * s.slots + j);
                if (std::isnan(id) || id == -1) continue;
                const auto n = static_cast<std::int64_t>(id);
                const bool forced = j == 0 && n == oracle::forced_block(s, i);
                if (!forced && !(id == std::floor(id) && n >= 0 && n < s.candidates && oracle::select_eligible(s, i, n)))
                    RC_FAIL("query " + std::to_string(i) + " (position " + std::to_string(s.offset + i) + ") slot " +
                            std::to_string(j) + ": candidate " + id_text(id) + " is past its causal limit");
            }
    };
}

// With k >= N every eligible candidate is selected: the row's set is the
// forced block plus the whole pool, and the rest of the slots are -1.
Testable k_covers_every_candidate(const KernelInfo& k) {
    return [&k] {
        Case c = plain_case(k);
        c.params.set("k", static_cast<double>(c.inputs[0].shape()[1] + 1));
        const oracle::SelectSetup s = oracle::select_setup(c.params, c.views());
        const Tensor out = run_kernel(k, c.params, c.views()).at(0);
        for (std::int64_t i = 0; i < s.queries; ++i) {
            if (std::isnan(out.value(i * s.slots))) continue;  // a NaN score in the row
            std::set<std::int64_t> want, got;
            for (std::int64_t n = 0; n < s.candidates; ++n)
                if (oracle::select_eligible(s, i, n) || n == oracle::forced_block(s, i)) want.insert(n);
            for (std::int64_t j = 0; j < s.slots; ++j)
                if (const double id = out.value(i * s.slots + j); id != -1) got.insert(static_cast<std::int64_t>(id));
            if (got != want)
                RC_FAIL("query " + std::to_string(i) + ": " + std::to_string(got.size()) + " candidates selected, " +
                        std::to_string(want.size()) + " eligible (k = " + std::to_string(s.k) + ")");
        }
    };
}

// Row i of a prefill call equals a one-row call at offset + i: the selection
// of a step does not change when later queries come with it (decode equals
// prefill).
Testable decode_equals_prefill(const KernelInfo& k) {
    return [&k] {
        const Case c = plain_case(k);
        const Tensor all = run_kernel(k, c.params, c.views()).at(0);
        const std::int64_t lq = c.inputs[0].shape()[0], slots = all.shape()[1];
        const std::int64_t i = *rc::gen::inRange<std::int64_t>(0, lq);
        Params p = c.params;
        p.set("offset", c.params.get("offset", 0) + static_cast<double>(i));
        const Tensor row = run_kernel(k, p, {c.inputs[0].view().slice_first(i, i + 1)}).at(0);
        for (std::int64_t j = 0; j < slots; ++j)
            if (row.bits(j) != all.bits(i * slots + j))
                RC_FAIL("query " + std::to_string(i) + " slot " + std::to_string(j) + ": " + id_text(all.value(i * slots + j)) +
                        " in the prefill, " + id_text(row.value(j)) + " decoded alone");
    };
}

// Without a causal limit or a forced block, permuting the candidates
// permutes the selection, slot for slot, on every row without exact ties.
Testable candidate_permutation_equivariance(const KernelInfo& k) {
    return [&k] {
        Case c = plain_case(k);
        c.params.set("causal", 0), c.params.set("force_local", 0);
        const std::int64_t lq = c.inputs[0].shape()[0], n = c.inputs[0].shape()[1];
        std::vector<std::int64_t> perm(static_cast<std::size_t>(n));  // new q is old perm[q]
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), std::mt19937_64(*rc::gen::arbitrary<std::uint64_t>()));
        Tensor moved = c.inputs[0];
        for (std::int64_t i = 0; i < lq; ++i)
            for (std::int64_t q = 0; q < n; ++q) moved.set_bits(i * n + q, c.inputs[0].bits(i * n + perm[static_cast<std::size_t>(q)]));
        const Tensor a = run_kernel(k, c.params, c.views()).at(0), b = run_kernel(k, c.params, {moved.view()}).at(0);
        const std::int64_t slots = a.shape()[1];
        for (std::int64_t i = 0; i < lq; ++i) {
            std::set<double> seen;
            bool ties = false;
            for (std::int64_t q = 0; q < n; ++q) ties = ties || !seen.insert(c.inputs[0].value(i * n + q)).second;
            if (ties || std::isnan(a.value(i * slots))) continue;
            for (std::int64_t j = 0; j < slots; ++j) {
                const double want = a.value(i * slots + j), got = b.value(i * slots + j);
                const double mapped = got >= 0 && got < static_cast<double>(n) ? static_cast<double>(perm[static_cast<std::size_t>(got)]) : got;
                if (mapped != want)
                    RC_FAIL("query " + std::to_string(i) + " slot " + std::to_string(j) + ": candidate " + id_text(want) +
                            " before the permutation, " + id_text(mapped) + " after");
            }
        }
    };
}

}  // namespace

void add_sparse_properties(std::vector<PropertyDef>& v) {
    auto sel = [](const OpSpec& op) { return op.name == "topk_select"; };
    v.push_back({"never_past_the_limit", "every selected id is the forced block or a candidate the causal limit allows",
                 sel, of_kernel(never_past_the_limit)});
    v.push_back({"k_covers_every_candidate", "with k > N the selection is the forced block plus every eligible candidate",
                 sel, of_kernel(k_covers_every_candidate)});
    v.push_back({"decode_equals_prefill", "row i of a prefill equals the one-row call at offset + i", sel,
                 of_kernel(decode_equals_prefill)});
    v.push_back({"candidate_permutation_equivariance",
                 "without a causal limit or forced block, permuting the candidates permutes the selection (rows "
                 "without ties)",
                 sel, of_kernel(candidate_permutation_equivariance)});
}

}  // namespace conform::props
