// Markdown writer: a report meant to be read by a person (GitHub-flavoured
// tables, fenced code blocks for counterexamples and reproduction strings).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reports/writers.hpp"

namespace conform::report {
namespace detail {

// Inline text: backslash-escape characters Markdown would interpret, keep
// everything on one line (table cells cannot span lines).
std::string md_text(std::string_view raw) {
    std::string out;
    for (char c : detail::valid_utf8(raw)) {
        if (c == '\n' || c == '\r') c = ' ';
        bool leading = out.empty() && (c == '>' || c == '#');  // blockquote, heading
        if (leading || std::string_view("\\`*[]<|").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

static std::string md_row(const std::vector<std::string>& cells) {
    std::string s = "|";
    for (const auto& c : cells) s += " " + md_text(c) + " |";
    return s + "\n";
}

std::string md_table(const Table& t) {
    if (t.empty()) return "";
    std::string s = md_row(t[0]) + "|";
    for (std::size_t i = 0; i < t[0].size(); ++i) s += "---|";
    s += "\n";
    for (std::size_t i = 1; i < t.size(); ++i) s += md_row(t[i]);
    return s + "\n";
}

}  // namespace detail

namespace {

using detail::md_table;
using detail::md_text;
using detail::Table;

std::size_t longest_backtick_run(std::string_view s) {
    std::size_t run = 0, longest = 0;
    for (char c : s) longest = std::max(longest, run = c == '`' ? run + 1 : 0);
    return longest;
}

// Multi-line text: each line escaped, hard line breaks between them.
std::string md_lines(std::string_view raw) {
    std::string out;
    for (std::size_t start = 0; start <= raw.size();) {
        std::size_t end = std::min(raw.find('\n', start), raw.size());
        out += (out.empty() ? "" : "  \n") + md_text(raw.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

// Inline code span: no escapes apply inside, so the delimiter must be
// longer than any backtick run in the text.
std::string md_code(std::string_view raw) {
    std::string body;
    for (char c : detail::valid_utf8(raw)) body += c == '\n' || c == '\r' ? ' ' : c;
    std::string ticks(longest_backtick_run(body) + 1, '`');
    bool pad = !body.empty() && (body.front() == '`' || body.back() == '`');
    return ticks + (pad ? " " : "") + body + (pad ? " " : "") + ticks;
}

// A fenced code block whose fence is longer than any backtick run inside.
std::string fenced(std::string_view raw, std::string_view lang) {
    std::string body = detail::valid_utf8(raw);
    std::string fence(std::max<std::size_t>(3, longest_backtick_run(body) + 1), '`');
    if (!body.empty() && body.back() != '\n') body += '\n';
    return fmt::format("{}{}\n{}{}\n", fence, lang, body, fence);
}

std::string header_md(const RunReport& r) {
    std::string s = fmt::format("# Conformance report: {}\n\n", detail::headline(r));
    if (!r.complete) s += "**Run INTERRUPTED: this is a partial report.**\n\n";
    s += md_table(detail::metadata_table(r));
    return s + fmt::format("**Summary:** {}\n\n", md_text(detail::summary_line(r)));
}

std::string kernel_tables(const RunReport& r) {
    std::string s;
    for (const auto& g : detail::group_kernels(r)) {
        Table t{detail::kernel_columns()};
        for (const auto* k : g.kernels) t.push_back(detail::kernel_cells(*k));
        s += fmt::format("## {}\n\n{}", md_text(g.title), md_table(t));
    }
    return s;
}

std::string failed_property(const PropertyOutcome& p) {
    std::string s = fmt::format("#### {} (FAIL after {} cases)\n\n", md_text(p.name), p.cases);
    if (!p.message.empty()) s += fmt::format("{}\n\n", md_lines(p.message));
    if (!p.counterexample.empty()) s += "Counterexample:\n\n" + fenced(p.counterexample, "text") + "\n";
    if (!p.reproduce.empty()) s += "Reproduce:\n\n" + fenced(p.reproduce, "sh") + "\n";
    return s;
}

std::string worst_cases_md(const ErrorStats& st) {
    std::string s;
    if (!st.tightest_profile.empty())
        s += fmt::format("- judged by profile `{}`; tightest profile met: `{}`{}\n", st.profile.empty() ? "strict" : st.profile,
                         st.tightest_profile, st.characterized ? " (every case judged, past the first failure)" : "");
    if (const std::string c = detail::error_concentration(st); !c.empty()) s += "- beyond strict: " + md_text(c) + "\n";
    if (st.not_judged) s += fmt::format("- not judged: {}\n", md_text(detail::not_judged_text(st)));
    if (!st.notes.empty()) s += fmt::format("- counted: {}\n", md_text(detail::notes_text(st)));
    if (!st.worst_ulp_case.empty())
        s += fmt::format("- worst ULP case ({} ulp): {}\n", st.max_ulp, md_code(st.worst_ulp_case));
    if (st.has_bound && !st.worst_util_case.empty())
        s += fmt::format("- worst utilization case ({}): {}\n", detail::number(st.max_util),
                         md_code(st.worst_util_case));
    return s.empty() ? s : s + "\n";
}

// Declared conventions and what inference found (docs/reports.md).
std::string conventions_md(const KernelReport& k) {
    std::string s;
    if (!k.conventions.empty()) s += fmt::format("- declared conventions: `{}`\n", k.conventions);
    if (!k.domain.empty()) s += fmt::format("- declared domain: `{}`\n", k.domain);
    if (!k.unwritten.empty()) s += fmt::format("- outputs it does not write (not judged): `{}`\n", fmt::join(k.unwritten, "`, `"));
    if (!k.convention_match.empty())
        s += fmt::format("- **passes if it declares `{}`** (every property passes under it)\n", k.convention_match);
    else if (!k.conventions_tried.empty())
        s += "- no declarable convention explains the failures: a defect\n";
    for (const auto& t : k.conventions_tried) s += fmt::format("  - tried `{}`\n", t);
    return s.empty() ? s : s + "\n";
}

std::string failures(const RunReport& r) {
    std::string s;
    for (const auto& k : r.kernels) {
        if (k.passed) continue;
        s += fmt::format("### {} ({}) — {}\n\n", md_text(k.kernel), md_text(k.op), detail::verdict(k));
        s += conventions_md(k);
        s += worst_cases_md(k.stats);
        std::size_t before = s.size();
        for (const auto& p : k.properties)
            if (!p.passed) s += failed_property(p);
        if (s.size() == before) s += "No failing property was recorded for this kernel.\n\n";
    }
    return s.empty() ? s : "## Failures\n\n" + s;
}

// Facts counted about judged elements, every kernel (the router's
// ambiguous selections it accepted: docs/moe.md).
std::string counted_md(const RunReport& r) {
    std::string s;
    for (const auto& k : r.kernels)
        if (!k.stats.notes.empty()) s += fmt::format("- {}: {}\n", md_code(k.kernel), md_text(detail::notes_text(k.stats)));
    return s.empty() ? s : "## Counted\n\n" + s + "\n";
}

std::string attention_md(const RunReport& r) {
    const auto ks = detail::attention_kernels(r);
    if (ks.empty()) return "";
    std::string s = "## Attention\n\nError statistics of the softmax, RoPE and attention kernels (utilization = "
                    "|err| / derived bound):\n\n" + md_table(detail::error_stats_table(ks));
    const auto curve = detail::curve_table(ks, "rope_invariance");
    if (!curve.empty())
        s += "### RoPE relative-position invariance over position\n\n" +
             md_text("Utilization abs(S(x+5, x) - S(5, 0)) / budget, S(m, n) = <R(m)q, R(n)k> from the kernel's "
                     "rotated vectors, the budget from the per-element bounds of the table precision "
                     "(docs/rope.md); above 1 fails.") +
             "\n\n" + md_table(curve);
    return s + "### Worst case of each property\n\nThe passing case closest to the budget (or the shrunk "
               "counterexample of a failure) and the command that replays exactly that case.\n\n" +
           md_table(detail::worst_case_table(ks));
}

std::string amplification_md(const RunReport& r) {
    const auto t = detail::amplification_table(r);
    if (t.empty()) return "";
    return "## mHC residual path over depth\n\n" +
           md_text("||B_L ... B_1||_2 of each sinkhorn kernel's own matrices (n = 4, logits N(0, 1)) against the "
                   "product of their derived per-layer bounds sqrt((1 + row slack)(1 + column bound)) "
                   "(docs/sinkhorn.md); the last row is unconstrained HC (B = I + 0.1 N(0, 1)) for comparison.") +
           "\n\n" + md_table(t);
}

std::string exhaustive_md(const RunReport& r) {
    if (r.exhaustive.empty()) return "";
    return "## Exhaustive sweeps\n\n" + md_table(detail::exhaustive_table(r.exhaustive));
}

std::string not_provided_md(const RunReport& r) {
    if (r.not_provided.empty()) return "";
    return "## Not provided\n\nAsked of a backend that cannot run them on this machine: not checked, so "
           "neither a pass nor a failure.\n\n" + md_table(detail::not_provided_table(r.not_provided));
}

std::string mutation_md(const RunReport& r) {
    if (r.mutants.empty()) return "";
    return fmt::format("## Mutation testing\n\n{}\n\n{}", detail::kill_rate(r),
                       md_table(detail::mutant_table(r.mutants)));
}

}  // namespace

std::string to_markdown(const RunReport& r) {
    return header_md(r) + kernel_tables(r) + counted_md(r) + failures(r) + not_provided_md(r) + attention_md(r) + amplification_md(r) + exhaustive_md(r) + mutation_md(r);
}

}  // namespace conform::report
