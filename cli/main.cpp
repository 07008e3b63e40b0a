// conform: conformance runs, exhaustive sweeps, mutation score and golden
// data for transformer kernels.  Exit status: 0 all checks pass, 1 a check
// failed (or a mutant survived), 2 bad input, 130 interrupted.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/common.hpp"
#include "numerics/profile.hpp"

using namespace conform::cli;

namespace {

void add_selection(CLI::App* cmd, Selection& s, bool kernels = true) {
    cmd->add_option("--op", s.ops, "op to include (repeatable; default: all). See 'conform list'.");
    cmd->add_option("--dtype", s.dtypes, "input format to include: fp32, fp16, bf16 (repeatable; default: all)");
    if (kernels) cmd->add_option("--kernel", s.kernels, "exact kernel name to include (repeatable)");
}

// oneDNN and CUDA are separate registries (docs/onednn.md, docs/cuda.md):
// the built-in gate never depends on them.
void add_backend(CLI::App* cmd, Selection& s) {
    cmd->add_option("--backend", s.backend,
                    "cpu: the built-in kernels; onednn: oneDNN's primitives; cuda: the CUDA kernels on this "
                    "machine's GPU; cuda-emu: the same CUDA sources under the CPU emulation (what a backend "
                    "cannot run here is reported as not provided, with the reason)")
        ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"conform: numerical conformance of transformer kernels against a high-precision oracle"};
    app.require_subcommand(1);
    Selection sel;
    std::uint64_t seed = 1;
    int cases = 100, threads = 0;
    std::string out = "conform-report", reproduce, golden_dir;
    bool json = false, no_baselines = false, regenerate = false, profiles = false, with_mutants = false,
         with_exhaustive = false;

    auto* list = app.add_subcommand("list", "list registered kernels (op, name, backend, formats, role)");
    list->add_flag("--json", json, "print JSON instead of a table");
    add_selection(list, sel);
    add_backend(list, sel);

    bool markdown = false;
    auto* ops = app.add_subcommand("ops", "list the ops: input and output names, parameters, conventions, formula "
                                          "(what a dump file or plug-in must provide)");
    ops->add_flag("--json", json, "print JSON");
    ops->add_flag("--markdown", markdown, "print the Markdown reference (docs/ops.md is this output)");

    std::vector<std::string> case_paths;
    std::string validate_out;
    auto* validate = app.add_subcommand("validate", "judge third-party outputs stored as case files (safetensors or "
                                                    ".npy directories, docs/dumps.md) against the oracle");
    validate->add_option("paths", case_paths, "case files or directories (searched recursively)")->required();
    validate->add_option("--out", validate_out, "also write validate.md and validate.json into this directory");
    std::string validate_profile;
    validate->add_option("--profile", validate_profile, std::string("accuracy profile of the cases that declare none "
                                                                    "(conform.profile): ") + conform::props::profile_help());

    auto* run = app.add_subcommand("run", "run the property suite on kernels and write the report");
    add_selection(run, sel);
    add_backend(run, sel);
    run->add_option("--seed", seed, "RapidCheck seed (a number); every run is reproducible from it")->capture_default_str();
    run->add_option("--cases", cases, "generated cases per property")->capture_default_str()->check(CLI::PositiveNumber);
    run->add_option("--out", out, "report directory (report.json, report.md, junit.xml, report.html)")->capture_default_str();
    run->add_flag("--no-baselines", no_baselines, "skip the naive same-precision baselines");
    run->add_option("--reproduce", reproduce, "reproduction string printed with a failure");
    run->add_option("--profile", sel.profile, std::string("accuracy profile to judge every kernel by: ") +
                                              conform::props::profile_help() + " (default: each kernel's own, strict)");
    run->add_option("--convention", sel.conventions, "declare a convention KEY=VALUE for every selected kernel whose op "
                                                      "has it, e.g. eps_placement=outside (repeatable; conform ops lists them)");
    run->add_flag("--mutants", with_mutants, "also run every selected op's mutants (kill rate in the report)");
    run->add_flag("--exhaustive", with_exhaustive, "also sweep every fp16/bf16 input of the unary simd kernels");

    auto* mutate = app.add_subcommand("mutate", "run the suite against every mutant; print the kill rate");
    add_selection(mutate, sel);
    add_backend(mutate, sel);
    mutate->add_option("--seed", seed, "RapidCheck seed")->capture_default_str();
    mutate->add_option("--cases", cases, "generated cases per property")->capture_default_str()->check(CLI::PositiveNumber);
    auto* mutate_out = mutate->add_option("--out", out, "also write a report directory");

    auto* exh = app.add_subcommand("exhaustive", "every fp16/bf16 input (unary) or every (gate, up) pair (gated)");
    add_selection(exh, sel);
    add_backend(exh, sel);
    exh->add_option("--threads", threads, "worker threads (default: all cores)");
    auto* exh_out = exh->add_option("--out", out, "also write a report directory");

    CheckPluginOptions plug;
    auto* check_plugin = app.add_subcommand("check-plugin", "run the property suite against every kernel a plug-in "
                                                            "library exports, each in a child process with a time "
                                                            "limit (docs/plugins.md)");
    check_plugin->add_option("library", plug.library, "the plug-in shared library (LIB.so)")->required();
    check_plugin->add_option("--op", plug.selection.ops, "op to include (repeatable; default: all)");
    check_plugin->add_option("--kernel", plug.selection.kernels, "exported kernel name to include (repeatable)");
    check_plugin->add_option("--timeout", plug.timeout_s, "seconds each kernel's suite may take before it is killed")
        ->capture_default_str()->check(CLI::PositiveNumber);
    check_plugin->add_option("--cases", plug.cases, "generated cases per property")->capture_default_str()->check(CLI::PositiveNumber);
    check_plugin->add_option("--seed", plug.seed, "RapidCheck seed")->capture_default_str();
    check_plugin->add_option("--out", plug.out, "write check-plugin.md and check-plugin.json into this directory");
    check_plugin->add_option("--reproduce", plug.reproduce, "reproduction string printed with a failure");
    check_plugin->add_option("--profile", plug.profile, std::string("accuracy profile every exported kernel is judged "
                                                                    "by: ") + conform::props::profile_help());
    check_plugin->add_option("--convention", plug.conventions, "declare a convention KEY=VALUE for every exported "
                                                               "kernel whose op has it, beside the descriptor's own (repeatable)");
    check_plugin->add_option("--record-profile", plug.record_profile,
                             "write each kernel's error profile (its within_budget statistics case by case, seed 1, "
                             "100 cases) into this directory, for a later --against-profile");
    check_plugin->add_option("--against-profile", plug.against_profile,
                             "fail a kernel whose error profile got materially worse than the one recorded in this "
                             "directory, even while within budget (a kernel without one there is an error)");
    bool no_infer = false;
    check_plugin->add_flag("--no-infer", no_infer, "do not re-judge a failing kernel under the alternative conventions "
                                                   "of its op");
    bool no_shrink = false;
    check_plugin->add_flag("--no-shrink", no_shrink, "report failing cases as generated, without shrinking them");
    check_plugin->add_flag("--fail-fast", plug.fail_fast,
                           "stop each kernel's suite at its first failing property (a gate's verdict sooner; the "
                           "properties after it, the failure's statistics and the convention inference are not run)");

    auto* golden = app.add_subcommand("golden", "check the golden vectors (the oracle reproduces every stored output; "
                                                "every selected kernel passes them), or regenerate them and the error "
                                                "profiles");
    golden->add_flag("--regenerate", regenerate, "rewrite the selected golden vector files from the oracle");
    golden->add_flag("--record-profiles", profiles, "re-record the selected kernels' error profiles");
    golden->add_option("--dir", golden_dir, "golden directory (default: the source tree's golden/)");
    add_selection(golden, sel);  // vector files by --op/--dtype; kernels (and named mutants) by all three

    const Subcommand synth = add_synth(app), diverge = add_diverge(app), sensitivity = add_sensitivity(app),
                     cuda_bench = add_cuda_bench(app), cases_cmd = add_cases(app);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }
    try {
        if (*list) return cmd_list(json, sel);
        if (*ops) return cmd_ops(json, markdown);
        if (*validate) return cmd_validate(case_paths, validate_out, validate_profile);
        if (*run) return cmd_run(sel, seed, cases, out, !no_baselines, reproduce, with_mutants, with_exhaustive);
        if (*mutate) return cmd_mutate(sel, seed, cases, mutate_out->count() ? out : "");
        if (*exh) return cmd_exhaustive(sel, exh_out->count() ? out : "", threads);
        plug.shrink = !no_shrink;
        plug.infer = !no_infer;
        if (*check_plugin) return cmd_check_plugin(plug);
        if (*golden) return cmd_golden(regenerate, profiles, golden_dir, sel);
        for (const Subcommand* c : {&synth, &diverge, &sensitivity, &cuda_bench, &cases_cmd})
            if (*c->cmd) return c->action();
    } catch (const UsageError& e) {
        std::cerr << "conform: " << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "conform: " << e.what() << "\n";
        return 2;
    }
    return 2;
}
