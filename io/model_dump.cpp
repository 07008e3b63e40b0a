#include "io/model_dump.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

namespace {

// The dump's metadata (format, contract, impl) and every tensor placed as
// the input, an activation or a weight; `make` turns a file entry into the
// dump's tensor type.  Shared by the copying and the mapping readers.
template <class Dump, class Entries, class Make>
Dump placed_dump(const std::optional<std::map<std::string, std::string>>& metadata, Entries& entries,
                 const std::string& source, Make make) {
    if (!metadata)
        throw FormatError(source, "__metadata__", "missing: a model dump names conform.format and conform.contract there");
    check_format(*metadata, source);
    Dump d;
    d.source = source;
    d.contract = read_contract(*metadata, source);
    if (const std::string* impl = metadata_value(*metadata, "conform.impl")) d.impl = *impl;
    bool has_input = false;
    for (auto& [name, t] : entries) {
        if (const std::string problem = name_problem(name); !problem.empty())
            throw FormatError(source, tensor_field(name), problem);
        Placed p = place(name);
        if (p.role == Role::input) d.input = make(name, t), has_input = true;
        else (p.role == Role::activation ? d.activations : d.weights)[std::move(p.key)] = make(name, t);
    }
    if (!has_input) throw FormatError(source, tensor_field(kModelInputName), "missing: the model input [T, C]");
    return d;
}

}  // namespace

ModelDump model_dump_from_safetensors(SafetensorsFile file, const std::string& source) {
    require_metadata(file, source, "a model dump names conform.format and conform.contract there");
    return placed_dump<ModelDump>(file.metadata, file.tensors, source,
                                  [](const std::string&, StoredTensor& t) { return std::move(t); });
}

MappedModelDump map_model_dump(const fs::path& file) {
    const std::string source = file.string();
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw FormatError(source, "", std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw FormatError(source, "", "not a regular file");
    }
    const auto size = static_cast<std::size_t>(st.st_size);
    if (size < 8) {
        ::close(fd);
        throw FormatError(source, "", std::to_string(size) + " bytes: shorter than the 8-byte header length");
    }
    // Copy-on-write: a write through a tensor never reaches the file.  No
    // reservation: a private writable mapping is otherwise charged in full
    // against memory + swap, and a dump larger than both could not be mapped
    // (nothing writes to it; a page written would be allocated then).
    void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
    ::close(fd);
    if (base == MAP_FAILED) throw FormatError(source, "", std::string("cannot map: ") + std::strerror(errno));
    const std::shared_ptr<void> mapping(base, [size](void* p) { ::munmap(p, size); });
    const std::span<const std::byte> bytes(static_cast<const std::byte*>(base), size);
    SafetensorsIndex index = parse_safetensors_index(bytes, source);
    return placed_dump<MappedModelDump>(index.metadata, index.tensors, source, [&](const std::string& name, SafetensorsEntry& e) {
        const auto f = numerics_format(e.dtype);
        if (!f)
            throw FormatError(source, tensor_field(name), std::string("dtype ") + safetensors_name(e.dtype) +
                                                              " has no numeric format; a model dump's tensors are floating point or I8");
        std::byte* data = static_cast<std::byte*>(base) + e.begin;
        if (e.shape.size() > kMaxRank) throw FormatError(source, tensor_field(name), "rank above " + std::to_string(kMaxRank));
        if (reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(dtype_size(e.dtype)) == 0)
            return Tensor::external(*f, e.shape, mapping, data);
        Tensor t(*f, e.shape);  // unaligned in the file: copied
        std::memcpy(t.data(), data, e.end - e.begin);
        return t;
    });
}

ModelDumpWriter::ModelDumpWriter(const fs::path& file, const nlohmann::json& contract, const std::string& impl,
                                 const TensorLayout& input, const std::map<std::string, TensorLayout>& activations,
                                 const std::map<std::string, TensorLayout>& weights)
    : file_(file) {
    if (!contract.is_object()) not_writable("contract is not a JSON object");
    const auto declare = [&](const std::string& name, const TensorLayout& l) {
        if (const std::string problem = name_problem(name); !problem.empty()) not_writable("tensor " + quote(name) + ": " + problem);
        layout_[name] = l;
        written_[name] = false;
    };
    declare(kModelInputName, input);
    for (const auto& [point, l] : activations) declare(kActivationPrefix + point, l);
    for (const auto& [name, l] : weights) {
        if (name == kModelInputName || name.starts_with(kActivationPrefix))
            not_writable("weight " + quote(name) + " would read back as the input or an activation");
        declare(name, l);
    }
    std::map<std::string, std::string> meta{
        {"conform.format", kModelFormat}, {"conform.contract", contract.dump()}, {"conform.impl", impl}};
    const std::vector<std::byte> head = safetensors_header(meta, layout_, &offsets_);
    size_ = head.size();
    for (const auto& [name, r] : offsets_) size_ = std::max(size_, r.second);
    file_.resize(size_);
    file_.write_at(0, head);
}

void ModelDumpWriter::put(const std::string& name, const Tensor& t) {
    const auto it = layout_.find(name);
    if (it == layout_.end()) not_writable("tensor " + quote(name) + " was not declared");
    if (written_[name]) not_writable("tensor " + quote(name) + " written twice");
    if (dtype_of(t.format()) != it->second.dtype || t.shape() != it->second.shape)
        not_writable("tensor " + quote(name) + ": " + dtype_name(dtype_of(t.format())) + " " + shape_string(t.shape()) +
                     ", declared " + dtype_name(it->second.dtype) + " " + shape_string(it->second.shape));
    const auto [begin, end] = offsets_.at(name);
    file_.write_at(begin, std::span(static_cast<const std::byte*>(t.data()), end - begin));
    written_[name] = true;
}

void ModelDumpWriter::finish() {
    for (const auto& [name, done] : written_)
        if (!done) not_writable("tensor " + quote(name) + " was declared but never written");
    file_.commit();
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
