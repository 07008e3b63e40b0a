// safetensors: an 8-byte little-endian header length N, N bytes of JSON
// header, then the data block.  The header maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end)} (offsets relative to the
// data block) and may hold "__metadata__", an object of string values.
// The parser takes bytes already in memory so the fuzzer can drive it directly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/stored_tensor.hpp"

namespace conform::io {

// Larger headers are refused before any allocation (the Rust reference
// implementation uses the same 100 MB limit).
constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafetensorsFile {
    std::optional<std::map<std::string, std::string>> metadata;  // absent: no "__metadata__"
    std::map<std::string, StoredTensor> tensors;
    bool operator==(const SafetensorsFile&) const = default;
};

// Checks everything a hostile file can get wrong (header length, JSON, entry
// fields, dtype, shape overflow, offsets in range, not reversed, dtype x shape
// = byte length, tensors tiling the data block exactly with no overlap or
// gap) and raises FormatError naming `source` and the field.
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& source);

// The same checks without copying any tensor: where each tensor lies in
// `bytes` (a mapped file, say).  parse_safetensors is this plus the copies.
struct SafetensorsEntry {
    DType dtype = DType::f32;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;  // byte offsets from the start of the file
};
struct SafetensorsIndex {
    std::optional<std::map<std::string, std::string>> metadata;
    std::map<std::string, SafetensorsEntry> tensors;
};
SafetensorsIndex parse_safetensors_index(std::span<const std::byte> bytes, const std::string& source);

// The file's first bytes (length and header, padded) for tensors laid out
// in name order as serialize_safetensors lays them; `offsets` receives each
// tensor's [begin, end) from the start of the file.  A writer that streams
// the tensors puts each at its offset.
struct TensorLayout {
    DType dtype = DType::f32;
    std::vector<std::int64_t> shape;
};
std::vector<std::byte> safetensors_header(const std::optional<std::map<std::string, std::string>>& metadata,
                                          const std::map<std::string, TensorLayout>& tensors,
                                          std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>* offsets);

// Tensors are laid out in name order; the header is padded with spaces to a
// multiple of 8 bytes so the data block is 8-byte aligned for mmap readers.
// std::invalid_argument when a tensor's bytes disagree with its dtype x shape
// or a tensor is named "__metadata__".
std::vector<std::byte> serialize_safetensors(const SafetensorsFile& file);

}  // namespace conform::io
