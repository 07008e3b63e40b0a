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

namespace fs = std::filesystem;

namespace {

int run(const std::string& args, std::string* output = nullptr) {
    // ctest runs the tests of this file in parallel processes: one file per process and call.
    static int calls = 0;
    const std::string out = (fs::temp_directory_path() / ("conform_cli_out." + std::to_string(getpid()) + "." +
                                                         std::to_string(calls++) + ".txt")).string();
    const int rc = std::system((std::string(CONFORM_BINARY) + " " + args + " > " + out + " 2>&1").c_str());
    if (output) {
        std::ifstream in(out);
        output->assign(std::istreambuf_iterator<char>(in), {});
    }
    fs::remove(out);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

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
    // 17 ops (13 foundation ops, softmax, rope, attention, sinkhorn) x {fp32, fp16, bf16} x {simd, scalar},
    // plus lse_merge's three scalar kernels (no naive baseline), quantize's {simd, scalar} x {fp32, fp16,
    // bf16} and int8_gemm's {simd, scalar} x {fp32, fp16 output} (no naive baselines)
    EXPECT_EQ(kernels, 17 * 3 * 2 + 3 + 6 + 4);
    EXPECT_EQ(baselines, 17 * 3);
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
