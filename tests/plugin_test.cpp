// Plug-ins (include/conform/plugin.h, docs/plugins.md): the loader's checks
// and guarded calls in process, and `conform check-plugin` end to end on the
// example plug-in (passes), the misbehaving one (each fault is that kernel's
// failure with a reproducing case, and the other kernels still run), broken
// tables (exit 2 naming file and field) and the project's mutants exported
// through the C ABI (every one killed).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "impls/plugin.hpp"
#include "impls/registry.hpp"
#include "properties/suite.hpp"

namespace plugin_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Ran {
    int status = -1;
    std::string output;  // stdout and stderr
};

Ran run_conform(const std::string& args) {
    Ran r;
    FILE* p = popen((std::string(CONFORM_BINARY) + " " + args + " 2>&1").c_str(), "r");
    if (!p) return r;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
    const int rc = pclose(p);
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    return r;
}

fs::path fresh_dir(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / (name + "." + std::to_string(getpid()));
    fs::remove_all(d);
    return d;
}

std::string read_text(const fs::path& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

json read_json(const fs::path& p) {
    std::ifstream in(p);
    return json::parse(in);
}

// check-plugin.json's isolation entries and kernel reports, by kernel name.
struct KernelResult {
    json isolation, report;
};
std::map<std::string, KernelResult> results(const json& j) {
    std::map<std::string, KernelResult> m;
    for (const auto& i : j.at("isolation")) m[i.at("kernel")].isolation = i;
    for (const auto& k : j.at("report").at("kernels")) m[k.at("kernel")].report = k;
    return m;
}

// The first failed property of a kernel report (null when every one passed).
json first_failure(const json& kernel) {
    for (const auto& p : kernel.at("properties"))
        if (!p.at("passed").get<bool>()) return p;
    return nullptr;
}

std::vector<float> silu_input(int n) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i) - 4.5f;
    return x;
}

const conform::KernelInfo& kernel_named(const conform::plugin::Library& lib, const std::string& name) {
    for (const auto& k : lib.kernels)
        if (k.name == name) return k;
    throw std::runtime_error("no kernel " + name);
}

std::vector<conform::Tensor> call(const conform::KernelInfo& k, std::vector<float> x) {
    conform::Tensor in(conform::Format::fp32, {static_cast<std::int64_t>(x.size())});
    for (std::size_t i = 0; i < x.size(); ++i) in.set_value(static_cast<std::int64_t>(i), x[i]);
    return conform::run_kernel(k, conform::Params{}, {in.view()});
}

}  // namespace

// ---- the loader, in process -----------------------------------------------------

TEST(PluginLoader, WrapsEveryExportedKernelAsAPluginBackedRegistryEntry) {
    const auto lib = conform::plugin::load(PLUGIN_EXAMPLE);
    ASSERT_EQ(lib.kernels.size(), 3u);
    const auto& silu = kernel_named(lib, "example.silu.fp32");
    EXPECT_EQ(silu.op, "silu");
    EXPECT_EQ(silu.backend, "plugin");
    EXPECT_EQ(silu.role, conform::Role::kernel);
    EXPECT_EQ(silu.in, conform::Format::fp32);
    EXPECT_EQ(silu.acc, conform::Format::fp32);
    const auto x = silu_input(11);
    const auto y = call(silu, x);
    for (std::size_t i = 0; i < x.size(); ++i) {  // computed in double, rounded once
        const double v = x[i];
        EXPECT_EQ(y.at(0).value(static_cast<std::int64_t>(i)), static_cast<float>(v / (1 + std::exp(-v)))) << i;
    }
}

TEST(PluginLoader, AWriteJustPastAnOutputOrANonZeroStatusThrowsNamingTheKernel) {
    const auto lib = conform::plugin::load(PLUGIN_MISBEHAVING);
    EXPECT_NO_THROW(call(kernel_named(lib, "misbehaving.overflow"), silu_input(8)));  // quiet below 9 elements
    try {
        call(kernel_named(lib, "misbehaving.overflow"), silu_input(9));  // 36 bytes: the write lands in the canary
        ADD_FAILURE() << "no violation reported";
    } catch (const conform::plugin::PluginViolation& e) {
        EXPECT_NE(std::string(e.what()).find("misbehaving.overflow wrote 4 bytes past the end of output 'y'"),
                  std::string::npos) << e.what();
    }
    try {
        call(kernel_named(lib, "misbehaving.error"), silu_input(9));
        ADD_FAILURE() << "no error reported";
    } catch (const conform::plugin::KernelError& e) {
        EXPECT_NE(std::string(e.what()).find("returned error status 7"), std::string::npos) << e.what();
    }
}

// Outputs whose rows are strided apart: the bytes between rows are the
// suite's, a kernel writing them fails, and a correct kernel leaves them be.
TEST(PluginLoader, WritesIntoThePaddingOfAStridedOutputAreCaught) {
    const auto lib = conform::plugin::load(PLUGIN_MISBEHAVING);
    conform::Tensor x(conform::Format::fp32, {3, 10}), y(conform::Format::fp32, {3, 12});
    for (std::int64_t i = 0; i < 30; ++i) x.set_value(i, 0.25 * static_cast<double>(i) - 3);
    for (std::int64_t i = 0; i < 36; ++i) y.set_value(i, 42);
    conform::TensorView out = y.view();
    out.shape = {3, 10};
    out.strides = {12, 1};  // two padding elements after each row
    const conform::Params params;
    kernel_named(lib, "misbehaving.good").fn(conform::KernelCall{params, {x.view()}, {out}});
    EXPECT_EQ(y.value(10), 42);
    EXPECT_EQ(y.value(35), 42);
    EXPECT_NE(y.value(12), 42);  // row 1, element 0: written
    try {
        kernel_named(lib, "misbehaving.padding").fn(conform::KernelCall{params, {x.view()}, {out}});
        ADD_FAILURE() << "no violation reported";
    } catch (const conform::plugin::PluginViolation& e) {
        EXPECT_NE(std::string(e.what()).find("padding between elements (at element offset 10) of output 'y'"), std::string::npos) << e.what();
    }
    EXPECT_EQ(y.value(10), 42);  // nothing copied back from a violating call
}

TEST(PluginLoader, BadTablesNameTheFileAndTheField) {
    auto message = [](const std::string& path) {
        try {
            conform::plugin::load(path);
        } catch (const conform::plugin::LoadError& e) {
            return std::string(e.what());
        }
        return std::string("loaded");
    };
    const std::string op = message(PLUGIN_BAD_OP), dtype = message(PLUGIN_BAD_DTYPE), fn = message(PLUGIN_NULL_FN);
    EXPECT_EQ(op.rfind(PLUGIN_BAD_OP, 0), 0u) << op;
    EXPECT_NE(op.find("kernels[1] \"broken.kernel\": op: unknown op 'no_such_op'"), std::string::npos) << op;
    EXPECT_NE(dtype.find("kernels[1] \"broken.kernel\": in_dtype: unknown dtype 42"), std::string::npos) << dtype;
    EXPECT_NE(fn.find("kernels[1] \"broken.kernel\": fn: NULL"), std::string::npos) << fn;
}

// ---- case announcements (what check-plugin reports for a crash) ------------------

// The case announced before a kernel call is the one a failure in that call
// reproduces: RapidCheck's own reproduction string of the failing case.
TEST(CaseAnnouncement, TheAnnouncedCaseIsTheOneThatFails) {
    const conform::KernelInfo* silu = conform::builtin_registry().find("cpu.scalar.silu.fp32");
    ASSERT_NE(silu, nullptr);
    conform::KernelInfo k = *silu;
    std::string current, at_failure;
    k.fn = [&](const conform::KernelCall& c) {
        if (c.in[0].numel() > 8) {
            // RapidCheck evaluates the failing case again to show it: keep the first call's.
            if (at_failure.empty()) at_failure = current;
            throw std::runtime_error("fails above 8 elements");
        }
        silu->fn(c);
    };
    conform::props::RunConfig cfg;
    cfg.cases = 50;
    cfg.shrink = false;  // the failure is then reported as generated
    cfg.on_case = [&](const std::string&, const std::string& reproduce) { current = reproduce; };
    const auto& defs = conform::props::property_defs();
    const auto p = std::find_if(defs.begin(), defs.end(), [](const auto& d) { return d.name == "within_budget"; });
    ASSERT_NE(p, defs.end());
    const auto out = conform::props::run_property(*p, k, cfg, nullptr);
    ASSERT_FALSE(out.passed);
    EXPECT_GT(out.cases, 1);  // not the first case: the announcement tracked the search
    EXPECT_EQ(at_failure, out.reproduce);
}

// ---- conform check-plugin ---------------------------------------------------------

TEST(CheckPlugin, TheExamplePluginPasses) {
    const fs::path d = fresh_dir("conform_plugin_example");
    const Ran r = run_conform(std::string("check-plugin ") + PLUGIN_EXAMPLE + " --cases 40 --out " + d.string());
    EXPECT_EQ(r.status, 0) << r.output;
    const auto j = read_json(d / "check-plugin.json");
    EXPECT_EQ(j.at("schema"), "conform.check-plugin/1");
    const auto m = results(j);
    ASSERT_EQ(m.size(), 3u) << j.dump(2);
    for (const auto& [name, k] : m) {
        EXPECT_EQ(k.isolation.at("status"), "completed") << name;
        EXPECT_TRUE(k.report.at("passed").get<bool>()) << name << ": " << first_failure(k.report).dump();
        EXPECT_GE(k.report.at("properties").size(), 2u) << name;
        EXPECT_EQ(k.report.at("backend"), "plugin");
        EXPECT_FALSE(k.isolation.at("description").get<std::string>().empty()) << name;
    }
    EXPECT_TRUE(fs::exists(d / "check-plugin.md"));
}

// ABI v2: mixed input dtypes, an attention kernel that writes o only, a
// domain the kernel rejects outside of (it returns an error there), a
// tunable key tile, declared conventions -- every kernel passes, and the
// report states each declaration.
TEST(CheckPlugin, TheV2ExamplePluginPassesInsideItsDeclarations) {
    const fs::path d = fresh_dir("conform_plugin_example_v2");
    const Ran r = run_conform(std::string("check-plugin ") + PLUGIN_EXAMPLE_V2 + " --cases 30 --out " + d.string());
    EXPECT_EQ(r.status, 0) << r.output;
    const auto m = results(read_json(d / "check-plugin.json"));
    ASSERT_EQ(m.size(), 4u);
    for (const auto& [name, k] : m)
        EXPECT_TRUE(k.report.at("passed").get<bool>()) << name << ": " << first_failure(k.report).dump();
    const auto& attention = m.at("example2.attention.o_only").report;
    EXPECT_EQ(attention.at("unwritten"), nlohmann::json::array({"lse"}));
    EXPECT_EQ(attention.at("domain"), "{\"block\":[4,16],\"head_dim\":[4,8]}");
    EXPECT_EQ(attention.at("in_format"), "fp16");  // generated in the narrowest declared input dtype
    std::set<std::string> ran;
    for (const auto& p : attention.at("properties")) ran.insert(p.at("name"));
    EXPECT_TRUE(ran.count("tile_invariance") && ran.count("gqa_replication"));
    EXPECT_FALSE(ran.count("key_count"));  // it needs lse
    // Q, K, V in F32 and the mask alone in F16: generated in F32, and the
    // shifted masks of mask_shift_invariance kept exact in F16 (they were
    // not: the F16 conversion failed the kernel).
    const auto& masked = m.at("example2.attention.f16_mask").report;
    EXPECT_EQ(masked.at("in_format"), "fp32");
    bool shifted = false;
    for (const auto& p : masked.at("properties")) shifted = shifted || (p.at("name") == "mask_shift_invariance" && p.at("passed"));
    EXPECT_TRUE(shifted) << masked.dump();
    EXPECT_EQ(m.at("example2.rms_norm.bf16").report.at("conventions"), "eps_placement=outside");
    EXPECT_EQ(m.at("example2.l2_norm.fp32").report.at("conventions"), "l2_form=max");
    const std::string md = read_text(d / "check-plugin.md");
    EXPECT_NE(md.find("head_dim"), std::string::npos) << md;
}

// Without its declaration the same kernel fails, and inference names it.
TEST(CheckPlugin, AnUndeclaredConventionIsInferred) {
    const Ran r = run_conform(std::string("check-plugin ") + PLUGIN_EXAMPLE_V2 +
                              " --kernel example2.l2_norm.fp32 --convention l2_form=sqrt --cases 30 --no-shrink");
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("passes if it declares l2_form=max"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("RC_FAIL"), std::string::npos) << r.output;  // the suite's own location is not shown
}

TEST(PluginLoader, V2DescriptorsBecomeKernelsWithTheirDeclarations) {
    const auto lib = conform::plugin::load(PLUGIN_EXAMPLE_V2);
    EXPECT_EQ(lib.abi_version, 2);
    ASSERT_EQ(lib.kernels.size(), 4u);
    const conform::KernelInfo& a = lib.kernels[0];
    EXPECT_EQ(a.unwritten, std::vector<std::string>{"lse"});
    EXPECT_EQ(a.in, conform::Format::fp16);
    EXPECT_EQ(a.acc, conform::Format::fp64);
    EXPECT_EQ(a.input_formats, (std::map<std::string, conform::Format>{{"q", conform::Format::fp32}}));
    EXPECT_EQ(lib.kernels[1].in, conform::Format::fp32);
    EXPECT_EQ(lib.kernels[1].input_formats, (std::map<std::string, conform::Format>{{"mask", conform::Format::fp16}}));
    EXPECT_EQ(lib.kernels[2].in, conform::Format::bf16);
    EXPECT_EQ(lib.kernels[2].out, conform::Format::bf16);
}

// Each fault is that kernel's failure, with the property and a reproduction
// string; the kernels after it still run, and the good one passes.
TEST(CheckPlugin, CrashHangOverflowInputWriteAndErrorAreEachThatKernelsFailure) {
    const fs::path d = fresh_dir("conform_plugin_misbehaving");
    const Ran r = run_conform(std::string("check-plugin ") + PLUGIN_MISBEHAVING + " --cases 30 --timeout 5 --out " + d.string());
    EXPECT_EQ(r.status, 1) << r.output;
    const auto m = results(read_json(d / "check-plugin.json"));
    ASSERT_EQ(m.size(), 8u);
    const std::map<std::string, std::pair<std::string, std::string>> expected{
        // Half the cases pass padded rows (row_padding): both faults show there.
        {"misbehaving.padding", {"completed", "wrote into the padding between elements"}},
        {"misbehaving.ignores_strides", {"completed", "wrote into the padding between elements"}},
        {"misbehaving.segfault", {"crashed", "SIGSEGV"}},
        {"misbehaving.hang", {"timed out", "killed"}},
        {"misbehaving.overflow", {"", "past the end of output 'y'"}},  // canary (completed) or guard page (crashed)
        {"misbehaving.writes_input", {"crashed", "write to read-only input 'x'"}},
        {"misbehaving.error", {"completed", "returned error status 7"}},
    };
    for (const auto& [name, want] : expected) {
        const KernelResult& k = m.at(name);
        EXPECT_FALSE(k.report.at("passed").get<bool>()) << name;
        if (!want.first.empty()) {
            EXPECT_EQ(k.isolation.at("status"), want.first) << name;
        }
        const json f = first_failure(k.report);
        ASSERT_FALSE(f.is_null()) << name;
        EXPECT_NE(f.at("message").get<std::string>().find(want.second), std::string::npos) << name << ": " << f.dump();
        EXPECT_FALSE(f.at("reproduce").get<std::string>().empty()) << name;
    }
    EXPECT_TRUE(m.at("misbehaving.good").report.at("passed").get<bool>());
    EXPECT_EQ(m.at("misbehaving.good").isolation.at("status"), "completed");
    EXPECT_NE(r.output.find("conform check-plugin"), std::string::npos) << "no reproduce command printed";
}

// The reproduction string of a crash replays the crashing case.
TEST(CheckPlugin, ACrashReproduces) {
    const fs::path d = fresh_dir("conform_plugin_crash");
    const std::string base = std::string("check-plugin ") + PLUGIN_MISBEHAVING + " --kernel misbehaving.segfault --cases 30";
    ASSERT_EQ(run_conform(base + " --out " + d.string()).status, 1);
    const json f = first_failure(results(read_json(d / "check-plugin.json")).at("misbehaving.segfault").report);
    const std::string repro = f.at("reproduce");
    ASSERT_FALSE(repro.empty());
    const Ran again = run_conform(base + " --out " + d.string() + " --reproduce '" + repro + "'");
    EXPECT_EQ(again.status, 1) << again.output;
    const auto k = results(read_json(d / "check-plugin.json")).at("misbehaving.segfault");
    EXPECT_EQ(k.isolation.at("status"), "crashed");
    EXPECT_EQ(first_failure(k.report).at("name"), f.at("name"));
}

#ifdef PLUGIN_MISBEHAVING_SANITIZED
// Sanitized builds only: a plug-in built with the sanitizers ends through the
// sanitizer's exit (status 1) on its null store, not through SIGSEGV; the
// death callback makes that the kernel's crash, not a bare "error".
TEST(CheckPlugin, ASanitizerStoppingAPluginIsThatKernelsCrash) {
    const fs::path d = fresh_dir("conform_plugin_sanitized");
    const Ran r = run_conform(std::string("check-plugin ") + PLUGIN_MISBEHAVING_SANITIZED +
                              " --kernel misbehaving.segfault --cases 30 --out " + d.string());
    ASSERT_EQ(r.status, 1) << r.output;
    const auto k = results(read_json(d / "check-plugin.json")).at("misbehaving.segfault");
    EXPECT_EQ(k.isolation.at("status"), "crashed");
    const json f = first_failure(k.report);
    ASSERT_FALSE(f.is_null());
    EXPECT_NE(f.at("message").get<std::string>().find("sanitizer"), std::string::npos) << f.dump();
    EXPECT_FALSE(f.at("reproduce").get<std::string>().empty());
}
#endif

TEST(CheckPlugin, BadLibrariesExitTwoNamingTheFileAndField) {
    const fs::path d = fresh_dir("conform_plugin_bad");
    fs::create_directories(d);
    const fs::path text = d / "notalib.so";
    std::ofstream(text) << "not an ELF file\n";
    const std::vector<std::pair<std::string, std::string>> cases{
        {text.string(), "cannot load"},
        {(d / "missing.so").string(), "no such file"},
        {PLUGIN_NO_ENTRY, "no symbol conform_plugin_v2 or conform_plugin_v1"},
        {PLUGIN_BAD_ABI, "abi_version: 99"},
        {PLUGIN_BAD_OP, "kernels[1] \"broken.kernel\": op: unknown op 'no_such_op'"},
        {PLUGIN_NULL_FN, "fn: NULL"},
        {PLUGIN_V2_F16_BF16, "kernels[1] \"broken.kernel\": in_dtypes: F16 and BF16 inputs together"},
        {PLUGIN_V2_NARROW_ACC, "acc_dtype: bf16 accumulation widens the derived budget"},
        {PLUGIN_V2_BAD_DOMAIN, "domain_json: \"head_size\": not a dimension or parameter of attention"},
        {PLUGIN_V2_FIRST_UNWRITTEN, "out_dtypes[0] (o): 0, but the first output must be written"},
        {PLUGIN_V2_N_IN, "n_in_dtypes: 3 with in_dtypes set (expected 4, one per input of attention)"},
        {PLUGIN_V2_BAD_TUNABLE, "tunables_json: \"causal\": not a tunable parameter of attention (tunables: block)"},
    };
    for (const auto& [lib, field] : cases) {
        const Ran r = run_conform("check-plugin " + lib);
        EXPECT_EQ(r.status, 2) << lib << ": " << r.output;
        EXPECT_NE(r.output.find(lib), std::string::npos) << r.output;
        EXPECT_NE(r.output.find(field), std::string::npos) << r.output;
    }
    const Ran unknown = run_conform(std::string("check-plugin ") + PLUGIN_EXAMPLE + " --kernel example.nope");
    EXPECT_EQ(unknown.status, 2);
    EXPECT_NE(unknown.output.find("example.silu.fp32"), std::string::npos) << unknown.output;  // lists the exports
}

// Every registered mutant, exported through the C ABI, is killed by the suite.
TEST(CheckPlugin, EveryMutantIsKilledThroughThePluginPath) {
    const fs::path d = fresh_dir("conform_plugin_mutants");
    // --fail-fast --no-infer: a kill needs one failing property, nothing after it.
    const Ran r = run_conform(std::string("check-plugin ") + PLUGIN_MUTANTS +
                              " --cases 40 --no-shrink --fail-fast --no-infer --out " + d.string());
    EXPECT_EQ(r.status, 1) << r.output;
    const auto m = results(read_json(d / "check-plugin.json"));
    std::size_t mutants = 0;
    for (const auto& k : conform::builtin_registry().all()) {
        if (k.role != conform::Role::mutant) continue;
        ++mutants;
        ASSERT_TRUE(m.count(k.name)) << k.name << " not exported";
        const KernelResult& got = m.at(k.name);
        EXPECT_FALSE(got.report.at("passed").get<bool>()) << k.name << " survived (" << k.description << ")";
        const auto& props = got.report.at("properties");
        ASSERT_FALSE(props.empty()) << k.name;
        for (std::size_t i = 0; i + 1 < props.size(); ++i)
            EXPECT_TRUE(props[i].at("passed").get<bool>()) << k.name << ": --fail-fast ran past " << props[i].at("name");
        EXPECT_EQ(got.isolation.at("status"), "completed") << k.name << ": " << got.isolation.dump();
    }
    EXPECT_EQ(m.size(), mutants);
}

}  // namespace plugin_test
