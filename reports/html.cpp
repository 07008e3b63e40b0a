// HTML writer: one self-contained page (inline CSS and SVG, no scripts, no
// external resources).  Kernels are grouped by op; each kernel's properties
// and histograms sit in a collapsible <details>, open when it failed.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "reports/writers.hpp"

namespace conform::report {
namespace detail {

constexpr const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1em}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0}
tr.fail td{background:#fde2e2}
tr.muted td,h1 .muted{color:#777}
.pass{color:#17692e;font-weight:bold}
.fail{color:#b00020;font-weight:bold}
.banner{background:#b00020;color:#fff;padding:.4em .8em;font-weight:bold}
details{margin:.3em 0;border-left:3px solid #ccc;padding-left:.6em}
details.fail{border-left-color:#b00020}
summary{cursor:pointer}
pre{background:#f6f6f6;padding:.4em;overflow-x:auto;white-space:pre-wrap}
.charts{display:flex;flex-wrap:wrap;gap:1em}
)";

std::string tr(const std::vector<std::string>& html_cells, std::string_view tag, std::string_view cls) {
    std::string s = cls.empty() ? "<tr>" : fmt::format("<tr class=\"{}\">", cls);
    for (const auto& c : html_cells) s += fmt::format("<{0}>{1}</{0}>", tag, c);
    return s + "</tr>\n";
}

std::vector<std::string> escaped(const std::vector<std::string>& cells) {
    std::vector<std::string> out;
    for (const auto& c : cells) out.push_back(escape_markup(c, false));
    return out;
}

// rows[0] is the header; classes[i] is the class of data row i+1.
std::string html_table(const Table& rows, const std::vector<std::string>& classes) {
    if (rows.empty()) return "";
    std::string s = "<table>\n" + tr(escaped(rows[0]), "th", "");
    for (std::size_t i = 1; i < rows.size(); ++i) s += tr(escaped(rows[i]), "td", classes.at(i - 1));
    return s + "</table>\n";
}

std::string html_page(std::string_view title, std::string_view body) {
    return fmt::format("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                       "<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n{}</body>\n</html>\n",
                       escape_markup(title, false), kStyle, body);
}

}  // namespace detail

namespace {

using detail::escaped;
using detail::html_table;
using detail::Table;
using detail::tr;

std::string h(std::string_view s) { return detail::escape_markup(s, false); }
std::string attr(std::string_view s) { return detail::escape_markup(s, true); }

// ---- tables ----------------------------------------------------------------

std::string verdict_class(bool failed, bool muted) { return failed ? "fail" : muted ? "muted" : ""; }

std::string kernel_class(const KernelReport& k) {
    return verdict_class(detail::gated(k) && !k.passed, !detail::gated(k));
}

// ---- charts ----------------------------------------------------------------

struct Chart {
    std::string title, x_label;
    std::vector<std::string> labels;
    std::vector<std::int64_t> counts;
    std::size_t bad_from = SIZE_MAX;  // buckets from here on are drawn red
    std::size_t marker = SIZE_MAX;    // vertical marker at this bucket's left edge
    std::string marker_label;
};

// Geometry of one chart; colours are presentation attributes so a chart
// copied out of the page still renders.
constexpr double kW = 420, kH = 195, kLeft = 48, kTop = 34, kPlotW = 360, kPlotH = 110;
constexpr const char* kBarColour = "#4a78b5";
constexpr const char* kBadColour = "#c62828";
constexpr const char* kAxis = "stroke=\"#555\"";

// Log-scale bar height over `decades` decades above 1: a count of 1 gets one
// step, 10^decades the full height, 0 nothing.
double bar_height(std::int64_t c, int decades) {
    return c <= 0 ? 0 : kPlotH * (1 + std::log10(double(c))) / (decades + 1);
}

std::string y_axis(int decades) {
    std::string s = fmt::format("<line {0} x1=\"{1}\" y1=\"{2}\" x2=\"{1}\" y2=\"{3}\"/>", kAxis, kLeft, kTop,
                                kTop + kPlotH);
    for (int d = 0; d <= decades; ++d) {
        auto tick = std::llround(std::pow(10.0, d));
        double y = kTop + kPlotH - bar_height(tick, decades);
        std::string label = d <= 3 ? std::to_string(tick) : fmt::format("1e{}", d);
        s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", kLeft - 4, y + 3, label);
    }
    return s + fmt::format("<text x=\"12\" y=\"{0:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 12 {0:.1f})\">"
                           "count (log)</text>",
                           kTop + kPlotH / 2);
}

std::string bar(const Chart& c, std::size_t i, int decades, double bw) {
    std::string label = i < c.labels.size() ? c.labels[i] : "?";
    double x = kLeft + i * bw, bh = bar_height(c.counts[i], decades), base = kTop + kPlotH;
    std::string s = fmt::format("<rect fill=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\">"
                                "<title>{}: {}</title></rect>",
                                i >= c.bad_from ? kBadColour : kBarColour, x + 1, base - bh, bw - 2, bh, h(label),
                                c.counts[i]);
    if (c.counts[i] > 0)
        s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"9\">{}</text>", x + bw / 2,
                         base - bh - 2, c.counts[i]);
    double lx = x + bw / 2, ly = base + 10;
    return s + fmt::format("<text x=\"{0:.1f}\" y=\"{1:.1f}\" text-anchor=\"end\" transform=\"rotate(-40 {0:.1f} {1:.1f})\">"
                           "{2}</text>",
                           lx, ly, h(label));
}

std::string marker(const Chart& c, double bw) {
    if (c.marker > c.counts.size()) return "";
    double x = kLeft + c.marker * bw;
    return fmt::format("<line stroke=\"{0}\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\" x1=\"{1:.1f}\" y1=\"{2}\" "
                       "x2=\"{1:.1f}\" y2=\"{3}\"/><text x=\"{4:.1f}\" y=\"{5}\" fill=\"{0}\">{6}</text>",
                       kBadColour, x, kTop - 12, kTop + kPlotH, x + 3, kTop - 4, h(c.marker_label));
}

std::string svg_chart(const Chart& c) {
    if (c.counts.empty()) return fmt::format("<p>{}: no histogram recorded.</p>", h(c.title));
    std::int64_t max = std::max<std::int64_t>(1, *std::max_element(c.counts.begin(), c.counts.end()));
    int decades = std::max(1, static_cast<int>(std::ceil(std::log10(double(max)))));
    double bw = kPlotW / c.counts.size();
    std::string s = fmt::format("<svg role=\"img\" aria-label=\"{0}\" width=\"{1}\" height=\"{2}\" "
                                "viewBox=\"0 0 {1} {2}\" font-family=\"sans-serif\" font-size=\"10\" fill=\"#333\">"
                                "<title>{0}</title><text x=\"{3}\" y=\"12\" font-weight=\"bold\">{4}</text>",
                                attr(c.title), kW, kH, kLeft, h(c.title));
    s += y_axis(decades);
    s += fmt::format("<line {0} x1=\"{1}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\"/>", kAxis, kLeft, kTop + kPlotH,
                     kLeft + kPlotW);
    for (std::size_t i = 0; i < c.counts.size(); ++i) s += bar(c, i, decades, bw);
    s += marker(c, bw);
    return s + fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text></svg>\n", kLeft + kPlotW / 2,
                           kH - 4, h(c.x_label));
}

std::vector<std::string> labels(const auto& names) { return {names.begin(), names.end()}; }

std::string charts(const ErrorStats& st) {
    Chart ulp{"ULP error histogram", "ULP error (class = special-value class mismatch)",
              labels(detail::kUlpBuckets), st.ulp_hist, detail::kUlpBuckets.size() - 1, SIZE_MAX, ""};
    std::string s = svg_chart(ulp);
    if (st.has_bound) {
        Chart util{"Bound utilization histogram", "utilization |err| / bound", labels(detail::kUtilBuckets),
                   st.util_hist, detail::kUtilOneBucket, detail::kUtilOneBucket, "util = 1"};
        s += svg_chart(util);
    }
    return "<div class=\"charts\">" + s + "</div>\n";
}

// Line chart of curves: log2 of x across, log10 of error / budget up, the
// budget (utilization 1) dashed in red.  Kernels are told apart by colour.
constexpr const char* kLineColours[] = {"#4a78b5", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f",
                                        "#8d6e63", "#ad1457", "#558b2f", "#37474f"};

std::string svg_curves(const std::vector<std::pair<std::string, const Curve*>>& cs) {
    constexpr double W = 640, H = 300, L = 56, T = 30, PW = 420, PH = 220;
    double x0 = INFINITY, x1 = -INFINITY, y0 = 0, y1 = 0;  // log2 x, log10 util (always spans 1)
    auto ly = [](const CurvePoint& p) { return std::log10(std::max(p.error / p.budget, 1e-6)); };
    for (const auto& [name, c] : cs)
        for (const auto& p : c->points) {
            x0 = std::min(x0, std::log2(p.x)), x1 = std::max(x1, std::log2(p.x));
            if (std::isfinite(ly(p))) y0 = std::min(y0, std::floor(ly(p))), y1 = std::max(y1, std::ceil(ly(p)));
        }
    if (!(x1 > x0)) return "";
    auto X = [&](double lx) { return L + (lx - x0) / (x1 - x0) * PW; };
    auto Y = [&](double v) { return T + PH - (std::clamp(v, y0, y1) - y0) / (y1 - y0) * PH; };
    std::string s = fmt::format("<svg role=\"img\" aria-label=\"invariance error over position\" width=\"{0}\" "
                                "height=\"{1}\" viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"10\" "
                                "fill=\"#333\"><line {2} x1=\"{3}\" y1=\"{4}\" x2=\"{3}\" y2=\"{5}\"/>"
                                "<line {2} x1=\"{3}\" y1=\"{5}\" x2=\"{6}\" y2=\"{5}\"/>",
                                W, H, kAxis, L, T, T + PH, L + PW);
    for (double d = y0; d <= y1; ++d)
        s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">1e{}</text>", L - 4, Y(d) + 3, d);
    for (double e = std::ceil(x0); e <= x1; e += 4)
        s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">2^{}</text>", X(e), T + PH + 14, e);
    s += fmt::format("<line stroke=\"{0}\" stroke-dasharray=\"4 3\" x1=\"{1}\" y1=\"{2:.1f}\" x2=\"{3}\" "
                     "y2=\"{2:.1f}\"/><text x=\"{4}\" y=\"{5:.1f}\" fill=\"{0}\">budget</text>",
                     kBadColour, L, Y(0), L + PW, L + 2, Y(0) - 3);
    for (std::size_t i = 0; i < cs.size(); ++i) {
        const char* colour = kLineColours[i % std::size(kLineColours)];
        std::string pts;
        for (const auto& p : cs[i].second->points) pts += fmt::format("{:.1f},{:.1f} ", X(std::log2(p.x)), Y(ly(p)));
        s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"><title>{}</title>"
                         "</polyline><text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>",
                         colour, pts, h(cs[i].first), L + PW + 8, T + 10 + 12 * i, colour, h(cs[i].first));
    }
    return s + fmt::format("<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\">position x (log scale)</text>"
                           "<text x=\"12\" y=\"{2}\" text-anchor=\"middle\" transform=\"rotate(-90 12 {2})\">"
                           "error / budget (log)</text></svg>\n",
                           L + PW / 2, H - 4, T + PH / 2);
}

// ---- kernels ---------------------------------------------------------------

std::string property_table(const KernelReport& k) {
    Table t{{"property", "result", "cases", "seconds", "message"}};
    std::vector<std::string> classes;
    for (const auto& p : k.properties) {
        t.push_back({p.name, detail::pass_fail(p.passed), std::to_string(p.cases), detail::number(p.seconds),
                     p.message});
        classes.push_back(verdict_class(!p.passed, !detail::gated(k)));
    }
    return html_table(t, classes);
}

std::string failure_details(const PropertyOutcome& p) {
    std::string s = fmt::format("<h4 class=\"fail\">{} failed</h4>\n", h(p.name));
    if (!p.message.empty()) s += fmt::format("<p>{}</p>\n", h(p.message));
    if (!p.counterexample.empty()) s += fmt::format("<p>Counterexample:</p><pre>{}</pre>\n", h(p.counterexample));
    if (!p.reproduce.empty()) s += fmt::format("<p>Reproduce:</p><pre>{}</pre>\n", h(p.reproduce));
    return s;
}

std::string worst_cases(const ErrorStats& st) {
    std::string s;
    if (!st.tightest_profile.empty())
        s += fmt::format("<li>judged by profile <code>{}</code>; tightest profile met: <code>{}</code>{}</li>",
                         h(st.profile.empty() ? "strict" : st.profile), h(st.tightest_profile),
                         st.characterized ? " (every case judged, past the first failure)" : "");
    if (const std::string c = detail::error_concentration(st); !c.empty()) s += "<li>beyond strict: " + h(c) + "</li>";
    if (st.not_judged) s += fmt::format("<li>not judged: {}</li>", h(detail::not_judged_text(st)));
    if (!st.notes.empty()) s += fmt::format("<li>counted: {}</li>", h(detail::notes_text(st)));
    if (!st.worst_ulp_case.empty())
        s += fmt::format("<li>worst ULP case ({} ulp): <code>{}</code></li>", st.max_ulp, h(st.worst_ulp_case));
    if (st.has_bound && !st.worst_util_case.empty())
        s += fmt::format("<li>worst utilization case ({}): <code>{}</code></li>", detail::number(st.max_util),
                         h(st.worst_util_case));
    return s.empty() ? s : "<ul>" + s + "</ul>\n";
}

std::string kernel_details(const KernelReport& k, std::size_t id) {
    bool flagged = !k.passed && detail::gated(k);  // baselines are shown, never flagged
    std::string s = fmt::format("<details id=\"k{}\" class=\"kernel{}\"{}>\n<summary>{} &mdash; <span class=\"{}\">{}"
                                "</span> ({} elements, {})</summary>\n",
                                id, flagged ? " fail" : "", k.passed ? "" : " open", h(k.kernel),
                                flagged ? "fail" : k.passed ? "pass" : "", h(detail::verdict(k)),
                                k.stats.elements, h(k.budget));
    s += property_table(k) + worst_cases(k.stats);
    for (const auto& p : k.properties)
        if (!p.passed) s += failure_details(p);
    return s + charts(k.stats) + "</details>\n";
}

// One link per op group with its failure count: the page stays navigable
// with hundreds of kernels.
std::string contents(const std::vector<detail::KernelGroup>& groups) {
    std::string s;
    for (std::size_t i = 0; i < groups.size(); ++i) {
        auto failed = std::count_if(groups[i].kernels.begin(), groups[i].kernels.end(),
                                    [](const KernelReport* k) { return detail::gated(*k) && !k->passed; });
        s += fmt::format("<li><a href=\"#g{}\">{}</a> ({} kernels{})</li>", i, h(groups[i].title),
                         groups[i].kernels.size(), failed ? fmt::format(", <span class=\"fail\">{} failed</span>", failed) : "");
    }
    return "<nav><ul>" + s + "</ul></nav>\n";
}

std::string kernel_section(const detail::KernelGroup& g, std::size_t index, const RunReport& r) {
    std::string table = "<table>\n" + tr(escaped(detail::kernel_columns()), "th", "");
    std::string details;
    for (const auto* k : g.kernels) {
        auto id = static_cast<std::size_t>(k - r.kernels.data());
        auto cells = escaped(detail::kernel_cells(*k));
        cells[0] = fmt::format("<a href=\"#k{}\">{}</a>", id, cells[0]);
        table += tr(cells, "td", kernel_class(*k));
        details += kernel_details(*k, id);
    }
    return fmt::format("<section id=\"g{}\">\n<h2>{}</h2>\n{}</table>\n{}</section>\n", index, h(g.title), table,
                       details);
}

// ---- page ------------------------------------------------------------------

std::string header(const RunReport& r) {
    const std::string verdict = detail::headline(r);
    std::string s = fmt::format("<h1>Conformance report: <span class=\"{}\">{}</span></h1>\n",
                                verdict == "PASSED" ? "pass" : verdict == "FAILED" ? "fail" : "muted", verdict);
    if (!r.complete) s += "<p class=\"banner\">Run INTERRUPTED: this is a partial report.</p>\n";
    Table meta = detail::metadata_table(r);
    s += html_table(meta, std::vector<std::string>(meta.size() - 1));
    return s + fmt::format("<p><strong>Summary:</strong> {}</p>\n", h(detail::summary_line(r)));
}

std::string exhaustive(const RunReport& r) {
    if (r.exhaustive.empty()) return "";
    std::vector<std::string> classes;
    for (const auto& e : r.exhaustive) classes.push_back(verdict_class(!e.passed, false));
    return "<h2>Exhaustive sweeps</h2>\n" + html_table(detail::exhaustive_table(r.exhaustive), classes);
}

std::string not_provided(const RunReport& r) {
    if (r.not_provided.empty()) return "";
    return "<h2>Not provided</h2>\n<p>Asked of a backend that cannot run them on this machine: not checked, so "
           "neither a pass nor a failure.</p>\n" +
           html_table(detail::not_provided_table(r.not_provided), std::vector<std::string>(r.not_provided.size(), "muted"));
}

std::string mutation(const RunReport& r) {
    if (r.mutants.empty()) return "";
    std::vector<std::string> classes;
    for (const auto& m : r.mutants) classes.push_back(verdict_class(!m.killed, false));
    return fmt::format("<h2>Mutation testing</h2>\n<p>{}</p>\n{}", h(detail::kill_rate(r)),
                       html_table(detail::mutant_table(r.mutants), classes));
}

std::string amplification(const RunReport& r) {
    const auto t = detail::amplification_table(r);
    if (t.empty()) return "";
    std::vector<std::string> classes;
    for (std::size_t i = 1; i < t.size(); ++i) classes.push_back(verdict_class(t[i].back() == "FAIL", t[i].back() != "PASS" && t[i].back() != "FAIL"));
    return "<section id=\"amplification\">\n<h2>mHC residual path over depth</h2>\n<p>‖B<sub>L</sub>⋯B<sub>1</sub>‖₂ "
           "of each sinkhorn kernel's own matrices (n = 4, logits N(0, 1)) against the product of their derived "
           "per-layer bounds √((1 + row slack)(1 + column bound)) (docs/sinkhorn.md); the last row is unconstrained "
           "HC (B = I + 0.1 N(0, 1)) for comparison.</p>\n" + html_table(t, classes) + "</section>\n";
}

std::string attention(const RunReport& r) {
    const auto ks = detail::attention_kernels(r);
    if (ks.empty()) return "";
    std::string s = "<section id=\"attention\">\n<h2>Attention</h2>\n<p>Error statistics of the softmax, RoPE and "
                    "attention kernels (utilization = |err| / derived bound):</p>\n" +
                    html_table(detail::error_stats_table(ks), std::vector<std::string>(ks.size()));
    std::vector<std::pair<std::string, const Curve*>> curves;
    for (const auto* k : ks)
        for (const auto& c : k->curves)
            if (c.name == "rope_invariance") curves.emplace_back(k->kernel, &c);
    if (!curves.empty()) {
        const auto t = detail::curve_table(ks, "rope_invariance");
        s += "<h3>RoPE relative-position invariance over position</h3>\n<p>|S(x+5, x) − S(5, 0)| / budget, "
             "S(m, n) = ⟨R(m)q, R(n)k⟩ from the kernel's rotated vectors; the budget comes from the "
             "per-element bounds of the table precision (docs/rope.md); above 1 fails.</p>\n" +
             svg_curves(curves) + html_table(t, std::vector<std::string>(t.size() - 1));
    }
    std::vector<std::string> classes;
    for (const auto* k : ks)
        for (const auto& p : k->properties) classes.push_back(verdict_class(!p.passed, !detail::gated(*k)));
    return s + "<h3>Worst case of each property</h3>\n<p>The passing case closest to the budget (or the shrunk "
               "counterexample of a failure) and the command that replays exactly that case.</p>\n" +
           html_table(detail::worst_case_table(ks), classes) + "</section>\n";
}

}  // namespace

std::string to_html(const RunReport& r) {
    std::string body = header(r);
    auto groups = detail::group_kernels(r);
    body += contents(groups);
    for (std::size_t i = 0; i < groups.size(); ++i) body += kernel_section(groups[i], i, r);
    body += not_provided(r) + attention(r) + amplification(r) + exhaustive(r) + mutation(r);
    return detail::html_page("conform report: " + detail::headline(r), body);
}

}  // namespace conform::report
