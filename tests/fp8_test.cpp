// The FP8 family (docs/fp8.md): the kernels' conversion on the bits, the
// double rounding an FP32 quotient makes and the kernels correct, SIMD and
// scalar kernels bit for bit, special blocks, the oracle's exact value, the
// budget's edge (the unpromoted 14-bit accumulator breaks it, the FP32
// kernel sits inside), bad input named, and the property suite over every
// registered kernel and mutant.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "impls/cpu/fp8.hpp"
#include "kernel_suite.hpp"
#include "numerics/fp8.hpp"
#include "oracle/fp8.hpp"
#include "properties/verdict.hpp"

namespace fp8_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

namespace {

const Format kFp8[] = {Format::fp8_e4m3, Format::fp8_e5m2};

const KernelInfo& kernel(const std::string& name) {
    const KernelInfo* k = builtin_registry().find(name);
    if (!k) throw std::logic_error("no kernel " + name);
    return *k;
}

Tensor matrix(Format f, std::int64_t rows, std::int64_t cols, const std::vector<double>& v) {
    Tensor t(f, {rows, cols});
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, v.at(static_cast<std::size_t>(i)));
    return t;
}

Tensor random_matrix(Format f, std::int64_t rows, std::int64_t cols, std::mt19937_64& rng, double scale) {
    std::normal_distribution<double> N;
    Tensor t(f, {rows, cols});
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_bits(i, encode(f, N(rng) * scale, Overflow::saturate));
    return t;
}

void expect_same_bits(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t o = 0; o < got.size(); ++o)
        for (std::int64_t i = 0; i < want[o].numel(); ++i)
            ASSERT_EQ(got[o].bits(i), want[o].bits(i)) << what << ": output " << o << " element " << i;
}

Params quant_params(double br, double bc, double pow2, double sat, double fixed) {
    return Params({{"br", br}, {"bc", bc}, {"scale", pow2}, {"saturate", sat}, {"static_scale", fixed}});
}

// The FP8 GEMM's inputs: codes N(0, 1) * code_scale rounded (saturating),
// scales 2^[-8, 0] times [1/2, 1).
std::vector<Tensor> gemm_inputs(Format f, std::int64_t m, std::int64_t k, std::int64_t n, std::mt19937_64& rng,
                                double code_scale = 8) {
    std::uniform_real_distribution<double> U(0.5, 1);
    auto scales = [&](std::int64_t r, std::int64_t c) {
        Tensor s(Format::fp32, {r, c});
        for (std::int64_t i = 0; i < s.numel(); ++i) s.set_value(i, std::ldexp(U(rng), -static_cast<int>(rng() % 9)));
        return s;
    };
    Tensor a = random_matrix(f, m, k, rng, code_scale), b = random_matrix(f, k, n, rng, code_scale);
    return {a, scales(m, ceil_div(k, 128)), b, scales(ceil_div(k, 128), ceil_div(n, 128))};
}

std::vector<TensorView> views(const std::vector<Tensor>& t) {
    std::vector<TensorView> v;
    for (const auto& x : t) v.push_back(x.view());
    return v;
}

}  // namespace

// The kernels' conversion on FP32 bits (impls/cpu/fp8.cpp) against encode()
// on a stride through every float, and at every midpoint with the side of
// the true value (`dir`) deciding the tie.
TEST(Fp8Kernel, ConversionOnTheBitsAgreesWithEncode) {
    for (Format f : kFp8) {
        const cpu::Fp8Codec c = cpu::fp8_codec(f);
        for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 4099) {
            const float v = float_from_bits(static_cast<std::uint32_t>(b));
            for (bool sat : {false, true}) {
                const std::uint64_t want = encode(f, v, sat ? Overflow::saturate : Overflow::nonsaturating);
                const std::uint8_t got = cpu::fp8_from_float(v, 0, c, sat);
                ASSERT_TRUE(got == want || (std::isnan(v) && std::isnan(decode(f, got)))) << name(f) << " " << hexfloat(v);
            }
        }
        for (std::uint64_t b = 0; b + 1 < 0x7F; ++b) {
            const double lo = decode(f, b), hi = decode(f, b + 1), mid = 0.5 * (lo + hi);
            if (!std::isfinite(hi)) continue;
            EXPECT_EQ(cpu::fp8_from_float(static_cast<float>(mid), 1, c, true), b + 1) << name(f) << " above " << mid;
            EXPECT_EQ(cpu::fp8_from_float(static_cast<float>(mid), -1, c, true), b) << name(f) << " below " << mid;
            EXPECT_EQ(cpu::fp8_from_float(static_cast<float>(mid), 0, c, true), encode(f, mid)) << name(f) << " tie " << mid;
        }
    }
}

// x / s rounded to FP32 first can land exactly on an FP8 midpoint that the
// true quotient misses (x and s carry 24 bits, the midpoint 5): rounding
// that midpoint to even is then a double rounding.  Such pairs exist; the
// kernels decide them by the exact residual fma(-q, s, x) and give
// RN_fp8(x / s); the plain FP32 division followed by the conversion does not.
TEST(Fp8Quantize, TheFp32QuotientsDoubleRoundingIsCorrected) {
    const Fp8QuantParams qp{1, 128, false, true, 0, Format::fp8_e4m3};
    const cpu::Fp8Codec c = cpu::fp8_codec(Format::fp8_e4m3);
    std::mt19937_64 rng(31);
    std::uniform_real_distribution<double> U(1, 2);
    int found = 0;
    for (int trial = 0; trial < 20000 && found < 20; ++trial) {
        const float s = static_cast<float>(U(rng));
        const std::uint64_t code = rng() % 0x7D + 1;
        const double mid = 0.5 * (decode(Format::fp8_e4m3, code) + decode(Format::fp8_e4m3, code + 1));
        for (float x : {std::nextafter(static_cast<float>(mid * s), 0.0f), std::nextafter(static_cast<float>(mid * s), 1e9f)}) {
            if (x / s != static_cast<float>(mid) || static_cast<double>(x) / s == mid) continue;
            const double want = oracle::fp8_code_value(x, s, qp);
            // The tie goes to even: wrong when the true quotient lies on the odd side.
            found += decode(Format::fp8_e4m3, cpu::fp8_from_float(x / s, 0, c, true)) != want;
            Tensor in = matrix(Format::fp32, 1, 2, {448.0 * s, x});  // amax 448 s: the block's scale is s
            const auto out = run_kernel(kernel("cpu.simd.fp8_quantize.fp32"), quant_params(1, 128, 0, 1, s), {in.view()});
            EXPECT_EQ(out[0].value(1), want) << "x " << hexfloat(x) << ", s " << hexfloat(s);
        }
    }
    EXPECT_GT(found, 0) << "no double-rounding pair found: the test shows nothing";
    std::printf("%d pairs (x, s) whose FP32 quotient rounds onto an E4M3 midpoint on the wrong side\n", found);
}

// The same correction where x is near FP32's subnormals (scales of 2^-126 to
// 2^-120): the residual of a midpoint quotient is below 2^-150 there, and an
// FMA on the unscaled operands returns 0 (the tie then went to even on the
// wrong side in about half the subnormal cases).
TEST(Fp8Quantize, TheCorrectionHoldsNearFp32Subnormals) {
    const Fp8QuantParams qp{1, 128, false, true, 0, Format::fp8_e4m3};
    std::mt19937_64 rng(37);
    std::uniform_real_distribution<double> U(1, 2);
    int midpoints = 0;
    for (int trial = 0; trial < 4000; ++trial) {
        const float s = static_cast<float>(std::ldexp(U(rng), -126 + static_cast<int>(rng() % 6)));
        const std::uint64_t code = rng() % 0x7D + 1;
        const double mid = 0.5 * (decode(Format::fp8_e4m3, code) + decode(Format::fp8_e4m3, code + 1));
        for (float x : {std::nextafter(static_cast<float>(mid * s), 0.0f), std::nextafter(static_cast<float>(mid * s), 1e9f)}) {
            Tensor in = matrix(Format::fp32, 1, 2, {448.0 * s, x});
            for (const char* name : {"cpu.simd.fp8_quantize.fp32", "cpu.scalar.fp8_quantize.fp32"}) {
                const auto out = run_kernel(kernel(name), quant_params(1, 128, 0, 1, s), {in.view()});
                const float ks = static_cast<float>(out[1].value(0));  // the kernel's own scale
                midpoints += x / ks == static_cast<float>(mid);
                EXPECT_EQ(out[0].value(1), oracle::fp8_code_value(x, ks, qp)) << name << ": x " << hexfloat(x) << ", s " << hexfloat(ks);
            }
        }
    }
    EXPECT_GT(midpoints, 100) << "few quotients landed on midpoints: the test shows little";
}

// The AVX2 kernel and the portable loop give the same bits: FP32 and BF16
// inputs, both formats, every block shape with tails, both scale kinds,
// saturation or not, static scales that overflow.
TEST(Fp8Quantize, SimdEqualsScalarBitForBit) {
    std::mt19937_64 rng(5);
    const std::pair<std::string, std::string> pairs[] = {
        {"cpu.simd.fp8_quantize.fp32", "cpu.scalar.fp8_quantize.fp32"},
        {"cpu.simd.fp8_quantize.bf16", "cpu.scalar.fp8_quantize.bf16"},
        {"cpu.simd.fp8_quantize.bf16.fp8_e5m2", "cpu.scalar.fp8_quantize.fp32.fp8_e5m2"}};
    for (const auto& [simd, scalar] : pairs)
        for (const auto& [br, bc] : {std::pair{1.0, 128.0}, {128.0, 128.0}, {3.0, 5.0}, {1.0, 16.0}})
            for (double fixed : {0.0, 0x1p-6})
                for (double sat : {0.0, 1.0}) {
                    const Format in = kernel(scalar).in;
                    Tensor x = random_matrix(in, 130, 300, rng, 1);
                    x.set_value(7, NAN), x.set_value(401, INFINITY), x.set_value(4000, 1e-30);
                    const Params p = quant_params(br, bc, rng() % 2, sat, fixed);
                    expect_same_bits(run_kernel(kernel(simd), p, {x.view()}), run_kernel(kernel(scalar), p, {x.view()}), simd);
                }
}

// amax 0: the floor scale 2^-126 and zero codes; a non-finite block: NaN
// scale and NaN codes; a static scale: codes past max saturate, or
// overflow to NaN (E4M3) and Inf (E5M2), and +-Inf with them.
TEST(Fp8Quantize, SpecialBlocksAndOverflow) {
    const Tensor x = matrix(Format::fp32, 1, 4, {0, 0, 1, NAN});
    for (const char* name : {"cpu.simd.fp8_quantize.fp32", "cpu.scalar.fp8_quantize.fp32"}) {
        const auto out = run_kernel(kernel(name), quant_params(1, 2, 0, 1, 0), {x.view()});
        EXPECT_EQ(out[1].value(0), 0x1p-126) << name;
        EXPECT_EQ(out[0].value(0), 0.0);
        EXPECT_TRUE(std::isnan(out[1].value(1)) && std::isnan(out[0].value(2)) && std::isnan(out[0].value(3))) << name;
    }
    const Tensor big = matrix(Format::fp32, 1, 3, {1000, -INFINITY, 300});
    const std::pair<const char*, Format> kernels[] = {{"cpu.simd.fp8_quantize.fp32", Format::fp8_e4m3},
                                                      {"cpu.scalar.fp8_quantize.fp32.fp8_e5m2", Format::fp8_e5m2}};
    for (const auto& [name, f] : kernels) {
        const double s = f == Format::fp8_e4m3 ? 1 : 1.0 / 128;  // 1000 / s past max either way
        const auto sat = run_kernel(kernel(name), quant_params(1, 128, 0, 1, s), {big.view()});
        EXPECT_EQ(sat[0].value(0), max_finite(f)) << name;
        EXPECT_EQ(sat[0].value(1), -max_finite(f)) << name;
        EXPECT_EQ(sat[0].value(2), decode(f, encode(f, 300 / s))) << name;
        const auto raw = run_kernel(kernel(name), quant_params(1, 128, 0, 0, s), {big.view()});
        if (f == Format::fp8_e4m3) {
            EXPECT_TRUE(std::isnan(raw[0].value(0)) && std::isnan(raw[0].value(1))) << name;
        }
        else EXPECT_TRUE(raw[0].value(0) == INFINITY && raw[0].value(1) == -INFINITY) << name;
    }
}

TEST(Fp8Quantize, BadInputNamesTheField) {
    const Tensor x = matrix(Format::fp32, 2, 2, {1, 2, 3, 4});
    const KernelInfo& k = kernel("cpu.scalar.fp8_quantize.fp32");
    const std::pair<Params, std::string> bad[] = {{quant_params(0, 128, 0, 1, 0), "'br'"},
                                                  {quant_params(1, 1.5, 0, 1, 0), "'bc'"},
                                                  {quant_params(1, 128, 2, 1, 0), "'scale'"},
                                                  {quant_params(1, 128, 0, 3, 0), "'saturate'"},
                                                  {quant_params(1, 128, 0, 1, -1), "'static_scale'"}};
    for (const auto& [p, field] : bad) {
        try {
            run_kernel(k, p, {x.view()});
            ADD_FAILURE() << "accepted a bad " << field;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        }
    }
}

// The oracle's y is the exact sum: codes and power-of-two scales whose
// products and sums are exact in double give it directly.
TEST(Fp8Gemm, OracleIsTheExactBlockedSum) {
    std::mt19937_64 rng(3);
    auto in = gemm_inputs(Format::fp8_e4m3, 3, 300, 130, rng);
    for (std::size_t s : {1u, 3u})
        for (std::int64_t i = 0; i < in[s].numel(); ++i) in[s].set_value(i, std::ldexp(1.0, -static_cast<int>(rng() % 6)));
    const Params p;
    const auto r = oracle::evaluate_structured("fp8_gemm", p, views(in), {Format::fp32});
    for (std::int64_t i = 0; i < 3; ++i)
        for (std::int64_t j = 0; j < 130; ++j) {
            double y = 0;  // every term a multiple of 2^-28 below 2^18: exact in double
            for (std::int64_t k = 0; k < 300; ++k)
                y += in[0].value(i * 300 + k) * in[1].value(i * 3 + k / 128) * in[2].value(k * 130 + j) *
                     in[3].value(k / 128 * 2 + j / 128);
            ASSERT_EQ(r.exact[0][static_cast<std::size_t>(i * 130 + j)], y) << i << ", " << j;
        }
}

// The SIMD kernel (LUT decode, the FP32 matmul kernel per K block) and the
// portable loop give the same bits, past every block edge.
TEST(Fp8Gemm, SimdEqualsScalarBitForBit) {
    std::mt19937_64 rng(9);
    for (const char* tail : {"fp8_e4m3", "fp8_e4m3.fp32", "fp8_e5m2"})
        for (std::int64_t k : {1, 127, 128, 129, 300, 1000})
            for (std::int64_t n : {1, 17, 129}) {
                const auto in = gemm_inputs(kernel(std::string("cpu.simd.fp8_gemm.") + tail).in, 13, k, n, rng);
                expect_same_bits(run_kernel(kernel(std::string("cpu.simd.fp8_gemm.") + tail), Params(), views(in)),
                                 run_kernel(kernel(std::string("cpu.scalar.fp8_gemm.") + tail), Params(), views(in)), tail);
            }
}

// K = 4096 (DeepSeek-V3's hidden size), codes of one sign: the FP32 kernel
// stays well inside the budget; the same sum kept in one 14-bit
// accumulator without promotion is far beyond it.  (Judged by the budget of
// a kernel that declares a 14-bit block accumulator -- Hopper's tensor
// cores, promoted every 128 products -- it uses 0.95 of it: printed, see
// docs/fp8.md; that declaration cannot certify the promotion.)
TEST(Fp8Gemm, AccumulationWithoutPromotionBreaksTheBudget) {
    std::mt19937_64 rng(12);
    auto in = gemm_inputs(Format::fp8_e4m3, 2, 4096, 8, rng);
    for (std::size_t o : {0u, 2u})
        for (std::int64_t i = 0; i < in[o].numel(); ++i) in[o].set_value(i, std::fabs(in[o].value(i)));
    auto worst = [&](const KernelInfo& k) {
        const props::CaseEval e = props::evaluate_case(k, Params(), views(in));
        double u = 0;
        for (std::int64_t i = 0; i < e.outputs[0].got.numel(); ++i)
            u = std::fmax(u, std::fabs(e.outputs[0].got.value(i) - e.outputs[0].exact[static_cast<std::size_t>(i)]) /
                                 e.outputs[0].probabilistic[static_cast<std::size_t>(i)]);
        return u;
    };
    const KernelInfo hopper = kernel("mutant.fp8_gemm.no_promotion.fp8_e4m3");  // declares block_bits 14
    KernelInfo fp32_claim = hopper;
    fp32_claim.declared.erase("block_bits");
    const double good = worst(kernel("cpu.simd.fp8_gemm.fp8_e4m3.fp32")), bad = worst(fp32_claim), hidden = worst(hopper);
    EXPECT_LT(good, 0.5);
    EXPECT_GT(bad, 4.0);
    // Swamping data (property promotion_every_block): a first block of
    // products 256^2, then products 20^2 below half a 14-bit ulp of 2^23.
    for (std::size_t o : {0u, 2u})
        for (std::int64_t i = 0; i < in[o].numel(); ++i) {
            const std::int64_t k = o == 0 ? i % 4096 : i / 8;
            in[o].set_value(i, k < 128 ? 256 : 20);
        }
    for (std::size_t o : {1u, 3u})
        for (std::int64_t i = 0; i < in[o].numel(); ++i) in[o].set_value(i, 1);
    const double swamped = worst(hopper), swamped_good = worst(kernel("cpu.simd.fp8_gemm.fp8_e4m3.fp32"));
    EXPECT_GT(swamped, 4.0);
    EXPECT_EQ(swamped_good, 0.0);
    std::printf("K = 4096, one sign: worst utilization %.3g (FP32, promoted), %.3g (14-bit, unpromoted, against FP32), "
                "%.3g (the same against its declared 14-bit block accumulator); swamping data: %.3g (unpromoted, 14-bit "
                "budget), %.3g (FP32, promoted)\n", good, bad, hidden, swamped, swamped_good);
}

TEST(Fp8Gemm, BadShapesNameTheInput) {
    std::mt19937_64 rng(1);
    auto in = gemm_inputs(Format::fp8_e4m3, 2, 200, 3, rng);
    in[1] = Tensor(Format::fp32, {2, 1});  // K = 200 needs two scale blocks
    try {
        run_kernel(kernel("cpu.simd.fp8_gemm.fp8_e4m3"), Params(), views(in));
        ADD_FAILURE() << "accepted scale_a [2, 1] for K = 200";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'scale_a' dimension 1"), std::string::npos) << e.what();
    }
}

CONFORM_FAMILY_SUITES(Fp8, "fp8");

namespace {

double round_bits(double v, int bits) {
    if (v == 0 || !std::isfinite(v)) return v;
    int e;
    std::frexp(v, &e);
    return std::ldexp(std::nearbyint(std::ldexp(v, bits - e)), e - bits);
}

// Hopper's FP8 tensor cores as DeepSeek-V3 describes them: each 128-deep
// block summed in an accumulator of 14 significant bits, then promoted
// (times both scales, added in FP32).
void hopper_model(const KernelCall& c) {
    const Fp8GemmDims d = fp8_gemm_dims(c.in, c.params);
    const std::int64_t nb = ceil_div(d.k, d.block), sbn = ceil_div(d.n, d.block);
    for (std::int64_t i = 0; i < d.m; ++i)
        for (std::int64_t j = 0; j < d.n; ++j) {
            float acc = 0;
            for (std::int64_t kb = 0; kb < nb; ++kb) {
                double s = 0;
                for (std::int64_t k = kb * d.block; k < std::min(d.k, (kb + 1) * d.block); ++k)
                    s = round_bits(s + c.in[0].value(i * d.k + k) * c.in[2].value(k * d.n + j), 14);
                acc += static_cast<float>(s) * static_cast<float>(c.in[1].value(i * nb + kb)) *
                       static_cast<float>(c.in[3].value(kb * sbn + j / d.block));
            }
            c.out[0].set_bits(i * d.n + j, encode(c.out[0].format, acc));
        }
}

}  // namespace

// The declared block accumulator is part of the budget: the Hopper model
// (14-bit blocks, promoted) stays within the budget it declares
// (block_bits = 14) and breaks the default FP32 one, on mixed-sign and
// one-sign codes up to K = 4096.
TEST(Fp8Gemm, AFourteenBitBlockAccumulatorMeetsItsDeclaredBudget) {
    KernelInfo k = kernel("cpu.scalar.fp8_gemm.fp8_e4m3.fp32");
    k.name = "test.fp8_gemm.hopper_model";
    k.fn = hopper_model;
    KernelInfo declared = k;
    declared.declared["block_bits"] = 14;
    std::mt19937_64 rng(21);
    double worst_declared = 0, worst_fp32 = 0;
    for (std::int64_t kk : {128, 300, 4096})
        for (bool one_sign : {false, true}) {
            auto in = gemm_inputs(Format::fp8_e4m3, 2, kk, 8, rng);
            if (one_sign)
                for (std::size_t o : {0u, 2u})
                    for (std::int64_t i = 0; i < in[o].numel(); ++i) in[o].set_value(i, std::fabs(in[o].value(i)));
            for (auto [info, worst] : {std::pair{&declared, &worst_declared}, std::pair{&k, &worst_fp32}}) {
                const props::CaseEval e = props::evaluate_case(*info, Params(), views(in));
                const auto& out = e.outputs[0];
                for (std::int64_t i = 0; i < out.got.numel(); ++i)
                    *worst = std::fmax(*worst, std::fabs(out.got.value(i) - out.exact[static_cast<std::size_t>(i)]) /
                                                   out.probabilistic[static_cast<std::size_t>(i)]);
            }
        }
    EXPECT_LE(worst_declared, 1.0);
    EXPECT_GT(worst_fp32, 1.0);
    std::printf("Hopper model: worst utilization (gating tier) %.3g declaring 14-bit blocks, %.3g judged as FP32\n",
                worst_declared, worst_fp32);
}

// The promotion's own roundings at the ends of FP32's range (docs/fp8.md,
// "Error budget"): a scale product formed first that is subnormal errs by
// eta/2 times the block sum (the budget covers that order), and a product
// P s_a that overflows while y does not leaves the element undefined.
TEST(Fp8Gemm, PromotionAtTheEndsOfFp32sRange) {
    const std::int64_t k = 128;
    Tensor a(Format::fp8_e4m3, {1, k}), b(Format::fp8_e4m3, {k, 1});
    for (std::int64_t i = 0; i < k; ++i) a.set_value(i, 448), b.set_value(i, 448);
    const double p = 128.0 * 448 * 448;  // the block sum, exact in FP32
    auto bound_of = [&](double sa, double sb, double* exact) {
        const Tensor ta = matrix(Format::fp32, 1, 1, {sa}), tb = matrix(Format::fp32, 1, 1, {sb});
        const std::vector<TensorView> in{a.view(), ta.view(), b.view(), tb.view()};
        *exact = p * sa * sb;
        return oracle::fp8_gemm_bound(Params(), in, {{*exact}}, Format::fp32, {Format::fp32})[0][0];
    };
    double y = 0;
    const float sa = 1.1f * 0x1p-72f, sb = 1.1f * 0x1p-73f;
    const double b1 = bound_of(sa, sb, &y);
    const float scale_first = static_cast<float>(p) * (sa * sb);  // sa sb subnormal in FP32
    EXPECT_LE(std::fabs(scale_first - y), b1) << "P fl(sa sb): " << hexfloat(scale_first) << " against " << hexfloat(y);
    EXPECT_EQ(bound_of(0x1p120, 0x1p-120, &y), oracle::kUndefined) << "P sa overflows FP32 while y = " << y;
}

}  // namespace fp8_test
