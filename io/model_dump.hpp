// Model dumps (docs/dumps.md, "Model dumps"): one safetensors file whose
// __metadata__ carries
//   conform.format   "model/1"
//   conform.contract the block-stack contract (JSON object; model/contract.hpp parses it)
//   conform.impl     who produced the activations
// and whose tensors are
//   input            the model input [T, C]
//   act.<point>      the activation at a named point ("act.layers.3.attn_norm")
//   anything else    a weight or cache by its contract name ("layers.3.q.weight")
// Read as untrusted input, like case files: every error is a FormatError
// naming the file and the field.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/files.hpp"
#include "io/safetensors.hpp"
#include "io/stored_tensor.hpp"

namespace conform::io {

constexpr const char* kModelFormat = "model/1";
constexpr const char* kActivationPrefix = "act.";
constexpr const char* kModelInputName = "input";
// Larger files are refused before reading them into memory (the reader holds
// the file and its tensors at once: about twice this in memory).
constexpr std::uint64_t kMaxModelDumpBytes = std::uint64_t{8} << 30;
// Tensor names (and point names after "act."): 1 to 256 of [A-Za-z0-9_.-],
// no empty dot-separated part ("layers..q", ".x", "x.").
constexpr std::size_t kMaxTensorNameBytes = 256;

struct ModelDump {
    nlohmann::json contract = nlohmann::json::object();
    std::string impl;
    StoredTensor input;
    std::map<std::string, StoredTensor> activations;  // by point name, without "act."
    std::map<std::string, StoredTensor> weights;      // weights and caches by name
    std::string source;                               // file read from; for messages

    bool operator==(const ModelDump& other) const;  // everything but `source`
};

ModelDump read_model_dump(const std::filesystem::path& file);
ModelDump parse_model_dump(std::span<const std::byte> bytes, const std::string& source);
ModelDump model_dump_from_safetensors(SafetensorsFile file, const std::string& source);

// std::invalid_argument for a dump that could not be read back: contract not
// an object, a tensor name the reader refuses (or a weight named "input" or
// "act.*"), tensor bytes that disagree with dtype x shape.
SafetensorsFile model_dump_to_safetensors(const ModelDump& d);
std::vector<std::byte> serialize_model_dump(const ModelDump& d);
void write_model_dump(const ModelDump& d, const std::filesystem::path& file);  // atomic (io/files.hpp)

// A model dump read without copying it into memory (dumps of deep, wide
// models: tens of gigabytes).  The file is mapped copy-on-write; each
// tensor is a Tensor over its bytes (a tensor whose offset is not aligned to
// its element size is copied).  The same checks as read_model_dump, and a
// FormatError for a tensor whose dtype has no numeric format (I32).
struct MappedModelDump {
    nlohmann::json contract = nlohmann::json::object();
    std::string impl;
    Tensor input;
    std::map<std::string, Tensor> activations;  // by point name, without "act."
    std::map<std::string, Tensor> weights;      // weights and caches by name
    std::string source;
};
MappedModelDump map_model_dump(const std::filesystem::path& file);

// A model dump written tensor by tensor, in any order, into the layout
// write_model_dump gives the same tensors (byte for byte the same file):
// every tensor is declared up front, each put once, and finish() renames
// the complete file into place.  Without finish() nothing is left behind.
// std::invalid_argument for a name the reader would refuse, an undeclared
// or mis-shaped tensor, a second put, or finish() with tensors missing.
class ModelDumpWriter {
public:
    ModelDumpWriter(const std::filesystem::path& file, const nlohmann::json& contract, const std::string& impl,
                    const TensorLayout& input, const std::map<std::string, TensorLayout>& activations,
                    const std::map<std::string, TensorLayout>& weights);
    void put_input(const Tensor& t) { put(kModelInputName, t); }
    void put_activation(const std::string& point, const Tensor& t) { put(kActivationPrefix + point, t); }
    void put_weight(const std::string& name, const Tensor& t) { put(name, t); }
    void finish();
    std::uint64_t bytes() const { return size_; }  // of the whole file

private:
    void put(const std::string& name, const Tensor& t);
    AtomicFile file_;
    std::map<std::string, TensorLayout> layout_;
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> offsets_;
    std::map<std::string, bool> written_;
    std::uint64_t size_ = 0;
};

// True when the file's metadata says model/1 (so `validate` can route or refuse it).
// Reads the header only; false for anything unreadable, never throws.
bool is_model_dump(const std::filesystem::path& file);
// The same on the first bytes of a file (its length field and header at least).
bool is_model_dump_header(std::span<const std::byte> head);

}  // namespace conform::io
