// The FP32 -> FP8 conversion on the bits, shared by the CPU kernels
// (impls/cpu/fp8.cpp) and the CUDA kernel (impls/cuda/fp8_quantize.cuh):
// host and device code, the same arithmetic (docs/fp8.md, "Kernels").
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "impls/host_device.hpp"


namespace conform::fp8 {

// An FP8 format as the integer conversion sees it.
struct Codec {
    int p, emin, bias;
    std::uint32_t max_code, overflow_code, nan_code;  // magnitudes; overflow: nonsaturating (Inf or E4M3's NaN)
};
inline constexpr Codec kE4m3{4, -6, 7, 0x7E, 0x7F, 0x7F}, kE5m2{3, -14, 15, 0x7B, 0x7C, 0x7E};

CONFORM_HOST_DEVICE std::uint32_t bits_of(float v) {
    std::uint32_t b;
    memcpy(&b, &v, 4);
    return b;
}

// |v| (finite, bits a) to an FP8 magnitude: drop the significand bits below
// the FP8 quantum of v's binade (or of the subnormal range), round, and add
// the biased exponent; a carry of the rounding moves into the exponent field.
CONFORM_HOST_DEVICE std::uint32_t magnitude(std::uint32_t a, int dir, const Codec& c, bool truncate) {
    const int e = static_cast<int>(a >> 23) - 127;
    const std::uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    const int below = c.emin - e > 0 ? c.emin - e : 0, want = 23 - (c.p - 1) + below;
    const int shift = want < 31 ? want : 31;
    std::uint32_t r = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    const bool up = rem > half || (rem == half && (dir > 0 || (dir == 0 && (r & 1))));
    if (!truncate && up) ++r;
    return r + (e >= c.emin ? static_cast<std::uint32_t>(e + c.bias - 1) << (c.p - 1) : 0u);
}

// RN_fp8 of a float v, ties to even; `dir` says on which side of |v| the
// true value lies when v is the FP32 rounding of it (+1 above, -1 below, 0
// exact), which decides an FP8 midpoint that v landed on.  Overflow and
// +-Inf: +-max when saturating, else Inf (E5M2) or NaN (E4M3).  `truncate`
// rounds toward zero instead (a mutant).
CONFORM_HOST_DEVICE std::uint8_t from_float(float v, int dir, const Codec& c, bool saturate, bool truncate = false) {
    const std::uint32_t b = bits_of(v), sign = (b >> 24) & 0x80u, a = b & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return static_cast<std::uint8_t>(c.nan_code | sign);
    std::uint32_t code = a == 0x7F800000u ? 0xFFFFu : magnitude(a, dir, c, truncate);
    if (code > c.max_code) code = saturate ? c.max_code : c.overflow_code;
    return static_cast<std::uint8_t>(code | sign);
}

// The side of |x / s| that |q| = |fl(x / s)| misses: the residual x - q s
// is exact (an FMA), and its sign relative to q's gives it.
CONFORM_HOST_DEVICE int residual_dir(float x, float s, float q) {
    const float r = fmaf(-q, s, x);
    if (r == 0 || (bits_of(r) & 0x7F800000u) == 0x7F800000u) return 0;
    return (r > 0) == (q > 0) ? 1 : -1;
}

// Below s = 2^-60 the residual of a quotient on an FP8 midpoint can
// underflow (it is below 2^-150 when x is near FP32's subnormals) and the
// FMA returns 0: x and s scaled by 2^64 (exactly) give the same quotient and
// a residual in the normal range.  |x| >= 2^60 over such an s overflows FP8
// anyway.
inline constexpr float kTinyScale = 0x1p-60f, kLift = 0x1p64f, kBigX = 0x1p60f;

CONFORM_HOST_DEVICE void lift(float& x, float& s) {
    if (s < kTinyScale && (bits_of(x) & 0x7FFFFFFFu) < bits_of(kBigX)) x *= kLift, s *= kLift;
}

// RN_fp8(x / s), correctly rounded: the FP32 quotient, its midpoint
// decided by the residual.
CONFORM_HOST_DEVICE std::uint8_t quantize(float x, float s, const Codec& c, bool saturate) {
    lift(x, s);
    const float q = x / s;
    return from_float(q, residual_dir(x, s, q), c, saturate);
}

}  // namespace conform::fp8
