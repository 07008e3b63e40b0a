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

// True when the file's metadata says model/1 (so `validate` can route or refuse it).
// Reads the header only; false for anything unreadable, never throws.
bool is_model_dump(const std::filesystem::path& file);
// The same on the first bytes of a file (its length field and header at least).
bool is_model_dump_header(std::span<const std::byte> head);

}  // namespace conform::io
