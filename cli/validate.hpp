// conform validate's per-case verdict (cli/validate.cpp), shared with the
// case sets of conform cases (cli/cases.cpp).
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace conform::cli {

struct CaseVerdict {
    std::string path, op, impl;
    // PASS, FAIL, NOT JUDGED (every bound vacuous), NOT RUN (no outputs
    // stored) or ERROR (the case could not be judged)
    std::string status;
    std::string message;
    std::int64_t elements = 0;
    std::uint64_t max_ulp = 0;
    bool has_util = false;
    double max_util = 0;
    std::string worst;
    std::string matches;  // the alternative convention the data matches, when it fails
    std::string profile, tightest;  // the profile it was judged by, the tightest profile it meets
    std::string concentration;      // where results beyond strict lie (report::detail::error_concentration)
    std::int64_t not_judged = 0;
    // The op's fixed-data properties (properties/fixed.hpp): name and "" when
    // it holds, else the violation.
    std::vector<std::pair<std::string, std::string>> properties;
    std::string property;  // a case of a case set: the property that generated it
};

// One case judged against the oracle: special values, the budget, the
// alternative conventions when it fails, the fixed-data properties.
// Outputs named in `unwritten` may be absent: evaluated, never judged (a
// case set's declaration, docs/cases.md).
CaseVerdict judge_case(const std::filesystem::path& path, const std::string& default_profile,
                       const std::vector<std::string>& unwritten = {});

// The one-line progress text of a judged case ("[i/n] STATUS path (...)").
std::string verdict_line(const CaseVerdict& v, std::size_t i, std::size_t n);

// Counts by status: the summary line and the exit status (0 every case
// passes; 1 some case fails, is not judged or was not run; 2 some case
// could not be judged).
struct VerdictTally {
    std::size_t cases = 0;
    int errors = 0, failures = 0, unjudged = 0, not_run = 0;
    void add(const CaseVerdict& v);
    std::string summary() const;
    int exit_status() const;
};

// validate.md and validate.json into `out` (nothing when it is empty).
void write_verdicts(const std::string& out, const std::vector<CaseVerdict>& vs);

// validate.json (schema conform.validate/1) and validate.md.
nlohmann::json to_json(const std::vector<CaseVerdict>& vs);
std::string to_markdown(const std::vector<CaseVerdict>& vs);

// A directory written by conform cases (it holds manifest.json): every case
// judged, then every covered property replayed on the stored outputs
// (docs/cases.md).  Exit status as cmd_validate's.
int validate_case_set(const std::filesystem::path& dir, const std::string& out, const std::string& profile);

}  // namespace conform::cli
