// A test case as a file: the op, its parameters, who produced the outputs,
// the declared conventions, the input tensors under the op's names and the
// outputs under "out.<name>".  Two forms hold the same case:
//   - one safetensors file whose "__metadata__" carries conform.format
//     ("case/1"), conform.op, conform.params (JSON text), conform.impl and
//     optionally conform.conventions (JSON text) and conform.profile (the
//     accuracy profile the producer declares, e.g. "ulp:4+ftz");
//   - a directory of .npy files with a case.json manifest.
// Files are untrusted: every reader raises FormatError naming the file and
// field, never crashes.  docs/dumps.md describes both forms.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/format_error.hpp"
#include "io/safetensors.hpp"
#include "io/stored_tensor.hpp"

namespace conform::io {

constexpr const char* kCaseFormat = "case/1";
constexpr const char* kOutputPrefix = "out.";
constexpr const char* kManifestName = "case.json";
// Larger files are refused before reading them into memory.
constexpr std::uint64_t kMaxCaseFileBytes = std::uint64_t{4} << 30;
constexpr std::uint64_t kMaxManifestBytes = 100'000'000;

struct Case {
    std::string format = kCaseFormat;
    std::string op;                                    // a registry op name (checked by the caller)
    nlohmann::json params = nlohmann::json::object();  // the op's parameters, e.g. {"eps": 1e-6}
    std::string impl;                                  // who produced the outputs
    std::optional<nlohmann::json> conventions;         // declared conventions (an object), if any
    std::string profile;                               // declared accuracy profile (conform.profile); empty: none
    std::map<std::string, StoredTensor> inputs;        // by the op's input names
    std::map<std::string, StoredTensor> outputs;       // by output name, without "out."
    std::string source;                                // file or directory read from; for messages

    // The named tensor; FormatError naming `source` and the tensor when it is
    // missing (so a caller checking an op's inputs reports like the reader).
    const StoredTensor& input(const std::string& name) const;
    const StoredTensor& output(const std::string& name) const;  // name without "out."

    bool operator==(const Case& other) const;  // everything but `source`
};

// --- reading ---------------------------------------------------------------

// A .safetensors file, a directory holding case.json, or a case.json path.
Case read_case(const std::filesystem::path& path);
Case read_case_safetensors(const std::filesystem::path& file);
Case read_case_npy_dir(const std::filesystem::path& dir);

// Files and case directories under `paths`: each file named is taken as
// given; directories are searched recursively (symlinked directories are not
// followed) for *.safetensors files and directories holding case.json.
// Sorted within each path.  FormatError for a path that does not exist.
std::vector<std::filesystem::path> find_cases(const std::vector<std::filesystem::path>& paths);

// From memory, for the fuzzer and for callers that already hold the bytes.
Case parse_case_safetensors(std::span<const std::byte> bytes, const std::string& source);
Case case_from_safetensors(SafetensorsFile file, const std::string& source);

// The parsed case.json: the case without its tensors, and where each tensor is.
struct ManifestEntry {
    std::string name;             // as in the file: "x", "out.y"
    std::string file;             // a plain file name inside the case directory
    std::optional<DType> dtype;   // declared dtype; required for bf16 ('<u2')
};
struct CaseManifest {
    Case header;
    std::vector<ManifestEntry> tensors;
};
CaseManifest parse_case_manifest(std::span<const std::byte> bytes, const std::string& source);

// --- writing ---------------------------------------------------------------
// std::invalid_argument for a case that could not be read back: empty op,
// params or conventions not objects, empty names, an input named "out.*" or
// "__metadata__", tensor bytes that disagree with dtype x shape, or (npy
// directories) a name that is not usable as a file name.

SafetensorsFile case_to_safetensors(const Case& c);
std::vector<std::byte> serialize_case_safetensors(const Case& c);
std::string case_manifest_text(const Case& c);
void write_case_safetensors(const Case& c, const std::filesystem::path& file);
// Creates `dir` if needed; writes every .npy, then case.json last.
void write_case_npy_dir(const Case& c, const std::filesystem::path& dir);

}  // namespace conform::io
