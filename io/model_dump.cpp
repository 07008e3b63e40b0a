#include "io/model_dump.hpp"

#include <cstring>
#include <fstream>
#include <stdexcept>

#include "io/bytes.hpp"
#include "io/files.hpp"
#include "io/format_error.hpp"
#include "io/json_text.hpp"
#include "io/metadata.hpp"

namespace conform::io {
namespace {

namespace fs = std::filesystem;

bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

// Why `name` is not a usable stored tensor name, or "" when it is.
std::string name_problem(const std::string& name) {
    if (name.empty()) return "empty name";
    if (name == kActivationPrefix) return "point name after \"act.\" is empty";
    if (name.size() > kMaxTensorNameBytes) return "name longer than " + std::to_string(kMaxTensorNameBytes) + " bytes";
    for (char c : name)
        if (!name_char(c)) return "name has a character outside [A-Za-z0-9_.-]";
    if (name.front() == '.' || name.back() == '.' || name.find("..") != std::string::npos)
        return "name has an empty dot-separated part";
    return "";
}

// Where a tensor stored under `name` goes in a ModelDump.
enum class Role { input, activation, weight };
struct Placed {
    Role role;
    std::string key;  // activations: the point name, without "act."
};

Placed place(const std::string& name) {
    if (name == kModelInputName) return {Role::input, name};
    if (!name.starts_with(kActivationPrefix)) return {Role::weight, name};
    return {Role::activation, name.substr(std::strlen(kActivationPrefix))};
}

void check_format(const std::map<std::string, std::string>& meta, const std::string& source) {
    const std::string field = metadata_field("conform.format");
    const std::string* format = metadata_value(meta, "conform.format");
    if (!format) throw FormatError(source, field, "missing: not a conform model dump");
    if (*format == kModelFormat) return;
    const std::string hint = *format == "case/1" ? " (a case file: use conform validate)" : "";
    throw FormatError(source, field, quote(*format) + " is not \"model/1\", the one model-dump format this reader knows" + hint);
}

nlohmann::json read_contract(const std::map<std::string, std::string>& meta, const std::string& source) {
    const std::string* text = metadata_value(meta, "conform.contract");
    if (!text) throw FormatError(source, metadata_field("conform.contract"), "missing: a model dump holds its contract there");
    return metadata_object(*text, source, "conform.contract");
}

[[noreturn]] void not_writable(const std::string& why) { throw std::invalid_argument("model dump not writable: " + why); }

void add_writable(SafetensorsFile& file, const std::string& name, const StoredTensor& t) {
    if (const std::string problem = name_problem(name); !problem.empty()) not_writable("tensor " + quote(name) + ": " + problem);
    t.check_bytes("model dump not writable: tensor " + quote(name));
    file.tensors[name] = t;
}

}  // namespace

bool ModelDump::operator==(const ModelDump& o) const {
    return contract == o.contract && impl == o.impl && input == o.input && activations == o.activations &&
           weights == o.weights;
}

ModelDump model_dump_from_safetensors(SafetensorsFile file, const std::string& source) {
    const auto& meta = require_metadata(file, source, "a model dump names conform.format and conform.contract there");
    check_format(meta, source);
    ModelDump d;
    d.source = source;
    d.contract = read_contract(meta, source);
    if (const std::string* impl = metadata_value(meta, "conform.impl")) d.impl = *impl;
    bool has_input = false;
    for (auto& [name, t] : file.tensors) {
        if (const std::string problem = name_problem(name); !problem.empty())
            throw FormatError(source, tensor_field(name), problem);
        Placed p = place(name);
        if (p.role == Role::input) d.input = std::move(t), has_input = true;
        else (p.role == Role::activation ? d.activations : d.weights)[std::move(p.key)] = std::move(t);
    }
    if (!has_input) throw FormatError(source, tensor_field(kModelInputName), "missing: the model input [T, C]");
    return d;
}

ModelDump parse_model_dump(std::span<const std::byte> bytes, const std::string& source) {
    return model_dump_from_safetensors(parse_safetensors(bytes, source), source);
}

ModelDump read_model_dump(const fs::path& file) {
    return parse_model_dump(read_file_bytes(file, kMaxModelDumpBytes), file.string());
}

SafetensorsFile model_dump_to_safetensors(const ModelDump& d) {
    if (!d.contract.is_object()) not_writable("contract is not a JSON object");
    SafetensorsFile file;
    add_writable(file, kModelInputName, d.input);
    for (const auto& [point, t] : d.activations) add_writable(file, kActivationPrefix + point, t);
    for (const auto& [name, t] : d.weights) {
        if (name == kModelInputName || name.starts_with(kActivationPrefix))
            not_writable("weight " + quote(name) + " would read back as the input or an activation");
        add_writable(file, name, t);
    }
    auto& meta = file.metadata.emplace();
    meta["conform.format"] = kModelFormat;
    meta["conform.contract"] = d.contract.dump();
    meta["conform.impl"] = d.impl;
    return file;
}

std::vector<std::byte> serialize_model_dump(const ModelDump& d) { return serialize_safetensors(model_dump_to_safetensors(d)); }

void write_model_dump(const ModelDump& d, const fs::path& file) { write_file_atomic(file, serialize_model_dump(d)); }

bool is_model_dump_header(std::span<const std::byte> head) {
    if (head.size() < 8) return false;
    const std::uint64_t length = read_le(head, 0, 8);
    if (length > kMaxSafetensorsHeader || length > head.size() - 8) return false;
    try {
        const nlohmann::json header = parse_json(as_text(head.subspan(8, length)), "", "");
        if (!header.is_object()) return false;
        const auto meta = header.find("__metadata__");
        if (meta == header.end() || !meta->is_object()) return false;
        const auto format = meta->find("conform.format");
        return format != meta->end() && format->is_string() && *format == kModelFormat;
    } catch (const FormatError&) {
        return false;
    }
}

bool is_model_dump(const fs::path& file) {
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) return false;
    const std::uint64_t size = fs::file_size(file, ec);
    if (ec || size < 8) return false;
    std::ifstream in(file, std::ios::binary);
    std::vector<std::byte> head(8);
    if (!in.read(reinterpret_cast<char*>(head.data()), 8)) return false;
    const std::uint64_t length = read_le(head, 0, 8);
    if (length > kMaxSafetensorsHeader || length > size - 8) return false;
    head.resize(8 + length);
    if (!in.read(reinterpret_cast<char*>(head.data() + 8), static_cast<std::streamsize>(length))) return false;
    return is_model_dump_header(head);
}

}  // namespace conform::io
