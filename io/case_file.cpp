#include "io/case_file.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "io/bytes.hpp"
#include "io/files.hpp"
#include "io/json_text.hpp"
#include "io/metadata.hpp"
#include "io/npy.hpp"

namespace conform::io {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Where a tensor stored under `name` goes: "out.<name>" is an output, anything else an input.
struct TensorName {
    bool output;
    std::string key;  // the map key in Case: the name without "out."
};

TensorName classify(const std::string& name, const std::string& source) {
    if (name.empty()) throw FormatError(source, tensor_field(name), "empty tensor name");
    if (!name.starts_with(kOutputPrefix)) return {false, name};
    std::string key = name.substr(std::strlen(kOutputPrefix));
    if (key.empty()) throw FormatError(source, tensor_field(name), "output name after \"out.\" is empty");
    return {true, std::move(key)};
}

void add_tensor(Case& c, const std::string& name, StoredTensor t, const std::string& source) {
    const TensorName n = classify(name, source);
    (n.output ? c.outputs : c.inputs)[n.key] = std::move(t);
}

void check_format(const std::string& value, const std::string& source, const std::string& field) {
    if (value == kCaseFormat) return;
    const std::string hint = value == "model/1" ? " (a model dump: use conform diverge)" : "";
    throw FormatError(source, field, quote(value) + " is not \"case/1\", the one case format this reader knows" + hint);
}

void check_op(const std::string& op, const std::string& source, const std::string& field) {
    if (op.empty()) throw FormatError(source, field, "empty op name");
}

// A file name that stays inside the case directory: no separators, no "..".
bool plain_file_name(const std::string& name) {
    return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
           name.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
}

const std::string& string_member(const json& object, const char* key, const std::string& source) {
    const auto it = object.find(key);
    if (it == object.end()) throw FormatError(source, key, "missing");
    if (!it->is_string()) throw FormatError(source, key, "is " + json_kind(*it) + ", not a string");
    return it->get_ref<const std::string&>();
}

// An optional member; JSON null counts as absent.
const json* optional_member(const json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
}

ManifestEntry parse_manifest_entry(const std::string& name, const json& entry, const std::string& source) {
    const std::string field = tensor_field(name);
    classify(name, source);
    if (!entry.is_object()) throw FormatError(source, field, "entry is " + json_kind(entry) + ", not an object");
    ManifestEntry e{name, name + ".npy", std::nullopt};
    if (const json* file = optional_member(entry, "file")) {
        if (!file->is_string()) throw FormatError(source, field, "file is " + json_kind(*file) + ", not a string");
        e.file = file->get<std::string>();
    }
    if (!plain_file_name(e.file))
        throw FormatError(source, field, "file " + quote(e.file) + " is not a plain file name inside the case directory");
    if (const json* dtype = optional_member(entry, "dtype")) {
        if (!dtype->is_string()) throw FormatError(source, field, "dtype is " + json_kind(*dtype) + ", not a string");
        e.dtype = dtype_from_name(dtype->get_ref<const std::string&>());
        if (!e.dtype)
            throw FormatError(source, field,
                              "dtype " + quote(dtype->get<std::string>()) + " is not one of f64, f32, f16, bf16, i8, i32, f8_e4m3, f8_e5m2");
    }
    return e;
}

// Every tensor under the name it is stored as (outputs as "out.<name>"),
// once the case is known to read back as it is: the checks both writers share.
std::map<std::string, const StoredTensor*> stored_names(const Case& c) {
    const auto fail = [](const std::string& why) { throw std::invalid_argument("case not writable: " + why); };
    if (c.format != kCaseFormat) fail("format " + quote(c.format) + " is not \"case/1\"");
    if (c.op.empty()) fail("empty op");
    if (!c.params.is_object()) fail("params is not a JSON object");
    if (c.conventions && !c.conventions->is_object()) fail("conventions is not a JSON object");
    std::map<std::string, const StoredTensor*> names;
    for (const auto& [name, t] : c.inputs) {
        if (name.empty() || name.starts_with(kOutputPrefix) || name == "__metadata__")
            fail("input name " + quote(name) + " is empty, starts with \"out.\" or is \"__metadata__\"");
        names[name] = &t;
    }
    for (const auto& [name, t] : c.outputs) {
        if (name.empty()) fail("empty output name");
        names[kOutputPrefix + name] = &t;
    }
    for (const auto& [name, t] : names) t->check_bytes("case not writable: tensor " + quote(name));
    return names;
}

}  // namespace

// --- Case ------------------------------------------------------------------

namespace {
std::string tensor_list(const Case& c) {
    std::string list;
    for (const auto& [name, t] : c.inputs) list += (list.empty() ? "" : ", ") + name;
    for (const auto& [name, t] : c.outputs) list += (list.empty() ? "" : ", ") + std::string(kOutputPrefix) + name;
    return list.empty() ? "no tensors" : printable(list, 200);
}
}  // namespace

const StoredTensor& Case::input(const std::string& name) const {
    const auto it = inputs.find(name);
    if (it == inputs.end()) throw FormatError(source, tensor_field(name), "missing (the case has " + tensor_list(*this) + ")");
    return it->second;
}

const StoredTensor& Case::output(const std::string& name) const {
    const auto it = outputs.find(name);
    if (it == outputs.end())
        throw FormatError(source, tensor_field(kOutputPrefix + name), "missing (the case has " + tensor_list(*this) + ")");
    return it->second;
}

bool Case::operator==(const Case& o) const {
    return format == o.format && op == o.op && params == o.params && impl == o.impl && conventions == o.conventions &&
           profile == o.profile &&
           inputs == o.inputs && outputs == o.outputs;
}

// --- safetensors form ------------------------------------------------------

Case case_from_safetensors(SafetensorsFile file, const std::string& source) {
    const auto& meta = require_metadata(file, source, "a conform case names conform.format, conform.op and conform.params there");
    const auto find = [&](const char* key) { return metadata_value(meta, key); };
    Case c;
    c.source = source;
    const std::string* format = find("conform.format");
    if (!format) throw FormatError(source, metadata_field("conform.format"), "missing: not a conform case");
    check_format(*format, source, metadata_field("conform.format"));
    const std::string* op = find("conform.op");
    if (!op) throw FormatError(source, metadata_field("conform.op"), "missing");
    check_op(*op, source, metadata_field("conform.op"));
    c.op = *op;
    if (const std::string* params = find("conform.params"))
        c.params = metadata_object(*params, source, "conform.params");
    if (const std::string* impl = find("conform.impl")) c.impl = *impl;
    if (const std::string* conventions = find("conform.conventions"))
        c.conventions = metadata_object(*conventions, source, "conform.conventions");
    if (const std::string* profile = find("conform.profile")) c.profile = *profile;
    for (auto& [name, t] : file.tensors) add_tensor(c, name, std::move(t), source);
    return c;
}

Case parse_case_safetensors(std::span<const std::byte> bytes, const std::string& source) {
    return case_from_safetensors(parse_safetensors(bytes, source), source);
}

Case read_case_safetensors(const fs::path& file) {
    return parse_case_safetensors(read_file_bytes(file, kMaxCaseFileBytes), file.string());
}

SafetensorsFile case_to_safetensors(const Case& c) {
    SafetensorsFile file;
    for (const auto& [name, t] : stored_names(c)) file.tensors[name] = *t;
    auto& meta = file.metadata.emplace();
    meta["conform.format"] = c.format;
    meta["conform.op"] = c.op;
    meta["conform.params"] = c.params.dump();
    meta["conform.impl"] = c.impl;
    if (c.conventions) meta["conform.conventions"] = c.conventions->dump();
    if (!c.profile.empty()) meta["conform.profile"] = c.profile;
    return file;
}

std::vector<std::byte> serialize_case_safetensors(const Case& c) { return serialize_safetensors(case_to_safetensors(c)); }

void write_case_safetensors(const Case& c, const fs::path& file) { write_file_atomic(file, serialize_case_safetensors(c)); }

// --- npy directory form ----------------------------------------------------

CaseManifest parse_case_manifest(std::span<const std::byte> bytes, const std::string& source) {
    const json j = parse_json(as_text(bytes), source, "");
    if (!j.is_object()) throw FormatError(source, "", "manifest is " + json_kind(j) + ", not an object");
    CaseManifest m;
    Case& c = m.header;
    c.format = string_member(j, "format", source);
    check_format(c.format, source, "format");
    c.op = string_member(j, "op", source);
    check_op(c.op, source, "op");
    if (const json* params = optional_member(j, "params")) c.params = object_value(*params, source, "params");
    if (optional_member(j, "impl")) c.impl = string_member(j, "impl", source);
    if (const json* conventions = optional_member(j, "conventions"))
        c.conventions = object_value(*conventions, source, "conventions");
    if (optional_member(j, "profile")) c.profile = string_member(j, "profile", source);
    const auto tensors = j.find("tensors");
    if (tensors == j.end()) throw FormatError(source, "tensors", "missing");
    if (!tensors->is_object()) throw FormatError(source, "tensors", "is " + json_kind(*tensors) + ", not an object");
    for (const auto& [name, entry] : tensors->items()) m.tensors.push_back(parse_manifest_entry(name, entry, source));
    return m;
}

Case read_case_npy_dir(const fs::path& dir) {
    const fs::path manifest_path = dir / kManifestName;
    std::error_code ec;
    if (!fs::exists(manifest_path, ec))
        throw FormatError(dir.string(), kManifestName, "missing: a case directory holds case.json and its .npy files");
    CaseManifest m = parse_case_manifest(read_file_bytes(manifest_path, kMaxManifestBytes), manifest_path.string());
    Case c = std::move(m.header);
    c.source = dir.string();
    for (const ManifestEntry& e : m.tensors) {
        const fs::path file = dir / e.file;
        add_tensor(c, e.name, parse_npy(read_file_bytes(file, kMaxCaseFileBytes), file.string(), e.dtype),
                   manifest_path.string());
    }
    return c;
}

std::string case_manifest_text(const Case& c) {
    json tensors = json::object();
    for (const auto& [name, t] : stored_names(c)) {
        if (!plain_file_name(name + ".npy"))
            throw std::invalid_argument("case not writable: tensor name " + quote(name) + " is not usable as a file name");
        tensors[name] = {{"file", name + ".npy"}, {"dtype", dtype_name(t->dtype)}};
    }
    json j = {{"format", c.format}, {"op", c.op}, {"params", c.params}, {"impl", c.impl}, {"tensors", tensors}};
    if (c.conventions) j["conventions"] = *c.conventions;
    if (!c.profile.empty()) j["profile"] = c.profile;
    return j.dump(2) + "\n";
}

void write_case_npy_dir(const Case& c, const fs::path& dir) {
    const std::string manifest = case_manifest_text(c);  // validates every name before anything is written
    fs::create_directories(dir);
    for (const auto& [name, t] : stored_names(c)) write_file_atomic(dir / (name + ".npy"), serialize_npy(*t));
    write_file_atomic(dir / kManifestName, manifest);
}

// --- finding cases -----------------------------------------------------------

Case read_case(const fs::path& path) {
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (!fs::exists(status)) throw FormatError(path.string(), "", "no such file or directory");
    if (fs::is_directory(status)) return read_case_npy_dir(path);
    if (path.filename() == kManifestName) return read_case_npy_dir(path.has_parent_path() ? path.parent_path() : ".");
    return read_case_safetensors(path);
}

std::vector<fs::path> find_cases(const std::vector<fs::path>& paths) {
    std::vector<fs::path> found;
    for (const fs::path& root : paths) {
        std::error_code ec;
        const auto status = fs::status(root, ec);
        if (!fs::exists(status)) throw FormatError(root.string(), "", "no such file or directory");
        if (!fs::is_directory(status) || fs::exists(root / kManifestName, ec)) {
            found.push_back(root);
            continue;
        }
        std::vector<fs::path> here;
        try {
            for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied);
                 it != fs::recursive_directory_iterator(); ++it) {
                if (it->is_directory() && fs::exists(it->path() / kManifestName, ec)) {
                    here.push_back(it->path());
                    it.disable_recursion_pending();  // its .npy files belong to it
                } else if (it->is_regular_file() && it->path().extension() == ".safetensors") {
                    here.push_back(it->path());
                }
            }
        } catch (const fs::filesystem_error& e) {
            throw FormatError(root.string(), "", std::string("cannot search: ") + e.code().message());
        }
        std::sort(here.begin(), here.end());
        found.insert(found.end(), here.begin(), here.end());
    }
    return found;
}

}  // namespace conform::io
