// Golden data: every stored output of every op is the oracle's, bit for bit;
// every built-in kernel passes every golden vector of its format, and the
// check can fail (a mutant of every family with mutants fails it); `conform
// golden` says so per kernel and exits 1 on a failure; the readers reject
// malformed files naming the file and the field.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli_testing.hpp"
#include "golden/golden.hpp"
#include "impls/cpu/isa.hpp"

namespace golden_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

const Format kFormats[] = {Format::fp32, Format::fp16, Format::bf16};
constexpr int kVectorsPerFile = 6;

std::vector<golden::Vector> vectors_of(const std::string& op, Format f) {
    return golden::read_vectors(golden::vector_file(golden::default_dir(), op, f));
}

std::int64_t output_elements(const std::vector<golden::Vector>& vs) {
    std::int64_t n = 0;
    for (const auto& v : vs)
        for (const Tensor& t : v.outputs) n += t.numel();
    return n;
}

}  // namespace

TEST(Golden, EveryFileStoresEveryOutputOfItsOp) {
    for (const auto& op : op_specs())
        for (Format f : kFormats) {
            const auto vs = vectors_of(op.name, f);
            ASSERT_EQ(vs.size(), kVectorsPerFile) << op.name << " " << name(f);
            for (const auto& v : vs) {
                EXPECT_EQ(v.op, op.name);
                EXPECT_EQ(v.format, f);
                ASSERT_EQ(v.outputs.size(), op.outputs.size()) << op.name;
                const std::vector<Format> formats = golden::output_formats(op, f);
                for (std::size_t o = 0; o < op.outputs.size(); ++o)
                    EXPECT_EQ(v.outputs[o].format(), formats[o]) << op.name << "." << op.outputs[o];
            }
        }
    // The op's fixed widths, not the vector's: attention's lse, gdn's state, int8_gemm's exact accumulator.
    EXPECT_EQ(vectors_of("attention", Format::bf16)[0].outputs.at(1).format(), Format::fp32);
    EXPECT_EQ(vectors_of("gdn", Format::bf16)[0].outputs.at(1).format(), Format::fp32);
    EXPECT_EQ(vectors_of("int8_gemm", Format::fp16)[0].outputs.at(0).format(), Format::fp64);
    EXPECT_EQ(vectors_of("int8_block", Format::fp16)[0].outputs.size(), 11u);  // out and its ten stages
}

TEST(Golden, OracleReproducesEveryOutputBitForBit) {
    std::size_t vectors = 0;
    for (const auto& op : op_specs())
        for (Format f : kFormats) {
            const auto vs = vectors_of(op.name, f);
            for (std::size_t i = 0; i < vs.size(); ++i)
                EXPECT_EQ(golden::oracle_difference(vs[i]), "") << op.name << "." << name(f) << " vector " << i;
            vectors += vs.size();
        }
    EXPECT_EQ(vectors, op_specs().size() * std::size(kFormats) * kVectorsPerFile);
}

TEST(Golden, OracleDifferenceNamesTheChangedOutputElement) {
    auto v = vectors_of("attention", Format::fp32).at(0);
    Tensor& lse = v.outputs.at(1);
    lse.set_bits(1, lse.bits(1) ^ 1);  // one ulp off in the second output, not the first
    const std::string why = golden::oracle_difference(v);
    EXPECT_NE(why.find("lse element 1"), std::string::npos) << why;
}

TEST(Golden, EveryBuiltinKernelPassesEveryVectorOfItsFormat) {
    int kernels = 0;
    for (const KernelInfo& k : builtin_registry().all()) {
        if (k.role != Role::kernel) continue;
        const auto vs = vectors_of(k.op, golden::vector_format(k));
        const golden::KernelCheck c = golden::check_kernel(k, vs);
        EXPECT_TRUE(c.passed) << k.name << ": " << c.failure;
        EXPECT_EQ(c.vectors, kVectorsPerFile) << k.name;
        EXPECT_EQ(c.elements, output_elements(vs)) << k.name << ": every element of every output judged";
        EXPECT_FALSE(c.worst.empty()) << k.name;
        ++kernels;
    }
    EXPECT_GE(kernels, 100);
}

// The check can fail: in every family that has mutants, some mutant fails
// its golden vectors (docs/numerics.md, "Golden data", says which survive and why).
TEST(Golden, AMutantOfEveryFamilyFailsItsGoldenVectors) {
    std::map<std::string, std::string> killed_by;  // family -> the first mutant that fails
    std::map<std::string, int> mutants;
    for (const KernelInfo& k : builtin_registry().all()) {
        if (k.role != Role::mutant) continue;
        const std::string& family = find_op(k.op)->family;
        ++mutants[family];
        if (killed_by.count(family)) continue;
        const golden::KernelCheck c = golden::check_kernel(k, vectors_of(k.op, golden::vector_format(k)));
        if (!c.passed) killed_by[family] = k.name + " (" + c.failure + ")";
    }
    EXPECT_GE(mutants.size(), 10u);
    for (const auto& [family, count] : mutants) {
        EXPECT_TRUE(killed_by.count(family)) << family << ": none of its " << count << " mutants fails";
        if (killed_by.count(family)) std::cout << family << ": " << killed_by[family] << "\n";
    }
}

// Judging every output matters: these mutants get the first output right
// and fail only on a later one (gdn's final state, int8_block's scores).
TEST(Golden, MutantsWrongOnlyInALaterOutputFail) {
    for (const auto& [mutant, output] : {std::pair{"mutant.gdn.final_state_not_decayed.fp32", "state["},
                                         std::pair{"mutant.kda.final_state_not_decayed.bf16", "state["},
                                         std::pair{"mutant.int8_block.unscaled_scores.fp16", ": s["}}) {
        const KernelInfo& k = *builtin_registry().find(mutant);
        const golden::KernelCheck c = golden::check_kernel(k, vectors_of(k.op, golden::vector_format(k)));
        EXPECT_FALSE(c.passed) << mutant;
        EXPECT_NE(c.failure.find(output), std::string::npos) << mutant << ": " << c.failure;
    }
}

// The structure the vectors hold for the kernels' branches (docs/numerics.md, "Golden data").
TEST(Golden, VectorsHoldTheStructureKernelsBranchOn) {
    const auto attention = vectors_of("attention", Format::fp16);
    EXPECT_EQ(attention[0].inputs[1].shape(), (std::vector<std::int64_t>{2, 70, 4}));  // two KV heads, two key tiles
    EXPECT_EQ(attention[2].params.get("window", 0), 2);
    EXPECT_EQ(attention[4].params.get("softcap", 0), 5);
    const auto gdn = vectors_of("gdn", Format::fp32);
    EXPECT_EQ(gdn[3].inputs[0].shape()[0], 32);  // saturated decay over 32 tokens
    ASSERT_EQ(gdn[5].inputs.size(), 7u);         // packed: cu_seqlens {0, ..., 8}, three sequences
    EXPECT_EQ(gdn[5].inputs[6].numel(), 4);
    const golden::Vector masked = vectors_of("softmax", Format::bf16).at(2);
    bool empty_row = false;
    for (std::int64_t r = 0, n = masked.inputs[0].shape()[1]; r < masked.inputs[0].shape()[0]; ++r) {
        bool all = true;
        for (std::int64_t j = 0; j < n; ++j) all = all && masked.inputs[0].value(r * n + j) == -INFINITY;
        empty_row = empty_row || all;
    }
    EXPECT_TRUE(empty_row) << "softmax's masked vector holds a fully masked row";
}

TEST(Golden, NoVectorIsNeverAPass) {
    const KernelInfo& k = *builtin_registry().find("cpu.simd.silu.fp32");
    const golden::KernelCheck c = golden::check_kernel(k, {});
    EXPECT_FALSE(c.passed);
    EXPECT_EQ(c.vectors, 0);
}

TEST(Golden, KernelsOverCodesReadInt8CodesAndFp32Scales) {
    const KernelInfo& k = *builtin_registry().find("cpu.simd.int8_gemm.fp16");
    EXPECT_EQ(golden::vector_format(k), Format::fp16);
    const auto v = vectors_of("int8_gemm", Format::fp16).at(0);
    const auto in = golden::kernel_inputs(k, v);
    ASSERT_EQ(in.size(), 4u);
    EXPECT_EQ(in[0].format(), Format::int8);
    EXPECT_EQ(in[1].format(), Format::int8);
    EXPECT_EQ(in[2].format(), Format::fp32);
    for (std::int64_t i = 0; i < v.inputs[0].numel(); ++i) EXPECT_EQ(in[0].value(i), v.inputs[0].value(i));
    auto inexact = v;
    inexact.inputs[0].set_value(0, 0.5);  // not a code
    EXPECT_THROW(golden::kernel_inputs(k, inexact), std::invalid_argument);
}

TEST(Golden, WrittenFilesReadBackBitForBit) {
    const auto dir = std::filesystem::temp_directory_path() / ("conform_golden_rt." + std::to_string(getpid()));
    for (const std::string op : {"attention", "int8_block", "quantize"}) {
        const auto vs = vectors_of(op, Format::bf16);
        const auto file = golden::vector_file(dir, op, Format::bf16);
        golden::write_vectors(file, vs);
        const auto back = golden::read_vectors(file);
        ASSERT_EQ(back.size(), vs.size());
        for (std::size_t i = 0; i < vs.size(); ++i) {
            EXPECT_EQ(back[i].family, vs[i].family);
            EXPECT_EQ(back[i].params.values(), vs[i].params.values());
            for (auto [a, b] : {std::pair{&back[i].inputs, &vs[i].inputs}, std::pair{&back[i].outputs, &vs[i].outputs}}) {
                ASSERT_EQ(a->size(), b->size());
                for (std::size_t t = 0; t < a->size(); ++t) {
                    EXPECT_EQ((*a)[t].format(), (*b)[t].format());
                    EXPECT_EQ((*a)[t].shape(), (*b)[t].shape());
                    for (std::int64_t e = 0; e < (*a)[t].numel(); ++e) EXPECT_EQ((*a)[t].bits(e), (*b)[t].bits(e));
                }
            }
        }
    }
    std::filesystem::remove_all(dir);
}

TEST(Golden, MalformedFilesNameFileAndField) {
    const auto dir = std::filesystem::temp_directory_path() / ("conform_golden_bad." + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const auto file = dir / "bad.json";
    auto expect_error = [&](const std::string& text, const std::string& needle) {
        std::ofstream(file) << text;
        try {
            golden::read_vectors(file);
            ADD_FAILURE() << "accepted: " << text;
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "want '" << needle << "' in " << e.what();
        }
    };
    // A valid silu file, then one field broken at a time.
    const std::string x = R"({"format": "fp16", "shape": [2], "bits": ["0x3c00", "0x0"], "hex": ["0x1p+0", "0x0p+0"]})";
    const std::string y = R"({"format": "fp16", "shape": [2], "bits": ["0x39d9", "0x0"], "hex": ["0x1.764p-1", "0x0p+0"]})";
    auto file_with = [](const std::string& vector) {
        return R"({"version": 2, "op": "silu", "format": "fp16", "vectors": [)" + vector + "]}";
    };
    auto vector_with = [&](const std::string& in, const std::string& out) {
        return R"({"family": "normal", "params": {}, "inputs": {"x": )" + in + R"(}, "outputs": {"y": )" + out + "}}";
    };
    std::ofstream(file) << file_with(vector_with(x, y));
    ASSERT_EQ(golden::read_vectors(file).size(), 1u);
    EXPECT_EQ(golden::oracle_difference(golden::read_vectors(file)[0]), "");

    expect_error("{not json", "invalid JSON");
    expect_error(R"([{"op": "silu"}])", "expected an object");
    expect_error(R"({"version": 1, "op": "silu", "format": "fp16", "vectors": []})", "version: this build reads version 2");
    expect_error(R"({"version": 2, "op": "nope", "format": "fp16", "vectors": []})", "op: expected an op name");
    expect_error(R"({"version": 2, "op": "silu", "format": "fp8", "vectors": []})", "format: unknown format");
    expect_error(R"({"version": 2, "op": "silu", "format": "fp16", "vectors": [], "extra": 1})", "unexpected key \"extra\"");
    expect_error(file_with(R"({"family": "normal", "params": {}, "inputs": {}, "outputs": {}})"), "vectors[0].inputs.x: missing");
    expect_error(file_with(R"({"family": "\u001b[2J", "params": {}, "inputs": {}, "outputs": {}})"),
                 "vectors[0].family: unknown value family \"\\x1b[2J\"");
    expect_error(file_with(R"({"family": "normal", "params": {"eps": 1}, "inputs": {}, "outputs": {}})"),
                 "vectors[0].params: \"eps\" is not a parameter of silu");
    expect_error(file_with(R"({"family": "normal", "params": {}, "inputs": {"x": )" + x + R"(}, "outputs": {}})"),
                 "vectors[0].outputs.y: missing");
    expect_error(file_with(vector_with(R"({"format": "fp16", "shape": [2], "bits": ["0x0"], "hex": ["0x0p+0"]})", y)),
                 "vectors[0].inputs.x.bits: expected an array of 2 strings");
    expect_error(file_with(vector_with(R"({"format": "fp16", "shape": [2], "bits": ["0x3c00", "0x10000"], "hex": ["0x1p+0", "0x0p+0"]})", y)),
                 "vectors[0].inputs.x.bits[1]: 0x10000 is wider than fp16's 16 bits");
    expect_error(file_with(vector_with(R"({"format": "fp16", "shape": [2], "bits": ["0x3c00", "-1"], "hex": ["0x1p+0", "0x0p+0"]})", y)),
                 "vectors[0].inputs.x.bits[1]: expected a bit pattern");
    expect_error(file_with(vector_with(R"({"format": "fp16", "shape": [2], "bits": ["0x3c00", "0x0"], "hex": ["0x1p+0", "0x1p+0"]})", y)),
                 "vectors[0].inputs.x.hex[1]: expected \"0x0p+0\"");
    expect_error(file_with(vector_with(R"({"format": "fp16", "shape": [4611686018427387904, 4], "bits": [], "hex": []})", y)),
                 "vectors[0].inputs.x.shape: shape");
    expect_error(file_with(vector_with(x, R"({"format": "fp16", "shape": [1], "bits": ["0x0"], "hex": ["0x0p+0"]})")),
                 "vectors[0].outputs.y.shape: [1], but the inputs give [2]");
    std::filesystem::remove_all(dir);
}

namespace {

props::Stats per_case(const std::vector<double>& log_util, const std::vector<double>& misrounded) {
    props::Stats s;
    for (double u : log_util) s.add_case_log_util(u);
    for (double f : misrounded) s.add_case_misrounded(f);
    return s;
}

}  // namespace

// Drift pairs each case with the recorded one: a ULP-budget kernel beyond
// its recorded max ulp; the geometric mean of the worst-utilization ratios
// above kUtilDriftRatio; the mean increase in the fraction misrounded above
// kMisroundedDrift.  Cases either side lacks are not paired; utilizations
// below kUtilFloor compare as equal.
TEST(Golden, DriftPairsEachCaseWithTheRecordedOne) {
    const KernelInfo* ulp_kernel = builtin_registry().find("cpu.simd.silu.fp32");
    const KernelInfo* bound_kernel = builtin_registry().find("cpu.simd.rms_norm.fp32");
    ASSERT_TRUE(ulp_kernel && bound_kernel);
    const double nan = std::nan("");
    golden::Profile rec;
    rec.kernel = "k";
    rec.isa = "avx2";
    rec.max_ulp = 1;
    rec.case_log_util = {std::log(0.1), std::log(0.2), nan, std::log(1e-80)};
    rec.case_misrounded = {0.5, 0, nan, 0.1};
    auto scaled = [&](double k, std::vector<double> misrounded) {
        return per_case({std::log(0.1 * k), std::log(0.2 * k), std::log(0.3), std::log(1e-70)}, misrounded);
    };
    props::Stats same = scaled(1, {0.5, 0, 0.9, 0.1});
    same.add_ulp(1);
    EXPECT_EQ(golden::drift(rec, *ulp_kernel, same), "");
    EXPECT_EQ(golden::drift(rec, *bound_kernel, same), "");
    same.add_ulp(2);
    EXPECT_NE(golden::drift(rec, *ulp_kernel, same).find("max ulp 2 above the recorded 1"), std::string::npos);
    EXPECT_EQ(golden::drift(rec, *bound_kernel, same), "") << "max ulp is not a drift signal of bound-based outputs";
    // Two cases x1.3, one below the floor both times: (2 log 1.3) / 3 = log 1.191.
    EXPECT_EQ(golden::drift(rec, *bound_kernel, scaled(1.3, rec.case_misrounded)), "");
    const std::string twice = golden::drift(rec, *bound_kernel, scaled(2, rec.case_misrounded));
    EXPECT_NE(twice.find("worst utilization per case 1.587x the recorded (geometric mean over 3 paired cases"),
              std::string::npos) << twice;
    // Misrounded: +0.02 on one of three paired cases is 0.0067 on the mean; +0.04 is 0.0133.
    EXPECT_EQ(golden::drift(rec, *ulp_kernel, scaled(1, {0.52, 0, nan, 0.1})), "");
    const std::string more = golden::drift(rec, *ulp_kernel, scaled(1, {0.54, 0, nan, 0.1}));
    EXPECT_NE(more.find("0.0133 more of the results per case not correctly rounded"), std::string::npos) << more;
}

// A run of another seed or case count is not paired with the recording:
// the checker re-runs within_budget on the recorded cases.
TEST(Golden, CheckerRerunsTheRecordedCasesForAnyOtherSeed) {
    const KernelInfo& k = *builtin_registry().find("cpu.simd.rms_norm.fp32");
    const auto dir = std::filesystem::temp_directory_path() / "conform_checker_test";
    std::filesystem::remove_all(dir);
    golden::Profile rec = golden::record_profile(k, 30);
    golden::write_profile(golden::profile_file(dir, k.name), rec);
    props::RunConfig cfg;
    cfg.seed = 7;
    const auto check = golden::profile_checker(dir);
    EXPECT_EQ(check(k, cfg, props::Stats{}), "") << "an unchanged kernel on its recorded cases";
    for (double& u : rec.case_log_util) u -= std::log(3);  // as if it had been three times as accurate
    golden::write_profile(golden::profile_file(dir, k.name), rec);
    EXPECT_NE(check(k, cfg, props::Stats{}).find("3.000x the recorded"), std::string::npos);
    std::filesystem::remove_all(dir);
}

// The kernels whose AVX-512 path gives other bits than their AVX2 path
// (impls/cpu/isa.hpp) stay within the drift tolerances of a profile
// recorded on the other path: CI machines with and without AVX-512 share
// the recorded profiles.
TEST(Golden, ProfilesHoldOnTheOtherIsaPath) {
    if (!cpu::has_avx512()) GTEST_SKIP() << "needs both paths: this machine has " << cpu::isa_name();
    for (const char* op : {"sigmoid", "silu", "gelu_erf", "gelu_tanh", "softplus", "geglu", "situ_glu"}) {
        const std::string name = std::string("cpu.simd.") + op + ".fp32";
        const KernelInfo& k = *builtin_registry().find(name);
        const auto rec = golden::read_profile(golden::profile_file(golden::default_dir(), name));
        ASSERT_TRUE(rec.has_value()) << name;
        std::optional<cpu::Avx2Only> avx2;
        if (rec->isa == "avx512") avx2.emplace();  // else: recorded on AVX2, checked on AVX-512 here
        props::RunConfig cfg;
        cfg.seed = rec->seed + 1;  // any other seed: the checker re-runs the recorded cases
        EXPECT_EQ(golden::profile_checker(golden::default_dir())(k, cfg, props::Stats{}), "")
            << name << " recorded on " << rec->isa << ", checked on " << cpu::isa_name();
    }
}

TEST(Golden, ProfilesRoundTripAndNameTheirErrors) {
    const auto dir = std::filesystem::temp_directory_path() / "conform_profile_test";
    std::filesystem::create_directories(dir);
    golden::Profile rec;
    rec.kernel = "cpu.simd.rms_norm.fp32";
    rec.seed = 3;
    rec.cases = 2;
    rec.isa = "avx512";
    rec.max_ulp = 3;
    rec.case_log_util = {-3.5, std::nan("")};
    rec.case_misrounded = {0.1, 0.2};
    golden::write_profile(dir / "p.json", rec);
    const auto back = golden::read_profile(dir / "p.json");
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->seed, 3u);
    EXPECT_EQ(back->isa, "avx512");
    ASSERT_EQ(back->case_log_util.size(), 2u);
    EXPECT_EQ(back->case_log_util[0], -3.5);
    EXPECT_TRUE(std::isnan(back->case_log_util[1]));
    EXPECT_EQ(back->case_misrounded, rec.case_misrounded);
    EXPECT_EQ(back->max_ulp, 3u);
    EXPECT_FALSE(golden::read_profile(dir / "missing.json").has_value());
    {
        std::ofstream(dir / "bad.json") << R"({"version": 3, "kernel": "k", "seed": 1, "cases": 2, "isa": "avx2",
            "max_ulp": 0, "case_log_util": [-1, 0.5], "case_misrounded": [0, 0]})";
    }
    try {
        golden::read_profile(dir / "bad.json");
        ADD_FAILURE() << "a utilization above 1 was accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("case_log_util[1]"), std::string::npos) << e.what();
    }
    std::filesystem::remove_all(dir);
}

TEST(GoldenCli, JudgesKernelsAndExitsOneOnAFailure) {
    std::string out;
    EXPECT_EQ(cli_testing::run_conform("golden --op silu --dtype bf16", &out), 0) << out;
    EXPECT_NE(out.find("cpu.simd.silu.bf16"), std::string::npos) << out;
    EXPECT_NE(out.find(" 6 vectors"), std::string::npos) << out;
    EXPECT_NE(out.find("PASS"), std::string::npos) << out;
    EXPECT_NE(out.find("0 not reproduced by the oracle"), std::string::npos) << out;

    EXPECT_EQ(cli_testing::run_conform("golden --op softmax --kernel cpu.simd.softmax.fp16 --kernel mutant.softmax.low_sum.fp16", &out), 1) << out;
    EXPECT_NE(out.find("mutant.softmax.low_sum.fp16"), std::string::npos) << out;
    EXPECT_NE(out.find("FAIL"), std::string::npos) << out;
    EXPECT_NE(out.find("1 pass, 1 fail"), std::string::npos) << out;
}

TEST(GoldenCli, MalformedVectorFileExitsTwoNamingIt) {
    const auto dir = std::filesystem::temp_directory_path() / ("conform_golden_cli." + std::to_string(getpid()));
    const auto file = golden::vector_file(dir, "silu", Format::fp32);
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << R"({"version": 2, "op": "silu", "format": "fp32", "vectors": [{}]})";
    std::string out;
    EXPECT_EQ(cli_testing::run_conform("golden --op silu --dtype fp32 --dir " + dir.string(), &out), 2) << out;
    EXPECT_NE(out.find(file.string()), std::string::npos) << out;
    EXPECT_NE(out.find("vectors[0].family: missing"), std::string::npos) << out;
    std::filesystem::remove_all(dir);
}

}  // namespace golden_test
