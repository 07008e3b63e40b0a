#include "numerics/format.hpp"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

namespace conform {
namespace {

constexpr FormatInfo kInfo[] = {
    {"fp32", 4, 24, -126, 127},
    {"fp16", 2, 11, -14, 15},
    {"bf16", 2, 8, -126, 127},
    {"int8", 1, 0, 0, 0},
    {"fp64", 8, 53, -1022, 1023},
    {"fp8_e4m3", 1, 4, -6, 8},  // binade 8 holds 256 ... 448: S.1111.111 is NaN, not 480
    {"fp8_e5m2", 1, 3, -14, 15},
};

constexpr std::uint64_t kE4m3Nan = 0x7F;  // S.1111.111, the only NaN of E4M3 (either sign)

std::uint64_t quiet_nan_bits(Format f) {
    switch (f) {
        case Format::fp32: return 0x7FC00000u;
        case Format::fp16: return 0x7E00u;
        case Format::bf16: return 0x7FC0u;
        case Format::fp64: return 0x7FF8000000000000ull;
        case Format::fp8_e4m3: return kE4m3Nan;
        case Format::fp8_e5m2: return 0x7Eu;
        default: return 0;
    }
}

// Encode a binary floating format with p significand bits and exponent
// range [emin, emax]: scale |v| so that one unit is the quantum of its binade
// (or of the subnormal range), round to an integer with ties to even, then
// assemble the fields.  All steps are exact in double except the one rint.
// The same rounding straight on the bits when |v| lies in a normal binade of
// f below the largest: drop the extra significand bits with ties to even (a
// carry into the exponent field is still exact RNE, and at most reaches the
// largest binade).  Nearly every model value takes this path, about ten
// times faster than the scaled rint below; anything else returns nullopt.
std::optional<std::uint64_t> encode_normal(const FormatInfo& fi, double v) {
    const std::uint64_t b = std::bit_cast<std::uint64_t>(v);
    const int e = static_cast<int>((b >> 52) & 0x7ff) - 1023;  // binade of |v| (NaN/Inf/0/subnormal fall outside)
    if (e < fi.emin || e >= fi.emax) return std::nullopt;
    const int drop = 52 - (fi.precision - 1);  // significand bits that go
    const std::uint64_t mant = b & ((std::uint64_t{1} << 52) - 1);
    const std::uint64_t keep = mant >> drop;
    const std::uint64_t rem = mant & ((std::uint64_t{1} << drop) - 1), half = std::uint64_t{1} << (drop - 1);
    const std::uint64_t biased = static_cast<std::uint64_t>(e + 1 - fi.emin);
    std::uint64_t r = (biased << (fi.precision - 1)) | keep;
    if (rem > half || (rem == half && (keep & 1))) ++r;
    return ((b >> 63) << (fi.bytes * 8 - 1)) | r;
}

std::uint64_t encode_binary(Format f, double v) {
    const FormatInfo& fi = info(f);
    if (const auto fast = encode_normal(fi, v)) return *fast;
    const int p = fi.precision, bias = 1 - fi.emin, width = fi.bytes * 8;
    if (std::isnan(v)) return quiet_nan_bits(f);
    const std::uint64_t sign = std::signbit(v) ? (std::uint64_t{1} << (width - 1)) : 0;
    double a = std::fabs(v);
    if (a == 0) return sign;
    if (std::isinf(a)) return f == Format::fp8_e4m3 ? sign | kE4m3Nan : sign | (std::uint64_t(2 * bias + 1) << (p - 1));
    int k;
    std::frexp(a, &k);  // a = m 2^k, m in [1/2, 1)
    int q = std::max(k - 1, fi.emin) - (p - 1);
    double r = std::nearbyint(std::ldexp(a, -q));  // default rounding mode: ties to even
    return assemble_rounded(f, std::signbit(v), r, q);
}

double double_of(std::uint64_t bits) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
}

double decode_binary(Format f, std::uint64_t bits) {
    const FormatInfo& fi = info(f);
    const int p = fi.precision, bias = 1 - fi.emin, width = fi.bytes * 8;
    const bool neg = (bits >> (width - 1)) & 1;
    const std::uint64_t biased = (bits >> (p - 1)) & ((std::uint64_t{1} << (width - p)) - 1);
    const std::uint64_t mant = bits & ((std::uint64_t{1} << (p - 1)) - 1);
    double v;
    if (f == Format::fp8_e4m3 && (bits & 0x7F) == kE4m3Nan)
        v = std::numeric_limits<double>::quiet_NaN();
    else if (f != Format::fp8_e4m3 && biased == std::uint64_t(2 * bias + 1))
        v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    else if (biased == 0)  // mant 2^(emin - p + 1): exact, the unit a normal double
        v = static_cast<double>(mant) * double_of(static_cast<std::uint64_t>(fi.emin - (p - 1) + 1023) << 52);
    else  // the double with the same exponent and the fraction's bits at its top (every format's range fits)
        v = double_of((biased - bias + 1023) << 52 | mant << (53 - p));
    return neg ? -v : v;
}

}  // namespace

std::uint64_t assemble_rounded(Format f, bool neg, double r, int q) {
    const FormatInfo& fi = info(f);
    const int p = fi.precision, bias = 1 - fi.emin, width = fi.bytes * 8;
    const std::uint64_t sign = neg ? (std::uint64_t{1} << (width - 1)) : 0;
    const std::uint64_t inf = std::uint64_t(2 * bias + 1) << (p - 1);
    if (r >= static_cast<double>(std::uint64_t{1} << p)) {  // rounding carried into the next binade
        r /= 2;  // exact: r = 2^p
        q += 1;
    }
    std::uint64_t mant = static_cast<std::uint64_t>(r);
    std::uint64_t biased = 0;
    if (mant >= (std::uint64_t{1} << (p - 1))) {
        biased = static_cast<std::uint64_t>(q + p - 1 + bias);
        mant -= std::uint64_t{1} << (p - 1);
        // E4M3 keeps the top binade for numbers up to 1.110 (448); its last
        // pattern is the NaN, and anything above rounds into it.
        if (f == Format::fp8_e4m3) {
            if (biased > std::uint64_t(2 * bias + 1) || (biased == std::uint64_t(2 * bias + 1) && mant == 7))
                return sign | kE4m3Nan;
        } else if (biased > std::uint64_t(2 * bias)) {
            return sign | inf;
        }
    }
    return sign | (biased << (p - 1)) | mant;
}

const FormatInfo& info(Format f) { return kInfo[static_cast<int>(f)]; }
const char* name(Format f) { return info(f).name; }
bool is_float(Format f) { return f != Format::int8; }
bool is_fp8(Format f) { return f == Format::fp8_e4m3 || f == Format::fp8_e5m2; }

std::optional<Format> parse_format(std::string_view s) {
    for (int i = 0; i < kFormatCount; ++i)
        if (s == kInfo[i].name) return static_cast<Format>(i);
    return std::nullopt;
}

double decode(Format f, std::uint64_t bits) {
    switch (f) {
        case Format::int8: return static_cast<double>(static_cast<std::int8_t>(bits & 0xFF));
        case Format::fp64: {
            double d;
            std::memcpy(&d, &bits, 8);
            return d;
        }
        default: return decode_binary(f, bits);
    }
}

std::uint64_t encode(Format f, double v) {
    switch (f) {
        case Format::int8: {
            if (std::isnan(v)) return 0;
            double r = std::nearbyint(std::fmin(std::fmax(v, -128.0), 127.0));
            return static_cast<std::uint8_t>(static_cast<std::int8_t>(r));
        }
        case Format::fp64: {
            std::uint64_t b;
            std::memcpy(&b, &v, 8);
            return b;
        }
        default: return encode_binary(f, v);
    }
}

// Saturation changes only what the nonsaturating rounding sends past max:
// +-Inf, or E4M3's NaN from a number; a NaN input stays NaN.
std::uint64_t encode(Format f, double v, Overflow o) {
    const std::uint64_t r = encode(f, v);
    if (o == Overflow::nonsaturating || std::isnan(v) || f == Format::int8) return r;
    const double back = decode(f, r);
    if (std::isfinite(back)) return r;
    return encode(f, std::signbit(v) ? -max_finite(f) : max_finite(f));
}

double unit_roundoff(Format f) { return std::ldexp(1.0, -info(f).precision); }
double min_subnormal(Format f) { return std::ldexp(1.0, info(f).emin - info(f).precision + 1); }
bool is_subnormal(Format f, double v) {
    return is_float(f) && v != 0 && std::isfinite(v) && std::fabs(v) < std::ldexp(1.0, info(f).emin);
}
double next_down(Format f, double v) {
    if (v <= 0) return -next_up(f, -v);
    // The spacing below v: the binade of the value just under v (for a power
    // of two that is the binade below).
    return v - ulp_at(f, std::nextafter(v, 0.0));
}
double next_up(Format f, double v) {
    if (v < 0) return -next_down(f, -v);
    const double up = v + ulp_at(f, v);
    return up > max_finite(f) ? std::numeric_limits<double>::infinity() : up;
}

double ulp_at(Format f, double v) {
    const FormatInfo& fi = info(f);
    if (f == Format::int8) return 1.0;
    double a = std::fabs(v);
    if (std::isinf(a) || std::isnan(a)) return a;
    int e = fi.emin;
    if (a != 0) {
        int k;
        std::frexp(a, &k);
        e = std::max(k - 1, fi.emin);
    }
    return std::ldexp(1.0, e - fi.precision + 1);
}

double max_finite(Format f) {
    if (f == Format::int8) return 127.0;
    if (f == Format::fp8_e4m3) return 448.0;  // 1.110 x 2^8: 1.111 x 2^8 is the NaN
    const FormatInfo& fi = info(f);
    return std::ldexp(2.0 - std::ldexp(1.0, 1 - fi.precision), fi.emax);
}

double overflow_threshold(Format f) { return max_finite(f) + 0.5 * ulp_at(f, max_finite(f)); }

std::uint16_t fp16_from_float(float v) { return static_cast<std::uint16_t>(encode(Format::fp16, v)); }
std::uint16_t bf16_from_float(float v) { return static_cast<std::uint16_t>(encode(Format::bf16, v)); }

std::string hexfloat(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", v);
    return buf;
}

}  // namespace conform
