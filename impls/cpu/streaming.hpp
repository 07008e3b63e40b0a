// Streaming (non-temporal) stores for outputs much larger than the caches: a
// plain store first reads the line it overwrites, so a memory-bound kernel
// would move 3 bytes per 2 that a copy moves.  Smaller outputs stay in cache
// for whoever reads them next.  Shared by the elementwise and norm kernels.
#pragma once
#include "impls/cpu/x86_intrinsics.hpp"

#include <cstdint>

#include "impls/cpu/convert.hpp"
#include "numerics/tensor.hpp"

namespace conform::cpu {

inline constexpr std::int64_t kStreamBytes = std::int64_t{16} << 20;
inline bool streaming_output(const TensorView& y) {
    return y.rows() * y.cols() * info(y.format).bytes >= kStreamBytes;
}

// 8 values to p with streaming stores; p must be 16-byte aligned.  128-bit
// stores (tensors are only guaranteed 8- or 16-byte aligned, so fp32 uses two
// of them rather than one 256-bit store; the write-combining buffer merges
// them into whole lines either way).  The caller ends with _mm_sfence().
template <Format F>
CONFORM_AVX2 inline void stream8_as(storage_t<F>* p, __m256 v) {
    if constexpr (F == Format::fp32) {
        _mm_stream_ps(p, _mm256_castps256_ps128(v));
        _mm_stream_ps(p + 4, _mm256_extractf128_ps(v, 1));
    } else {
        _mm_stream_si128(reinterpret_cast<__m128i*>(p), narrow8(v, F));
    }
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// 32 bytes by two 16-byte streaming stores (p 16-byte aligned: tensor rows
// are not sure to be 32-byte aligned).
CONFORM_AVX2 inline void stream32_as_halves(void* p, __m256i v) {
    _mm_stream_si128(static_cast<__m128i*>(p), _mm256_castsi256_si128(v));
    _mm_stream_si128(static_cast<__m128i*>(p) + 1, _mm256_extracti128_si256(v, 1));
}

// prefetcht0 of the line `ahead` elements past p.  That address may lie past
// the end of p's array (a prefetch never faults), so it is formed as an
// integer, not by pointer arithmetic.
template <class T>
inline void prefetch_ahead(const T* p, std::int64_t ahead) {
    const auto at = reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(ahead) * sizeof(T);
    __builtin_prefetch(reinterpret_cast<const void*>(at), 0, 3);
}

}  // namespace conform::cpu
