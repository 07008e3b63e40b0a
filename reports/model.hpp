// The report model: what a conformance run found, independent of how it is
// written.  Writers (reports/*.cpp) turn it into JSON (versioned schema),
// Markdown, JUnit XML and a self-contained HTML page.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace conform::report {

constexpr const char* kSchema = "conform.report/1";

// One property checked against one kernel.
struct PropertyOutcome {
    std::string name;         // e.g. "within_budget", "scale_invariance"
    bool passed = false;
    std::int64_t cases = 0;   // generated cases that ran
    std::string message;      // why it failed (empty on success)
    std::string counterexample;  // inputs as hex floats, after shrinking
    std::string reproduce;    // RC_PARAMS="..." string, or seed text
    double seconds = 0;
    // The passing case that came closest to the budget (largest utilization
    // of the derived bound, else largest ULP error), and the string that
    // replays exactly that case (`conform run --reproduce`); empty when the
    // property compares no element against the oracle.
    std::string worst_metric;  // "util" or "ulp"
    double worst_value = 0;
    std::string worst_case;
    std::string worst_reproduce;
};

// A measured curve, e.g. RoPE's relative-position invariance error against
// position: at each x the error, its derived budget, and error / budget.
struct CurvePoint {
    double x = 0, error = 0, budget = 0;
    // A comparison series at the same x, not judged (depth_amplification: the
    // unconstrained HC product); NaN when the curve has none.
    double peer = std::numeric_limits<double>::quiet_NaN();
};

struct Curve {
    std::string name;      // e.g. "rope_invariance"
    std::string x_label, y_label;
    std::vector<CurvePoint> points;
    bool passed = true;    // every point within its budget
    std::string peer_label;  // what CurvePoint::peer measures; empty: no peer series
};

// Error statistics of one kernel over every element the suite compared.
struct ErrorStats {
    std::int64_t elements = 0;
    std::uint64_t max_ulp = 0;
    std::string worst_ulp_case;  // "x=0x1.8p+3 -> got 0x..., want 0x..."
    // ulp_hist[k] counts elements with ULP error in bucket k:
    // 0, 1, 2, 3-4, 5-8, 9-16, 17-64, 65-1024, >1024, class mismatch
    std::vector<std::int64_t> ulp_hist;
    bool has_bound = false;    // bound-based verdict (reductions)
    double max_util = 0;       // max |err| / bound
    std::string worst_util_case;
    std::vector<double> util_quantiles;  // p50, p90, p99, p99.9, max (gating tier)
    std::vector<std::int64_t> util_hist; // [0,.1),[.1,.2),...,[.9,1),[1,2),[2,inf)
    // Added after the schema's first release (optional in JSON):
    double max_util_rigorous = 0;                 // utilization of the rigorous tier
    std::vector<double> util_quantiles_rigorous;  // p50 ... max, rigorous tier
    std::int64_t not_judged = 0;                  // elements whose bound was infinite or vacuous
    std::map<std::string, std::int64_t> not_judged_reasons;
    std::map<std::string, std::int64_t> notes;    // counted facts about judged elements (ambiguous selections)
    std::string profile;            // the accuracy profile it was judged by
    std::string tightest_profile;   // the tightest profile every judged element meets
    bool characterized = false;     // within_budget failed: these statistics judge all its cases, past the failure
    // Per region (normal, tail, subnormal, special): elements judged, those
    // beyond strict, and the largest ulp error among them.
    struct Region {
        std::string name;
        std::int64_t elements = 0, beyond_strict = 0;
        std::uint64_t max_ulp = 0;
    };
    std::vector<Region> regions;
};

struct KernelReport {
    std::string kernel, op, family, variant, backend, role;  // role: kernel|baseline|mutant
    std::string in_format, out_format, acc_format;
    std::string budget;  // human text: "<= 1 ulp" or "derived bound (docs/norm.md)"
    bool passed = false;  // all properties passed
    ErrorStats stats;
    std::vector<PropertyOutcome> properties;
    std::vector<Curve> curves;
    double seconds = 0;
    // Declared conventions ("eps_placement=outside, ..."; "" when none) and,
    // for a failing kernel, the inference: each single-key alternative tried
    // ("eps_placement=outside: passes" / ": within_budget fails") and the one
    // under which every failed property passes ("" when none explains it).
    std::string conventions;
    std::vector<std::string> conventions_tried;
    std::string convention_match;
    // Plug-in ABI v2 declarations: the domain (JSON text, "" when none) and
    // the outputs the kernel does not write.
    std::string domain;
    std::vector<std::string> unwritten;
};

struct ExhaustiveResult {
    std::string kernel, op, format;
    std::int64_t inputs = 0;
    std::uint64_t max_ulp = 0;
    std::string worst_input;
    std::int64_t class_mismatches = 0;
    std::uint64_t budget_ulp = 0;
    bool passed = false;
    double seconds = 0;
};

// An (op, format) a backend was asked for and cannot run on this machine
// (docs/onednn.md): reported as "not provided" with the reason, which is
// neither a pass nor a failure of the run.
struct NotProvided {
    std::string kernel, op, format, backend, reason;
};

struct MutantResult {
    std::string kernel, op, bug_class, description;
    bool killed = false;
    std::string killed_by;  // first property that failed
};

struct RunReport {
    std::string schema = kSchema;
    std::string tool_version;
    std::string started, finished;  // ISO 8601 UTC
    std::uint64_t seed = 0;
    int cases = 0;
    std::string machine;  // cpu model, ISA the kernels dispatched to
    std::map<std::string, std::string> selection;  // --op, --dtype as given
    bool complete = true;  // false when the run was interrupted
    std::vector<KernelReport> kernels;
    std::vector<ExhaustiveResult> exhaustive;
    std::vector<MutantResult> mutants;
    std::vector<NotProvided> not_provided;  // JSON field added after the schema's first release (optional)

    int failed_kernels() const;  // role kernel that failed (baselines never count)
    bool passed() const;         // every gated kernel passed, every mutant killed
};

}  // namespace conform::report
