// Scratch buffers a kernel keeps per thread between calls (thread_local
// vectors): a fresh allocation of megabytes per call is a fresh mmap whose
// page faults can cost as much as the work (8 MiB of packed INT8 weights).
#pragma once
#include <cstdint>
#include <vector>

namespace conform::cpu {

// v's data with at least `count` elements (grown, never shrunk; the contents
// are whatever the last call left: the caller writes before it reads).
template <class T, class A>
T* grown(std::vector<T, A>& v, std::int64_t count) {
    if (v.size() < static_cast<std::size_t>(count)) v.resize(static_cast<std::size_t>(count));
    return v.data();
}

}  // namespace conform::cpu
