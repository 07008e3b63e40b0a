// conform cases and conform validate on a case set (docs/cases.md): the
// suite's inputs written out, filled by a kernel elsewhere (here the
// built-in kernels, through the case files), judged case by case and group
// by group.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_testing.hpp"
#include "impls/registry.hpp"
#include "io/case_file.hpp"
#include "properties/verdict.hpp"

namespace case_set_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

namespace fs = std::filesystem;
using namespace conform;

namespace {

int run(const std::string& args, std::string* output = nullptr) { return cli_testing::run_conform(args, output); }

fs::path fresh(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / name;
    fs::remove_all(d);
    return d;
}

nlohmann::json read_json(const fs::path& p) {
    std::ifstream f(p);
    return nlohmann::json::parse(f);
}

// The inputs of a stored case as the kernel takes them (absent optional inputs as empty views).
std::vector<TensorView> input_views(const OpSpec& op, const io::Case& c) {
    std::vector<TensorView> in;
    for (const std::string& name : op.inputs)
        in.push_back(c.inputs.count(name) ? c.inputs.at(name).view() : TensorView::contiguous(nullptr, Format::fp32, {0}));
    while (!in.empty() && in.back().numel() == 0 && optional_input(op.inputs[in.size() - 1])) in.pop_back();
    return in;
}

Params params_of(const io::Case& c) {
    Params p;
    for (const auto& [k, v] : c.params.items()) p.set(k, v.get<double>());
    return p;
}

// Every case of the set filled with kernel `name`'s outputs, except `skip`.
void fill_with(const fs::path& dir, const std::string& name, const std::string& skip = "") {
    const KernelInfo* k = builtin_registry().find(name);
    ASSERT_NE(k, nullptr) << name;
    const OpSpec& op = *find_op(k->op);
    const auto manifest = read_json(dir / "manifest.json");
    for (const auto& e : manifest["cases"]) {
        if (e["name"] == skip) continue;
        io::Case c = io::read_case(dir / e["file"].get<std::string>());
        const auto outs = run_kernel(*k, params_of(c), input_views(op, c));
        for (std::size_t o = 0; o < outs.size(); ++o) c.outputs[op.outputs[o]] = io::StoredTensor::from_tensor(outs[o]);
        c.impl = name;
        io::write_case_safetensors(c, dir / e["file"].get<std::string>());
    }
}

}  // namespace

// Every op's case set filled by its built-in kernel passes: every case
// against the oracle, and every covered property replayed on the stored
// outputs finds each of its calls among the cases (no "not run").
TEST(CaseSet, FilledByTheBuiltInKernelEveryOpPasses) {
    const std::vector<std::pair<std::string, std::string>> sets = {
        {"rms_norm", "bf16"}, {"layer_norm", "fp16"}, {"l2_norm", "fp32"}, {"gelu_tanh", "bf16"}, {"softcap", "fp32"},
        {"situ_glu", "bf16"}, {"softmax", "fp32"}, {"lse_merge", "fp32"}, {"rope", "bf16"}, {"attention", "fp32"},
        {"gdn", "fp32"}, {"sinkhorn", "fp32"}, {"mhc_residual", "fp32"}, {"quantize", "bf16"}, {"int8_gemm", "fp32"},
        {"dequantize", "fp32"}, {"smooth_quant", "fp32"}};
    for (const auto& [op, dtype] : sets) {
        SCOPED_TRACE(op + " " + dtype);
        const fs::path dir = fresh("conform_case_set_" + op), out = dir / "report";
        std::string text;
        ASSERT_EQ(run("cases --op " + op + " --dtype " + dtype + " --cases 6 --out " + dir.string(), &text), 0) << text;
        const auto manifest = read_json(dir / "manifest.json");
        EXPECT_EQ(manifest["format"], "conform.cases/1");
        ASSERT_GE(manifest["properties"].size(), 2u) << manifest["properties"];
        EXPECT_EQ(manifest["properties"][0]["name"], "within_budget");
        EXPECT_EQ(manifest["properties"][1]["name"], "special_values");
        const KernelInfo* simd = builtin_registry().find("cpu.simd." + op + "." + dtype);
        fill_with(dir, simd ? simd->name : "cpu.scalar." + op + "." + dtype);
        EXPECT_EQ(run("validate " + dir.string() + " --out " + out.string(), &text), 0) << text;
        const auto report = read_json(out / "report.json");
        ASSERT_EQ(report["kernels"].size(), 1u);
        // Every covered property was replayed and passed, plus the rounding-bias test.
        EXPECT_EQ(report["kernels"][0]["properties"].size(), manifest["properties"].size() + 1) << text;
        for (const auto& p : report["kernels"][0]["properties"]) EXPECT_TRUE(p["passed"].get<bool>()) << p;
        const auto verdicts = read_json(out / "validate.json");
        for (const auto& c : verdicts["cases"]) EXPECT_EQ(c["status"], "PASS") << c;
    }
}

// The delta rule's split invariance feeds the first half's final state into
// the second half: its inputs depend on the kernel's outputs, so the case set
// cannot hold them and says so.
TEST(CaseSet, PropertiesWhoseInputsDependOnOutputsAreNotCovered) {
    const fs::path dir = fresh("conform_case_set_gdn_cov");
    std::string text;
    ASSERT_EQ(run("cases --op gdn --dtype fp32 --cases 4 --out " + dir.string(), &text), 0) << text;
    const auto manifest = read_json(dir / "manifest.json");
    bool split = false;
    for (const auto& n : manifest["not_covered"])
        split = split || (n["name"] == "split_invariance" &&
                          n["reason"].get<std::string>().find("depend on the kernel's earlier outputs") != std::string::npos);
    EXPECT_TRUE(split) << manifest["not_covered"];
    for (const auto& p : manifest["properties"]) EXPECT_NE(p["name"], "split_invariance");
    EXPECT_NE(text.find("not covered: split_invariance"), std::string::npos) << text;
}

// A relation catches what no case alone can: one element of the second
// member of a scale-invariance group moved by one ulp stays within the
// budget of the oracle (the case passes), but norm(2^k x) is then no longer
// bit-identical to norm(x).
TEST(CaseSet, ARelationFailsWhereEveryCaseIsWithinBudget) {
    const fs::path dir = fresh("conform_case_set_relation"), out = dir / "report";
    std::string text;
    ASSERT_EQ(run("cases --op rms_norm --dtype fp32 --cases 10 --out " + dir.string(), &text), 0) << text;
    fill_with(dir, "cpu.simd.rms_norm.fp32");
    const auto manifest = read_json(dir / "manifest.json");
    std::string target;
    for (const auto& g : manifest["groups"])
        if (g["property"] == "scale_invariance" && g["members"].size() == 2 && g["members"][0] != g["members"][1]) {
            target = g["members"][1];
            break;
        }
    ASSERT_FALSE(target.empty()) << manifest["groups"];
    const fs::path file = dir / (target + ".safetensors");
    io::Case c = io::read_case(file);
    const OpSpec& op = *find_op("rms_norm");
    KernelInfo stored = *builtin_registry().find("cpu.simd.rms_norm.fp32");
    bool moved = false;
    for (std::int64_t i = 0; i < c.outputs.at("y").numel() && !moved; ++i) {
        io::Case trial = c;
        TensorView y = trial.outputs.at("y").view();
        const double v = y.value(i);
        if (!std::isfinite(v) || v == 0) continue;
        y.set_bits(i, y.bits(i) + 1);
        stored.fn = [&](const KernelCall& call) {
            for (std::int64_t e = 0; e < y.numel(); ++e) call.out[0].set_bits(e, y.bits(e));
        };
        if (props::check_case(stored, params_of(trial), input_views(op, trial)).pass) {
            io::write_case_safetensors(trial, file);
            moved = true;
        }
    }
    ASSERT_TRUE(moved) << "no element of " << file << " stays within budget one ulp away";
    EXPECT_EQ(run("validate " + dir.string() + " --out " + out.string(), &text), 1) << text;
    const auto verdicts = read_json(out / "validate.json"), report = read_json(out / "report.json");
    for (const auto& v : verdicts["cases"]) EXPECT_EQ(v["status"], "PASS") << v;
    bool relation_failed = false;
    for (const auto& p : report["kernels"][0]["properties"]) {
        if (p["name"] != "scale_invariance") {
            EXPECT_TRUE(p["passed"].get<bool>()) << p;
            continue;
        }
        relation_failed = !p["passed"].get<bool>();
        EXPECT_NE(p["message"].get<std::string>().find("differs from norm(x)"), std::string::npos) << p;
        EXPECT_NE(p["message"].get<std::string>().find(file.string()), std::string::npos) << p;
    }
    EXPECT_TRUE(relation_failed) << text;
}

// A case without outputs is not run, never a pass: the case is reported NOT
// RUN, every property with a group holding it is not run, and the exit
// status is 1.
TEST(CaseSet, MissingOutputsAreNotRunAndFail) {
    const fs::path dir = fresh("conform_case_set_missing"), out = dir / "report";
    std::string text;
    ASSERT_EQ(run("cases --op softmax --dtype bf16 --cases 6 --out " + dir.string(), &text), 0) << text;
    const auto manifest = read_json(dir / "manifest.json");
    const std::string skipped = manifest["cases"][0]["name"], property = manifest["cases"][0]["property"];
    fill_with(dir, "cpu.simd.softmax.bf16", skipped);
    EXPECT_EQ(run("validate " + dir.string() + " --out " + out.string(), &text), 1) << text;
    const auto cases = read_json(out / "validate.json")["cases"];
    EXPECT_EQ(cases[0]["status"], "NOT RUN") << cases[0];
    EXPECT_NE(text.find("1 not run (no outputs)"), std::string::npos) << text;
    const auto report = read_json(out / "report.json");
    for (const auto& p : report["kernels"][0]["properties"])
        if (p["name"] == property) {
            EXPECT_FALSE(p["passed"].get<bool>());
            EXPECT_EQ(p["message"].get<std::string>().rfind("not run: 1 of its cases have no outputs", 0), 0u) << p;
        }
    // Nothing filled at all: every case not run.
    const fs::path empty = fresh("conform_case_set_empty");
    ASSERT_EQ(run("cases --op silu --dtype fp16 --cases 3 --out " + empty.string(), &text), 0) << text;
    EXPECT_EQ(run("validate " + empty.string(), &text), 1) << text;
    EXPECT_EQ(text.find("PASS"), std::string::npos) << text;
}

// A case that fails on its own fails its property even when other cases of
// the property have no outputs (a kernel that refuses some shapes must not
// hide its failures on the others behind "not run").
TEST(CaseSet, AFailingCaseFailsItsPropertyWhateverTheUnfilledOnes) {
    const fs::path dir = fresh("conform_case_set_partial"), out = dir / "report";
    std::string text;
    ASSERT_EQ(run("cases --op silu --dtype fp16 --cases 6 --out " + dir.string(), &text), 0) << text;
    const auto manifest = read_json(dir / "manifest.json");
    std::vector<std::string> within;
    for (const auto& e : manifest["cases"])
        if (e["property"] == "within_budget") within.push_back(e["name"]);
    ASSERT_GE(within.size(), 2u);
    fill_with(dir, "cpu.simd.silu.fp16", within[0]);
    const fs::path file = dir / (within[1] + ".safetensors");
    io::Case c = io::read_case(file);
    TensorView y = c.outputs.at("y").view();
    bool broken = false;
    for (std::int64_t i = 0; i < y.numel() && !broken; ++i)
        if (std::fabs(y.value(i)) > 0x1p-10 && std::fabs(y.value(i)) < 0x1p10) y.set_bits(i, encode(Format::fp16, y.value(i) * 2)), broken = true;
    ASSERT_TRUE(broken) << file;
    io::write_case_safetensors(c, file);
    EXPECT_EQ(run("validate " + dir.string() + " --out " + out.string(), &text), 1) << text;
    bool seen = false;
    const auto report = read_json(out / "report.json");
    for (const auto& p : report["kernels"][0]["properties"])
        if (p["name"] == "within_budget") {
            seen = true;
            EXPECT_FALSE(p["passed"].get<bool>());
            const std::string m = p["message"];
            EXPECT_EQ(m.rfind("not run:", 0), std::string::npos) << m;
            EXPECT_NE(m.find("ulp"), std::string::npos) << m;
            EXPECT_NE(m.find(file.string()), std::string::npos) << m;
            EXPECT_NE(m.find("have no outputs"), std::string::npos) << m;
        }
    EXPECT_TRUE(seen) << text;
}

TEST(CaseSet, BadInputNamesTheFileAndField) {
    std::string text;
    EXPECT_EQ(run("cases --op nope --dtype fp32 --out /tmp/conform_case_set_bad", &text), 2);
    EXPECT_NE(text.find("unknown op 'nope'"), std::string::npos) << text;
    EXPECT_EQ(run("cases --op gdn --dtype fp16 --out /tmp/conform_case_set_bad", &text), 2);
    EXPECT_NE(text.find("--dtype fp16: op gdn has no built-in kernel of that format (formats: bf16, fp32)"),
              std::string::npos) << text;
    EXPECT_EQ(run("cases --op rms_norm --dtype fp32 --convention masked_row=nan --out /tmp/conform_case_set_bad", &text), 2);
    EXPECT_NE(text.find("--convention"), std::string::npos) << text;

    const fs::path dir = fresh("conform_case_set_badmanifest");
    ASSERT_EQ(run("cases --op silu --dtype fp32 --cases 2 --out " + dir.string(), &text), 0) << text;
    auto manifest = read_json(dir / "manifest.json");
    auto write = [&](const nlohmann::json& m) { std::ofstream(dir / "manifest.json") << m.dump(); };
    write(nlohmann::json{{"format", "conform.cases/9"}});
    EXPECT_EQ(run("validate " + dir.string(), &text), 2);
    EXPECT_NE(text.find((dir / "manifest.json").string() + ": \"format\""), std::string::npos) << text;
    auto m = manifest;
    m["cases"][0]["file"] = "../x.safetensors";
    write(m);
    EXPECT_EQ(run("validate " + dir.string(), &text), 2);
    EXPECT_NE(text.find("cases[0]: \"file\": \"../x.safetensors\" is not a plain file name"), std::string::npos) << text;
    m = manifest;
    m["properties"][0]["name"] = "no_such_property";
    write(m);
    EXPECT_EQ(run("validate " + dir.string(), &text), 2);
    EXPECT_NE(text.find("\"no_such_property\" is no property of silu"), std::string::npos) << text;
    m = manifest;
    m.erase("seed");
    write(m);
    EXPECT_EQ(run("validate " + dir.string(), &text), 2);
    EXPECT_NE(text.find("manifest.json: \"seed\": missing"), std::string::npos) << text;
}

// --domain keeps every generated case inside what the kernel supports (here
// rows of 8 elements), and validate replays inside the same domain.
TEST(CaseSet, DomainRestrictsTheGeneratedCases) {
    const fs::path dir = fresh("conform_case_set_domain");
    std::string text;
    ASSERT_EQ(run("cases --op silu --dtype fp32 --cases 8 --domain '{\"cols\":[8]}' --out " + dir.string(), &text), 0)
        << text;
    const auto manifest = read_json(dir / "manifest.json");
    EXPECT_EQ(manifest["kernel"]["domain"], "{\"cols\":[8]}");
    for (const auto& e : manifest["cases"]) EXPECT_EQ(e["outputs"]["y"]["shape"].back(), 8) << e;
    fill_with(dir, "cpu.simd.silu.fp32");
    EXPECT_EQ(run("validate " + dir.string(), &text), 0) << text;
    EXPECT_EQ(run("cases --op silu --dtype fp32 --domain '{\"width\":[8]}' --out " + dir.string(), &text), 2);
    EXPECT_NE(text.find("--domain: "), std::string::npos) << text;
    EXPECT_NE(text.find("width"), std::string::npos) << text;
}

// An output the kernel does not compute (attention's lse from a library that
// returns o alone) is declared in the manifest: absent from every case,
// never judged, and the properties that need it are not run; undeclared,
// its absence is an error naming the case and the tensor.
TEST(CaseSet, DeclaredUnwrittenOutputsAreNotJudged) {
    const fs::path dir = fresh("conform_case_set_unwritten");
    std::string text;
    ASSERT_EQ(run("cases --op attention --dtype fp32 --cases 4 --out " + dir.string(), &text), 0) << text;
    fill_with(dir, "cpu.simd.attention.fp32");
    auto manifest = read_json(dir / "manifest.json");
    for (const auto& e : manifest["cases"]) {
        io::Case c = io::read_case(dir / e["file"].get<std::string>());
        c.outputs.erase("lse");
        io::write_case_safetensors(c, dir / e["file"].get<std::string>());
    }
    EXPECT_EQ(run("validate " + dir.string(), &text), 2) << text;
    EXPECT_NE(text.find("tensor \"out.lse\" missing"), std::string::npos) << text;
    manifest["unwritten"] = {"lse"};
    std::ofstream(dir / "manifest.json") << manifest.dump();
    EXPECT_EQ(run("validate " + dir.string(), &text), 0) << text;
    const auto line = text.find("property key_count ");
    ASSERT_NE(line, std::string::npos) << text;
    EXPECT_NE(text.substr(line, text.find('\n', line) - line).find("not run: it needs an output the kernel does not write (lse)"),
              std::string::npos) << text;
    manifest["unwritten"] = {"o"};
    std::ofstream(dir / "manifest.json") << manifest.dump();
    EXPECT_EQ(run("validate " + dir.string(), &text), 2) << text;
    EXPECT_NE(text.find("\"unwritten\": \"o\" is not an output of attention other than the first"), std::string::npos)
        << text;
}

}  // namespace case_set_test
