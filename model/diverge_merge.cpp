// Reading diverge.json back and joining the partial reports of a layer-range
// split (docs/diverge.md, "Splitting a deep model").
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "model/diverge_report.hpp"

namespace conform::model {
namespace {

using nlohmann::json;

// Fields of one report file, each read with the path of the field in errors.
class ReportReader {
public:
    explicit ReportReader(std::string file) : file_(std::move(file)) {}

    [[noreturn]] void fail(const std::string& field, const std::string& why) const {
        throw std::invalid_argument(file_ + ": field \"" + field + "\": " + why);
    }
    const json& at(const json& j, const std::string& key, const std::string& where) const {
        if (!j.is_object() || !j.contains(key)) fail(where + key, "missing");
        return j.at(key);
    }
    // A figure: a JSON number, or "inf", "-inf", "nan" (JSON has no infinities).
    double number(const json& j, const std::string& key, const std::string& where) const {
        const json& v = at(j, key, where);
        if (v.is_number()) return v.get<double>();
        if (v == "inf") return std::numeric_limits<double>::infinity();
        if (v == "-inf") return -std::numeric_limits<double>::infinity();
        if (v == "nan") return std::numeric_limits<double>::quiet_NaN();
        fail(where + key, "expected a number");
    }
    std::int64_t integer(const json& j, const std::string& key, const std::string& where) const {
        const json& v = at(j, key, where);
        if (!v.is_number_integer()) fail(where + key, "expected an integer");
        return v.get<std::int64_t>();
    }
    std::string text(const json& j, const std::string& key, const std::string& where) const {
        const json& v = at(j, key, where);
        if (!v.is_string()) fail(where + key, "expected a string");
        return v.get<std::string>();
    }
    bool boolean(const json& j, const std::string& key, const std::string& where) const {
        const json& v = at(j, key, where);
        if (!v.is_boolean()) fail(where + key, "expected true or false");
        return v.get<bool>();
    }
    std::string optional_text(const json& j, const std::string& key) const {
        return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : "";
    }

    ErrorMetrics metrics(const json& j, const std::string& where) const {
        ErrorMetrics m;
        m.max_ulp = number(j, "max_ulp", where);
        m.max_rel = number(j, "max_rel", where);
        m.rel_l2 = number(j, "rel_l2", where);
        m.cosine = number(j, "cosine", where);
        m.sqnr_db = number(j, "sqnr_db", where);
        m.utilization = number(j, "utilization", where);
        m.worst = integer(j, "worst_index", where);
        m.class_mismatch = boolean(j, "class_mismatch", where);
        m.not_judged = integer(j, "not_judged", where);
        return m;
    }

    PointReport point(const json& j, const std::string& where) const {
        PointReport p;
        p.point = text(j, "point", where);
        p.layer = integer(j, "layer", where);
        p.sublayer = text(j, "sublayer", where);
        const auto kind = step_kind_from_name(text(j, "kind", where));
        if (!kind) fail(where + "kind", "not a step kind");
        p.kind = *kind;
        p.required = boolean(j, "required", where);
        p.status = status(text(j, "status", where), where + "status");
        p.local = metrics(at(j, "local", where), where + "local.");
        p.propagated = metrics(at(j, "propagated", where), where + "propagated.");
        if (!at(j, "drift", where).is_null()) p.drift = number(j, "drift", where);
        for (const json& c : at(j, "conventions_tried", where)) p.conventions_tried.push_back(c.get<std::string>());
        if (const json& m = at(j, "convention_match", where); !m.is_null()) p.convention_match = m.get<std::string>();
        p.missing = optional_text(j, "missing");
        p.note = optional_text(j, "note");
        if (j.contains("logit_metrics")) {
            const json& l = j.at("logit_metrics");
            const std::string w = where + "logit_metrics.";
            p.logits = LogitMetrics{number(l, "top1_agreement", w), number(l, "topk_overlap", w), number(l, "kl", w),
                                    integer(l, "tokens", w), integer(l, "k", w)};
        }
        return p;
    }

    std::vector<PointReport> points(const json& j, const std::string& key) const {
        const json& a = at(j, key, "");
        if (!a.is_array()) fail(key, "expected an array");
        std::vector<PointReport> out;
        for (std::size_t i = 0; i < a.size(); ++i) out.push_back(point(a[i], key + "[" + std::to_string(i) + "]."));
        return out;
    }

    LayerRange range(const json& j, const std::string& where) const {
        return {integer(j, "first", where), integer(j, "end", where)};
    }

private:
    PointStatus status(const std::string& s, const std::string& field) const {
        for (PointStatus p : {PointStatus::pass, PointStatus::fail_local, PointStatus::fail_propagated,
                              PointStatus::not_checkable})
            if (s == name(p)) return p;
        fail(field, "\"" + s + "\" is not a point status");
    }

    std::string file_;
};

}  // namespace

DivergeReport report_from_json(const json& j, const std::string& file) {
    const ReportReader rd(file);
    if (rd.text(j, "schema", "") != kDivergeSchema)
        rd.fail("schema", "\"" + j.at("schema").get<std::string>() + "\" is not " + kDivergeSchema);
    DivergeReport r;
    try {
        r.contract = contract_from_json(rd.at(j, "contract", ""));
    } catch (const std::exception& e) {
        rd.fail("contract", e.what());
    }
    r.candidate = rd.text(j, "candidate", "");
    r.reference = rd.text(j, "reference", "");
    r.oracle_bound_ratio = rd.number(j, "oracle_bound_ratio", "");
    r.oracle_bound_worst = rd.text(j, "oracle_bound_worst", "");
    r.mpfr_cross_check = rd.text(j, "mpfr_cross_check", "");
    r.seconds = rd.number(j, "seconds", "");
    r.range = rd.range(rd.at(j, "layer_range", ""), "layer_range.");
    r.propagated_from = rd.text(j, "propagated_from", "");
    r.tokens_checked = j.contains("tokens_checked") ? rd.integer(j, "tokens_checked", "") : r.contract.tokens;
    r.tokens_propagated = j.contains("tokens_propagated") ? rd.integer(j, "tokens_propagated", "") : r.contract.tokens;
    r.points = rd.points(j, "points");
    r.first_failing = first_local_failure(r.points);
    if (j.contains("reference_points")) {
        r.reference_points = rd.points(j, "reference_points");
        r.reference_first_failing = first_local_failure(r.reference_points);
    }
    if (j.contains("parts")) {
        for (const json& p : j.at("parts")) r.parts.push_back(rd.range(p, "parts[]."));
        for (const json& m : rd.at(j, "missing", "")) r.missing.push_back(rd.range(m, "missing[]."));
    }
    return r;
}

DivergeReport merge_reports(std::vector<DivergeReport> parts, const std::vector<std::string>& files) {
    if (parts.empty()) throw std::invalid_argument("--merge: no reports given");
    std::vector<std::size_t> order(parts.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return parts[a].range.first < parts[b].range.first; });
    const DivergeReport& head = parts[order[0]];
    const json contract = to_json(head.contract);
    DivergeReport m;
    m.contract = head.contract, m.candidate = head.candidate, m.reference = head.reference;
    std::int64_t covered = 0;  // layers [0, covered) are accounted for
    for (std::size_t i : order) {
        DivergeReport& p = parts[i];
        const std::string& f = files.at(i);
        if (to_json(p.contract) != contract) throw std::invalid_argument(f + ": field \"contract\": differs from " + files[order[0]]);
        if (p.candidate != m.candidate || p.reference != m.reference)
            throw std::invalid_argument(f + ": fields \"candidate\", \"reference\": another analysis than " + files[order[0]] +
                                        " (" + p.candidate + " against " + p.reference + ")");
        if (!p.parts.empty()) throw std::invalid_argument(f + ": field \"parts\": already a merged report");
        if (p.range.first < covered)
            throw std::invalid_argument(f + ": field \"layer_range\": layers " + range_text(p.range) +
                                        " overlap the layers before " + std::to_string(covered) + " of another part");
        if (p.range.first > covered) m.missing.push_back({covered, p.range.first});
        covered = p.range.end;
        m.parts.push_back(p.range);
        std::move(p.points.begin(), p.points.end(), std::back_inserter(m.points));
        std::move(p.reference_points.begin(), p.reference_points.end(), std::back_inserter(m.reference_points));
        if (p.oracle_bound_ratio > m.oracle_bound_ratio)
            m.oracle_bound_ratio = p.oracle_bound_ratio, m.oracle_bound_worst = p.oracle_bound_worst;
        const std::string tag = "layers " + range_text(p.range) + ": ";
        m.mpfr_cross_check += (m.mpfr_cross_check.empty() ? "" : "; ") + tag + p.mpfr_cross_check;
        m.propagated_from += (m.propagated_from.empty() ? "" : "; ") + tag + p.propagated_from;
        m.seconds += p.seconds;
        m.tokens_checked = m.tokens_checked ? std::min(m.tokens_checked, p.tokens_checked) : p.tokens_checked;
        m.tokens_propagated = m.tokens_propagated ? std::min(m.tokens_propagated, p.tokens_propagated) : p.tokens_propagated;
    }
    if (covered < m.contract.layers) m.missing.push_back({covered, m.contract.layers});
    m.range = {0, m.contract.layers};  // the whole model; `missing` names what no part analysed
    m.first_failing = first_local_failure(m.points);
    m.reference_first_failing = first_local_failure(m.reference_points);
    return m;
}

}  // namespace conform::model
