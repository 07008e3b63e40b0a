#include "io/safetensors.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "io/bytes.hpp"
#include "io/format_error.hpp"
#include "io/json_text.hpp"

namespace conform::io {
namespace {

using nlohmann::json;

constexpr std::size_t kLengthBytes = 8;

// A JSON value shown in a message: compact and cut short.
std::string shown(const json& j) { return printable(j.dump(), 48); }

std::string range(std::uint64_t begin, std::uint64_t end) {
    return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// A JSON integer in [0, 2^63), or nullopt (negative, fractional, too large, not a number).
std::optional<std::int64_t> non_negative(const json& j) {
    if (j.is_number_unsigned()) {
        const auto v = j.get<std::uint64_t>();
        if (v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return static_cast<std::int64_t>(v);
    }
    return std::nullopt;  // nlohmann parses every non-negative integer literal as unsigned
}

const json& required(const json& entry, const char* key, const std::string& source, const std::string& field) {
    const auto it = entry.find(key);
    if (it == entry.end()) throw FormatError(source, field, std::string("missing \"") + key + "\"");
    return *it;
}

// One tensor's header entry, checked on its own; the layout of all entries
// together is checked by check_tiling().
struct Entry {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;
};

DType parse_dtype(const json& j, const std::string& source, const std::string& field) {
    if (!j.is_string()) throw FormatError(source, field, "dtype is " + json_kind(j) + ", not a string");
    const auto dtype = dtype_from_safetensors(j.get_ref<const std::string&>());
    if (!dtype) throw FormatError(source, field, "dtype " + shown(j) + " is not one of F64, F32, F16, BF16, I8, I32, F8_E4M3, F8_E5M2");
    return *dtype;
}

std::vector<std::int64_t> parse_shape(const json& j, const std::string& source, const std::string& field) {
    if (!j.is_array()) throw FormatError(source, field, "shape is " + json_kind(j) + ", not an array");
    if (j.size() > kMaxStoredRank)
        throw FormatError(source, field, "shape has rank " + std::to_string(j.size()) + ", above " + std::to_string(kMaxStoredRank));
    std::vector<std::int64_t> shape;
    for (std::size_t i = 0; i < j.size(); ++i) {
        const auto dim = non_negative(j[i]);
        if (!dim)
            throw FormatError(source, field, "shape[" + std::to_string(i) + "] = " + shown(j[i]) +
                                                 " is not a non-negative 64-bit integer");
        shape.push_back(*dim);
    }
    return shape;
}

Entry parse_entry(const std::string& name, const json& j, std::uint64_t data_size, const std::string& source) {
    const std::string field = tensor_field(name);
    if (!j.is_object()) throw FormatError(source, field, "entry is " + json_kind(j) + ", not an object");
    Entry e{name, parse_dtype(required(j, "dtype", source, field), source, field),
            parse_shape(required(j, "shape", source, field), source, field)};
    const auto needed = byte_count(e.dtype, e.shape);
    if (!needed)
        throw FormatError(source, field, std::string("dtype ") + safetensors_name(e.dtype) + " × shape " +
                                             shape_string(e.shape) + " does not fit in 2^63 bytes");
    const json& offsets = required(j, "data_offsets", source, field);
    const bool pair = offsets.is_array() && offsets.size() == 2;
    const auto begin = pair ? non_negative(offsets[0]) : std::nullopt;
    const auto end = pair ? non_negative(offsets[1]) : std::nullopt;
    if (!begin || !end)
        throw FormatError(source, field, "data_offsets " + shown(offsets) + " is not [begin, end] of non-negative integers");
    e.begin = static_cast<std::uint64_t>(*begin);
    e.end = static_cast<std::uint64_t>(*end);
    if (e.begin > e.end) throw FormatError(source, field, "data_offsets " + range(e.begin, e.end) + " is reversed");
    if (e.end > data_size)
        throw FormatError(source, field, "data_offsets " + range(e.begin, e.end) + " runs past the " +
                                             std::to_string(data_size) + "-byte data block");
    if (e.end - e.begin != static_cast<std::uint64_t>(*needed))
        throw FormatError(source, field, "data_offsets " + range(e.begin, e.end) + " but dtype " +
                                             safetensors_name(e.dtype) + " × shape " + shape_string(e.shape) +
                                             " needs " + std::to_string(*needed) + " bytes");
    return e;
}

// The tensors must tile the data block: sorted by offset, each starts where
// the previous one ended and the last ends at the end of the block.  Overlaps
// would let two tensors alias; gaps would hide unchecked bytes.
void check_tiling(std::vector<const Entry*> entries, std::uint64_t data_size, const std::string& source) {
    std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
        return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
    });
    std::uint64_t covered = 0;
    const Entry* previous = nullptr;
    for (const Entry* e : entries) {
        if (e->begin < covered)
            throw FormatError(source, tensor_field(e->name),
                              "data_offsets " + range(e->begin, e->end) + " overlaps tensor " +
                                  quote(previous->name) + " at " + range(previous->begin, previous->end));
        if (e->begin > covered)
            throw FormatError(source, "data block", "bytes " + range(covered, e->begin) + " belong to no tensor");
        covered = e->end;
        previous = e;
    }
    if (covered != data_size)
        throw FormatError(source, "data block", "bytes " + range(covered, data_size) + " belong to no tensor");
}

std::map<std::string, std::string> parse_metadata(const json& j, const std::string& source) {
    if (!j.is_object()) throw FormatError(source, "__metadata__", "is " + json_kind(j) + ", not an object of strings");
    std::map<std::string, std::string> metadata;
    for (const auto& [key, value] : j.items()) {
        if (!value.is_string())
            throw FormatError(source, "__metadata__ " + quote(key), "value is " + json_kind(value) + ", not a string");
        metadata[key] = value.get<std::string>();
    }
    return metadata;
}

}  // namespace

SafetensorsIndex parse_safetensors_index(std::span<const std::byte> bytes, const std::string& source) {
    const auto text = length_prefixed(bytes, 0, kLengthBytes, kMaxSafetensorsHeader, source);
    const json header = parse_json(as_text(text), source, "header");
    if (!header.is_object()) throw FormatError(source, "header", "is " + json_kind(header) + ", not an object");
    const std::uint64_t data_start = kLengthBytes + text.size(), data_size = bytes.size() - data_start;
    SafetensorsIndex index;
    std::vector<Entry> entries;
    for (const auto& [key, value] : header.items()) {
        if (key == "__metadata__")
            index.metadata = parse_metadata(value, source);
        else
            entries.push_back(parse_entry(key, value, data_size, source));
    }
    std::vector<const Entry*> order;
    for (const Entry& e : entries) order.push_back(&e);
    check_tiling(std::move(order), data_size, source);
    for (Entry& e : entries)
        index.tensors[e.name] = SafetensorsEntry{e.dtype, std::move(e.shape), data_start + e.begin, data_start + e.end};
    return index;
}

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& source) {
    SafetensorsIndex index = parse_safetensors_index(bytes, source);
    SafetensorsFile file;
    file.metadata = std::move(index.metadata);
    for (auto& [name, e] : index.tensors) {
        const auto block = bytes.subspan(e.begin, e.end - e.begin);
        file.tensors[name] = StoredTensor{e.dtype, std::move(e.shape), {block.begin(), block.end()}};
    }
    return file;
}

std::vector<std::byte> safetensors_header(const std::optional<std::map<std::string, std::string>>& metadata,
                                          const std::map<std::string, TensorLayout>& tensors,
                                          std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>* offsets) {
    json header = json::object();
    if (metadata) header["__metadata__"] = *metadata;
    std::uint64_t offset = 0;
    std::vector<std::pair<std::string, std::pair<std::uint64_t, std::uint64_t>>> placed;
    for (const auto& [name, t] : tensors) {
        if (name == "__metadata__") throw std::invalid_argument("a tensor cannot be named \"__metadata__\"");
        const auto n = byte_count(t.dtype, t.shape);
        if (!n) throw std::invalid_argument("tensor " + quote(name) + ": shape " + shape_string(t.shape) + " overflows");
        header[name] = {{"dtype", safetensors_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + static_cast<std::uint64_t>(*n)}}};
        placed.push_back({name, {offset, offset + static_cast<std::uint64_t>(*n)}});
        offset += static_cast<std::uint64_t>(*n);
    }
    std::string text = header.dump();
    text.append((kLengthBytes - text.size() % kLengthBytes) % kLengthBytes, ' ');  // data block 8-byte aligned
    std::vector<std::byte> out;
    append_le(out, text.size(), kLengthBytes);
    append_text(out, text);
    if (offsets)
        for (auto& [name, r] : placed) (*offsets)[name] = {r.first + out.size(), r.second + out.size()};
    return out;
}

std::vector<std::byte> serialize_safetensors(const SafetensorsFile& file) {
    std::map<std::string, TensorLayout> layout;
    for (const auto& [name, t] : file.tensors) {
        if (name == "__metadata__") throw std::invalid_argument("a tensor cannot be named \"__metadata__\"");
        t.check_bytes("tensor " + quote(name));
        layout[name] = {t.dtype, t.shape};
    }
    std::vector<std::byte> out = safetensors_header(file.metadata, layout, nullptr);
    for (const auto& [name, t] : file.tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    return out;
}

}  // namespace conform::io
