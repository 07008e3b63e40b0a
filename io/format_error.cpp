#include "io/format_error.hpp"

namespace conform::io {

std::string printable(std::string_view text, std::size_t max_shown) {
    std::string out;
    for (std::size_t i = 0; i < text.size() && i < max_shown; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
            out += static_cast<char>(c);
        } else {
            static const char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 15];
        }
    }
    if (text.size() > max_shown) out += "...";
    return out;
}

std::string quote(std::string_view text) { return '"' + printable(text, 64) + '"'; }

std::string tensor_field(std::string_view name) { return "tensor " + quote(name); }

}  // namespace conform::io
