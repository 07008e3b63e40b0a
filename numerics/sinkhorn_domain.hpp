// Where an FP32 exp-domain Sinkhorn kernel stops carrying information
// (docs/sinkhorn.md, "The wide domain"): a matrix with a finite logit more
// than kSinkhornWideSpread below its row's maximum.  The kernels switch to
// the log domain there and the error bound follows them, so both must decide
// alike: the test is done in double on the stored input values, by this one
// function.
#pragma once
#include <cmath>
#include <cstdint>

// Also device code: the CUDA kernels (impls/cuda/sinkhorn.cuh) decide with
// the same predicates.
#if defined(__CUDACC__)
#define CONFORM_SINKHORN_HD __host__ __device__
#else
#define CONFORM_SINKHORN_HD
#endif

namespace conform {

// e^-64 ~ 2^-92: every shifted start entry of a narrower matrix is a normal
// float with 2^34 to spare for the scalings of the iterations.
inline constexpr double kSinkhornWideSpread = 64;

// The oracle's exponent range is MPFR's widest (2^(1 - 2^62)): e^(L - m) is 0
// there once L - m < -2^62 ln 2, and such an entry is a structural zero of
// the exact iteration (docs/sinkhorn.md, "Conventions").  The log-domain
// kernel, whose potentials could otherwise scale a line of such entries back
// up, treats them the same way (compared in double: L and m are the stored
// inputs).
inline constexpr double kSinkhornZeroSpread = 0x1p62 * 0.6931471805599453;
CONFORM_SINKHORN_HD inline bool sinkhorn_below_range(double l, double row_max) {
    return l - row_max < -kSinkhornZeroSpread;
}

// The entry (i, j) makes its matrix wide: a finite logit more than the
// spread below its row's finite maximum (comparisons only: NaN is never
// wide, and NaN or +inf matrices are excluded before).
CONFORM_SINKHORN_HD inline bool sinkhorn_wide_entry(double l, double row_max) {
    return l > -HUGE_VAL && l < HUGE_VAL && row_max > -HUGE_VAL && row_max < HUGE_VAL &&
           l - row_max < -kSinkhornWideSpread;
}

// `at(i, j)` the logit (i, j) of an n x n matrix as a double.  Matrices with a
// NaN or +inf logit are not wide (they are NaN on every path).
template <class At> bool sinkhorn_wide(std::int64_t n, const At& at) {
    bool wide = false;
    for (std::int64_t i = 0; i < n; ++i) {
        double m = -INFINITY;
        for (std::int64_t j = 0; j < n; ++j) {
            const double v = at(i, j);
            if (std::isnan(v) || v == INFINITY) return false;
            m = std::fmax(m, v);
        }
        for (std::int64_t j = 0; j < n; ++j)
            if (sinkhorn_wide_entry(at(i, j), m)) wide = true;
    }
    return wide;
}

}  // namespace conform
