// The conform command as a user meets it: exit statuses for bad input, the
// report files, and a partial report that survives an interrupted run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_testing.hpp"
#include "impls/registry.hpp"
#include "io/case_file.hpp"
#include "io/model_dump.hpp"

namespace cli_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

namespace fs = std::filesystem;

namespace {

int run(const std::string& args, std::string* output = nullptr) { return conform::cli_testing::run_conform(args, output); }

fs::path fresh_dir(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / name;
    fs::remove_all(d);
    return d;
}

}  // namespace

TEST(Cli, BadInputExitsTwoWithAClearMessage) {
    std::string out;
    EXPECT_EQ(run("run --op no_such_op", &out), 2);
    EXPECT_NE(out.find("unknown op 'no_such_op'"), std::string::npos) << out;
    EXPECT_EQ(run("run --dtype fp8", &out), 2);
    EXPECT_NE(out.find("unknown dtype 'fp8'"), std::string::npos) << out;
    EXPECT_EQ(run("run --seed twelve", &out), 2);
    EXPECT_NE(out.find("--seed"), std::string::npos) << out;
    EXPECT_EQ(run("run --op rms_norm --kernel cpu.simd.silu.fp16", &out), 2);  // empty selection
    EXPECT_NE(out.find("no kernel matches"), std::string::npos) << out;
    EXPECT_EQ(run("exhaustive --op rms_norm --dtype fp16", &out), 2);
    EXPECT_EQ(run("exhaustive --op silu --dtype fp32", &out), 2);
    EXPECT_EQ(run("frobnicate", &out), 2);
    EXPECT_EQ(run("--help", &out), 0);
    EXPECT_NE(out.find("exhaustive"), std::string::npos);
}

// --backend onednn: with or without oneDNN built in, RMSNorm is not provided
// (oneDNN 2.6 has none), and a run of only that says so instead of passing.
TEST(Cli, OnednnBackendReportsNotProvided) {
    std::string out;
    EXPECT_EQ(run("run --backend nope", &out), 2);
    EXPECT_NE(out.find("unknown backend 'nope'"), std::string::npos) << out;
    EXPECT_EQ(run("run --backend onednn --mutants", &out), 2);
    EXPECT_EQ(run("list --backend onednn", &out), 0);
    EXPECT_NE(out.find("onednn.rms_norm.fp32"), std::string::npos) << out;
    EXPECT_NE(out.find("not provided: oneDNN"), std::string::npos) << out;
    const fs::path dir = fresh_dir("conform_cli_onednn");
    EXPECT_EQ(run("run --backend onednn --op rms_norm --out " + dir.string(), &out), 1) << out;
    EXPECT_NE(out.find("NOT PROVIDED: 0 of 0 kernels failed"), std::string::npos) << out;
    EXPECT_NE(out.find("nothing was checked"), std::string::npos) << out;
    std::ifstream md(dir / "report.md");
    const std::string text(std::istreambuf_iterator<char>(md), {});
    EXPECT_EQ(text.rfind("# Conformance report: NOT PROVIDED", 0), 0u) << text;
    EXPECT_NE(text.find("| onednn.rms_norm.bf16 | rms_norm | bf16 | onednn | not provided |"), std::string::npos);
    fs::remove_all(dir);
}

// --backend cuda on a machine without a usable GPU: every kernel not
// provided with the runtime's reason, exit 1; --backend cuda-emu runs the
// same sources under the CPU emulation.
TEST(CliCuda, WithoutAGpuNothingIsCheckedAndTheRunFails) {
    std::string out;
    ASSERT_EQ(run("list --backend cuda", &out), 0);
    if (out.find("not provided") == std::string::npos) GTEST_SKIP() << "a GPU is usable here";
    EXPECT_NE(out.find("cuda.silu.bf16"), std::string::npos) << out;
    const fs::path dir = fresh_dir("conform_cli_cuda");
    EXPECT_EQ(run("run --backend cuda --op silu --out " + dir.string(), &out), 1) << out;
    EXPECT_NE(out.find("cuda.silu.fp16                           not provided: "), std::string::npos) << out;
    EXPECT_NE(out.find("nothing was checked"), std::string::npos) << out;
    EXPECT_EQ(run("mutate --backend cuda", &out), 1) << out;
    EXPECT_NE(out.find("no mutant of backend cuda can run here"), std::string::npos) << out;
    EXPECT_EQ(run("mutate --backend cuda-emu --op rms_norm", &out), 0) << out;
    EXPECT_NE(out.find("kill rate: 3/3"), std::string::npos) << out;
    EXPECT_EQ(run("run --backend cuda-emu --op silu --dtype bf16 --out " + dir.string(), &out), 0) << out;
    EXPECT_NE(out.find("cuda.silu.bf16"), std::string::npos) << out;
    EXPECT_NE(out.find("PASSED: 0 of 1 kernels failed"), std::string::npos) << out;
    fs::remove_all(dir);
}

// scripts/gpu-check on a machine without a GPU: every step runs and
// reports, and the check fails (nothing was checked on a device).
TEST(GpuCheck, WithoutAGpuEveryStepRunsAndTheCheckFails) {
    std::string out;
    ASSERT_EQ(run("list --backend cuda", &out), 0);
    if (out.find("not provided") == std::string::npos) GTEST_SKIP() << "a GPU is usable here";
    const fs::path dir = fresh_dir("conform_gpu_check");
    const fs::path log = fs::temp_directory_path() / "conform_gpu_check.log";
    const std::string cmd = "bash " CONFORM_SOURCE_DIR "/scripts/gpu-check " + dir.string() + " > " + log.string() +
                            " 2>&1";
    const int rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << rc;
    std::ifstream in(dir / "device.txt");
    const std::string device(std::istreambuf_iterator<char>(in), {});
    EXPECT_NE(device.find("gpu-check: run exit 1"), std::string::npos) << device;
    EXPECT_NE(device.find("gpu-check: mutate exit 1"), std::string::npos) << device;
    EXPECT_NE(device.find("gpu-check: bench exit 1"), std::string::npos) << device;
    EXPECT_NE(device.find("gpu-check: exhaustive exit 1"), std::string::npos) << device;
    // One report per op, and a summary line for each.
    EXPECT_TRUE(fs::exists(dir / "run" / "silu" / "report.md"));
    std::ifstream summary(dir / "run" / "summary.txt");
    const std::string lines(std::istreambuf_iterator<char>(summary), {});
    EXPECT_NE(lines.find("silu           conform: no selected kernel can run here"), std::string::npos) << lines;
    // The attention comparison with PyTorch runs only where PyTorch imports, and says so otherwise.
    EXPECT_TRUE(device.find("gpu-check: attention-vs-torch exit") != std::string::npos ||
                device.find("PyTorch is not importable") != std::string::npos)
        << device;
    // The third-party checks run or say why not (no torch, no fla, no GPU: skipped, not failed).
    for (const char* name : {"torch", "fla"})
        EXPECT_TRUE(device.find(std::string("gpu-check: ") + name + "-third-party exit 0") != std::string::npos &&
                    device.find(std::string("gpu-check: ") + name + " skipped") != std::string::npos)
            << device;
    fs::remove_all(dir);
    fs::remove(log);
}

// bench/attention_torch.py without a GPU: nothing is measured (exit 2), and
// a shape it cannot read is an error naming it.
TEST(GpuCheck, AttentionComparisonMeasuresNothingWithoutAGpu) {
    if (std::system("python3 -c pass > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
    const fs::path dir = fresh_dir("conform_attention_torch");
    fs::create_directories(dir);
    const auto write = [&](const std::string& shape) {
        std::ofstream(dir / "bench.json") << "[{\"kernel\": \"cuda.attention.bf16\", \"shape\": \"" << shape
                                          << "\", \"flops\": 1e12, \"ms\": 10, \"tflop_per_s\": 100}]";
    };
    const std::string cmd = "python3 " CONFORM_SOURCE_DIR "/bench/attention_torch.py --conform-json " +
                            (dir / "bench.json").string() + " > " + (dir / "log").string() + " 2>&1";
    write("BH=512 Lq=1024 Lk=1024 causal");
    int rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 2) << rc;
    std::ifstream log(dir / "log");
    const std::string text(std::istreambuf_iterator<char>(log), {});
    EXPECT_NE(text.find("nothing measured"), std::string::npos) << text;
    write("L=1024");
    rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << rc;
    std::ifstream log2(dir / "log");
    const std::string text2(std::istreambuf_iterator<char>(log2), {});
    EXPECT_NE(text2.find("unrecognised attention shape 'L=1024'"), std::string::npos) << text2;
    fs::remove_all(dir);
}

TEST(Cli, ListShowsKernelsBaselinesAndMutants) {
    std::string out;
    ASSERT_EQ(run("list --json", &out), 0);
    const auto j = nlohmann::json::parse(out);
    int kernels = 0, baselines = 0, mutants = 0;
    for (const auto& k : j) {
        kernels += k["role"] == "kernel";
        baselines += k["role"] == "baseline";
        mutants += k["mutant"].get<bool>();
    }
    // 19 ops (13 foundation ops, softmax, rope, attention, gated_attention, sink_attention, sinkhorn) x {fp32, fp16,
    // bf16} x {simd, scalar}
    // with one naive baseline each; lse_merge's three scalar kernels (no naive baseline); gdn and kda x
    // {fp32, bf16} x {simd, scalar} with one naive baseline each; quantize's {simd, scalar} x {fp32, fp16,
    // bf16} and int8_gemm's {simd, scalar} x {fp32, fp16 output} (no naive baselines); dequantize's {simd,
    // scalar} x {fp32, fp16, bf16 output} with one naive baseline each; smooth_quant's {simd, scalar} x
    // {fp32, fp16, bf16} (no naive baselines); hc_residual's and mhc_residual's {simd, scalar} x {fp32, fp16,
    // bf16} with one naive baseline each; int8_block's {simd, scalar} in fp16 (no naive baseline); matmul's
    // {simd, scalar} x {fp32, fp16, bf16, fp16 -> fp32, bf16 -> fp32} with a naive baseline for the first three;
    // moe_router's {simd, scalar} x {fp32, bf16} (no naive baseline); moe's and latent_moe's {simd, scalar} x
    // {fp32, bf16} with a dense-masked baseline each; fp8_quantize's {simd, scalar} x {fp32, bf16} with E4M3
    // codes and one of each with E5M2 codes (no naive baseline); fp8_gemm's {simd, scalar} x {e4m3 -> bf16,
    // e4m3 -> fp32, e5m2 -> bf16} with one naive baseline; topk_select's scalar kernel and lightning_indexer's
    // {simd, scalar} x {fp32, fp16, bf16} with one naive baseline each; mla's {explicit, absorbed} x {fp32, fp16,
    // bf16} with one naive baseline per format; compressed_attention's scalar kernel x {fp32, fp16, bf16} with one
    // naive baseline each; dsa_attention's {simd, scalar} x {fp32, fp16, bf16} with one naive baseline each;
    // block_sparse_attention's, nsa_attention's, block_attn_res's and gated_residual's scalar kernel x {fp32, fp16,
    // bf16} with one naive baseline each
    EXPECT_EQ(kernels, 19 * 3 * 2 + 3 + 2 * 2 * 2 + 6 + 4 + 6 + 6 + 2 * 3 * 2 + 2 + 2 * 5 + 2 * 2 + 2 * 2 * 2 + 6 + 2 * 3 + 3 +
                           2 * 3 + 2 * 3 + 3 + 2 * 3 + 3 + 3 + 2 * 3);
    EXPECT_EQ(baselines, 19 * 3 + 2 * 2 + 3 + 2 * 3 + 3 + 2 * 2 + 1 + 3 + 3 + 3 + 3 + 3 + 3 + 3 + 2 * 3);
    EXPECT_GE(mutants, 9);
}

TEST(Cli, RunWritesAllReportFilesAndExitsZeroOnPass) {
    const fs::path d = fresh_dir("conform_cli_run");
    std::string out;
    EXPECT_EQ(run("run --op softcap --dtype bf16 --cases 20 --out " + d.string(), &out), 0) << out;
    for (const char* f : {"report.json", "report.md", "report.html", "junit.xml"}) EXPECT_TRUE(fs::exists(d / f)) << f;
    std::ifstream in(d / "report.json");
    const auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["schema"], "conform.report/1");
    EXPECT_TRUE(j["complete"].get<bool>());
    EXPECT_EQ(j["kernels"].size(), 3u);  // simd, scalar, naive baseline
}

TEST(Cli, MutateReportsTheKillRate) {
    std::string out;
    EXPECT_EQ(run("mutate --op softcap --cases 20", &out), 0) << out;
    EXPECT_NE(out.find("kill rate: "), std::string::npos);
}

TEST(Cli, InterruptedRunLeavesAValidPartialReport) {
    const fs::path d = fresh_dir("conform_cli_interrupt");
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        const std::string out = "--out=" + d.string();
        freopen("/dev/null", "w", stderr);
        freopen("/dev/null", "w", stdout);
        execl(CONFORM_BINARY, CONFORM_BINARY, "run", "--cases", "400", out.c_str(), (char*)nullptr);
        _exit(127);
    }
    // Wait until at least one kernel is in the report, then interrupt.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    bool some = false;
    while (!some && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::ifstream in(d / "report.json");
        if (!in) continue;
        try {
            some = !nlohmann::json::parse(in)["kernels"].empty();
        } catch (...) {
            ADD_FAILURE() << "report.json was not valid JSON while the run was going";
        }
    }
    ASSERT_TRUE(some);
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 130);
    std::ifstream in(d / "report.json");
    const auto j = nlohmann::json::parse(in);
    EXPECT_FALSE(j["complete"].get<bool>());
    EXPECT_GE(j["kernels"].size(), 1u);
    EXPECT_LT(j["kernels"].size(), 117u);
    std::ifstream md(d / "report.md");
    std::string text((std::istreambuf_iterator<char>(md)), {});
    EXPECT_NE(text.find("INTERRUPTED"), std::string::npos);
}

TEST(Cli, ReproductionStringReplaysTheFailingCase) {
    // A mutant named with --kernel fails; its reproduction string replays the
    // same shrunk counterexample.
    const fs::path a = fresh_dir("conform_cli_repro_a"), b = fresh_dir("conform_cli_repro_b");
    const std::string mutant = "mutant.rms_norm.eps_outside.fp16";
    ASSERT_EQ(run("run --kernel " + mutant + " --cases 50 --out " + a.string()), 0);
    auto failing = [](const fs::path& d) {
        std::ifstream in(d / "report.json");
        const auto j = nlohmann::json::parse(in);
        for (const auto& p : j["kernels"][0]["properties"])
            if (!p["passed"].get<bool>()) return p;
        return nlohmann::json();
    };
    const auto first = failing(a);
    ASSERT_FALSE(first.is_null());
    const std::string repro = first["reproduce"];
    ASSERT_NE(repro.find("reproduce="), std::string::npos);
    // A different seed: only the reproduction string can bring back the same case.
    ASSERT_EQ(run("run --kernel " + mutant + " --cases 50 --seed 999 --reproduce '" + repro + "' --out " + b.string()), 0);
    const auto again = failing(b);
    ASSERT_FALSE(again.is_null());
    EXPECT_EQ(again["name"], first["name"]);
    EXPECT_EQ(again["counterexample"], first["counterexample"]);
}

// docs/ops.md is `conform ops --markdown`: regenerate it when an op, input,
// parameter or convention changes (conform ops --markdown > docs/ops.md).
TEST(Cli, OpsReferenceMatchesDocs) {
    std::string out;
    ASSERT_EQ(run("ops --markdown", &out), 0);
    std::ifstream in(std::string(CONFORM_SOURCE_DIR) + "/docs/ops.md", std::ios::binary);
    const std::string docs((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(out, docs) << "docs/ops.md is stale: run conform ops --markdown > docs/ops.md";
    ASSERT_EQ(run("ops --json", &out), 0);
    const auto j = nlohmann::json::parse(out);
    ASSERT_TRUE(j.is_array());
    bool attention = false;
    for (const auto& op : j)
        if (op["name"] == "attention") {
            attention = true;
            EXPECT_EQ(op["inputs"], nlohmann::json({"q", "k", "v", "mask"}));
            EXPECT_EQ(op["conventions"][0], "masked_row = zero (default) | nan");
        }
    EXPECT_TRUE(attention);
}

// ---- conform validate ----------------------------------------------------------

using namespace conform;

namespace {

Tensor wave(Format f, std::vector<std::int64_t> shape, double scale) {
    Tensor t(f, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, scale * std::sin(0.7 + 1.3 * static_cast<double>(i)));
    return t;
}

// A case whose outputs are what kernel `kernel` computes on `in`.
io::Case computed_case(const std::string& kernel, const nlohmann::json& params, const std::vector<Tensor>& in) {
    const KernelInfo& k = *builtin_registry().find(kernel);
    const OpSpec& op = *find_op(k.op);
    Params p;
    for (const auto& [key, v] : params.items()) p.set(key, v.get<double>());
    std::vector<TensorView> views;
    for (const Tensor& t : in) views.push_back(t.view());
    const std::vector<Tensor> out = run_kernel(k, p, views);
    io::Case c;
    c.op = op.name;
    c.params = params;
    c.impl = kernel;
    for (std::size_t i = 0; i < in.size(); ++i) c.inputs[op.inputs[i]] = io::StoredTensor::from_tensor(in[i]);
    for (std::size_t o = 0; o < out.size(); ++o) c.outputs[op.outputs[o]] = io::StoredTensor::from_tensor(out[o]);
    return c;
}

nlohmann::json validate_json(const fs::path& dir) {
    std::ifstream in(dir / "validate.json");
    return nlohmann::json::parse(in);
}

}  // namespace

TEST(CliValidate, PassingFailingAndAlternativeConventions) {
    const fs::path dir = fresh_dir("conform_cli_validate"), out = dir / "out";
    fs::create_directories(dir);
    const Tensor x = wave(Format::fp32, {3, 16}, 2), w = wave(Format::fp32, {16}, 1);
    io::write_case_safetensors(computed_case("cpu.simd.rms_norm.fp32", {{"eps", 1e-6}}, {x, w}), dir / "a_rms.safetensors");
    // An epsilon-outside-the-root kernel: fails, and the declarable convention explains it.
    io::write_case_npy_dir(computed_case("mutant.rms_norm.eps_outside.fp32", {{"eps", 1e-2}}, {x, w}), dir / "b_mut");
    // The same outputs declaring it: they pass.
    io::Case declared = computed_case("mutant.rms_norm.eps_outside.fp32", {{"eps", 1e-2}}, {x, w});
    declared.conventions = nlohmann::json{{"eps_placement", "outside"}};
    io::write_case_safetensors(declared, dir / "d_declared.safetensors");
    // gate and up given in the other order.
    const Tensor g = wave(Format::bf16, {2, 8}, 3), u = wave(Format::bf16, {2, 8}, 1);
    io::Case swapped = computed_case("cpu.simd.swiglu.bf16", nlohmann::json::object(), {u, g});
    std::swap(swapped.inputs["gate"], swapped.inputs["up"]);
    io::write_case_safetensors(swapped, dir / "c_swapped.safetensors");

    std::string text;
    EXPECT_EQ(run("validate " + dir.string() + " --out " + out.string(), &text), 1) << text;
    const auto j = validate_json(out)["cases"];
    ASSERT_EQ(j.size(), 4u) << text;
    EXPECT_EQ(j[0]["status"], "PASS") << j[0];
    EXPECT_TRUE(j[0]["has_bound"].get<bool>());
    EXPECT_LE(j[0]["max_util"].get<double>(), 1.0);
    EXPECT_EQ(j[1]["status"], "FAIL") << j[1];
    EXPECT_NE(j[1]["worst"].get<std::string>(), "");
    EXPECT_EQ(j[1]["matches_alternative"], "convention eps_placement=outside (declare it in conform.conventions)") << j[1];
    EXPECT_EQ(j[2]["status"], "FAIL") << j[2];
    EXPECT_EQ(j[2]["matches_alternative"], "gate and up swapped");
    EXPECT_EQ(j[3]["status"], "PASS") << j[3];
    EXPECT_NE(text.find("4 cases: 2 pass, 2 fail, 0 not judged"), std::string::npos) << text;
}

// The op's fixed-data properties run on the stored outputs: under the
// profile ulp:4 a SiTU-GLU output two ulps above beta1*beta2 is within
// budget of the correctly rounded 100 but breaks |h| <= beta1*beta2 by more
// than the one ulp of RN(h) <= 100 that situ_bound admits; correct quantize
// and sinkhorn outputs satisfy theirs.
TEST(CliValidate, FixedDataPropertiesJudgeStoredOutputs) {
    const fs::path dir = fresh_dir("conform_cli_validate_props"), out = dir / "out";
    fs::create_directories(dir);
    Tensor g(Format::fp32, {2}), u(Format::fp32, {2});
    g.set_value(0, 40), u.set_value(0, 250), g.set_value(1, 1), u.set_value(1, 1);  // h(40, 250) = 99.9999992
    io::Case situ = computed_case("cpu.simd.situ_glu.fp32", {{"beta1", 4}, {"beta2", 25}}, {g, u});
    ASSERT_EQ(situ.outputs["h"].value(0), 100.0);
    situ.outputs["h"].set_bits(0, encode(Format::fp32, std::nextafter(std::nextafter(100.0f, 200.0f), 200.0f)));
    io::write_case_safetensors(situ, dir / "a_situ.safetensors");
    io::write_case_safetensors(computed_case("cpu.simd.quantize.fp32", {{"axis", 1}}, {wave(Format::fp32, {4, 8}, 3)}),
                               dir / "b_quant.safetensors");
    io::write_case_safetensors(computed_case("cpu.simd.sinkhorn.fp32", {{"iters", 20}}, {wave(Format::fp32, {3, 4, 4}, 2)}),
                               dir / "c_sinkhorn.safetensors");

    std::string text;
    EXPECT_EQ(run("validate " + dir.string() + " --profile ulp:4 --out " + out.string(), &text), 1) << text;
    const auto j = validate_json(out)["cases"];
    ASSERT_EQ(j.size(), 3u) << text;
    EXPECT_EQ(j[0]["status"], "FAIL") << j[0];
    EXPECT_LE(j[0]["max_ulp"].get<int>(), 2) << j[0];  // every element within its budget
    EXPECT_EQ(j[0]["properties"], nlohmann::json::parse(R"([{"name": "situ_bound", "passed": false, "message":
        "|situ_glu(0x1.4p+5, 0x1.f4p+7)| = 0x1.900004p+6 exceeds beta1*beta2 = 0x1.9p+6"}])"));
    EXPECT_NE(j[0]["message"].get<std::string>().find("property situ_bound"), std::string::npos);
    EXPECT_EQ(j[1]["status"], "PASS") << j[1];
    EXPECT_EQ(j[1]["properties"].size(), 2u);
    EXPECT_EQ(j[2]["status"], "PASS") << j[2];
    ASSERT_EQ(j[2]["properties"].size(), 1u) << j[2];
    EXPECT_EQ(j[2]["properties"][0]["name"], "column_marginals");
    EXPECT_TRUE(j[2]["properties"][0]["passed"].get<bool>()) << j[2];
    std::ifstream md(out / "validate.md");
    const std::string table((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
    EXPECT_NE(table.find("| situ_bound FAIL |"), std::string::npos) << table;
    EXPECT_NE(table.find("| monotone PASS, saturation PASS |"), std::string::npos) << table;
}

// A case is judged by the profile it declares (conform.profile), else by
// --profile, else strict; the report names the tightest profile it meets.
TEST(CliValidate, DeclaredProfileJudgesAndTheTightestMetIsReported) {
    const fs::path dir = fresh_dir("conform_cli_validate_profile"), out = dir / "out";
    fs::create_directories(dir);
    const Tensor x = wave(Format::bf16, {4, 8}, 3);
    io::Case c = computed_case("cpu.simd.silu.bf16", nlohmann::json::object(), {x});
    for (std::int64_t i : {3, 17}) c.outputs["y"].set_bits(i, c.outputs["y"].bits(i) + 2);  // 2 ulp off (or more)
    io::write_case_safetensors(c, dir / "a_plain.safetensors");
    c.profile = "ulp:3";
    io::write_case_safetensors(c, dir / "b_declared.safetensors");
    c.profile = "ulp:0";
    io::write_case_safetensors(c, dir / "c_bad.safetensors");

    std::string text;
    EXPECT_EQ(run("validate " + dir.string() + " --out " + out.string(), &text), 2) << text;
    auto j = validate_json(out)["cases"];
    ASSERT_EQ(j.size(), 3u) << text;
    EXPECT_EQ(j[0]["status"], "FAIL") << j[0];
    EXPECT_EQ(j[0]["profile"], "strict");
    const std::string tightest = j[0]["tightest_profile"];
    EXPECT_TRUE(tightest == "ulp:2" || tightest == "ulp:3") << tightest;
    EXPECT_EQ(j[1]["status"], "PASS") << j[1];
    EXPECT_EQ(j[1]["profile"], "ulp:3");
    EXPECT_EQ(j[2]["status"], "ERROR") << j[2];
    EXPECT_NE(j[2]["message"].get<std::string>().find("conform.profile"), std::string::npos) << j[2];
    // --profile judges the cases that declare none.
    EXPECT_EQ(run("validate " + (dir / "a_plain.safetensors").string() + " --profile ulp:3", &text), 0) << text;
    EXPECT_EQ(run("validate " + (dir / "a_plain.safetensors").string() + " --profile loose", &text), 2) << text;
    EXPECT_NE(text.find("--profile"), std::string::npos) << text;
}

TEST(CliValidate, DeclaredConventionIsHonouredAndAlternativeNamed) {
    const fs::path dir = fresh_dir("conform_cli_validate_conv");
    fs::create_directories(dir);
    // Causal with Lq > Lk: query 0 sees no key.  Written as a literal
    // softmax(s) @ v would: NaN in o and lse of that row.
    const Tensor q = wave(Format::fp32, {1, 3, 4}, 0.5), k = wave(Format::fp32, {1, 2, 4}, 0.5),
                 v = wave(Format::fp32, {1, 2, 4}, 1);
    io::Case c = computed_case("cpu.scalar.attention.fp32", {{"causal", 1}}, {q, k, v});
    for (std::int64_t i = 0; i < 4; ++i) c.outputs["o"].set_bits(i, encode(Format::fp32, NAN));
    c.outputs["lse"].set_bits(0, encode(Format::fp32, NAN));
    io::write_case_safetensors(c, dir / "undeclared.safetensors");
    c.conventions = nlohmann::json{{"masked_row", "nan"}};
    io::write_case_safetensors(c, dir / "declared.safetensors");

    std::string text;
    EXPECT_EQ(run("validate " + (dir / "declared.safetensors").string(), &text), 0) << text;
    EXPECT_EQ(run("validate " + (dir / "undeclared.safetensors").string(), &text), 1) << text;
    EXPECT_NE(text.find("matches convention masked_row=nan (declare it"), std::string::npos) << text;
}

// A packed gated-delta-rule case as a PyTorch user writes it: cu_seqlens in
// I32, no initial_state (so cu_seqlens follows a missing optional input).
TEST(CliValidate, PackedDeltaRuleCaseWithInt32CuSeqlens) {
    const fs::path dir = fresh_dir("conform_cli_validate_varlen");
    fs::create_directories(dir);
    const std::int64_t T = 9, H = 1, dk = 4, dv = 2;
    Tensor g(Format::fp32, {T, H}), beta(Format::fp32, {T, H}), cu(Format::fp32, {3}), none(Format::fp32, {0});
    for (std::int64_t t = 0; t < T; ++t) g.set_value(t, -0.1 * static_cast<double>(t % 3)), beta.set_value(t, 0.5);
    for (std::int64_t i = 0; i < 3; ++i) cu.set_value(i, std::vector<double>{0, 4, 9}[static_cast<std::size_t>(i)]);
    const std::vector<Tensor> in{wave(Format::fp32, {T, H, dk}, 0.5), wave(Format::fp32, {T, H, dk}, 0.5),
                                 wave(Format::fp32, {T, H, dv}, 1), g, beta, none, cu};
    const nlohmann::json params = {{"l2norm", 1}};
    for (const char* kernel : {"cpu.simd.gdn.fp32", "mutant.gdn.varlen_shared_state.fp32"}) {
        io::Case c = computed_case(kernel, params, in);
        c.inputs.erase("initial_state");
        io::StoredTensor i32 = io::StoredTensor::zeros(io::DType::i32, {3});
        for (std::int64_t i = 0; i < 3; ++i) i32.set_bits(i, static_cast<std::uint64_t>(cu.value(i)));
        c.inputs["cu_seqlens"] = i32;
        io::write_case_safetensors(c, dir / (std::string(kernel) + ".safetensors"));
    }
    std::string text;
    EXPECT_EQ(run("validate " + (dir / "cpu.simd.gdn.fp32.safetensors").string(), &text), 0) << text;
    EXPECT_EQ(run("validate " + (dir / "mutant.gdn.varlen_shared_state.fp32.safetensors").string(), &text), 1) << text;
    // cu_seqlens that does not end at T: an error naming the file and the field.
    io::Case bad = computed_case("cpu.simd.gdn.fp32", params, in);
    bad.inputs["cu_seqlens"].set_bits(2, encode(Format::fp32, 8));
    io::write_case_safetensors(bad, dir / "bad.safetensors");
    EXPECT_EQ(run("validate " + (dir / "bad.safetensors").string(), &text), 2) << text;
    EXPECT_NE(text.find("bad.safetensors: gdn_recurrent: cu_seqlens: must start at 0 and end at T = 9"), std::string::npos)
        << text;
}

TEST(CliValidate, BadCasesAreErrorsNamingFileAndField) {
    const fs::path dir = fresh_dir("conform_cli_validate_bad");
    fs::create_directories(dir);
    const Tensor x = wave(Format::fp32, {2, 8}, 1), w = wave(Format::fp32, {8}, 1);
    io::Case good = computed_case("cpu.simd.rms_norm.fp32", nlohmann::json::object(), {x, w});
    io::Case unknown = good;
    unknown.op = "rms_nrom";
    io::write_case_safetensors(unknown, dir / "unknown_op.safetensors");
    io::Case missing = good;
    missing.inputs.erase("weight");
    io::write_case_safetensors(missing, dir / "missing.safetensors");
    io::Case shape = good;
    shape.outputs["y"] = io::StoredTensor::from_tensor(wave(Format::fp32, {2, 7}, 1));
    io::write_case_safetensors(shape, dir / "shape.safetensors");
    io::Case param = good;
    param.params = {{"epsilon", 1e-6}};
    io::write_case_safetensors(param, dir / "param.safetensors");
    std::ofstream(dir / "truncated.safetensors") << "\x10\x00\x00";
    io::write_case_safetensors(good, dir / "zz_good.safetensors");  // still judged after the bad ones

    std::string text;
    EXPECT_EQ(run("validate " + dir.string(), &text), 2) << text;
    EXPECT_NE(text.find("unknown_op.safetensors: conform.op: unknown op \"rms_nrom\""), std::string::npos) << text;
    EXPECT_NE(text.find("missing.safetensors: tensor \"weight\" missing"), std::string::npos) << text;
    EXPECT_NE(text.find("shape.safetensors: tensor \"out.y\": shape [2,7]"), std::string::npos) << text;
    EXPECT_NE(text.find("param.safetensors: conform.params: \"epsilon\" is not a parameter"), std::string::npos) << text;
    EXPECT_NE(text.find("truncated.safetensors"), std::string::npos) << text;
    EXPECT_NE(text.find("PASS " + (dir / "zz_good.safetensors").string()), std::string::npos) << text;
    EXPECT_EQ(run("validate " + (dir / "no_such").string(), &text), 2) << text;
}

// A model dump given to validate is not misreported as a broken case: named,
// it is an error pointing at conform diverge; found in a directory, it is
// skipped with the same note.
TEST(CliValidate, ModelDumpsPointToDiverge) {
    const fs::path dir = fresh_dir("conform_cli_validate_model");
    fs::create_directories(dir / "only_dumps");
    io::ModelDump d;
    d.contract = {{"layers", 1}};
    d.input = io::StoredTensor::from_tensor(wave(Format::fp32, {2, 4}, 1));
    io::write_model_dump(d, dir / "model.safetensors");
    io::write_model_dump(d, dir / "only_dumps" / "model.safetensors");
    const Tensor x = wave(Format::fp32, {2, 8}, 1), w = wave(Format::fp32, {8}, 1);
    io::write_case_safetensors(computed_case("cpu.simd.rms_norm.fp32", nlohmann::json::object(), {x, w}),
                               dir / "rms.safetensors");
    const std::string note = (dir / "model.safetensors").string() + " is a model dump (model/1): use conform diverge";

    std::string text;
    EXPECT_EQ(run("validate " + (dir / "model.safetensors").string(), &text), 2) << text;
    EXPECT_NE(text.find("ERROR " + (dir / "model.safetensors").string() + " " + note), std::string::npos) << text;
    EXPECT_EQ(text.find("conform.op"), std::string::npos) << "not reported as a case without an op: " << text;

    EXPECT_EQ(run("validate " + dir.string(), &text), 0) << text;
    EXPECT_NE(text.find("skipped: " + note), std::string::npos) << text;
    EXPECT_NE(text.find("1 cases: 1 pass, 0 fail, 0 not judged"), std::string::npos) << text;

    EXPECT_EQ(run("validate " + (dir / "only_dumps").string(), &text), 2) << text;
    EXPECT_NE(text.find("only model dumps: use conform diverge"), std::string::npos) << text;
}

}  // namespace cli_test
