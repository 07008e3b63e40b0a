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
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/stored_tensor.hpp"

namespace conform::io {

constexpr const char* kModelFormat = "model/1";
constexpr const char* kActivationPrefix = "act.";

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
std::vector<std::byte> serialize_model_dump(const ModelDump& d);
void write_model_dump(const ModelDump& d, const std::filesystem::path& file);  // atomic

// True when the file's metadata says model/1 (so `validate` can route or refuse it).
bool is_model_dump(const std::filesystem::path& file);

}  // namespace conform::io
