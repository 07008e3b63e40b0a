// diverge.html: one self-contained page (the report stylesheet, inline SVG,
// no scripts): the headline, the plot of the largest local and propagated
// utilization of each layer against depth (log scale, the budget dashed, a
// marker at the first failing layer) and the per-layer tables.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/diverge_report.hpp"
#include "reports/writers.hpp"

namespace conform::model {
namespace {

using report::detail::escape_markup;
using report::detail::number;

std::string h(std::string_view s) { return escape_markup(s, false); }

constexpr double kW = 720, kH = 320, kL = 60, kT = 30, kPW = 560, kPH = 230;
constexpr const char* kLocal = "#4a78b5";
constexpr const char* kProp = "#ef6c00";
constexpr const char* kBad = "#c62828";

// Decades shown: always 1e-3 .. 1e1 (the budget well inside), widened to the data.
struct Scale {
    double lo = -3, hi = 1;
    std::int64_t layers = 1;
    double y(double util) const {
        const double v = util > 0 ? std::clamp(std::log10(util), lo, hi) : lo;  // 0 and inf at the edges
        return kT + kPH - (v - lo) / (hi - lo) * kPH;
    }
    double x(std::int64_t layer) const { return kL + (layers > 1 ? double(layer) / double(layers - 1) : 0.5) * kPW; }
};

Scale scale_of(const std::vector<LayerSummary>& ls) {
    Scale s;
    s.layers = static_cast<std::int64_t>(ls.size());
    for (const LayerSummary& l : ls)
        for (double u : {l.local, l.propagated})
            if (u > 0 && std::isfinite(u)) s.lo = std::min(s.lo, std::floor(std::log10(u))), s.hi = std::max(s.hi, std::ceil(std::log10(u)));
    s.lo = std::max(s.lo, -12.0);
    return s;
}

std::string axes(const Scale& s) {
    std::string out = fmt::format("<line stroke=\"#555\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>"
                                  "<line stroke=\"#555\" x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\"/>",
                                  kL, kT, kT + kPH, kL + kPW);
    for (double d = s.lo; d <= s.hi; ++d)
        out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">1e{}</text>", kL - 4, s.y(std::pow(10, d)) + 3, d);
    const std::int64_t step = std::max<std::int64_t>(1, s.layers / 16);
    for (std::int64_t l = 0; l < s.layers; l += step)
        out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>", s.x(l), kT + kPH + 14, l);
    out += fmt::format("<line stroke=\"{0}\" stroke-dasharray=\"4 3\" x1=\"{1}\" y1=\"{2:.1f}\" x2=\"{3}\" y2=\"{2:.1f}\"/>"
                       "<text x=\"{4}\" y=\"{5:.1f}\" fill=\"{0}\">budget</text>",
                       kBad, kL, s.y(1), kL + kPW, kL + kPW + 4, s.y(1) + 3);
    return out + fmt::format("<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\">layer (depth)</text>"
                             "<text x=\"14\" y=\"{2}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {2})\">"
                             "max utilization (log)</text>",
                             kL + kPW / 2, kH - 4, kT + kPH / 2);
}

std::string line(const Scale& s, const std::vector<LayerSummary>& ls, bool local, const char* colour, const char* label,
                 int row) {
    std::string pts, dots;
    for (const LayerSummary& l : ls) {
        const double u = local ? l.local : l.propagated;
        pts += fmt::format("{:.1f},{:.1f} ", s.x(l.layer), s.y(u));
        dots += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"><title>layer {}: {} {}</title></circle>",
                            s.x(l.layer), s.y(u), colour, l.layer, label, number(u));
    }
    return fmt::format("<polyline fill=\"none\" stroke=\"{0}\" stroke-width=\"1.5\" points=\"{1}\"/>{2}"
                       "<text x=\"{3}\" y=\"{4}\" fill=\"{0}\">{5}</text>",
                       colour, pts, dots, kL + 8, kT - 14 + 12 * row, label);
}

std::string plot(const DivergeReport& r) {
    const std::vector<LayerSummary> ls = layer_summaries(r);
    if (ls.empty()) return "";
    const Scale s = scale_of(ls);
    std::string svg = fmt::format("<svg role=\"img\" aria-label=\"utilization against depth\" width=\"{0}\" height=\"{1}\" "
                                  "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"10\" fill=\"#333\">",
                                  kW, kH);
    svg += axes(s) + line(s, ls, true, kLocal, "local", 0) + line(s, ls, false, kProp, "propagated", 1);
    if (r.first_failing) {
        const std::int64_t l = r.points[*r.first_failing].layer;
        svg += fmt::format("<line stroke=\"{0}\" stroke-width=\"1.5\" x1=\"{1:.1f}\" y1=\"{2}\" x2=\"{1:.1f}\" y2=\"{3}\"/>"
                           "<text x=\"{4:.1f}\" y=\"{5}\" fill=\"{0}\">first failing: layer {6}</text>",
                           kBad, s.x(l), kT, kT + kPH, s.x(l) + 3, kT + 10, l);
    }
    return svg + "</svg>\n";
}

std::vector<std::string> row_classes(const std::vector<PointReport>& ps, std::int64_t layer) {
    std::vector<std::string> c;
    for (const PointReport& p : ps)
        if (p.layer == layer)
            c.push_back(p.status == PointStatus::fail_local ? "fail" : p.status == PointStatus::pass ? "" : "muted");
    return c;
}

}  // namespace

std::string to_html(const DivergeReport& r) {
    const bool failed = r.first_failing.has_value();
    std::string body = fmt::format("<h1>Divergence report: <span class=\"{}\">{}</span></h1>\n", failed ? "fail" : "pass",
                                   h(diverge_headline(r)));
    body += fmt::format("<p>First failing: <b>{}</b></p>\n<ul><li>candidate: {}; reference: {}</li>"
                        "<li>FP64-tier bound / budget (max): {}</li><li>MPFR cross-check: {}</li>"
                        "<li>analysis time: {:.1f} s</li></ul>\n",
                        h(first_failing_text(r)), h(r.candidate), h(r.reference), number(r.oracle_bound_ratio),
                        h(r.mpfr_cross_check.empty() ? "not run" : r.mpfr_cross_check), r.seconds);
    body += plot(r);
    for (const LayerSummary& l : layer_summaries(r))
        body += fmt::format("<details{}><summary>Layer {} (local {}, propagated {})</summary>\n{}</details>\n",
                            l.fail_local ? " class=\"fail\" open" : "", l.layer, number(l.local), number(l.propagated),
                            report::detail::html_table(layer_table(r.points, l.layer, true), row_classes(r.points, l.layer)));
    for (const PointReport& p : r.points)
        if (!p.conventions_tried.empty()) {
            body += fmt::format("<h3>Conventions tried at {}</h3><ul>", h(p.point));
            for (const auto& t : p.conventions_tried) body += "<li>" + h(t) + "</li>";
            body += "</ul>\n";
        }
    return report::detail::html_page("conform divergence: " + diverge_headline(r), body);
}

}  // namespace conform::model
