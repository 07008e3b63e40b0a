// INT8 GEMM kernels beyond the property suite: the AVX2 product equals the
// scalar one bit for bit on ragged shapes (tails of the 4 x 16 blocks, odd K);
// SmoothQuant through the kernels (smooth_quant, quantize, int8_gemm) cutting the W8A8 error on outlier channels;
// the simd dequantize and smooth_quant kernels equal the scalar ones bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <optional>
#include <random>
#include <vector>

#include "impls/cpu/int8_gemm.hpp"
#include "impls/cpu/isa.hpp"
#include "impls/registry.hpp"

namespace int8_kernel_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

std::vector<std::int8_t> codes(std::mt19937_64& g, std::int64_t n) {
    std::vector<std::int8_t> v(static_cast<std::size_t>(n));
    for (auto& c : v) c = static_cast<std::int8_t>(static_cast<int>(g() % 256) - 128);
    return v;
}

}  // namespace

TEST(Int8Kernels, Avx2EqualsScalarOnRaggedShapes) {
    if (!cpu::has_avx2()) GTEST_SKIP() << "no AVX2";
    std::mt19937_64 g(31);
    for (std::int64_t m : {1, 3, 4, 5, 9})
        for (std::int64_t k : {1, 2, 7, 64, 513})
            for (std::int64_t n : {1, 15, 16, 17, 40}) {
                const auto a = codes(g, m * k), b = codes(g, k * n);
                std::vector<std::int32_t> x(static_cast<std::size_t>(m * n)), y(x.size());
                cpu::int8_matmul_avx2(a.data(), b.data(), x.data(), m, k, n);
                cpu::int8_matmul_scalar(a.data(), b.data(), y.data(), m, k, n);
                EXPECT_EQ(x, y) << m << "x" << k << "x" << n;
            }
}

namespace {

using Product = void (*)(const std::int8_t*, const std::int8_t*, std::int32_t*, std::int64_t, std::int64_t, std::int64_t);

struct SimdProduct {
    const char* name;
    bool available;
    Product fn;
};

std::vector<SimdProduct> simd_products() {
    return {{"amx_int8", cpu::has_amx_int8(), cpu::int8_matmul_amx},
            {"amx_int8 (emulated tiles)", true, cpu::int8_matmul_amx_emulated},
            {"avx512_vnni", cpu::has_avx512_vnni(), cpu::int8_matmul_vnni512},
            {"avx_vnni", cpu::has_avx_vnni(), cpu::int8_matmul_vnni256},
            {"avx2", cpu::has_avx2(), cpu::int8_matmul_avx2}};
}

}  // namespace

// Every row-tile remainder (1..5 rows; AMX: 32-row blocks), K not a
// multiple of 4 (AMX: 64) and past one packed block (1024; AMX 2048), N past one panel
// and not a multiple of 16: the VNNI paths (b shifted to u8, -128 rowsum(a)
// taken back) and the AMX tiling (on the CPU's tiles where it has them,
// emulated everywhere) agree with the scalar INT32 loop bit for bit, the
// codes -128 and 127 included.
TEST(Int8Kernels, SimdPathsEqualScalarAcrossTilesBlocksAndPanels) {
    std::mt19937_64 g(32);
    int ran = 0;
    for (const SimdProduct& p : simd_products()) {
        if (!p.available) continue;
        ++ran;
        for (std::int64_t m : {1, 4, 7, 13, 33})
            for (std::int64_t k : {1, 3, 4, 65, 2049, 4100})
                for (std::int64_t n : {1, 17, 64, 97, 200}) {
                    auto a = codes(g, m * k), b = codes(g, k * n);
                    a[0] = -128, b[0] = -128, b.back() = 127;
                    std::vector<std::int32_t> x(static_cast<std::size_t>(m * n), 12345), y(x.size());
                    p.fn(a.data(), b.data(), x.data(), m, k, n);
                    cpu::int8_matmul_scalar(a.data(), b.data(), y.data(), m, k, n);
                    ASSERT_EQ(x, y) << p.name << " " << m << "x" << k << "x" << n;
                }
    }
    if (!ran) GTEST_SKIP() << "no SIMD INT8 path on this CPU";
}

// The INT32 limit: with every code -128 the product is K 2^14, which fits
// INT32 up to K = 2^17 - 1 (2^31 - 2^14) and not at K = 2^17 (2^31), where
// the kernels refuse the call.  At the largest K, the extreme codes
// (-128 x -128, -128 x 127, 127 x 127) on every path, the vpdpbusd paths'
// u8 shift (b + 128 = 255 for 127) included: their accumulators run from
// -128 rowsum(a) (up to 2^31 - 2^14 in magnitude here) to the product and
// stay within INT32
// (docs/int8.md, "Exactness of the vpdpbusd paths").
TEST(Int8Kernels, TheLargestKIsExactAndTheNextIsRefused) {
    const std::int64_t k = (std::int64_t{1} << 17) - 1;
    const struct {
        int a, b;
        std::int64_t want;
    } cases[] = {{-128, -128, k * 16384}, {-128, 127, -k * 16256}, {127, 127, k * 16129}};
    for (const auto& c : cases) {
        const std::vector<std::int8_t> a(static_cast<std::size_t>(k), static_cast<std::int8_t>(c.a));
        const std::vector<std::int8_t> b(static_cast<std::size_t>(k), static_cast<std::int8_t>(c.b));
        for (const SimdProduct& p : simd_products()) {
            if (!p.available) continue;
            std::int32_t acc = 0;
            p.fn(a.data(), b.data(), &acc, 1, k, 1);
            EXPECT_EQ(acc, c.want) << p.name << " a = " << c.a << ", b = " << c.b;
        }
    }
    const KernelInfo* kern = builtin_registry().find("cpu.scalar.int8_gemm.fp32");
    ASSERT_NE(kern, nullptr);
    for (const std::int64_t kk : {k, k + 1}) {
        Tensor ta(Format::int8, {1, kk}), tb(Format::int8, {kk, 1}), sa(Format::fp32, {1}), sb(Format::fp32, {1});
        for (std::int64_t i = 0; i < kk; ++i) ta.set_value(i, -128), tb.set_value(i, -128);
        sa.set_value(0, 1), sb.set_value(0, 1);
        if (kk == k) {
            const auto out = run_kernel(*kern, Params(), {ta.view(), tb.view(), sa.view(), sb.view()});
            EXPECT_EQ(out[0].value(0), 2147467264.0);
        } else {
            EXPECT_THROW(run_kernel(*kern, Params(), {ta.view(), tb.view(), sa.view(), sb.view()}), std::invalid_argument);
        }
    }
}

// The registered kernels end to end: the simd kernel's 4-lane dequantization
// (vcvtpd2ps; 8 lanes on AVX-512, 4 on AVX2) gives the scalar kernel's bits
// for acc and y, with scales that
// make y overflow, underflow to subnormals and zero, and NaNs with payloads.
TEST(Int8Kernels, SimdDequantizationEqualsScalarBitForBit) {
    const KernelInfo* simd = builtin_registry().find("cpu.simd.int8_gemm.fp32");
    const KernelInfo* scalar = builtin_registry().find("cpu.scalar.int8_gemm.fp32");
    ASSERT_TRUE(simd && scalar);
    std::mt19937_64 g(33);
    const double specials[] = {3e38, 0x1p-140, 0.0, std::nan(""), 0x1p-149, 1.5};
    for (const bool avx2 : {false, true}) {  // the AVX-512 (8-lane) and AVX2 (4-lane) dequantizations
        std::optional<cpu::Avx2Only> cap;
        if (avx2) cap.emplace();
        for (std::int64_t m : {1, 5})
            for (std::int64_t n : {3, 9, 70}) {
                const std::int64_t k = 37;
                const auto av = codes(g, m * k), bv = codes(g, k * n);
                Tensor a(Format::int8, {m, k}), b(Format::int8, {k, n}), sa(Format::fp32, {m}), sb(Format::fp32, {n});
                for (std::int64_t i = 0; i < m * k; ++i) a.set_value(i, av[static_cast<std::size_t>(i)]);
                for (std::int64_t i = 0; i < k * n; ++i) b.set_value(i, bv[static_cast<std::size_t>(i)]);
                for (std::int64_t i = 0; i < m; ++i) sa.set_value(i, i % 2 ? 0x1p-7 : specials[static_cast<std::size_t>(i) % 6]);
                for (std::int64_t j = 0; j < n; ++j) sb.set_value(j, specials[static_cast<std::size_t>(j) % 6]);
                sb.set_bits(n - 1, 0xFFC12345);  // a negative NaN with a payload: y's NaN is encode()'s
                if (n > 4) sb.set_bits(4, 0x7F812345);  // a signalling one
                const std::vector<TensorView> in{a.view(), b.view(), sa.view(), sb.view()};
                const auto x = run_kernel(*simd, Params(), in), y = run_kernel(*scalar, Params(), in);
                for (int o = 0; o < 2; ++o)
                    for (std::int64_t i = 0; i < m * n; ++i)
                        ASSERT_EQ(x[o].bits(i), y[o].bits(i))
                            << (avx2 ? "avx2 " : "") << "output " << o << " element " << i;
            }
    }
}

namespace {

// X W through the registered kernels: smooth_quant (alpha; none when
// `smoothing` is empty), per-token quantize of the activations, per-channel
// quantize of the weights, int8_gemm; the relative Frobenius error against X W
// in double (exact to far below the INT8 error).
double w8a8_error(const Tensor& x, const Tensor& w, const std::string& smoothing, double alpha) {
    const Registry& reg = builtin_registry();
    Tensor xs = x, ws = w;
    if (!smoothing.empty()) {
        auto out = run_kernel(*reg.find(smoothing), Params({{"alpha", alpha}}), {x.view(), w.view()});
        xs = std::move(out[0]), ws = std::move(out[1]);
    }
    const auto qx = run_kernel(*reg.find("cpu.simd.quantize.fp32"), Params({{"axis", 1}}), {xs.view()});
    const auto qw = run_kernel(*reg.find("cpu.simd.quantize.fp32"), Params({{"axis", 2}}), {ws.view()});
    const std::int64_t t = x.shape()[0], c = x.shape()[1], n = w.shape()[1];
    Tensor sa(Format::fp32, {t}), sb(Format::fp32, {n});  // the group scales (stored broadcast by quantize)
    for (std::int64_t i = 0; i < t; ++i) sa.set_value(i, qx[1].value(i * c));
    for (std::int64_t j = 0; j < n; ++j) sb.set_value(j, qw[1].value(j));
    const auto y = run_kernel(*reg.find("cpu.simd.int8_gemm.fp32"), Params(), {qx[0].view(), qw[0].view(), sa.view(), sb.view()});
    double err = 0, ref = 0;
    for (std::int64_t i = 0; i < t; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            double exact = 0;
            for (std::int64_t k = 0; k < c; ++k) exact += x.value(i * c + k) * w.value(k * n + j);
            err += std::pow(y[1].value(i * n + j) - exact, 2);
            ref += exact * exact;
        }
    return std::sqrt(err / ref);
}

}  // namespace

// SmoothQuant through the kernels (docs/int8.md "SmoothQuant through the kernels"):
// activations N(0, 1) with four outlier channels (x20, x50, x100, x200),
// weights N(0, 0.05^2); W8A8 error plain, smoothed for alpha in [0, 1], and
// with the inverted-scale mutant.
TEST(Int8Kernels, SmoothQuantCutsW8A8ErrorOnOutlierChannels) {
    const std::int64_t T = 64, C = 256, N = 128;
    std::mt19937_64 g(5);
    std::normal_distribution<double> d;
    Tensor x(Format::fp32, {T, C}), w(Format::fp32, {C, N});
    const std::int64_t outliers[] = {3, 77, 150, 201};
    const double gains[] = {20, 50, 100, 200};
    for (std::int64_t i = 0; i < T; ++i)
        for (std::int64_t j = 0; j < C; ++j) x.set_value(i * C + j, d(g));
    for (int o = 0; o < 4; ++o)
        for (std::int64_t i = 0; i < T; ++i) x.set_value(i * C + outliers[o], x.value(i * C + outliers[o]) * gains[o]);
    for (std::int64_t i = 0; i < C * N; ++i) w.set_value(i, 0.05 * d(g));
    const double plain = w8a8_error(x, w, "", 0);
    std::printf("W8A8 relative error, plain: %.4g\n", plain);
    double at_half = 0;
    for (double alpha : {0.0, 0.25, 0.5, 0.75, 0.85, 1.0}) {
        const double e = w8a8_error(x, w, "cpu.simd.smooth_quant.fp32", alpha);
        std::printf("  smoothed, alpha %.2f: %.4g\n", alpha, e);
        if (alpha == 0.5) at_half = e;
    }
    const double inverted = w8a8_error(x, w, "mutant.smooth_quant.scale_inverted.fp32", 0.5);
    std::printf("  inverted scale (mutant), alpha 0.50: %.4g\n", inverted);
    EXPECT_LT(at_half, plain / 2);
    EXPECT_GT(inverted, plain);
}

namespace {

void expect_same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t o = 0; o < a.size(); ++o)
        for (std::int64_t i = 0; i < a[o].numel(); ++i)
            ASSERT_EQ(a[o].bits(i), b[o].bits(i)) << what << ": output " << o << ", element " << i;
}

}  // namespace

// The simd dequantize and smooth_quant kernels compute the scalar kernels'
// doubles and round them the same way (fp16/bf16 through round-to-odd floats):
// bit for bit equal on the vector blocks and their tails, NaN channels included.
TEST(Int8Kernels, DequantizeAndSmoothQuantSimdEqualScalar) {
    if (!cpu::has_avx2()) GTEST_SKIP() << "no AVX2";
    const Registry& reg = builtin_registry();
    std::mt19937_64 g(33);
    std::normal_distribution<double> d;
    for (const char* out : {"fp32", "fp16", "bf16"})
        for (int axis : {0, 1, 2})
            for (std::int64_t cols : {1, 7, 8, 9, 17, 40}) {
                const std::int64_t rows = 3, groups = axis == 0 ? 1 : axis == 1 ? rows : cols;
                Tensor q(Format::int8, {rows, cols}), s(Format::fp32, {groups});
                for (std::int64_t i = 0; i < q.numel(); ++i) q.set_value(i, static_cast<int>(g() % 256) - 128);
                for (std::int64_t i = 0; i < groups; ++i) s.set_value(i, std::ldexp(1 + d(g) * d(g), -30 + static_cast<int>(g() % 40)));
                const Params p({{"axis", double(axis)}});
                const std::string tail = std::string(".") + out;
                expect_same_bits(run_kernel(*reg.find("cpu.simd.dequantize" + tail), p, {q.view(), s.view()}),
                                 run_kernel(*reg.find("cpu.scalar.dequantize" + tail), p, {q.view(), s.view()}),
                                 "dequantize" + tail + " axis " + std::to_string(axis));
            }
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (std::int64_t c : {1, 7, 8, 9, 17})
            for (std::int64_t n : {1, 8, 9, 23}) {
                Tensor x(f, {5, c}), w(f, {c, n});
                for (std::int64_t i = 0; i < x.numel(); ++i) x.set_value(i, d(g) * (i % c == 0 ? 40 : 1));
                for (std::int64_t i = 0; i < w.numel(); ++i) w.set_value(i, 0.05 * d(g));
                if (c > 8) x.set_value(8, NAN);  // a non-finite channel in the vector block
                const Params p({{"alpha", 0.85}});
                const std::string tail = std::string(".") + name(f);
                expect_same_bits(run_kernel(*reg.find("cpu.simd.smooth_quant" + tail), p, {x.view(), w.view()}),
                                 run_kernel(*reg.find("cpu.scalar.smooth_quant" + tail), p, {x.view(), w.view()}),
                                 "smooth_quant" + tail + " C " + std::to_string(c) + " N " + std::to_string(n));
            }
}

// bf16 output: q * s at an exact bf16 midpoint rounds to even (one rounding
// from the exact double product, never double rounding through a float).
TEST(Int8Kernels, DequantizeBf16TiesToEven) {
    const double lo_tie = 1 + 0x1p-8, hi_tie = 1 + 3 * 0x1p-8, above = 1 + 0x1p-8 + 0x1p-20;
    Tensor q(Format::int8, {1, 9}), s(Format::fp32, {9});
    for (std::int64_t j = 0; j < 9; ++j) {
        q.set_value(j, j % 2 ? -1 : 1);
        s.set_value(j, j < 3 ? lo_tie : j < 6 ? hi_tie : above);
    }
    const Params p({{"axis", 2.0}});
    for (const char* k : {"cpu.simd.dequantize.bf16", "cpu.scalar.dequantize.bf16"}) {
        const auto y = run_kernel(*builtin_registry().find(k), p, {q.view(), s.view()});
        for (std::int64_t j = 0; j < 9; ++j) {
            const double want = (j % 2 ? -1 : 1) * (j < 3 ? 1.0 : j < 6 ? 1 + 0x1p-6 : 1 + 0x1p-7);
            EXPECT_EQ(y[0].value(j), want) << k << " element " << j;
        }
    }
}

}  // namespace int8_kernel_test
