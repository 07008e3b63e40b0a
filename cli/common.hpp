// Shared parts of the conform subcommands: kernel selection from --op /
// --dtype / --kernel, input errors (exit status 2), progress lines.
#pragma once
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "impls/registry.hpp"
#include "reports/model.hpp"

namespace conform::cli {

// Bad command-line input: printed as "conform: <message>", exit status 2.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Selection {
    std::vector<std::string> ops, dtypes, kernels;
    std::vector<Role> roles;
    std::string backend = "cpu";  // "cpu": the built-in registry; "onednn", "cuda", "cuda-emu": their BackendRegistry
    std::string profile;          // --profile: the accuracy profile to judge by (empty: each kernel's own)
    std::vector<std::string> conventions;  // --convention KEY=VALUE: declared for every selected kernel whose op has KEY
};

// Copies of the kernels, each judged by `profile` when it is not empty and
// under the declared `conventions` ("KEY=VALUE", added to each kernel's own
// for the ops that have KEY).  A UsageError names a profile that does not
// parse, a convention that is malformed or unknown, or one that applies to
// none of the kernels.
// --convention KEY=VALUE texts as a map (a UsageError for one without '=').
std::map<std::string, std::string> parse_key_values(const std::vector<std::string>& texts);

// What convention inference found for a failing kernel, as indented lines
// ("" when nothing was tried): "passes if it declares eps_placement=outside"
// or "no declarable convention explains it: a defect", then each try.
std::string convention_lines(const report::KernelReport& k);

// A kernel's verdict line as conform run prints it: name, verdict, worst
// error, each failed property with its message and reproduction string,
// and what convention inference found.
std::string kernel_outcome_line(const report::KernelReport& k);

std::vector<KernelInfo> with_profile(const std::vector<const KernelInfo*>& ks, const std::string& profile,
                                     const std::vector<std::string>& conventions = {});

// Validates names (unknown op / dtype / kernel / backend is a UsageError
// listing the known ones) and returns the matching kernels; an empty result is
// a UsageError unless the backend has matching not-provided entries.
std::vector<const KernelInfo*> select(const Selection& s);
// The backend's (op, format) pairs that match the selection and cannot run
// here (none for the built-in backend).
std::vector<report::NotProvided> select_not_provided(const Selection& s);

std::string now_iso8601();
std::string machine_description();
report::RunReport new_report(std::uint64_t seed, int cases, const Selection& s);

// Ctrl-C / SIGTERM: the run stops after the kernel in progress and keeps
// the partial report.
void install_interrupt_handler();
bool interrupted();

void progress(const std::string& line);  // to stderr, one line
std::string join(const std::vector<std::string>& v, const std::string& sep = ", ");
// s made safe for one cell of a Markdown table: no column bar, no line break.
std::string table_cell(std::string s);

int cmd_list(bool json, const Selection& s);
int cmd_ops(bool json, bool markdown);
// Exit status: 0 every case passes, 1 some case fails, 2 some case could not
// be judged (malformed file, unknown op, wrong shapes) — every case is still
// reported.
// `profile`: the accuracy profile of cases that declare none (conform.profile).
int cmd_validate(const std::vector<std::string>& paths, const std::string& out, const std::string& profile = "");
int cmd_run(const Selection& s, std::uint64_t seed, int cases, const std::string& out, bool baselines,
            const std::string& reproduce, bool mutants, bool exhaustive);
int cmd_mutate(const Selection& s, std::uint64_t seed, int cases, const std::string& out);
int cmd_exhaustive(const Selection& s, const std::string& out, int threads);
struct CheckPluginOptions {
    std::string library;
    Selection selection;  // --op and --kernel (names the library exports)
    double timeout_s = 300;  // per kernel: the child is killed after this
    std::uint64_t seed = 1;
    int cases = 100;
    std::string out;        // check-plugin.md / check-plugin.json; empty: none
    std::string reproduce;  // a reproduction string from an earlier failure
    bool shrink = true;     // --no-shrink: report failures unshrunk (a kill check needs no smaller case)
    std::string profile;    // --profile: the accuracy profile every kernel is judged by (empty: strict)
    std::vector<std::string> conventions;  // --convention KEY=VALUE: added to the descriptors' declarations
    bool infer = true;      // --no-infer: skip convention inference for failing kernels
    bool fail_fast = false; // --fail-fast: a kernel's suite stops at its first failing property
    std::string record_profile;   // --record-profile DIR: write each kernel's error profile there
    std::string against_profile;  // --against-profile DIR: fail a kernel whose profile drifted from DIR's
};
// Exit status: 0 every kernel passes, 1 some kernel failed (including a
// crash, a hang or a write outside its outputs), 2 bad input (the library
// cannot be loaded or its table is invalid), 130 interrupted.
int cmd_check_plugin(const CheckPluginOptions& o);
int cmd_golden(bool regenerate, bool profiles, const std::string& dir, const Selection& sel);

// Subcommands that own their options (docs/diverge.md): each adds itself to
// `app` and returns the action to run when it was the one parsed.
struct Subcommand {
    CLI::App* cmd;
    std::function<int()> action;
};
Subcommand add_synth(CLI::App& app);    // cli/synth.cpp
Subcommand add_diverge(CLI::App& app);  // cli/diverge.cpp
Subcommand add_cuda_bench(CLI::App& app);  // cli/cuda_bench.cpp
Subcommand add_sensitivity(CLI::App& app);  // cli/sensitivity.cpp
Subcommand add_cases(CLI::App& app);        // cli/cases.cpp

}  // namespace conform::cli
