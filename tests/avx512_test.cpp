// The AVX-512 paths (impls/cpu/isa.hpp: only where has_avx512()).  Most must
// give the same bits as the AVX2 paths they replace, which the proofs, sweeps
// and golden profiles were established on: those tests run a kernel twice on
// one machine, once with cpu::Avx2Only alive, and compare the outputs bit for
// bit.  The FP32 table kernels (run_lanes16: sigmoid, silu, gelu_erf,
// gelu_tanh, softplus, geglu, situ_glu at its default caps) have their own
// proofs and give other bits within the same 1-ulp budget; for them
// Fp32TableKernelsLanesStandAlone checks that each lane's value depends on its
// own inputs only and that the lanes sent to the double path get the AVX2
// path's bits.  Skipped on CPUs without AVX-512 (the AVX2 paths are then the
// only ones, and every other test covers them).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <optional>
#include <string>
#include <vector>

#include "impls/cpu/convert.hpp"
#include "impls/cpu/isa.hpp"
#include "impls/cpu/streaming.hpp"
#include "impls/registry.hpp"
#include "numerics/format.hpp"
#include "numerics/tensor.hpp"

namespace avx512_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

const char* const kUnary[] = {"sigmoid", "silu", "gelu_erf", "gelu_tanh", "softplus", "softcap"};

// A [1, n] view of t starting `skip` elements in: misaligned heads and odd tails.
TensorView slice(const Tensor& t, std::int64_t skip, std::int64_t n) {
    auto* data = static_cast<char*>(const_cast<void*>(t.data())) + skip * static_cast<std::int64_t>(info(t.format()).bytes);
    return TensorView::contiguous(data, t.format(), {1, n});
}

// Every 16-bit pattern, repeated to fill the tensor; `mul` odd (a permutation).
Tensor all_patterns(Format f, std::vector<std::int64_t> shape, unsigned mul = 40503) {
    Tensor t(f, std::move(shape));
    auto* p = static_cast<std::uint16_t*>(t.data());
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<std::uint16_t>(i * mul);
    return t;
}

// The kernel's output bytes on `in`, written into `out`.
std::vector<std::uint8_t> run(const KernelInfo& k, const std::vector<TensorView>& in, Tensor& out,
                              const Params& p) {
    k.fn(KernelCall{p, in, {out.view()}});
    const auto* b = static_cast<const std::uint8_t*>(out.data());
    return {b, b + out.bytes()};
}

// Both paths write into the same output tensor: where a streamed row's head
// is peeled depends on the output's address, and with it which 8-element
// blocks are formed (a block with a lane outside the float-float range takes
// the double path whole), so two outputs at different alignments may differ
// in the last bit on either path alone.
// nan_as_class: every NaN output counts as equal to every other (the norms
// do not choose a NaN payload: it comes out of sums where NaN meets NaN in
// whatever operand order the compiler picked for each copy of the code).
void expect_paths_agree(const KernelInfo& k, const std::vector<TensorView>& in, const std::string& what,
                        bool nan_as_class = false, std::optional<Params> params = std::nullopt) {
    const Params p = params ? *params : Params::defaults(*find_op(k.op));
    Tensor out(k.out, {in[0].rows(), in[0].cols()});
    std::vector<std::uint8_t> wide = run(k, in, out, p);
    std::vector<std::uint8_t> narrow;
    {
        cpu::Avx2Only avx2;
        ASSERT_FALSE(cpu::has_avx512());
        narrow = run(k, in, out, p);
    }
    ASSERT_TRUE(cpu::has_avx512());
    if (nan_as_class) {
        const std::size_t bytes = static_cast<std::size_t>(info(k.out).bytes);
        const std::vector<std::uint8_t> nan = [&] {  // the format's canonical quiet NaN
            Tensor t(k.out, {1});
            t.set_value(0, NAN);
            const auto* b = static_cast<const std::uint8_t*>(t.data());
            return std::vector<std::uint8_t>(b, b + bytes);
        }();
        for (std::vector<std::uint8_t>* v : {&wide, &narrow})
            for (std::size_t i = 0; i + bytes <= v->size(); i += bytes) {
                std::uint64_t bits = 0;
                std::memcpy(&bits, v->data() + i, bytes);
                if (std::isnan(decode(k.out, bits))) std::memcpy(v->data() + i, nan.data(), bytes);
            }
    }
    EXPECT_TRUE(wide == narrow) << k.name << " " << what << ": the AVX-512 output differs from the AVX2 output";
}

TEST(Avx512, Avx2OnlyCapsTheChoice) {
    if (!cpu::has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or CONFORM_ISA caps it)";
    EXPECT_STREQ(cpu::isa_name(), "avx512");
    {
        cpu::Avx2Only avx2;
        EXPECT_FALSE(cpu::has_avx512());
        EXPECT_STREQ(cpu::isa_name(), "avx2");
    }
    EXPECT_TRUE(cpu::has_avx512());
}

// vcvtneps2bf16 with its subnormal fallback against the AVX2 rounding, on
// every one of the 2^32 float bit patterns (8 consecutive patterns per
// vector, so every block with a subnormal lane is in there too).
CONFORM_AVX512_BF16 std::uint64_t bf16_rounding_mismatches() {
    std::uint64_t bad = 0;
    const __m256i step = _mm256_set1_epi32(8);
    __m256i bits = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (std::uint64_t i = 0; i < (std::uint64_t{1} << 32); i += 8) {
        const __m256 v = _mm256_castsi256_ps(bits);
        const __m128i a = cpu::narrow8_bf16(v), b = cpu::narrow8(v, Format::bf16);
        bad += _mm_movemask_epi8(_mm_cmpeq_epi8(a, b)) != 0xffff;
        bits = _mm256_add_epi32(bits, step);
    }
    return bad;
}

// The 16-lane form (narrow16_bf16, the bf16 norms' stores) against
// narrow16, which SixteenLaneConversionsMatchAvx2 holds to narrow8.
CONFORM_AVX512_BF16 std::uint64_t bf16_rounding16_mismatches() {
    std::uint64_t bad = 0;
    __m512i bits = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (std::uint64_t i = 0; i < (std::uint64_t{1} << 32); i += 16) {
        const __m512 v = _mm512_castsi512_ps(bits);
        const __m256i a = cpu::narrow16_bf16(v), b = cpu::narrow16(v, Format::bf16);
        bad += _mm256_movemask_epi8(_mm256_cmpeq_epi8(a, b)) != -1;
        bits = _mm512_add_epi32(bits, _mm512_set1_epi32(16));
    }
    return bad;
}

TEST(Avx512, Bf16RoundingMatchesAvx2OnEveryFloat) {
    if (!cpu::has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU (or CONFORM_ISA caps it)";
    EXPECT_EQ(bf16_rounding_mismatches(), 0u) << "8-float blocks where vcvtneps2bf16 + fallback differs from narrow8";
    EXPECT_EQ(bf16_rounding16_mismatches(), 0u) << "16-float blocks where narrow16_bf16 differs from narrow16";
}

// narrow16 against narrow8 on every float bit pattern (16 consecutive
// patterns per vector: both halves against narrow8), and widen16 against
// load8 on every 16-bit pattern, for fp16 and bf16.
CONFORM_AVX512 std::uint64_t narrow16_mismatches(Format f) {
    std::uint64_t bad = 0;
    __m512i bits = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (std::uint64_t i = 0; i < (std::uint64_t{1} << 32); i += 16) {
        const __m512 v = _mm512_castsi512_ps(bits);
        alignas(32) std::uint16_t a[16], b[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(a), cpu::narrow16(v, f));
        _mm_store_si128(reinterpret_cast<__m128i*>(b), cpu::narrow8(cpu::lo8(v), f));
        _mm_store_si128(reinterpret_cast<__m128i*>(b + 8), cpu::narrow8(cpu::hi8(v), f));
        bad += std::memcmp(a, b, sizeof a) != 0;
        bits = _mm512_add_epi32(bits, _mm512_set1_epi32(16));
    }
    return bad;
}
CONFORM_AVX512 std::uint64_t widen16_mismatches(Format f) {
    std::uint64_t bad = 0;
    alignas(32) std::uint16_t x[16];
    for (std::uint32_t i = 0; i < 65536; i += 16) {
        for (int k = 0; k < 16; ++k) x[k] = static_cast<std::uint16_t>(i + k);
        alignas(64) float a[16], b[16];
        _mm512_store_ps(a, cpu::widen16(_mm256_load_si256(reinterpret_cast<const __m256i*>(x)), f));
        _mm256_store_ps(b, cpu::load8(x, f));
        _mm256_store_ps(b + 8, cpu::load8(x + 8, f));
        bad += std::memcmp(a, b, sizeof a) != 0;
    }
    return bad;
}

TEST(Avx512, SixteenLaneConversionsMatchAvx2) {
    if (!cpu::has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or CONFORM_ISA caps it)";
    for (Format f : {Format::fp16, Format::bf16}) {
        EXPECT_EQ(narrow16_mismatches(f), 0u) << info(f).name << ": 16-float blocks where narrow16 differs from narrow8";
        EXPECT_EQ(widen16_mismatches(f), 0u) << info(f).name << ": 16-value blocks where widen16 differs from load8";
    }
}

// 16-bit values of ordinary size (bf16 2^-4..2^3, fp16 2^-4..2^-1), random
// sign and significand from a fixed xorshift sequence; with huge_rows,
// every 7th row 2^100 times larger (bf16: its squares overflow fp32, the
// rescue path) or of 2^12..2^15 (fp16: its largest binades; fp16 squares
// cannot overflow fp32, so fp16 has no rescue row here).
Tensor ordinary16(Format f, std::int64_t rows, std::int64_t cols, bool huge_rows) {
    Tensor t(f, {rows, cols});
    auto* p = static_cast<std::uint16_t*>(t.data());
    const bool bf = f == Format::bf16;
    const unsigned frac = bf ? 7 : 10, low = bf ? 123 : 11, high = bf ? 227 : 27;
    std::uint32_t s = 2463534242u;
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        const std::uint32_t exp = (huge_rows && (i / cols) % 7 == 3 ? high : low) + s % (bf ? 8u : 4u);
        p[i] = static_cast<std::uint16_t>(((s >> 8) & 0x8000u) | (exp << frac) | ((s >> 16) & ((1u << frac) - 1)));
    }
    return t;
}

// The 16-bit norms (16-lane sums and scaling, Avx512Bf16Lanes; bf16 stores
// by vcvtneps2bf16) against their AVX2 path: rows of ordinary values whose
// lengths leave every remainder (32-element steps, one 8-block, a tail),
// rows for the rescue path, the streamed size, and rows of every bit
// pattern (NaN and Inf included).
TEST(Avx512, NormsMatchAvx2) {
    if (!cpu::has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU (or CONFORM_ISA caps it)";
    for (Format f : {Format::bf16, Format::fp16})
        for (const char* op : {"rms_norm", "layer_norm", "l2_norm"}) {
            const KernelInfo& k = *builtin_registry().find(std::string("cpu.simd.") + op + "." + name(f));
            const OpSpec& spec = *find_op(op);
            const auto check = [&](Tensor x, const std::string& what) {
                const std::int64_t cols = x.view().cols();
                std::vector<Tensor> in{std::move(x)};
                for (std::size_t i = 1; i < spec.inputs.size(); ++i) in.push_back(ordinary16(f, 1, cols, false));
                std::vector<TensorView> views{in[0].view()};  // then the [cols] weight and bias
                for (std::size_t i = 1; i < in.size(); ++i) views.push_back(TensorView::contiguous(in[i].data(), f, {cols}));
                expect_paths_agree(k, views, k.name + " " + what, /*nan_as_class=*/true);
            };
            for (std::int64_t cols : {4109, 8192, 37, 1000, 5})
                check(ordinary16(f, 29, cols, true), "29x" + std::to_string(cols));
            check(ordinary16(f, 1100, 8192, false), "1100x8192 streamed");
            check(all_patterns(f, {66, 1000}), "66x1000 every pattern");
        }
}

// Every input pattern, at four input alignments (lengths 65569, 65568,
// 65552, 65538: tails of 1, 0, 16 and 2 after the 32-element steps).
TEST(Avx512, ActivationTablesMatchAvx2OnEveryInput) {
    if (!cpu::has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or CONFORM_ISA caps it)";
    for (Format f : {Format::bf16, Format::fp16}) {
        const Tensor x = all_patterns(f, {1, 65536 + 64});
        for (const char* op : kUnary) {
            const KernelInfo& k = *builtin_registry().find(std::string("cpu.simd.") + op + "." + name(f));
            for (std::int64_t skip : {0, 1, 17, 31})
                expect_paths_agree(k, {slice(x, skip, 65536 + 33 - skip)}, "skip " + std::to_string(skip));
        }
    }
}

// Outputs of >= 16 MiB take the streaming-store branch.
TEST(Avx512, StreamedActivationTablesMatchAvx2) {
    if (!cpu::has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or CONFORM_ISA caps it)";
    const Tensor x = all_patterns(Format::bf16, {1024, 8192});
    ASSERT_TRUE(cpu::streaming_output(x.view()));
    for (const char* op : {"silu", "softcap"})
        expect_paths_agree(*builtin_registry().find(std::string("cpu.simd.") + op + ".bf16"), {x.view()}, "1024x8192");
}

// FP32 sigmoid, silu, gelu_erf, gelu_tanh, softplus, geglu and situ_glu
// (at its default caps) have their own AVX-512 kernel (run_lanes16: the
// 16-lane table evaluation for |x| < 3.9 (sigmoid, silu, softplus: 7.875), or -4.125 <= g < 3.875 and
// |u| < 8.75, whose accuracy Fp32Sweep.*TableRange check, and the double
// path for every other lane), so their bits differ from the AVX2 path's
// within the range.  What must hold: each lane's value depends on its
// inputs alone (not on its neighbours, the row's start or length, or
// streaming), and the lanes that take the double path get exactly the AVX2
// path's bits.  Rows mix in-range gates with +-3.9, 100, +-inf, NaNs with
// payloads, +-0 and subnormals (geglu: against gated_up's ups), at every
// start offset of a 64-byte line and odd lengths, and as a streamed tensor;
// every element must equal the kernel's value for its inputs alone (a
// one-element call).
float gelu_input(std::int64_t i) {
    switch (i % 23) {
        case 0: return 3.9f;
        case 1: return -3.9f;
        case 2: return std::nextafter(3.9f, 0.0f);
        case 3: return 100.0f;
        case 4: return -INFINITY;
        case 5: return std::bit_cast<float>(0x7fc00000u | static_cast<std::uint32_t>(i % 4093));
        case 6: return -0.0f;
        case 7: return -0x1p-140f;
        default: return static_cast<float>((i * 7919) % 20001 - 10000) * 4e-4f;  // |x| <= 4
    }
}
float gated_up(std::int64_t i);

// Lanes whose inputs send them to the double path (gelu_erf16_ok; for
// geglu GluFn::ok16, for situ_glu SituGluFn::ok16) or whose result is one
// the double path gives (NaN, infinite, >= FLT_MAX).
// gelu_tanh, softplus, sigmoid, silu: lanes outside the AVX2 path's
// float-float range (|x| <= 4.5, <= 64), which it computes by the double
// path too.
bool double_lane(const std::string& op, const std::vector<float>& x, float y) {
    if (!(std::fabs(y) < FLT_MAX)) return true;
    if (op == "gelu_tanh") return !(std::fabs(x[0]) <= 4.5f);
    if (op == "softplus" || op == "sigmoid" || op == "silu") return !(std::fabs(x[0]) <= 64.0f);
    const bool gate = op == "situ_glu" ? x[0] >= -4.125f && x[0] < 3.875f : std::fabs(x[0]) < 3.9f;
    if (!gate) return true;
    if (x.size() == 1) return false;
    const float p = std::fabs(x[0] * x[1]);
    return !(p >= 0x1p-100f || p == 0) || (op == "situ_glu" && !(std::fabs(x[1]) < 8.75f));
}

// Every `every`-th element is compared with its one-element call (all of
// them are compared with the AVX2 output where that applies).
void expect_lanes_stand_alone(const char* op, const std::vector<TensorView>& in, const std::string& what,
                              std::int64_t every = 1) {
    const KernelInfo& k = *builtin_registry().find(std::string("cpu.simd.") + op + ".fp32");
    const Params p = Params::defaults(*find_op(op));
    const std::size_t n_in = in.size();
    std::unordered_map<std::uint64_t, std::uint32_t> alone;  // input bits -> output bits of a one-element call
    const auto alone_value = [&](const std::vector<std::uint32_t>& x) {
        const std::uint64_t key = x[0] | (x.size() > 1 ? std::uint64_t{x[1]} << 32 : 0);
        if (auto it = alone.find(key); it != alone.end()) return it->second;
        std::vector<Tensor> one;
        std::vector<TensorView> views;
        for (std::uint32_t b : x) {
            one.emplace_back(Format::fp32, std::vector<std::int64_t>{1, 1});
            *static_cast<std::uint32_t*>(one.back().data()) = b;
        }
        for (const Tensor& t : one) views.push_back(t.view());
        Tensor out(Format::fp32, {1, 1});
        k.fn(KernelCall{p, views, {out.view()}});
        return alone[key] = *static_cast<const std::uint32_t*>(out.data());
    };
    Tensor out(Format::fp32, {in[0].rows(), in[0].cols()}), narrow(Format::fp32, {in[0].rows(), in[0].cols()});
    k.fn(KernelCall{p, in, {out.view()}});
    {
        cpu::Avx2Only avx2;
        k.fn(KernelCall{p, in, {narrow.view()}});
    }
    const auto* y = static_cast<const std::uint32_t*>(out.data());
    const auto* z = static_cast<const std::uint32_t*>(narrow.data());
    std::int64_t not_alone = 0, not_avx2 = 0, on_double = 0;
    std::vector<std::uint32_t> xb(n_in);
    std::vector<float> xf(n_in);
    for (std::int64_t i = 0; i < in[0].numel(); ++i) {
        for (std::size_t j = 0; j < n_in; ++j) {
            xb[j] = static_cast<const std::uint32_t*>(in[j].data)[i];
            xf[j] = std::bit_cast<float>(xb[j]);
        }
        if (i % every == 0) not_alone += y[i] != alone_value(xb);
        if (double_lane(op, xf, std::bit_cast<float>(y[i]))) ++on_double, not_avx2 += y[i] != z[i];
    }
    EXPECT_EQ(not_alone, 0) << op << " " << what << ": elements that differ from the value of their inputs alone";
    EXPECT_EQ(not_avx2, 0) << op << " " << what << ": double-path elements (of " << on_double << ") that differ from AVX2";
    EXPECT_GT(on_double, in[0].numel() / 20) << op << " " << what;
    EXPECT_LT(on_double, in[0].numel() * 3 / 4) << op << " " << what << ": too few lanes on the table path";
}

TEST(Avx512, Fp32TableKernelsLanesStandAlone) {
    if (!cpu::has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or CONFORM_ISA caps it)";
    Tensor g(Format::fp32, {1, 1000 + 64}), u(Format::fp32, {1, 1000 + 64});
    for (std::int64_t i = 0; i < g.numel(); ++i) {
        static_cast<float*>(g.data())[i] = gelu_input(i);
        static_cast<float*>(u.data())[i] = gated_up(i * 31);
    }
    for (std::int64_t skip = 0; skip < 16; ++skip) {
        const std::string what = "skip " + std::to_string(skip);
        for (const char* op : {"sigmoid", "silu", "gelu_erf", "gelu_tanh", "softplus"})
            expect_lanes_stand_alone(op, {slice(g, skip, 1000 + 3 * skip)}, what);
        for (const char* op : {"geglu", "situ_glu"})
            expect_lanes_stand_alone(op, {slice(g, skip, 1000 + 3 * skip), slice(u, skip, 1000 + 3 * skip)}, what);
    }
    Tensor bg(Format::fp32, {4200, 1001}), bu(Format::fp32, {4200, 1001});
    ASSERT_TRUE(cpu::streaming_output(bg.view()));
    for (std::int64_t i = 0; i < bg.numel(); ++i) {
        static_cast<float*>(bg.data())[i] = gelu_input(i * 5 + i / 1001);
        static_cast<float*>(bu.data())[i] = gated_up(i % 991 + 6);
    }
    for (const char* op : {"sigmoid", "silu", "gelu_erf", "gelu_tanh", "softplus"})
        expect_lanes_stand_alone(op, {bg.view()}, "4200x1001 streamed");
    for (const char* op : {"geglu", "situ_glu"})
        expect_lanes_stand_alone(op, {bg.view(), bu.view()}, "4200x1001 streamed", 7);
}

// The FP32 gated kernels against their AVX2 path: swiglu and swiglu_clamp
// (vec32_16 and the gated ff32_span16), situ_glu at caps other than the
// default (beta1 = 1, beta2 = 3: no table, the double path in 8 lanes,
// apply8_wide).  Gates: every 13th float
// in [2^-30, 64], every 61st elsewhere (inf and NaNs among them), both
// signs, in rows of 2^22 (the streaming branch).  Ups cycle through
// ordinary values of many magnitudes, huge ones (products past FLT_MAX:
// chunks redone by the AVX2 path), infinities, NaN and signed zeros.  Then
// a small row at every start offset of a 64-byte line.
// situ_glu at caps its fp32 tables do not hold for: the double path.
Params off_table_situ() { return Params({{"beta1", 1.0}, {"beta2", 3.0}}); }

float gated_up(std::int64_t i) {
    switch (i % 997) {
        case 0: return INFINITY;
        case 1: return -INFINITY;
        case 2: return NAN;
        case 3: return 0x1.8p127f;
        case 4: return -0.0f;
        case 5: return 0x1p-149f;
        default: return std::ldexp(static_cast<float>((i * 7919) % 20001 - 10000) * 1e-3f, static_cast<int>(i % 61) - 30);
    }
}

TEST(Avx512, Fp32GatedFloatFloatMatchesAvx2) {
    if (!cpu::has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or CONFORM_ISA caps it)";
    constexpr std::int64_t kRow = std::int64_t{1} << 22;
    constexpr std::uint32_t kMin = 0x30800000, kMax = 0x42800000;  // 2^-30, 64
    Tensor g(Format::fp32, {1, kRow}), u(Format::fp32, {1, kRow}), out(Format::fp32, {1, kRow});
    auto* gb = static_cast<std::uint32_t*>(g.data());
    auto* ub = static_cast<float*>(u.data());
    for (std::int64_t i = 0; i < kRow; ++i) ub[i] = gated_up(i);
    for (const char* op : {"swiglu", "swiglu_clamp", "situ_glu"}) {
        const KernelInfo& k = *builtin_registry().find(std::string("cpu.simd.") + op + ".fp32");
        const Params p = op == std::string("situ_glu") ? off_table_situ() : Params::defaults(*find_op(op));
        std::vector<std::uint8_t> wide(out.bytes());
        std::int64_t differing_rows = 0, rows = 0;
        for (std::uint32_t sign : {0u, 0x80000000u}) {
            std::uint64_t next = 0;
            while (next < 0x80000000u) {
                for (std::int64_t i = 0; i < kRow; ++i) {
                    gb[i] = sign | static_cast<std::uint32_t>(std::min<std::uint64_t>(next, 0x7fffffff));
                    next = next < kMin ? std::min<std::uint64_t>(next + 61, kMin) : next + (next < kMax ? 13 : 61);
                }
                k.fn(KernelCall{p, {g.view(), u.view()}, {out.view()}});
                std::memcpy(wide.data(), out.data(), wide.size());
                cpu::Avx2Only avx2;
                k.fn(KernelCall{p, {g.view(), u.view()}, {out.view()}});
                differing_rows += std::memcmp(wide.data(), out.data(), wide.size()) != 0;
                ++rows;
            }
        }
        EXPECT_EQ(differing_rows, 0) << k.name << ": rows of 2^22 (of " << rows << ") where AVX-512 and AVX2 differ";
        Tensor gs(Format::fp32, {1, 4096 + 64}), us(Format::fp32, {1, 4096 + 64});
        for (std::int64_t i = 0; i < gs.numel(); ++i) {
            gs.set_value(i, i % 997 == 5 ? 100.0 : (i % 301 - 150) * 0.029);
            us.set_value(i, gated_up(i * 31));
        }
        for (std::int64_t skip = 0; skip < 16; ++skip)
            expect_paths_agree(k, {slice(gs, skip, 4096 + 31 - skip), slice(us, skip, 4096 + 31 - skip)},
                               "skip " + std::to_string(skip), false, p);
    }
}

// Streamed FP32 rows (>= 16 MiB) of 1001 floats, whose starts fall at every
// multiple of 4 bytes modulo 64: each row has one gate outside the
// float-float range (NaN, or 100) among its first 16 elements, so the
// 8-element blocks around the head peeled for streaming stores must be
// drawn where the AVX2 path draws them (a block with such a lane takes the
// double path whole, which rounds its other lanes differently): the gated
// kernels with 16-lane float-float paths (swiglu, swiglu_clamp; situ_glu at
// caps without a table).
TEST(Avx512, Fp32StreamedRowHeadsMatchAvx2) {
    if (!cpu::has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or CONFORM_ISA caps it)";
    constexpr std::int64_t kRows = 4200, kCols = 1001;
    Tensor x(Format::fp32, {kRows, kCols});
    ASSERT_TRUE(cpu::streaming_output(x.view()));
    for (std::int64_t r = 0; r < kRows; ++r)
        for (std::int64_t c = 0; c < kCols; ++c)
            x.set_value(r * kCols + c, c == r % 16 ? (r % 2 ? NAN : 100.0) : ((r * 7 + c) % 301 - 150) * 0.029);
    // The gated kernels with 16-lane paths, x as the gate (a NaN gate passes
    // swiglu_clamp's fp32_ok: the cap replaces it) and ordinary ups.
    Tensor u(Format::fp32, {kRows, kCols});
    for (std::int64_t i = 0; i < u.numel(); ++i) static_cast<float*>(u.data())[i] = gated_up(i % 991 + 6);
    for (const char* op : {"swiglu", "swiglu_clamp", "situ_glu"})
        expect_paths_agree(*builtin_registry().find(std::string("cpu.simd.") + op + ".fp32"), {x.view(), u.view()},
                           "4200x1001 streamed", false,
                           op == std::string("situ_glu") ? std::optional(off_table_situ()) : std::nullopt);
}

// The gated table kernels' 16-lane path (gated_lut_avx512: gathers,
// widen16, narrow16) against the AVX2 blocks: every gate pattern (NaNs, and
// the far gates whose 8-element blocks take the double path) against two
// orders of up patterns, misaligned starts, odd tails, and the streamed size.
// 16-element steps (from the row start) whose gates are all >= -12 or NaN:
// they pass every gated functor's float_ok, so they take gated_lut16.
std::int64_t fast_steps(const Tensor& g) {
    const TensorView v = g.view();
    std::int64_t fast = 0;
    for (std::int64_t r = 0; r < v.rows(); ++r)
        for (std::int64_t c = 0; c + 16 <= v.cols(); c += 16) {
            bool ok = true;
            for (std::int64_t j = 0; j < 16; ++j) {
                const double x = v.value(r * v.cols() + c + j);
                ok &= std::isnan(x) || x >= -12;
            }
            fast += ok;
        }
    return fast;
}

TEST(Avx512, GatedTablesMatchAvx2) {
    if (!cpu::has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or CONFORM_ISA caps it)";
    for (Format f : {Format::fp16, Format::bf16}) {
        // Consecutive gate patterns (16-element steps share sign and
        // exponent: most take gated_lut16, those of far negative gates the
        // AVX2 blocks) against scattered ups; NaN meets NaN with different
        // payloads.  Then the scattered gates (every step falls back).
        const Tensor g = all_patterns(f, {1, 65536 + 64}, 1), u = all_patterns(f, {1, 65536 + 64}, 12345);
        const Tensor gs = all_patterns(f, {1024, 8192}, 1), us = all_patterns(f, {1024, 8192}, 3);
        ASSERT_GT(fast_steps(g), 1000);
        ASSERT_GT(fast_steps(gs), 100000);
        for (const char* op : {"swiglu", "geglu", "situ_glu", "swiglu_clamp"}) {
            const KernelInfo& k = *builtin_registry().find(std::string("cpu.simd.") + op + "." + info(f).name);
            for (std::int64_t skip : {0, 3, 8})
                expect_paths_agree(k, {slice(g, skip, 65536 + 5), slice(u, skip, 65536 + 5)},
                                   "skip " + std::to_string(skip));
            expect_paths_agree(k, {slice(u, 0, 65536), slice(g, 0, 65536)}, "scattered gates");
            expect_paths_agree(k, {gs.view(), us.view()}, "1024x8192");
        }
    }
}

}  // namespace

}  // namespace avx512_test
