#include "cli/common.hpp"

#include <set>
#include "numerics/conventions.hpp"
#include "numerics/profile.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <ctime>
#include <fstream>
#include <iostream>

#include "impls/cpu/isa.hpp"
#include "impls/cuda/cuda.hpp"
#include "impls/onednn/onednn.hpp"

namespace conform::cli {
namespace {
std::atomic<bool> g_interrupted{false};
extern "C" void on_signal(int) { g_interrupted = true; }
}  // namespace

std::string join(const std::vector<std::string>& v, const std::string& sep) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
    return s;
}

namespace {

constexpr const char* kBackends = "cpu, onednn, cuda, cuda-emu";

bool has(const std::vector<std::string>& v, const std::string& x) {
    return v.empty() || std::find(v.begin(), v.end(), x) != v.end();
}

// A third-party or device backend: its registry and what it cannot run here.
const BackendRegistry* backend_of(const std::string& name) {
    if (name == "onednn") return &onednn_registry();
    if (name == "cuda") return &cuda_registry();
    if (name == "cuda-emu") return &cuda_emu_registry();
    return nullptr;
}

const Registry& registry_of(const Selection& s) {
    if (s.backend == "cpu") return builtin_registry();
    if (const BackendRegistry* b = backend_of(s.backend)) return b->kernels;
    throw UsageError("unknown backend '" + s.backend + "' (known: " + kBackends + ")");
}

bool not_provided_name(const Selection& s, const std::string& kernel) {
    const BackendRegistry* b = backend_of(s.backend);
    if (!b) return false;
    for (const auto& n : b->not_provided)
        if (n.kernel == kernel) return true;
    return false;
}

}  // namespace

std::vector<const KernelInfo*> select(const Selection& s) {
    for (const auto& op : s.ops)
        if (!find_op(op)) throw UsageError("unknown op '" + op + "' (known: " + join(op_names()) + ")");
    for (const auto& d : s.dtypes) {
        auto f = parse_format(d);
        if (!f || (*f != Format::fp32 && *f != Format::fp16 && *f != Format::bf16))
            throw UsageError("unknown dtype '" + d + "' (known: fp32, fp16, bf16)");
    }
    const Registry& reg = registry_of(s);
    for (const auto& k : s.kernels)
        if (!reg.find(k) && !not_provided_name(s, k)) throw UsageError("unknown kernel '" + k + "' (see 'conform list')");
    std::vector<const KernelInfo*> out;
    for (const auto& k : reg.all()) {
        const bool role_ok = s.roles.empty() || std::find(s.roles.begin(), s.roles.end(), k.role) != s.roles.end();
        if (role_ok && has(s.ops, k.op) && has(s.dtypes, name(k.in)) && has(s.kernels, k.name)) out.push_back(&k);
    }
    if (out.empty() && select_not_provided(s).empty())
        throw UsageError("no kernel matches the selection (--op " + join(s.ops) + " --dtype " + join(s.dtypes) + ")");
    return out;
}

std::vector<report::NotProvided> select_not_provided(const Selection& s) {
    std::vector<report::NotProvided> out;
    const BackendRegistry* b = backend_of(s.backend);
    if (!b) return out;
    for (const auto& n : b->not_provided)
        if (has(s.ops, n.op) && has(s.dtypes, n.format) && has(s.kernels, n.kernel))
            out.push_back({n.kernel, n.op, n.format, s.backend, n.reason});
    return out;
}

std::string now_iso8601() {
    std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

std::string machine_description() {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model = "unknown cpu";
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0) {
            model = line.substr(line.find(':') + 2);
            break;
        }
    return model + ", kernels dispatched to " + cpu::isa_name();
}

report::RunReport new_report(std::uint64_t seed, int cases, const Selection& s) {
    report::RunReport r;
    r.tool_version = "conform 0.1.0";
    r.started = now_iso8601();
    r.seed = seed;
    r.cases = cases;
    r.machine = machine_description();
    if (!s.ops.empty()) r.selection["op"] = join(s.ops);
    if (!s.dtypes.empty()) r.selection["dtype"] = join(s.dtypes);
    if (!s.kernels.empty()) r.selection["kernel"] = join(s.kernels);
    if (s.backend != "cpu") {
        r.selection["backend"] = s.backend;
        r.machine += "; " + backend_of(s.backend)->library;
        r.not_provided = select_not_provided(s);
    }
    return r;
}

void install_interrupt_handler() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C ends the process at once
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

bool interrupted() { return g_interrupted; }

void progress(const std::string& line) { std::cerr << line << std::endl; }

std::string table_cell(std::string s) {
    for (char& c : s)
        if (c == '|' || c == '\n') c = ' ';
    return s;
}

std::map<std::string, std::string> parse_key_values(const std::vector<std::string>& texts) {
    std::map<std::string, std::string> c;
    for (const std::string& t : texts) {
        const auto eq = t.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == t.size())
            throw UsageError("--convention " + t + ": expected KEY=VALUE, e.g. eps_placement=outside");
        c[t.substr(0, eq)] = t.substr(eq + 1);
    }
    return c;
}

std::string convention_lines(const report::KernelReport& k) {
    if (k.conventions_tried.empty()) return "";
    std::string s = k.convention_match.empty()
                        ? "\n    conventions: no declarable convention explains the failures (a defect, not a convention)"
                        : "\n    conventions: passes if it declares " + k.convention_match;
    for (const std::string& t : k.conventions_tried) s += "\n      tried " + t;
    return s;
}

std::vector<KernelInfo> with_profile(const std::vector<const KernelInfo*>& ks, const std::string& profile,
                                     const std::vector<std::string>& convention_texts) {
    if (!profile.empty()) {
        try {
            props::parse_profile(profile);
        } catch (const std::invalid_argument& e) {
            throw UsageError(std::string("--profile: ") + e.what());
        }
    }
    const Conventions declared = parse_key_values(convention_texts);
    try {
        check_conventions(declared);
    } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("--convention: ") + e.what());
    }
    std::set<std::string> used;
    std::vector<KernelInfo> out;
    for (const KernelInfo* k : ks) {
        out.push_back(*k);
        if (!profile.empty()) out.back().profile = profile;
        for (const ConventionSpec* spec : convention_specs_for(k->op))
            if (auto it = declared.find(spec->key); it != declared.end()) out.back().conventions[it->first] = it->second, used.insert(it->first);
        try {
            check_conventions(out.back().conventions, k->op);
        } catch (const std::invalid_argument& e) {
            throw UsageError("--convention: " + k->name + ": " + e.what());
        }
    }
    for (const auto& [key, value] : declared)
        if (!used.count(key)) throw UsageError("--convention " + key + "=" + value + ": no selected kernel's op has it (see conform ops)");
    return out;
}

}  // namespace conform::cli
