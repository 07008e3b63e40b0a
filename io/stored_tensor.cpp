#include "io/stored_tensor.hpp"

#include <bit>
#include <cstring>
#include <stdexcept>

#include "io/format_error.hpp"

// Tensor bytes are stored little-endian and reinterpreted in place by
// TensorView, which is only right on a little-endian host.
static_assert(std::endian::native == std::endian::little, "conform::io assumes a little-endian host");

namespace conform::io {
namespace {

struct DTypeInfo {
    const char* safetensors;
    const char* name;
    int size;
    std::optional<Format> format;
};

constexpr DTypeInfo kDTypes[] = {
    {"F64", "f64", 8, Format::fp64}, {"F32", "f32", 4, Format::fp32},  {"F16", "f16", 2, Format::fp16},
    {"BF16", "bf16", 2, Format::bf16}, {"I8", "i8", 1, Format::int8}, {"I32", "i32", 4, std::nullopt},
    {"F8_E4M3", "f8_e4m3", 1, Format::fp8_e4m3}, {"F8_E5M2", "f8_e5m2", 1, Format::fp8_e5m2},
};
constexpr int kDTypeCount = sizeof kDTypes / sizeof kDTypes[0];

const DTypeInfo& dtype_info(DType d) { return kDTypes[static_cast<int>(d)]; }

}  // namespace

int dtype_size(DType d) { return dtype_info(d).size; }
const char* safetensors_name(DType d) { return dtype_info(d).safetensors; }
const char* dtype_name(DType d) { return dtype_info(d).name; }
std::optional<Format> numerics_format(DType d) { return dtype_info(d).format; }

std::optional<DType> dtype_from_safetensors(std::string_view s) {
    for (int i = 0; i < kDTypeCount; ++i)
        if (s == kDTypes[i].safetensors) return static_cast<DType>(i);
    return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view s) {
    for (int i = 0; i < kDTypeCount; ++i)
        if (s == kDTypes[i].name) return static_cast<DType>(i);
    return std::nullopt;
}

DType dtype_of(Format f) {
    for (int i = 0; i < kDTypeCount; ++i)
        if (kDTypes[i].format == f) return static_cast<DType>(i);
    throw std::invalid_argument(std::string("no case dtype for format ") + name(f));
}

std::optional<std::int64_t> byte_count(DType d, std::span<const std::int64_t> shape) {
    std::int64_t bound = dtype_size(d), numel = 1;
    for (std::int64_t dim : shape) {
        if (dim < 0) return std::nullopt;
        if (__builtin_mul_overflow(bound, dim == 0 ? 1 : dim, &bound)) return std::nullopt;
        numel *= dim;  // cannot overflow: |numel| <= bound
    }
    return numel * dtype_size(d);
}

StoredTensor StoredTensor::zeros(DType d, std::vector<std::int64_t> shape) {
    const auto n = byte_count(d, shape);
    if (!n) throw std::invalid_argument("tensor shape " + shape_string(shape) + " is negative or too large");
    StoredTensor t;
    t.dtype = d;
    t.shape = std::move(shape);
    t.bytes.assign(static_cast<std::size_t>(*n), std::byte{0});
    return t;
}

StoredTensor StoredTensor::from_tensor(const Tensor& t) {
    StoredTensor s = zeros(dtype_of(t.format()), t.shape());
    if (!s.bytes.empty()) std::memcpy(s.bytes.data(), t.data(), s.bytes.size());
    return s;
}

std::int64_t StoredTensor::numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

// Bounds are checked against the bytes actually held, so a hand-built tensor
// whose shape disagrees with its bytes cannot read or write out of range.
std::size_t StoredTensor::byte_offset(std::int64_t flat) const {
    const auto size = static_cast<std::size_t>(dtype_size(dtype));
    if (flat < 0 || static_cast<std::uint64_t>(flat) >= bytes.size() / size)
        throw std::out_of_range("tensor element " + std::to_string(flat) + " of " + std::to_string(bytes.size() / size));
    return static_cast<std::size_t>(flat) * size;
}

std::uint64_t StoredTensor::bits(std::int64_t flat) const {
    const std::size_t at = byte_offset(flat);
    std::uint64_t b = 0;
    std::memcpy(&b, bytes.data() + at, dtype_size(dtype));  // little-endian: low bytes first
    return b;
}

void StoredTensor::set_bits(std::int64_t flat, std::uint64_t b) {
    const std::size_t at = byte_offset(flat);
    std::memcpy(bytes.data() + at, &b, dtype_size(dtype));
}

double StoredTensor::value(std::int64_t flat) const {
    const std::uint64_t b = bits(flat);
    if (dtype == DType::i32) return static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(b)));
    return decode(*numerics_format(dtype), b);
}

TensorView StoredTensor::view() const {
    const auto format = numerics_format(dtype);
    if (!format) throw std::invalid_argument("an i32 tensor has no numerics view");
    if (shape.size() > static_cast<std::size_t>(kMaxRank))
        throw std::invalid_argument("tensor rank " + std::to_string(shape.size()) + " is above " +
                                    std::to_string(kMaxRank));
    check_bytes("tensor");
    return TensorView::contiguous(const_cast<std::byte*>(bytes.data()), *format, shape);
}

void StoredTensor::check_bytes(const std::string& what) const {
    const auto n = byte_count(dtype, shape);
    if (!n || static_cast<std::size_t>(*n) != bytes.size())
        throw std::invalid_argument(what + " holds " + std::to_string(bytes.size()) + " bytes, not what dtype " +
                                    dtype_name(dtype) + " × shape " + shape_string(shape) + " needs");
}

Tensor StoredTensor::to_tensor() const {
    view();  // same checks as a view
    Tensor t(*numerics_format(dtype), shape);
    if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
    return t;
}

}  // namespace conform::io
