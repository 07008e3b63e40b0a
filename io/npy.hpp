// NumPy .npy files (format versions 1.0, 2.0, 3.0): the magic "\x93NUMPY",
// a version, a 2- or 4-byte little-endian header length, a Python-literal
// header {'descr': ..., 'fortran_order': ..., 'shape': (...)} and the raw data.
// Only little-endian C-order arrays of the case dtypes are accepted.  NumPy
// has no bfloat16, so bf16 tensors are stored as their bit patterns, '<u2',
// and the case.json manifest declares "dtype": "bf16" (see docs/dumps.md).
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/stored_tensor.hpp"

namespace conform::io {

// NumPy itself refuses headers above 10000 bytes by default; a version-1
// header can be at most 65535.
constexpr std::size_t kMaxNpyHeader = 65535;

// The descr written for a dtype: '<f8', '<f4', '<f2', '<u2' (bf16), '|i1', '<i4'.
const char* npy_descr(DType d);

// Parses an .npy file held in memory; FormatError names `source` and the
// field (magic, version, header length, header, descr, fortran_order, shape,
// data).  `declared` is the manifest's dtype: it is required for '<u2' (only
// bf16 is stored that way) and must match the descr when given.
StoredTensor parse_npy(std::span<const std::byte> bytes, const std::string& source,
                       std::optional<DType> declared = std::nullopt);

// Writes the file the way numpy.save does (version 1.0 when the header fits,
// the same header text and 64-byte alignment), so the bytes match NumPy's.
// std::invalid_argument when the tensor's bytes disagree with dtype x shape.
std::vector<std::byte> serialize_npy(const StoredTensor& t);

}  // namespace conform::io
