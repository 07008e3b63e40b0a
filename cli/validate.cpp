// conform validate PATH...: third-party outputs stored as case files
// (docs/dumps.md) recomputed with the oracle and judged by the op's verdicts.
// Per case: verdict, max ULP, bound utilization, the worst element, and when
// it fails, which declared or alternative convention the data matches.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "cli/validate.hpp"
#include "io/case_file.hpp"
#include "model/layout.hpp"
#include "io/model_dump.hpp"
#include "numerics/conventions.hpp"
#include "properties/fixed.hpp"
#include "properties/verdict.hpp"
#include "reports/atomic_file.hpp"
#include "reports/writers.hpp"

namespace conform::cli {
namespace {

// Thrown for a case that is well-formed as a file but wrong for its op.
struct CaseError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The case judged: op, parameters, input views and the kernel that returns
// the stored outputs.
struct Judged {
    const OpSpec* op = nullptr;
    Params params;
    std::vector<TensorView> in;
    KernelInfo kernel;
    std::vector<Tensor> owned;  // inputs converted on reading (integer cu_seqlens); `in` views them
};

Params read_params(const io::Case& c, const OpSpec& op) {
    Params p;
    for (const auto& [key, value] : c.params.items()) {
        const bool known = std::any_of(op.params.begin(), op.params.end(), [&](const ParamSpec& s) { return s.name == key; });
        if (!known) throw CaseError(fmt::format("{}: conform.params: \"{}\" is not a parameter of {} (see conform ops)", c.source, key, op.name));
        if (!value.is_number() && !value.is_boolean())
            throw CaseError(fmt::format("{}: conform.params: \"{}\" must be a number", c.source, key));
        p.set(key, value.is_boolean() ? (value.get<bool>() ? 1.0 : 0.0) : value.get<double>());
    }
    return p;
}

TensorView numeric_view(const io::Case& c, const io::StoredTensor& t, const std::string& field) {
    if (!io::numerics_format(t.dtype))
        throw CaseError(fmt::format("{}: tensor \"{}\": dtype {} is not a floating-point format", c.source, field, io::dtype_name(t.dtype)));
    return t.view();
}

// An input that holds indices, not values: I32 is accepted (read exactly).
bool index_input(const std::string& name) { return name == "cu_seqlens"; }

// Inputs in op order; an optional input may be left out (an empty view
// holds its place when a later input is given).
std::vector<TensorView> read_inputs(const io::Case& c, const OpSpec& op, std::vector<Tensor>& owned) {
    for (const auto& [name, t] : c.inputs)
        if (std::find(op.inputs.begin(), op.inputs.end(), name) == op.inputs.end())
            throw CaseError(fmt::format("{}: tensor \"{}\" is not an input of {} (inputs: {})", c.source, name, op.name,
                                        fmt::join(op.inputs, ", ")));
    std::vector<TensorView> in;
    for (const std::string& name : op.inputs) {
        if (c.inputs.count(name) && index_input(name) && !io::numerics_format(c.inputs.at(name).dtype)) {
            const io::StoredTensor& t = c.inputs.at(name);
            owned.emplace_back(Format::fp64, t.shape);
            for (std::int64_t i = 0; i < t.numel(); ++i) owned.back().set_value(i, t.value(i));
            in.push_back(owned.back().view());
        } else if (c.inputs.count(name)) {
            in.push_back(numeric_view(c, c.inputs.at(name), name));
        } else if (optional_input(name)) {
            in.push_back(TensorView::contiguous(nullptr, Format::fp32, {0}));
        } else {
            throw CaseError(fmt::format("{}: tensor \"{}\" missing (inputs of {}: {})", c.source, name, op.name,
                                        fmt::join(op.inputs, ", ")));
        }
    }
    while (!in.empty() && in.back().numel() == 0 && optional_input(op.inputs[in.size() - 1])) in.pop_back();
    return in;
}

// The kernel whose outputs are the stored ones, checked against the shapes
// the op gives these inputs.
KernelInfo stored_kernel(const io::Case& c, const OpSpec& op, const Params& p, const std::vector<TensorView>& in,
                        const std::vector<std::string>& unwritten) {
    const auto shapes = output_shapes(op, in, p);
    KernelInfo k;
    k.name = "dump:" + (c.impl.empty() ? std::string("unnamed") : c.impl);
    k.op = op.name;
    k.variant = "dump";
    k.backend = "dump";
    k.in = in[0].format;
    k.acc = Format::fp32;  // docs/dumps.md: bounds assume FP32 accumulation
    std::vector<TensorView> outs;
    k.unwritten = unwritten;
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
        const std::string field = "out." + op.outputs[o];
        const bool declared_unwritten = std::find(unwritten.begin(), unwritten.end(), op.outputs[o]) != unwritten.end();
        if (declared_unwritten && !c.outputs.count(op.outputs[o])) {  // evaluated, never judged
            k.out_formats.push_back(k.in);
            outs.emplace_back();
            continue;
        }
        if (!c.outputs.count(op.outputs[o])) throw CaseError(fmt::format("{}: tensor \"{}\" missing", c.source, field));
        const TensorView v = numeric_view(c, c.outputs.at(op.outputs[o]), field);
        const std::vector<std::int64_t> got(v.shape.begin(), v.shape.begin() + v.rank);
        if (got != shapes[o])
            throw CaseError(fmt::format("{}: tensor \"{}\": shape [{}] but {} of these inputs has shape [{}]", c.source,
                                        field, fmt::join(got, ","), op.name, fmt::join(shapes[o], ",")));
        k.out_formats.push_back(v.format);
        outs.push_back(v);
    }
    k.out = k.out_formats[0];
    k.fn = [outs](const KernelCall& call) {
        for (std::size_t o = 0; o < outs.size(); ++o)
            if (outs[o].data)
                for (std::int64_t i = 0; i < outs[o].numel(); ++i) call.out[o].set_bits(i, outs[o].bits(i));
    };
    if (c.conventions) {
        if (!c.conventions->is_object()) throw CaseError(c.source + ": conform.conventions: expected a JSON object");
        for (const auto& [key, value] : c.conventions->items()) {
            if (!value.is_string()) throw CaseError(fmt::format("{}: conform.conventions: \"{}\" must be a string", c.source, key));
            k.conventions[key] = value.get<std::string>();
        }
        try {
            check_conventions(k.conventions, op.name);
        } catch (const std::invalid_argument& e) {
            throw CaseError(c.source + ": conform.conventions: " + e.what());
        }
    }
    return k;
}

// ---- alternative conventions ------------------------------------------------
// A failing case is judged again under each documented alternative; the
// first that passes is named.  Each returns false when it does not apply.
struct Alternative {
    const char* name;
    std::function<bool(Judged&, std::vector<Tensor>& scratch)> apply;
};

bool set_param(Judged& j, const char* key, double value) {
    if (j.params.get(key, -1) == value) return false;
    j.params.set(key, value);
    return true;
}

const std::vector<Alternative>& alternatives() {
    static const std::vector<Alternative> alts{
        {"RoPE pairing swapped (interleaved <-> half-split)",
         [](Judged& j, std::vector<Tensor>&) {
             return j.op->name == "rope" && set_param(j, "pairing", j.params.get("pairing", 0) == 0 ? 1 : 0);
         }},
        {"gate and up swapped",
         [](Judged& j, std::vector<Tensor>&) {
             if (j.op->kind != OpKind::gated) return false;
             std::swap(j.in[0], j.in[1]);
             return true;
         }},
        {"GELU variant swapped (erf <-> tanh)",
         [](Judged& j, std::vector<Tensor>&) {
             if (j.op->name != "gelu_erf" && j.op->name != "gelu_tanh") return false;
             j.op = find_op(j.op->name == "gelu_erf" ? "gelu_tanh" : "gelu_erf");
             j.kernel.op = j.op->name;
             return true;
         }},
        {"zero-centred RMSNorm weight toggled (w <-> 1 + w)",
         [](Judged& j, std::vector<Tensor>&) {
             return j.op->name == "rms_norm" && set_param(j, "zero_centered", j.params.get("zero_centered", 0) == 0 ? 1 : 0);
         }},
        {"attention softmax scale 1 (scale dropped)",
         [](Judged& j, std::vector<Tensor>&) { return j.op->name == "attention" && set_param(j, "scale", 1); }},
    };
    return alts;
}

std::string matching_alternative(const Judged& base) {
    // The declarable conventions first (numerics/conventions.hpp): a match
    // says what the case file should declare.
    for (const bool pairs : {false, true})
        for (const auto& [text, conventions] : pairs ? convention_pairs(base.op->name, base.kernel.conventions)
                                                     : convention_alternatives(base.op->name, base.kernel.conventions)) {
            Judged j = base;
            j.kernel.conventions = conventions;
            try {
                if (props::check_case(j.kernel, j.params, j.in).pass)
                    return pairs ? "conventions " + text + " (declare them in conform.conventions)"
                                 : "convention " + text + " (declare it in conform.conventions)";
            } catch (const std::exception&) {
            }
        }
    for (const Alternative& a : alternatives()) {
        Judged j = base;
        std::vector<Tensor> scratch;
        if (!a.apply(j, scratch)) continue;
        try {
            if (props::check_case(j.kernel, j.params, j.in).pass) return a.name;
        } catch (const std::exception&) {
            // an alternative that does not fit these inputs does not match
        }
    }
    return "";
}

// ---- fixed-data properties ---------------------------------------------------

// Each of the op's fixed-data properties on the stored outputs; a violation
// fails the case even when every element is within budget.
void run_fixed_properties(const Judged& j, CaseVerdict& v) {
    props::Case c;
    c.op = j.op, c.params = j.params;
    for (const TensorView& t : j.in) c.inputs.push_back(model::copy_tensor(t));
    for (const props::FixedProperty* p : props::fixed_properties_for(*j.op)) {
        v.properties.emplace_back(p->name, p->check(j.kernel, c));
        if (v.properties.back().second.empty() || v.status == "FAIL") continue;
        v.status = "FAIL";
        v.message = "property " + p->name + " (" + p->doc + "): " + v.properties.back().second;
    }
}

// ---- one case -----------------------------------------------------------------

// A model dump is no case: named on the command line it is an error (exit 2),
// found by a directory scan it is skipped with this note.
std::string model_dump_note(const std::filesystem::path& path) {
    return path.string() + " is a model dump (" + io::kModelFormat + "): use conform diverge";
}

// The case's declared profile, else the command line's; a CaseError naming
// conform.profile when it does not parse.
std::string case_profile(const io::Case& c, const std::string& fallback) {
    const std::string p = c.profile.empty() ? fallback : c.profile;
    try {
        return props::parse_profile(p).text();
    } catch (const std::invalid_argument& e) {
        throw CaseError(c.source + ": " + (c.profile.empty() ? "--profile" : "conform.profile") + ": " + e.what());
    }
}

report::ErrorStats::Region region_of_stats(const props::Stats& s, std::size_t r) {
    return {props::name(static_cast<props::Region>(r)), s.region_elements()[r], s.region_beyond_strict()[r],
            s.region_max_ulp()[r]};
}

}  // namespace

CaseVerdict judge_case(const std::filesystem::path& path, const std::string& default_profile,
                       const std::vector<std::string>& unwritten) {
    CaseVerdict v;
    v.path = path.string();
    if (io::is_model_dump(path)) {
        v.status = "ERROR", v.message = model_dump_note(path);
        return v;
    }
    try {
        const io::Case c = io::read_case(path);
        v.op = c.op, v.impl = c.impl;
        if (c.outputs.empty()) {  // written by conform cases and never filled
            v.status = "NOT RUN";
            v.message = c.source + ": no outputs (out.*): the case was never run (python/conform_cases.py fill)";
            return v;
        }
        Judged j;
        j.op = find_op(c.op);
        if (!j.op) throw CaseError(fmt::format("{}: conform.op: unknown op \"{}\" (see conform ops)", c.source, c.op));
        j.params = read_params(c, *j.op);
        j.owned.reserve(j.op->inputs.size());  // views into owned stay valid
        j.in = read_inputs(c, *j.op, j.owned);
        j.kernel = stored_kernel(c, *j.op, j.params, j.in, unwritten);
        j.kernel.profile = v.profile = case_profile(c, default_profile);
        props::Stats stats;
        props::CaseResult r;
        try {
            r = props::check_case(j.kernel, j.params, j.in, &stats);
        } catch (const std::invalid_argument& e) {  // shapes the op rejects
            throw CaseError(c.source + ": " + e.what());
        }
        // No element judged (every bound vacuous) is no pass.
        v.status = !r.pass ? "FAIL" : r.judged == 0 ? "NOT JUDGED" : "PASS";
        v.message = r.message;
        v.not_judged = stats.not_judged();
        v.tightest = props::tightest_profile(stats);
        report::ErrorStats es;
        for (std::size_t g = 0; g < props::kRegions; ++g) es.regions.push_back(region_of_stats(stats, g));
        es.not_judged_reasons = stats.not_judged_reasons();
        v.concentration = report::detail::error_concentration(es);
        if (v.not_judged) v.message += (v.message.empty() ? "" : "; ") + std::string("not judged: ") + report::detail::not_judged_text(es);
        v.elements = stats.elements();
        v.max_ulp = stats.max_ulp();
        v.has_util = stats.has_util();
        v.max_util = stats.max_util();
        v.worst = v.has_util ? stats.worst_util_case() : stats.worst_ulp_case();
        if (!r.pass) v.matches = matching_alternative(j);
        run_fixed_properties(j, v);
    } catch (const io::FormatError& e) {
        v.status = "ERROR", v.message = e.what();
    } catch (const CaseError& e) {
        v.status = "ERROR", v.message = e.what();
    }
    return v;
}

// ---- output -------------------------------------------------------------------

namespace {

nlohmann::json properties_json(const CaseVerdict& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& [name, violation] : v.properties)
        a.push_back({{"name", name}, {"passed", violation.empty()}, {"message", violation}});
    return a;
}

std::string properties_cell(const CaseVerdict& v) {
    std::vector<std::string> cells;
    for (const auto& [name, violation] : v.properties) cells.push_back(name + (violation.empty() ? " PASS" : " FAIL"));
    return cells.empty() ? "-" : fmt::format("{}", fmt::join(cells, ", "));
}

}  // namespace

nlohmann::json to_json(const std::vector<CaseVerdict>& vs) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& v : vs)
        a.push_back({{"path", v.path}, {"op", v.op}, {"impl", v.impl}, {"status", v.status}, {"message", v.message},
                     {"elements", v.elements}, {"max_ulp", v.max_ulp}, {"has_bound", v.has_util},
                     {"max_util", std::isfinite(v.max_util) ? nlohmann::json(v.max_util) : nlohmann::json("inf")},
                     {"worst", v.worst}, {"matches_alternative", v.matches}, {"properties", properties_json(v)},
                     {"profile", v.profile}, {"tightest_profile", v.tightest}, {"not_judged", v.not_judged},
                     {"beyond_strict", v.concentration}});
    for (std::size_t i = 0; i < vs.size(); ++i)
        if (!vs[i].property.empty()) a[i]["property"] = vs[i].property;
    return {{"schema", "conform.validate/1"}, {"cases", a}};
}

std::string to_markdown(const std::vector<CaseVerdict>& vs) {
    std::string s = "# conform validate\n\n| case | op | impl | verdict | profile | tightest profile met | max ULP | "
                    "max util | worst element | beyond strict | matches | properties | message |\n"
                    "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& v : vs)
        s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", table_cell(v.path), v.op,
                         table_cell(v.impl), v.status, v.profile.empty() ? "-" : v.profile,
                         v.tightest.empty() ? "-" : v.tightest, v.max_ulp,
                         v.has_util ? fmt::format("{:.3g}", v.max_util) : "-", table_cell(v.worst),
                         table_cell(v.concentration.empty() ? "-" : v.concentration), table_cell(v.matches),
                         properties_cell(v), table_cell(v.message));
    return s;
}

namespace {

// The cases under `ps`, without the model dumps a directory scan found (each noted).
std::vector<std::filesystem::path> cases_under(const std::vector<std::filesystem::path>& ps) {
    std::vector<std::filesystem::path> cases;
    int dumps = 0;
    for (const auto& path : io::find_cases(ps)) {
        const bool named = std::find(ps.begin(), ps.end(), path) != ps.end();
        if (!named && io::is_model_dump(path)) {
            std::cout << "skipped: " << model_dump_note(path) << "\n";
            ++dumps;
        } else {
            cases.push_back(path);
        }
    }
    if (cases.empty())
        throw UsageError(std::string("no case files (*.safetensors or directories with case.json) under the given paths") +
                         (dumps ? " (only model dumps: use conform diverge)" : ""));
    return cases;
}

}  // namespace

std::string verdict_line(const CaseVerdict& v, std::size_t i, std::size_t n) {
    const std::string measure = v.has_util ? fmt::format("max util {:.3g}", v.max_util) : fmt::format("max ulp {}", v.max_ulp);
    const bool plain = v.status == "PASS" || v.status == "FAIL";
    return fmt::format("[{}/{}] {} {} {}{}", i + 1, n, v.status, v.path,
                       !plain ? v.message
                              : fmt::format("({}; profile {}, tightest met {})", measure, v.profile,
                                            v.tightest.empty() ? "-" : v.tightest),
                       v.matches.empty() ? "" : "; matches " + v.matches);
}

void VerdictTally::add(const CaseVerdict& v) {
    ++cases;
    errors += v.status == "ERROR", failures += v.status == "FAIL", unjudged += v.status == "NOT JUDGED",
        not_run += v.status == "NOT RUN";
}

std::string VerdictTally::summary() const {
    return fmt::format("{} cases: {} pass, {} fail, {} not judged (every bound vacuous), {}{} errors (could not be "
                       "read or checked)",
                       cases, cases - failures - errors - unjudged - not_run, failures, unjudged,
                       not_run ? fmt::format("{} not run (no outputs), ", not_run) : "", errors);
}

int VerdictTally::exit_status() const { return errors ? 2 : failures || unjudged || not_run ? 1 : 0; }

void write_verdicts(const std::string& out, const std::vector<CaseVerdict>& vs) {
    if (out.empty()) return;
    std::filesystem::create_directories(out);
    report::write_file_atomic(std::filesystem::path(out) / "validate.md", to_markdown(vs));
    report::write_file_atomic(std::filesystem::path(out) / "validate.json", to_json(vs).dump(2) + "\n");
}

int cmd_validate(const std::vector<std::string>& paths, const std::string& out, const std::string& profile) {
    if (!profile.empty()) (void)with_profile({}, profile);  // a bad --profile is a usage error before any case
    if (paths.size() == 1 && std::filesystem::is_regular_file(std::filesystem::path(paths[0]) / "manifest.json"))
        return validate_case_set(paths[0], out, profile);
    std::vector<std::filesystem::path> cases;
    try {
        cases = cases_under({paths.begin(), paths.end()});
    } catch (const io::FormatError& e) {
        std::cerr << "conform: " << e.what() << "\n";
        return 2;
    }
    std::vector<CaseVerdict> vs;
    VerdictTally tally;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        vs.push_back(judge_case(cases[i], profile));
        tally.add(vs.back());
        std::cout << verdict_line(vs.back(), i, cases.size()) << "\n";
        write_verdicts(out, vs);  // after every case: an interrupted run keeps what it judged
    }
    std::cout << tally.summary() << "\n";
    return tally.exit_status();
}

}  // namespace conform::cli
