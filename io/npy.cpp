#include "io/npy.hpp"

#include <cstring>
#include <limits>
#include <stdexcept>

#include "io/bytes.hpp"
#include "io/format_error.hpp"

namespace conform::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicBytes = 6;
constexpr std::size_t kAlign = 64;           // numpy aligns the data to 64 bytes
constexpr std::size_t kGrowthAxisDigits = 21;  // numpy leaves room to grow shape[0] in place

struct NpyHeader {
    std::string descr;
    bool fortran_order = false;
    std::vector<std::int64_t> shape;
};

// Parser of the header's Python literal.  NumPy writes a dict of exactly
// three keys whose values are a str, a bool and a tuple of ints; anything
// else is refused rather than evaluated.
class HeaderParser {
public:
    HeaderParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

    NpyHeader parse() {
        NpyHeader h;
        bool seen[3] = {false, false, false};
        expect('{');
        while (!consume('}')) {
            const std::string key = parse_string("header");
            expect(':');
            const int slot = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
            if (slot < 0) fail("header", "unexpected key " + quote(key));
            if (seen[slot]) fail("header", "duplicate key " + quote(key));
            seen[slot] = true;
            if (slot == 0) h.descr = parse_descr();
            if (slot == 1) h.fortran_order = parse_bool("fortran_order");
            if (slot == 2) h.shape = parse_shape();
            if (!consume(',')) {
                expect('}');
                break;
            }
        }
        skip_space();
        if (pos_ != text_.size()) fail("header", "unexpected text after the closing '}'");
        const char* names[3] = {"descr", "fortran_order", "shape"};
        for (int i = 0; i < 3; ++i)
            if (!seen[i]) fail("header", std::string("missing '") + names[i] + "'");
        return h;
    }

private:
    [[noreturn]] void fail(const std::string& field, const std::string& detail) const {
        throw FormatError(source_, field, detail + " (at header byte " + std::to_string(pos_) + ")");
    }

    void skip_space() {
        while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
            ++pos_;
    }

    bool consume(char c) {
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == c) {
            ++pos_;
            return true;
        }
        return false;
    }

    void expect(char c) {
        if (!consume(c)) fail("header", std::string("expected '") + c + "'");
    }

    std::string parse_string(const char* field) {
        skip_space();
        if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) fail(field, "expected a quoted string");
        const char quote = text_[pos_++];
        const std::size_t start = pos_;
        while (pos_ < text_.size() && text_[pos_] != quote) {
            if (text_[pos_] == '\\') fail(field, "escape sequences are not supported");
            ++pos_;
        }
        if (pos_ >= text_.size()) fail(field, "unterminated string");
        return std::string(text_.substr(start, pos_++ - start));
    }

    std::string parse_descr() {
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == '[') fail("descr", "structured dtypes are not supported");
        return parse_string("descr");
    }

    bool parse_bool(const char* field) {
        skip_space();
        for (const bool value : {true, false}) {
            const std::string_view word = value ? "True" : "False";
            if (text_.substr(pos_, word.size()) == word) {
                pos_ += word.size();
                return value;
            }
        }
        fail(field, "expected True or False");
    }

    std::int64_t parse_dim(std::size_t index) {
        skip_space();
        const std::string field = "shape[" + std::to_string(index) + "]";
        if (pos_ < text_.size() && text_[pos_] == '-') fail("shape", field + " is negative");
        if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') fail("shape", field + " is not an integer");
        std::int64_t dim = 0;
        while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
            if (__builtin_mul_overflow(dim, 10, &dim) || __builtin_add_overflow(dim, text_[pos_] - '0', &dim))
                fail("shape", field + " does not fit in 64 bits");
            ++pos_;
        }
        if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 long literal, as old NumPy wrote
        return dim;
    }

    // "()", "(3,)", "(3, 4)", "(3, 4,)"; "(3)" is not a tuple in Python.
    std::vector<std::int64_t> parse_shape() {
        if (!consume('(')) fail("shape", "expected a tuple");
        std::vector<std::int64_t> shape;
        bool trailing_comma = false;
        while (!consume(')')) {
            if (shape.size() == kMaxStoredRank) fail("shape", "rank above " + std::to_string(kMaxStoredRank));
            shape.push_back(parse_dim(shape.size()));
            trailing_comma = consume(',');
            if (!trailing_comma) {
                if (!consume(')')) fail("shape", "expected ',' or ')'");
                break;
            }
        }
        if (shape.size() == 1 && !trailing_comma) fail("shape", "(n) is not a tuple; a one-element shape is (n,)");
        return shape;
    }

    std::string_view text_;
    const std::string& source_;
    std::size_t pos_ = 0;
};

DType resolve_dtype(const std::string& descr, std::optional<DType> declared, const std::string& source) {
    if (!descr.empty() && descr[0] == '>')
        throw FormatError(source, "descr", quote(descr) + " is big-endian; only little-endian data is supported");
    std::optional<DType> stored;
    for (const DType d : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i8, DType::i32})
        if (descr == npy_descr(d)) stored = d;
    // FP8 has no numpy type of its own: bytes of bit patterns, the format declared.
    if (descr == "|u1" && (declared == DType::f8_e4m3 || declared == DType::f8_e5m2)) return *declared;
    if (descr == "|u1")
        throw FormatError(source, "descr",
                          "'|u1' is accepted only as FP8 bit patterns; declare \"dtype\": \"f8_e4m3\" or "
                          "\"f8_e5m2\" for this tensor in case.json");
    if (!stored)
        throw FormatError(source, "descr", quote(descr) +
                                               " is not one of '<f8', '<f4', '<f2', '|i1', '<i4' "
                                               "(or '<u2' holding bf16, '|u1' FP8 bit patterns)");
    if (*stored == DType::bf16 && declared != DType::bf16)
        throw FormatError(source, "descr",
                          "'<u2' is accepted only as bf16 bit patterns; declare \"dtype\": \"bf16\" for this "
                          "tensor in case.json");
    if (declared && *declared != *stored)
        throw FormatError(source, "descr", quote(descr) + " but case.json declares dtype " + dtype_name(*declared) +
                                               " (stored as '" + npy_descr(*declared) + "')");
    return *stored;
}

std::string python_tuple(const std::vector<std::int64_t>& shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

const char* npy_descr(DType d) {
    switch (d) {
        case DType::f64: return "<f8";
        case DType::f32: return "<f4";
        case DType::f16: return "<f2";
        case DType::bf16: return "<u2";
        case DType::i8: return "|i1";
        case DType::i32: return "<i4";
        case DType::f8_e4m3:
        case DType::f8_e5m2: return "|u1";
    }
    return "";
}

StoredTensor parse_npy(std::span<const std::byte> bytes, const std::string& source, std::optional<DType> declared) {
    if (bytes.size() < kMagicBytes + 2 || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0)
        throw FormatError(source, "magic", "not an .npy file (no \\x93NUMPY magic)");
    const int major = static_cast<int>(bytes[6]), minor = static_cast<int>(bytes[7]);
    if (major < 1 || major > 3 || minor != 0)
        throw FormatError(source, "version",
                          std::to_string(major) + "." + std::to_string(minor) + " is not 1.0, 2.0 or 3.0");
    const std::size_t width = major == 1 ? 2 : 4;
    const auto text = length_prefixed(bytes, kMagicBytes + 2, width, kMaxNpyHeader, source);
    const NpyHeader header = HeaderParser(as_text(text), source).parse();
    if (header.fortran_order)
        throw FormatError(source, "fortran_order", "True: only C-order arrays are supported (save np.ascontiguousarray(a))");
    const DType dtype = resolve_dtype(header.descr, declared, source);
    const auto needed = byte_count(dtype, header.shape);
    if (!needed)
        throw FormatError(source, "shape", shape_string(header.shape) + " of " + header.descr + " does not fit in 2^63 bytes");
    const auto data = bytes.subspan(kMagicBytes + 2 + width + text.size());
    if (data.size() != static_cast<std::uint64_t>(*needed))
        throw FormatError(source, "data",
                          std::to_string(data.size()) + " bytes but descr " + header.descr + " × shape " +
                              shape_string(header.shape) + " needs " + std::to_string(*needed));
    return StoredTensor{dtype, header.shape, {data.begin(), data.end()}};
}

std::vector<std::byte> serialize_npy(const StoredTensor& t) {
    t.check_bytes("tensor");
    // numpy.lib.format._write_array_header: sorted keys, repr() values, room to
    // grow shape[0], then spaces and '\n' up to the next 64-byte boundary.
    std::string header = std::string("{'descr': '") + npy_descr(t.dtype) +
                         "', 'fortran_order': False, 'shape': " + python_tuple(t.shape) + ", }";
    if (!t.shape.empty()) header.append(kGrowthAxisDigits - std::to_string(t.shape[0]).size(), ' ');
    const auto padding = [&](std::size_t width) { return kAlign - (kMagicBytes + 2 + width + header.size() + 1) % kAlign; };
    const bool v1 = header.size() + 1 + padding(2) <= std::numeric_limits<std::uint16_t>::max();
    const std::size_t width = v1 ? 2 : 4;
    header.append(padding(width), ' ');
    header += '\n';
    std::vector<std::byte> out;
    append_text(out, std::string_view(kMagic, kMagicBytes));
    append_le(out, v1 ? 1 : 2, 1);  // version major.minor
    append_le(out, 0, 1);
    append_le(out, header.size(), width);
    append_text(out, header);
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    return out;
}

}  // namespace conform::io
