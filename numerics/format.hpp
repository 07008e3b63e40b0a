// Number formats handled by conform and exact conversions between their bit
// patterns and double.  Every finite FP32/FP16/BF16/INT8/FP8 value is exactly
// a double, so decode() never rounds; encoding a double into a narrower format
// is one correctly rounded step (round-to-nearest-even) done on the bits, never
// through float (double -> float -> half rounds twice).
#pragma once
#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace conform {

// fp8_e4m3 is OCP FP8 E4M3 ("E4M3FN": bias 7, max 448, no infinity, NaN only
// S.1111.111); fp8_e5m2 is OCP FP8 E5M2 (bias 15, max 57344, IEEE-like with
// +-Inf and NaNs).  docs/numerics.md, "FP8".
enum class Format : std::uint8_t { fp32, fp16, bf16, int8, fp64, fp8_e4m3, fp8_e5m2 };
inline constexpr int kFormatCount = 7;

struct FormatInfo {
    const char* name;
    int bytes;
    int precision;  // significand bits including the implicit bit (0 for int8)
    int emin;       // exponent of the smallest normal: 2^emin
    int emax;       // exponent of the largest finite binade
};

const FormatInfo& info(Format f);
const char* name(Format f);
std::optional<Format> parse_format(std::string_view s);
bool is_float(Format f);

// Exact value of a bit pattern (low `bytes*8` bits of `bits`).
double decode(Format f, std::uint64_t bits);

// Correctly rounded (RNE, subnormals, overflow to +-Inf; int8 saturates)
// encoding of a double.  NaN maps to the format's canonical quiet NaN.
// fp8_e4m3 has no infinity: what overflows (and +-Inf) becomes NaN.
std::uint64_t encode(Format f, double v);

// What a narrowing conversion does past the largest finite value.
// nonsaturating: the rounding of the unbounded-exponent format overflows to
// +-Inf (NaN for fp8_e4m3): IEEE, ml_dtypes, CUDA's __NV_NOSAT.  saturate:
// anything above max (and +-Inf) becomes +-max; NaN stays NaN: CUDA's
// __NV_SATFINITE, PTX cvt .satfinite.
enum class Overflow { nonsaturating, saturate };
std::uint64_t encode(Format f, double v, Overflow o);
bool is_fp8(Format f);

// Assemble the bit pattern of (-1)^neg * r * 2^q where r is an integer that
// was already rounded to at most p significand bits (r <= 2^p) and q is the
// quantum exponent max(e, emin) - (p - 1).  Overflow gives +-Inf (fp8_e4m3:
// NaN).  Shared by
// encode() and the MPFR rounding in round.hpp so both assemble fields alike.
std::uint64_t assemble_rounded(Format f, bool neg, double r, int q);

// Unit roundoff u = 2^-p of a floating format.
double unit_roundoff(Format f);
// Smallest positive subnormal 2^(emin - p + 1) of a floating format: the
// spacing below the normal range, so an underflowing rounding errs by at
// most half of it.
double min_subnormal(Format f);
// Whether v (a value of floating format f) is nonzero, finite and below f's normal range.
bool is_subnormal(Format f, double v);
// The neighbours of a value v of f (finite): the next value above and below
// (+-inf past the largest finite value).
double next_up(Format f, double v);
double next_down(Format f, double v);
// Spacing of the format at |v|: 2^(max(e, emin) - p + 1) for v in binade e.
double ulp_at(Format f, double v);
double max_finite(Format f);
// Where round to nearest overflows a floating format: max_finite + half an
// ulp there (a value at or past it rounds to +-inf).
double overflow_threshold(Format f);

// float <-> 16-bit helpers used by kernels (scalar paths).  The widenings
// and bit casts are inline: every scalar FP16/BF16 load and the emulated
// tensor cores go through them, per element.
std::uint16_t fp16_from_float(float v);
std::uint16_t bf16_from_float(float v);
inline std::uint32_t float_bits(float v) { return std::bit_cast<std::uint32_t>(v); }
inline float float_from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }
// Exact, by the bits (every FP16 value is an FP32 value).  A NaN becomes the
// quiet NaN of its sign, as decode gives.
inline float fp16_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return float_from_bits(sign | (mant ? 0x7fc00000u : 0x7f800000u));
    if (exp == 0) {  // zero or subnormal: mant 2^-24, exact in FP32
        const float v = static_cast<float>(mant) * 0x1p-24f;
        return sign ? -v : v;
    }
    return float_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}
inline float bf16_to_float(std::uint16_t h) { return float_from_bits(std::uint32_t{h} << 16); }

// "0x1.8p+3" style hex-float text of the decoded value, for reproductions.
std::string hexfloat(double v);

}  // namespace conform
