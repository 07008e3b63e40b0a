// A tensor as a case file stores it: element type, shape and the raw
// little-endian bytes in C order, owned.  This is the exchange form between the
// file readers/writers and the numerics TensorView the oracle and verdicts use.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/tensor.hpp"

namespace conform::io {

// The element types a case file may hold: the safetensors dtypes F64, F32,
// F16, BF16, I8, I32.  I32 has no numerics Format (it carries integer inputs
// such as positions), so it is readable through bits()/value() only.
enum class DType : std::uint8_t { f64, f32, f16, bf16, i8, i32, f8_e4m3, f8_e5m2 };

int dtype_size(DType d);
const char* safetensors_name(DType d);  // "F64", "F32", ..., as in a safetensors header
const char* dtype_name(DType d);        // "f64", "f32", ..., as in a case.json manifest
std::optional<DType> dtype_from_safetensors(std::string_view s);
std::optional<DType> dtype_from_name(std::string_view s);
std::optional<Format> numerics_format(DType d);  // nullopt for i32
DType dtype_of(Format f);

// Bytes held by a tensor of this dtype and shape, or nullopt when a dimension
// is negative or the size does not fit in int64.  Zero dimensions count as 1
// in the overflow check, so an accepted shape never overflows when strides
// are computed from it.
std::optional<std::int64_t> byte_count(DType d, std::span<const std::int64_t> shape);

// Files may hold tensors of any rank up to this (views need rank <= kMaxRank);
// the cap keeps hostile shapes from making headers that cannot be written back.
constexpr std::size_t kMaxStoredRank = 64;

struct StoredTensor {
    DType dtype = DType::f32;
    std::vector<std::int64_t> shape;  // empty: a 0-d (scalar) tensor
    std::vector<std::byte> bytes;     // byte_count(dtype, shape) bytes, little-endian, C order

    // All-zero tensor; std::invalid_argument on a negative or overflowing shape.
    static StoredTensor zeros(DType d, std::vector<std::int64_t> shape);
    static StoredTensor from_tensor(const Tensor& t);

    std::int64_t numel() const;
    std::uint64_t bits(std::int64_t flat) const;  // flat row-major index; std::out_of_range past the end
    void set_bits(std::int64_t flat, std::uint64_t b);
    double value(std::int64_t flat) const;        // exact (every stored value is a double)

    // Views over (or a copy of) the bytes in numerics form; std::invalid_argument
    // for i32 (no numerics format) and for rank above kMaxRank.  A view of a
    // const tensor must not be written through.
    TensorView view() const;
    Tensor to_tensor() const;

    // std::invalid_argument naming `what` unless the bytes are exactly what
    // dtype x shape needs.  Writers call it so that only readable files are made.
    void check_bytes(const std::string& what) const;

    bool operator==(const StoredTensor&) const = default;

private:
    std::size_t byte_offset(std::int64_t flat) const;
};

}  // namespace conform::io
