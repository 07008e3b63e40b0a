#include "properties/suite.hpp"

#include "numerics/conventions.hpp"
#include "properties/domain.hpp"

#include "properties/common.hpp"
#include "properties/rope.hpp"
#include "properties/sinkhorn.hpp"
#include "properties/statistics.hpp"

#include <algorithm>
#include <chrono>
#include <regex>
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

// Follows RapidCheck's search (rc::detail::searchProperty: one Random split
// per generated case, sizes spread evenly over [0, maxSize], +1 per ten
// recent discards) so that the (Random, size) of every case is known, and
// keeps those of the case that set the property's worst ULP error and worst
// bound utilization.  Replaying such a pair runs exactly that one case.
//
// With an `announce` callback it also names the case about to run: the next
// generated one, or while shrinking the next candidate (RapidCheck's
// shrinkTestCase tries the shrinks of the current best in order and restarts
// from the first shrink of each accepted one, appending its index to the path).
class WorstCaseListener : public rc::detail::TestListener {
public:
    using Announce = std::function<void(const rc::detail::Reproduce&)>;
    WorstCaseListener(const rc::detail::TestParams& tp, const Stats& stats, Announce announce = {})
        : tp_(tp), stats_(stats), random_(tp.seed), announce_(std::move(announce)) {}

    // The case RapidCheck generates next (before any has run, the first).
    void announce_next() const {
        if (!announce_) return;
        rc::Random next = random_;
        announce_({next.split(), size_for(successes_) + discards_ / 10, {}});
    }

    void onTestCaseFinished(const rc::detail::CaseDescription& d) override {
        const rc::Random random = random_.split();
        const int size = size_for(successes_) + discards_ / 10;
        if (d.result.type == rc::detail::CaseResult::Type::Failure) {
            failing_ = {random, size, {}};
            announce_shrink();
            return;
        }
        if (d.result.type == rc::detail::CaseResult::Type::Discard) {
            ++discards_;
            announce_next();
            return;
        }
        ++successes_;
        discards_ = 0;
        if (stats_.max_ulp() > ulp_ || (!stats_.worst_ulp_case().empty() && !have_ulp_)) {
            ulp_ = stats_.max_ulp(), have_ulp_ = true;
            ulp_case_ = {random, size, {}};
        }
        if (stats_.max_util() > util_ || (!stats_.worst_util_case().empty() && !have_util_)) {
            util_ = stats_.max_util(), have_util_ = true;
            util_case_ = {random, size, {}};
        }
        announce_next();
    }
    void onShrinkTried(const rc::detail::CaseDescription&, bool accepted) override {
        if (accepted) {
            failing_.shrinkPath.push_back(shrink_index_);
            shrink_index_ = 0;
        } else {
            ++shrink_index_;
        }
        announce_shrink();
    }
    void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}

    // The case behind the reported worst: utilization when the property
    // compared against a derived bound, else ULP error.
    const rc::detail::Reproduce* worst() const {
        if (stats_.has_util()) return have_util_ ? &util_case_ : nullptr;
        return have_ulp_ ? &ulp_case_ : nullptr;
    }

private:
    int size_for(int i) const {  // rc::detail's sizeFor
        const int sizes = tp_.maxSize + 1, regular = (tp_.maxSuccess / sizes) * sizes;
        if (i < regular) return i % sizes;
        const int rest = tp_.maxSuccess - regular;
        return rest == 1 ? 0 : ((i % sizes) * tp_.maxSize) / (rest - 1);
    }

    void announce_shrink() const {
        if (!announce_) return;
        rc::detail::Reproduce next = failing_;
        next.shrinkPath.push_back(shrink_index_);
        announce_(next);
    }

    const rc::detail::TestParams& tp_;
    const Stats& stats_;
    rc::Random random_;
    Announce announce_;
    rc::detail::Reproduce failing_;  // the failing case being shrunk, with the accepted path
    std::size_t shrink_index_ = 0;
    int successes_ = 0, discards_ = 0;
    std::uint64_t ulp_ = 0;
    double util_ = 0;
    bool have_ulp_ = false, have_util_ = false;
    rc::detail::Reproduce ulp_case_, util_case_;
};

void record_worst(report::PropertyOutcome& out, const Stats& s, const std::string& reproduce) {
    if (s.elements() == 0) return;
    const bool util = s.has_util();
    out.worst_metric = util ? "util" : "ulp";
    out.worst_value = util ? s.max_util() : static_cast<double>(s.max_ulp());
    out.worst_case = util ? s.worst_util_case() : s.worst_ulp_case();
    out.worst_reproduce = reproduce;
}

std::string show_example(const rc::detail::Example& ex) {
    std::string s;
    for (const auto& [type, value] : ex) s += value;
    return s;
}

// Measured curves of a kernel (the RoPE invariance error over position).
std::vector<report::Curve> curves_for(const KernelInfo& k, const RunConfig& cfg) {
    if (k.op == "rope") return {rope_invariance_curve(k, cfg.seed)};
    if (k.op == "sinkhorn") return {depth_amplification_curve(k, cfg.seed)};
    return {};
}

// A curve is also a check: every point within its budget.
report::PropertyOutcome curve_outcome(const report::Curve& c) {
    report::PropertyOutcome o;
    o.name = c.name + "_curve";
    o.passed = c.passed;
    o.cases = static_cast<std::int64_t>(c.points.size());
    for (const auto& p : c.points)
        if (!(p.error <= p.budget)) {
            o.message = "at " + c.x_label + " = " + std::to_string(static_cast<long long>(p.x)) + ": error " +
                        hexfloat(p.error) + " exceeds the budget " + hexfloat(p.budget);
            break;
        }
    return o;
}

// The checks over the whole within_budget sample (statistics.hpp): the
// rounding-direction symmetry, and the recorded error profile when the run
// has one for this kernel.
std::vector<report::PropertyOutcome> statistics_outcomes(const KernelInfo& k, const RunConfig& cfg, const Stats& s) {
    std::vector<report::PropertyOutcome> out;
    const std::int64_t votes = s.votes_for()[0] + s.votes_against()[0];
    report::PropertyOutcome bias;
    bias.name = "rounding_bias";
    bias.cases = votes;
    bias.message = rounding_bias(s, vote_unit(*find_op(k.op)));
    bias.passed = bias.message.empty();
    out.push_back(bias);
    if (cfg.profile_check) {
        report::PropertyOutcome drift;
        drift.name = "error_profile";
        drift.cases = static_cast<std::int64_t>(s.case_log_utils().size());
        drift.message = cfg.profile_check(k, cfg, s);
        drift.passed = drift.message.empty();
        out.push_back(drift);
    }
    return out;
}

// What rc::detail::reproduceProperty answers when the replayed case passes.
constexpr const char* kReplayedPass = "Reproduced result is not a failure";

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
        add_gated_attention_properties(v);
        add_gdn_properties(v);
        add_sinkhorn_properties(v);
        add_hc_residual_properties(v);
        add_attn_res_properties(v);
        add_gated_residual_properties(v);
        add_int8_properties(v);
        add_int8_quant_properties(v);
        add_int8_block_properties(v);
        add_matmul_properties(v);
        add_moe_properties(v);
        add_sparse_properties(v);
        add_sparse_indexer_properties(v);
        add_mla_properties(v);
        add_compressed_attention_properties(v);
        add_dsa_properties(v);
        add_block_sparse_properties(v);
        add_nsa_attention_properties(v);
        add_moe_layer_properties(v);
        add_fp8_properties(v);
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

namespace {

// A failure as the kernel's author should read it: RapidCheck prefixes
// RC_FAIL's message with conform's own source location and the macro text,
// and an exception's with "Exception thrown with message:"; neither says
// anything about the kernel.
std::string kernel_message(std::string d) {
    static const std::regex rc_fail(R"(^[^\n]*:[0-9]+:\nRC_FAIL\([^\n]*\)\n\n)");
    d = std::regex_replace(d, rc_fail, "", std::regex_constants::format_first_only);
    static const std::string thrown = "Exception thrown with message:\n";
    if (d.rfind(thrown, 0) == 0) d.erase(0, thrown.size());
    return d;
}

}  // namespace

report::PropertyOutcome run_property(const PropertyDef& p, const KernelInfo& k, const RunConfig& cfg, Stats* stats) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string id = k.name + "/" + p.name;
    rc::detail::TestParams tp;
    tp.seed = cfg.seed ^ fnv1a(id);
    tp.maxSuccess = std::max(1, cfg.cases / p.case_divisor);
    tp.maxSize = 100;
    tp.disableShrinking = !cfg.shrink;
    std::unordered_map<std::string, rc::detail::Reproduce> repro;
    if (!cfg.reproduce.empty()) {
        auto parsed = rc::detail::configFromString(cfg.reproduce);
        repro = parsed.reproduce;
        if (repro.count(id)) tp.seed = parsed.testParams.seed;
    }
    rc::detail::TestMetadata md{id, p.doc};
    Stats local;  // this property's elements only, for its worst case
    WorstCaseListener::Announce announce;
    if (cfg.on_case)
        announce = [&](const rc::detail::Reproduce& r) { cfg.on_case(p.name, reproduce_string(id, tp.seed, r)); };
    WorstCaseListener listener(tp, local, announce);
    if (repro.count(id) && announce) announce(repro.at(id));
    else listener.announce_next();
    auto result = rc::detail::checkTestable(p.make(k, cfg, &local), md, tp, listener, repro);

    report::PropertyOutcome out;
    out.name = p.name;
    rc::detail::SuccessResult ok;
    rc::detail::FailureResult bad;
    rc::detail::GaveUpResult gave;
    rc::detail::Error err;
    const rc::detail::Reproduce* worst = listener.worst();
    if (result.match(ok)) {
        out.passed = true;
        out.cases = ok.numSuccess;
    } else if (result.match(bad)) {
        out.cases = bad.numSuccess + 1;
        out.message = kernel_message(bad.description);
        out.counterexample = show_example(bad.counterExample);
        out.reproduce = reproduce_string(id, tp.seed, bad.reproduce);
    } else if (result.match(gave)) {
        out.cases = gave.numSuccess;
        out.message = "gave up: " + gave.description;
    } else if (result.match(err) && repro.count(id) && err.description == kReplayedPass) {
        // A replayed worst case (not a failure): it passes again.
        out.passed = true;
        out.cases = 1;
        worst = &repro.at(id);
    } else if (result.match(err)) {
        out.message = "error: " + err.description;
    }
    record_worst(out, local, worst ? reproduce_string(id, tp.seed, *worst) : "");
    if (stats) stats->merge(local);
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
    r.stats.profile = profile_for(k).text();
    r.conventions = conventions_text(k.conventions);
    r.domain = parse_domain(k.domain, k.op).text();
    if (r.domain == "{}") r.domain.clear();
    r.unwritten = k.unwritten;
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
    out.max_util_rigorous = s.max_util_rigorous();
    out.util_quantiles_rigorous = s.util_quantiles_rigorous();
    out.not_judged = s.not_judged();
    out.not_judged_reasons = s.not_judged_reasons();
    out.notes = s.notes();
    out.tightest_profile = tightest_profile(s);
    out.regions.clear();
    for (std::size_t r = 0; r < kRegions; ++r)
        out.regions.push_back({name(static_cast<Region>(r)), s.region_elements()[r], s.region_beyond_strict()[r],
                               s.region_max_ulp()[r]});
}

bool runs_for(const PropertyDef& p, const KernelInfo& k) {
    if (p.for_kernel && !p.for_kernel(k)) return false;
    for (const std::string& o : p.needs)
        if (std::find(k.unwritten.begin(), k.unwritten.end(), o) != k.unwritten.end()) return false;
    return true;
}

namespace {

// The first property of the suite that fails for k ("" when all pass),
// the failed ones of an earlier run first: a wrong convention shows there.
std::string first_failure(const KernelInfo& k, const RunConfig& cfg, const std::vector<std::string>& failed_before) {
    std::vector<const PropertyDef*> order;
    const auto defs = properties_for(*find_op(k.op));
    auto failed = [&](const PropertyDef* p) {
        return std::find(failed_before.begin(), failed_before.end(), p->name) != failed_before.end();
    };
    for (const PropertyDef* p : defs) if (failed(p)) order.push_back(p);
    for (const PropertyDef* p : defs) if (!failed(p)) order.push_back(p);
    for (const PropertyDef* p : order) {
        if (!runs_for(*p, k)) continue;
        Stats s;
        if (!run_property(*p, k, cfg, &s).passed) return p->name;
    }
    return "";
}

// Convention inference (docs/numerics.md, "Conventions"): a failing kernel
// judged again under each single-key alternative of its declared
// conventions, then, when none explains it, each two-key one.  A match is
// claimed only when every property passes under it.
void infer_convention(const KernelInfo& k, const RunConfig& cfg, report::KernelReport& r) {
    std::vector<std::string> failed;
    for (const auto& p : r.properties)
        if (!p.passed) failed.push_back(p.name);
    RunConfig quick = cfg;
    quick.shrink = false;
    quick.collect = nullptr;
    quick.characterize = false;
    quick.profile_check = {};
    auto try_all = [&](const std::vector<std::pair<std::string, Conventions>>& alternatives) {
        for (const auto& [text, conventions] : alternatives) {
            KernelInfo alt = k;
            alt.conventions = conventions;
            const std::string fails = first_failure(alt, quick, failed);
            r.conventions_tried.push_back(text + (fails.empty() ? ": every property passes" : ": " + fails + " fails"));
            if (fails.empty() && r.convention_match.empty()) r.convention_match = text;
        }
    };
    try_all(convention_alternatives(k.op, k.conventions));
    // Two declarations together only where no single one explains it.
    if (r.convention_match.empty()) try_all(convention_pairs(k.op, k.conventions));
}

}  // namespace

report::KernelReport run_suite(const KernelInfo& k, const RunConfig& cfg,
                               const std::function<void(const report::PropertyOutcome&)>& on_property) {
    const auto t0 = std::chrono::steady_clock::now();
    report::KernelReport r = describe_kernel(k);
    const Domain domain = parse_domain(k.domain, k.op);
    const DomainScope domain_scope(domain);  // every generated case inside what k declares
    Stats stats, within;
    r.passed = true;
    auto add = [&](report::PropertyOutcome o) {
        r.properties.push_back(std::move(o));
        r.passed = r.passed && r.properties.back().passed;
        if (on_property) on_property(r.properties.back());
    };
    for (const PropertyDef* p : properties_for(*find_op(k.op))) {
        if (!runs_for(*p, k)) continue;
        Stats local;
        add(run_property(*p, k, cfg, &local));
        if (p->name == "within_budget") within.merge(local);
        stats.merge(local);
        if (cfg.fail_fast && !r.passed) {
            fill_stats(r.stats, stats);
            r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            return r;
        }
    }
    // A replayed case is a sample of one: the statistics over the whole
    // sample have nothing to say about it.
    if (cfg.reproduce.empty())
        for (report::PropertyOutcome& o : statistics_outcomes(k, cfg, within)) add(std::move(o));
    // A failing within_budget or special_values stopped at its first
    // counterexample: its statistics describe a few cases.  The report's
    // (tightest profile met, where the errors lie, the worst utilization)
    // come from every case of both, judged without stopping.
    const bool judged_failure = std::any_of(r.properties.begin(), r.properties.end(), [](const report::PropertyOutcome& o) {
        return !o.passed && (o.name == "within_budget" || o.name == "special_values");
    });
    if (judged_failure && k.role != Role::mutant) {  // a mutant needs only its kill
        RunConfig all = cfg;
        all.characterize = true;
        all.shrink = false;
        all.reproduce.clear();
        all.on_case = {};
        Stats full;
        // special_values too: a kernel that fails there at utilization 4e5
        // must not show within_budget's ordinary cases as its worst.
        for (const PropertyDef* p : properties_for(*find_op(k.op)))
            if (p->name == "within_budget" || p->name == "special_values") run_property(*p, k, all, &full);
        stats = std::move(full);
        r.stats.characterized = true;
    }
    for (const auto& c : curves_for(k, cfg)) {
        r.curves.push_back(c);
        r.properties.push_back(curve_outcome(c));
        r.passed = r.passed && c.passed;
        if (on_property) on_property(r.properties.back());
    }
    fill_stats(r.stats, stats);
    if (!r.passed && cfg.infer_conventions && cfg.reproduce.empty() && k.role != Role::mutant) infer_convention(k, cfg, r);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace conform::props
