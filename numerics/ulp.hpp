// ULP distance within a format and the special-value classes that are
// compared before any arithmetic: a NaN in the reference never makes a case
// pass, and an Inf matches only the same Inf.
#pragma once
#include <cstdint>

#include "numerics/format.hpp"

namespace conform {

enum class ValueClass : std::uint8_t { finite, nan, pos_inf, neg_inf };

ValueClass classify(Format f, std::uint64_t bits);
const char* name(ValueClass c);

// Monotone integer image of a finite pattern: consecutive representable
// values map to consecutive integers, -0 and +0 both map to 0.  For int8 it is
// the integer itself.
std::int64_t ordinal(Format f, std::uint64_t bits);

// |ordinal(a) - ordinal(b)| for two finite patterns.
std::uint64_t ulp_distance(Format f, std::uint64_t a, std::uint64_t b);

// Comparison of a kernel's output against the reference rounding: the classes
// must match; for finite pairs, the ULP distance is reported.
struct UlpCompare {
    bool class_match;
    ValueClass ref_class, got_class;
    std::uint64_t ulps;  // meaningful when both are finite
};
UlpCompare compare_bits(Format f, std::uint64_t ref, std::uint64_t got);

}  // namespace conform
