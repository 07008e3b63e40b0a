// The CUDA kernels (impls/cuda, docs/cuda.md): every property suite passes
// under the CPU emulation (backend cuda-emu, run in CI on every commit) and
// on the GPU when one is present (backend cuda, skipped without one); on a
// machine without a usable GPU every cuda kernel is "not provided" with the
// reason.
#include <algorithm>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>
#include <tuple>

#include "impls/cuda/cuda.hpp"
#include "kernel_suite.hpp"
#include "oracle/fp8.hpp"
#include "oracle/gdn_bound.hpp"
#include "oracle/matmul.hpp"
#include "oracle/structured.hpp"
#include "properties/gdn.hpp"
#include "properties/generators.hpp"
#include "properties/verdict.hpp"

namespace conform::cuda_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)
namespace {

std::vector<std::string> names(const BackendRegistry& b, Role role) {
    std::vector<std::string> v;
    for (const KernelInfo& k : b.kernels.all())
        if (k.role == role) v.push_back(k.name);
    return v;
}

// The emulated kernels' suites search half CONFORM_CASES (CONFORM_EMU_CASES
// overrides): the emulation runs every thread as a fiber, some fifty times a
// CPU kernel's time, and what it checks -- that the .cu logic computes the
// kernel's results -- shows on any case; RapidCheck's sizes still reach
// their largest by the last case.  The mutant kills below search the full
// count and then twice it; on a GPU the suites run the full count.
void expect_suite_passes(const KernelInfo& k) {
    props::RunConfig cfg = testing::env_config();
    cfg.cases = static_cast<int>(testing::env_number("CONFORM_EMU_CASES", static_cast<std::uint64_t>(std::max(1, cfg.cases / 2))));
    const auto r = props::run_suite(k, cfg);
    ASSERT_FALSE(r.properties.empty());
    for (const auto& p : r.properties)
        EXPECT_TRUE(p.passed) << k.backend << " " << k.name << " / " << p.name << " (seed " << cfg.seed
                              << "): " << p.message << "\n"
                              << p.counterexample;
}

class CudaEmuKernel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEmuKernel, AllPropertiesPass) { expect_suite_passes(*cuda_emu_registry().kernels.find(GetParam())); }

INSTANTIATE_TEST_SUITE_P(Emu, CudaEmuKernel, ::testing::ValuesIn(names(cuda_emu_registry(), Role::kernel)),
                         testing::test_name);

// Every GPU mutant fails at least one property under the emulation.
class CudaEmuMutant : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEmuMutant, IsKilled) {
    const KernelInfo& k = *cuda_emu_registry().kernels.find(GetParam());
    EXPECT_TRUE(testing::killed(k)) << k.name << " (" << k.description << ") survived";
}

INSTANTIATE_TEST_SUITE_P(Emu, CudaEmuMutant, ::testing::ValuesIn(names(cuda_emu_registry(), Role::mutant)),
                         testing::test_name);

// Every family the backend covers has a kernel in each storage format, and
// each name is the one the cuda backend gives the same source.
TEST(CudaBackend, EmulationAndDeviceShareTheKernelNames) {
    std::set<std::string> emu, dev;
    int mutants = 0;
    for (const KernelInfo& k : cuda_emu_registry().kernels.all()) {
        emu.insert(k.name);
        EXPECT_EQ(k.backend, "cuda-emu");
        EXPECT_EQ(k.name.rfind(k.role == Role::mutant ? "mutant.cuda." : "cuda.", 0), 0u) << k.name;
        EXPECT_NE(k.role, Role::baseline) << k.name;
        mutants += k.role == Role::mutant;
    }
    EXPECT_GE(mutants, 8);
    for (const KernelInfo& k : cuda_registry().kernels.all()) dev.insert(k.name);
    for (const NotProvided& n : cuda_registry().not_provided) dev.insert(n.kernel);
    EXPECT_EQ(emu, dev);
    EXPECT_GE(emu.size() - mutants, 39u);
}

// The two softmax conventions for an all -inf row are both judged: each
// kernel fails under the other's declaration.
TEST(CudaBackend, EachMaskedRowConventionFailsUnderTheOther) {
    for (const char* op : {"softmax", "attention"}) {
        KernelInfo zero = *cuda_emu_registry().kernels.find(std::string("cuda.") + op + ".fp32");
        KernelInfo nan = *cuda_emu_registry().kernels.find(std::string("cuda.") + op + ".nan_rows.fp32");
        zero.conventions = {{"masked_row", "nan"}};
        nan.conventions.clear();
        props::RunConfig cfg;
        cfg.cases = 50;
        cfg.fail_fast = true;  // only the verdict matters here
        cfg.shrink = false;
        cfg.infer_conventions = false;
        EXPECT_FALSE(props::run_suite(zero, cfg).passed) << op;
        EXPECT_FALSE(props::run_suite(nan, cfg).passed) << op;
    }
}

namespace {

// The outcome of the named property in k's suite.
const report::PropertyOutcome* outcome(const report::KernelReport& r, const std::string& name) {
    for (const auto& p : r.properties)
        if (p.name == name) return &p;
    return nullptr;
}

}  // namespace

// Determinism: a kernel whose two runs differ fails it; a kernel right
// only while its grid covers the tensor (no grid-stride loop) passes every
// other property and fails it on the one-block launch.
TEST(CudaDeterminism, DifferingRunsAndUncoveredGridsFail) {
    props::RunConfig cfg;
    cfg.cases = 40;
    KernelInfo flaky = *cuda_emu_registry().kernels.find("cuda.silu.fp32");
    flaky.launches.clear();
    const KernelFn fn = flaky.fn;
    flaky.fn = [fn, calls = std::make_shared<int>(0)](const KernelCall& c) {
        fn(c);
        if (++*calls % 2 == 0 && c.out[0].numel() > 0) c.out[0].set_bits(0, c.out[0].bits(0) ^ 1);
    };
    const report::KernelReport a = props::run_suite(flaky, cfg);
    ASSERT_NE(outcome(a, "determinism"), nullptr);
    EXPECT_FALSE(outcome(a, "determinism")->passed);
    EXPECT_NE(outcome(a, "determinism")->message.find("two runs on the same inputs differ"), std::string::npos)
        << outcome(a, "determinism")->message;

    const report::KernelReport b =
        props::run_suite(*cuda_emu_registry().kernels.find("mutant.cuda.sigmoid.no_grid_stride.fp32"), cfg);
    for (const auto& p : b.properties) EXPECT_EQ(p.passed, p.name != "determinism") << p.name << ": " << p.message;
    EXPECT_NE(outcome(b, "determinism")->message.find("launch 'one block"), std::string::npos);

    // The CPU kernels are not asked (single-threaded, deterministic by construction).
    EXPECT_EQ(outcome(props::run_suite(*builtin_registry().find("cpu.simd.silu.fp32"), cfg), "determinism"), nullptr);
}

namespace {

// q [hq, lq, d], k [hkv, lk, d], v [hkv, lk, d] of normal values in format f.
std::vector<Tensor> attention_inputs(Format f, std::int64_t hq, std::int64_t hkv, std::int64_t lq, std::int64_t lk,
                                     std::int64_t d, std::uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<double> n;
    std::vector<Tensor> t = {Tensor(f, {hq, lq, d}), Tensor(f, {hkv, lk, d}), Tensor(f, {hkv, lk, d})};
    for (Tensor& x : t)
        for (std::int64_t i = 0; i < x.numel(); ++i) x.set_value(i, n(g));
    return t;
}

std::vector<TensorView> views(const std::vector<Tensor>& t) {
    std::vector<TensorView> v;
    for (const Tensor& x : t) v.push_back(x.view());
    return v;
}

}  // namespace

// The tensor-core kernels pad any head dimension up to 256 with zeros (the
// padded tile widths 32, 64, 128, 256); prefill (four warps a block, GQA,
// causal with Lq < Lk, two key tiles) and decode (one warp, the keys in
// splits merged by lse_merge) stay within the derived bound for each, and
// a head dimension over 256 is refused by name.
TEST(CudaAttention, EveryHeadDimensionUpTo256PrefillAndDecode) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        const KernelInfo& k = *cuda_emu_registry().kernels.find(std::string("cuda.attention.") + name(f));
        for (std::int64_t d : {24, 40, 96, 200, 256}) {
            Params p = Params::defaults(*find_op("attention"));
            p.set("causal", 1);
            const auto prefill = attention_inputs(f, 2, 1, 18, 70, d, static_cast<std::uint64_t>(d));
            const props::CaseResult a = props::check_case(k, p, views(prefill));
            EXPECT_TRUE(a.pass) << k.name << " D=" << d << " prefill: " << a.message;
        }
        const auto decode = attention_inputs(f, 2, 1, 1, 1100, 64, 7);  // 2 splits by the kernel's own choice
        const Params none = Params::defaults(*find_op("attention"));
        const props::CaseResult b = props::check_case(k, none, views(decode));
        EXPECT_TRUE(b.pass) << k.name << " decode: " << b.message;
        const auto wide = attention_inputs(f, 1, 1, 2, 3, 264, 1);
        try {
            props::check_case(k, none, views(wide));
            ADD_FAILURE() << k.name << ": head dimension 264 accepted";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("264"), std::string::npos) << e.what();
        }
    }
}

// An infinite v at a visible key whose weight underflows (a logit 200 below
// the row's maximum): the exact weight is positive, so o is infinite in that
// column -- never 0 * inf = NaN -- through the tensor cores' zeroed tile, the
// FP32 kernel's FMA and the split merge.
TEST(CudaAttention, AnInfiniteValueCountsWhereItsWeightUnderflows) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (double splits : {1.0, 3.0}) {
            const KernelInfo& k = *cuda_emu_registry().kernels.find(std::string("cuda.attention.") + name(f));
            std::vector<Tensor> in = attention_inputs(f, 1, 1, 2, 40, 16, 3);
            for (std::int64_t i = 0; i < in[0].numel(); ++i) in[0].set_value(i, 0.0);  // logits = the mask
            Tensor mask(f, {2, 40});
            for (std::int64_t i = 0; i < mask.numel(); ++i) mask.set_value(i, 0.0);
            mask.set_value(5, -200.0), mask.set_value(40 + 5, -200.0);
            in[2].set_value(5 * 16 + 3, INFINITY);
            in.push_back(std::move(mask));
            Params p = Params::defaults(*find_op("attention"));
            p.set("splits", splits);
            const props::CaseResult r = props::check_case(k, p, views(in));
            EXPECT_TRUE(r.pass) << k.name << " splits " << splits << ": " << r.message;
        }
}

// A key whose logit is exactly -inf (q . k = -inf: an infinite k) has the
// exact weight 0: its infinite value must not reach o, although the key is
// not masked.  The FP32 kernel once added such a value whole (the rule for
// an underflowed weight, above), which made o infinite.
TEST(CudaAttention, AMinusInfinityLogitHidesAnInfiniteValue) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (double splits : {1.0, 3.0}) {
            const KernelInfo& k = *cuda_emu_registry().kernels.find(std::string("cuda.attention.") + name(f));
            std::vector<Tensor> in = attention_inputs(f, 1, 1, 2, 40, 16, 5);
            for (std::int64_t i = 0; i < 16; ++i) in[0].set_value(i, i == 0 ? -1.0 : 0.0);  // row 0: q = -e_0
            in[1].set_value(7 * 16, INFINITY);  // key 7: (inf, 0, ...): row 0's logit -inf, row 1's NaN or not
            for (std::int64_t i = 1; i < 16; ++i) in[1].set_value(7 * 16 + i, 0.0);
            for (std::int64_t i = 0; i < 16; ++i) in[0].set_value(16 + i, i == 0 ? -0.5 : 0.25);  // row 1 too
            in[2].set_value(7 * 16 + 3, INFINITY);
            Params p = Params::defaults(*find_op("attention"));
            p.set("splits", splits);
            const props::CaseResult r = props::check_case(k, p, views(in));
            EXPECT_TRUE(r.pass) << k.name << " splits " << splits << ": " << r.message;
            const std::vector<Tensor> got = run_kernel(k, p, views(in));
            EXPECT_TRUE(std::isfinite(got[0].value(3))) << k.name << ": o[0, 0, 3] = " << got[0].value(3);
        }
}

// A logit past FP32's range (AttentionKernel.ALogitPastFp32IsNotJudged):
// key 0's exact weight is positive and its v infinite, so o = +inf, but the
// FP32 dot product overflows to -inf and hides the key.  The row is not
// judged; the other row, whose o is +inf too, is.
TEST(CudaAttention, ALogitPastFp32IsNotJudged) {
    const KernelInfo& k = *cuda_emu_registry().kernels.find("cuda.attention.fp32");
    std::vector<Tensor> in = {Tensor(Format::fp32, {1, 2, 2}), Tensor(Format::fp32, {1, 2, 2}), Tensor(Format::fp32, {1, 2, 1})};
    const double q[] = {1e20, 0.5, 0.25, 1}, kk[] = {-1e20, 0.25, 1, 0.5};
    for (std::int64_t i = 0; i < 4; ++i) in[0].set_value(i, q[i]), in[1].set_value(i, kk[i]);
    in[2].set_value(0, INFINITY), in[2].set_value(1, 3.0);
    const props::CaseResult r = props::check_case(k, Params::defaults(*find_op("attention")), views(in));
    EXPECT_TRUE(r.pass) << r.message;
    EXPECT_EQ(r.not_judged, 2);
    EXPECT_EQ(r.judged, 2);
}

// Sinkhorn, one warp per matrix: every row bucket (n = 4, 8, 16, 32) in a
// batch larger than the grid's warps, and a wide matrix (a column 200 below
// its row maxima: the log domain), within the bound; n = 33 refused by name.
TEST(CudaSinkhorn, EveryRowBucketAndTheLogDomainWithinTheBound) {
    const KernelInfo& k = *cuda_emu_registry().kernels.find("cuda.sinkhorn.fp32");
    const Params p = Params::defaults(*find_op("sinkhorn"));
    std::mt19937_64 g(5);
    std::normal_distribution<double> normal(0.0, 2.0);
    for (std::int64_t n : {3, 8, 13, 32}) {
        const std::int64_t count = n <= 8 ? 70 : 3;
        std::vector<Tensor> in;
        in.emplace_back(Format::fp32, std::vector<std::int64_t>{count, n, n});
        for (std::int64_t i = 0; i < in[0].numel(); ++i) in[0].set_value(i, normal(g));
        if (n == 13)
            for (std::int64_t i = 0; i < n; ++i) in[0].set_value(i * n + 4, -200.0);  // matrix 0: wide
        const props::CaseResult r = props::check_case(k, p, views(in));
        EXPECT_TRUE(r.pass) << "n = " << n << ": " << r.message;
    }
    std::vector<Tensor> big;
    big.emplace_back(Format::fp32, std::vector<std::int64_t>{33, 33});
    try {
        props::check_case(k, p, views(big));
        ADD_FAILURE() << "n = 33 accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("n = 33 > 32"), std::string::npos) << e.what();
    }
}

// The HC mixings keep a channel's streams in registers and mHC's B in one
// warp's lanes: more than 32 streams is refused by name, not miscomputed.
TEST(CudaHcResidual, MoreThan32StreamsRefusedByName) {
    for (const char* name : {"cuda.hc_residual.fp32", "cuda.mhc_residual.fp32"}) {
        const KernelInfo& k = *cuda_emu_registry().kernels.find(name);
        const std::int64_t t = 1, n = 33, d = 2;
        std::vector<Tensor> in;
        for (const auto& shape : std::vector<std::vector<std::int64_t>>{{t, n, d}, {t, d}, {t, n}, {t, n, n}, {t, n}})
            in.emplace_back(Format::fp32, shape);
        try {
            props::check_case(k, Params::defaults(*find_op(k.op)), views(in));
            ADD_FAILURE() << name << ": 33 streams accepted";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("n = 33 > 32"), std::string::npos) << e.what();
        }
    }
}

// The FP32 CUDA chunk step is the CPU kernels' with the same roundings in
// the same order: under the emulation (the host's expf) it equals cpu.scalar
// bit for bit without l2norm (whose sum of squares the GPU takes by a warp
// butterfly), for both ops, chunks from 5 to 256, saturated and burst gates,
// and packed calls (cu_seqlens in the grid against the CPU's call per
// sequence) with and without initial states.  (The BF16 kernels update the
// state on tensor cores: their suites judge them by the declared bound.)
TEST(CudaGdn, EmulationEqualsTheScalarCpuKernelBitForBit) {
    struct Setting {
        std::int64_t T, H, dk, dv, state;
        props::DeltaGates gates;
        std::int64_t sequences;
        double chunk;
    };
    const Setting settings[] = {{70, 2, 5, 3, 1, props::mixed_gates, 1, 16}, {130, 1, 8, 4, 0, props::burst_gates, 1, 64},
                                {40, 2, 3, 2, 1, props::saturated_gates, 1, 5},
                                {300, 1, 4, 2, 1, props::near_one_gates, 1, 256},
                                {90, 2, 4, 3, 1, props::mixed_gates, 3, 32}, {50, 1, 2, 5, 0, props::burst_gates, 4, 16}};
    int compared = 0;
    for (const char* op : {"gdn", "kda"})
        for (Format f : {Format::fp32}) {
            const KernelInfo& gpu = *cuda_emu_registry().kernels.find(std::string("cuda.") + op + "." + name(f));
            const KernelInfo& cpu = *builtin_registry().find(std::string("cpu.scalar.") + op + "." + name(f));
            std::uint64_t seed = 11;
            for (const Setting& s : settings) {
                const props::Case c = props::build_case(props::structured_spec(
                    op, f, {s.T, s.H, s.dk, s.dv, s.state, s.gates, props::mixed_betas, s.sequences, props::unit_keys},
                    Params({{"chunk", s.chunk}, {"l2norm", 0}, {"scale", 0}}), props::Family::normal, 0, ++seed, 0));
                const std::vector<Tensor> want = run_kernel(cpu, c.params, c.views()), got = run_kernel(gpu, c.params, c.views());
                for (std::size_t o = 0; o < 2; ++o)
                    for (std::int64_t i = 0; i < want[o].numel(); ++i)
                        ASSERT_EQ(got[o].bits(i), want[o].bits(i))
                            << gpu.name << ", chunk " << s.chunk << ", " << s.sequences << " sequence(s), output " << o
                            << " [" << i << "]: " << got[o].value(i) << " vs " << want[o].value(i);
                ++compared;
            }
        }
    EXPECT_EQ(compared, 12);
}

// The BF16 kernels update the state on tensor cores (K_e, V~ rounded to
// BF16, the truncating block FMA of the emulation): their final state is
// beyond the FP32 update's bound and within the declared tensor-core one.
TEST(CudaGdn, Bf16StateUpdateNeedsItsDeclaredTensorCoreBound) {
    for (const char* op : {"gdn", "kda"}) {
        const KernelInfo& k = *cuda_emu_registry().kernels.find(std::string("cuda.") + op + ".bf16");
        ASSERT_EQ(k.declared.count("mma_k"), 1u) << k.name;
        const props::Case c = props::build_case(props::structured_spec(
            op, Format::bf16, {130, 1, 16, 16, 1, props::mixed_gates, props::uniform_betas, 1, props::unit_keys},
            Params({{"chunk", 64}, {"l2norm", 0}, {"scale", 0}}), props::Family::normal, 0, 5, 0));
        const std::vector<Tensor> out = run_kernel(k, c.params, c.views());
        const oracle::StructuredResult ex = oracle::evaluate_structured(op, c.params, c.views(), {Format::bf16, Format::fp32});
        oracle::DeltaErrorModel plain;
        plain.per_channel = std::string(op) == "kda", plain.out = Format::bf16;
        oracle::DeltaErrorModel tc = plain;
        oracle::read_declared_update(tc, k.declared);
        double util_plain = 0, util_tc = 0;
        const oracle::DeltaBound bp = oracle::delta_rule_bound(c.params, c.views(), ex.exact[0], plain);
        const oracle::DeltaBound bt = oracle::delta_rule_bound(c.params, c.views(), ex.exact[0], tc);
        for (std::int64_t i = 0; i < out[1].numel(); ++i) {
            const double err = std::fabs(out[1].value(i) - ex.exact[1][static_cast<std::size_t>(i)]);
            util_plain = std::max(util_plain, err / bp.state[static_cast<std::size_t>(i)]);
            util_tc = std::max(util_tc, err / bt.state[static_cast<std::size_t>(i)]);
        }
        EXPECT_GT(util_plain, 1) << k.name << ": the state update is not the tensor cores'";
        EXPECT_LE(util_tc, 1) << k.name;
        std::printf("%s: final state utilization %.3g under the FP32 update's bound, %.3g under the declared one\n",
                    k.name.c_str(), util_plain, util_tc);
    }
}

// quantize, dequantize and smooth_quant make the CPU kernels' decisions in
// the same double arithmetic: under the emulation (the host's exp and log)
// they equal cpu.scalar bit for bit, every axis, a static scale, NaN, Inf
// and zero channels included.
TEST(CudaInt8, QuantizeDequantizeAndSmoothQuantEqualTheScalarCpuKernels) {
    std::mt19937_64 g(7);
    std::normal_distribution<double> normal(0.0, 3.0);
    auto filled = [&](Format f, std::vector<std::int64_t> shape) {
        Tensor t(f, std::move(shape));
        for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, f == Format::int8 ? double(int(g() % 255) - 127) : normal(g));
        return t;
    };
    auto same = [](const std::string& op, Format f, const Params& p, const std::vector<Tensor>& in) {
        const KernelInfo& gpu = *cuda_emu_registry().kernels.find("cuda." + op + "." + name(f));
        const KernelInfo& cpu = *builtin_registry().find("cpu.scalar." + op + "." + name(f));
        const std::vector<Tensor> want = run_kernel(cpu, p, views(in)), got = run_kernel(gpu, p, views(in));
        for (std::size_t o = 0; o < want.size(); ++o)
            for (std::int64_t i = 0; i < want[o].numel(); ++i)
                ASSERT_EQ(got[o].bits(i), want[o].bits(i)) << gpu.name << " output " << o << " [" << i << "]";
    };
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        for (double axis : {0.0, 1.0, 2.0}) {
            for (double fixed : {0.0, 0.03}) {
                std::vector<Tensor> x{filled(f, {5, 37})};
                x[0].set_value(40, NAN), x[0].set_value(77, INFINITY);
                same("quantize", f, Params({{"axis", axis}, {"scale", fixed}}), x);
            }
            const std::int64_t groups = axis == 0 ? 1 : axis == 1 ? 6 : 19;
            std::vector<Tensor> d{filled(Format::int8, {6, 19}), filled(Format::fp32, {groups})};
            same("dequantize", f, Params({{"axis", axis}}), d);
        }
        std::vector<Tensor> sq{filled(f, {7, 13}), filled(f, {13, 9})};
        for (std::int64_t i = 0; i < 7; ++i) sq[0].set_value(i * 13 + 2, 0.0);  // channel 2 of x all zero
        sq[1].set_value(5 * 9 + 4, NAN);                                         // channel 5 of w not finite
        for (double alpha : {0.5, 0.8}) same("smooth_quant", f, Params({{"alpha", alpha}}), sq);
    }
}

// Without a usable GPU (CI): every cuda kernel is not provided, with the
// runtime's reason; nothing is registered that could pass.
// The CPU kernels' overflow-midpoint case (gated_test.cpp,
// GatedKernels.HugeGateAtTheOverflowMidpointStaysFinite): g u is exactly the
// format's overflow midpoint while the true act(g) u lies a hair toward zero.
TEST(CudaGated, HugeGateAtTheOverflowMidpointStaysFinite) {
    struct Mid { Format f; double g, u, want; };
    for (const Mid m : {Mid{Format::fp16, 1365, 48, 65504}, Mid{Format::bf16, 0x1.cp+123, -0x1.24p+4, -0x1.fep+127}})
        for (const char* op : {"swiglu", "geglu"}) {
            const std::string name = std::string("cuda.") + op + "." + conform::name(m.f);
            const KernelInfo& k = *cuda_emu_registry().kernels.find(name);
            Tensor g(m.f, {1, 40}), u(m.f, {1, 40});
            for (int i = 0; i < 40; ++i) g.set_value(i, i == 33 ? m.g : 1.0), u.set_value(i, i == 33 ? m.u : 1.0);
            EXPECT_EQ(run_kernel(k, Params(), {g.view(), u.view()})[0].value(33), m.want) << name;
        }
}

// The outputs of kernel k on `in` by each of its launches (its own, then
// each listed one), every output in `out` format and shape.
using OutputSpec = std::pair<Format, std::vector<std::int64_t>>;
std::vector<std::vector<Tensor>> outputs_by_every_launch(const KernelInfo& k, const Params& p,
                                                         const std::vector<TensorView>& in,
                                                         const std::vector<OutputSpec>& out) {
    std::vector<KernelFn> fns = {k.fn};
    for (const auto& [what, fn] : k.launches) fns.push_back(fn);
    std::vector<std::vector<Tensor>> runs;
    for (const KernelFn& fn : fns) {
        std::vector<Tensor> ys;
        std::vector<TensorView> views;
        for (const auto& [f, shape] : out) ys.emplace_back(f, shape);
        for (Tensor& y : ys) views.push_back(y.view());
        fn(KernelCall{p, in, views});
        runs.push_back(std::move(ys));
    }
    return runs;
}

// Every launch of `gpu` gives the bits of `cpu` on (p, in), output by
// output; a NaN matches any NaN (sign and payload are no part of a result:
// the verdict judges NaN as a class).
void expect_bits_of(const KernelInfo& gpu, const KernelInfo& cpu, const Params& p, const std::vector<TensorView>& in,
                    const std::string& where) {
    const std::vector<Tensor> want = run_kernel(cpu, p, in);
    std::vector<OutputSpec> out;
    for (const Tensor& t : want) out.emplace_back(t.format(), t.shape());
    for (const std::vector<Tensor>& got : outputs_by_every_launch(gpu, p, in, out))
        for (std::size_t o = 0; o < want.size(); ++o)
            for (std::int64_t i = 0; i < want[o].numel(); ++i)
                if (!(std::isnan(got[o].value(i)) && std::isnan(want[o].value(i)))) {
                    ASSERT_EQ(got[o].bits(i), want[o].bits(i)) << gpu.name << ", " << where << ": output " << o << " [" << i
                                                               << "] = " << got[o].value(i) << ", " << cpu.name << " "
                                                               << want[o].value(i);
                }
}

// cuda.matmul.fp32 forms each y_ij as the CPU kernels' chain acc =
// fma(a_ik, b_kj, acc) from +0, k ascending: under the emulation it equals
// cpu.scalar.matmul.fp32 bit for bit, under its own launch and the
// single-block one -- tails at every tile edge, K past several k tiles,
// magnitudes from 2^-140 (subnormal products) to 2^40, a NaN and infinities.
TEST(CudaMatmul, Fp32EqualsTheScalarCpuKernelBitForBit) {
    const KernelInfo& gpu = *cuda_emu_registry().kernels.find("cuda.matmul.fp32");
    const KernelInfo& cpu = *builtin_registry().find("cpu.scalar.matmul.fp32");
    std::mt19937_64 rng(5);
    std::normal_distribution<double> normal;
    std::uniform_int_distribution<int> exponent(-40, 40);
    auto random = [&](std::int64_t rows, std::int64_t cols) {
        Tensor t(Format::fp32, {rows, cols});
        for (std::int64_t i = 0; i < t.numel(); ++i)
            t.set_value(i, std::ldexp(normal(rng), i % 29 == 3 ? -140 : exponent(rng)));
        return t;
    };
    const std::int64_t shapes[][3] = {{1, 1, 1}, {63, 17, 65}, {65, 33, 64}, {130, 100, 3}, {7, 1, 129}, {2, 300, 70}};
    for (const auto& [m, k, n] : shapes) {
        Tensor a = random(m, k), b = random(k, n);
        if (m * k > 8) a.set_value(7, NAN), b.set_value(k * n - 1, INFINITY), b.set_value(0, -INFINITY);
        ASSERT_EQ(gpu.launches.size(), 1u);
        expect_bits_of(gpu, cpu, Params(), {a.view(), b.view()},
                       "M " + std::to_string(m) + ", K " + std::to_string(k) + ", N " + std::to_string(n));
    }
}

// The 16-bit kernels accumulate on tensor cores, whose block FMA truncates
// (docs/matmul.md, "CUDA kernels"): over K = 32768 positive products the
// errors all lean toward zero, beyond the (gating, probabilistic) bound of
// an FP32 accumulator that rounds to nearest, and within the bound the
// kernels declare (mma_k = 16).
TEST(CudaMatmul, TensorCoreKernelsNeedTheirDeclaredBound) {
    const oracle::TierScope tier(oracle::Tier::probabilistic);
    for (Format f : {Format::fp16, Format::bf16}) {
        const KernelInfo& k = *cuda_emu_registry().kernels.find(std::string("cuda.matmul.") + name(f) + ".fp32");
        ASSERT_EQ(k.declared.count("mma_k"), 1u) << k.name;
        std::mt19937_64 rng(3);
        std::uniform_real_distribution<double> u(1, 2);
        Tensor a(f, {2, 32768}), b(f, {32768, 3});
        for (Tensor* t : {&a, &b})
            for (std::int64_t i = 0; i < t->numel(); ++i) t->set_value(i, u(rng));
        const std::vector<TensorView> in = {a.view(), b.view()};
        const std::vector<double> exact = oracle::evaluate_structured("matmul", Params(), in, {Format::fp32}).exact[0];
        const std::vector<double> got_values = [&] {
            const Tensor y = run_kernel(k, Params(), in)[0];
            std::vector<double> v(static_cast<std::size_t>(y.numel()));
            for (std::int64_t i = 0; i < y.numel(); ++i) v[static_cast<std::size_t>(i)] = y.value(i);
            return v;
        }();
        const auto plain = oracle::matmul_bound(Params(), in, {exact}, Format::fp32, {Format::fp32})[0];
        const auto tc = oracle::matmul_bound(Params({{"declared.mma_k", 16}}), in, {exact}, Format::fp32, {Format::fp32})[0];
        double util_plain = 0, util_tc = 0;
        for (std::size_t i = 0; i < exact.size(); ++i) {
            const double err = std::fabs(got_values[i] - exact[i]);
            EXPECT_LT(got_values[i], exact[i]) << k.name << ": truncation leans toward zero";
            util_plain = std::max(util_plain, err / plain[i]), util_tc = std::max(util_tc, err / tc[i]);
        }
        EXPECT_GT(util_plain, 1) << k.name << ": the accumulation is not the tensor cores'";
        EXPECT_LE(util_tc, 1) << k.name;
        std::printf("%s: utilization %.3g under an FP32 accumulator's bound, %.3g under the declared one\n",
                    k.name.c_str(), util_plain, util_tc);
    }
}

// The FP8 kernels widen every code to BF16 exactly: a [256, 1] of every
// code times b = 1 with unit scales gives each code's value (NaN for NaN
// codes, E5M2's infinities), in both formats.
TEST(CudaFp8Gemm, EveryCodeWidensExactly) {
    for (Format f : {Format::fp8_e4m3, Format::fp8_e5m2}) {
        const KernelInfo& k = *cuda_emu_registry().kernels.find(std::string("cuda.fp8_gemm.") + name(f));
        Tensor a(f, {256, 1}), sa(Format::fp32, {256, 1}), b(f, {1, 1}), sb(Format::fp32, {1, 1});
        for (int i = 0; i < 256; ++i) a.set_bits(i, static_cast<std::uint64_t>(i)), sa.set_value(i, 1.0);
        b.set_value(0, 1.0), sb.set_value(0, 1.0);
        const Tensor y = run_kernel(k, Params({{"block", 128}}), {a.view(), sa.view(), b.view(), sb.view()})[0];
        for (int i = 0; i < 256; ++i) {
            const double want = a.value(i), got = y.value(i);
            if (std::isnan(want)) {
                EXPECT_TRUE(std::isnan(got)) << k.name << " code " << i;
            }
            else EXPECT_EQ(got, want) << k.name << " code " << i;
        }
    }
}

// Each K block's sum is a chain of tensor-core block FMAs: with one block of
// K = 65536 positive codes its error leans toward zero, beyond the bound of
// an FP32 block accumulator that rounds to nearest and within the declared
// one (mma_k = 16).
TEST(CudaFp8Gemm, TensorCoreBlockSumsNeedTheirDeclaredBound) {
    const oracle::TierScope tier(oracle::Tier::probabilistic);
    const KernelInfo& k = *cuda_emu_registry().kernels.find("cuda.fp8_gemm.fp8_e4m3.fp32");
    ASSERT_EQ(k.declared.count("mma_k"), 1u);
    std::mt19937_64 rng(4);
    std::uniform_real_distribution<double> u(-9, 8);  // log2 of the codes
    const std::int64_t K = 65536;
    Tensor a(Format::fp8_e4m3, {2, K}), b(Format::fp8_e4m3, {K, 3}), sa(Format::fp32, {2, 1}), sb(Format::fp32, {1, 1});
    for (Tensor* t : {&a, &b})
        for (std::int64_t i = 0; i < t->numel(); ++i) t->set_value(i, std::exp2(u(rng)));
    sa.set_value(0, 0.5), sa.set_value(1, 0.75), sb.set_value(0, 1.0);
    const Params p({{"block", static_cast<double>(K)}});
    const std::vector<TensorView> in = {a.view(), sa.view(), b.view(), sb.view()};
    const std::vector<double> exact = oracle::evaluate_structured("fp8_gemm", p, in, {Format::fp32}).exact[0];
    const Tensor y = run_kernel(k, p, in)[0];
    Params declared = p;
    declared.set("declared.mma_k", 16);
    const auto plain = oracle::fp8_gemm_bound(p, in, {exact}, Format::fp32, {Format::fp32})[0];
    const auto tc = oracle::fp8_gemm_bound(declared, in, {exact}, Format::fp32, {Format::fp32})[0];
    double util_plain = 0, util_tc = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
        const double err = std::fabs(y.value(static_cast<std::int64_t>(i)) - exact[i]);
        util_plain = std::max(util_plain, err / plain[i]), util_tc = std::max(util_tc, err / tc[i]);
    }
    EXPECT_GT(util_plain, 1) << "the block sums are not the tensor cores'";
    EXPECT_LE(util_tc, 1);
    std::printf("%s: utilization %.3g under an FP32 block accumulator's bound, %.3g under the declared one\n",
                k.name.c_str(), util_plain, util_tc);
}

// cuda.lse_merge forms its weights by the CPU kernel's own FP32 arithmetic
// (impls/lse_merge_weights.hpp): under the emulation (the host's expf and
// log1pf) it equals cpu.scalar.lse_merge bit for bit in every format --
// far-apart states (+-1e4), empty states on either side or both, NaN and
// +inf lse, infinite o -- under each of its launches.
TEST(CudaLseMerge, EqualsTheScalarCpuKernelBitForBit) {
    std::mt19937_64 rng(9);
    std::normal_distribution<double> normal;
    const double states[] = {0.0, -INFINITY, 1e4, -1e4, 3.5, NAN, INFINITY, 88.0, -90.0};
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        const KernelInfo& gpu = *cuda_emu_registry().kernels.find(std::string("cuda.lse_merge.") + name(f));
        const KernelInfo& cpu = *builtin_registry().find(std::string("cpu.scalar.lse_merge.") + name(f));
        const std::int64_t rows = 81, dv = 37;
        Tensor oa(f, {rows, dv}), ob(f, {rows, dv}), la(f, {rows}), lb(f, {rows});
        for (std::int64_t r = 0; r < rows; ++r) {
            la.set_value(r, states[r % 9] + (r % 9 < 5 ? normal(rng) : 0.0));
            lb.set_value(r, states[r / 9] + (r / 9 < 5 ? normal(rng) : 0.0));
            for (std::int64_t d = 0; d < dv; ++d)
                oa.set_value(r * dv + d, d == 5 ? INFINITY : normal(rng) * 100), ob.set_value(r * dv + d, normal(rng));
        }
        expect_bits_of(gpu, cpu, Params(), {oa.view(), la.view(), ob.view(), lb.view()}, "states of every kind");
    }
}

// cuda.topk_select and cuda.lightning_indexer repeat the CPU scalar
// kernels' arithmetic (the selection exact, ties to the lower index; each
// dot an fmaf chain from +0, the head sum in order): under the emulation
// they equal them bit for bit in every format and launch -- every causal
// rule, blocks, offsets, both forced-block modes, exact ties, +-inf, a NaN
// row, k past the eligible count, more candidates than lanes; negative
// head weights, a NaN key entry.
TEST(CudaSparse, SelectionAndIndexerEqualTheScalarCpuKernelsBitForBit) {
    std::mt19937_64 rng(13);
    std::normal_distribution<double> normal;
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        const KernelInfo& sel = *cuda_emu_registry().kernels.find(std::string("cuda.topk_select.") + name(f));
        const KernelInfo& sel_cpu = *builtin_registry().find(std::string("cpu.scalar.topk_select.") + name(f));
        const std::int64_t lq = 9, n = 70;
        Tensor s(f, {lq, n});
        for (std::int64_t i = 0; i < s.numel(); ++i)
            s.set_value(i, i % 7 == 0 ? 0.5 : i % 23 == 1 ? INFINITY : i % 29 == 2 ? -INFINITY : std::round(normal(rng) * 8) / 4);
        s.set_value(4 * n + 3, NAN);  // row 4 is NaN where candidate 3 is eligible and not forced
        for (int causal : {0, 1, 2})
            for (int block : {1, 4})
                for (int force : {0, 1, 2})
                    for (int k : {1, 5, 40})
                        for (int offset : {0, 37}) {
                            const Params p({{"k", double(k)}, {"block", double(block)}, {"causal", double(causal)},
                                            {"offset", double(offset)}, {"force_local", double(force)}});
                            expect_bits_of(sel, sel_cpu, p, {s.view()},
                                           "causal " + std::to_string(causal) + ", block " + std::to_string(block) +
                                               ", force " + std::to_string(force) + ", k " + std::to_string(k) +
                                               ", offset " + std::to_string(offset));
                        }
        const KernelInfo& ix = *cuda_emu_registry().kernels.find(std::string("cuda.lightning_indexer.") + name(f));
        const KernelInfo& ix_cpu = *builtin_registry().find(std::string("cpu.scalar.lightning_indexer.") + name(f));
        Tensor q(f, {5, 3, 19}), k(f, {45, 19}), w(f, {5, 3});
        for (Tensor* t : {&q, &k, &w})
            for (std::int64_t i = 0; i < t->numel(); ++i) t->set_value(i, normal(rng));
        k.set_value(7 * 19 + 4, NAN);
        expect_bits_of(ix, ix_cpu, Params(), {q.view(), k.view(), w.view()}, "Lq 5, H 3, c 19, N 45");
    }
}

// cuda.dsa_attention composes the CUDA indexer and selection (the CPU
// scalar kernels' bits) with the CUDA attention kernels: its indices equal
// cpu.scalar.dsa_attention's bit for bit in every format and launch
// (decode-like Lq < Lk, k past the earliest rows' eligible count, exact
// ties, a NaN index key); o and lse come from other attention arithmetic
// and are judged by the suites.
TEST(CudaDsa, SelectionEqualsTheScalarCpuKernelBitForBit) {
    std::mt19937_64 rng(19);
    std::normal_distribution<double> normal;
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const char* variant : {"", "simt."}) {
        const KernelInfo& gpu = *cuda_emu_registry().kernels.find(std::string("cuda.dsa_attention.") + variant + name(f));
        const KernelInfo& cpu = *builtin_registry().find(std::string("cpu.scalar.dsa_attention.") + name(f));
        for (const std::int64_t lk : {40, 8}) {  // Lk 8: rows 0 and 1 see fewer than k tokens
            Tensor iq(f, {5, 2, 7}), ik(f, {lk, 7}), iw(f, {5, 2}), q(f, {2, 5, 16}), kv(f, {1, lk, 16}), v(f, {1, lk, 8});
            for (Tensor* t : {&iq, &ik, &iw, &q, &kv, &v})
                for (std::int64_t i = 0; i < t->numel(); ++i) t->set_value(i, normal(rng));
            for (std::int64_t i = 0; i < 7; ++i) ik.set_value(3 * 7 + i, ik.value(2 * 7 + i));  // keys 2 and 3 tie
            if (lk == 40) ik.set_value(38 * 7 + 1, NAN);  // rows 3 and 4 (positions 38, 39) see it: NaN
            const Params p({{"k", 6}});
            const std::vector<TensorView> in = {iq.view(), ik.view(), iw.view(), q.view(), kv.view(), v.view()};
            const Tensor want = run_kernel(cpu, p, in)[2];
            const std::vector<OutputSpec> out = {{f, {2, 5, 8}}, {Format::fp32, {2, 5}}, {Format::fp32, {5, 6}}};
            for (const std::vector<Tensor>& got : outputs_by_every_launch(gpu, p, in, out))
                for (std::int64_t i = 0; i < want.numel(); ++i)
                    ASSERT_EQ(got[2].bits(i), want.bits(i)) << gpu.name << ", Lk " << lk << ": indices [" << i
                                                            << "] = " << got[2].value(i) << ", cpu.scalar " << want.value(i);
            // The case is what it claims: NaN rows beside ordinary ones; short rows padded with -1.
            if (lk == 40) {
                EXPECT_TRUE(std::isnan(want.value(3 * 6)) && !std::isnan(want.value(0)));
            }
            else EXPECT_EQ(want.value(5), -1.0);
        }
    }
}

// cuda.block_sparse_attention scores blocks with the CPU kernels'
// arithmetic in their order (MSA's product-then-add dots and max pooling;
// QSA's in-order mean, sum of squares, RMSNorm and RoPE of double angles,
// the ReLU head sum): its indices equal cpu.scalar.block_sparse_attention's
// bit for bit in both modes, every format and launch -- a partial last
// block, k past the early rows' eligible blocks, two exactly tied blocks
// and a NaN index key (its rows NaN).  o is judged by the suites.
TEST(CudaBlockSparse, SelectionEqualsTheScalarCpuKernelBitForBit) {
    std::mt19937_64 rng(29);
    std::normal_distribution<double> normal;
    const std::int64_t Hq = 4, G = 2, L = 22, D = 8, Dv = 6, Di = 8, r = 4, k = 3;
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const int mode : {0, 1}) {
            const KernelInfo& gpu = *cuda_emu_registry().kernels.find(std::string("cuda.block_sparse_attention.") + name(f));
            const KernelInfo& cpu = *builtin_registry().find(std::string("cpu.scalar.block_sparse_attention.") + name(f));
            const std::int64_t gi = mode == 0 ? G : 3, sel = mode == 0 ? G : 1, slots = mode == 0 ? k : k + 1;
            Tensor q(f, {Hq, L, D}), kk(f, {G, L, D}), v(f, {G, L, Dv}), iq(f, {gi, L, Di}), ik(f, {L, Di}), nq(f, {Di}),
                nk(f, {Di});
            for (Tensor* t : {&q, &kk, &v, &iq, &ik, &nq, &nk})
                for (std::int64_t i = 0; i < t->numel(); ++i) t->set_value(i, normal(rng));
            for (std::int64_t j = 0; j < r * Di; ++j) ik.set_value(r * Di + j, ik.value(j));  // blocks 0 and 1 tie
            ik.set_value(17 * Di + 2, NAN);  // block 4: the rows that score it are NaN
            const Params p({{"mode", static_cast<double>(mode)}, {"block", static_cast<double>(r)}, {"k", static_cast<double>(k)}});
            const std::vector<TensorView> in = {q.view(), kk.view(), v.view(), iq.view(), ik.view(), nq.view(), nk.view()};
            const Tensor want = run_kernel(cpu, p, in)[1];
            const std::vector<OutputSpec> out = {{f, {Hq, L, Dv}}, {Format::fp32, {sel, L, slots}}};
            for (const std::vector<Tensor>& got : outputs_by_every_launch(gpu, p, in, out))
                for (std::int64_t i = 0; i < want.numel(); ++i)
                    ASSERT_EQ(got[1].bits(i), want.bits(i)) << gpu.name << ", mode " << mode << ": indices [" << i
                                                            << "] = " << got[1].value(i) << ", cpu.scalar " << want.value(i);
            // The case is what it claims: NaN rows (MSA: token 17 onwards; QSA: block 4 complete) beside ordinary ones.
            EXPECT_TRUE(std::isnan(want.value(21 * slots)) && !std::isnan(want.value(9 * slots))) << mode;
        }
}

// cuda.compressed_attention's compressor is the CPU kernels' FP32 pooling
// in their row order, and CSA's selection the CUDA indexer and top-k over
// the stored entries: under the emulation (the host's expf) comp and the
// indices equal cpu.scalar.compressed_attention's bit for bit in both
// modes, every format and launch -- an entry with a -inf logit row, one
// with a NaN logit (NaN entry, then NaN index rows), k past the early
// tokens' observed entries.  o is judged by the suites.
TEST(CudaCompressedAttention, EntriesAndSelectionEqualTheScalarCpuKernelBitForBit) {
    std::mt19937_64 rng(31);
    std::normal_distribution<double> normal;
    const std::int64_t H = 2, L = 19, c = 8, m = 3, Hi = 2, N = L / m, k = 3;
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const int mode : {0, 1}) {
            const KernelInfo& gpu = *cuda_emu_registry().kernels.find(std::string("cuda.compressed_attention.") + name(f));
            const KernelInfo& cpu = *builtin_registry().find(std::string("cpu.scalar.compressed_attention.") + name(f));
            Tensor q(f, {H, L, c}), raw(f, {L, c}), ca(f, {L, c}), za(f, {L, c}), ba(f, {m, c}), cb(f, {L, c}), zb(f, {L, c}),
                bb(f, {m, c}), iq(f, {L, Hi, c}), iw(f, {L, Hi});
            for (Tensor* t : {&q, &raw, &ca, &za, &ba, &cb, &zb, &bb, &iq, &iw})
                for (std::int64_t i = 0; i < t->numel(); ++i) t->set_value(i, normal(rng));
            za.set_value(4 * c + 1, -INFINITY);  // entry 1, channel 1: one row weighs nothing
            za.set_value(13 * c + 5, NAN);       // entry 4 (and, CSA, entry 5's group b): NaN in channel 5
            const std::int64_t slots = mode == 0 ? k : N;
            const Params p({{"mode", static_cast<double>(mode)}, {"m", static_cast<double>(m)}, {"k", static_cast<double>(k)},
                            {"window", 3}});
            const std::vector<TensorView> in = {q.view(), raw.view(), ca.view(), za.view(), ba.view(),
                                                cb.view(), zb.view(),  bb.view(), iq.view(), iw.view()};
            const std::vector<Tensor> want = run_kernel(cpu, p, in);
            const std::vector<OutputSpec> out = {{f, {H, L, c}}, {f, {N, c}}, {Format::fp32, {L, slots}}};
            for (const std::vector<Tensor>& got : outputs_by_every_launch(gpu, p, in, out))
                for (int o : {1, 2})
                    for (std::int64_t i = 0; i < want[o].numel(); ++i)
                        ASSERT_EQ(got[o].bits(i), want[o].bits(i)) << gpu.name << ", mode " << mode << ": output " << o << " ["
                                                                   << i << "] = " << got[o].value(i) << ", cpu.scalar "
                                                                   << want[o].value(i);
            // The case is what it claims: a NaN entry beside finite ones; CSA rows that score it NaN.
            EXPECT_TRUE(std::isnan(want[1].value(4 * c + 5)) && !std::isnan(want[1].value(1 * c + 1)));
            if (mode == 0) {
                EXPECT_TRUE(std::isnan(want[2].value(18 * slots)) && !std::isnan(want[2].value(5 * slots)));
            }
        }
}

// cuda.dsa_attention.simt takes DeepSeek-V3.2's absorbed MLA heads (D 576,
// Dv 512) that the tensor-core kernels refuse by name: within the bound in
// every format, prefill and decode.
TEST(CudaDsa, SimtKernelTakesAbsorbedMlaHeads) {
    std::mt19937_64 rng(41);
    std::normal_distribution<double> normal;
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const std::int64_t lq : {3, 1}) {
            const std::int64_t lk = 24, d = 576, dv = 512;
            Tensor iq(f, {lq, 2, 8}), ik(f, {lk, 8}), iw(f, {lq, 2}), q(f, {2, lq, d}), kv(f, {1, lk, d}), v(f, {1, lk, dv});
            for (Tensor* t : {&iq, &ik, &iw, &q, &kv, &v})
                for (std::int64_t i = 0; i < t->numel(); ++i) t->set_value(i, normal(rng) * (t == &q ? 0.05 : 1.0));
            const Params p({{"k", 8}});
            const std::vector<TensorView> in = {iq.view(), ik.view(), iw.view(), q.view(), kv.view(), v.view()};
            const KernelInfo& simt = *cuda_emu_registry().kernels.find(std::string("cuda.dsa_attention.simt.") + name(f));
            const props::CaseResult r = props::check_case(simt, p, in);
            EXPECT_TRUE(r.pass) << simt.name << ", Lq " << lq << ": " << r.message;
            const KernelInfo& tc = *cuda_emu_registry().kernels.find(std::string("cuda.dsa_attention.") + name(f));
            try {
                props::check_case(tc, p, in);
                ADD_FAILURE() << tc.name << ": head dimension 576 accepted";
            } catch (const std::invalid_argument& e) {
                EXPECT_NE(std::string(e.what()).find("576"), std::string::npos) << e.what();
            }
        }
}

// cuda.mla is the CPU absorbed kernel's arithmetic in its order (fmaf
// chains, the same stored stages, RoPE's double angles rounded to FP32, the
// weighted sum in key order): under the emulation (the host's expf, logf,
// pow and sincos) it equals cpu.absorbed.mla bit for bit in every format
// and launch -- prefill and decode, a cache rotated or rotated on read,
// both pairings, causal or not, a large offset, and an infinite cached
// latent entry (its NaN and infinite results compared as such).
TEST(CudaMla, EqualsTheAbsorbedCpuKernelBitForBit) {
    std::mt19937_64 rng(23);
    std::normal_distribution<double> normal;
    const std::int64_t H = 2, L = 3, dm = 11, dc = 6, dn = 4, dr = 4, dv = 5, Lc = 4;
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        const KernelInfo& gpu = *cuda_emu_registry().kernels.find(std::string("cuda.mla.") + name(f));
        const KernelInfo& cpu = *builtin_registry().find(std::string("cpu.absorbed.mla.") + name(f));
        Tensor h(f, {L, dm}), wdkv(f, {dc, dm}), wuk(f, {H, dn, dc}), wuv(f, {H, dv, dc}), wq(f, {H, dn + dr, dm}),
            wkr(f, {dr, dm}), cc(f, {Lc, dc}), krc(f, {Lc, dr});
        for (Tensor* t : {&h, &wdkv, &wuk, &wuv, &wq, &wkr, &cc, &krc})
            for (std::int64_t i = 0; i < t->numel(); ++i) t->set_value(i, normal(rng) * 0.5);
        Tensor cc_inf = cc;
        cc_inf.set_value(2 * dc + 1, INFINITY);
        for (const Tensor* cache : {&cc, &cc_inf})
            for (int rotated : {1, 0})
                for (int pairing : {0, 1})
                    for (int causal : {1, 0}) {
                        const double offset = rotated ? 1000003 : 7;
                        const Params p({{"offset", offset}, {"cache_rotated", double(rotated)}, {"pairing", double(pairing)},
                                        {"causal", double(causal)}});
                        const std::vector<TensorView> in = {h.view(),  wdkv.view(), wuk.view(),    wuv.view(),
                                                            wq.view(), wkr.view(),  cache->view(), krc.view()};
                        expect_bits_of(gpu, cpu, p, in,
                                       std::string(cache == &cc ? "" : "an infinite latent, ") + "cache_rotated " +
                                           std::to_string(rotated) + ", pairing " + std::to_string(pairing) +
                                           ", causal " + std::to_string(causal));
                        expect_bits_of(gpu, cpu, p, {h.view(), wdkv.view(), wuk.view(), wuv.view(), wq.view(), wkr.view()},
                                       "no cache");
                    }
    }
}

// With sigmoid scores cuda.moe_router's arithmetic is the CPU scalar
// kernel's (the logits by the same fmaf chain, p = 1 / (1 + expf(-l)) per
// expert, the weights' sum over the chosen in expert order, the loss's
// double sums in the same orders), so under the emulation (the host's
// expf) it equals cpu.scalar.moe_router bit for bit, under each launch:
// groups by top-2 and top-1 scores, exact ties (duplicated expert
// columns), a bias, capacity, scaling, renormalized or not, a token with a
// NaN logit, more experts than lanes.  (The softmax's sum is a warp
// butterfly: its suites judge it by the bound.)
TEST(CudaMoeRouter, SigmoidScoresEqualTheScalarCpuKernelBitForBit) {
    std::mt19937_64 rng(17);
    std::normal_distribution<double> normal;
    for (Format f : {Format::fp32, Format::bf16}) {
        const KernelInfo& gpu = *cuda_emu_registry().kernels.find(std::string("cuda.moe_router.") + name(f));
        const KernelInfo& cpu = *builtin_registry().find(std::string("cpu.scalar.moe_router.") + name(f));
        const std::int64_t t = 21, c = 13, e = 64;
        Tensor x(f, {t, c}), w(f, {c, e}), b(Format::fp32, {e});
        for (std::int64_t i = 0; i < x.numel(); ++i) x.set_value(i, normal(rng));
        for (std::int64_t i = 0; i < w.numel(); ++i)
            w.set_value(i, i % e < 16 && i % 2 == 1 ? w.value(i - 1) : normal(rng));  // experts 2j + 1 copy 2j (ties)
        for (std::int64_t i = 0; i < e; ++i) b.set_value(i, normal(rng) * 0.05);
        Tensor x_nan = x;
        x_nan.set_value(5 * c + 2, NAN);
        for (const Tensor* xs : {&x, &x_nan})
            for (int bias : {0, 1})
                for (int groups : {1, 8})
                    for (const auto& [k, renorm, capacity, scaling, group_top] :
                         {std::tuple{1, 1, 0.0, 1.0, 2}, std::tuple{4, 0, 1.25, 2.5, 1}, std::tuple{8, 1, 1.0, 0.7, 2}}) {
                        const Params p({{"k", double(k)}, {"score", 1}, {"renormalize", double(renorm)},
                                        {"capacity", capacity}, {"groups", double(groups)}, {"topk_groups", groups == 1 ? 0.0 : 3.0},
                                        {"group_top", double(group_top)}, {"scaling", scaling}});
                        std::vector<TensorView> in = {xs->view(), w.view()};
                        if (bias) in.push_back(b.view());
                        expect_bits_of(gpu, cpu, p, in,
                                       std::string(xs == &x ? "" : "a NaN token, ") + (bias ? "bias, " : "") + "groups " +
                                           std::to_string(groups) + ", k " + std::to_string(k));
                    }
    }
}

// cuda.moe and cuda.latent_moe are the CPU scalar kernels' arithmetic: the
// router's (sigmoid scores: its bits), every GEMM the CPU's fmaf chain in
// its order, the activations and the sums in the CPU's order.  Under the
// emulation (the host's expf) they equal cpu.scalar.<op> bit for bit in
// FP32 and BF16 and every launch -- shared experts or none, a capacity
// that drops slots, a NaN token (its row NaN), with and without the
// latent RMSNorm's weight.
TEST(CudaMoeLayer, SigmoidRoutingEqualsTheScalarCpuKernelsBitForBit) {
    std::mt19937_64 rng(37);
    std::normal_distribution<double> normal;
    const std::int64_t T = 9, C = 12, E = 6, F = 5, S = 2, G = 3, L = 7;
    auto random = [&](Format f, std::vector<std::int64_t> shape, double scale) {
        Tensor t(f, std::move(shape));
        for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, normal(rng) * scale);
        return t;
    };
    for (Format f : {Format::fp32, Format::bf16})
        for (const bool latent : {false, true}) {
            const std::string op = latent ? "latent_moe" : "moe";
            const KernelInfo& gpu = *cuda_emu_registry().kernels.find("cuda." + op + "." + name(f));
            const KernelInfo& cpu = *builtin_registry().find("cpu.scalar." + op + "." + name(f));
            const std::int64_t W = latent ? L : C;
            Tensor x = random(f, {T, C}, 1), router = random(f, {C, E}, 0.5), gu = random(f, {E, W, 2 * F}, 0.4),
                   dn = random(f, {E, F, W}, 0.4), sgu = random(f, {S, C, 2 * G}, 0.4), sdn = random(f, {S, G, C}, 0.4),
                   ld = random(f, {C, L}, 0.4), lu = random(f, {L, C}, 0.4), nw = random(f, {L}, 0.3), none(f, {0});
            x.set_value(4 * C + 3, NAN);
            for (const bool shared : {false, true})
                for (const double capacity : {0.0, 0.8}) {
                    const Params p({{"k", 2}, {"score", 1}, {"capacity", capacity}});
                    std::vector<TensorView> in = {x.view(), router.view()};
                    if (latent) in.insert(in.end(), {ld.view(), lu.view()});
                    in.insert(in.end(), {gu.view(), dn.view()});
                    if (shared) in.insert(in.end(), {sgu.view(), sdn.view()});
                    else in.insert(in.end(), {none.view(), none.view()});  // absent in place
                    if (latent) in.push_back(nw.view());
                    expect_bits_of(gpu, cpu, p, in,
                                   op + (shared ? ", shared experts" : "") + ", capacity " + std::to_string(capacity));
                }
        }
}

TEST(CudaBackend, WithoutAGpuEveryKernelIsNotProvidedWithTheReason) {
    const BackendRegistry& b = cuda_registry();
    if (!b.kernels.all().empty()) GTEST_SKIP() << "a GPU is usable here: " << b.library;
    ASSERT_EQ(b.not_provided.size(), cuda_emu_registry().kernels.all().size());
    for (const NotProvided& n : b.not_provided) {
        EXPECT_FALSE(n.reason.empty()) << n.kernel;
        EXPECT_EQ(n.reason, b.not_provided.front().reason) << "one reason for the whole backend";
    }
}

// On a GPU machine: every cuda kernel passes its suite on the device.
TEST(CudaDevice, EveryKernelPassesOnTheGpu) {
    const BackendRegistry& b = cuda_registry();
    if (b.kernels.all().empty())
        GTEST_SKIP() << "no usable GPU: "
                     << (b.not_provided.empty() ? std::string("no kernels") : b.not_provided.front().reason);
    for (const KernelInfo& k : b.kernels.all()) expect_suite_passes(k);
}

}  // namespace
}  // namespace conform
