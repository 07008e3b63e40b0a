// Properties every op has: the kernel within its budget of the oracle on
// every value family, and special values matched by class.
#include "properties/common.hpp"

#include <cctype>
#include <cmath>
#include <optional>

#include "numerics/conventions.hpp"
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

// Attention: the failing query row alone -- its query head, the KV head it
// reads, and only the keys it can see, [first, pos] (pos = i + Lk - Lq;
// with a window, the last W of them).  With one query the slice's last key
// is again pos, so the bottom-right causal mask and the window see exactly
// what they saw.  nullopt for a row that sees no key, or a declared
// top-left alignment (one query would move its position).
std::optional<Case> attention_slice(const KernelInfo& k, const Case& c, const CaseResult& r, std::string& what) {
    const TensorView q = c.inputs[0].view(), kk = c.inputs[1].view(), v = c.inputs[2].view();
    const std::int64_t hq = q.shape[0], lq = q.shape[1], d = q.shape[2], hkv = kk.shape[0], lk = kk.shape[1], dv = v.shape[2];
    const std::int64_t e = r.failed_element;
    const std::int64_t h = r.failed_output == 0 ? e / (lq * dv) : e / lq, i = r.failed_output == 0 ? (e / dv) % lq : e % lq;
    const bool causal = c.params.get("causal", 0) != 0;
    const auto window = static_cast<std::int64_t>(c.params.get("window", 0));
    if ((causal || window > 0) && convention(k.conventions, "causal") == "top_left") return std::nullopt;
    const std::int64_t pos = causal || window > 0 ? i + lk - lq : lk - 1;
    if (pos < 0) return std::nullopt;
    const std::int64_t first = window > 0 ? std::max<std::int64_t>(pos - window + 1, 0) : 0, keys = pos - first + 1;
    const std::int64_t g = h / (hq / hkv);
    Case s;
    s.op = c.op;
    s.params = c.params;
    auto take = [](const TensorView& t, std::vector<std::int64_t> shape, std::int64_t from, std::int64_t count) {
        Tensor out(t.format, std::move(shape));
        for (std::int64_t j = 0; j < count; ++j) out.set_bits(j, t.bits(from + j));
        return out;
    };
    s.inputs.push_back(take(q, {1, 1, d}, (h * lq + i) * d, d));
    s.inputs.push_back(take(kk, {1, keys, d}, (g * lk + first) * d, keys * d));
    s.inputs.push_back(take(v, {1, keys, dv}, (g * lk + first) * dv, keys * dv));
    const std::size_t mask_at = attention_mask_input(c.op->name);
    if (c.op->name == "gated_attention") s.inputs.push_back(take(c.inputs[3].view(), {1, 1, dv}, (h * lq + i) * dv, dv));
    if (c.op->name == "sink_attention") s.inputs.push_back(take(c.inputs[3].view(), {1}, h, 1));  // head h's sink
    if (c.inputs.size() > mask_at) s.inputs.push_back(take(c.inputs[mask_at].view(), {1, keys}, i * lk + first, keys));
    what = "head " + std::to_string(h) + ", query " + std::to_string(i) + " alone (1 head, 1 query, keys " +
           std::to_string(first) + ".." + std::to_string(pos) + ")";
    return s;
}

// Delta rule (gdn, kda): a failing output y[t, h] alone -- head h and the
// tokens 0..t (y_t depends on no later token), its initial state sliced
// alike.  nullopt for packed cases of several sequences and for failures in
// the final state (they need every token).
std::optional<Case> delta_slice(const Case& c, const CaseResult& r, std::string& what) {
    if (r.failed_output != 0) return std::nullopt;
    const TensorView q = c.inputs[0].view(), v = c.inputs[2].view();
    const std::int64_t T = q.shape[0], H = q.shape[1], dv = v.shape[2];
    const std::int64_t t = r.failed_element / (H * dv), h = (r.failed_element / dv) % H;
    if (c.inputs.size() > 6 && c.inputs[6].view().numel() != 2) return std::nullopt;  // several sequences
    Case s;
    s.op = c.op;
    s.params = c.params;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
        const TensorView in = c.inputs[i].view();
        if (i == 6) {  // cu_seqlens {0, T} -> {0, t + 1}
            Tensor cu(in.format, {2});
            cu.set_value(0, 0), cu.set_value(1, static_cast<double>(t + 1));
            s.inputs.push_back(std::move(cu));
            continue;
        }
        if (i == 5) {  // initial_state [H, dk, dv] or [1, H, dk, dv]; empty: none
            if (in.numel() == 0) {
                s.inputs.push_back(c.inputs[i]);
                continue;
            }
            const std::int64_t per_head = in.numel() / H;
            std::vector<std::int64_t> shape(in.shape.begin(), in.shape.begin() + in.rank);
            shape[in.rank == 4 ? 1 : 0] = 1;
            Tensor st(in.format, shape);
            for (std::int64_t j = 0; j < per_head; ++j) st.set_bits(j, in.bits(h * per_head + j));
            s.inputs.push_back(std::move(st));
            continue;
        }
        // [T, H, ...]: tokens 0..t of head h
        std::vector<std::int64_t> shape(in.shape.begin(), in.shape.begin() + in.rank);
        const std::int64_t inner = in.numel() / (T * H);
        shape[0] = t + 1, shape[1] = 1;
        Tensor part(in.format, shape);
        for (std::int64_t tok = 0; tok <= t; ++tok)
            for (std::int64_t j = 0; j < inner; ++j) part.set_bits(tok * inner + j, in.bits((tok * H + h) * inner + j));
        s.inputs.push_back(std::move(part));
    }
    what = "head " + std::to_string(h) + ", tokens 0.." + std::to_string(t) + " alone (1 head, " + std::to_string(t + 1) +
           (t == 0 ? " token)" : " tokens)");
    return s;
}

// The kind of an element failure ("special-value class mismatch", "error",
// "N ulp ..."): a slice must fail the same way to stand for the case.
std::string failure_kind(const std::string& message) {
    const std::string s = message.substr(0, message.find_first_of(" (:"));
    return std::isdigit(static_cast<unsigned char>(s.empty() ? 'x' : s[0])) ? "ulp" : s;
}

// The report of slice s (described by `what`) of case c when it is smaller
// than c and fails the way c did (r); "" otherwise, or when the kernel
// refuses it (a slice it refuses says nothing).
std::string failing_slice_report(const KernelInfo& k, const Case& c, const CaseResult& r, const Case& s,
                                 const std::string& what) {
    bool smaller = false;
    for (std::size_t i = 0; i < s.inputs.size() && i < c.inputs.size(); ++i)
        smaller = smaller || s.inputs[i].numel() < c.inputs[i].numel();
    if (!smaller) return "";
    CaseResult sr;
    try {
        sr = check_case(k, s.params, s.views());
    } catch (const std::exception&) {
        return "";
    }
    if (sr.pass || failure_kind(sr.message) != failure_kind(r.message)) return "";
    return "\nsmallest failing slice: " + what + ": " + sr.message + "\n" + show_inputs(*s.op, s.params, s.views());
}

// A failure reduced to the smallest slice of the failing case that still
// fails: for a row op (norms, softmax) the fewest elements of the failing
// row around the failing one (1, 2, 4, ...), alone as a one-row case; for
// attention (and gated_attention) the failing query alone (attention_slice); for the delta rule
// the failing token's prefix of its head (delta_slice).  Data are kept, not
// regenerated, so the failure survives where RapidCheck's shrinking, which
// draws new values for a smaller shape, loses it.  "" when nothing smaller
// fails.
std::string smallest_failing_slice(const KernelInfo& k, const Case& c, const CaseResult& r) {
    if (r.failed_element < 0 || c.inputs.empty()) return "";
    const bool delta = c.op->name == "gdn" || c.op->name == "kda";
    if (softmax_attention_op(c.op->name) || delta) {
        std::string what;
        const std::optional<Case> s = delta ? delta_slice(c, r, what) : attention_slice(k, c, r, what);
        return s ? failing_slice_report(k, c, r, *s, what) : "";
    }
    // Elementwise ops: the message already names the one element's inputs.
    if (c.op->kind != OpKind::row || r.failed_output != 0) return "";
    const std::int64_t n = c.inputs[0].view().cols(), row = r.failed_element / n, col = r.failed_element % n;
    for (std::int64_t len = 1; len <= n; len = std::min(n, len * 2) + (len == n)) {
        const std::int64_t c0 = std::clamp<std::int64_t>(col - len / 2, 0, n - len);
        const std::string what = "row " + std::to_string(row) + ", elements " + std::to_string(c0) + ".." +
                                 std::to_string(c0 + len - 1) + " alone (1 x " + std::to_string(len) + ")";
        if (std::string report = failing_slice_report(k, c, r, row_slice(c, row, c0, len), what); !report.empty())
            return report;
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
