// conform diverge: divergence report by first failing layer (docs/diverge.md).
// Exit status: 0 no layer fails, 1 a layer fails locally, 2 bad input (an
// unreadable or malformed dump, a contract error, a weight or point whose
// shape the contract does not expect -- the message names the file and field)
// or, with --merge, reports that leave layers unanalysed.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/common.hpp"
#include "io/format_error.hpp"
#include "io/model_dump.hpp"
#include "model/diverge.hpp"
#include "model/diverge_report.hpp"
#include "reports/writers.hpp"

namespace conform::cli {
namespace {

struct DivergeArgs {
    std::string dump, reference, layers, out = "diverge-report";
    std::int64_t tokens = 0;
    std::vector<std::string> merge;
};

struct Loaded {
    model::ModelContract contract;
    model::ModelRun run;
};

Loaded load(const std::string& file) {
    progress("diverge: reading " + file);
    // Mapped, not read: a deep model's dump can exceed memory; the analysis
    // converts what it reads and drops it after use (docs/diverge.md, "Scale").
    io::MappedModelDump d = io::map_model_dump(file);  // FormatError names file and field
    Loaded l;
    try {
        l.contract = model::contract_from_json(d.contract);
    } catch (const std::exception& e) {
        throw UsageError(file + ": __metadata__ \"conform.contract\": " + e.what());
    }
    l.run.weights = std::move(d.weights);
    l.run.points = std::move(d.activations);
    l.run.input = std::move(d.input);
    l.run.source = file + (d.impl.empty() ? "" : " (" + d.impl + ")");
    return l;
}

// The analysis proper; its input errors (shapes, missing weights) name the dump.
model::DivergeReport analyse(const Loaded& cand, const Loaded* ref, const DivergeArgs& a) {
    model::DivergeOptions opt;
    opt.progress = progress;
    opt.tokens = a.tokens;
    const std::string& file = ref ? a.dump + " / " + a.reference : a.dump;
    if (!a.layers.empty()) try {
            opt.layers = model::parse_layer_range(a.layers, cand.contract.layers);
        } catch (const std::invalid_argument& e) {
            throw UsageError(a.dump + ": " + e.what());
        }
    try {
        return ref ? model::diverge(cand.contract, cand.run, ref->run, opt) : model::diverge(cand.contract, cand.run, opt);
    } catch (const std::invalid_argument& e) {
        throw UsageError(file + ": " + e.what());
    }
}

void print_summary(const model::DivergeReport& r, const std::string& out) {
    std::cout << "diverge: " << r.candidate << " against " << r.reference << ": " << model::diverge_headline(r) << "\n"
              << "first failing: " << model::first_failing_text(r) << "\n";
    if (r.reference_first_failing)
        std::cout << "the reference itself fails locally at " << r.reference_points[*r.reference_first_failing].point << "\n";
    std::cout << "FP64-tier bound / budget (max): " << report::detail::number(r.oracle_bound_ratio) << " at "
              << r.oracle_bound_worst << "\n";
    if (!r.mpfr_cross_check.empty()) std::cout << "MPFR cross-check: " << r.mpfr_cross_check << "\n";
    const model::LayerSummary* worst = nullptr;  // the largest drift against the same-dtype reference
    const auto layers = model::layer_summaries(r);
    for (const auto& l : layers)
        if (!std::isnan(l.drift) && (!worst || l.drift > worst->drift)) worst = &l;
    if (worst)
        std::cout << "drift against a correctly rounded " << name(r.contract.dtype) << " run (max): "
                  << report::detail::number(worst->drift) << "x at layer " << worst->layer << "\n";
    if (const std::string l = model::logits_text(r); !l.empty()) std::cout << "logits: " << l << "\n";
    std::cout << "report: " << out << "/diverge.{json,md,html}\n";
}

// A report directory's diverge.json, or the file itself.
model::DivergeReport read_report(const std::string& path) {
    const std::filesystem::path p = std::filesystem::is_directory(path) ? std::filesystem::path(path) / "diverge.json" : std::filesystem::path(path);
    std::ifstream in(p);
    if (!in) throw UsageError(p.string() + ": cannot be read");
    try {
        return model::report_from_json(nlohmann::json::parse(in), p.string());
    } catch (const nlohmann::json::exception& e) {
        throw UsageError(p.string() + ": not JSON: " + e.what());
    } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
    }
}

// --merge: exit 1 when a layer fails, else 2 when layers are missing, else 0;
// the merged report is written in every case.
int merge(const DivergeArgs& a) {
    std::vector<model::DivergeReport> parts;
    for (const std::string& f : a.merge) parts.push_back(read_report(f));
    model::DivergeReport r;
    try {
        r = model::merge_reports(std::move(parts), a.merge);
    } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
    }
    model::write_diverge_dir(a.out, r);
    print_summary(r, a.out);
    if (r.first_failing) return 1;
    if (!r.missing.empty()) {
        std::cerr << "diverge --merge: incomplete: " << model::diverge_headline(r) << "\n";
        return 2;
    }
    return 0;
}

int run(const DivergeArgs& a) {
    if (!a.merge.empty()) {
        if (!a.dump.empty() || !a.reference.empty() || !a.layers.empty() || a.tokens != 0)
            throw UsageError("--merge joins reports: give no dump, --reference, --layers or --tokens with it");
        return merge(a);
    }
    if (a.dump.empty()) throw UsageError("diverge: give a model dump (or --merge REPORT...)");
    const Loaded cand = load(a.dump);
    std::unique_ptr<Loaded> ref;
    if (!a.reference.empty()) {
        ref = std::make_unique<Loaded>(load(a.reference));
        if (model::to_json(ref->contract) != model::to_json(cand.contract))
            throw UsageError(a.reference + ": __metadata__ \"conform.contract\": differs from the contract of " + a.dump);
    }
    const model::DivergeReport r = analyse(cand, ref.get(), a);
    model::write_diverge_dir(a.out, r);
    print_summary(r, a.out);
    return r.first_failing ? 1 : 0;
}

}  // namespace

Subcommand add_diverge(CLI::App& app) {
    auto* cmd = app.add_subcommand("diverge", "report where a model dump diverges from the oracle or another dump");
    auto args = std::make_shared<DivergeArgs>();
    cmd->add_option("dump", args->dump, "the candidate's model dump (safetensors, conform.format model/1)");
    cmd->add_option("--reference", args->reference, "compare against this dump instead of the oracle");
    cmd->add_option("--layers", args->layers,
                    "analyse layers A:B only (0-based, B excluded; A:, :B, A); the propagated error starts from the "
                    "dump's own hidden state at layer A");
    cmd->add_option("--tokens", args->tokens,
                    "tokens judged: 0 chooses (every token up to 256, else 128); N < T: the first N/2 (where the "
                    "propagated error is compared) and N/2 spread over the rest, the last included; N >= T: every token")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--merge", args->merge,
                    "join the reports of --layers runs (report directories or diverge.json files) into one")
        ->expected(1, -1);
    cmd->add_option("--out", args->out, "report directory (diverge.json, diverge.md, diverge.html)")->capture_default_str();
    return {cmd, [args]() -> int { return run(*args); }};
}

}  // namespace conform::cli
