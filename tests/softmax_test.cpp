// softmax kernels against the oracle: the derived bound, the special rows,
// and the property suite over every registered softmax kernel and mutant.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <vector>

#include "impls/cpu/isa.hpp"
#include "impls/cpu/simd_math.hpp"
#include "impls/registry.hpp"
#include "kernel_suite.hpp"
#include "oracle/bound.hpp"
#include "oracle/eval.hpp"
#include "oracle/structured.hpp"
#include "properties/generators.hpp"
#include "properties/verdict.hpp"

namespace softmax_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

namespace {

Tensor row_of(Format f, const std::vector<double>& v) {
    Tensor t(f, {1, static_cast<std::int64_t>(v.size())});
    for (std::size_t i = 0; i < v.size(); ++i) t.set_value(static_cast<std::int64_t>(i), v[i]);
    return t;
}

std::vector<double> bound_of(const Tensor& x, Format acc, Format out) {
    const OpSpec& op = *find_op("softmax");
    const auto r = oracle::evaluate(op, Params(), {x.view()}, out);
    oracle::RowData row;
    for (std::int64_t i = 0; i < x.numel(); ++i) row.x.push_back(x.value(i)), row.y.push_back(r.exact[i]);
    return oracle::row_bound(op, Params(), row, acc, out);
}

// The bound of a uniform row of n equal logits: y = 1/n, no exp argument
// error (x - m = 0), so rel = (1 + e_exp)(1 + u)^2 / (1 - theta) - 1 with
// theta = (1 + e_exp)(1 + gamma_{n-1}) - 1: a few n u, and the fp16 half ulp.
TEST(SoftmaxBound, UniformRowIsAFewUnitRoundoffs) {
    const int n = 64;
    const Tensor x = row_of(Format::fp16, std::vector<double>(n, 0.5));
    const auto b = bound_of(x, Format::fp32, Format::fp16);
    const double u = std::ldexp(1.0, -24), y = 1.0 / n;
    const double e = 4 * u, theta = (1 + e) * (1 + oracle::gamma(n - 1, u)) - 1;
    const double rel = (1 + e) * (1 + u) * (1 + u) / (1 - theta) - 1;
    EXPECT_NEAR(b[0], y * rel + 0.5 * ulp_at(Format::fp16, y * (1 + rel)) + (n + 2) * std::ldexp(1.0, -149),
                1e-3 * b[0]);
    // Half an fp16 ulp dominates: one fp16 ulp away from 1/n fails the bound.
    EXPECT_LT(b[0], ulp_at(Format::fp16, y));
}

// The bound assumes the kernel's exp is within 2 ulps (4u relative) of e^d
// for d <= 0 while the result is a normal float.  Check vf::exp_neg on every
// 61st float in [-87, 0] against double exp (itself within 1 ulp of double,
// 2^-29 of a float ulp).
CONFORM_AVX2 double max_exp_error_ulps() {
    double worst = 0;
    alignas(32) float in[8], out[8];
    std::uint32_t bits = 0x80000000u;  // -0.0, then more negative
    while (true) {
        for (int j = 0; j < 8; ++j, bits += 61) std::memcpy(&in[j], &bits, 4);
        if (in[0] < -87.0f) break;
        _mm256_store_ps(out, cpu::vf::exp_neg(_mm256_load_ps(in)));
        for (int j = 0; j < 8; ++j) {
            const double want = std::exp(static_cast<double>(in[j]));
            if (want < 0x1p-126) continue;
            worst = std::max(worst, std::fabs(out[j] - want) / ulp_at(Format::fp32, want));
        }
    }
    return worst;
}

// A huge o_a under a weight e^(lse_a - lse) below FP32's normal range: expf
// returns the weight to within 2 subnormal ulps only (absolute), which the
// bound must carry as 2 eta |o_a| (docs/softmax.md "lse_merge kernel"; the
// case a 30-case run found, 336 times the bound that assumed a relative error).
TEST(LseMergeKernels, SubnormalWeightTimesHugeStateStaysWithinBound) {
    for (const char* name : {"cpu.scalar.lse_merge.bf16", "cpu.scalar.lse_merge.fp32"}) {
        const KernelInfo& k = *builtin_registry().find(name);
        for (double d : {-88.0, -95.0, -103.0, -103.3, -104.0}) {
            const Tensor oa = row_of(k.in, {std::ldexp(1.0, 83), -std::ldexp(1.5, 90), 1.0});
            const Tensor ob = row_of(k.in, {std::ldexp(1.0, -77), 3.0, -2.0});
            Tensor la(Format::fp32, {1}), lb(Format::fp32, {1});
            la.set_value(0, d), lb.set_value(0, 0.0);
            const props::CaseResult r = props::check_case(k, Params(), {oa.view(), la.view(), ob.view(), lb.view()});
            EXPECT_TRUE(r.pass) << name << " lse_a - lse_b = " << d << ": " << r.message;
        }
    }
}

// A kernel that returns the correctly rounded merge, computed in a format
// wider than the one it stores lse in (declared acc), is as good as a merge
// can be: it must pass.  The lse bound holds the stored lse to the
// arithmetic's error plus half an ulp of lse's format; one ulp off the
// correctly rounded value is outside it.
KernelInfo correctly_rounded_merge(Format acc, Format lse_format, int lse_ulps_off) {
    KernelInfo k;
    k.name = "test.correctly_rounded.lse_merge";
    k.op = "lse_merge";
    k.in = k.out = Format::fp32;
    k.acc = acc;
    k.out_formats = {Format::fp32, lse_format};
    k.fn = [lse_format, lse_ulps_off](const KernelCall& c) {
        const oracle::StructuredResult r =
            oracle::evaluate_structured("lse_merge", c.params, c.in, {Format::fp32, lse_format});
        for (std::size_t o = 0; o < c.out.size(); ++o)
            for (std::int64_t i = 0; i < c.out[o].numel(); ++i) c.out[o].set_bits(i, r.rounded[o].bits(i));
        for (std::int64_t i = 0; i < c.out[1].numel() && lse_ulps_off; ++i) {
            const double l = r.rounded[1].value(i);
            if (std::isfinite(l) && l != 0) c.out[1].set_bits(i, encode(lse_format, l + lse_ulps_off * ulp_at(lse_format, l)));
        }
    };
    return k;
}

// How many of `cases` generated merges kernel k fails (the first message kept).
int failed_merges(const KernelInfo& k, int cases, std::string* first) {
    int failed = 0;
    for (int seed = 1; seed <= cases; ++seed) {
        const props::Case c = props::build_case(props::structured_spec(
            "lse_merge", Format::fp32, {1 + seed % 8, 8}, Params(), props::Family::normal, 0, 1000 + seed, 0));
        const props::CaseResult r = props::check_case(k, c.params, c.views());
        if (!r.pass && failed++ == 0) *first = r.message;
    }
    return failed;
}

// The unfair failure of issue 24: "got 0x1.0b4d4cp+2, want 0x1.0b4d4cp+2,
// utilization 1.9e8" -- lse correctly rounded to fp32 from a double merge.
TEST(LseMergeBound, CorrectlyRoundedLseInANarrowerFormatPasses) {
    for (const auto& [acc, lse_format] : {std::pair{Format::fp64, Format::fp32}, std::pair{Format::fp32, Format::bf16},
                                          std::pair{Format::fp64, Format::fp16}}) {
        std::string first;
        EXPECT_EQ(failed_merges(correctly_rounded_merge(acc, lse_format, 0), 40, &first), 0)
            << "acc " << name(acc) << ", lse " << name(lse_format) << ": " << first;
        // Not vacuous: the neighbour of the correctly rounded lse is out.
        EXPECT_GE(failed_merges(correctly_rounded_merge(acc, lse_format, 1), 40, &first), 30)
            << "acc " << name(acc) << ", lse " << name(lse_format);
    }
}

// The 16-lane exp (exp_neg_l<F16>, the AVX-512 softmax path) gives the
// 8-lane one's bits on every 61st float in [-105, 0] and on -inf.
CONFORM_AVX512 int exp16_differences() {
    int differ = 0;
    alignas(64) float in[16], out16[16], out8[16];
    std::uint32_t bits = 0x80000000u;
    for (bool done = false; !done;) {
        for (int j = 0; j < 16; ++j, bits += 61) std::memcpy(&in[j], &bits, 4);
        done = in[0] < -105.0f;
        if (done) in[15] = -INFINITY;
        _mm512_store_ps(out16, cpu::vf::exp_neg_l<cpu::F16, false>(_mm512_load_ps(in), _mm512_load_ps(in)));
        for (int h = 0; h < 2; ++h) _mm256_store_ps(out8 + 8 * h, cpu::vf::exp_neg(_mm256_load_ps(in + 8 * h)));
        differ += std::memcmp(out16, out8, sizeof out8) != 0;
    }
    return differ;
}

TEST(SoftmaxKernels, SixteenLaneExpEqualsTheEightLaneOne) {
    if (!cpu::has_avx512()) GTEST_SKIP() << "no AVX-512";
    EXPECT_EQ(exp16_differences(), 0);
}

TEST(SoftmaxKernels, VectorExpIsWithinTwoUlps) {
    if (!cpu::has_avx2()) GTEST_SKIP() << "no AVX2";
    const double worst = max_exp_error_ulps();
    EXPECT_LE(worst, 2.0);
    RecordProperty("max_exp_error_ulps", std::to_string(worst));
    std::printf("vf::exp_neg: max error %.3f ulp over [-87, 0]\n", worst);
}

// A kernel that forgets to subtract the max fails on logits near 1e4; the
// shipped kernels handle them within the bound.
TEST(SoftmaxKernels, LargeLogitsStayWithinBound) {
    for (const char* name : {"cpu.simd.softmax.fp32", "cpu.scalar.softmax.fp32", "mutant.softmax.no_max_shift.fp32"}) {
        const KernelInfo* k = builtin_registry().find(name);
        ASSERT_NE(k, nullptr) << name;
        const Tensor x = row_of(Format::fp32, {1e4, 1e4 - 1, 1e4 - 2.5, 9990, 1e4 - 0.25});
        const bool mutant = k->role == Role::mutant;
        EXPECT_EQ(props::check_case(*k, Params(), {x.view()}).pass, !mutant) << name;
    }
}

// Special rows: NaN or +inf poisons the row, all -inf gives +0 everywhere.
TEST(SoftmaxKernels, SpecialRowsFollowTheOracle) {
    for (const char* name : {"cpu.simd.softmax.bf16", "cpu.scalar.softmax.fp16", "cpu.simd.softmax.fp32"}) {
        const KernelInfo* k = builtin_registry().find(name);
        ASSERT_NE(k, nullptr) << name;
        for (const std::vector<double>& v : {std::vector<double>{-INFINITY, -INFINITY, -INFINITY},
                                             std::vector<double>{1, NAN, 2}, std::vector<double>{1, INFINITY, 2},
                                             std::vector<double>{-INFINITY, 3, -INFINITY}}) {
            const Tensor x = row_of(k->in, v);
            const auto r = props::check_case(*k, Params(), {x.view()});
            EXPECT_TRUE(r.pass) << name << ": " << r.message;
        }
    }
}

// Rows of several 1024-element chunks whose running max grows chunk by chunk
// (each earlier chunk rescaled once), whose first chunks sit 100 below the
// max (recomputed from x, no subnormal factor) or are all -inf (a masked
// prefix), and whose NaN or +inf comes in a later chunk: the chunked online
// form of cpu.simd.softmax within softmax_bound, on the AVX-512 path and
// on the AVX2 path (cpu::Avx2Only) alike.
TEST(SoftmaxKernels, ChunkedOnlineFormOnBothPaths) {
    std::mt19937_64 g(41);
    std::normal_distribution<double> normal;
    using Shape = std::function<double(long, long)>;  // element i of n
    const std::vector<std::pair<const char*, Shape>> rows = {
        {"rising", [&](long i, long) { return normal(g) + 10.0 * static_cast<double>(i / 1024); }},
        {"far first", [&](long i, long) { return normal(g) - (i < 1024 ? 100.0 : 0.0); }},
        {"masked prefix", [&](long i, long) { return i < 2048 ? -INFINITY : normal(g); }},
        {"late NaN", [&](long i, long n) { return i == n - 3 ? NAN : normal(g); }},
        {"late +inf", [&](long i, long n) { return i == n - 1 ? INFINITY : normal(g); }}};
    for (const bool avx2 : {false, true}) {
        if (!cpu::has_avx2() || (!avx2 && !cpu::has_avx512())) continue;
        std::optional<cpu::Avx2Only> cap;
        if (avx2) cap.emplace();
        for (const char* name : {"cpu.simd.softmax.fp32", "cpu.simd.softmax.fp16", "cpu.simd.softmax.bf16"}) {
            const KernelInfo* k = builtin_registry().find(name);
            ASSERT_NE(k, nullptr) << name;
            for (const long n : {1025L, 3000L, 4096L, 5003L})
                for (const auto& [what, f] : rows) {
                    std::vector<double> v(static_cast<std::size_t>(n));
                    for (long i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = f(i, n);
                    const Tensor x = row_of(k->in, v);
                    const auto r = props::check_case(*k, Params(), {x.view()});
                    EXPECT_TRUE(r.pass) << name << (avx2 ? " (avx2)" : " (avx512)") << " n=" << n << " " << what << ": "
                                        << r.message;
                }
        }
    }
}

// An output beyond the caches (>= 16 MiB) is written by streaming stores on
// the rows aligned for them (n = 4100: every other fp32 row is not 64-byte
// aligned): each row's bits equal those of the same row computed alone.
TEST(SoftmaxKernels, StreamedOutputsEqualRowsComputedAlone) {
    std::mt19937 g(43);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (const Format f : {Format::fp32, Format::bf16}) {
        const KernelInfo* k = builtin_registry().find(std::string("cpu.simd.softmax.") + name(f));
        ASSERT_NE(k, nullptr);
        const std::int64_t cols = 4100, rows = (std::int64_t{16} << 20) / (cols * info(f).bytes) + 1;
        Tensor x(f, {rows, cols});
        for (std::int64_t i = 0; i < x.numel(); ++i) x.set_value(i, normal(g));
        const Tensor y = run_kernel(*k, Params(), {x.view()})[0];
        for (const std::int64_t r : {std::int64_t{0}, std::int64_t{1}, rows / 2 + 1, rows - 1}) {
            Tensor xr(f, {1, cols});
            for (std::int64_t j = 0; j < cols; ++j) xr.set_bits(j, x.bits(r * cols + j));
            const Tensor yr = run_kernel(*k, Params(), {xr.view()})[0];
            for (std::int64_t j = 0; j < cols; ++j)
                ASSERT_EQ(yr.bits(j), y.bits(r * cols + j)) << name(f) << " row " << r << " col " << j;
        }
    }
}

}  // namespace

CONFORM_FAMILY_SUITES(Softmax, "softmax");

}  // namespace softmax_test
