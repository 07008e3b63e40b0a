#include "numerics/tensor.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace conform {

std::int64_t TensorView::numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
}

std::int64_t TensorView::offset(std::int64_t flat) const {
    // Dense row-major views (nearly every view) need no division per axis.
    std::int64_t dense = 1;
    int axis = rank - 1;
    for (; axis >= 0 && strides[axis] == dense; --axis) dense *= shape[axis];
    if (axis < 0) return flat;
    std::int64_t off = 0;
    for (int i = rank - 1; i >= 0; --i) {
        off += (flat % shape[i]) * strides[i];
        flat /= shape[i];
    }
    return off;
}

std::uint64_t TensorView::bits(std::int64_t flat) const {
    const std::int64_t o = offset(flat);
    switch (info(format).bytes) {
        case 1: return static_cast<const std::uint8_t*>(data)[o];
        case 2: return static_cast<const std::uint16_t*>(data)[o];
        case 4: return static_cast<const std::uint32_t*>(data)[o];
        default: return static_cast<const std::uint64_t*>(data)[o];
    }
}

void TensorView::set_bits(std::int64_t flat, std::uint64_t b) const {
    const std::int64_t o = offset(flat);
    switch (info(format).bytes) {
        case 1: static_cast<std::uint8_t*>(data)[o] = static_cast<std::uint8_t>(b); break;
        case 2: static_cast<std::uint16_t*>(data)[o] = static_cast<std::uint16_t>(b); break;
        case 4: static_cast<std::uint32_t*>(data)[o] = static_cast<std::uint32_t>(b); break;
        default: static_cast<std::uint64_t*>(data)[o] = b; break;
    }
}

Tensor::Tensor(Format f, std::vector<std::int64_t> shape) : format_(f), shape_(std::move(shape)) {
    if (shape_.size() > kMaxRank) throw std::invalid_argument("tensor rank above 4");
    for (auto d : shape_)
        if (d < 0) throw std::invalid_argument("negative tensor dimension");
    const std::int64_t n = numel();
    storage_.assign((n * info(f).bytes + 7) / 8 + 1, 0);
}

std::int64_t Tensor::numel() const {
    std::int64_t n = 1;
    for (auto d : shape_) n *= d;
    return n;
}

TensorView TensorView::contiguous(void* data, Format f, const std::vector<std::int64_t>& shape) {
    TensorView v;
    v.data = data;
    v.format = f;
    v.rank = static_cast<int>(shape.size());
    std::int64_t stride = 1;
    for (int i = v.rank - 1; i >= 0; --i) {
        v.shape[i] = shape[i];
        v.strides[i] = stride;
        stride *= shape[i];
    }
    return v;
}

TensorView TensorView::slice_first(std::int64_t begin, std::int64_t end) const {
    if (rank < 1 || begin < 0 || end < begin || end > shape[0])
        throw std::out_of_range("slice_first: [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") outside the first dimension");
    TensorView v = *this;
    v.data = static_cast<char*>(data) + begin * strides[0] * info(format).bytes;
    v.shape[0] = end - begin;
    return v;
}

TensorView TensorView::at_first(std::int64_t i) const {
    TensorView v = slice_first(i, i + 1);
    for (int d = 1; d < rank; ++d) v.shape[d - 1] = v.shape[d], v.strides[d - 1] = v.strides[d];
    v.rank = rank - 1;
    v.shape[v.rank] = v.strides[v.rank] = 0;
    return v;
}

Tensor Tensor::external(Format f, std::vector<std::int64_t> shape, std::shared_ptr<void> keep, void* data) {
    Tensor t;
    t.format_ = f;
    t.shape_ = std::move(shape);
    if (t.shape_.size() > kMaxRank) throw std::invalid_argument("tensor rank above 4");
    for (auto d : t.shape_)
        if (d < 0) throw std::invalid_argument("negative tensor dimension");
    if (reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(info(f).bytes) != 0)
        throw std::invalid_argument("external tensor data not aligned to its element size");
    t.keep_ = std::move(keep);
    t.external_ = data;
    return t;
}

Tensor::Tensor(const Tensor& o) : format_(o.format_), shape_(o.shape_), storage_(o.storage_) {
    if (!o.external_) return;
    storage_.assign((ix(numel()) * static_cast<std::size_t>(info(format_).bytes) + 7) / 8 + 1, 0);
    std::memcpy(storage_.data(), o.external_, o.bytes());
}

Tensor& Tensor::operator=(const Tensor& o) {
    if (this != &o) *this = Tensor(o);
    return *this;
}

void Tensor::release_pages() const {
    if (!external_) return;
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<std::uintptr_t>(external_);
    const std::uintptr_t first = (begin + page - 1) / page * page, last = (begin + bytes()) / page * page;
    // Whole pages inside the tensor only: a neighbour's bytes stay resident.
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

TensorView Tensor::view() const {
    return TensorView::contiguous(external_ ? external_ : const_cast<std::uint64_t*>(storage_.data()), format_, shape_);
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace conform
