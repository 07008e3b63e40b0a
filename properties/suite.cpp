#include "properties/suite.hpp"

#include <chrono>
#include <rapidcheck.h>

namespace conform::props {
namespace {

std::uint64_t fnv1a(const std::string& s) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// RapidCheck's own reproduction format, so RC_PARAMS works as well as
// `conform run --reproduce`.
std::string reproduce_string(const std::string& id, std::uint64_t seed, const rc::detail::Reproduce& r) {
    rc::detail::Configuration cfg;
    cfg.testParams.seed = seed;
    cfg.reproduce[id] = r;
    return rc::detail::configToMinimalString(cfg);
}

std::string show_example(const rc::detail::Example& ex) {
    std::string s;
    for (const auto& [type, value] : ex) s += value;
    return s;
}

}  // namespace

const std::vector<PropertyDef>& property_defs() {
    static const std::vector<PropertyDef> defs = [] {
        std::vector<PropertyDef> v;
        add_common_properties(v);
        add_norm_properties(v);
        add_activation_properties(v);
        add_gated_properties(v);
        add_softmax_properties(v);
        add_rope_properties(v);
        add_attention_properties(v);
        return v;
    }();
    return defs;
}

std::vector<const PropertyDef*> properties_for(const OpSpec& op) {
    std::vector<const PropertyDef*> v;
    for (const auto& p : property_defs())
        if (p.applies(op)) v.push_back(&p);
    return v;
}

report::PropertyOutcome run_property(const PropertyDef& p, const KernelInfo& k, const RunConfig& cfg, Stats* stats) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string id = k.name + "/" + p.name;
    rc::detail::TestParams tp;
    tp.seed = cfg.seed ^ fnv1a(id);
    tp.maxSuccess = std::max(1, cfg.cases / p.case_divisor);
    tp.maxSize = 100;
    std::unordered_map<std::string, rc::detail::Reproduce> repro;
    if (!cfg.reproduce.empty()) {
        auto parsed = rc::detail::configFromString(cfg.reproduce);
        repro = parsed.reproduce;
        if (repro.count(id)) tp.seed = parsed.testParams.seed;
    }
    rc::detail::TestMetadata md{id, p.doc};
    struct Quiet : rc::detail::TestListener {
        void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
        void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
        void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
    } quiet;
    auto result = rc::detail::checkTestable(p.make(k, cfg, stats), md, tp, quiet, repro);

    report::PropertyOutcome out;
    out.name = p.name;
    rc::detail::SuccessResult ok;
    rc::detail::FailureResult bad;
    rc::detail::GaveUpResult gave;
    rc::detail::Error err;
    if (result.match(ok)) {
        out.passed = true;
        out.cases = ok.numSuccess;
    } else if (result.match(bad)) {
        out.cases = bad.numSuccess + 1;
        out.message = bad.description;
        out.counterexample = show_example(bad.counterExample);
        out.reproduce = reproduce_string(id, tp.seed, bad.reproduce);
    } else if (result.match(gave)) {
        out.cases = gave.numSuccess;
        out.message = "gave up: " + gave.description;
    } else if (result.match(err)) {
        out.message = "error: " + err.description;
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

report::KernelReport describe_kernel(const KernelInfo& k) {
    report::KernelReport r;
    const OpSpec* op = find_op(k.op);
    r.kernel = k.name;
    r.op = k.op;
    r.family = op ? op->family : "";
    r.variant = k.variant;
    r.backend = k.backend;
    r.role = name(k.role);
    r.in_format = name(k.in);
    r.out_format = name(k.out);
    r.acc_format = name(k.acc);
    r.budget = budget_for(k).text();
    return r;
}

void fill_stats(report::ErrorStats& out, const Stats& s) {
    out.elements = s.elements();
    out.max_ulp = s.max_ulp();
    out.worst_ulp_case = s.worst_ulp_case();
    out.ulp_hist = s.ulp_hist();
    out.has_bound = s.has_util();
    out.max_util = s.max_util();
    out.worst_util_case = s.worst_util_case();
    out.util_quantiles = s.util_quantiles();
    out.util_hist = s.util_hist();
}

report::KernelReport run_suite(const KernelInfo& k, const RunConfig& cfg,
                               const std::function<void(const report::PropertyOutcome&)>& on_property) {
    const auto t0 = std::chrono::steady_clock::now();
    report::KernelReport r = describe_kernel(k);
    Stats stats;
    r.passed = true;
    for (const PropertyDef* p : properties_for(*find_op(k.op))) {
        r.properties.push_back(run_property(*p, k, cfg, &stats));
        r.passed = r.passed && r.properties.back().passed;
        if (on_property) on_property(r.properties.back());
    }
    fill_stats(r.stats, stats);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace conform::props
