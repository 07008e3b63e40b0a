// Properties every op has: the kernel within its budget of the oracle on
// every value family, and special values matched by class.
#include "properties/common.hpp"

#include <cmath>

#include "numerics/ulp.hpp"

namespace conform::props {

bool identical(const Tensor& a, const Tensor& b, std::string* where) {
    for (std::int64_t i = 0; i < a.numel(); ++i) {
        const bool nan_a = std::isnan(a.value(i)), nan_b = std::isnan(b.value(i));
        if (nan_a && nan_b) continue;
        if (a.bits(i) != b.bits(i)) {
            if (where)
                *where = "element " + std::to_string(i) + ": " + hexfloat(a.value(i)) + " vs " + hexfloat(b.value(i));
            return false;
        }
    }
    return true;
}

bool scale_exact(const Tensor& x, int k, Tensor* out) {
    *out = Tensor(x.format(), x.shape());
    for (std::int64_t i = 0; i < x.numel(); ++i) {
        const double v = std::ldexp(x.value(i), k);
        if (!std::isfinite(v) || decode(x.format(), encode(x.format(), v)) != v) return false;
        out->set_value(i, v);
    }
    return true;
}

bool is_op(const OpSpec& op, std::initializer_list<const char*> names) {
    for (const char* n : names)
        if (op.name == n) return true;
    return false;
}

namespace {

// check_case, keeping the evaluated case when the run collects them.
CaseResult collected_check(const KernelInfo& k, const Case& c, const RunConfig& cfg, Stats* stats, const char* property) {
    if (!cfg.collect) return check_case(k, c.params, c.views(), stats);
    const AccuracyProfile profile = profile_for(k);
    EvalOptions opt;
    opt.alternatives = true;
    CaseEval e = evaluate_case(k, c.params, c.views(), opt);
    e.property = property;
    CaseResult r = judge_case(e, profile, stats);
    cfg.collect->push_back(std::move(e));
    return r;
}

// The elements [c0, c0 + len) of row r of a row op's case, as a one-row
// case (its broadcast [n] inputs sliced alike).
Case row_slice(const Case& c, std::int64_t r, std::int64_t c0, std::int64_t len) {
    Case s;
    s.op = c.op;
    s.params = c.params;
    const std::int64_t n = c.inputs[0].view().cols();
    for (const Tensor& t : c.inputs) {
        const bool broadcast = t.view().rank == 1 && c.op->kind == OpKind::row;
        Tensor part(t.format(), broadcast ? std::vector<std::int64_t>{len} : std::vector<std::int64_t>{1, len});
        for (std::int64_t j = 0; j < len; ++j) part.set_bits(j, t.bits((broadcast ? 0 : r * n) + c0 + j));
        s.inputs.push_back(std::move(part));
    }
    return s;
}

// A failure of a row op (norms, softmax) reduced to the smallest slice of
// the failing case that still fails: the fewest elements of the failing row
// around the failing one, alone as a one-row case.  Data are
// kept, not regenerated, so the failure survives where RapidCheck's
// shrinking, which draws new values for a smaller shape, loses it.  "" when
// nothing smaller fails.
std::string smallest_failing_slice(const KernelInfo& k, const Case& c, const CaseResult& r) {
    // Elementwise ops: the message already names the one element's inputs.
    if (c.op->kind != OpKind::row || r.failed_output != 0 || r.failed_element < 0 || c.inputs.empty()) return "";
    const TensorView x = c.inputs[0].view();
    const std::int64_t n = x.cols(), row = r.failed_element / n, col = r.failed_element % n;
    for (std::int64_t len = 1; len <= n; len = std::min(n, len * 2) + (len == n)) {
        const std::int64_t c0 = std::clamp<std::int64_t>(col - len / 2, 0, n - len);
        const Case s = row_slice(c, row, c0, len);
        CaseResult sr;
        try {
            sr = check_case(k, s.params, s.views());
        } catch (const std::exception&) {
            continue;  // a slice the kernel refuses says nothing
        }
        if (sr.pass) continue;
        if (len == n && x.rows() == 1) return "";  // nothing smaller than the case itself
        return "\nsmallest failing slice: row " + std::to_string(row) + ", elements " + std::to_string(c0) + ".." +
               std::to_string(c0 + len - 1) + " alone (1 x " + std::to_string(len) + "): " + sr.message + "\n" +
               show_inputs(*s.op, s.params, s.views());
    }
    return "";
}

}  // namespace

void add_common_properties(std::vector<PropertyDef>& v) {
    v.push_back({"within_budget",
                 "every element within the op's budget of the oracle (ULP budget or derived bound), over all value "
                 "families, shapes and parameters",
                 [](const OpSpec&) { return true; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats* stats) -> Testable {
                     return [&k, cfg, stats] {
                         GenOptions opt;
                         opt.max_n = cfg.max_n;
                         const CaseSpec spec = in_domain(*gen_spec(*find_op(k.op), k.in, opt));
                         const Case c = build_case(spec);
                         const CaseResult r = collected_check(k, c, cfg, stats, "within_budget");
                         if (!r.pass && !cfg.characterize) RC_FAIL(r.message + smallest_failing_slice(k, c, r));
                         // Every element's bound vacuous: no pass; counted in the
                         // statistics as not judged, and another case is drawn.
                         RC_PRE(r.judged > 0);
                     };
                 }});
    v.push_back({"special_values",
                 "NaN, +-Inf, +-0 and +-max injected into the input: output classes match the oracle's special-value "
                 "table, finite elements stay within budget",
                 [](const OpSpec&) { return true; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) -> Testable {
                     return [&k, cfg] {
                         GenOptions opt;
                         opt.specials = true;
                         opt.max_n = std::min(cfg.max_n, 256);
                         const Case c = build_case(in_domain(*gen_spec(*find_op(k.op), k.in, opt)));
                         const CaseResult r = collected_check(k, c, cfg, nullptr, "special_values");
                         if (!r.pass && !cfg.characterize) RC_FAIL(r.message + smallest_failing_slice(k, c, r));
                     };
                 },
                 2});
    // GPU kernels (docs/cuda.md, "Determinism"): the same inputs twice give
    // the same bits, unless the kernel declares itself nondeterministic
    // (atomics), when both runs must pass; every other launch configuration
    // it names (one block, one warp) must pass on the same case, since a
    // different block size may reorder its sums.
    PropertyDef determinism{
        "determinism",
        "the same inputs twice give the same bits (or, declared nondeterministic, both within budget); every other "
        "launch configuration within budget",
        [](const OpSpec&) { return true; },
        [](const KernelInfo& k, const RunConfig& cfg, Stats*) -> Testable {
            return [&k, cfg] {
                GenOptions opt;
                opt.max_n = cfg.max_n;
                const Case c = build_case(in_domain(*gen_spec(*find_op(k.op), k.in, opt)));
                const bool nondeterministic = k.declared.count("nondeterministic") && k.declared.at("nondeterministic");
                if (nondeterministic) {
                    for (int run = 0; run < 2; ++run) {
                        const CaseResult r = check_case(k, c.params, c.views());
                        if (!r.pass) RC_FAIL("run " + std::to_string(run + 1) + ": " + r.message);
                    }
                } else {
                    const auto a = run_kernel(k, c.params, c.views()), b = run_kernel(k, c.params, c.views());
                    std::string where;
                    for (std::size_t o = 0; o < a.size(); ++o)
                        if (!identical(a[o], b[o], &where))
                            RC_FAIL("two runs on the same inputs differ at output " + std::to_string(o) + " " + where +
                                    " (a kernel that may must declare nondeterministic = 1)");
                }
                for (const auto& [name, fn] : k.launches) {
                    KernelInfo alt = k;
                    alt.fn = fn;
                    const CaseResult r = check_case(alt, c.params, c.views());
                    if (!r.pass) RC_FAIL("launch '" + name + "': " + r.message);
                }
            };
        },
        4};
    determinism.for_kernel = [](const KernelInfo& k) { return k.backend.rfind("cuda", 0) == 0; };
    v.push_back(std::move(determinism));
}

}  // namespace conform::props
