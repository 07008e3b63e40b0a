// The OCP FP8 formats (docs/numerics.md, "FP8"): every one of the 256 codes
// of each round-trips; encode() rounds as MPFR does at the format's own
// precision and exponent range (an independent route: mpfr_set_emin/emax +
// mpfr_subnormalize, then E4M3's own overflow rule) at every midpoint, just
// beside it, at the overflow threshold and in the subnormals; saturation.
#include <gtest/gtest.h>
#include <mpfr.h>

#include <cmath>
#include <random>

#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "mpfr_rounding.hpp"

namespace fp8_format_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

const Format kFp8[] = {Format::fp8_e4m3, Format::fp8_e5m2};

// RN of v at the format's precision and exponent range by MPFR; past the
// largest finite value: +-Inf (E5M2, or anything nonsaturating beyond
// E4M3's 448 is NaN), or +-max when saturating.
double mpfr_reference(Format f, double v, Overflow o) {
    if (std::isnan(v)) return NAN;
    mpfr_t x;
    mpfr_init2(x, 53);
    mpfr_set_d(x, v, MPFR_RNDN);
    const double d = conform::testing::mpfr_round_emulated(x, f);
    mpfr_clear(x);
    if (std::fabs(d) <= max_finite(f)) return d;
    if (o == Overflow::saturate) return std::copysign(max_finite(f), v);
    return f == Format::fp8_e4m3 ? NAN : std::copysign(INFINITY, v);
}

void expect_rounds_like_mpfr(Format f, double v) {
    for (Overflow o : {Overflow::nonsaturating, Overflow::saturate}) {
        const double want = mpfr_reference(f, v, o), got = decode(f, encode(f, v, o));
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << name(f) << " " << hexfloat(v) << ": got " << got << ", want NaN";
        } else {
            EXPECT_EQ(got, want) << name(f) << " " << hexfloat(v) << (o == Overflow::saturate ? " saturating" : "");
            EXPECT_EQ(std::signbit(got), std::signbit(want)) << name(f) << " " << hexfloat(v);
        }
    }
}

}  // namespace

TEST(Fp8Format, FieldsAndLimits) {
    EXPECT_EQ(max_finite(Format::fp8_e4m3), 448.0);
    EXPECT_EQ(max_finite(Format::fp8_e5m2), 57344.0);
    EXPECT_EQ(decode(Format::fp8_e4m3, 0x01), std::ldexp(1.0, -9));  // smallest subnormal
    EXPECT_EQ(decode(Format::fp8_e5m2, 0x01), std::ldexp(1.0, -16));
    EXPECT_EQ(unit_roundoff(Format::fp8_e4m3), 1.0 / 16);
    EXPECT_EQ(unit_roundoff(Format::fp8_e5m2), 1.0 / 8);
    EXPECT_EQ(ulp_at(Format::fp8_e4m3, 448), 32.0);
    EXPECT_EQ(ulp_at(Format::fp8_e4m3, 1e-3), std::ldexp(1.0, -9));
    EXPECT_EQ(parse_format("fp8_e4m3"), Format::fp8_e4m3);
    EXPECT_EQ(parse_format("fp8_e5m2"), Format::fp8_e5m2);
    EXPECT_TRUE(std::isinf(decode(Format::fp8_e5m2, 0x7C)));
    EXPECT_TRUE(std::isnan(decode(Format::fp8_e5m2, 0x7D)));
}

// E4M3 has no infinity and one NaN pattern per sign (S.1111.111): 254 of
// its codes are numbers; E5M2 has 6 NaN codes and two infinities.
TEST(Fp8Format, EveryCodeRoundTrips) {
    for (Format f : kFp8) {
        int nans = 0, infs = 0;
        for (std::uint64_t b = 0; b < 256; ++b) {
            const double v = decode(f, b);
            if (std::isnan(v)) {
                ++nans;
                EXPECT_TRUE(std::isnan(decode(f, encode(f, v)))) << name(f) << " code " << b;
                continue;
            }
            infs += std::isinf(v);
            EXPECT_EQ(encode(f, v), b) << name(f) << " code " << b << " = " << hexfloat(v);
            EXPECT_EQ(encode(f, v, Overflow::saturate), std::isinf(v) ? encode(f, std::copysign(max_finite(f), v)) : b);
        }
        EXPECT_EQ(nans, f == Format::fp8_e4m3 ? 2 : 6) << name(f);
        EXPECT_EQ(infs, f == Format::fp8_e4m3 ? 0 : 2) << name(f);
    }
}

// Every midpoint of two neighbouring finite codes (and the one past max),
// the midpoint +- 2^-40 relative, and every code +- a quarter ulp.
TEST(Fp8Format, MidpointsRoundAsMpfrDoes) {
    for (Format f : kFp8)
        for (std::uint64_t b = 0; b < 0x80; ++b) {
            const double lo = decode(f, b);
            if (!std::isfinite(lo)) continue;
            const double hi = b == encode(f, max_finite(f)) ? lo + ulp_at(f, lo) : decode(f, b + 1);
            const double mid = 0.5 * (lo + hi);
            for (double s : {1.0, -1.0})
                for (double v : {mid, mid * (1 + 0x1p-40), mid * (1 - 0x1p-40), lo + 0.25 * ulp_at(f, lo), lo - 0.25 * ulp_at(f, lo)})
                    expect_rounds_like_mpfr(f, s * v);
        }
}

// The overflow threshold is max + half an ulp, where round-to-nearest-even
// would step past max: E4M3's 464 is a tie between 448 (1.110, even) and
// 480 (1.111, odd, the NaN pattern), so 464 stays 448 and only what lies
// above it becomes NaN; E5M2's 61440 is a tie between 57344 (1.11, odd)
// and 2^16 (even): it overflows to Inf.  (ml_dtypes rounds the same way.)
TEST(Fp8Format, OverflowThresholdIsMaxPlusHalfAnUlp) {
    EXPECT_EQ(decode(Format::fp8_e4m3, encode(Format::fp8_e4m3, 464.0)), 448.0);
    EXPECT_TRUE(std::isnan(decode(Format::fp8_e4m3, encode(Format::fp8_e4m3, std::nextafter(464.0, 500.0)))));
    EXPECT_EQ(encode(Format::fp8_e4m3, -1e30), 0xFFu);  // -NaN: E4M3's only negative non-number
    EXPECT_TRUE(std::isinf(decode(Format::fp8_e5m2, encode(Format::fp8_e5m2, 61440.0))));
    EXPECT_EQ(decode(Format::fp8_e5m2, encode(Format::fp8_e5m2, std::nextafter(61440.0, 0.0))), 57344.0);
    for (Format f : kFp8)
        for (double v : {1e6, 1e300, double(INFINITY)}) {
            EXPECT_EQ(decode(f, encode(f, v, Overflow::saturate)), max_finite(f)) << name(f) << " " << v;
            EXPECT_EQ(decode(f, encode(f, -v, Overflow::saturate)), -max_finite(f)) << name(f) << " " << -v;
            expect_rounds_like_mpfr(f, v);
        }
    EXPECT_TRUE(std::isnan(decode(Format::fp8_e4m3, encode(Format::fp8_e4m3, NAN, Overflow::saturate))));
    EXPECT_TRUE(std::isnan(decode(Format::fp8_e4m3, encode(Format::fp8_e4m3, INFINITY))));  // no infinity
}

// Random doubles over the whole range of each format, subnormals included,
// and the MPFR route of round_to_format on the same values.
TEST(Fp8Format, RandomValuesAndMpfrRoundingAgree) {
    std::mt19937_64 rng(8);
    std::uniform_real_distribution<double> U(-1, 1);
    mpfr_t x;
    mpfr_init2(x, 53);
    for (Format f : kFp8)
        for (int i = 0; i < 20000; ++i) {
            const double v = U(rng) * std::ldexp(1.0, static_cast<int>(rng() % 40) - 22);
            expect_rounds_like_mpfr(f, v);
            mpfr_set_d(x, v, MPFR_RNDN);
            const std::uint64_t want = encode(f, v), got = round_to_format(x, f);
            EXPECT_TRUE(got == want || (std::isnan(decode(f, got)) && std::isnan(decode(f, want)))) << name(f) << " " << hexfloat(v);
        }
    mpfr_clear(x);
}

}  // namespace fp8_format_test
