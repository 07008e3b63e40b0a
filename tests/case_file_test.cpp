// Case dump files (io/): safetensors and .npy round trips for every dtype,
// byte-exact checks against files written by hand, one test per class of
// malformed input (each asserting the message names the file and the field),
// the case.json manifest, find_cases, and the Python writer read back here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/case_file.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "tests/io_testing.hpp"

namespace case_file_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

namespace fs = std::filesystem;
using namespace conform;
using namespace conform::io;
using namespace conform::io_testing;
using nlohmann::json;

namespace {

// An .npy file from a header dict text (padded like numpy) and raw data.
std::vector<std::byte> npy_file(const std::string& dict, std::string_view data, int major = 1) {
    std::string header = dict + std::string(63 - (10 + dict.size()) % 64, ' ') + "\n";
    std::string len = major == 1 ? std::string{char(header.size() & 0xFF), char(header.size() >> 8)}
                                 : le64(header.size()).substr(0, 4);
    return bytes_of(std::string("\x93NUMPY") + char(major) + '\0' + len + header + std::string(data));
}

// One tensor of every dtype, including a 0-d and an empty one, with awkward values.
std::map<std::string, StoredTensor> every_dtype() {
    return {
        {"f64", tensor(DType::f64, {2}, {0x3FF0000000000001ull, 0xFFF8000000000000ull})},
        {"f32", tensor(DType::f32, {2, 3}, {0x3F800000, 0x80000000, 0x7F800000, 0x00000001, 0x7FC00000, 0xC0490FDB})},
        {"f16", tensor(DType::f16, {1, 2, 1}, {0x3C00, 0x0001})},
        {"bf16", tensor(DType::bf16, {3}, {0x3F80, 0xFF80, 0x7FC1})},
        {"i8", tensor(DType::i8, {}, {0x80})},       // 0-d: one element, -128
        {"i32", tensor(DType::i32, {0, 4}, {})},     // empty
        {"i32_values", tensor(DType::i32, {2}, {0xFFFFFFFF, 0x7FFFFFFF})},
        {"f8_e4m3", tensor(DType::f8_e4m3, {2}, {0x7E, 0xFF})},  // 448, -NaN
        {"f8_e5m2", tensor(DType::f8_e5m2, {2}, {0x7C, 0x01})},  // +Inf, 2^-16
    };
}

Case sample_case() {
    Case c;
    c.op = "rms_norm";
    c.params = {{"eps", 1e-6}};
    c.impl = "torch 2.3 cuda";
    c.conventions = json{{"fully_masked_row", "zero"}};
    c.profile = "ulp:2+ftz";
    c.inputs = every_dtype();
    c.outputs = {{"y", tensor(DType::bf16, {2, 2}, {0x3F80, 0x4000, 0x8000, 0x0001})},
                 {"state", tensor(DType::f32, {}, {0x40490FDB})}};
    return c;
}

void expect_safetensors_error(const std::vector<std::byte>& file, const std::string& field, const std::string& detail) {
    expect_error([&] { parse_safetensors(file, "case.safetensors"); }, "case.safetensors", field, detail);
}

// The metadata of a valid case with one key replaced (or removed when value is null).
std::vector<std::byte> case_with_metadata(const std::string& key, const json& value) {
    json meta = {{"conform.format", "case/1"}, {"conform.op", "rms_norm"}, {"conform.params", "{\"eps\":1e-6}"}};
    if (value.is_null())
        meta.erase(key);
    else
        meta[key] = value;
    json header = {{"__metadata__", meta}, {"x", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
    return safetensors_file(header.dump(), 4);
}

void expect_case_error(const std::vector<std::byte>& file, const std::string& field, const std::string& detail) {
    expect_error([&] { parse_case_safetensors(file, "case.safetensors"); }, "case.safetensors", field, detail);
}

void expect_npy_error(const std::vector<std::byte>& file, const std::string& field, const std::string& detail,
                      std::optional<DType> declared = std::nullopt) {
    expect_error([&] { parse_npy(file, "x.npy", declared); }, "x.npy", field, detail);
}

void expect_manifest_error(const std::string& text, const std::string& field, const std::string& detail) {
    expect_error([&] { parse_case_manifest(bytes_of(text), "case.json"); }, "case.json", field, detail);
}

}  // namespace

// --- dtypes and tensors ------------------------------------------------------

TEST(CaseDType, NamesAndSizes) {
    for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i8, DType::i32}) {
        EXPECT_EQ(dtype_from_safetensors(safetensors_name(d)), d);
        EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
    }
    EXPECT_EQ(dtype_size(DType::bf16), 2);
    EXPECT_EQ(dtype_size(DType::i32), 4);
    EXPECT_FALSE(dtype_from_safetensors("f32"));  // the safetensors spelling is upper case
    EXPECT_FALSE(dtype_from_safetensors("U8"));
    EXPECT_EQ(numerics_format(DType::bf16), Format::bf16);
    EXPECT_FALSE(numerics_format(DType::i32));
    EXPECT_EQ(dtype_of(Format::int8), DType::i8);
}

TEST(CaseDType, ByteCountRejectsNegativeAndOverflow) {
    const std::vector<std::int64_t> ok = {4, 3}, zero = {0, 5}, negative = {2, -1}, huge = {1ll << 31, 1ll << 31};
    const std::vector<std::int64_t> hidden_by_zero = {1ll << 40, 1ll << 40, 0};
    EXPECT_EQ(byte_count(DType::f32, ok), 48);
    EXPECT_EQ(byte_count(DType::f32, {}), 4);  // 0-d holds one element
    EXPECT_EQ(byte_count(DType::f32, zero), 0);
    EXPECT_FALSE(byte_count(DType::f32, negative));
    EXPECT_FALSE(byte_count(DType::f64, huge));
    EXPECT_FALSE(byte_count(DType::i8, hidden_by_zero));  // strides would overflow even though numel is 0
}

TEST(StoredTensor, ViewsAndValues) {
    const StoredTensor t = tensor(DType::bf16, {2, 2}, {0x3F80, 0xC000, 0x0001, 0x7F80});
    const TensorView v = t.view();
    EXPECT_EQ(v.format, Format::bf16);
    EXPECT_EQ(v.rank, 2);
    EXPECT_EQ(v.strides[0], 2);
    EXPECT_EQ(v.value(1), -2.0);
    EXPECT_EQ(t.to_tensor().value(3), INFINITY);
    EXPECT_EQ(t.value(2), std::ldexp(1.0, -133));
    EXPECT_EQ(StoredTensor::from_tensor(t.to_tensor()), t);

    const StoredTensor ints = tensor(DType::i32, {2}, {0xFFFFFFFE, 7});
    EXPECT_EQ(ints.value(0), -2.0);
    EXPECT_THROW(ints.view(), std::invalid_argument);  // no numerics format for i32
    EXPECT_THROW(ints.bits(2), std::out_of_range);
    EXPECT_THROW(StoredTensor::zeros(DType::f32, {1, 1, 1, 1, 1}).view(), std::invalid_argument);  // rank 5
    StoredTensor inconsistent = ints;
    inconsistent.shape = {3};
    EXPECT_THROW(inconsistent.bits(2), std::out_of_range);  // bounds follow the bytes actually held
}

// --- safetensors ---------------------------------------------------------------

TEST(Safetensors, RoundTripEveryDtype) {
    SafetensorsFile file;
    file.metadata = std::map<std::string, std::string>{{"k", "v"}, {"empty", ""}};
    file.tensors = every_dtype();
    const auto bytes = serialize_safetensors(file);
    EXPECT_EQ(parse_safetensors(bytes, "mem") , file);
    const std::uint64_t header = static_cast<std::uint8_t>(bytes[0]) | (std::uint64_t(static_cast<std::uint8_t>(bytes[1])) << 8);
    EXPECT_EQ(header % 8, 0u);  // data block 8-byte aligned

    file.metadata.reset();
    EXPECT_EQ(parse_safetensors(serialize_safetensors(file), "mem"), file);
    EXPECT_EQ(parse_safetensors(serialize_safetensors(SafetensorsFile{}), "mem"), SafetensorsFile{});
}

TEST(Safetensors, WriterMatchesFileWrittenByHand) {
    SafetensorsFile file;
    file.metadata = std::map<std::string, std::string>{{"k", "v"}};
    file.tensors["a"] = tensor(DType::f32, {2}, {0x3F800000, 0xC0000000});
    file.tensors["b"] = tensor(DType::i8, {}, {0xFF});
    const std::string header =
        R"({"__metadata__":{"k":"v"},"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},)"
        R"("b":{"data_offsets":[8,9],"dtype":"I8","shape":[]}})"
        "      ";  // 130 bytes of JSON padded to 136
    const std::string data("\x00\x00\x80\x3F\x00\x00\x00\xC0\xFF", 9);
    const std::string expected = std::string("\x88\0\0\0\0\0\0\0", 8) + header + data;
    EXPECT_EQ(text_of(serialize_safetensors(file)), expected);
    EXPECT_EQ(parse_safetensors(bytes_of(expected), "hand.safetensors"), file);
}

TEST(Safetensors, AcceptsForeignLayouts) {
    // Unpadded header, tensors stored out of name order, an extra entry key,
    // other metadata beside conform's: all legal safetensors.
    const std::string header =
        R"({"z":{"dtype":"I8","shape":[1],"data_offsets":[0,1],"extra":1},"a":{"dtype":"I8","shape":[2],"data_offsets":[1,3]}})";
    const auto file = parse_safetensors(safetensors_file(header, 3), "f");
    EXPECT_EQ(file.tensors.at("a").shape, std::vector<std::int64_t>{2});
    EXPECT_FALSE(file.metadata);
}

TEST(SafetensorsMalformed, HeaderLength) {
    expect_safetensors_error(bytes_of("abc"), "header length", "ends inside the 8-byte length field");
    expect_safetensors_error(bytes_of(le64(200'000'000) + "{}"), "header length", "above the 100000000-byte limit");
    expect_safetensors_error(bytes_of(le64(100) + "{}"), "header length", "100 bytes but only 2 bytes follow");
    expect_safetensors_error(bytes_of(le64(~0ull) + "{}"), "header length", "above the 100000000-byte limit");
}

TEST(SafetensorsMalformed, HeaderJson) {
    expect_safetensors_error(safetensors_file("{\"x\": "), "header", "invalid JSON");
    expect_safetensors_error(safetensors_file("[1, 2]"), "header", "is an array, not an object");
    expect_safetensors_error(safetensors_file(R"({"a":{},"a":{}})"), "header", "duplicate key \"a\"");
    expect_safetensors_error(safetensors_file(std::string(100, '[') + std::string(100, ']')), "header",
                             "nested deeper than 32");
    expect_safetensors_error(safetensors_file("{\"\xff\": 1}"), "header", "invalid JSON");  // not UTF-8
    expect_safetensors_error(safetensors_file(R"({"x":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})", 4),
                             "header", "invalid JSON");
}

TEST(SafetensorsMalformed, EntryFields) {
    expect_safetensors_error(safetensors_file(R"({"x":3})"), "tensor \"x\"", "entry is an integer, not an object");
    expect_safetensors_error(safetensors_file(R"({"x":{"shape":[1],"data_offsets":[0,4]}})", 4), "tensor \"x\"",
                             "missing \"dtype\"");
    expect_safetensors_error(safetensors_file(R"({"x":{"dtype":"F32","data_offsets":[0,4]}})", 4), "tensor \"x\"",
                             "missing \"shape\"");
    expect_safetensors_error(safetensors_file(R"({"x":{"dtype":"F32","shape":[1]}})", 4), "tensor \"x\"",
                             "missing \"data_offsets\"");
    expect_safetensors_error(safetensors_file(R"({"x":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4),
                             "tensor \"x\"", "dtype is an integer, not a string");
}

TEST(SafetensorsMalformed, UnknownDtype) {
    for (const char* dtype : {"U8", "F8_E4M3FNUZ", "f32", "BOOL", ""})
        expect_safetensors_error(
            safetensors_file(std::string(R"({"x":{"dtype":")") + dtype + R"(","shape":[1],"data_offsets":[0,1]}})", 1),
            "tensor \"x\"", "is not one of F64, F32, F16, BF16, I8, I32, F8_E4M3, F8_E5M2");
}

TEST(SafetensorsMalformed, Shape) {
    const auto with_shape = [](const std::string& shape) {
        return safetensors_file(R"({"x":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,0]}})");
    };
    expect_safetensors_error(with_shape("[2, -1]"), "tensor \"x\"", "shape[1] = -1 is not a non-negative 64-bit integer");
    expect_safetensors_error(with_shape("[1.5]"), "tensor \"x\"", "shape[0] = 1.5 is not");
    expect_safetensors_error(with_shape("[\"3\"]"), "tensor \"x\"", "shape[0] = \\x223\\x22 is not");
    expect_safetensors_error(with_shape("[9223372036854775808]"), "tensor \"x\"", "is not a non-negative 64-bit integer");
    expect_safetensors_error(with_shape("3"), "tensor \"x\"", "shape is an integer, not an array");
    expect_safetensors_error(with_shape("[4294967296, 4294967296]"), "tensor \"x\"",
                             "dtype F32 × shape [4294967296, 4294967296] does not fit in 2^63 bytes");
    expect_safetensors_error(with_shape("[" + std::string(64, '1') + "]"), "tensor \"x\"", "not a non-negative");
    std::string rank65 = "[1";
    for (int i = 0; i < 64; ++i) rank65 += ",1";
    expect_safetensors_error(with_shape(rank65 + "]"), "tensor \"x\"", "rank 65, above 64");
}

TEST(SafetensorsMalformed, DataOffsets) {
    const auto with_offsets = [](const std::string& offsets, std::size_t data) {
        return safetensors_file(R"({"x":{"dtype":"F32","shape":[4,3],"data_offsets":)" + offsets + "}}", data);
    };
    // The message of the issue's example, word for word.
    try {
        parse_safetensors(with_offsets("[0,64]", 64), "case.safetensors");
        FAIL();
    } catch (const FormatError& e) {
        EXPECT_STREQ(e.what(), "case.safetensors: tensor \"x\": data_offsets [0, 64) but dtype F32 × shape [4, 3] needs 48 bytes");
        EXPECT_EQ(e.field(), "tensor \"x\"");
    }
    expect_safetensors_error(with_offsets("[48,0]", 48), "tensor \"x\"", "data_offsets [48, 0) is reversed");
    expect_safetensors_error(with_offsets("[0,48]", 40), "tensor \"x\"", "runs past the 40-byte data block");
    expect_safetensors_error(with_offsets("[0,18446744073709551615]", 48), "tensor \"x\"", "is not [begin, end]");
    expect_safetensors_error(with_offsets("[-1,47]", 48), "tensor \"x\"", "is not [begin, end] of non-negative integers");
    expect_safetensors_error(with_offsets("[0,48,96]", 96), "tensor \"x\"", "is not [begin, end]");
    expect_safetensors_error(with_offsets("{\"begin\":0}", 48), "tensor \"x\"", "is not [begin, end]");
}

TEST(SafetensorsMalformed, TensorsMustTileTheDataBlock) {
    const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    expect_safetensors_error(safetensors_file("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                             "tensor \"b\"", "data_offsets [4, 12) overlaps tensor \"a\" at [0, 8)");
    expect_safetensors_error(safetensors_file("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
                             "tensor \"b\"", "overlaps tensor \"a\"");
    expect_safetensors_error(safetensors_file("{" + a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16),
                             "data block", "bytes [8, 12) belong to no tensor");
    expect_safetensors_error(safetensors_file("{" + a + "}", 9), "data block", "bytes [8, 9) belong to no tensor");
    expect_safetensors_error(safetensors_file("{}", 1), "data block", "bytes [0, 1) belong to no tensor");
}

TEST(SafetensorsMalformed, Metadata) {
    expect_safetensors_error(safetensors_file(R"({"__metadata__":[]})"), "__metadata__", "is an array, not an object of strings");
    expect_safetensors_error(safetensors_file(R"({"__metadata__":{"conform.op":3}})"), "__metadata__ \"conform.op\"",
                             "value is an integer, not a string");
}

TEST(SafetensorsMalformed, HostileNamesAreQuotedInMessages) {
    const std::string name = "\x1b[31mred\n" + std::string(100, 'x');
    expect_safetensors_error(safetensors_file(json{{name, 3}}.dump()), "tensor \"\\x1b[31mred\\x0a", "xxx...\"");
}

TEST(SafetensorsMalformed, EveryTruncationIsAFormatError) {
    const auto bytes = serialize_case_safetensors(sample_case());
    for (std::size_t n = 0; n < bytes.size(); ++n)
        EXPECT_THROW(parse_case_safetensors(std::span(bytes).first(n), "cut.safetensors"), FormatError) << n;
}

// --- the case in a safetensors file ------------------------------------------

TEST(CaseSafetensors, RoundTrip) {
    const Case c = sample_case();
    const Case back = parse_case_safetensors(serialize_case_safetensors(c), "mem.safetensors");
    EXPECT_EQ(back, c);
    EXPECT_EQ(back.source, "mem.safetensors");
    EXPECT_EQ(back.params.at("eps").get<double>(), 1e-6);
    EXPECT_EQ(back.output("y").dtype, DType::bf16);

    Case minimal;
    minimal.op = "silu";
    const Case minimal_back = parse_case_safetensors(serialize_case_safetensors(minimal), "m");
    EXPECT_EQ(minimal_back, minimal);
    EXPECT_FALSE(minimal_back.conventions);
}

TEST(CaseSafetensors, WriterMatchesFileWrittenByHand) {
    Case c;
    c.op = "silu";
    c.params = {{"n", 2}};
    c.impl = "hand";
    c.inputs["x"] = tensor(DType::f16, {1}, {0x3C00});
    c.outputs["y"] = tensor(DType::f16, {1}, {0x3A76});
    const std::string header =
        R"({"__metadata__":{"conform.format":"case/1","conform.impl":"hand","conform.op":"silu","conform.params":"{\"n\":2}"},)"
        R"("out.y":{"data_offsets":[0,2],"dtype":"F16","shape":[1]},"x":{"data_offsets":[2,4],"dtype":"F16","shape":[1]}})"
        "       ";  // 225 bytes of JSON padded to 232
    ASSERT_EQ(header.size(), 232u);
    const std::string expected = le64(232) + header + std::string("\x76\x3A\x00\x3C", 4);
    EXPECT_EQ(text_of(serialize_case_safetensors(c)), expected);
}

TEST(CaseSafetensorsMalformed, Metadata) {
    expect_case_error(safetensors_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4), "__metadata__",
                      "missing: a conform case names conform.format");
    expect_case_error(case_with_metadata("conform.format", nullptr), "__metadata__ \"conform.format\"",
                      "missing: not a conform case");
    expect_case_error(case_with_metadata("conform.format", "case/2"), "__metadata__ \"conform.format\"",
                      "\"case/2\" is not \"case/1\"");
    expect_case_error(case_with_metadata("conform.format", "model/1"), "__metadata__ \"conform.format\"",
                      "(a model dump: use conform diverge)");
    expect_case_error(case_with_metadata("conform.op", nullptr), "__metadata__ \"conform.op\"", "missing");
    expect_case_error(case_with_metadata("conform.op", ""), "__metadata__ \"conform.op\"", "empty op name");
    expect_case_error(case_with_metadata("conform.params", "{eps: 1}"), "__metadata__ \"conform.params\"", "invalid JSON");
    expect_case_error(case_with_metadata("conform.params", "[1e-6]"), "__metadata__ \"conform.params\"",
                      "is an array, not a JSON object");
    expect_case_error(case_with_metadata("conform.conventions", "{\"a\":1,\"a\":2}"),
                      "__metadata__ \"conform.conventions\"", "duplicate key \"a\"");
}

TEST(CaseSafetensorsMalformed, TensorNames) {
    const auto with_tensor = [](const std::string& name) {
        json header = {{"__metadata__", {{"conform.format", "case/1"}, {"conform.op", "silu"}}},
                       {name, {{"dtype", "I8"}, {"shape", json::array()}, {"data_offsets", {0, 1}}}}};
        return safetensors_file(header.dump(), 1);
    };
    expect_case_error(with_tensor("out."), "tensor \"out.\"", "output name after \"out.\" is empty");
    expect_case_error(with_tensor(""), "tensor \"\"", "empty tensor name");
    const Case c = parse_case_safetensors(with_tensor("out.out.y"), "c");
    EXPECT_EQ(c.outputs.count("out.y"), 1u);  // only the first "out." is the prefix
}

TEST(CaseSafetensors, MissingTensorNamesSourceAndTensor) {
    const Case c = parse_case_safetensors(serialize_case_safetensors(sample_case()), "cases/a.safetensors");
    expect_error([&] { c.input("weight"); }, "cases/a.safetensors", "tensor \"weight\"", "missing (the case has bf16, f16, f32,");
    expect_error([&] { c.output("z"); }, "cases/a.safetensors", "tensor \"out.z\"", "out.state, out.y)");
}

TEST(CaseWriter, RejectsCasesThatCouldNotBeReadBack) {
    const auto rejects = [](const std::function<void(Case&)>& spoil) {
        Case c = sample_case();
        spoil(c);
        EXPECT_THROW(serialize_case_safetensors(c), std::invalid_argument);
        EXPECT_THROW(case_manifest_text(c), std::invalid_argument);
    };
    rejects([](Case& c) { c.op.clear(); });
    rejects([](Case& c) { c.params = json::array(); });
    rejects([](Case& c) { c.conventions = "half"; });
    rejects([](Case& c) { c.inputs["out.x"] = c.inputs.at("f32"); });
    rejects([](Case& c) { c.inputs["__metadata__"] = c.inputs.at("f32"); });
    rejects([](Case& c) { c.outputs[""] = c.inputs.at("f32"); });
    rejects([](Case& c) { c.inputs.at("f32").bytes.pop_back(); });
    rejects([](Case& c) { c.format = "case/2"; });
    Case slash = sample_case();
    slash.inputs["../x"] = slash.inputs.at("f32");
    EXPECT_NO_THROW(serialize_case_safetensors(slash));  // any name is fine inside one file
    EXPECT_THROW(case_manifest_text(slash), std::invalid_argument);
}

// --- .npy ----------------------------------------------------------------------

TEST(Npy, RoundTripEveryDtype) {
    for (const auto& [name, t] : every_dtype()) {
        // bf16 and FP8 are stored as bit patterns ('<u2', '|u1'): the manifest declares them
        const bool bits = t.dtype == DType::bf16 || t.dtype == DType::f8_e4m3 || t.dtype == DType::f8_e5m2;
        const std::optional<DType> declared = bits ? std::optional(t.dtype) : std::nullopt;
        const auto bytes = serialize_npy(t);
        EXPECT_EQ(bytes.size() % 64, t.bytes.size() % 64) << name;  // data starts on a 64-byte boundary
        EXPECT_EQ(parse_npy(bytes, name + ".npy", declared), t) << name;
    }
}

TEST(Npy, WriterMatchesFileWrittenByHand) {
    // What numpy.save(np.array([1, -2], dtype='<f4')) writes: the dict, 20
    // spaces of room for shape[0] to grow, padding to 64 bytes, '\n'.
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    const std::string expected = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(60, ' ') + "\n" +
                                 std::string("\x00\x00\x80\x3F\x00\x00\x00\xC0", 8);
    EXPECT_EQ(text_of(serialize_npy(tensor(DType::f32, {2}, {0x3F800000, 0xC0000000}))), expected);
    const std::string scalar = "{'descr': '|i1', 'fortran_order': False, 'shape': (), }";
    EXPECT_EQ(text_of(serialize_npy(tensor(DType::i8, {}, {5}))),
              std::string("\x93NUMPY\x01\x00\x76\x00", 10) + scalar + std::string(62, ' ') + "\n\x05");
}

TEST(Npy, ReadsVersions2And3AndOddButValidHeaders) {
    const std::string data("\x01\x00\x00\x00\x02\x00\x00\x00", 8);
    const std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }";
    for (int major : {1, 2, 3}) EXPECT_EQ(parse_npy(npy_file(dict, data, major), "v.npy").value(1), 2.0) << major;
    // Key order, double quotes, no trailing comma, old NumPy's 2L.
    const auto t = parse_npy(npy_file("{\"shape\": (2L, 1), 'descr': \"<i4\", 'fortran_order': False}", data), "v.npy");
    EXPECT_EQ(t.shape, (std::vector<std::int64_t>{2, 1}));
}

TEST(NpyMalformed, MagicVersionAndLength) {
    expect_npy_error(bytes_of("PK\x03\x04 a zip file"), "magic", "not an .npy file");
    expect_npy_error(bytes_of(""), "magic", "not an .npy file");
    expect_npy_error(bytes_of(std::string("\x93NUMPY\x04\x00", 8) + "xx"), "version", "4.0 is not 1.0, 2.0 or 3.0");
    expect_npy_error(bytes_of(std::string("\x93NUMPY\x01\x01", 8) + "xx"), "version", "1.1 is not");
    expect_npy_error(bytes_of(std::string("\x93NUMPY\x02\x00\x10\x00", 10)), "header length", "ends inside the 4-byte length field");
    expect_npy_error(bytes_of(std::string("\x93NUMPY\x01\x00\x00\x01", 10) + "{}"), "header length",
                     "256 bytes but only 2 bytes follow");
    expect_npy_error(bytes_of(std::string("\x93NUMPY\x02\x00\x00\x00\x00\x01", 12)), "header length",
                     "16777216 bytes is above the 65535-byte limit");
}

TEST(NpyMalformed, HeaderDict) {
    const std::string data(4, '\0');
    expect_npy_error(npy_file("['descr', '<f4']", data), "header", "expected '{'");
    expect_npy_error(npy_file("{'descr': '<f4', 'shape': (1,), }", data), "header", "missing 'fortran_order'");
    expect_npy_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", data), "header",
                     "unexpected key \"x\"");
    expect_npy_error(npy_file("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", data),
                     "header", "duplicate key \"descr\"");
    expect_npy_error(npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", data), "fortran_order",
                     "expected True or False");
    expect_npy_error(npy_file("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,)}", data), "descr",
                     "escape sequences are not supported");
    expect_npy_error(npy_file("{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", data), "header", "expected ':'");
    expect_npy_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", data), "header",
                     "unexpected text after the closing '}'");
    expect_npy_error(bytes_of(std::string("\x93NUMPY\x01\x00\x05\x00{'des", 15)), "header", "unterminated string");
}

TEST(NpyMalformed, FortranOrderIsRefused) {
    expect_npy_error(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", std::string(16, '\0')),
                     "fortran_order", "True: only C-order arrays are supported");
}

TEST(NpyMalformed, Descr) {
    const auto with_descr = [](const std::string& descr, std::size_t data = 4) {
        return npy_file("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (1,), }", std::string(data, '\0'));
    };
    expect_npy_error(with_descr(">f4"), "descr", "\">f4\" is big-endian");
    expect_npy_error(with_descr("<i8", 8), "descr", "\"<i8\" is not one of '<f8', '<f4', '<f2', '|i1', '<i4'");
    expect_npy_error(with_descr("<c8", 8), "descr", "is not one of");
    expect_npy_error(npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", std::string(4, '\0')),
                     "descr", "structured dtypes are not supported");
    expect_npy_error(with_descr("<u2", 2), "descr", "'<u2' is accepted only as bf16 bit patterns");
    expect_npy_error(with_descr("<f4"), "descr", "\"<f4\" but case.json declares dtype bf16", DType::bf16);
    expect_npy_error(with_descr("<f4"), "descr", "\"<f4\" but case.json declares dtype f16 (stored as '<f2')", DType::f16);
    expect_npy_error(with_descr("<u2", 2), "descr", "'<u2' is accepted only as bf16", DType::f16);
    EXPECT_EQ(parse_npy(with_descr("<u2", 2), "x.npy", DType::bf16).dtype, DType::bf16);
    // FP8: bytes of bit patterns, the format declared (both share '|u1')
    expect_npy_error(with_descr("|u1", 1), "descr", "'|u1' is accepted only as FP8 bit patterns");
    expect_npy_error(with_descr("|u1", 1), "descr", "'|u1' is accepted only as FP8", DType::i8);
    EXPECT_EQ(parse_npy(with_descr("|u1", 1), "x.npy", DType::f8_e4m3).dtype, DType::f8_e4m3);
    EXPECT_EQ(parse_npy(with_descr("|u1", 1), "x.npy", DType::f8_e5m2).dtype, DType::f8_e5m2);
}

TEST(NpyMalformed, Shape) {
    const auto with_shape = [](const std::string& shape) {
        return npy_file("{'descr': '|i1', 'fortran_order': False, 'shape': " + shape + ", }", "");
    };
    expect_npy_error(with_shape("(2, -1)"), "shape", "shape[1] is negative");
    expect_npy_error(with_shape("(3)"), "shape", "a one-element shape is (n,)");
    expect_npy_error(with_shape("[3]"), "shape", "expected a tuple");
    expect_npy_error(with_shape("(1.5,)"), "shape", "expected ',' or ')'");
    expect_npy_error(with_shape("(99999999999999999999,)"), "shape", "shape[0] does not fit in 64 bits");
    expect_npy_error(with_shape("(4294967296, 4294967296)"), "shape", "does not fit in 2^63 bytes");
    std::string rank65 = "(";
    for (int i = 0; i < 65; ++i) rank65 += "1, ";
    expect_npy_error(with_shape(rank65 + ")"), "shape", "rank above 64");
}

TEST(NpyMalformed, DataLength) {
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }";
    expect_npy_error(npy_file(dict, std::string(47, '\0')), "data", "47 bytes but descr <f4 × shape [4, 3] needs 48");
    expect_npy_error(npy_file(dict, std::string(49, '\0')), "data", "49 bytes but");
    const auto bytes = serialize_npy(tensor(DType::f64, {3, 1}, {1, 2, 3}));
    for (std::size_t n = 0; n < bytes.size(); ++n)
        EXPECT_THROW(parse_npy(std::span(bytes).first(n), "cut.npy"), FormatError) << n;
}

// --- case.json manifest and .npy directories --------------------------------------

TEST(CaseManifest, Parses) {
    const auto m = parse_case_manifest(bytes_of(R"({"format": "case/1", "op": "rms_norm", "params": {"eps": 1e-6},
        "impl": "numpy", "conventions": null, "extra": [1],
        "tensors": {"x": {}, "out.y": {"file": "y_bits.npy", "dtype": "bf16"}}})"),
                                       "case.json");
    EXPECT_EQ(m.header.op, "rms_norm");
    EXPECT_EQ(m.header.impl, "numpy");
    EXPECT_FALSE(m.header.conventions);
    ASSERT_EQ(m.tensors.size(), 2u);
    EXPECT_EQ(m.tensors[0].name, "out.y");
    EXPECT_EQ(m.tensors[0].file, "y_bits.npy");
    EXPECT_EQ(m.tensors[0].dtype, DType::bf16);
    EXPECT_EQ(m.tensors[1].file, "x.npy");  // the default file name
    EXPECT_FALSE(m.tensors[1].dtype);
}

TEST(CaseManifestMalformed, Fields) {
    const std::string ok_head = R"({"format": "case/1", "op": "silu", )";
    expect_manifest_error("{\"format\": ", "", "invalid JSON");
    expect_manifest_error("[]", "", "manifest is an array, not an object");
    expect_manifest_error(R"({"op": "silu", "tensors": {}})", "format", "missing");
    expect_manifest_error(R"({"format": "case/0", "op": "silu", "tensors": {}})", "format", "\"case/0\" is not \"case/1\"");
    expect_manifest_error(R"({"format": "case/1", "tensors": {}})", "op", "missing");
    expect_manifest_error(R"({"format": "case/1", "op": 5, "tensors": {}})", "op", "is an integer, not a string");
    expect_manifest_error(ok_head + R"("params": "{}", "tensors": {}})", "params", "is a string, not a JSON object");
    expect_manifest_error(ok_head + R"("conventions": [], "tensors": {}})", "conventions", "is an array, not a JSON object");
    expect_manifest_error(ok_head + R"("impl": 1, "tensors": {}})", "impl", "is an integer, not a string");
    expect_manifest_error(R"({"format": "case/1", "op": "silu"})", "tensors", "missing");
    expect_manifest_error(ok_head + R"("tensors": []})", "tensors", "is an array, not an object");
    expect_manifest_error(ok_head + R"("tensors": {"x": "x.npy"}})", "tensor \"x\"", "entry is a string, not an object");
    expect_manifest_error(ok_head + R"("tensors": {"out.": {}}})", "tensor \"out.\"", "output name after \"out.\" is empty");
    expect_manifest_error(ok_head + R"("tensors": {"x": {"dtype": "float32"}}})", "tensor \"x\"",
                          "dtype \"float32\" is not one of f64, f32, f16, bf16, i8, i32");
    for (const char* file : {"../x.npy", "/etc/passwd", "a/b.npy", "..", "", "a\\\\b"})
        expect_manifest_error(ok_head + R"("tensors": {"x": {"file": ")" + file + R"("}}})", "tensor \"x\"",
                              "is not a plain file name inside the case directory");
    expect_manifest_error(ok_head + R"("tensors": {"../../x": {}}})", "tensor \"../../x\"", "is not a plain file name");
}

TEST(CaseNpyDir, RoundTripAndLayout) {
    TempDir tmp("conform_case_file_test");
    const fs::path dir = tmp.path() / "rms";
    const Case c = sample_case();
    write_case_npy_dir(c, dir);
    const Case back = read_case(dir);
    EXPECT_EQ(back, c);
    EXPECT_EQ(back.source, dir.string());
    EXPECT_EQ(read_case(dir / "case.json"), c);
    EXPECT_TRUE(fs::exists(dir / "out.y.npy"));
    EXPECT_EQ(read_bytes(dir / "f32.npy"), serialize_npy(c.inputs.at("f32")));
    const json manifest = json::parse(text_of(read_bytes(dir / "case.json")));
    EXPECT_EQ(manifest.at("tensors").at("out.y").at("dtype"), "bf16");
    EXPECT_EQ(manifest.at("params").at("eps"), 1e-6);
    write_case_npy_dir(c, dir);  // rewriting in place is fine
    EXPECT_EQ(read_case(dir), c);
}

TEST(CaseNpyDir, ErrorsNameTheFileInTheDirectory) {
    TempDir tmp("conform_case_file_test");
    const fs::path dir = tmp.path();
    const std::string manifest = (dir / "case.json").string();
    expect_error([&] { read_case(dir); }, dir.string(), "case.json", "missing: a case directory holds case.json");
    write_text(dir / "case.json", R"({"format": "case/1", "op": "silu", "tensors": {"x": {}}})");
    expect_error([&] { read_case(dir); }, (dir / "x.npy").string(), "", "no such file");
    fs::create_directory(dir / "x.npy");
    expect_error([&] { read_case(dir); }, (dir / "x.npy").string(), "", "not a regular file");
    fs::remove(dir / "x.npy");
    const auto f32 = serialize_npy(tensor(DType::f32, {1}, {0}));
    write_text(dir / "x.npy", text_of(f32));
    write_text(dir / "case.json", R"({"format": "case/1", "op": "silu", "tensors": {"x": {"dtype": "bf16"}}})");
    expect_error([&] { read_case(dir); }, (dir / "x.npy").string(), "descr", "declares dtype bf16");
    write_text(dir / "case.json", R"({"format": "case/1", "op": "silu", "tensors": {"x": {"file": "../x.npy"}}})");
    expect_error([&] { read_case(dir); }, manifest, "tensor \"x\"", "not a plain file name");
}

// --- files, paths, find_cases ---------------------------------------------------------

TEST(CaseFiles, WriteReadAndFind) {
    TempDir tmp("conform_case_file_test");
    const fs::path root = tmp.path();
    const Case c = sample_case();
    fs::create_directories(root / "a" / "deeper");
    write_case_safetensors(c, root / "a" / "one.safetensors");
    write_case_safetensors(c, root / "a" / "deeper" / "two.safetensors");
    write_case_npy_dir(c, root / "a" / "three");
    write_text(root / "a" / "notes.txt", "not a case");
    write_case_safetensors(c, root / "loose.bin");

    EXPECT_EQ(read_case(root / "a" / "one.safetensors"), c);
    EXPECT_EQ(read_case(root / "loose.bin"), c);  // a file named explicitly is read whatever its extension
    const auto found = find_cases({root / "a", root / "loose.bin", root / "a" / "three"});
    const std::vector<fs::path> expected = {root / "a" / "deeper" / "two.safetensors", root / "a" / "one.safetensors",
                                            root / "a" / "three", root / "loose.bin", root / "a" / "three"};
    EXPECT_EQ(found, expected);
    for (const auto& p : found) EXPECT_EQ(read_case(p), c) << p;
    expect_error([&] { find_cases({root / "missing"}); }, (root / "missing").string(), "", "no such file or directory");
    expect_error([&] { read_case(root / "missing"); }, (root / "missing").string(), "", "no such file or directory");
    write_text(root / "bad.safetensors", std::string("\x10\0\0\0\0\0\0\0{}", 10));
    expect_error([&] { read_case(root / "bad.safetensors"); }, (root / "bad.safetensors").string(), "header length",
                 "16 bytes but only 2 bytes follow");
}

// --- the Python writer -------------------------------------------------------------------

namespace {

const std::string kWriterScript = R"PY(
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import conform_case as cc
out = sys.argv[2]
w = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -0.0, np.inf, np.nan, 3.4028235e38, 1e-45], dtype=np.float32)
inputs = {
    "x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
    "weight": cc.bf16(w),
    "f64": np.array(0.1, dtype=np.float64),
    "f16": np.array([1.0, 65504.0, 2**-24], dtype=np.float16),
    "i8": np.array([[-128, 127]], dtype=np.int8),
    "pos": np.array([0, 1, 2**31 - 1], dtype=np.int32),
    "empty": np.zeros((0, 2), dtype=np.float32),
}
outputs = {"y": cc.bf16(np.array([0x3F80, 0xFF80], dtype=np.uint16))}
for fmt, path in (("safetensors", out + "/case.safetensors"), ("npy", out + "/case_dir")):
    cc.write_case(path, "rms_norm", inputs, outputs, params={"eps": 1e-6}, impl="numpy " + np.__version__,
                  conventions={"fully_masked_row": "nan"}, fmt=fmt)
np.save(out + "/transposed.npy", np.asfortranarray(np.ones((2, 3), dtype=np.float32)))
)PY";

}  // namespace

TEST(PythonWriter, SelfTest) {
    const std::string py = python_with_numpy();
    if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: apt-get install python3-numpy)";
    const std::string cmd = py + " " + CONFORM_SOURCE_DIR "/python/conform_case.py --self-test";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(PythonWriter, CasesReadBackInBothForms) {
    const std::string py = python_with_numpy();
    if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: apt-get install python3-numpy)";
    TempDir tmp("conform_case_file_test");
    write_text(tmp.path() / "write.py", kWriterScript);
    const std::string cmd = py + " " + (tmp.path() / "write.py").string() + " " + CONFORM_SOURCE_DIR "/python " +
                            tmp.path().string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

    const Case st = read_case(tmp.path() / "case.safetensors");
    const Case dir = read_case(tmp.path() / "case_dir");
    EXPECT_EQ(st, dir);
    EXPECT_EQ(st.op, "rms_norm");
    EXPECT_EQ(st.params, (json{{"eps", 1e-6}}));
    EXPECT_EQ(st.conventions, (json{{"fully_masked_row", "nan"}}));
    EXPECT_EQ(st.impl.rfind("numpy ", 0), 0u);

    const StoredTensor& x = st.input("x");
    EXPECT_EQ(x.dtype, DType::f32);
    EXPECT_EQ(x.shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(x.view().value(5), 2.5);
    // bf16 from float32 by round-to-nearest-even: ties go to the even neighbour,
    // the largest float rounds to infinity, NaN stays NaN, tiny values flush to 0.
    const std::vector<std::uint64_t> weight = {0x3F80, 0x3F80, 0x3F82, 0x8000, 0x7F80, 0x7FC0, 0x7F80, 0x0000};
    const StoredTensor& w = st.input("weight");
    ASSERT_EQ(w.dtype, DType::bf16);
    for (std::size_t i = 0; i < weight.size(); ++i) EXPECT_EQ(w.bits(i), weight[i]) << i;
    EXPECT_EQ(st.input("f64").value(0), 0.1);
    EXPECT_TRUE(st.input("f64").shape.empty());
    EXPECT_EQ(st.input("f16").value(2), std::ldexp(1.0, -24));
    EXPECT_EQ(st.input("i8").value(0), -128.0);
    EXPECT_EQ(st.input("pos").value(2), 2147483647.0);
    EXPECT_EQ(st.input("empty").shape, (std::vector<std::int64_t>{0, 2}));
    EXPECT_EQ(st.output("y").bits(1), 0xFF80u);

    // Our .npy writer produces NumPy's bytes exactly, and NumPy's Fortran-order
    // arrays are refused by name.
    for (const auto& [name, t] : dir.inputs)
        EXPECT_EQ(serialize_npy(t), read_bytes(tmp.path() / "case_dir" / (name + ".npy"))) << name;
    expect_error([&] { parse_npy(read_bytes(tmp.path() / "transposed.npy"), "transposed.npy"); }, "transposed.npy",
                 "fortran_order", "only C-order");
}

}  // namespace case_file_test
