// The arithmetic of one tensor-core block FMA, d = c + sum_k a_k b_k
// (mma.sync m16n8k16 with FP16 or BF16 inputs and an FP32 accumulator), as
// the emulation models it and as the attention bound assumes it
// (docs/attention.md, "Tensor-core accumulation").
//
// NVIDIA documents no rounding for this sum, and the published
// measurements (Fasi, Higham, Mikaitis, Pranesh 2021 on V100/T4/A100;
// Khattak, Mikaitis 2025 up to H100 and B200) find no IEEE round to nearest
// at each step: the products are exact, they are aligned to the largest
// exponent among them and c, bits below a fixed position are dropped, the
// aligned terms are summed, and the sum is normalized and truncated.  The
// model takes the least precise form of that family: no guard bits, i.e.
// every term truncated toward zero to a multiple of 2^(E - 23), E the
// largest term's exponent, then the exact sum of those truncated terms
// truncated toward zero to FP32 (subnormals included).  Each block FMA is
// then off by less than (n + 1) 2^(E - 23) + ulp(d), at most
// (n + 2) 2^-23 sum |terms| for n products: a device with guard bits or
// rounding to nearest is more accurate and so stays inside the same bound.
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

// d = c + sum of n exact products (n <= 16; each product of two 16-bit
// values is exact in double), in the model above.
inline float block_fma_truncated(float c, const double* products, int n) {
    bool nan = std::isnan(c), pos_inf = c == INFINITY, neg_inf = c == -INFINITY;
    int e_max = std::numeric_limits<int>::min();
    auto note = [&](double t) {
        nan |= std::isnan(t), pos_inf |= t == INFINITY, neg_inf |= t == -INFINITY;
        if (t != 0 && std::isfinite(t)) e_max = std::max(e_max, std::ilogb(t));
    };
    note(c);
    for (int k = 0; k < n; ++k) note(products[k]);
    if (nan || (pos_inf && neg_inf)) return NAN;
    if (pos_inf || neg_inf) return pos_inf ? INFINITY : -INFINITY;
    if (e_max == std::numeric_limits<int>::min()) {  // every term a zero: IEEE's sign of a zero sum
        double z = c;
        for (int k = 0; k < n; ++k) z += products[k];
        return static_cast<float>(z);
    }
    const double grid = std::ldexp(1.0, e_max - 23);
    double sum = std::trunc(static_cast<double>(c) / grid) * grid;  // < 2^24 grid steps each: exact
    for (int k = 0; k < n; ++k) sum += std::trunc(products[k] / grid) * grid;
    return truncate_to_float(sum);
}

}  // namespace conform::cuda_emu
