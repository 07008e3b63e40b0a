// Formats, correct rounding and ULP distance, checked against MPFR at the
// format's own precision (mpfr_set_emin/emax + mpfr_subnormalize: an
// independent route to the same rounding) over every 16-bit pattern and
// every rounding midpoint +-1 ulp of a wider format.
#include <gtest/gtest.h>
#include <mpfr.h>

#include <bit>
#include <cmath>
#include <random>
#include <cstring>

#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "numerics/tensor.hpp"
#include "numerics/ulp.hpp"
#include "mpfr_rounding.hpp"

namespace numerics_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

// Reference rounding by MPFR itself, emulating the target format.
std::uint64_t mpfr_reference(mpfr_srcptr x, Format f) {
    return encode(f, conform::testing::mpfr_round_emulated(x, f));  // representable: encode is exact here
}

struct M {
    mpfr_t v;
    M(double d, mpfr_prec_t p = 200) { mpfr_init2(v, p); mpfr_set_d(v, d, MPFR_RNDN); }
    ~M() { mpfr_clear(v); }
};

void sweep_midpoints(Format f) {
    // For every positive and negative finite pattern b, the midpoint between b
    // and its successor, and that midpoint +- 2^-80 relative.
    const int width = info(f).bytes * 8;
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << width); ++b) {
        double v = decode(f, b);
        if (!std::isfinite(v)) continue;
        std::uint64_t next = b + 1;
        double w = decode(f, next);
        if (std::isnan(w)) continue;
        // |w| > |v| in the same sign; the midpoint is exact in 200 bits.
        M mid(v);
        M wv(w);
        mpfr_add(mid.v, mid.v, wv.v, MPFR_RNDN);
        mpfr_div_2ui(mid.v, mid.v, 1, MPFR_RNDN);
        for (int side = -1; side <= 1; ++side) {
            M x(0.0);
            mpfr_set(x.v, mid.v, MPFR_RNDN);
            if (side) {
                M d(std::ldexp(std::fabs(v) + std::fabs(w), -80));
                if (mpfr_zero_p(d.v)) mpfr_set_d(d.v, std::ldexp(1.0, -1100), MPFR_RNDN);
                if (side < 0) mpfr_sub(x.v, x.v, d.v, MPFR_RNDN); else mpfr_add(x.v, x.v, d.v, MPFR_RNDN);
            }
            ASSERT_EQ(round_to_format(x.v, f), mpfr_reference(x.v, f))
                << name(f) << " pattern " << std::hex << b << " side " << side;
        }
    }
}

}  // namespace

TEST(Format, DecodeEncodeRoundTripsEvery16BitPattern) {
    for (Format f : {Format::fp16, Format::bf16}) {
        for (std::uint32_t b = 0; b < 65536; ++b) {
            double v = decode(f, b);
            if (std::isnan(v)) {
                EXPECT_TRUE(std::isnan(decode(f, encode(f, v))));
                continue;
            }
            ASSERT_EQ(encode(f, v), b) << name(f) << " " << std::hex << b;
            M x(v);
            ASSERT_EQ(round_to_format(x.v, f), b);
        }
    }
}

TEST(Format, MpfrRoundingMatchesMpfrReferenceAtEveryFp16Midpoint) { sweep_midpoints(Format::fp16); }
TEST(Format, MpfrRoundingMatchesMpfrReferenceAtEveryBf16Midpoint) { sweep_midpoints(Format::bf16); }

TEST(Format, DoubleEncodeMatchesMpfrAtEvery16BitMidpoint) {
    // encode(double) on the midpoints and their double neighbours.
    for (Format f : {Format::fp16, Format::bf16}) {
        for (std::uint32_t b = 0; b < 0x7C00u + (f == Format::bf16 ? 0x400u : 0); ++b) {
            double v = decode(f, b), w = decode(f, b + 1);
            if (!std::isfinite(v) || std::isnan(w)) continue;
            double mid = (v + w) / 2;  // exact in double
            for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), -mid}) {
                M m(x);
                ASSERT_EQ(encode(f, x), mpfr_reference(m.v, f)) << name(f) << " " << hexfloat(x);
            }
        }
    }
}

// encode()'s bit-level path for normal results against MPFR: random doubles
// across each format's range and beyond, a quarter of them exact ties or
// values of the format.
TEST(Format, DoubleEncodeMatchesMpfrOnRandomDoubles) {
    std::mt19937_64 rng(5);
    for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
        const FormatInfo& fi = info(f);
        for (int k = 0; k < 200000; ++k) {
            const int e = fi.emin - 30 + static_cast<int>(rng() % static_cast<std::uint64_t>(fi.emax - fi.emin + 34));
            std::uint64_t mant = rng() & ((std::uint64_t{1} << 52) - 1);
            if (k % 4 == 0) {  // an exact tie (or a value of f) between two neighbours
                const int drop = 52 - (fi.precision - 1);
                mant = (mant >> drop << drop) | (k % 8 == 0 ? std::uint64_t{1} << (drop - 1) : 0);
            }
            const double v = std::bit_cast<double>((rng() & 1) << 63 | static_cast<std::uint64_t>(e + 1023) << 52 | mant);
            M m(v);
            ASSERT_EQ(encode(f, v), mpfr_reference(m.v, f)) << name(f) << " " << hexfloat(v);
        }
    }
}

// The sanitized copy of this suite (tests/CMakeLists.txt) is there for memory
// errors and undefined behaviour, which a tenth of the sample exercises alike.
#ifdef CONFORM_SANITIZED_IO
constexpr std::uint64_t kFp32Stride = 9973;
#else
constexpr std::uint64_t kFp32Stride = 997;
#endif

TEST(Format, Fp32MidpointsAgainstMpfr) {
    // fp32 has 2^32 patterns: check a strided sample plus all binade edges.
    for (std::uint64_t b = 0; b < 0x7F800000u; b += kFp32Stride) {
        for (std::uint64_t c : {b, std::uint64_t(b | 0x7FFFFFu), std::uint64_t(b & ~0x7FFFFFull)}) {
            double v = decode(Format::fp32, c), w = decode(Format::fp32, c + 1);
            if (std::isnan(w)) continue;
            M mid(v), wv(w);
            mpfr_add(mid.v, mid.v, wv.v, MPFR_RNDN);
            mpfr_div_2ui(mid.v, mid.v, 1, MPFR_RNDN);
            ASSERT_EQ(round_to_format(mid.v, Format::fp32), mpfr_reference(mid.v, Format::fp32));
            double d = (v + w) / 2;
            ASSERT_EQ(encode(Format::fp32, d), float_bits(static_cast<float>(d)));
        }
    }
}

TEST(Format, DoubleRoundingTrapFromDesign) {
    // 1 + 2^-11 + 2^-40 must round up to 1 + 2^-10 in fp16; rounding through
    // float first lands on the tie 1 + 2^-11 and then goes to even (1.0).
    double x = 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
    EXPECT_EQ(decode(Format::fp16, encode(Format::fp16, x)), 1 + std::ldexp(1.0, -10));
    M m(x);
    EXPECT_EQ(decode(Format::fp16, round_to_format(m.v, Format::fp16)), 1 + std::ldexp(1.0, -10));
}

TEST(Format, OverflowAndSubnormals) {
    EXPECT_EQ(encode(Format::fp16, 65504.0), 0x7BFFu);
    EXPECT_EQ(encode(Format::fp16, 65519.99), 0x7BFFu);
    EXPECT_EQ(encode(Format::fp16, 65520.0), 0x7C00u);  // the tie rounds to even = Inf
    EXPECT_EQ(encode(Format::fp16, -std::ldexp(1.0, -24)), 0x8001u);
    EXPECT_EQ(encode(Format::fp16, std::ldexp(1.0, -25)), 0x0000u);  // tie to even: 0
    EXPECT_EQ(encode(Format::fp16, std::ldexp(1.5, -25)), 0x0001u);
    EXPECT_EQ(encode(Format::bf16, 1.0 + std::ldexp(1.0, -8)), 0x3F80u);  // tie to even
    EXPECT_EQ(encode(Format::bf16, 1.0 + std::ldexp(3.0, -8)), 0x3F82u);
    EXPECT_EQ(encode(Format::int8, 2.5), 2u);
    EXPECT_EQ(encode(Format::int8, -3.5), static_cast<std::uint8_t>(-4));
    EXPECT_EQ(encode(Format::int8, 1000.0), 127u);
    EXPECT_EQ(encode(Format::int8, -1000.0), 0x80u);
    EXPECT_EQ(max_finite(Format::fp16), 65504.0);
    EXPECT_EQ(ulp_at(Format::fp16, 1.0), std::ldexp(1.0, -10));
    EXPECT_EQ(ulp_at(Format::fp16, 0.0), std::ldexp(1.0, -24));
}

TEST(Ulp, DistanceIsMonotoneAndSignAware) {
    for (Format f : {Format::fp16, Format::bf16}) {
        std::int64_t prev = ordinal(f, 0xFFFF & (f == Format::fp16 ? 0xFBFF : 0xFF7F));
        // Walk from -max to +max in value order and check ordinals step by 1.
        std::vector<std::uint32_t> order;
        for (std::uint32_t b = (f == Format::fp16 ? 0xFBFF : 0xFF7F); b > 0x8000; --b) order.push_back(b);
        order.push_back(0x0000);
        for (std::uint32_t b = 1; b <= (f == Format::fp16 ? 0x7BFFu : 0x7F7Fu); ++b) order.push_back(b);
        for (std::size_t i = 1; i < order.size(); ++i) {
            std::int64_t o = ordinal(f, order[i]);
            ASSERT_EQ(o, prev + 1) << std::hex << order[i];
            ASSERT_LT(decode(f, order[i - 1]), decode(f, order[i]));
            prev = o;
        }
        EXPECT_EQ(ulp_distance(f, 0x8000, 0x0000), 0u);  // -0 == +0
        EXPECT_EQ(ulp_distance(f, 0x8001, 0x0001), 2u);
    }
}

TEST(Ulp, SpecialClassesComparedFirst) {
    const std::uint64_t nan = encode(Format::fp16, NAN), inf = 0x7C00, ninf = 0xFC00, one = 0x3C00;
    EXPECT_FALSE(compare_bits(Format::fp16, nan, one).class_match);
    EXPECT_FALSE(compare_bits(Format::fp16, one, nan).class_match);
    EXPECT_TRUE(compare_bits(Format::fp16, nan, 0x7E01).class_match);  // any NaN payload
    EXPECT_FALSE(compare_bits(Format::fp16, inf, ninf).class_match);
    EXPECT_FALSE(compare_bits(Format::fp16, inf, 0x7BFF).class_match);  // max finite is not Inf
    EXPECT_EQ(compare_bits(Format::fp16, one, 0x3C03).ulps, 3u);
}

TEST(Ulp, DeterminedRoundingDetectsStraddle) {
    M x(1 + std::ldexp(1.0, -11));  // an fp16 tie
    M small(std::ldexp(1.0, -30)), zero(0.0);
    EXPECT_FALSE(round_if_determined(x.v, small.v, Format::fp16).has_value());
    EXPECT_EQ(*round_if_determined(x.v, zero.v, Format::fp16), 0x3C00u);  // exact tie: to even
    M y(1 + std::ldexp(1.0, -12));
    EXPECT_EQ(*round_if_determined(y.v, small.v, Format::fp16), 0x3C00u);
}

TEST(Tensor, StridedViewsAndBits) {
    Tensor t(Format::bf16, {2, 3});
    for (int i = 0; i < 6; ++i) t.set_value(i, i * 1.5);
    EXPECT_EQ(t.value(5), 7.5);
    TensorView v = t.view();
    EXPECT_EQ(v.rows(), 2);
    EXPECT_EQ(v.cols(), 3);
    EXPECT_EQ(v.row<std::uint16_t>(1)[0], encode(Format::bf16, 4.5));
    EXPECT_THROW(Tensor(Format::fp32, {1, 2, 3, 4, 5}), std::invalid_argument);
}

// Storage starts on a 64-byte line, as frameworks' allocations do (docs/
// numerics.md, "Tensors"), at every size, small ones from the heap included.
TEST(Tensor, StorageIsLineAligned) {
    for (std::int64_t n : {1, 3, 100, 4097, 1 << 22})
        for (Format f : {Format::fp32, Format::bf16, Format::int8}) {
            const Tensor t(f, {n});
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u) << name(f) << " x " << n;
            const Tensor copy = t;
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(copy.data()) % 64, 0u) << "copy, " << name(f) << " x " << n;
        }
}

TEST(Round, DoubleDoubleRoundingAgreesWithMpfrOrDefers) {
    // Random double-double values around every binade of fp16 and bf16: when
    // round_dd decides, it must equal MPFR's rounding of hi + lo; right at a
    // midpoint it must defer.
    std::uint64_t s = 12345;
    auto next = [&] { s = s * 6364136223846793005ull + 1442695040888963407ull; return s >> 11; };
    int decided = 0;
    for (Format f : {Format::fp16, Format::bf16, Format::fp32}) {
        for (int i = 0; i < 200000; ++i) {
            const double hi = std::ldexp(static_cast<double>(next()) / 9007199254740992.0 + 0.5,
                                         static_cast<int>(next() % 60) - 40) * ((next() & 1) ? 1 : -1);
            const double lo = std::ldexp(hi, -60) * (static_cast<double>(next() % 1000) / 500.0 - 1.0);
            M x(hi, 300), l(lo, 300);
            mpfr_add(x.v, x.v, l.v, MPFR_RNDN);  // exact at 300 bits
            auto r = round_dd(f, hi, lo, 0x1p-100);
            if (r) {
                ++decided;
                ASSERT_EQ(*r, mpfr_reference(x.v, f)) << name(f) << " " << hexfloat(hi) << " + " << hexfloat(lo);
            }
        }
        // Exact midpoints defer (lo = 0, hi on a tie).
        const double tie = 1 + std::ldexp(1.0, -info(f).precision);
        EXPECT_FALSE(round_dd(f, tie, 0, 0x1p-100).has_value());
        EXPECT_EQ(*round_dd(f, tie, 0x1p-40, 0x1p-100), encode(f, 1 + std::ldexp(1.0, 1 - info(f).precision)));
    }
    EXPECT_GT(decided, 590000);  // it decides nearly always
}

// FP64 values of opposite sign far from zero: the distance needs all 64
// unsigned bits (a signed difference overflowed; UBSan found it in int8_gemm's
// fp64 accumulator comparisons).
TEST(Ulp, Fp64DistanceAcrossZeroDoesNotOverflow) {
    const std::uint64_t big = encode(Format::fp64, 1e300), neg = encode(Format::fp64, -1e300);
    const std::uint64_t half = big & 0x7FFFFFFFFFFFFFFFull;
    EXPECT_EQ(ulp_distance(Format::fp64, big, neg), 2 * half);
    EXPECT_EQ(ulp_distance(Format::fp64, neg, big), 2 * half);
    EXPECT_GT(2 * half, std::uint64_t{1} << 63);  // past the signed range
}

// fp16_to_float widens by the bits (the emulated tensor cores and scalar
// FP16 loads go through it): for every one of the 65536 codes it is
// decode's value, bit for bit, NaN as the quiet NaN of its sign.
TEST(Format, Fp16ToFloatIsDecodeForEveryCode) {
    for (std::uint32_t h = 0; h < 65536; ++h) {
        const float got = fp16_to_float(static_cast<std::uint16_t>(h));
        const float want = static_cast<float>(decode(Format::fp16, h));
        ASSERT_EQ(float_bits(got), float_bits(want)) << "fp16 code 0x" << std::hex << h;
    }
}

}  // namespace numerics_test
