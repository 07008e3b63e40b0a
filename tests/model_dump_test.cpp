// Model dumps (io/model_dump.hpp, docs/dumps.md "Model dumps (model/1)"):
// round trips through memory and files, one test per class of malformed
// container (each asserting the message names the file and the field), byte
// flips and truncations that must never crash, is_model_dump, and the Python
// writer and recorder (python/conform_model.py) read back here.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "io/case_file.hpp"
#include "io/model_dump.hpp"
#include "tests/io_testing.hpp"

namespace model_dump_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

namespace fs = std::filesystem;
using namespace conform;
using namespace conform::io;
using namespace conform::io_testing;
using nlohmann::json;

namespace {

constexpr const char* kSource = "model.safetensors";

ModelDump sample_dump() {
    ModelDump d;
    d.contract = {{"layers", 2}, {"width", 4}, {"eps", 1e-6}, {"conventions", {{"rope_pairing", "half"}}}};
    d.impl = "torch 2.3 cuda bf16";
    d.input = tensor(DType::bf16, {2, 4}, {0x3F80, 0xBF80, 0x0001, 0x7F80, 0xFF80, 0x7FC1, 0x8000, 0x4049});
    d.activations = {
        {"layers.0.attn_norm", tensor(DType::f32, {2, 4}, {0x3F800000, 0x80000000, 0x7F800000, 0x00000001})},
        {"layers.0.output", tensor(DType::f16, {2, 4}, {0x3C00, 0x0001, 0xFC00})},
        {"layers.1.mid", tensor(DType::f64, {1, 1}, {0x3FF0000000000001ull})},
        {"layers.1.hc-x", tensor(DType::bf16, {4, 2, 4}, {0x3F80})},
    };
    d.weights = {
        {"layers.0.q.weight", tensor(DType::bf16, {4, 4}, {0x3F80, 0x4000})},
        {"layers.0.attn_norm.weight", tensor(DType::f32, {4}, {0x3F800000})},
        {"layers.1.cache.k", tensor(DType::f32, {0, 4}, {})},
        {"scale", tensor(DType::i8, {}, {0x80})},
        {"positions", tensor(DType::i32, {2}, {0, 0x7FFFFFFF})},
    };
    return d;
}

// A model dump's safetensors header text with `key` of the metadata replaced
// (removed when value is null) and the tensors named in `names` (F32 [1]).
std::vector<std::byte> dump_with(const std::string& key, const json& value,
                                 const std::vector<std::string>& names = {"input", "act.layers.0.output"}) {
    json meta = {{"conform.format", "model/1"}, {"conform.contract", "{\"layers\":1}"}, {"conform.impl", "hand"}};
    if (value.is_null())
        meta.erase(key);
    else
        meta[key] = value;
    json header = {{"__metadata__", meta}};
    for (std::size_t i = 0; i < names.size(); ++i)
        header[names[i]] = {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {4 * i, 4 * i + 4}}};
    return safetensors_file(header.dump(), 4 * names.size());
}

std::vector<std::byte> dump_named(const std::vector<std::string>& names) { return dump_with("conform.impl", "hand", names); }

void expect_dump_error(const std::vector<std::byte>& file, const std::string& field, const std::string& detail) {
    expect_error([&] { parse_model_dump(file, kSource); }, kSource, field, detail);
}

std::string meta_field(const std::string& key) { return "__metadata__ \"" + key + "\""; }

}  // namespace

// --- round trips ------------------------------------------------------------------------

TEST(ModelDump, RoundTripInMemory) {
    const ModelDump d = sample_dump();
    const ModelDump back = parse_model_dump(serialize_model_dump(d), kSource);
    EXPECT_EQ(back, d);
    EXPECT_EQ(back.source, kSource);
    EXPECT_EQ(back.activations.at("layers.0.output").bits(2), 0xFC00u);
    EXPECT_EQ(back.weights.at("scale").value(0), -128.0);
}

TEST(ModelDump, EqualityLooksAtEveryPart) {
    const ModelDump d = sample_dump();
    auto changed = [&](auto change) {
        ModelDump e = d;
        change(e);
        return e;
    };
    EXPECT_NE(changed([](ModelDump& e) { e.contract["layers"] = 3; }), d);
    EXPECT_NE(changed([](ModelDump& e) { e.impl = "other"; }), d);
    EXPECT_NE(changed([](ModelDump& e) { e.input.set_bits(0, 0); }), d);
    EXPECT_NE(changed([](ModelDump& e) { e.activations.erase("layers.1.mid"); }), d);
    EXPECT_NE(changed([](ModelDump& e) { e.weights["extra"] = tensor(DType::f32, {1}, {0}); }), d);
    EXPECT_EQ(changed([](ModelDump& e) { e.source = "elsewhere"; }), d);
}

TEST(ModelDump, WriterLayout) {
    const SafetensorsFile file = model_dump_to_safetensors(sample_dump());
    ASSERT_TRUE(file.metadata);
    EXPECT_EQ(file.metadata->size(), 3u);
    EXPECT_EQ(file.metadata->at("conform.format"), "model/1");
    EXPECT_EQ(json::parse(file.metadata->at("conform.contract")), sample_dump().contract);
    EXPECT_EQ(file.metadata->at("conform.impl"), "torch 2.3 cuda bf16");
    std::vector<std::string> names;
    for (const auto& [name, t] : file.tensors) names.push_back(name);
    const std::vector<std::string> expected = {"act.layers.0.attn_norm", "act.layers.0.output", "act.layers.1.hc-x",
                                               "act.layers.1.mid",       "input",               "layers.0.attn_norm.weight",
                                               "layers.0.q.weight",      "layers.1.cache.k",    "positions",
                                               "scale"};
    EXPECT_EQ(names, expected);
}

TEST(ModelDump, FilesAreWrittenAtomicallyAndReadBack) {
    TempDir tmp("conform_model_dump_test");
    const fs::path file = tmp.path() / "m.safetensors";
    ModelDump d = sample_dump();
    write_text(file, "an older file");
    write_model_dump(d, file);
    const ModelDump back = read_model_dump(file);
    EXPECT_EQ(back, d);
    EXPECT_EQ(back.source, file.string());
    EXPECT_EQ(read_bytes(file), serialize_model_dump(d));
    int entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path())) ++entries;
    EXPECT_EQ(entries, 1) << "no temporary file left beside the dump";
    d.contract = json::array();  // refused before anything is written: the old file stays
    EXPECT_THROW(write_model_dump(d, file), std::invalid_argument);
    EXPECT_EQ(read_model_dump(file), sample_dump());
}

// --- malformed containers --------------------------------------------------------------

TEST(ModelDumpMalformed, Format) {
    expect_dump_error(safetensors_file(R"({"input":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4), "__metadata__",
                      "missing");
    expect_dump_error(dump_with("conform.format", nullptr), meta_field("conform.format"), "missing: not a conform model dump");
    expect_dump_error(dump_with("conform.format", "case/1"), meta_field("conform.format"), "use conform validate");
    expect_dump_error(dump_with("conform.format", "model/2"), meta_field("conform.format"), "\"model/2\" is not \"model/1\"");
    expect_dump_error(dump_with("conform.format", ""), meta_field("conform.format"), "is not \"model/1\"");
}

TEST(ModelDumpMalformed, Contract) {
    expect_dump_error(dump_with("conform.contract", nullptr), meta_field("conform.contract"), "missing");
    expect_dump_error(dump_with("conform.contract", "{\"layers\":"), meta_field("conform.contract"), "invalid JSON");
    expect_dump_error(dump_with("conform.contract", "[1, 2]"), meta_field("conform.contract"), "an array, not a JSON object");
    expect_dump_error(dump_with("conform.contract", "\"text\""), meta_field("conform.contract"), "a string, not a JSON object");
    expect_dump_error(dump_with("conform.contract", "{\"a\":1,\"a\":2}"), meta_field("conform.contract"), "duplicate key");
    expect_dump_error(dump_with("conform.contract", std::string(100, '[') + std::string(100, ']')),
                      meta_field("conform.contract"), "nested deeper");
}

TEST(ModelDumpMalformed, ImplIsOptional) {
    EXPECT_EQ(parse_model_dump(dump_with("conform.impl", nullptr), kSource).impl, "");
    EXPECT_EQ(parse_model_dump(dump_with("conform.impl", "me"), kSource).impl, "me");
}

TEST(ModelDumpMalformed, InputMissing) {
    expect_dump_error(dump_named({"act.layers.0.output", "layers.0.q.weight"}), "tensor \"input\"", "missing");
    expect_dump_error(dump_named({"act.input"}), "tensor \"input\"", "missing");
}

TEST(ModelDumpMalformed, TensorNames) {
    expect_dump_error(dump_named({"input", ""}), "tensor \"\"", "empty name");
    expect_dump_error(dump_named({"input", "act."}), "tensor \"act.\"", "point name after \"act.\" is empty");
    expect_dump_error(dump_named({"input", "layers.0 q"}), "tensor \"layers.0 q\"", "character outside");
    expect_dump_error(dump_named({"input", "a/b"}), "tensor \"a/b\"", "character outside");
    expect_dump_error(dump_named({"input", "act.x\ny"}), "tensor \"act.x\\x0ay\"", "character outside");
    expect_dump_error(dump_named({"input", "caf\xc3\xa9"}), "tensor \"caf\\xc3\\xa9\"", "character outside");
    expect_dump_error(dump_named({"input", "layers..q"}), "tensor \"layers..q\"", "empty dot-separated part");
    expect_dump_error(dump_named({"input", "act..x"}), "tensor \"act..x\"", "empty dot-separated part");
    expect_dump_error(dump_named({"input", "act.x."}), "tensor \"act.x.\"", "empty dot-separated part");
    expect_dump_error(dump_named({"input", ".w"}), "tensor \".w\"", "empty dot-separated part");
    expect_dump_error(dump_named({"input", std::string(257, 'w')}), "tensor \"www", "longer than 256 bytes");
    const ModelDump ok = parse_model_dump(dump_named({"input", std::string(256, 'w'), "act.a-b_C.9", "act"}), kSource);
    EXPECT_EQ(ok.weights.count(std::string(256, 'w')), 1u);
    EXPECT_EQ(ok.weights.count("act"), 1u);  // "act" is a weight; only "act." starts an activation
    EXPECT_EQ(ok.activations.count("a-b_C.9"), 1u);
}

TEST(ModelDumpMalformed, ContainerErrorsComeFromTheSafetensorsLayer) {
    std::vector<std::byte> file = serialize_model_dump(sample_dump());
    file.resize(file.size() - 1);
    expect_dump_error(file, "tensor \"", "data block");
    expect_dump_error(bytes_of("1234"), "header length", "ends inside");
}

TEST(ModelDumpMalformed, FilesAboveTheLimitAreRefusedUnread) {
    TempDir tmp("conform_model_dump_test");
    const fs::path big = tmp.path() / "big.safetensors";
    write_text(big, "");
    fs::resize_file(big, kMaxModelDumpBytes + 1);  // sparse: no disk space used
    expect_error([&] { read_model_dump(big); }, big.string(), "", "above the " + std::to_string(kMaxModelDumpBytes));
    expect_error([&] { read_model_dump(tmp.path() / "none"); }, (tmp.path() / "none").string(), "", "no such file");
    expect_error([&] { read_model_dump(tmp.path()); }, tmp.path().string(), "", "not a regular file");
}

// --- writer refusals ---------------------------------------------------------------------

TEST(ModelDumpWriter, RejectsDumpsThatCouldNotBeReadBack) {
    const auto refused = [](auto change, const std::string& why) {
        ModelDump d = sample_dump();
        change(d);
        try {
            serialize_model_dump(d);
            ADD_FAILURE() << "accepted; expected a refusal about " << why;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
        }
    };
    refused([](ModelDump& d) { d.contract = "text"; }, "contract is not a JSON object");
    refused([](ModelDump& d) { d.input = StoredTensor{}; }, "tensor \"input\"");
    refused([](ModelDump& d) { d.activations[""] = d.input; }, "point name after \"act.\" is empty");
    refused([](ModelDump& d) { d.activations["a b"] = d.input; }, "character outside");
    refused([](ModelDump& d) { d.weights[""] = d.input; }, "empty name");
    refused([](ModelDump& d) { d.weights["x.."] = d.input; }, "empty dot-separated part");
    refused([](ModelDump& d) { d.weights["input"] = d.input; }, "weight \"input\"");
    refused([](ModelDump& d) { d.weights["act.x"] = d.input; }, "weight \"act.x\"");
    refused([](ModelDump& d) { d.weights["__metadata__"] = d.input; }, "__metadata__");
    refused([](ModelDump& d) { d.weights["w"].bytes.resize(3); }, "tensor \"w\"");
}

// --- hostile bytes never crash ---------------------------------------------------------

namespace {

// Parses or throws FormatError; what parses writes back to the same dump.
void parses_or_format_error(const std::vector<std::byte>& bytes) {
    try {
        const ModelDump d = parse_model_dump(bytes, kSource);
        RC_ASSERT(parse_model_dump(serialize_model_dump(d), "again") == d);
    } catch (const FormatError& e) {
        RC_ASSERT(std::string(e.what()).starts_with(std::string(kSource) + ": "));
    }
}

}  // namespace

RC_GTEST_PROP(ModelDumpHostile, ByteFlipsParseOrAreFormatErrors, ()) {
    static const std::vector<std::byte> valid = serialize_model_dump(sample_dump());
    std::vector<std::byte> bytes = valid;
    const auto flips = *rc::gen::inRange(1, 8);
    for (int i = 0; i < flips; ++i) {
        const auto at = *rc::gen::inRange<std::size_t>(0, bytes.size());
        bytes[at] ^= static_cast<std::byte>(*rc::gen::inRange(1, 256));
    }
    parses_or_format_error(bytes);
}

RC_GTEST_PROP(ModelDumpHostile, TruncationsAreFormatErrors, ()) {
    static const std::vector<std::byte> valid = serialize_model_dump(sample_dump());
    const auto keep = *rc::gen::inRange<std::size_t>(0, valid.size());
    const std::vector<std::byte> bytes(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(keep));
    try {
        parse_model_dump(bytes, kSource);
        RC_FAIL("a truncated dump parsed");
    } catch (const FormatError&) {
    }
}

RC_GTEST_PROP(ModelDumpHostile, ArbitraryBytesParseOrAreFormatErrors, (const std::vector<std::uint8_t>& raw)) {
    const auto* p = reinterpret_cast<const std::byte*>(raw.data());
    parses_or_format_error({p, p + raw.size()});
}

// --- is_model_dump -----------------------------------------------------------------------

TEST(IsModelDump, ReadsTheHeaderOnly) {
    TempDir tmp("conform_model_dump_test");
    const fs::path dir = tmp.path();
    write_model_dump(sample_dump(), dir / "m.safetensors");
    EXPECT_TRUE(is_model_dump(dir / "m.safetensors"));

    Case c;
    c.op = "silu";
    c.inputs["x"] = tensor(DType::f32, {1}, {0});
    c.outputs["y"] = tensor(DType::f32, {1}, {0});
    write_case_safetensors(c, dir / "case.safetensors");
    EXPECT_FALSE(is_model_dump(dir / "case.safetensors"));

    // The data block is not read: a dump whose tensors are cut off is still
    // recognised (and refused by the reader with its own message).
    std::vector<std::byte> cut = serialize_model_dump(sample_dump());
    cut.resize(cut.size() - 10);
    write_text(dir / "cut.safetensors", text_of(cut));
    EXPECT_TRUE(is_model_dump(dir / "cut.safetensors"));

    EXPECT_FALSE(is_model_dump(dir / "missing"));
    EXPECT_FALSE(is_model_dump(dir));
    const auto header = [](const std::string& text) { return le64(text.size()) + text; };
    const std::vector<std::pair<std::string, std::string>> not_dumps = {
        {"empty", ""},
        {"short", "1234"},
        {"header_past_the_end", le64(100) + "{}"},
        {"huge_header", le64(std::uint64_t{1} << 62) + "{}"},
        {"not_json", header("{x}")},
        {"array", header("[]")},
        {"no_meta", header("{}")},
        {"meta_not_object", header(R"({"__metadata__": 1})")},
        {"format_not_string", header(R"({"__metadata__": {"conform.format": 1}})")},
        {"other_format", header(R"({"__metadata__": {"conform.format": "model/2"}})")},
    };
    for (const auto& [name, text] : not_dumps) {
        write_text(dir / name, text);
        EXPECT_FALSE(is_model_dump(dir / name)) << name;
    }
    write_text(dir / "minimal", header(R"({"__metadata__": {"conform.format": "model/1"}})"));
    EXPECT_TRUE(is_model_dump(dir / "minimal"));
}

// --- the Python writer and recorder (python/conform_model.py) ---------------------------

namespace {

// Runs `script` (arguments: the python/ directory and `out`) with the Python
// that has NumPy; false when there is none (the caller skips).
bool run_python(const std::string& script, const fs::path& out, const std::string& python = python_with_numpy()) {
    const std::string& py = python;
    if (py.empty()) return false;
    write_text(out / "script.py", script);
    const std::string cmd = py + " " + (out / "script.py").string() + " " + CONFORM_SOURCE_DIR "/python " + out.string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return true;
}

const std::string kModelWriterScript = R"PY(
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import conform_case as cc
import conform_model as cm
out = sys.argv[2]

# The recorder on a duck-typed module: register_forward_hook returning a
# handle with remove(), hooks called as hook(module, args, output).
class Handle:
    def __init__(self, hooks, hook): self.hooks, self.hook = hooks, hook
    def remove(self): self.hooks.remove(self.hook)
class Module:
    def __init__(self, fn): self.fn, self.hooks = fn, []
    def register_forward_hook(self, hook):
        self.hooks.append(hook)
        return Handle(self.hooks, hook)
    def __call__(self, *args):
        y = self.fn(*args)
        for h in list(self.hooks): h(self, args, y)
        return y

norm = Module(lambda x: cc.bf16(x * np.float32(0.5)).bits)   # bf16 bits out
attn = Module(lambda x: (x + np.float32(1), None))          # a tuple, as HF attention returns
def block_fn(x):
    norm(x)
    return attn(x)[0]
block = Module(block_fn)
x = np.array([[[1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8], [-0.0, np.inf, np.nan]]], dtype=np.float32)
points = {"input": (block, "input"), "layers.0.attn_norm": (norm, "output"),
          "layers.0.attn_out": (attn, "output"), "layers.0.output": (block, "output")}
with cm.ForwardRecorder(points) as rec:
    block(x)
assert not norm.hooks and not attn.hooks and not block.hooks
rec.activations["layers.0.attn_norm"] = cc.bf16(rec.activations["layers.0.attn_norm"])  # uint16 bits
weights = {"layers.0.attn_norm.weight": cc.bf16(np.array([1.0, 1.0 + 2**-8, 3.4028235e38], np.float32)),
           "layers.0.q.weight": np.eye(3, dtype=np.float16),
           "positions": np.array([0, 2**31 - 1], dtype=np.int32)}
rec.write(out + "/recorded.safetensors", {"layers": 1, "width": 3, "eps": 1e-6, "conventions": {"rope_pairing": "half"}},
          weights, impl="fake " + np.__version__)
cm.write_model_dump(out + "/direct.safetensors", {}, {}, cc.bf16(x[0]), {"layers.0.output": x[0].astype(np.float64)})
)PY";

const std::string kTorchScript = R"PY(
import sys
import torch
sys.path.insert(0, sys.argv[1])
import conform_model as cm
out = sys.argv[2]
torch.manual_seed(0)
layer = torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 8)).to(torch.bfloat16)
x = torch.randn(1, 4, 8).to(torch.bfloat16)
points = {"input": (layer, "input"), "layers.0.attn_norm": (layer[0], "output"), "layers.0.output": (layer, "output")}
with cm.ForwardRecorder(points) as rec:
    y = layer(x)
cm_weights = {"expected.output": y[0], "layers.0.q.weight": layer[1].weight}
rec.write(out + "/torch.safetensors", {"layers": 1}, cm_weights, impl="torch " + torch.__version__)
)PY";

}  // namespace

TEST(PythonModelWriter, SelfTest) {
    const std::string& py = python_with_numpy();
    if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: apt-get install python3-numpy)";
    const std::string cmd = py + " " + CONFORM_SOURCE_DIR "/python/conform_model.py --self-test";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(PythonModelWriter, RecordedDumpReadsBack) {
    TempDir tmp("conform_model_dump_test");
    if (!run_python(kModelWriterScript, tmp.path())) GTEST_SKIP() << "no python3 with numpy";
    const ModelDump d = read_model_dump(tmp.path() / "recorded.safetensors");
    EXPECT_EQ(d.contract, (json{{"layers", 1}, {"width", 3}, {"eps", 1e-6}, {"conventions", {{"rope_pairing", "half"}}}}));
    EXPECT_EQ(d.impl.rfind("fake ", 0), 0u) << d.impl;
    std::vector<std::string> points;
    for (const auto& [point, t] : d.activations) points.push_back(point);
    EXPECT_EQ(points, (std::vector<std::string>{"layers.0.attn_norm", "layers.0.attn_out", "layers.0.output"}));

    // The batch of 1 is squeezed: [T, C].
    EXPECT_EQ(d.input.dtype, DType::f32);
    EXPECT_EQ(d.input.shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(d.input.value(1), 1.0 + std::ldexp(1.0, -8));
    const StoredTensor& out = d.activations.at("layers.0.output");
    EXPECT_EQ(out.value(0), 2.0);
    EXPECT_EQ(out.value(4), INFINITY);
    EXPECT_EQ(d.activations.at("layers.0.attn_out"), out);

    // bf16 from float32, round to nearest even: x / 2 = 0.5, 0.5 + 2^-9 (a tie:
    // to even 0.5), 0.5 + 3 * 2^-9 (a tie: up); -0, inf and NaN kept.
    const std::vector<std::uint64_t> norm = {0x3F00, 0x3F00, 0x3F02, 0x8000, 0x7F80, 0x7FC0};
    const StoredTensor& n = d.activations.at("layers.0.attn_norm");
    ASSERT_EQ(n.dtype, DType::bf16);
    ASSERT_EQ(n.shape, (std::vector<std::int64_t>{2, 3}));
    for (std::size_t i = 0; i < norm.size(); ++i) EXPECT_EQ(n.bits(static_cast<std::int64_t>(i)), norm[i]) << i;
    // The largest float rounds to infinity.
    const StoredTensor& w = d.weights.at("layers.0.attn_norm.weight");
    EXPECT_EQ(w.bits(1), 0x3F80u);
    EXPECT_EQ(w.bits(2), 0x7F80u);
    EXPECT_EQ(d.weights.at("layers.0.q.weight").dtype, DType::f16);
    EXPECT_EQ(d.weights.at("positions").value(1), 2147483647.0);

    const ModelDump direct = read_model_dump(tmp.path() / "direct.safetensors");
    EXPECT_EQ(direct.input.dtype, DType::bf16);
    EXPECT_EQ(direct.input.bits(2), 0x3F82u);
    EXPECT_EQ(direct.activations.at("layers.0.output").dtype, DType::f64);
    EXPECT_TRUE(direct.weights.empty());
}

TEST(PythonModelWriter, TorchModuleRecordsBitForBit) {
    // A Python with NumPy and PyTorch: $CONFORM_TORCH_PYTHON, the one with
    // NumPy, or the environment the Hugging Face test uses (docs/diverge.md).
    std::string py;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("CONFORM_TORCH_PYTHON")) candidates.push_back(env);
    candidates.insert(candidates.end(), {python_with_numpy(), "/opt/torch-venv/bin/python3"});
    for (const std::string& c : candidates)
        if (py.empty() && !c.empty() && std::system((c + " -c 'import numpy, torch' >/dev/null 2>&1").c_str()) == 0) py = c;
    if (py.empty()) GTEST_SKIP() << "no python3 with numpy and torch";
    TempDir tmp("conform_model_dump_test");
    ASSERT_TRUE(run_python(kTorchScript, tmp.path(), py));
    const ModelDump d = read_model_dump(tmp.path() / "torch.safetensors");
    EXPECT_EQ(d.input.dtype, DType::bf16);
    EXPECT_EQ(d.input.shape, (std::vector<std::int64_t>{4, 8}));
    EXPECT_EQ(d.activations.at("layers.0.attn_norm").shape, (std::vector<std::int64_t>{4, 8}));
    EXPECT_EQ(d.activations.at("layers.0.output"), d.weights.at("expected.output"));
    EXPECT_EQ(d.weights.at("layers.0.q.weight").dtype, DType::bf16);
}

// --- mapped reading and streamed writing (dumps larger than memory) -------------

// The mapped reader sees what the copying reader sees, tensor for tensor, and
// a copy of a mapped tensor owns its bytes (a write to it never reaches the
// mapping, nor the file).
TEST(MappedModelDump, ReadsWhatTheCopyingReaderReads) {
    TempDir tmp("conform_model_dump_test");
    const fs::path file = tmp.path() / "m.safetensors";
    ModelDump d = sample_dump();
    d.weights.erase("positions");  // I32: no numeric format (below)
    write_model_dump(d, file);
    const MappedModelDump m = map_model_dump(file);
    EXPECT_EQ(m.contract, d.contract);
    EXPECT_EQ(m.impl, d.impl);
    EXPECT_EQ(m.source, file.string());
    EXPECT_EQ(StoredTensor::from_tensor(m.input), d.input);
    ASSERT_EQ(m.activations.size(), d.activations.size());
    for (const auto& [n, t] : d.activations) EXPECT_EQ(StoredTensor::from_tensor(m.activations.at(n)), t) << n;
    ASSERT_EQ(m.weights.size(), d.weights.size());
    for (const auto& [n, t] : d.weights) EXPECT_EQ(StoredTensor::from_tensor(m.weights.at(n)), t) << n;
    const Tensor& mapped = m.weights.at("layers.0.q.weight");
    EXPECT_TRUE(mapped.is_external());
    Tensor copy = mapped;
    EXPECT_FALSE(copy.is_external());
    copy.set_bits(0, 0x4040);
    EXPECT_EQ(mapped.bits(0), 0x3F80u);
    mapped.release_pages();  // pages handed back are read again from the file
    EXPECT_EQ(mapped.bits(1), 0x4000u);
    EXPECT_EQ(read_model_dump(file), d);
}

TEST(MappedModelDump, RefusesWhatTheReaderRefusesAndI32Tensors) {
    TempDir tmp("conform_model_dump_test");
    const fs::path file = tmp.path() / "m.safetensors";
    write_model_dump(sample_dump(), file);
    expect_error([&] { map_model_dump(file); }, file.string(), "tensor \"positions\"", "no numeric format");
    const auto write_bytes = [](const fs::path& f, const std::vector<std::byte>& b) {
        std::ofstream(f, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    };
    write_bytes(file, dump_with("conform.format", "case/1"));
    expect_error([&] { map_model_dump(file); }, file.string(), meta_field("conform.format"), "use conform validate");
    write_bytes(file, dump_named({"act.layers.0.output"}));
    expect_error([&] { map_model_dump(file); }, file.string(), "tensor \"input\"", "missing");
    expect_error([&] { map_model_dump(tmp.path() / "none"); }, (tmp.path() / "none").string(), "", "cannot open");
}

// Tensors put one at a time, in any order, make the file write_model_dump
// makes; a writer that is not finished leaves nothing behind, and mistakes
// are refused naming the tensor.
TEST(ModelDumpWriter, StreamedFileEqualsTheWholeOne) {
    TempDir tmp("conform_model_dump_test");
    ModelDump d = sample_dump();
    d.weights.erase("positions");
    const fs::path whole = tmp.path() / "whole.safetensors", streamed = tmp.path() / "streamed.safetensors";
    write_model_dump(d, whole);
    const auto layout = [](const std::map<std::string, StoredTensor>& m) {
        std::map<std::string, TensorLayout> l;
        for (const auto& [n, t] : m) l[n] = {t.dtype, t.shape};
        return l;
    };
    {
        ModelDumpWriter w(streamed, d.contract, d.impl, {d.input.dtype, d.input.shape}, layout(d.activations), layout(d.weights));
        for (auto it = d.weights.rbegin(); it != d.weights.rend(); ++it) w.put_weight(it->first, it->second.to_tensor());
        for (const auto& [n, t] : d.activations) w.put_activation(n, t.to_tensor());
        EXPECT_THROW(w.finish(), std::invalid_argument);  // the input is missing
        w.put_input(d.input.to_tensor());
        EXPECT_THROW(w.put_input(d.input.to_tensor()), std::invalid_argument);  // twice
        EXPECT_THROW(w.put_weight("layers.9.q.weight", d.input.to_tensor()), std::invalid_argument);  // undeclared
        EXPECT_THROW(w.put_weight("scale", d.input.to_tensor()), std::invalid_argument);  // another shape
        w.finish();
    }
    EXPECT_EQ(read_bytes(streamed), read_bytes(whole));
    {
        ModelDumpWriter w(tmp.path() / "abandoned.safetensors", d.contract, d.impl, {d.input.dtype, d.input.shape}, {}, {});
    }
    int entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path())) ++entries;
    EXPECT_EQ(entries, 2) << "an unfinished writer leaves no file";
}

}  // namespace model_dump_test
