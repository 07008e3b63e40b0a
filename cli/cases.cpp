// conform cases: the inputs the property suite would give a kernel, written
// as case files without outputs, with DIR/manifest.json naming each case,
// its property and the groups that a relation ties together; and the other
// half, conform validate on such a directory once a third party filled it
// (docs/cases.md).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "cli/validate.hpp"
#include "io/case_file.hpp"
#include "numerics/conventions.hpp"
#include "properties/cases.hpp"
#include "properties/domain.hpp"
#include "properties/statistics.hpp"
#include "reports/atomic_file.hpp"
#include "reports/writers.hpp"

namespace conform::cli {
namespace {

constexpr const char* kCaseSetFormat = "conform.cases/1";

// The built-in kernel whose formats a case set takes: role kernel, op `op`,
// input format `dtype` (else the output format, for int8_gemm whose inputs
// are int8), the simd variant first.
const KernelInfo* template_kernel(const std::string& op, const std::string& dtype) {
    const KernelInfo* best = nullptr;
    for (int pass = 0; pass < 2 && !best; ++pass)
        for (const KernelInfo& k : builtin_registry().all()) {
            if (k.role != Role::kernel || k.op != op || k.backend != "cpu") continue;
            if (name(pass == 0 ? k.in : k.out) != dtype) continue;
            if (!best || (k.variant == "simd" && best->variant != "simd")) best = &k;
        }
    return best;
}

std::string case_name(std::size_t i) { return fmt::format("c{:05d}", i + 1); }

std::vector<std::string> formats_of(const KernelInfo& k, std::size_t outputs) {
    std::vector<std::string> v;
    for (std::size_t o = 0; o < outputs; ++o) v.push_back(name(output_format(k, o)));
    return v;
}

io::Case stored_case(const OpSpec& op, const props::CallCase& c, const Conventions& conventions) {
    io::Case s;
    s.op = op.name;
    for (const auto& [key, value] : c.params.values()) s.params[key] = value;
    s.impl = "";
    if (!conventions.empty()) s.conventions = nlohmann::json(conventions);
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
        if (c.present[i]) s.inputs[op.inputs[i]] = io::StoredTensor::from_tensor(c.inputs[i]);
    return s;
}

struct CasesOptions {
    std::string op, dtype, out = "conform-cases";
    int cases = 100;
    std::uint64_t seed = 1;
    std::vector<std::string> conventions;
    std::string domain;  // JSON: the inputs the kernel supports (docs/plugins.md, "Domains")
};

// A declared domain, or a UsageError naming `what` and the key.
Domain case_set_domain(const std::string& json, const std::string& op, const std::string& what) {
    try {
        return parse_domain(json, op);
    } catch (const std::invalid_argument& e) {
        throw UsageError(what + ": " + e.what());
    }
}

int cmd_cases(const CasesOptions& o) {
    const OpSpec* op = find_op(o.op);
    if (!op) throw UsageError("unknown op '" + o.op + "' (conform ops lists them)");
    const KernelInfo* base = template_kernel(o.op, o.dtype);
    if (!base) {
        std::vector<std::string> formats;
        for (const KernelInfo& k : builtin_registry().all())
            if (k.role == Role::kernel && k.op == o.op && k.backend == "cpu") formats.push_back(name(k.in));
        std::sort(formats.begin(), formats.end());
        formats.erase(std::unique(formats.begin(), formats.end()), formats.end());
        throw UsageError(fmt::format("--dtype {}: op {} has no built-in kernel of that format (formats: {})", o.dtype,
                                     o.op, fmt::join(formats, ", ")));
    }
    KernelInfo described = *base;
    described.name = "cases." + o.op + "." + o.dtype;
    described.backend = "cases";
    described.variant = "cases";
    described.description = "the kernel a case set stands for";
    described.conventions = parse_key_values(o.conventions);
    try {
        check_conventions(described.conventions, o.op);
    } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("--convention: ") + e.what());
    }
    described.domain = o.domain;
    const Domain domain = case_set_domain(o.domain, o.op, "--domain");
    const props::DomainScope domain_scope(domain);  // every generated case inside what the kernel supports
    auto book = std::make_shared<props::CaseBook>(*op);
    const KernelInfo recorder = props::recording_kernel(described, book);
    props::RunConfig cfg;
    cfg.seed = o.seed;
    cfg.cases = o.cases;
    cfg.shrink = false;
    cfg.infer_conventions = false;

    const props::Coverage coverage = props::coverage_for(recorder);
    nlohmann::json properties = nlohmann::json::array(), not_covered = nlohmann::json::array(),
                   groups = nlohmann::json::array();
    for (const auto& [pname, reason] : coverage.not_covered) not_covered.push_back({{"name", pname}, {"reason", reason}});
    for (const props::PropertyDef* p : coverage.run) {
        progress("recording " + p->name + " ...");
        book->set_mode(props::CaseBook::Mode::record);
        {
            // One call a case whose inputs no verdict steers (validate
            // replays the property, so a case within_budget discards, every
            // element not judged, must be discarded here too: only an
            // elementwise op under the 1-ulp budget judges every element):
            // judged by conform validate only.
            const bool ulp_only = (op->kind == OpKind::unary || op->kind == OpKind::gated) &&
                                  props::budget_for(described).arith.empty();
            const props::OracleSkipScope skip(p->name == "special_values" || (p->name == "within_budget" && ulp_only));
            (void)props::run_property(props::grouped_property(*p, book, true), recorder, cfg, nullptr);
        }
        std::vector<props::CaseGroup> gs = book->take_groups();
        const bool relation = std::any_of(gs.begin(), gs.end(), [](const props::CaseGroup& g) { return g.members.size() > 1; });
        if (relation) {
            // Again with every output perturbed: a property whose later inputs
            // derive from earlier outputs asks for other inputs then, and no
            // stored case could answer it for another kernel.
            book->set_mode(props::CaseBook::Mode::verify);
            book->clear_misses();
            (void)props::run_property(props::grouped_property(*p, book, true),
                                      props::recording_kernel(described, book, true), cfg, nullptr);
            (void)book->take_groups();
            if (book->misses() > 0) {
                not_covered.push_back({{"name", p->name},
                                       {"reason", "its later inputs depend on the kernel's earlier outputs, which a case "
                                                  "set cannot fix in advance"}});
                continue;
            }
        }
        if (gs.empty()) {
            not_covered.push_back({{"name", p->name}, {"reason", "generated no case that calls the kernel"}});
            continue;
        }
        properties.push_back({{"name", p->name}, {"doc", p->doc}, {"groups", gs.size()}, {"relation", relation}});
        for (const props::CaseGroup& g : gs) {
            nlohmann::json members = nlohmann::json::array();
            for (std::size_t m : g.members) members.push_back(case_name(m));
            groups.push_back({{"property", g.property}, {"members", members}});
        }
    }

    const std::filesystem::path dir(o.out);
    std::filesystem::create_directories(dir);
    nlohmann::json cases = nlohmann::json::array();
    for (std::size_t i = 0; i < book->cases().size(); ++i) {
        const props::CallCase& c = book->cases()[i];
        const std::string file = case_name(i) + ".safetensors";
        io::write_case_safetensors(stored_case(*op, c, described.conventions), dir / file);
        nlohmann::json outputs = nlohmann::json::object();
        for (std::size_t k = 0; k < op->outputs.size() && k < c.out_formats.size(); ++k)
            outputs[op->outputs[k]] = {{"dtype", name(c.out_formats[k])}, {"shape", c.out_shapes[k]}};
        cases.push_back({{"name", case_name(i)}, {"file", file}, {"property", c.property}, {"outputs", outputs}});
    }
    const nlohmann::json manifest = {
        {"format", kCaseSetFormat},
        {"op", o.op},
        {"dtype", o.dtype},
        {"seed", o.seed},
        {"cases_per_property", o.cases},
        {"kernel", {{"name", described.name}, {"in", name(described.in)}, {"acc", name(described.acc)},
                    {"outputs", formats_of(described, op->outputs.size())}, {"domain", o.domain}}},
        {"conventions", nlohmann::json(described.conventions)},
        {"properties", properties},
        {"not_covered", not_covered},
        {"cases", cases},
        {"groups", groups},
    };
    report::write_file_atomic(dir / "manifest.json", manifest.dump(1) + "\n");
    std::cout << fmt::format("{} cases of {} {} for {} properties ({} groups) in {}\n", cases.size(), o.op, o.dtype,
                             properties.size(), groups.size(), (dir / "manifest.json").string());
    for (const auto& n : not_covered) std::cout << "  not covered: " << n["name"].get<std::string>() << ": "
                                                << n["reason"].get<std::string>() << "\n";
    return 0;
}

// ---- validate ---------------------------------------------------------------------

// A manifest field, or a UsageError naming the file and the field.
template <class T>
T manifest_field(const nlohmann::json& j, const std::string& key, const std::string& where) {
    if (!j.is_object() || !j.contains(key)) throw UsageError(where + ": \"" + key + "\": missing");
    try {
        return j.at(key).get<T>();
    } catch (const nlohmann::json::exception&) {
        throw UsageError(where + ": \"" + key + "\": " + j.at(key).dump() + " has the wrong type");
    }
}

Format format_named(const std::string& n, const std::string& where) {
    if (const auto f = parse_format(n)) return *f;
    throw UsageError(where + ": unknown format \"" + n + "\"");
}

// A case of the set as the book holds it: its inputs from the file.
props::CallCase call_case(const OpSpec& op, const io::Case& c) {
    props::CallCase cc;
    Params p;
    for (const auto& [key, value] : c.params.items())
        if (value.is_number()) p.set(key, value.get<double>());
    cc.params = props::op_params(op, p);
    for (const std::string& in : op.inputs) {
        const bool present = c.inputs.count(in) > 0;
        cc.present.push_back(present);
        cc.inputs.push_back(present ? c.inputs.at(in).to_tensor() : Tensor(Format::fp32, {0}));
    }
    return cc;
}

// The replaying kernel's answer: the stored outputs of the case, which must
// have the shape and format the property asks for.
void answer_from(const io::Case& c, const OpSpec& op, const std::vector<std::string>& unwritten, const KernelCall& call) {
    for (std::size_t o = 0; o < call.out.size() && o < op.outputs.size(); ++o) {
        const std::string field = "out." + op.outputs[o];
        if (!c.outputs.count(op.outputs[o]) && std::find(unwritten.begin(), unwritten.end(), op.outputs[o]) != unwritten.end())
            continue;
        if (!c.outputs.count(op.outputs[o])) throw std::runtime_error(c.source + ": tensor \"" + field + "\" missing");
        const io::StoredTensor& t = c.outputs.at(op.outputs[o]);
        const TensorView v = t.view();
        const TensorView& want = call.out[o];
        const std::vector<std::int64_t> got(v.shape.begin(), v.shape.begin() + v.rank),
            shape(want.shape.begin(), want.shape.begin() + want.rank);
        if (got != shape)
            throw std::runtime_error(fmt::format("{}: tensor \"{}\": shape [{}], the kernel's output is [{}]", c.source,
                                                 field, fmt::join(got, ","), fmt::join(shape, ",")));
        if (v.format != want.format)
            throw std::runtime_error(fmt::format("{}: tensor \"{}\": dtype {}, the case set's output format is {}",
                                                 c.source, field, io::dtype_name(t.dtype), name(want.format)));
        for (std::int64_t i = 0; i < v.numel(); ++i) want.set_bits(i, v.bits(i));
    }
}

}  // namespace

int validate_case_set(const std::filesystem::path& dir, const std::string& out, const std::string& profile) {
    const std::filesystem::path manifest_path = dir / "manifest.json";
    const std::string where = manifest_path.string();
    nlohmann::json m;
    {
        std::ifstream f(manifest_path);
        m = nlohmann::json::parse(f, nullptr, false);
    }
    if (m.is_discarded() || !m.is_object()) throw UsageError(where + ": not a JSON object");
    if (manifest_field<std::string>(m, "format", where) != kCaseSetFormat)
        throw UsageError(where + ": \"format\": not " + kCaseSetFormat + ", the one case-set format this conform knows");
    const std::string op_name = manifest_field<std::string>(m, "op", where), dtype = manifest_field<std::string>(m, "dtype", where);
    const OpSpec* op = find_op(op_name);
    if (!op) throw UsageError(where + ": \"op\": unknown op \"" + op_name + "\"");
    const nlohmann::json kj = manifest_field<nlohmann::json>(m, "kernel", where);
    KernelInfo described;
    described.name = manifest_field<std::string>(kj, "name", where + ": kernel");
    described.op = op_name;
    described.variant = described.backend = "cases";
    described.in = format_named(manifest_field<std::string>(kj, "in", where + ": kernel"), where + ": kernel.in");
    described.acc = format_named(manifest_field<std::string>(kj, "acc", where + ": kernel"), where + ": kernel.acc");
    for (const auto& f : manifest_field<std::vector<std::string>>(kj, "outputs", where + ": kernel"))
        described.out_formats.push_back(format_named(f, where + ": kernel.outputs"));
    if (described.out_formats.size() != op->outputs.size())
        throw UsageError(where + ": kernel.outputs: " + std::to_string(described.out_formats.size()) + " formats for " +
                         std::to_string(op->outputs.size()) + " outputs of " + op_name);
    described.out = described.out_formats[0];
    described.domain = kj.value("domain", "");
    const Domain domain = case_set_domain(described.domain, op_name, where + ": kernel.domain");
    // Outputs the kernel does not compute (fill(..., unwritten=[...])): absent
    // from every case, evaluated, never judged; the properties that need them
    // are not run (as for a plug-in, docs/plugins.md).
    if (m.contains("unwritten")) {
        described.unwritten = manifest_field<std::vector<std::string>>(m, "unwritten", where);
        for (const std::string& u : described.unwritten) {
            const auto at = std::find(op->outputs.begin(), op->outputs.end(), u);
            if (at == op->outputs.end() || at == op->outputs.begin())
                throw UsageError(where + ": \"unwritten\": \"" + u + "\" is not an output of " + op_name +
                                 " other than the first (" + fmt::format("{}", fmt::join(op->outputs, ", ")) + ")");
        }
    }

    // Every case judged by itself (cli/validate.cpp), and read into the book.
    const auto entries = manifest_field<nlohmann::json>(m, "cases", where);
    if (!entries.is_array()) throw UsageError(where + ": \"cases\": not an array");
    auto book = std::make_shared<props::CaseBook>(*op);
    std::vector<std::optional<io::Case>> stored;
    std::map<std::string, std::size_t> by_name;
    std::vector<CaseVerdict> vs;
    VerdictTally tally;
    std::optional<nlohmann::json> conventions;
    std::string declared_profile;
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const std::string at = fmt::format("{}: cases[{}]", where, i);
        const std::string file = manifest_field<std::string>(entries[i], "file", at);
        if (file.empty() || file.find('/') != std::string::npos || file.find("..") != std::string::npos)
            throw UsageError(at + ": \"file\": \"" + file + "\" is not a plain file name in the case set");
        by_name[manifest_field<std::string>(entries[i], "name", at)] = i;
        CaseVerdict v = judge_case(dir / file, profile, described.unwritten);
        v.property = entries[i].value("property", "");
        try {
            io::Case c = io::read_case(dir / file);
            if (c.op != op_name) throw UsageError(c.source + ": conform.op: \"" + c.op + "\", the case set is of " + op_name);
            if (!c.outputs.empty()) {  // the declarations of a filled case; every filled case the same
                const nlohmann::json cj = c.conventions.value_or(nlohmann::json::object());
                if (conventions && *conventions != cj)
                    throw UsageError(c.source + ": conform.conventions: " + cj.dump() + " but other cases declare " +
                                     conventions->dump());
                if (!conventions) conventions = cj, declared_profile = c.profile;
            }
            book->add(call_case(*op, c));
            stored.emplace_back(std::move(c));
        } catch (const io::FormatError&) {
            book->add(props::CallCase{});  // judged above as ERROR; keeps the numbering
            stored.emplace_back(std::nullopt);
        }
        tally.add(v);
        vs.push_back(std::move(v));
        std::cout << verdict_line(vs.back(), i, entries.size()) << "\n";
        write_verdicts(out, vs);
    }
    std::cout << tally.summary() << "\n";

    // Every covered property replayed on the stored outputs: the suite's own
    // relations, messages and report.
    if (conventions)
        for (const auto& [key, value] : conventions->items())
            if (value.is_string()) described.conventions[key] = value.get<std::string>();
    described.profile = !declared_profile.empty() ? declared_profile : profile;
    std::map<std::string, std::vector<std::vector<std::size_t>>> groups_of;
    for (const auto& g : manifest_field<nlohmann::json>(m, "groups", where)) {
        std::vector<std::size_t> members;
        for (const auto& n : manifest_field<std::vector<std::string>>(g, "members", where + ": groups"))
            if (by_name.count(n)) members.push_back(by_name.at(n));
            else throw UsageError(where + ": groups: member \"" + n + "\" is no case of the set");
        groups_of[manifest_field<std::string>(g, "property", where + ": groups")].push_back(members);
    }
    const KernelInfo replay = props::replaying_kernel(described, book, [&](std::size_t i, const KernelCall& call) {
        if (!stored[i]) throw std::runtime_error((dir / entries[i]["file"].get<std::string>()).string() + ": unreadable");
        answer_from(*stored[i], *op, described.unwritten, call);
    });
    props::RunConfig cfg;
    cfg.seed = manifest_field<std::uint64_t>(m, "seed", where);
    cfg.cases = manifest_field<int>(m, "cases_per_property", where);
    cfg.shrink = false;
    cfg.infer_conventions = false;
    Selection sel;
    sel.ops = {op_name};
    sel.dtypes = {dtype};
    report::RunReport rep = new_report(cfg.seed, cfg.cases, sel);
    report::KernelReport kr = props::describe_kernel(replay);
    // A case whose every bound is vacuous is counted, not failed: conform run
    // draws another case in its place (within_budget's RC_PRE).
    kr.passed = tally.errors == 0 && tally.failures == 0 && tally.not_run == 0;
    props::Stats all, within;
    const props::DomainScope domain_scope(domain);
    for (const auto& pj : manifest_field<nlohmann::json>(m, "properties", where)) {
        const std::string pname = manifest_field<std::string>(pj, "name", where + ": properties");
        const auto defs = props::properties_for(*op);
        const auto it = std::find_if(defs.begin(), defs.end(), [&](const props::PropertyDef* d) { return d->name == pname; });
        if (it == defs.end()) throw UsageError(where + ": properties: \"" + pname + "\" is no property of " + op_name);
        if (!props::runs_for(**it, replay)) {
            std::cout << fmt::format("property {:<28} not run: it needs an output the kernel does not write ({})\n",
                                     pname, fmt::join((*it)->needs, ", "));
            continue;
        }
        report::PropertyOutcome o;
        std::vector<std::string> unfilled;
        for (const auto& members : groups_of[pname])
            for (std::size_t i : members)
                if (!stored[i] || stored[i]->outputs.empty()) unfilled.push_back(entries[i]["file"].get<std::string>());
        if (!unfilled.empty()) {
            std::sort(unfilled.begin(), unfilled.end());
            unfilled.erase(std::unique(unfilled.begin(), unfilled.end()), unfilled.end());
            o.name = pname;
            // A case of the property that failed on its own is a failure whatever
            // the others did; else the property is not run, never passed.
            std::optional<std::size_t> failing;
            for (const auto& members : groups_of[pname])
                for (std::size_t i : members)
                    if (!failing && vs[i].status == "FAIL") failing = i;
            if (failing)
                o.message = fmt::format("{}\ncases: {} ({} of the property's cases have no outputs: its relations were "
                                        "not checked)", vs[*failing].message,
                                        (dir / entries[*failing]["file"].get<std::string>()).string(), unfilled.size());
            else
                o.message = fmt::format("not run: {} of its cases have no outputs (first: {})", unfilled.size(),
                                        (dir / unfilled[0]).string());
        } else {
            book->set_mode(props::CaseBook::Mode::replay);
            book->clear_misses();
            props::Stats local;
            o = props::run_property(props::grouped_property(**it, book, false), replay, cfg, &local);
            if (!o.passed) {
                std::vector<std::string> files;
                if (const props::CaseGroup* g = book->last_group())
                    for (std::size_t i : g->members) files.push_back((dir / entries[i]["file"].get<std::string>()).string());
                if (o.message.find(props::kNotAmongTheCases) != std::string::npos) o.message = "not run: " + o.message;
                if (!files.empty()) o.message += fmt::format("\ncases: {}", fmt::join(files, ", "));
                o.reproduce.clear();  // a case set replays by itself, not by --reproduce
            }
            (void)book->take_groups();
            all.merge(local);
            if (pname == "within_budget") within.merge(local);
        }
        kr.passed = kr.passed && o.passed;
        kr.properties.push_back(o);
        std::cout << fmt::format("property {:<28} {}{}\n", o.name, o.passed ? "PASS" : "FAIL",
                                 o.passed ? "" : "\n    " + o.message);
    }
    if (within.elements() > 0) {
        report::PropertyOutcome bias;
        bias.name = "rounding_bias";
        bias.cases = within.votes_for()[0] + within.votes_against()[0];
        bias.message = props::rounding_bias(within, props::vote_unit(*op));
        bias.passed = bias.message.empty();
        kr.passed = kr.passed && bias.passed;
        kr.properties.push_back(bias);
    }
    props::fill_stats(kr.stats, all);
    rep.kernels.push_back(kr);
    rep.finished = now_iso8601();
    if (!out.empty()) report::write_report_dir(out, rep);
    std::cout << kernel_outcome_line(kr) << "\n";
    if (!out.empty()) std::cout << "report: " << out << "/report.md (also report.json, report.html, junit.xml); cases: "
                                << out << "/validate.md\n";
    return tally.errors ? 2 : kr.passed ? 0 : 1;
}

Subcommand add_cases(CLI::App& app) {
    auto o = std::make_shared<CasesOptions>();
    auto* cmd = app.add_subcommand("cases", "write the inputs the property suite would give a kernel of one op and "
                                            "format as case files without outputs, with manifest.json (docs/cases.md); "
                                            "conform validate DIR judges them once filled");
    cmd->add_option("--op", o->op, "the op (conform ops lists them)")->required();
    cmd->add_option("--dtype", o->dtype, "the format: fp32, fp16 or bf16 (the built-in kernels' formats)")->required();
    cmd->add_option("--cases", o->cases, "generated cases per property")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_option("--seed", o->seed, "RapidCheck seed (a number)")->capture_default_str();
    cmd->add_option("--out", o->out, "the case-set directory")->capture_default_str();
    cmd->add_option("--convention", o->conventions, "a convention KEY=VALUE the kernel will declare (repeatable)");
    cmd->add_option("--domain", o->domain, "the inputs the kernel supports, a JSON object of rules by dimension or "
                                           "parameter, e.g. '{\"causal\":[1],\"softcap\":[0]}' (docs/plugins.md, Domains)");
    return {cmd, [o] { return cmd_cases(*o); }};
}

}  // namespace conform::cli
