// The arithmetic of one tensor-core block FMA, d = c + sum_k a_k b_k
// (mma.sync m16n8k16 with FP16 or BF16 inputs and an FP32 accumulator), as
// measured on an H200 and as the emulation computes it (docs/attention.md,
// "Tensor-core accumulation").
//
// NVIDIA documents no rounding for this sum.  conform cuda-bench's probe
// (262144 random block FMAs per format, normal and subnormal inputs, heavy
// cancellation; H200, driver 580.159.04, 2026-12-04) matches this model bit
// for bit in both formats: the products are exact; the block's exponent E
// is the largest of c's and of the products' exponents as the hardware
// estimates them, from the inputs' exponent fields -- a subnormal input
// counting as its format's smallest normal exponent (-14 for FP16, -126 for
// BF16), so a product with a subnormal factor can raise E above every
// term's true exponent; every term is truncated toward zero to a multiple
// of 2^(E - 25); the exact sum of those is truncated toward zero to FP32
// (subnormals included).  Zero products take no part in E.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace conform::cuda_emu {

// x truncated toward zero to an FP32 value (the subnormal range included;
// beyond FLT_MAX: infinity of the same sign).
inline float truncate_to_float(double x) {
    if (x == 0 || !std::isfinite(x)) return static_cast<float>(x);
    const double ax = std::fabs(x);
    if (ax >= 0x1p128) return static_cast<float>(std::copysign(INFINITY, x));
    const int e = std::max(std::ilogb(ax), -126);  // FP32's quantum is 2^(e - 23), at least 2^-149
    const double q = std::ldexp(1.0, e - 23);
    return static_cast<float>(std::copysign(std::floor(ax / q) * q, x));
}

// An input's exponent as the block FMA estimates it: a subnormal (or zero)
// input counts as `emin`, the smallest normal exponent of its format.
inline int field_exponent(double x, int emin) { return x == 0 ? emin : std::max(std::ilogb(x), emin); }

// d = c + sum_k a_k b_k for n <= 16 pairs of FP16 (emin = -14) or BF16
// (emin = -126) values, in the measured model above.
inline float block_fma(float c, const double* a, const double* b, int n, int emin) {
    bool nan = std::isnan(c), pos_inf = c == INFINITY, neg_inf = c == -INFINITY;
    int e = std::numeric_limits<int>::min();
    double products[16];
    if (c != 0 && std::isfinite(c)) e = std::max(std::ilogb(c), -126);
    for (int k = 0; k < n; ++k) {
        const double t = products[k] = a[k] * b[k];  // exact: 11 x 11 or 8 x 8 bits
        nan |= std::isnan(t), pos_inf |= t == INFINITY, neg_inf |= t == -INFINITY;
        if (t != 0 && std::isfinite(t)) e = std::max(e, field_exponent(a[k], emin) + field_exponent(b[k], emin));
    }
    if (nan || (pos_inf && neg_inf)) return NAN;
    if (pos_inf || neg_inf) return pos_inf ? INFINITY : -INFINITY;
    if (e == std::numeric_limits<int>::min()) {  // every term a zero: IEEE's sign of a zero sum
        double z = c;
        for (int k = 0; k < n; ++k) z += products[k];
        return static_cast<float>(z);
    }
    const double grid = std::ldexp(1.0, e - 25);
    double sum = std::trunc(static_cast<double>(c) / grid) * grid;  // < 2^27 grid steps each: exact
    for (int k = 0; k < n; ++k) sum += std::trunc(products[k] / grid) * grid;
    return truncate_to_float(sum);
}

// The model's error bound for one block FMA of n products whose terms'
// magnitudes sum to `mags` (docs/attention.md, "Tensor-core accumulation"):
// n + 1 truncations below 2^(E - 25) and the final one below ulp(d), with
// 2^E <= sum |terms| + 2^emin M (M the largest |a_k|, |b_k|, at least 2^emin:
// what a subnormal factor's exponent field can raise E to) and 2^E <= 2^-126
// for a subnormal c; the relative part taken as (n + 2) 2^-23, as before
// this was measured (it exceeds the model's (n + 1) 2^-25 + 2^-23).
inline double block_fma_bound(double mags, double m, int n, int emin) {
    const double big_m = std::max(m, std::ldexp(1.0, emin));
    return (n + 2) * 0x1p-23 * mags + (n + 1) * (std::ldexp(big_m, emin - 25) + 0x1p-151) + 0x1p-149;
}

}  // namespace conform::cuda_emu
