// Tensor-core matrix products for the attention and INT8 GEMM kernels: one warp computes
// D (16 x 8, FP32) = C + A (16 x 16) B (16 x 8) with A and B in FP16 or
// BF16 (mma.sync m16n8k16, sm_80 and newer).  Under the emulation the same
// call gathers the warp's fragments and evaluates the model of
// impls/cuda/emu/mma_model.hpp, so a wrong fragment index or tile edge
// fails on the CPU too.
//
// Fragment layout (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane =
// 4 group + t:
//   A: a[0] = (row group,     cols 2t, 2t+1)   a[1] = (row group + 8, cols 2t, 2t+1)
//      a[2] = (row group,     cols 2t+8, 2t+9) a[3] = (row group + 8, cols 2t+8, 2t+9)
//   B: b[0] = (rows 2t, 2t+1, col group)       b[1] = (rows 2t+8, 2t+9, col group)
//   C, D: c[0], c[1] = (row group, cols 2t, 2t+1); c[2], c[3] = (row group + 8, same cols)
// Each 32-bit register holds two 16-bit values, the lower index in the low half.
#pragma once
#include <cstdint>
#include <type_traits>

#include "impls/cuda/cuda_compat.cuh"

namespace conform::CONFORM_CUDA_NS {

// The 16-bit storage formats as raw bits.
template <class S>
__device__ __forceinline__ unsigned short bits_of(float x);
template <>
__device__ __forceinline__ unsigned short bits_of<__half>(float x) { return __half_as_ushort(__float2half_rn(x)); }
template <>
__device__ __forceinline__ unsigned short bits_of<__nv_bfloat16>(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

template <class S>
__device__ __forceinline__ float value_of(unsigned short b);
template <>
__device__ __forceinline__ float value_of<__half>(unsigned short b) { return __half2float(__ushort_as_half(b)); }
template <>
__device__ __forceinline__ float value_of<__nv_bfloat16>(unsigned short b) {
    return __bfloat162float(__ushort_as_bfloat16(b));
}

// Two values rounded to S, packed as one register (lo in the low half).
template <class S>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
    return static_cast<std::uint32_t>(bits_of<S>(lo)) | static_cast<std::uint32_t>(bits_of<S>(hi)) << 16;
}

// Two adjacent 16-bit values (even index first) as one register.
__device__ __forceinline__ std::uint32_t pair_at(const unsigned short* p) {
    return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 16;
}

// Four 8 x 8 matrices of 16-bit values from shared memory in mma's fragment
// layout (ldmatrix.sync.aligned.m8n8.x4, sm_75 and newer): lane l gives the
// address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned) and gets
// in r[i] matrix i's (row group, columns 2t, 2t + 1), with kTrans (rows 2t,
// 2t + 1, column group) -- one instruction for what four 16-bit loads and
// their packing give per register.  Every lane of the warp must take part.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t r[4], const unsigned short* row) {
#if defined(CONFORM_CUDA_EMU)
    ::conform::cuda_emu::ldmatrix_x4(r, row, kTrans);
#else
    const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
    if constexpr (kTrans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr)
                     : "memory");  // it reads what the block stored before its barrier
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr)
                     : "memory");
#endif
}

// d = c + a b for one warp; d may alias c.
template <class S>
__device__ __forceinline__ void mma16816(float d[4], const std::uint32_t a[4], const std::uint32_t b[2],
                                         const float c[4]) {
#if defined(CONFORM_CUDA_EMU)
    float out[4];
    ::conform::cuda_emu::mma_m16n8k16(out, a, b, c, std::is_same_v<S, __nv_bfloat16>);
    for (int i = 0; i < 4; ++i) d[i] = out[i];
#else
    if constexpr (std::is_same_v<S, __half>)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};\n"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
              "f"(c[3]));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};\n"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
              "f"(c[3]));
#endif
}

// d = c + a b for one warp on the integer tensor cores: A 16 x 32 and B
// 32 x 8 INT8 (four bytes to a register, the lowest byte the lowest index),
// C and D INT32 (mma.sync m16n8k32, sm_80 and newer).  Fragments (lane = 4
// group + t): a[0] = (row group, cols 4t..4t+3), a[1] = (row group + 8,
// same cols), a[2], a[3] = the same rows, cols 16 + 4t..; b[0] = (rows
// 4t..4t+3, col group), b[1] = (rows 16 + 4t.., col group); c, d as above.
// kUnsignedA reads A's bytes as u8 (a GPU mutant's bug).
template <bool kUnsignedA = false>
__device__ __forceinline__ void mma16832_s8(int d[4], const std::uint32_t a[4], const std::uint32_t b[2], const int c[4]) {
#if defined(CONFORM_CUDA_EMU)
    std::int32_t out[4];
    ::conform::cuda_emu::mma_m16n8k32_s8(out, a, b, c, kUnsignedA);
    for (int i = 0; i < 4; ++i) d[i] = out[i];
#else
    if constexpr (kUnsignedA)
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};\n"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]), "r"(c[2]),
              "r"(c[3]));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};\n"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]), "r"(c[2]),
              "r"(c[3]));
#endif
}

}  // namespace conform::CONFORM_CUDA_NS
