// Model dumps (io/model_dump.hpp, docs/dumps.md "Model dumps (model/1)"):
// round trips through memory and files, one test per class of malformed
// container (each asserting the message names the file and the field), byte
// flips and truncations that must never crash, is_model_dump, and the Python
// writer and recorder (python/conform_model.py) read back here.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "io/case_file.hpp"
#include "io/model_dump.hpp"
#include "tests/io_testing.hpp"

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
