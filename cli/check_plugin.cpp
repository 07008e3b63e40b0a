// conform check-plugin LIB.so: the property suite against every kernel a
// plug-in exports (include/conform/plugin.h, docs/plugins.md), each kernel in
// a forked child with a time limit.  The child streams to the parent, over a
// pipe, one line per event:
//   C {"property":..., "reproduce":...}  the case about to run
//   P {PropertyOutcome}                   a property finished
//   K {KernelReport}                      the suite finished
//   E message                             the suite threw
//   F description                         a fatal signal (from the handler)
// so that a crash, a hang or a write outside the outputs is reported as that
// kernel's failure, in the property and case that were running, and the run
// goes on with the next kernel.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "golden/golden.hpp"
#include "impls/plugin.hpp"
#include "properties/suite.hpp"
#include "reports/atomic_file.hpp"
#include "reports/writers.hpp"

// A sanitized conform (CONFORM_SANITIZE) may load a plug-in that was built
// with sanitizers too: a report there ends the child through the sanitizer's
// own exit (status 1), not a signal.  The death callback tells the parent.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define CONFORM_SANITIZER_RUNTIME 1
#endif

namespace conform::cli {
namespace {

using nlohmann::json;

// ---- child ----------------------------------------------------------------------

int g_pipe = -1;  // the child's write end, for the signal handler

void write_all(int fd, const char* p, std::size_t n) {
    while (n) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;  // the parent is gone: nothing left to tell
        p += w, n -= static_cast<std::size_t>(w);
    }
}

void send(char tag, const std::string& body) {
    std::string line = std::string(1, tag) + " " + body;
    for (char& c : line)
        if (c == '\n') c = ' ';
    line += '\n';
    write_all(g_pipe, line.data(), line.size());
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Async-signal-safe: strsignal and fault descriptions come from fixed text.
extern "C" void on_fatal_signal(int sig, siginfo_t* info, void*) {
    char buf[256] = "F ";
    const char* what = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
                     : sig == SIGILL  ? "SIGILL"  : "SIGABRT";
    std::strcat(buf, what);
    char fault[200];
    if ((sig == SIGSEGV || sig == SIGBUS) && plugin::describe_fault(info->si_addr, fault, sizeof fault)) {
        std::strcat(buf, ": ");
        std::strncat(buf, fault, sizeof buf - std::strlen(buf) - 2);
    }
    std::strcat(buf, "\n");
    write_all(g_pipe, buf, std::strlen(buf));
    raise(sig);  // SA_RESETHAND: the default action ends the process with this signal
}

// The sanitizer's report is on stderr; the parent only needs to know that one
// stopped the process (fixed text: this runs inside the sanitizer's Die()).
[[maybe_unused]] void on_sanitizer_death() {
    static const char line[] = "F sanitizer: a sanitizer stopped the kernel (its report is on stderr)\n";
    write_all(g_pipe, line, sizeof line - 1);
}

void install_fatal_handlers() {
    static char alt_stack[64 * 1024];  // a stack overflow must still reach the handler
    stack_t ss{};
    ss.ss_sp = alt_stack;
    ss.ss_size = sizeof alt_stack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
    signal(SIGINT, SIG_IGN);  // Ctrl-C is the parent's to handle: it kills the child
#ifdef CONFORM_SANITIZER_RUNTIME
    __sanitizer_set_death_callback(on_sanitizer_death);
    // GCC links UBSan as a runtime of its own beside ASan, with its own copy of
    // the callback list: register there too (a UBSan report ends through it).
    if (void* ub = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD)) {
        using SetCallback = void (*)(void (*)());
        if (auto set = reinterpret_cast<SetCallback>(dlsym(ub, "__sanitizer_set_death_callback"))) set(on_sanitizer_death);
        dlclose(ub);  // NOLOAD only added a reference: the runtime stays loaded
    }
#endif
}

// The kernel's error profile (golden/golden.hpp, recorded inside its
// declared domain), in the child too: recording calls the kernel.
void record_profile(const KernelInfo& k, const std::string& dir) {
    std::filesystem::create_directories(dir);
    golden::write_profile(golden::profile_path(dir, k.name), golden::record_profile(k));
}

[[noreturn]] void child_main(const KernelInfo& k, props::RunConfig cfg, int fd, const std::string& record_dir) {
    g_pipe = fd;
    install_fatal_handlers();
    cfg.on_case = [](const std::string& property, const std::string& reproduce) {
        send('C', dump({{"property", property}, {"reproduce", reproduce}}));
    };
    try {
        if (!record_dir.empty()) record_profile(k, record_dir);
        const auto r = props::run_suite(k, cfg, [](const report::PropertyOutcome& p) { send('P', dump(report::to_json(p))); });
        send('K', dump(report::to_json(r)));
        _exit(0);
    } catch (const std::exception& e) {
        send('E', e.what());
    }
    _exit(3);
}

// ---- parent ---------------------------------------------------------------------

// How a kernel's child ended, and what it said before.
struct Isolated {
    report::KernelReport report;
    std::string status = "completed";  // completed | crashed | timed out | error
    std::string message;                // why the child did not complete
    std::string property, reproduce;    // the case in flight when it ended
    std::string description;            // the descriptor's, for the reports
};

class ChildStream {
public:
    explicit ChildStream(Isolated& r) : r_(r) {}
    void feed(const char* p, std::size_t n) {
        buf_.append(p, n);
        for (std::size_t nl; (nl = buf_.find('\n')) != std::string::npos; buf_.erase(0, nl + 1)) line(buf_.substr(0, nl));
    }
    bool finished() const { return finished_; }
    const std::vector<report::PropertyOutcome>& properties() const { return props_; }
    std::string fault, error;

private:
    void line(const std::string& l) {
        if (l.size() < 2) return;
        const std::string body = l.substr(2);
        if (l[0] == 'F') fault = body;
        if (l[0] == 'E') error = body;
        if (l[0] != 'C' && l[0] != 'P' && l[0] != 'K') return;
        try {
            const json j = json::parse(body);
            if (l[0] == 'C') r_.property = j.at("property"), r_.reproduce = j.at("reproduce");
            if (l[0] == 'P') props_.push_back(report::property_from_json(j, "property"));
            if (l[0] == 'K') r_.report = report::kernel_from_json(j, "kernel"), finished_ = true;
        } catch (const std::exception& e) {  // a kernel that scribbled on the suite's memory
            error = std::string("unreadable message from the child process: ") + e.what();
        }
    }
    Isolated& r_;
    std::string buf_;
    std::vector<report::PropertyOutcome> props_;
    bool finished_ = false;
};

// Reads the child's lines until it closes the pipe, the deadline passes
// (then kills it) or the user interrupts; returns whether it was killed.
bool pump(int fd, pid_t pid, double timeout_s, ChildStream& stream) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    char chunk[65536];
    bool killed = false;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (!killed && (left.count() <= 0 || interrupted())) {
            kill(pid, SIGKILL);  // then drain what it wrote until EOF
            killed = true;
        }
        pollfd p{fd, POLLIN, 0};
        const int ready = poll(&p, 1, killed ? 1000 : static_cast<int>(std::min<long long>(left.count(), 200)));
        if (ready <= 0) continue;
        const ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return killed;
        stream.feed(chunk, static_cast<std::size_t>(n));
    }
}

std::string signal_text(int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return fmt::format("killed by SIG{} ({})", abbrev ? abbrev : std::to_string(sig), strsignal(sig));
}

// The report of a child that did not finish: what it completed, plus the
// property in flight failed with the reason and the case that reproduces it.
void add_abort(Isolated& r, const KernelInfo& k, const ChildStream& s) {
    r.report = props::describe_kernel(k);
    r.report.properties = s.properties();
    r.report.passed = false;
    report::PropertyOutcome o;
    o.name = r.property.empty() ? "isolation" : r.property;
    o.message = r.status + ": " + r.message;
    o.reproduce = r.reproduce;
    o.counterexample = "(the case the reproduce string replays; the child process ended before it could be shown)";
    r.report.properties.push_back(o);
}

Isolated run_isolated(const KernelInfo& k, const props::RunConfig& cfg, double timeout_s, const std::string& record_dir) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::cout.flush(), std::cerr.flush();
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        child_main(k, cfg, fds[1], record_dir);
    }
    close(fds[1]);
    Isolated r;
    r.description = k.description;
    ChildStream stream(r);
    const bool killed = pump(fds[0], pid, timeout_s, stream);
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (stream.finished() && WIFEXITED(status) && WEXITSTATUS(status) == 0) return r;
    if (killed) {
        r.status = interrupted() ? "interrupted" : "timed out";
        r.message = interrupted() ? "stopped by the user" : fmt::format("still running after {} s; killed", timeout_s);
    } else if (WIFSIGNALED(status)) {
        r.status = "crashed";
        r.message = signal_text(WTERMSIG(status)) + (stream.fault.find(':') != std::string::npos
                                                         ? " —" + stream.fault.substr(stream.fault.find(':') + 1)
                                                         : "");
    } else if (stream.fault.rfind("sanitizer:", 0) == 0) {
        r.status = "crashed";
        r.message = fmt::format("exited with status {} —{}", WEXITSTATUS(status), stream.fault.substr(10));
    } else {
        r.status = "error";
        r.message = !stream.error.empty() ? stream.error : fmt::format("the child exited with status {}", WEXITSTATUS(status));
    }
    add_abort(r, k, stream);
    return r;
}

// ---- selection and reports ---------------------------------------------------------

std::vector<const KernelInfo*> select_plugin(const plugin::Library& lib, const Selection& s) {
    for (const auto& op : s.ops)
        if (!find_op(op)) throw UsageError("unknown op '" + op + "' (known: " + join(op_names()) + ")");
    std::vector<std::string> names;
    for (const auto& k : lib.kernels) names.push_back(k.name);
    for (const auto& n : s.kernels)
        if (std::find(names.begin(), names.end(), n) == names.end())
            throw UsageError(lib.path + ": no kernel '" + n + "' (it exports: " + join(names) + ")");
    auto has = [](const std::vector<std::string>& v, const std::string& x) {
        return v.empty() || std::find(v.begin(), v.end(), x) != v.end();
    };
    std::vector<const KernelInfo*> out;
    for (const auto& k : lib.kernels)
        if (has(s.ops, k.op) && has(s.kernels, k.name)) out.push_back(&k);
    if (out.empty()) throw UsageError(lib.path + ": no kernel matches the selection (--op " + join(s.ops) + ")");
    return out;
}

std::string reproduce_command(const std::string& lib, const std::string& kernel, const std::string& repro) {
    return fmt::format("conform check-plugin {} --kernel {} --reproduce '{}'", lib, kernel, repro);
}

json to_json(const std::string& lib, const report::RunReport& rep, const std::vector<Isolated>& runs) {
    json j = report::to_json(rep);
    json iso = json::array();
    for (const auto& r : runs)
        iso.push_back({{"kernel", r.report.kernel}, {"description", r.description}, {"status", r.status}, {"message", r.message},
                       {"property", r.property}, {"reproduce", r.status == "completed" ? "" : r.reproduce}});
    return {{"schema", "conform.check-plugin/1"}, {"library", lib}, {"isolation", iso}, {"report", j}};
}

std::string kernel_row(const Isolated& r) {
    const auto& k = r.report;
    const std::string worst = k.stats.has_bound ? "util " + report::detail::number(k.stats.max_util)
                                                : fmt::format("ulp {}", k.stats.max_ulp);
    return fmt::format("| `{}` | {} | {} | {} | {} | {} | {:.1f} |\n", k.kernel, k.op, report::detail::formats(k),
                       report::detail::pass_fail(k.passed), r.status, worst, k.seconds);
}

std::string failures_md(const std::string& lib, const Isolated& r) {
    std::string s = fmt::format("\n### `{}`\n\n{}", r.report.kernel, r.description.empty() ? "" : table_cell(r.description) + "\n\n");
    if (!r.report.convention_match.empty())
        s += fmt::format("**Passes if it declares `{}`** (every property passes under it).\n\n", r.report.convention_match);
    else if (!r.report.conventions_tried.empty())
        s += "No declarable convention explains the failures: a defect.\n\n";
    for (const auto& t : r.report.conventions_tried) s += fmt::format("- tried `{}`\n", table_cell(t));
    if (!r.report.conventions_tried.empty()) s += "\n";
    for (const auto& p : r.report.properties) {
        if (p.passed) continue;
        s += fmt::format("- **{}**: {}\n", p.name, table_cell(p.message));
        if (!p.counterexample.empty()) s += fmt::format("  - case: {}\n", table_cell(p.counterexample));
        if (!p.reproduce.empty()) s += fmt::format("  - reproduce: `{}`\n", reproduce_command(lib, r.report.kernel, p.reproduce));
    }
    return s;
}

// What each kernel declares beyond its formats (conventions, accuracy
// profile, ABI v2's domain and unwritten outputs): the verdict holds it to them.
std::string declarations_md(const std::vector<Isolated>& runs) {
    std::string s;
    for (const auto& r : runs) {
        const auto& k = r.report;
        std::vector<std::string> d;
        if (!k.conventions.empty()) d.push_back("conventions `" + k.conventions + "`");
        if (!k.stats.profile.empty() && k.stats.profile != "strict") d.push_back("profile `" + k.stats.profile + "`");
        if (!k.domain.empty()) d.push_back("domain `" + k.domain + "`");
        if (!k.unwritten.empty()) d.push_back("does not write `" + join(k.unwritten) + "` (not judged)");
        if (!d.empty()) s += fmt::format("- `{}`: {}\n", k.kernel, table_cell(fmt::format("{}", fmt::join(d, "; "))));
    }
    return s.empty() ? s : "\n## Declarations\n\n" + s;
}

std::string to_markdown(const std::string& lib, const report::RunReport& rep, const std::vector<Isolated>& runs) {
    int passed = 0;
    for (const auto& r : runs) passed += r.report.passed;
    std::string s = fmt::format(
        "# conform check-plugin\n\n- library: `{}`\n- seed {}, {} cases per property\n- {} — {}\n- machine: {}\n- "
        "{}: {}/{} kernels pass\n\n| kernel | op | formats | verdict | child | worst | seconds |\n"
        "|---|---|---|---|---|---|---|\n",
        lib, rep.seed, rep.cases, rep.started, rep.finished, rep.machine, rep.complete ? "complete" : "INTERRUPTED (partial)",
        passed, runs.size());
    for (const auto& r : runs) s += kernel_row(r);
    s += declarations_md(runs);
    if (passed != static_cast<int>(runs.size())) s += "\n## Failures\n";
    for (const auto& r : runs)
        if (!r.report.passed) s += failures_md(lib, r);
    return s;
}

void write_reports(const std::string& out, const std::string& lib, const report::RunReport& rep,
                   const std::vector<Isolated>& runs) {
    if (out.empty()) return;
    std::filesystem::create_directories(out);
    report::write_file_atomic(std::filesystem::path(out) / "check-plugin.md", to_markdown(lib, rep, runs));
    report::write_file_atomic(std::filesystem::path(out) / "check-plugin.json", to_json(lib, rep, runs).dump(2, ' ', false, json::error_handler_t::replace) + "\n");
    report::write_file_atomic(std::filesystem::path(out) / "junit.xml", report::to_junit(rep));  // for CI test reporters
}

void print_outcome(const std::string& lib, const Isolated& r) {
    const auto& k = r.report;
    std::cout << fmt::format("{:<40} {:<5} {}\n", k.kernel, report::detail::pass_fail(k.passed),
                             r.status == "completed" ? "" : r.status);
    for (const auto& p : k.properties)
        if (!p.passed)
            std::cout << fmt::format("    {} failed: {}\n    reproduce: {}\n", p.name, p.message,
                                     p.reproduce.empty() ? "-" : reproduce_command(lib, k.kernel, p.reproduce));
    if (const std::string c = convention_lines(k); !c.empty()) std::cout << c.substr(1) << "\n";
}

}  // namespace

int cmd_check_plugin(const CheckPluginOptions& o) {
    plugin::Library lib;
    try {
        lib = plugin::load(o.library);
    } catch (const plugin::LoadError& e) {
        throw UsageError(e.what());
    }
    const std::vector<KernelInfo> ks = with_profile(select_plugin(lib, o.selection), o.profile, o.conventions);
    install_interrupt_handler();
    report::RunReport rep = new_report(o.seed, o.cases, o.selection);
    rep.selection["library"] = o.library;
    rep.complete = false;
    props::RunConfig cfg;
    cfg.seed = o.seed;
    cfg.cases = o.cases;
    cfg.reproduce = o.reproduce;
    cfg.shrink = o.shrink;
    cfg.infer_conventions = o.infer;
    cfg.fail_fast = o.fail_fast;
    if (o.fail_fast) rep.selection["fail_fast"] = "true";
    if (!o.against_profile.empty()) {
        // A CI gate: every selected kernel must have its recorded profile.
        std::vector<std::string> missing;
        for (const KernelInfo& k : ks)
            if (!std::filesystem::exists(golden::profile_path(o.against_profile, k.name))) missing.push_back(k.name);
        if (!missing.empty())
            throw UsageError("--against-profile " + o.against_profile + ": no recorded profile for " + join(missing) +
                             " (record them with --record-profile)");
        cfg.profile_check = golden::profiles_checker(o.against_profile);
    }
    std::vector<Isolated> runs;
    write_reports(o.out, o.library, rep, runs);
    for (std::size_t i = 0; i < ks.size() && !interrupted(); ++i) {
        progress(fmt::format("[{}/{}] {} ({}) ...", i + 1, ks.size(), ks[i].name, ks[i].op));
        runs.push_back(run_isolated(ks[i], cfg, o.timeout_s, o.record_profile));
        rep.kernels.push_back(runs.back().report);
        progress(fmt::format("      {} {}", report::detail::pass_fail(runs.back().report.passed), runs.back().status));
        print_outcome(o.library, runs.back());
        rep.finished = now_iso8601();
        write_reports(o.out, o.library, rep, runs);  // partial results survive an interruption
    }
    rep.complete = !interrupted();
    rep.finished = now_iso8601();
    write_reports(o.out, o.library, rep, runs);
    int failed = 0;
    for (const auto& r : runs) failed += !r.report.passed;
    std::cout << fmt::format("{} kernels: {} pass, {} fail\n", runs.size(), runs.size() - failed, failed);
    if (!o.out.empty()) std::cout << "report: " << o.out << "/check-plugin.md (also check-plugin.json, junit.xml)\n";
    if (!o.record_profile.empty()) std::cout << "profiles: " << o.record_profile << "/<kernel>.json\n";
    if (interrupted()) return 130;
    return failed ? 1 : 0;
}

}  // namespace conform::cli
