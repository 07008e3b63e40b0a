// Report writers: turn a RunReport into JSON (schema report::kSchema, see
// docs/reports.md), Markdown, JUnit XML and a self-contained HTML page.
// Every writer is a pure function of the report; write_report_dir() puts all
// four into a directory with atomic replaces (reports/atomic_file.hpp).
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/model.hpp"

namespace conform::report {

nlohmann::json to_json(const RunReport&);
// Inverse of to_json.  Throws std::runtime_error naming the field path on a
// missing or mistyped field ("kernels[3].stats.max_ulp: expected unsigned
// integer") or an unsupported schema id.  The "summary" object is derived
// data and is not read back.
RunReport from_json(const nlohmann::json&);
// One kernel or one property of the report, as they appear inside it, and
// their inverses (errors name `path` and the field): check-plugin streams
// them from the child process that runs a plug-in kernel.
nlohmann::json to_json(const KernelReport&);
nlohmann::json to_json(const PropertyOutcome&);
KernelReport kernel_from_json(const nlohmann::json&, const std::string& path);
PropertyOutcome property_from_json(const nlohmann::json&, const std::string& path);
// to_json(r) pretty-printed (2 spaces, trailing newline); invalid UTF-8 in
// strings is replaced by U+FFFD instead of throwing.
std::string to_json_text(const RunReport&);

std::string to_markdown(const RunReport&);
std::string to_junit(const RunReport&);
std::string to_html(const RunReport&);

// Writes report.json, report.md, junit.xml and report.html into dir (created
// if missing).  Each file is replaced atomically; report.json is written last.
// Throws std::runtime_error naming the path on failure.
void write_report_dir(const std::filesystem::path& dir, const RunReport&);

// Counts shown in every writer's summary (the JSON "summary" object).
struct Summary {
    int kernels_checked = 0;   // role "kernel" entries
    int kernels_failed = 0;    // role "kernel" entries that failed
    int baselines = 0;         // role "baseline" entries (never gated)
    int mutants_killed = 0, mutants_total = 0;
    int exhaustive_passed = 0, exhaustive_total = 0;
    int not_provided = 0;      // (op, format) pairs a backend cannot run here
    bool passed = false;       // RunReport::passed()
    bool complete = true;
};
Summary summarize(const RunReport&);

// Helpers shared by the text writers (not a stable API).
namespace detail {

inline constexpr std::array<const char*, 10> kUlpBuckets = {
    "0", "1", "2", "3-4", "5-8", "9-16", "17-64", "65-1024", ">1024", "class"};
inline constexpr std::array<const char*, 12> kUtilBuckets = {
    "[0,.1)", "[.1,.2)", "[.2,.3)", "[.3,.4)", "[.4,.5)", "[.5,.6)",
    "[.6,.7)", "[.7,.8)", "[.8,.9)", "[.9,1)", "[1,2)", ">=2"};
inline constexpr std::size_t kUtilOneBucket = 10;  // first bucket with util >= 1

inline bool gated(const KernelReport& k) { return k.role == "kernel"; }
// "PASS", "FAIL", or "<role> (not gated)" for baselines and other roles.
std::string verdict(const KernelReport&);
std::string pass_fail(bool passed);  // "PASS" / "FAIL"
std::string formats(const KernelReport&);  // "bf16 -> bf16 (acc fp32)"
std::string number(double v);              // "0.25", "inf", "nan", "-"
std::string run_status(const RunReport&);  // "complete" / "INTERRUPTED (partial)"
// "PASSED" / "FAILED", or "NOT PROVIDED" when nothing was checked because
// the backend provides none of the selection: never a pass.
std::string headline(const RunReport&);
std::string summary_line(const RunReport&);

// Tables shared by Markdown and HTML: header row plus one row of plain text
// cells per item (each writer escapes cells its own way).
using Table = std::vector<std::vector<std::string>>;
std::vector<std::string> kernel_columns();
std::vector<std::string> kernel_cells(const KernelReport&);
// Where a kernel's results beyond strict lie, by region ("3 of 410 subnormal
// elements (max 2 ulp), ..."); empty when none is.
std::string error_concentration(const ErrorStats& st);
// The reasons elements were not judged, with counts.
std::string not_judged_text(const ErrorStats& st);
std::string notes_text(const ErrorStats& st);  // "what (n); ..."
Table exhaustive_table(const std::vector<ExhaustiveResult>&);
Table mutant_table(const std::vector<MutantResult>&);
Table not_provided_table(const std::vector<NotProvided>&);
Table metadata_table(const RunReport&);
std::string kill_rate(const RunReport&);  // "kill rate: K/N"

// The attention section (softmax, rope and attention families): kernels and
// baselines, never mutants.
bool attention_section_kernel(const KernelReport&);
std::vector<const KernelReport*> attention_kernels(const RunReport&);
// elements, max ULP and the utilization quantiles of each kernel.
Table error_stats_table(const std::vector<const KernelReport*>&);
// Per kernel and property: the case closest to the budget and the command
// that replays exactly that case.
Table worst_case_table(const std::vector<const KernelReport*>&);
std::string reproduce_command(const KernelReport&, const std::string& reproduce);
// The curves named `name`: one row per x, one utilization column per kernel.
Table curve_table(const std::vector<const KernelReport*>&, const std::string& name);

// The depth_amplification curves (mHC, docs/sinkhorn.md): one row per
// sinkhorn kernel (never mutants) with ||B_L...B_1||_2 of its own matrices at
// each depth and the budget at the deepest, then one row of the peer series
// (unconstrained HC); empty when no kernel has the curve.
Table amplification_table(const RunReport&);

// Kernels grouped by "family / op", sorted by group then input order.
struct KernelGroup {
    std::string title;
    std::vector<const KernelReport*> kernels;
};
std::vector<KernelGroup> group_kernels(const RunReport&);

// XML/HTML escaping: & < > " ' become entities; other control characters
// and invalid UTF-8 bytes become U+FFFD.  \n \r \t become character
// references when attribute is true (attribute normalisation would turn them
// into spaces), and are kept as they are in element text.
std::string escape_markup(std::string_view, bool attribute = true);
// Replace invalid UTF-8 sequences by U+FFFD.
std::string valid_utf8(std::string_view);

// Markdown: inline text escaped for a table cell or a paragraph; a table
// (rows[0] is the header).
std::string md_text(std::string_view raw);
std::string md_table(const Table& t);
// HTML: a table (rows[0] the header, classes[i] the class of data row i + 1)
// and a self-contained page with the report stylesheet around `body`.
std::string html_table(const Table& rows, const std::vector<std::string>& classes);
std::string tr(const std::vector<std::string>& html_cells, std::string_view tag, std::string_view cls);  // one row
std::vector<std::string> escaped(const std::vector<std::string>& cells);
std::string html_page(std::string_view title, std::string_view body);

}  // namespace detail
}  // namespace conform::report
