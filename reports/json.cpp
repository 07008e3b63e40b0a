// JSON writer and reader for the report (schema report::kSchema, field by
// field in docs/reports.md).
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "reports/writers.hpp"

namespace conform::report {
namespace {

using nlohmann::json;

// Non-finite doubles are written as the strings "inf", "-inf", "nan"
// (JSON has no representation for them; nlohmann would write null).
json real(double v) { return std::isfinite(v) ? json(v) : json(detail::number(v)); }

json reals(const std::vector<double>& vs) {
    json a = json::array();
    for (double v : vs) a.push_back(real(v));
    return a;
}

json stats_json(const ErrorStats& s) {
    json regions = json::array();
    for (const auto& r : s.regions)
        regions.push_back({{"name", r.name}, {"elements", r.elements}, {"beyond_strict", r.beyond_strict}, {"max_ulp", r.max_ulp}});
    return {{"elements", s.elements},          {"max_ulp", s.max_ulp},
            {"worst_ulp_case", s.worst_ulp_case}, {"ulp_hist", s.ulp_hist},
            {"has_bound", s.has_bound},        {"max_util", real(s.max_util)},
            {"worst_util_case", s.worst_util_case}, {"util_quantiles", reals(s.util_quantiles)},
            {"util_hist", s.util_hist},
            {"max_util_rigorous", real(s.max_util_rigorous)},
            {"util_quantiles_rigorous", reals(s.util_quantiles_rigorous)},
            {"not_judged", s.not_judged},      {"not_judged_reasons", s.not_judged_reasons}, {"notes", s.notes},
            {"profile", s.profile},            {"tightest_profile", s.tightest_profile},
            {"characterized", s.characterized},
            {"regions", regions}};
}

json property_json(const PropertyOutcome& p) {
    return {{"name", p.name},       {"passed", p.passed},
            {"cases", p.cases},     {"message", p.message},
            {"counterexample", p.counterexample}, {"reproduce", p.reproduce},
            {"seconds", real(p.seconds)}, {"worst_metric", p.worst_metric},
            {"worst_value", real(p.worst_value)}, {"worst_case", p.worst_case},
            {"worst_reproduce", p.worst_reproduce}};
}

json curve_json(const Curve& c) {
    json pts = json::array();
    for (const auto& p : c.points) {
        json pt{{"x", real(p.x)}, {"error", real(p.error)}, {"budget", real(p.budget)}};
        if (!c.peer_label.empty()) pt["peer"] = real(p.peer);
        pts.push_back(pt);
    }
    json out{{"name", c.name}, {"x_label", c.x_label}, {"y_label", c.y_label}, {"passed", c.passed}, {"points", pts}};
    if (!c.peer_label.empty()) out["peer_label"] = c.peer_label;  // added after the schema's first release (optional)
    return out;
}

json kernel_json(const KernelReport& k) {
    json props = json::array(), curves = json::array();
    for (const auto& p : k.properties) props.push_back(property_json(p));
    for (const auto& c : k.curves) curves.push_back(curve_json(c));
    return {{"kernel", k.kernel},         {"op", k.op},
            {"family", k.family},         {"variant", k.variant},
            {"backend", k.backend},       {"role", k.role},
            {"in_format", k.in_format},   {"out_format", k.out_format},
            {"acc_format", k.acc_format}, {"budget", k.budget},
            {"passed", k.passed},         {"stats", stats_json(k.stats)},
            {"properties", props},        {"curves", curves},
            {"seconds", real(k.seconds)}, {"conventions", k.conventions},
            {"conventions_tried", k.conventions_tried}, {"convention_match", k.convention_match},
            {"domain", k.domain},         {"unwritten", k.unwritten}};
}

json exhaustive_json(const ExhaustiveResult& e) {
    return {{"kernel", e.kernel},   {"op", e.op},
            {"format", e.format},   {"inputs", e.inputs},
            {"max_ulp", e.max_ulp}, {"worst_input", e.worst_input},
            {"class_mismatches", e.class_mismatches}, {"budget_ulp", e.budget_ulp},
            {"passed", e.passed},   {"seconds", real(e.seconds)}};
}

json mutant_json(const MutantResult& m) {
    return {{"kernel", m.kernel}, {"op", m.op}, {"bug_class", m.bug_class},
            {"description", m.description}, {"killed", m.killed}, {"killed_by", m.killed_by}};
}

json not_provided_json(const NotProvided& n) {
    return {{"kernel", n.kernel}, {"op", n.op}, {"format", n.format}, {"backend", n.backend}, {"reason", n.reason}};
}

json summary_json(const Summary& s) {
    return {{"kernels_checked", s.kernels_checked},
            {"kernels_failed", s.kernels_failed},
            {"baselines", s.baselines},
            {"mutants_killed", s.mutants_killed},
            {"mutants_total", s.mutants_total},
            {"exhaustive_passed", s.exhaustive_passed},
            {"exhaustive_total", s.exhaustive_total},
            {"not_provided", s.not_provided},
            {"passed", s.passed},
            {"complete", s.complete}};
}

template <class T, class F>
json array_of(const std::vector<T>& xs, F f) {
    json a = json::array();
    for (const auto& x : xs) a.push_back(f(x));
    return a;
}

// ---- reading ---------------------------------------------------------------

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error(fmt::format("{}: {}", path.empty() ? "(root)" : path, what));
}

void read_value(const json& v, const std::string& path, std::string& out);
void read_value(const json& v, const std::string& path, bool& out);
void read_value(const json& v, const std::string& path, std::int64_t& out);
void read_value(const json& v, const std::string& path, std::uint64_t& out);
void read_value(const json& v, const std::string& path, int& out);
void read_value(const json& v, const std::string& path, double& out);
void read_value(const json& v, const std::string& path, std::map<std::string, std::string>& out);
void read_value(const json& v, const std::string& path, std::map<std::string, std::int64_t>& out);
void read_value(const json& v, const std::string& path, ErrorStats::Region& out);
void read_value(const json& v, const std::string& path, ErrorStats& out);
void read_value(const json& v, const std::string& path, PropertyOutcome& out);
void read_value(const json& v, const std::string& path, KernelReport& out);
void read_value(const json& v, const std::string& path, CurvePoint& out);
void read_value(const json& v, const std::string& path, Curve& out);
void read_value(const json& v, const std::string& path, ExhaustiveResult& out);
void read_value(const json& v, const std::string& path, MutantResult& out);
void read_value(const json& v, const std::string& path, NotProvided& out);

template <class T>
void read_value(const json& v, const std::string& path, std::vector<T>& out) {
    if (!v.is_array()) fail(path, "expected array");
    out.assign(v.size(), T{});
    for (std::size_t i = 0; i < v.size(); ++i) read_value(v[i], fmt::format("{}[{}]", path, i), out[i]);
}

// A JSON object at a path; fields are read by name with their full path.
class Obj {
public:
    Obj(const json& j, const std::string& path) : j_(j), path_(path) {
        if (!j.is_object()) fail(path, "expected object");
    }
    template <class T>
    void operator()(const char* key, T& out) const {
        std::string path = path_.empty() ? key : fmt::format("{}.{}", path_, key);
        auto it = j_.find(key);
        if (it == j_.end()) fail(path, "missing");
        read_value(*it, path, out);
    }
    // A field added after the schema's first release: absent in older reports.
    template <class T>
    void optional(const char* key, T& out) const {
        if (j_.contains(key)) (*this)(key, out);
    }

private:
    const json& j_;
    const std::string& path_;
};

void read_value(const json& v, const std::string& path, std::string& out) {
    if (!v.is_string()) fail(path, "expected string");
    out = v.get<std::string>();
}

void read_value(const json& v, const std::string& path, bool& out) {
    if (!v.is_boolean()) fail(path, "expected boolean");
    out = v.get<bool>();
}

void read_value(const json& v, const std::string& path, std::int64_t& out) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(INT64_MAX))
        fail(path, "integer out of range");
    if (!v.is_number_integer()) fail(path, "expected integer");
    out = v.get<std::int64_t>();
}

void read_value(const json& v, const std::string& path, std::uint64_t& out) {
    bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
    if (!ok) fail(path, "expected unsigned integer");
    out = v.get<std::uint64_t>();
}

void read_value(const json& v, const std::string& path, int& out) {
    std::int64_t wide = 0;
    read_value(v, path, wide);
    if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max())
        fail(path, "integer out of range");
    out = static_cast<int>(wide);
}

void read_value(const json& v, const std::string& path, double& out) {
    if (v.is_number()) {
        out = v.get<double>();
        return;
    }
    std::string s = v.is_string() ? v.get<std::string>() : "";
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (s == "inf") out = inf;
    else if (s == "-inf") out = -inf;
    else if (s == "nan") out = std::numeric_limits<double>::quiet_NaN();
    else fail(path, "expected number");
}

void read_value(const json& v, const std::string& path, std::map<std::string, std::string>& out) {
    if (!v.is_object()) fail(path, "expected object");
    out.clear();
    for (const auto& [key, value] : v.items()) read_value(value, fmt::format("{}.{}", path, key), out[key]);
}

void read_value(const json& v, const std::string& path, std::map<std::string, std::int64_t>& out) {
    if (!v.is_object()) fail(path, "expected object");
    out.clear();
    for (const auto& [key, value] : v.items()) read_value(value, fmt::format("{}.{}", path, key), out[key]);
}

void read_value(const json& v, const std::string& path, ErrorStats& s) {
    Obj o(v, path);
    o("elements", s.elements), o("max_ulp", s.max_ulp), o("worst_ulp_case", s.worst_ulp_case);
    o("ulp_hist", s.ulp_hist), o("has_bound", s.has_bound), o("max_util", s.max_util);
    o("worst_util_case", s.worst_util_case), o("util_quantiles", s.util_quantiles);
    o("util_hist", s.util_hist);
    o.optional("max_util_rigorous", s.max_util_rigorous), o.optional("util_quantiles_rigorous", s.util_quantiles_rigorous);
    o.optional("not_judged", s.not_judged), o.optional("not_judged_reasons", s.not_judged_reasons);
    o.optional("notes", s.notes);
    o.optional("profile", s.profile), o.optional("tightest_profile", s.tightest_profile);
    o.optional("characterized", s.characterized);
    o.optional("regions", s.regions);
}

void read_value(const json& v, const std::string& path, ErrorStats::Region& r) {
    Obj o(v, path);
    o("name", r.name), o("elements", r.elements), o("beyond_strict", r.beyond_strict), o("max_ulp", r.max_ulp);
}

void read_value(const json& v, const std::string& path, PropertyOutcome& p) {
    Obj o(v, path);
    o("name", p.name), o("passed", p.passed), o("cases", p.cases), o("message", p.message);
    o("counterexample", p.counterexample), o("reproduce", p.reproduce), o("seconds", p.seconds);
    o.optional("worst_metric", p.worst_metric), o.optional("worst_value", p.worst_value);
    o.optional("worst_case", p.worst_case), o.optional("worst_reproduce", p.worst_reproduce);
}

void read_value(const json& v, const std::string& path, CurvePoint& p) {
    Obj o(v, path);
    o("x", p.x), o("error", p.error), o("budget", p.budget), o.optional("peer", p.peer);
}

void read_value(const json& v, const std::string& path, Curve& c) {
    Obj o(v, path);
    o("name", c.name), o("x_label", c.x_label), o("y_label", c.y_label), o("passed", c.passed);
    o("points", c.points), o.optional("peer_label", c.peer_label);
}

void read_value(const json& v, const std::string& path, KernelReport& k) {
    Obj o(v, path);
    o("kernel", k.kernel), o("op", k.op), o("family", k.family), o("variant", k.variant);
    o("backend", k.backend), o("role", k.role), o("in_format", k.in_format);
    o("out_format", k.out_format), o("acc_format", k.acc_format), o("budget", k.budget);
    o("passed", k.passed), o("stats", k.stats), o("properties", k.properties);
    o.optional("curves", k.curves), o("seconds", k.seconds);
    o.optional("conventions", k.conventions), o.optional("conventions_tried", k.conventions_tried);
    o.optional("convention_match", k.convention_match), o.optional("domain", k.domain);
    o.optional("unwritten", k.unwritten);
}

void read_value(const json& v, const std::string& path, ExhaustiveResult& e) {
    Obj o(v, path);
    o("kernel", e.kernel), o("op", e.op), o("format", e.format), o("inputs", e.inputs);
    o("max_ulp", e.max_ulp), o("worst_input", e.worst_input);
    o("class_mismatches", e.class_mismatches), o("budget_ulp", e.budget_ulp);
    o("passed", e.passed), o("seconds", e.seconds);
}

void read_value(const json& v, const std::string& path, MutantResult& m) {
    Obj o(v, path);
    o("kernel", m.kernel), o("op", m.op), o("bug_class", m.bug_class);
    o("description", m.description), o("killed", m.killed), o("killed_by", m.killed_by);
}

void read_value(const json& v, const std::string& path, NotProvided& n) {
    Obj o(v, path);
    o("kernel", n.kernel), o("op", n.op), o("format", n.format), o("backend", n.backend), o("reason", n.reason);
}

}  // namespace

nlohmann::json to_json(const RunReport& r) {
    return {{"schema", r.schema},
            {"tool_version", r.tool_version},
            {"started", r.started},
            {"finished", r.finished},
            {"seed", r.seed},
            {"cases", r.cases},
            {"machine", r.machine},
            {"selection", r.selection},
            {"complete", r.complete},
            {"summary", summary_json(summarize(r))},
            {"kernels", array_of(r.kernels, kernel_json)},
            {"exhaustive", array_of(r.exhaustive, exhaustive_json)},
            {"mutants", array_of(r.mutants, mutant_json)},
            {"not_provided", array_of(r.not_provided, not_provided_json)}};
}

RunReport from_json(const nlohmann::json& j) {
    RunReport r;
    const std::string root;
    Obj o(j, root);
    o("schema", r.schema);
    if (r.schema != kSchema)
        fail("schema", fmt::format("unsupported schema '{}' (this reader understands '{}')", r.schema, kSchema));
    o("tool_version", r.tool_version), o("started", r.started), o("finished", r.finished);
    o("seed", r.seed), o("cases", r.cases), o("machine", r.machine);
    o("selection", r.selection), o("complete", r.complete);
    o("kernels", r.kernels), o("exhaustive", r.exhaustive), o("mutants", r.mutants);
    o.optional("not_provided", r.not_provided);
    return r;
}

nlohmann::json to_json(const KernelReport& k) { return kernel_json(k); }
nlohmann::json to_json(const PropertyOutcome& p) { return property_json(p); }

KernelReport kernel_from_json(const nlohmann::json& j, const std::string& path) {
    KernelReport k;
    read_value(j, path, k);
    return k;
}

PropertyOutcome property_from_json(const nlohmann::json& j, const std::string& path) {
    PropertyOutcome p;
    read_value(j, path, p);
    return p;
}

std::string to_json_text(const RunReport& r) {
    return to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace conform::report
