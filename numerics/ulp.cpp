#include "numerics/ulp.hpp"

#include <cmath>

namespace conform {

ValueClass classify(Format f, std::uint64_t bits) {
    if (f == Format::int8) return ValueClass::finite;
    double v = decode(f, bits);
    if (std::isnan(v)) return ValueClass::nan;
    if (std::isinf(v)) return v > 0 ? ValueClass::pos_inf : ValueClass::neg_inf;
    return ValueClass::finite;
}

const char* name(ValueClass c) {
    switch (c) {
        case ValueClass::finite: return "finite";
        case ValueClass::nan: return "NaN";
        case ValueClass::pos_inf: return "+Inf";
        default: return "-Inf";
    }
}

std::int64_t ordinal(Format f, std::uint64_t bits) {
    if (f == Format::int8) return static_cast<std::int8_t>(bits & 0xFF);
    const int width = info(f).bytes * 8;
    const std::uint64_t mask = width == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << width) - 1);
    bits &= mask;
    const std::uint64_t sign = std::uint64_t{1} << (width - 1);
    // Sign-magnitude to two's complement: magnitudes are monotone in the
    // pattern for IEEE formats, so negate them for negative numbers.
    const std::int64_t mag = static_cast<std::int64_t>(bits & (sign - 1));
    return (bits & sign) ? -mag : mag;
}

std::uint64_t ulp_distance(Format f, std::uint64_t a, std::uint64_t b) {
    const std::int64_t x = ordinal(f, a), y = ordinal(f, b);
    // |x|, |y| < 2^63, so the distance fits in 64 unsigned bits but not in a
    // signed difference (fp64 across zero overflowed: UBSan found it); the
    // unsigned subtraction is exact.
    const auto ux = static_cast<std::uint64_t>(x), uy = static_cast<std::uint64_t>(y);
    return x > y ? ux - uy : uy - ux;
}

UlpCompare compare_bits(Format f, std::uint64_t ref, std::uint64_t got) {
    UlpCompare c{};
    c.ref_class = classify(f, ref);
    c.got_class = classify(f, got);
    c.class_match = c.ref_class == c.got_class;
    c.ulps = (c.class_match && c.ref_class == ValueClass::finite) ? ulp_distance(f, ref, got) : 0;
    return c;
}

}  // namespace conform
