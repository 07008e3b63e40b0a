// Correct rounding of a high-precision (MPFR) value into a target format, and
// the Ziv test: given a value and a bound on its own error, is the rounded
// result already determined?
#pragma once
#include <mpfr.h>

#include <cstdint>
#include <optional>

#include "numerics/format.hpp"

namespace conform {

// Round-to-nearest-even of x into f (subnormals, overflow to +-Inf; int8
// rounds ties to even and saturates to [-128, 127]; NaN -> canonical NaN).
std::uint64_t round_to_format(mpfr_srcptr x, Format f);

// The rounding of every value in [x - err, x + err] into f, if they all round
// to the same pattern; nullopt when the interval straddles a rounding
// boundary and more precision is needed.  err >= 0.
std::optional<std::uint64_t> round_if_determined(mpfr_srcptr x, mpfr_srcptr err, Format f);

}  // namespace conform

namespace conform {

// Fast correct rounding of a double-double value x = hi + lo + d, where the
// unknown d satisfies |d| <= tol_rel * |hi|: the rounding of x into a binary
// format when it is determined, nullopt when x may lie on either side of a
// rounding boundary (the caller then falls back to MPFR).  Used by the
// exhaustive sweeps, where billions of exact products are rounded.
std::optional<std::uint64_t> round_dd(Format f, double hi, double lo, double tol_rel);

}  // namespace conform
