// Writers of the divergence report (docs/diverge.md, "Report formats"):
// diverge.json (schema kDivergeSchema, top-level first_failing = {layer,
// point} or null), diverge.md (a table per layer) and diverge.html (one
// self-contained page with an SVG plot of local and propagated utilization
// against depth).
#pragma once
#include <filesystem>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "model/diverge.hpp"

namespace conform::model {

constexpr const char* kDivergeSchema = "conform.diverge/1";

nlohmann::json to_json(const DivergeReport& r);
std::string to_markdown(const DivergeReport& r);
std::string to_html(const DivergeReport& r);
// Writes the three files into dir (created if missing), each replaced
// atomically; std::runtime_error naming the path on failure.
void write_diverge_dir(const std::filesystem::path& dir, const DivergeReport& r);

// "layer 3, layers.3.mlp_out (mlp, matmul)" or "none"; the matching
// convention appended when one was found.
std::string first_failing_text(const DivergeReport& r);

// The logits point's figures (top-1, top-k, KL, utilization) or "" without one.
std::string logits_text(const DivergeReport& r);

// "PASSED", "FAILED at layer L" or (a merge with gaps) "INCOMPLETE"; a
// range that is not the whole model is named, and the layers not analysed.
std::string diverge_headline(const DivergeReport& r);
std::string range_text(const LayerRange& r);  // "A:B"

// A report read back from diverge.json (schema kDivergeSchema);
// std::invalid_argument naming `file` and the field on a malformed one.
DivergeReport report_from_json(const nlohmann::json& j, const std::string& file);
// Partial reports of one dump (conform diverge --layers) joined into one, in
// layer order (docs/diverge.md, "Splitting a deep model"): the same
// contract, candidate and reference, ranges that do not overlap; layers no
// part covers are listed in `missing`.  `files` name the parts in errors.
DivergeReport merge_reports(std::vector<DivergeReport> parts, const std::vector<std::string>& files);

// The table of one layer's points: point, step, ULP, norm-wise relative
// error, cosine, SQNR, utilization (local / propagated when
// with_propagated), drift, status.
std::vector<std::vector<std::string>> layer_table(const std::vector<PointReport>& ps, std::int64_t layer,
                                                  bool with_propagated);

// Per layer: the largest local and propagated utilization and drift of its
// points (model-level points are left out) and whether a point failed.
struct LayerSummary {
    std::int64_t layer = 0;
    double local = 0, propagated = 0;
    double drift = std::numeric_limits<double>::quiet_NaN();  // NaN: none computed
    bool fail_local = false, fail_propagated = false;
};
std::vector<LayerSummary> layer_summaries(const DivergeReport& r);

}  // namespace conform::model
