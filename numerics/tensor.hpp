// Tensors as the oracle, kernels and plug-ins see them: a format, a shape and
// element strides over packed native storage (fp32 as float bits, fp16/bf16 as
// 16-bit patterns, int8 as bytes).  Values are read as exact doubles or as bit
// patterns, never through a rounding conversion.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <memory>
#include <vector>

#include "numerics/format.hpp"

namespace conform {

constexpr int kMaxRank = 4;

struct TensorView {
    void* data = nullptr;
    Format format = Format::fp32;
    int rank = 0;
    std::array<std::int64_t, kMaxRank> shape{};
    std::array<std::int64_t, kMaxRank> strides{};  // in elements

    std::int64_t numel() const;
    std::int64_t dim(int i) const { return shape[i]; }
    // Rows x last-dimension view used by the row-wise ops: every leading
    // dimension folds into rows; the last dimension must be contiguous.
    std::int64_t cols() const { return rank ? shape[rank - 1] : 1; }
    std::int64_t rows() const { return cols() ? numel() / cols() : 0; }
    std::int64_t row_stride() const { return rank >= 2 ? strides[rank - 2] : cols(); }

    std::uint64_t bits(std::int64_t flat) const;  // flat index in row-major order
    double value(std::int64_t flat) const { return decode(format, bits(flat)); }
    void set_bits(std::int64_t flat, std::uint64_t b) const;
    std::int64_t offset(std::int64_t flat) const;

    template <class T>
    T* row(std::int64_t r) const { return static_cast<T*>(data) + r * row_stride(); }

    // A dense row-major view of `shape` (rank <= kMaxRank) over data.
    static TensorView contiguous(void* data, Format f, const std::vector<std::int64_t>& shape);
    // Indices [begin, end) of the first dimension (same rank, same strides).
    TensorView slice_first(std::int64_t begin, std::int64_t end) const;
    // Index i of the first dimension, which is dropped (rank - 1).
    TensorView at_first(std::int64_t i) const;
};

// std::allocator with A-byte alignment (operator new with align_val_t).
template <class T, std::size_t A>
struct AlignedAllocator {
    using value_type = T;
    template <class U>
    struct rebind {
        using other = AlignedAllocator<U, A>;
    };
    AlignedAllocator() = default;
    template <class U>
    AlignedAllocator(const AlignedAllocator<U, A>&) {}
    T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{A})); }
    void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{A}); }
    friend bool operator==(const AlignedAllocator&, const AlignedAllocator&) { return true; }
};

class Tensor {
public:
    Tensor() = default;
    Tensor(Format f, std::vector<std::int64_t> shape);
    // A dense tensor over memory it does not own (a mapped file's bytes, at
    // least element-aligned), kept alive by `keep` as long as any copy of
    // the tensor lives.  Writes go to that memory: map it copy-on-write.
    static Tensor external(Format f, std::vector<std::int64_t> shape, std::shared_ptr<void> keep, void* data);
    // Value semantics: a copy of an external tensor owns its bytes (a write
    // to the copy never reaches the mapping); a move keeps the mapping.
    Tensor(const Tensor& o);
    Tensor& operator=(const Tensor& o);
    Tensor(Tensor&&) noexcept = default;
    Tensor& operator=(Tensor&&) noexcept = default;
    ~Tensor() = default;
    bool is_external() const { return external_ != nullptr; }
    // External memory of a file mapping: hand its whole pages back to the
    // OS (they are read again from the file on the next access), so a
    // streamed reader's resident set stays bounded.  No-op otherwise.
    void release_pages() const;
    TensorView view() const;
    Format format() const { return format_; }
    const std::vector<std::int64_t>& shape() const { return shape_; }
    std::int64_t numel() const;
    std::uint64_t bits(std::int64_t i) const { return view().bits(i); }
    double value(std::int64_t i) const { return view().value(i); }
    void set_bits(std::int64_t i, std::uint64_t b) { view().set_bits(i, b); }
    void set_value(std::int64_t i, double v) { set_bits(i, encode(format_, v)); }
    std::size_t bytes() const { return external_ ? static_cast<std::size_t>(numel() * info(format_).bytes) : storage_.size() * 8; }
    void* data() { return external_ ? external_ : storage_.data(); }
    const void* data() const { return external_ ? external_ : storage_.data(); }

private:
    Format format_ = Format::fp32;
    std::vector<std::int64_t> shape_;
    std::vector<std::uint64_t, AlignedAllocator<std::uint64_t, 64>> storage_;  // 64-byte aligned backing store
    std::shared_ptr<void> keep_;  // external memory: what keeps it alive
    void* external_ = nullptr;
};

std::string shape_string(const std::vector<std::int64_t>& shape);

// A tensor index as a vector subscript (indices here are int64, as in the shapes).
inline std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

// Every element of t, decoded to double, in flat order.
inline std::vector<double> decoded_values(const TensorView& t) {
    std::vector<double> v(ix(t.numel()));
    for (std::int64_t e = 0; e < t.numel(); ++e) v[ix(e)] = t.value(e);
    return v;
}

}  // namespace conform
