// diverge.json and diverge.md; diverge.html is in diverge_html.cpp.
#include "model/diverge_report.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "reports/atomic_file.hpp"
#include "reports/writers.hpp"

namespace conform::model {
namespace {

using report::detail::number;

// JSON has no infinities: non-finite figures are the strings "inf", "-inf", "nan".
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(number(v)); }

nlohmann::json metrics_json(const ErrorMetrics& m) {
    return {{"max_ulp", num(m.max_ulp)},         {"max_rel", num(m.max_rel)}, {"rel_l2", num(m.rel_l2)},
            {"cosine", num(m.cosine)},
            {"sqnr_db", num(m.sqnr_db)},         {"utilization", num(m.utilization)},
            {"worst_index", m.worst},            {"class_mismatch", m.class_mismatch},
            {"not_judged", m.not_judged}};
}

nlohmann::json point_json(const PointReport& p) {
    nlohmann::json j = {{"point", p.point},
                        {"layer", p.layer},
                        {"sublayer", p.sublayer},
                        {"kind", name(p.kind)},
                        {"required", p.required},
                        {"status", name(p.status)},
                        {"local", metrics_json(p.local)},
                        {"propagated", metrics_json(p.propagated)},
                        {"drift", std::isnan(p.drift) ? nlohmann::json(nullptr) : num(p.drift)},
                        {"conventions_tried", p.conventions_tried},
                        {"convention_match", p.convention_match ? nlohmann::json(*p.convention_match) : nullptr}};
    if (!p.missing.empty()) j["missing"] = p.missing;
    if (!p.note.empty()) j["note"] = p.note;
    if (p.logits)
        j["logit_metrics"] = {{"top1_agreement", num(p.logits->top1)}, {"topk_overlap", num(p.logits->topk)},
                              {"k", p.logits->k}, {"kl", num(p.logits->kl)}, {"tokens", p.logits->tokens}};
    return j;
}

nlohmann::json failing_json(const std::vector<PointReport>& ps, const std::optional<std::size_t>& i) {
    if (!i) return nullptr;
    const PointReport& p = ps[*i];
    return {{"layer", p.layer}, {"point", p.point}, {"sublayer", p.sublayer}, {"kind", name(p.kind)},
            {"convention_match", p.convention_match ? nlohmann::json(*p.convention_match) : nullptr}};
}

nlohmann::json range_json(const LayerRange& r) { return {{"first", r.first}, {"end", r.end}}; }

nlohmann::json points_json(const std::vector<PointReport>& ps) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : ps) a.push_back(point_json(p));
    return a;
}

}  // namespace

std::vector<LayerSummary> layer_summaries(const DivergeReport& r) {
    std::vector<LayerSummary> out;
    for (const PointReport& p : r.points) {
        if (p.layer < 0) continue;
        if (out.empty() || out.back().layer != p.layer) out.push_back({p.layer});
        LayerSummary& l = out.back();
        if (p.status != PointStatus::not_checkable) l.local = std::max(l.local, p.local.utilization);
        l.propagated = std::max(l.propagated, p.propagated.utilization);
        l.fail_local = l.fail_local || p.status == PointStatus::fail_local;
        l.fail_propagated = l.fail_propagated || p.status == PointStatus::fail_propagated;
        if (!std::isnan(p.drift)) l.drift = std::isnan(l.drift) ? p.drift : std::max(l.drift, p.drift);
    }
    return out;
}

std::string logits_text(const DivergeReport& r) {
    for (const PointReport& p : r.points)
        if (p.logits)
            return fmt::format("top-1 agreement {}, top-{} overlap {}, KL {} nats over {} tokens (vs {}); max logit error "
                               "{} of the step's budget",
                               number(p.logits->top1), p.logits->k, number(p.logits->topk), number(p.logits->kl),
                               p.logits->tokens, r.reference, number(p.local.utilization));
    return "";
}

std::string first_failing_text(const DivergeReport& r) {
    if (!r.first_failing) return "none";
    const PointReport& p = r.points[*r.first_failing];
    std::string s = fmt::format("layer {}, {} ({}, {})", p.layer, p.point, p.sublayer, name(p.kind));
    if (p.convention_match) s += "; matches convention " + *p.convention_match;
    return s;
}

nlohmann::json to_json(const DivergeReport& r) {
    nlohmann::json j = {{"schema", kDivergeSchema},
                        {"candidate", r.candidate},
                        {"reference", r.reference},
                        {"contract", to_json(r.contract)},
                        {"first_failing", failing_json(r.points, r.first_failing)},
                        {"oracle_bound_ratio", num(r.oracle_bound_ratio)},
                        {"oracle_bound_worst", r.oracle_bound_worst},
                        {"mpfr_cross_check", r.mpfr_cross_check},
                        {"seconds", r.seconds},
                        {"layer_range", range_json(r.range)},
                        {"model_layers", r.contract.layers},
                        {"propagated_from", r.propagated_from},
                        {"tokens_checked", r.tokens_checked},
                        {"tokens_propagated", r.tokens_propagated},
                        {"points", points_json(r.points)}};
    if (!r.parts.empty()) {
        j["parts"] = nlohmann::json::array();
        for (const LayerRange& p : r.parts) j["parts"].push_back(range_json(p));
        j["missing"] = nlohmann::json::array();
        for (const LayerRange& m : r.missing) j["missing"].push_back(range_json(m));
    }
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerSummary& l : layer_summaries(r))
        layers.push_back({{"layer", l.layer}, {"local_utilization", num(l.local)},
                          {"propagated_utilization", num(l.propagated)},
                          {"drift", std::isnan(l.drift) ? nlohmann::json(nullptr) : num(l.drift)}, {"fail_local", l.fail_local},
                          {"fail_propagated", l.fail_propagated}});
    j["layers"] = layers;
    if (!r.reference_points.empty()) {
        j["reference_first_failing"] = failing_json(r.reference_points, r.reference_first_failing);
        j["reference_points"] = points_json(r.reference_points);
    }
    return j;
}

// ---- Markdown -------------------------------------------------------------------

namespace {

using report::detail::md_table;
using report::detail::md_text;
using report::detail::Table;

std::string joined_by_semicolons(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : "; ") + x;
    return s;
}

std::string pair(double local, double propagated) { return number(local) + " / " + number(propagated); }

}  // namespace

Table layer_table(const std::vector<PointReport>& ps, std::int64_t layer, bool with_propagated) {
    Table t{{"point", "step", "ULP (local / prop.)", "rel (norm-wise)", "cosine", "SQNR dB", "utilization", "drift ×",
             "status"}};
    for (const PointReport& p : ps) {
        if (p.layer != layer) continue;
        const ErrorMetrics &l = p.local, &g = p.propagated;
        std::string status = name(p.status);
        if (!p.missing.empty()) status += " (missing " + p.missing + ")";
        if (p.convention_match) status += " (matches " + *p.convention_match + ")";
        if (!p.note.empty()) status += " (" + p.note + ")";
        if (p.local.not_judged) status += " (" + std::to_string(p.local.not_judged) + " not judged: budget undefined)";
        t.push_back({p.point, name(p.kind), with_propagated ? pair(l.max_ulp, g.max_ulp) : number(l.max_ulp),
                     with_propagated ? pair(l.rel_l2, g.rel_l2) : number(l.rel_l2),
                     with_propagated ? pair(l.cosine, g.cosine) : number(l.cosine),
                     with_propagated ? pair(l.sqnr_db, g.sqnr_db) : number(l.sqnr_db),
                     with_propagated ? pair(l.utilization, g.utilization) : number(l.utilization),
                     std::isnan(p.drift) ? "" : number(p.drift), status});
    }
    return t;
}

namespace {

std::string conventions_md(const std::vector<PointReport>& ps) {
    std::string s;
    for (const PointReport& p : ps) {
        if (p.conventions_tried.empty()) continue;
        s += fmt::format("- {}: {}\n", md_text(p.point), md_text(joined_by_semicolons(p.conventions_tried)));
    }
    return s.empty() ? "" : "## Conventions tried at failing points\n\n" + s + "\n";
}

}  // namespace

std::string range_text(const LayerRange& r) { return fmt::format("{}:{}", r.first, r.end); }

std::string diverge_headline(const DivergeReport& r) {
    std::string s = r.first_failing ? fmt::format("FAILED at layer {}", r.points[*r.first_failing].layer)
                                    : (r.missing.empty() ? "PASSED" : "INCOMPLETE");
    if (!(r.range == LayerRange{0, r.contract.layers}))
        s += fmt::format(" (layers {} of {})", range_text(r.range), r.contract.layers);
    if (!r.missing.empty()) {
        std::string m;
        for (const LayerRange& g : r.missing) m += (m.empty() ? "" : ", ") + range_text(g);
        s += "; not analysed: layers " + m;
    }
    return s;
}

std::string to_markdown(const DivergeReport& r) {
    std::string s = fmt::format("# Divergence report: {}\n\n", diverge_headline(r));
    s += fmt::format("- first failing: **{}**\n", md_text(first_failing_text(r)));
    s += fmt::format("- candidate: {}; reference: {}\n", md_text(r.candidate), md_text(r.reference));
    s += fmt::format("- FP64-tier bound / budget (max): {} at {}\n", number(r.oracle_bound_ratio), md_text(r.oracle_bound_worst));
    if (!r.mpfr_cross_check.empty()) s += fmt::format("- MPFR cross-check: {}\n", md_text(r.mpfr_cross_check));
    if (const std::string l = logits_text(r); !l.empty()) s += fmt::format("- logits: {}\n", md_text(l));
    if (!r.propagated_from.empty()) s += fmt::format("- propagated error from: {}\n", md_text(r.propagated_from));
    if (r.tokens_checked > 0 && r.tokens_checked < r.contract.tokens)
        s += fmt::format("- tokens: local checks on {} of {} (the first {} and the rest spread over the sequence); "
                         "propagated error over the first {}\n",
                         r.tokens_checked, r.contract.tokens, r.tokens_propagated, r.tokens_propagated);
    if (!r.parts.empty()) {
        std::string p;
        for (const LayerRange& g : r.parts) p += (p.empty() ? "" : ", ") + range_text(g);
        s += fmt::format("- merged from the layer ranges {}\n", p);
    }
    s += fmt::format("- analysis time: {:.1f} s\n\n", r.seconds);
    for (const LayerSummary& l : layer_summaries(r))
        s += fmt::format("## Layer {}\n\n{}", l.layer, md_table(layer_table(r.points, l.layer, true)));
    s += conventions_md(r.points);
    if (!r.reference_points.empty()) {
        s += "## The reference judged locally\n\nfirst failing: " +
             (r.reference_first_failing ? md_text(r.reference_points[*r.reference_first_failing].point) : "none") +
             "\n\n";
        for (const LayerSummary& l : layer_summaries(r))
            s += fmt::format("### Reference, layer {}\n\n{}", l.layer, md_table(layer_table(r.reference_points, l.layer, false)));
    }
    return s;
}

void write_diverge_dir(const std::filesystem::path& dir, const DivergeReport& r) {
    std::filesystem::create_directories(dir);
    report::write_file_atomic(dir / "diverge.md", to_markdown(r));
    report::write_file_atomic(dir / "diverge.html", to_html(r));
    report::write_file_atomic(dir / "diverge.json", to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace conform::model
