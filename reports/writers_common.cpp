// Helpers shared by the report writers: summary counts, verdict and cell
// texts, table rows, grouping and escaping.
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "reports/writers.hpp"

namespace conform::report {

Summary summarize(const RunReport& r) {
    Summary s;
    for (const auto& k : r.kernels) {
        if (k.role == "kernel") ++s.kernels_checked;
        if (k.role == "baseline") ++s.baselines;
    }
    s.kernels_failed = r.failed_kernels();
    for (const auto& m : r.mutants) s.mutants_killed += m.killed;
    s.mutants_total = static_cast<int>(r.mutants.size());
    for (const auto& e : r.exhaustive) s.exhaustive_passed += e.passed;
    s.exhaustive_total = static_cast<int>(r.exhaustive.size());
    s.not_provided = static_cast<int>(r.not_provided.size());
    s.passed = r.passed();
    s.complete = r.complete;
    return s;
}

namespace detail {

std::string pass_fail(bool passed) { return passed ? "PASS" : "FAIL"; }

std::string verdict(const KernelReport& k) {
    if (gated(k)) return pass_fail(k.passed);
    return fmt::format("{} (not gated)", k.role.empty() ? "unknown role" : k.role);
}

std::string formats(const KernelReport& k) {
    std::string s = fmt::format("{} -> {}", k.in_format, k.out_format);
    if (!k.acc_format.empty()) s += fmt::format(" (acc {})", k.acc_format);
    return s;
}

std::string number(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return fmt::format("{:.3g}", v);
}

std::string run_status(const RunReport& r) {
    return r.complete ? "complete" : "INTERRUPTED (partial report)";
}

std::string headline(const RunReport& r) {
    if (!r.passed()) return "FAILED";
    const bool nothing_checked = r.kernels.empty() && r.exhaustive.empty() && r.mutants.empty();
    return nothing_checked && !r.not_provided.empty() ? "NOT PROVIDED" : "PASSED";
}

std::string kill_rate(const RunReport& r) {
    Summary s = summarize(r);
    return fmt::format("kill rate: {}/{}", s.mutants_killed, s.mutants_total);
}

std::string summary_line(const RunReport& r) {
    Summary s = summarize(r);
    return fmt::format(
        "{}: {} of {} kernels failed; baselines (not gated): {}; mutants killed {}/{}; "
        "exhaustive sweeps passed {}/{}; run {}",
        headline(r), s.kernels_failed, s.kernels_checked, s.baselines,
        s.mutants_killed, s.mutants_total, s.exhaustive_passed, s.exhaustive_total, run_status(r)) +
           (s.not_provided ? fmt::format("; not provided (not checked): {}", s.not_provided) : "");
}

std::vector<std::string> kernel_columns() {
    return {"kernel", "role", "formats", "budget", "verdict", "max ULP", "max util", "p99 util",
            "max util (rigorous)", "profile", "tightest profile met", "not judged"};
}

std::vector<std::string> kernel_cells(const KernelReport& k) {
    const ErrorStats& st = k.stats;
    std::string max_util = st.has_bound ? number(st.max_util) : "-";
    std::string p99 = st.has_bound && st.util_quantiles.size() > 2 ? number(st.util_quantiles[2]) : "-";
    return {k.kernel, k.role, formats(k), k.budget, verdict(k),
            std::to_string(st.max_ulp), max_util, p99, st.has_bound ? number(st.max_util_rigorous) : "-",
            st.profile.empty() ? "strict" : st.profile, st.tightest_profile.empty() ? "-" : st.tightest_profile,
            std::to_string(st.not_judged)};
}

std::string error_concentration(const ErrorStats& st) {
    std::string s;
    for (const auto& r : st.regions)
        if (r.beyond_strict > 0)
            s += fmt::format("{}{} of {} {} elements (max {} ulp)", s.empty() ? "" : ", ", r.beyond_strict, r.elements,
                             r.name, r.max_ulp);
    return s;
}

std::string not_judged_text(const ErrorStats& st) {
    std::string s;
    for (const auto& [why, n] : st.not_judged_reasons) s += fmt::format("{}{} ({})", s.empty() ? "" : "; ", why, n);
    return s;
}

std::string notes_text(const ErrorStats& st) {
    std::string s;
    for (const auto& [what, n] : st.notes) s += fmt::format("{}{} ({})", s.empty() ? "" : "; ", what, n);
    return s;
}

Table exhaustive_table(const std::vector<ExhaustiveResult>& xs) {
    Table t{{"kernel", "op", "format", "inputs", "max ULP", "budget ULP", "class mismatches",
             "worst input", "verdict", "seconds"}};
    for (const auto& e : xs)
        t.push_back({e.kernel, e.op, e.format, std::to_string(e.inputs), std::to_string(e.max_ulp),
                     std::to_string(e.budget_ulp), std::to_string(e.class_mismatches),
                     e.worst_input, pass_fail(e.passed), number(e.seconds)});
    return t;
}

Table mutant_table(const std::vector<MutantResult>& ms) {
    Table t{{"mutant", "op", "bug class", "description", "result", "killed by"}};
    for (const auto& m : ms)
        t.push_back({m.kernel, m.op, m.bug_class, m.description, m.killed ? "killed" : "SURVIVED",
                     m.killed_by});
    return t;
}

Table not_provided_table(const std::vector<NotProvided>& xs) {
    Table t{{"kernel", "op", "format", "backend", "verdict", "reason"}};
    for (const auto& n : xs) t.push_back({n.kernel, n.op, n.format, n.backend, "not provided", n.reason});
    return t;
}

Table metadata_table(const RunReport& r) {
    std::string sel;
    for (const auto& [k, v] : r.selection) sel += fmt::format("{}{}={}", sel.empty() ? "" : ", ", k, v);
    return {{"field", "value"},
            {"status", run_status(r)},
            {"seed", std::to_string(r.seed)},
            {"cases", std::to_string(r.cases)},
            {"machine", r.machine},
            {"started", r.started},
            {"finished", r.finished},
            {"tool version", r.tool_version},
            {"selection", sel.empty() ? "(all)" : sel},
            {"schema", r.schema}};
}

bool attention_section_kernel(const KernelReport& k) {
    static const std::set<std::string> families{"softmax", "rope", "attention"};
    return k.role != "mutant" && families.count(k.family) > 0;
}

std::vector<const KernelReport*> attention_kernels(const RunReport& r) {
    std::vector<const KernelReport*> ks;
    for (const auto& k : r.kernels)
        if (attention_section_kernel(k)) ks.push_back(&k);
    return ks;
}

Table error_stats_table(const std::vector<const KernelReport*>& ks) {
    Table t{{"kernel", "verdict", "elements", "max ULP", "p50 util", "p99 util", "p99.9 util", "max util"}};
    for (const auto* k : ks) {
        const ErrorStats& st = k->stats;
        auto q = [&](std::size_t i) { return st.has_bound && st.util_quantiles.size() > i ? number(st.util_quantiles[i]) : "-"; };
        t.push_back({k->kernel, verdict(*k), std::to_string(st.elements), std::to_string(st.max_ulp), q(0), q(2), q(3),
                     st.has_bound ? number(st.max_util) : "-"});
    }
    return t;
}

std::string reproduce_command(const KernelReport& k, const std::string& reproduce) {
    return reproduce.empty() ? "-" : "conform run --kernel " + k.kernel + " --reproduce '" + reproduce + "'";
}

Table worst_case_table(const std::vector<const KernelReport*>& ks) {
    Table t{{"kernel", "property", "result", "cases", "worst", "worst case", "reproduce"}};
    for (const auto* k : ks)
        for (const auto& p : k->properties) {
            const bool failed = !p.passed;
            std::string worst = p.worst_metric.empty() ? "-" : p.worst_metric + " " + number(p.worst_value);
            t.push_back({k->kernel, p.name, pass_fail(p.passed), std::to_string(p.cases), worst,
                         failed ? p.counterexample : p.worst_case,
                         reproduce_command(*k, failed ? p.reproduce : p.worst_reproduce)});
        }
    return t;
}

Table curve_table(const std::vector<const KernelReport*>& ks, const std::string& name) {
    Table t{{"x"}};
    std::vector<const Curve*> cs;
    for (const auto* k : ks)
        for (const auto& c : k->curves)
            if (c.name == name) {
                if (cs.empty()) t[0][0] = c.x_label;
                t[0].push_back(k->kernel);
                cs.push_back(&c);
            }
    if (cs.empty()) return {};
    for (std::size_t i = 0; i < cs[0]->points.size(); ++i) {
        const double x = cs[0]->points[i].x;
        std::vector<std::string> row{x == std::floor(x) && std::fabs(x) < 1e15 ? fmt::format("{:.0f}", x) : number(x)};
        for (const auto* c : cs)
            row.push_back(i < c->points.size() ? number(c->points[i].error / c->points[i].budget) : "-");
        t.push_back(row);
    }
    return t;
}

Table amplification_table(const RunReport& r) {
    Table t;
    const Curve* peer = nullptr;
    for (const auto& k : r.kernels)
        for (const auto& c : k.curves) {
            if (c.name != "depth_amplification" || k.role == "mutant" || c.points.empty()) continue;
            if (t.empty()) {
                t.push_back({"kernel"});
                for (const auto& p : c.points) t[0].push_back(fmt::format("L = {:.0f}", p.x));
                t[0].insert(t[0].end(), {"budget at L max", "verdict"});
            }
            std::vector<std::string> row{k.kernel};
            for (const auto& p : c.points) row.push_back(fmt::format("{:.6g}", p.error));
            row.insert(row.end(), {fmt::format("{:.6g}", c.points.back().budget), pass_fail(c.passed)});
            t.push_back(row);
            if (!c.peer_label.empty()) peer = &c;
        }
    if (peer) {
        std::vector<std::string> row{peer->peer_label};
        for (const auto& p : peer->points) row.push_back(fmt::format("{:.6g}", p.peer));
        row.insert(row.end(), {"-", "not judged"});
        t.push_back(row);
    }
    return t;
}

std::vector<KernelGroup> group_kernels(const RunReport& r) {
    std::map<std::string, std::vector<const KernelReport*>> by;
    for (const auto& k : r.kernels) {
        bool same = k.family.empty() || k.family == k.op;
        by[same ? k.op : fmt::format("{} / {}", k.family, k.op)].push_back(&k);
    }
    std::vector<KernelGroup> out;
    for (auto& [title, ks] : by) out.push_back({title, std::move(ks)});
    return out;
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
static std::size_t utf8_length(std::string_view s, std::size_t i) {
    auto b = static_cast<unsigned char>(s[i]);
    std::size_t n = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3
                  : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (std::size_t j = 1; j < n; ++j)
        if ((static_cast<unsigned char>(s[i + j]) & 0xC0) != 0x80) return 0;
    return n;
}

std::string valid_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        std::size_t n = utf8_length(s, i);
        out += n ? s.substr(i, n) : std::string_view("\xEF\xBF\xBD");
        i += n ? n : 1;
    }
    return out;
}

static const char* markup_entity(char c, bool attribute) {
    switch (c) {
        case '&': return "&amp;";
        case '<': return "&lt;";
        case '>': return "&gt;";
        case '"': return "&quot;";
        case '\'': return "&#39;";
        case '\n': return attribute ? "&#10;" : "\n";
        case '\r': return "&#13;";
        case '\t': return attribute ? "&#9;" : "\t";
        default: break;
    }
    auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7F ? "\xEF\xBF\xBD" : nullptr;
}

std::string escape_markup(std::string_view s, bool attribute) {
    std::string out;
    for (char c : valid_utf8(s)) {
        const char* e = markup_entity(c, attribute);
        if (e) out += e;
        else out += c;
    }
    return out;
}

}  // namespace detail
}  // namespace conform::report
