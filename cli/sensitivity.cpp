// conform sensitivity: for each built-in kernel, the smallest factor k such
// that the kernel with its error amplified k-fold is rejected
// (properties/sensitivity.hpp, docs/numerics.md "Sensitivity").
#include <fmt/format.h>

#include <iostream>

#include "cli/common.hpp"
#include "golden/golden.hpp"
#include "properties/sensitivity.hpp"
#include "properties/statistics.hpp"

namespace conform::cli {
namespace {

struct SensitivityOptions {
    Selection selection;
    std::uint64_t seed = 1;
    int cases = 100;
    bool explain = false;
};

// What run_suite checks over the within_budget sample: rounding bias, and
// drift from the recorded error profile (golden/profiles/), which pairs
// cases and so applies only to a sample of the recorded seed and count.
std::vector<props::SampleCheck> sample_checks(const KernelInfo& k, const props::RunConfig& cfg) {
    const char* unit = props::vote_unit(*find_op(k.op));
    std::vector<props::SampleCheck> checks{[unit](const props::Stats& s) { return props::rounding_bias(s, unit); }};
    const auto rec = golden::read_profile(golden::profile_file(golden::default_dir(), k.name));
    if (rec && rec->seed == cfg.seed && rec->cases == cfg.cases)
        checks.push_back([rec, &k](const props::Stats& s) { return golden::drift(*rec, k, s); });
    return checks;
}

int run(const SensitivityOptions& o) {
    Selection sel = o.selection;
    sel.roles = {Role::kernel};
    const auto ks = select(sel);
    install_interrupt_handler();
    props::RunConfig cfg;
    cfg.seed = o.seed;
    cfg.cases = o.cases;
    if (o.seed != golden::kProfileSeed || o.cases != golden::kProfileCases)
        std::cout << fmt::format("note: the error profiles pair the cases of seed {} at {} cases; this sample is "
                                 "judged without them\n",
                                 golden::kProfileSeed, golden::kProfileCases);
    double worst = 0;
    std::string worst_kernel;
    bool ok = true;
    for (std::size_t i = 0; i < ks.size() && !interrupted(); ++i) {
        const KernelInfo& k = *ks[i];
        progress(fmt::format("[{}/{}] {} ...", i + 1, ks.size(), k.name));
        const auto cases = props::sample_cases(k, cfg);
        const auto checks = sample_checks(k, cfg);
        const props::Sensitivity s = props::find_sensitivity(cases, props::profile_for(k), checks);
        std::string line = fmt::format("{:<40} {}", k.name, props::text(s));
        if (s.status == props::Sensitivity::Status::detected) {
            if (s.correctly_rounded)
                line += " (correctly rounded: no gate rejects it below x2, or below x1.5 just above a power of two)";
            if (s.factor > worst) worst = s.factor, worst_kernel = k.name;
            if (o.explain) line += "\n    by: " + s.detected_by;
        }
        if (s.status == props::Sensitivity::Status::fails_unamplified || s.status == props::Sensitivity::Status::not_detected)
            ok = false;
        if (o.explain) {
            const props::SampleVerdict v = props::judge_sample(cases, props::profile_for(k), 1, checks);
            const auto q = v.stats.util_quantiles(), qr = v.stats.util_quantiles_rigorous();
            if (!q.empty())
            {
                double mean = 0;
                for (double u : v.stats.utils()) mean += u / static_cast<double>(v.stats.utils().size());
                line += fmt::format("\n    util p50 {:.3g} p90 {:.3g} p99 {:.3g} p99.9 {:.3g} max {:.3g} mean {:.3g}; rigorous max {:.3g}; not judged {}",
                                    q[0], q[1], q[2], q[3], q[4], mean, qr[4], v.stats.not_judged());
            }
            for (const auto& [why, n] : v.stats.not_judged_reasons()) line += fmt::format("\n    not judged: {} ({})", why, n);
            line += fmt::format("\n    votes above {}:{} away {}:{}", v.stats.votes_for()[0], v.stats.votes_against()[0],
                                v.stats.votes_for()[1], v.stats.votes_against()[1]);
        }
        std::cout << line << "\n" << std::flush;
    }
    if (!worst_kernel.empty()) std::cout << fmt::format("worst: x{:.2f} ({})\n", worst, worst_kernel);
    if (interrupted()) return 130;
    return ok ? 0 : 1;
}

}  // namespace

Subcommand add_sensitivity(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "sensitivity",
        "for each built-in kernel, the smallest factor k such that the kernel with its error amplified k-fold "
        "(exact + k (kernel - exact), rounded) is rejected: how sharp the gate is (docs/numerics.md)");
    auto o = std::make_shared<SensitivityOptions>();
    cmd->add_option("--op", o->selection.ops, "op to include (repeatable; default: all)");
    cmd->add_option("--dtype", o->selection.dtypes, "input format to include: fp32, fp16, bf16 (repeatable)");
    cmd->add_option("--kernel", o->selection.kernels, "exact kernel name to include (repeatable)");
    cmd->add_option("--seed", o->seed, "seed of the cases (as conform run; the error profiles pair the cases of the default seed and count)")->capture_default_str();
    cmd->add_option("--cases", o->cases, "cases of each oracle comparison")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_flag("--explain", o->explain, "also print what rejects each kernel and its error statistics");
    return {cmd, [o] { return run(*o); }};
}

}  // namespace conform::cli
