// Little-endian integers and length-prefixed headers, the framing shared by
// safetensors (8-byte length) and .npy (2- or 4-byte length).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace conform::io {

std::uint64_t read_le(std::span<const std::byte> bytes, std::size_t at, std::size_t width);
void append_le(std::vector<std::byte>& out, std::uint64_t value, std::size_t width);
void append_text(std::vector<std::byte>& out, std::string_view text);
std::string_view as_text(std::span<const std::byte> bytes);

// The header announced by the `width`-byte little-endian length at `at`,
// which must fit in the file and in `limit`; FormatError (field "header
// length") otherwise.  The header starts right after the length field.
std::span<const std::byte> length_prefixed(std::span<const std::byte> bytes, std::size_t at, std::size_t width,
                                           std::uint64_t limit, const std::string& source);

}  // namespace conform::io
