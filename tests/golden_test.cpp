// Golden data: the oracle reproduces every golden vector bit for bit, and
// the readers reject malformed files naming the file and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "golden/golden.hpp"
#include "oracle/eval.hpp"

using namespace conform;

TEST(Golden, OracleReproducesEveryVectorBitForBit) {
    int vectors = 0;
    for (const auto& op : op_specs())
        for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
            const auto file = golden::vector_file(golden::default_dir(), op.name, f);
            for (const auto& v : golden::read_vectors(file)) {
                std::vector<TensorView> views;
                for (const auto& t : v.inputs) views.push_back(t.view());
                const auto r = oracle::evaluate(*find_op(v.op), v.params, views, v.format);
                ASSERT_EQ(r.rounded.numel(), v.expected.numel()) << file;
                for (std::int64_t i = 0; i < v.expected.numel(); ++i)
                    ASSERT_EQ(r.rounded.bits(i), v.expected.bits(i)) << file << " element " << i;
                ++vectors;
            }
        }
    EXPECT_GE(vectors, 13 * 3 * 6);
}

TEST(Golden, MalformedFilesNameFileAndField) {
    const auto dir = std::filesystem::temp_directory_path() / "conform_golden_test";
    std::filesystem::create_directories(dir);
    auto expect_error = [&](const std::string& text, const std::string& needle) {
        const auto file = dir / "bad.json";
        std::ofstream(file) << text;
        try {
            golden::read_vectors(file);
            ADD_FAILURE() << "accepted: " << text;
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_error("{not json", "not valid JSON");
    expect_error(R"([{"op": "nope", "format": "fp16", "params": {}}])", "[0].op");
    expect_error(R"([{"op": "silu", "format": "fp8", "params": {}}])", "[0].format");
    expect_error(R"([{"op": "silu", "format": "fp16", "params": {}, "inputs": {}}])", "[0].inputs.x");
    expect_error(R"([{"op": "silu", "format": "fp16", "params": {},
                      "inputs": {"x": {"shape": [2], "bits": ["0x0"]}}}])", "[0].inputs.x.bits");
    std::filesystem::remove_all(dir);
}

TEST(Golden, ProfilesCompareByMaxUlpAndUtilization) {
    golden::Profile rec{"k", 1, 100, 1, {0.2, 0.5, 0.9, 0.95, 0.99}};
    EXPECT_EQ(golden::compare_profiles(rec, rec), "");
    auto worse = rec;
    worse.max_ulp = 2;
    EXPECT_NE(golden::compare_profiles(rec, worse).find("max ulp"), std::string::npos);
    worse = rec;
    worse.util_quantiles[2] = 0.9 + golden::kUtilSlack * 1.5;
    EXPECT_NE(golden::compare_profiles(rec, worse).find("p99"), std::string::npos);
    worse.util_quantiles[2] = 0.9 + golden::kUtilSlack * 0.5;  // within the documented slack
    EXPECT_EQ(golden::compare_profiles(rec, worse), "");
}
