// conform synth as a user meets it: a model dump holding the declared
// contract, the weights, the input and every point; bad input exits 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli_testing.hpp"

#include "io/model_dump.hpp"
#include "model/graph.hpp"

namespace synth_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

namespace fs = std::filesystem;
using namespace conform;

namespace {

int run(const std::string& args, std::string* output = nullptr) {
    return cli_testing::run_conform("synth " + args, output);
}

std::string temp(const std::string& name) {
    return (fs::temp_directory_path() / (name + "." + std::to_string(getpid()) + ".safetensors")).string();
}

const std::string kSmall = "--width 32 --heads 4 --kv-heads 2 --head-dim 8 --ffn 48 --tokens 5 ";

}  // namespace

TEST(Synth, WritesEveryPointWithTheDeclaredContract) {
    const std::string out = temp("synth_hybrid");
    std::string log;
    ASSERT_EQ(run("--layers 4 --pattern hybrid --dtype bf16 " + kSmall +
                      "--mutant mutant.rms_norm.cast_before_weight.bf16 --at 1 --convention rope_pairing=interleaved --out " + out,
                  &log),
              0)
        << log;
    const io::ModelDump d = io::read_model_dump(out);
    const model::ModelContract c = model::contract_from_json(d.contract);
    EXPECT_EQ(c.layers, 4);
    EXPECT_EQ(c.pattern, "hybrid");
    EXPECT_EQ(c.dtype, Format::bf16);
    EXPECT_EQ(c.conventions.at("rope_pairing"), "half");  // declared, not what the candidate did
    EXPECT_NE(d.impl.find("mutant=mutant.rms_norm.cast_before_weight.bf16 at=1"), std::string::npos) << d.impl;
    EXPECT_NE(d.impl.find("rope_pairing=interleaved"), std::string::npos) << d.impl;
    for (const model::Step& s : model::build_graph(c)) {
        ASSERT_TRUE(d.activations.count(s.point)) << s.point;
        EXPECT_EQ(d.activations.at(s.point).shape, s.shape) << s.point;
    }
    for (const model::WeightSpec& w : model::weight_specs(c)) EXPECT_TRUE(d.weights.count(w.name)) << w.name;
    EXPECT_EQ(d.input.shape, (std::vector<std::int64_t>{5, 32}));
    fs::remove(out);
}

TEST(Synth, BadInputExitsTwo) {
    const std::string out = temp("synth_bad");
    std::string log;
    EXPECT_EQ(run("--dtype int8 --out " + out, &log), 2);
    EXPECT_NE(log.find("contract.dtype"), std::string::npos) << log;
    EXPECT_EQ(run("--layers 2 --mutant mutant.rms_norm.nope.bf16 --at 0 --out " + out, &log), 2);
    EXPECT_NE(log.find("not a registered mutant"), std::string::npos) << log;
    EXPECT_EQ(run("--layers 2 --kv-heads 3 --out " + out, &log), 2);
    EXPECT_NE(log.find("contract.kv_heads"), std::string::npos) << log;
    EXPECT_EQ(run("--layers 2 --convention causal=sideways --out " + out, &log), 2);
    EXPECT_NE(log.find("contract.conventions.causal"), std::string::npos) << log;
    EXPECT_EQ(run("--layers 2 --attention-softcap -1 --out " + out, &log), 2);
    EXPECT_NE(log.find("contract.attention_softcap"), std::string::npos) << log;
    EXPECT_EQ(run("--layers 2", &log), 2);  // --out is required
    EXPECT_FALSE(fs::exists(out));
}

TEST(Synth, ContractFileThenOptions) {
    const std::string json = temp("synth_contract") + ".json", out = temp("synth_contract");
    {
        std::ofstream f(json);
        f << R"({"layers": 3, "width": 32, "heads": 2, "kv_heads": 1, "head_dim": 16, "ffn": 40, "tokens": 4,
                 "norm": "layer_norm", "mlp": "gelu", "dtype": "fp16"})";
    }
    std::string log;
    ASSERT_EQ(run("--contract " + json + " --layers 2 --out " + out, &log), 0) << log;
    ASSERT_EQ(run("--contract " + json + " --attention-softcap 0.5 --out " + out + ".capped", &log), 0) << log;
    EXPECT_EQ(model::contract_from_json(io::read_model_dump(out + ".capped").contract).attention_softcap, 0.5);
    fs::remove(out + ".capped");
    const model::ModelContract c = model::contract_from_json(io::read_model_dump(out).contract);
    EXPECT_EQ(c.layers, 2);  // the option wins
    EXPECT_EQ(c.norm, model::NormKind::layer_norm);
    EXPECT_EQ(c.mlp, model::MlpKind::gelu);
    EXPECT_EQ(c.dtype, Format::fp16);  // from the file: --dtype not given
    EXPECT_EQ(c.attention_softcap, 0);
    {
        std::ofstream f(json);
        f << R"({"layers": 3, "widht": 32})";
    }
    EXPECT_EQ(run("--contract " + json + " --out " + out, &log), 2);
    EXPECT_NE(log.find("contract.widht: unknown key"), std::string::npos) << log;
    fs::remove(json);
    fs::remove(out);
}

}  // namespace synth_test
