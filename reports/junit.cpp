// JUnit XML writer: one <testsuite> per op; property outcomes, mutants and
// exhaustive sweeps become <testcase>s so CI systems can show them.
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "reports/writers.hpp"

namespace conform::report {
namespace {

using detail::escape_markup;

struct Case {
    std::string xml;
    bool failed = false, skipped = false;
    double seconds = 0;
};
using Suites = std::map<std::string, std::vector<Case>>;

double secs(double s) { return std::isfinite(s) && s > 0 ? s : 0; }

std::string xml_attr(std::string_view s) { return escape_markup(s, true); }

// outcome: "" (passed), or "failure"/"skipped" with a message and body text.
struct Outcome {
    std::string kind, type, message, text;
};

Case testcase(std::string_view op, std::string_view name, double seconds, const Outcome& o) {
    Case c{fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\"", xml_attr(op), xml_attr(name),
                       secs(seconds)),
           o.kind == "failure", o.kind == "skipped", secs(seconds)};
    if (o.kind.empty()) {
        c.xml += "/>\n";
        return c;
    }
    std::string type = o.type.empty() ? "" : fmt::format(" type=\"{}\"", xml_attr(o.type));
    std::string body = o.text.empty() ? "/>" : fmt::format(">{}</{}>", escape_markup(o.text, false), o.kind);
    c.xml += fmt::format(">\n      <{} message=\"{}\"{}{}\n    </testcase>\n", o.kind, xml_attr(o.message), type, body);
    return c;
}

std::string failure_text(const PropertyOutcome& p) {
    std::string s;
    if (!p.counterexample.empty()) s += fmt::format("counterexample:\n{}\n", p.counterexample);
    if (!p.reproduce.empty()) s += fmt::format("reproduce: {}\n", p.reproduce);
    return s;
}

Outcome property_outcome(const KernelReport& k, const PropertyOutcome& p) {
    if (p.passed) return {};
    if (!detail::gated(k)) return {"skipped", "", fmt::format("{}, not gated", k.role), ""};
    std::string message = p.message.empty() ? "property failed" : p.message;
    return {"failure", "property", message, failure_text(p)};
}

void add_kernel(Suites& suites, const KernelReport& k) {
    auto& cases = suites[k.op];
    std::size_t failing = 0;
    for (const auto& p : k.properties) {
        cases.push_back(testcase(k.op, k.kernel + "." + p.name, p.seconds, property_outcome(k, p)));
        failing += !p.passed;
    }
    if (!k.passed && failing == 0 && detail::gated(k))  // never let a failed kernel vanish
        cases.push_back(testcase(k.op, k.kernel + ".run", k.seconds,
                                 {"failure", "kernel", "kernel failed with no failing property recorded", ""}));
}

void add_mutant(Suites& suites, const MutantResult& m) {
    Outcome o;
    if (!m.killed) o = {"failure", "mutant", fmt::format("mutant survived ({})", m.bug_class), m.description};
    suites[m.op].push_back(testcase(m.op, m.kernel + ".killed", 0, o));
}

void add_exhaustive(Suites& suites, const ExhaustiveResult& e) {
    Outcome o;
    if (!e.passed)
        o = {"failure", "exhaustive",
             fmt::format("max {} ulp (budget {}), {} class mismatches over {} inputs", e.max_ulp, e.budget_ulp,
                         e.class_mismatches, e.inputs),
             fmt::format("worst input: {}\n", e.worst_input)};
    suites[e.op].push_back(testcase(e.op, fmt::format("{}.exhaustive.{}", e.kernel, e.format), e.seconds, o));
}

void add_not_provided(Suites& suites, const NotProvided& n) {
    suites[n.op].push_back(testcase(n.op, n.kernel + ".provided", 0, {"skipped", "", "not provided: " + n.reason, ""}));
}

struct Totals {
    std::size_t tests = 0, failures = 0, skipped = 0;
    double seconds = 0;
    void add(const Case& c) {
        ++tests;
        failures += c.failed;
        skipped += c.skipped;
        seconds += c.seconds;
    }
    std::string attrs() const {
        return fmt::format("tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{:.3f}\"", tests,
                           failures, skipped, seconds);
    }
};

}  // namespace

std::string to_junit(const RunReport& r) {
    Suites suites;
    for (const auto& k : r.kernels) add_kernel(suites, k);
    for (const auto& e : r.exhaustive) add_exhaustive(suites, e);
    for (const auto& m : r.mutants) add_mutant(suites, m);
    for (const auto& n : r.not_provided) add_not_provided(suites, n);
    if (!r.complete)
        suites["conform"].push_back(
            testcase("conform", "run.complete", 0, {"failure", "run", "run interrupted: partial report", ""}));
    Totals all;
    std::string body;
    for (const auto& [op, cases] : suites) {
        Totals t;
        std::string xml;
        for (const auto& c : cases) {
            t.add(c);
            all.add(c);
            xml += c.xml;
        }
        body += fmt::format("  <testsuite name=\"{}\" {}>\n{}  </testsuite>\n", xml_attr(op), t.attrs(), xml);
    }
    return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"conform\" {}>\n{}</testsuites>\n",
                       all.attrs(), body);
}

}  // namespace conform::report
