#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "golden/golden.hpp"
#include "oracle/eval.hpp"
#include "properties/exhaustive.hpp"
#include "properties/suite.hpp"
#include "reports/writers.hpp"

namespace conform::cli {
namespace {

void write_if(const std::string& out, const report::RunReport& r) {
    if (!out.empty()) report::write_report_dir(out, r);
}

std::string outcome_line(const report::KernelReport& k) {
    std::string s = fmt::format("{:<40} {:<8} {}", k.kernel, report::detail::verdict(k),
                                k.stats.has_bound ? fmt::format("max util {:.3f}", k.stats.max_util)
                                                  : fmt::format("max ulp {}", k.stats.max_ulp));
    for (const auto& p : k.properties)
        if (!p.passed && k.role != "baseline")
            s += fmt::format("\n    {} failed: {}\n    reproduce: --reproduce '{}'", p.name, p.message, p.reproduce);
    return s;
}

}  // namespace

int run_mutants(const std::vector<const KernelInfo*>& ks, const props::RunConfig& cfg, report::RunReport& rep);
void run_unary_sweeps(const std::vector<const KernelInfo*>& ks, report::RunReport& rep, const std::string& out);

int cmd_list(bool json, const Selection& s) {
    const auto ks = select(s);
    if (json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto* k : ks)
            arr.push_back({{"name", k->name}, {"op", k->op}, {"variant", k->variant}, {"backend", k->backend},
                           {"in", name(k->in)}, {"out", name(k->out)}, {"acc", name(k->acc)},
                           {"role", name(k->role)}, {"mutant", k->role == Role::mutant},
                           {"bug_class", k->bug_class}, {"description", k->description}});
        std::cout << arr.dump(2) << "\n";
        return 0;
    }
    std::cout << fmt::format("{:<14} {:<44} {:<8} {:<6} {:<6} {:<6} {}\n", "op", "kernel", "backend", "in", "out",
                             "acc", "role");
    for (const auto* k : ks)
        std::cout << fmt::format("{:<14} {:<44} {:<8} {:<6} {:<6} {:<6} {}{}\n", k->op, k->name, k->backend,
                                 name(k->in), name(k->out), name(k->acc), name(k->role),
                                 k->role == Role::mutant ? " (" + k->bug_class + ")" : "");
    return 0;
}

int cmd_run(const Selection& s0, std::uint64_t seed, int cases, const std::string& out, bool baselines,
            const std::string& reproduce, bool mutants, bool exhaustive) {
    Selection s = s0;
    s.roles = {Role::kernel};
    if (baselines) s.roles.push_back(Role::baseline);
    if (!s.kernels.empty()) s.roles.push_back(Role::mutant);  // a mutant named explicitly is run like any kernel
    const auto ks = select(s);
    install_interrupt_handler();
    report::RunReport rep = new_report(seed, cases, s);
    rep.complete = false;
    write_if(out, rep);  // a valid (empty, partial) report exists from the start
    props::RunConfig cfg;
    cfg.seed = seed;
    cfg.cases = cases;
    cfg.reproduce = reproduce;
    for (std::size_t i = 0; i < ks.size() && !interrupted(); ++i) {
        progress(fmt::format("[{}/{}] {} ...", i + 1, ks.size(), ks[i]->name));
        rep.kernels.push_back(props::run_suite(*ks[i], cfg));
        std::cerr << "      " << outcome_line(rep.kernels.back()) << "\n";
        rep.finished = now_iso8601();
        write_if(out, rep);  // partial results survive an interruption
    }
    if (exhaustive) run_unary_sweeps(ks, rep, out);
    if (mutants && !interrupted()) {
        Selection m = s0;
        m.roles = {Role::mutant};
        m.kernels.clear();
        run_mutants(select(m), cfg, rep);
    }
    rep.complete = !interrupted();
    rep.finished = now_iso8601();
    write_if(out, rep);
    std::cout << report::detail::summary_line(rep) << "\n";
    if (!out.empty()) std::cout << "report: " << out << "/report.md (also report.json, report.html, junit.xml)\n";
    if (interrupted()) {
        std::cerr << "conform: interrupted; the partial report covers " << rep.kernels.size() << " kernels\n";
        return 130;
    }
    return rep.passed() ? 0 : 1;
}

// Runs the suite on each mutant into rep.mutants; returns how many were killed.
int run_mutants(const std::vector<const KernelInfo*>& ks, const props::RunConfig& cfg, report::RunReport& rep) {
    int killed = 0;
    for (std::size_t i = 0; i < ks.size() && !interrupted(); ++i) {
        const auto r = props::run_suite(*ks[i], cfg);
        report::MutantResult m{ks[i]->name, ks[i]->op, ks[i]->bug_class, ks[i]->description, !r.passed, ""};
        for (const auto& p : r.properties)
            if (!p.passed) {
                m.killed_by = p.name;
                break;
            }
        killed += m.killed;
        std::cout << fmt::format("[{}/{}] {:<48} {}\n", i + 1, ks.size(), m.kernel,
                                 m.killed ? "killed by " + m.killed_by : "SURVIVED (" + m.description + ")");
        rep.mutants.push_back(m);
    }
    std::cout << "kill rate: " << killed << "/" << rep.mutants.size() << "\n";
    return killed;
}

int cmd_mutate(const Selection& s0, std::uint64_t seed, int cases, const std::string& out) {
    Selection s = s0;
    s.roles = {Role::mutant};
    const auto ks = select(s);
    install_interrupt_handler();
    report::RunReport rep = new_report(seed, cases, s);
    props::RunConfig cfg;
    cfg.seed = seed;
    cfg.cases = cases;
    const int killed = run_mutants(ks, cfg, rep);
    rep.complete = !interrupted();
    rep.finished = now_iso8601();
    write_if(out, rep);
    if (interrupted()) return 130;
    return killed == static_cast<int>(ks.size()) ? 0 : 1;
}

// Every 16-bit input of the selected unary simd kernels, into rep.exhaustive.
void run_unary_sweeps(const std::vector<const KernelInfo*>& ks, report::RunReport& rep, const std::string& out) {
    for (const auto* k : ks) {
        if (interrupted()) return;
        if (k->role != Role::kernel || k->variant != "simd" || find_op(k->op)->kind != OpKind::unary ||
            (k->in != Format::fp16 && k->in != Format::bf16))
            continue;
        progress("exhaustive " + k->name);
        rep.exhaustive.push_back(props::sweep_unary(*k, Params::defaults(*find_op(k->op))));
        write_if(out, rep);
    }
}

int cmd_exhaustive(const Selection& s0, const std::string& out, int threads) {
    Selection s = s0;
    s.roles = {Role::kernel};
    if (s.ops.empty()) throw UsageError("exhaustive needs --op (an elementwise op)");
    if (s.dtypes.empty()) throw UsageError("exhaustive needs --dtype fp16 or bf16");
    for (const auto& d : s.dtypes)
        if (d != "fp16" && d != "bf16") throw UsageError("exhaustive sweeps take --dtype fp16 or bf16, not '" + d + "'");
    for (const auto& op : s.ops)
        if (find_op(op) && find_op(op)->kind == OpKind::row)
            throw UsageError("'" + op + "' is a row reduction; exhaustive sweeps cover elementwise and gated ops");
    auto ks = select(s);
    if (s0.kernels.empty()) {  // default: the simd kernel of each op and dtype
        std::vector<const KernelInfo*> simd;
        for (const auto* k : ks)
            if (k->variant == "simd") simd.push_back(k);
        ks = simd;
    }
    report::RunReport rep = new_report(0, 0, s);
    install_interrupt_handler();
    bool ok = true;
    for (const auto* k : ks) {
        if (interrupted()) break;
        const OpSpec& op = *find_op(k->op);
        props::SweepOptions opt;
        opt.threads = threads;
        opt.cancelled = interrupted;
        opt.progress = [&](double f) { std::cerr << fmt::format("\r{} {:5.1f}%", k->name, 100 * f) << std::flush; };
        const Params p = Params::defaults(op);
        auto r = op.kind == OpKind::gated ? props::sweep_gated(*k, p, opt) : props::sweep_unary(*k, p, opt);
        std::cerr << "\r";
        std::cout << fmt::format("{:<36} {} inputs  max ulp {} (budget {})  class mismatches {}  {:.1f} s  {}\n",
                                 k->name, r.inputs, r.max_ulp, r.budget_ulp, r.class_mismatches, r.seconds,
                                 r.passed ? "PASS" : "FAIL");
        std::cout << "    worst: " << r.worst_input << "\n";
        ok = ok && r.passed;
        rep.exhaustive.push_back(r);
        write_if(out, rep);
    }
    rep.complete = !interrupted();
    rep.finished = now_iso8601();
    write_if(out, rep);
    if (interrupted()) return 130;
    return ok ? 0 : 1;
}

int cmd_golden(bool regenerate, bool profiles, const std::string& dir_arg) {
    const std::filesystem::path dir = dir_arg.empty() ? golden::default_dir() : std::filesystem::path(dir_arg);
    int bad = 0;
    for (const auto& op : op_specs())
        for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
            const auto file = golden::vector_file(dir, op.name, f);
            if (regenerate) {
                golden::write_vectors(file, golden::make_vectors(op.name, f));
                continue;
            }
            for (const auto& v : golden::read_vectors(file)) {
                std::vector<TensorView> views;
                for (const auto& t : v.inputs) views.push_back(t.view());
                const auto r = oracle::evaluate(*find_op(v.op), v.params, views, v.format);
                for (std::int64_t i = 0; i < v.expected.numel(); ++i)
                    if (r.rounded.bits(i) != v.expected.bits(i)) {
                        ++bad;
                        std::cout << file.string() << ": element " << i << " differs\n";
                        break;
                    }
            }
        }
    if (profiles) {
        props::RunConfig cfg;  // the recorded seed and case count
        golden::Profile probe;
        cfg.seed = probe.seed;
        cfg.cases = probe.cases;
        for (const auto& k : builtin_registry().all()) {
            if (k.role != Role::kernel) continue;
            progress("profile " + k.name);
            golden::write_profile(golden::profile_file(dir, k.name),
                                  golden::profile_of(props::run_suite(k, cfg), cfg.seed, cfg.cases));
        }
    }
    std::cout << (regenerate ? "golden vectors regenerated in " : "golden vectors checked in ") << dir.string()
              << (bad ? ": " + std::to_string(bad) + " differ\n" : "\n");
    return bad ? 1 : 0;
}

}  // namespace conform::cli
