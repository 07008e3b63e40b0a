#include "io/bytes.hpp"

#include "io/format_error.hpp"

namespace conform::io {

std::uint64_t read_le(std::span<const std::byte> bytes, std::size_t at, std::size_t width) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < width; ++i) v |= std::uint64_t(bytes[at + i]) << (8 * i);
    return v;
}

void append_le(std::vector<std::byte>& out, std::uint64_t value, std::size_t width) {
    for (std::size_t i = 0; i < width; ++i) out.push_back(static_cast<std::byte>(value >> (8 * i)));
}

void append_text(std::vector<std::byte>& out, std::string_view text) {
    const auto* p = reinterpret_cast<const std::byte*>(text.data());
    out.insert(out.end(), p, p + text.size());
}

std::string_view as_text(std::span<const std::byte> bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::span<const std::byte> length_prefixed(std::span<const std::byte> bytes, std::size_t at, std::size_t width,
                                           std::uint64_t limit, const std::string& source) {
    const std::size_t start = at + width;
    if (bytes.size() < start)
        throw FormatError(source, "header length",
                          "file has " + std::to_string(bytes.size()) + " bytes and ends inside the " +
                              std::to_string(width) + "-byte length field");
    const std::uint64_t length = read_le(bytes, at, width);
    if (length > limit)
        throw FormatError(source, "header length",
                          std::to_string(length) + " bytes is above the " + std::to_string(limit) + "-byte limit");
    if (length > bytes.size() - start)
        throw FormatError(source, "header length",
                          std::to_string(length) + " bytes but only " + std::to_string(bytes.size() - start) +
                              " bytes follow (truncated file?)");
    return bytes.subspan(start, length);
}

}  // namespace conform::io
