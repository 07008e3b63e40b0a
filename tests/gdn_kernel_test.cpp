// Direct checks of the gated delta-rule kernels (docs/gdn.md, "Kernels"):
// every kernel against the FP64 tier of the oracle (oracle::*_recurrent<double>,
// whose own error is ~1e-16 relative, far below the FP32 bound) within the
// derived bound, on shapes and lengths the MPFR suite cannot afford (T = 4096,
// d = 64); AVX2 and scalar agree within their bounds; saturated gates and
// resets stay finite; the finite-range envelope of the scaled Q/K form; the
// AVX2 exp; the NaN pattern of the recurrence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>

#include "impls/cpu/gdn.hpp"
#include "impls/cuda/cuda.hpp"
#include "impls/cpu/isa.hpp"
#include "impls/registry.hpp"
#include "numerics/delta_varlen.hpp"
#include "oracle/bound.hpp"
#include "oracle/structured.hpp"
#include "oracle/gdn.hpp"
#include "oracle/gdn_bound.hpp"
#include "oracle/kda.hpp"
#include "properties/gdn.hpp"
#include "properties/generators.hpp"

namespace gdn_kernel_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using props::DeltaBetas;
using props::DeltaGates;

namespace {

struct Shape {
    std::int64_t T, H, dk, dv;
};

props::Case make_case(const std::string& op, Format f, Shape s, DeltaGates gates, std::uint64_t seed,
                      double chunk = 64, DeltaBetas betas = props::uniform_betas, double l2norm = 0) {
    const props::CaseSpec spec = props::structured_spec(
        op, f, {s.T, s.H, s.dk, s.dv, 1, gates, betas}, Params({{"chunk", chunk}, {"l2norm", l2norm}, {"scale", 0}}),
        props::Family::normal, 0, seed, 0);
    return props::build_case(spec);
}

// The FP64 tier: the recurrence in double on the same (exact) inputs.
oracle::DeltaResult<double> fp64_reference(const std::string& op, const Params& params,
                                           const std::vector<TensorView>& in) {
    oracle::DeltaProblem<double> p;
    const TensorView& q = in.at(0);
    p.tokens = q.shape[0], p.heads = q.shape[1], p.d_k = q.shape[2], p.d_v = in.at(2).shape[2];
    p.decay = op == "kda" ? oracle::DecayShape::per_channel : oracle::DecayShape::per_head;
    p.q = decoded_values(q), p.k = decoded_values(in[1]), p.v = decoded_values(in[2]), p.g = decoded_values(in[3]),
    p.beta = decoded_values(in[4]);
    if (in.size() > 5) p.s0 = decoded_values(in[5]);
    oracle::QkOptions<double> o;
    o.l2norm = params.get("l2norm", 0) != 0;
    o.l2_eps = params.get("l2_eps", 1e-6);
    const double scale = params.get("scale", 1);
    o.scale = scale != 0 ? scale : 1 / std::sqrt(static_cast<double>(p.d_k));
    const auto prepared = oracle::prepare_qk(p, o);
    return op == "kda" ? oracle::kda_recurrent(prepared) : oracle::gdn_recurrent(prepared);
}

oracle::DeltaErrorModel model_of(const KernelInfo& k) {
    oracle::DeltaErrorModel m;
    m.per_channel = k.op == "kda";
    m.out = k.out;
    m.state_out = output_format(k, 1);
    m.acc = k.acc;
    oracle::read_declared_update(m, k.declared);
    return m;
}

// Largest |got - ref| / bound; +inf where the NaN patterns differ or the
// error exceeds a zero bound.
double utilization(const Tensor& got, const std::vector<double>& ref, const std::vector<double>& bound) {
    double u = 0;
    for (std::int64_t i = 0; i < got.numel(); ++i) {
        const double x = got.value(i), r = ref[static_cast<std::size_t>(i)];
        if (std::isnan(x) || std::isnan(r)) {
            if (std::isnan(x) != std::isnan(r)) return INFINITY;
            continue;
        }
        const double err = std::fabs(x - r);
        if (err > 0) u = std::max(u, err / bound[static_cast<std::size_t>(i)]);
    }
    return u;
}

struct Checked {
    std::vector<Tensor> out;
    double util_y = 0, util_state = 0;
};

Checked check(const KernelInfo& k, const props::Case& c) {
    const auto ref = fp64_reference(k.op, c.params, c.views());
    Checked r{run_kernel(k, c.params, c.views()), 0, 0};
    const oracle::DeltaBound b = oracle::delta_rule_bound(c.params, c.views(), ref.y, model_of(k));
    r.util_y = utilization(r.out[0], ref.y, b.y);
    r.util_state = utilization(r.out[1], ref.state, b.state);
    return r;
}

const KernelInfo& kernel(const std::string& name) {
    const KernelInfo* k = builtin_registry().find(name);
    if (!k) throw std::runtime_error("no kernel " + name);
    return *k;
}

std::vector<std::string> names(const std::string& variant) {
    std::vector<std::string> v;
    for (const char* op : {"gdn", "kda"})
        for (const char* f : {"fp32", "bf16"}) v.push_back(std::string("cpu.") + variant + "." + op + "." + f);
    return v;
}

TEST(GdnKernel, EveryKernelWithinTheBoundOfTheFp64Tier) {
    const Shape shapes[] = {{1, 1, 1, 1}, {17, 2, 4, 3}, {64, 1, 16, 8}, {100, 2, 3, 7}, {257, 1, 32, 64}};
    std::map<std::string, double> worst;
    std::uint64_t seed = 1;
    for (const std::string variant : {"simd", "scalar"})
        for (const std::string& name : names(variant)) {
            const KernelInfo& k = kernel(name);
            for (const Shape& s : shapes)
                for (double chunk : {16.0, 32.0, 64.0})
                    for (DeltaGates gates : {props::mixed_gates, props::saturated_gates, props::unit_gates,
                                             props::burst_gates, props::near_one_gates}) {
                        const props::Case c = make_case(k.op, k.in, s, gates, seed, chunk, props::mixed_betas,
                                                        static_cast<double>(seed % 2));  // l2norm every other case
                        ++seed;
                        const Checked r = check(k, c);
                        EXPECT_LE(r.util_y, 1) << name << " T=" << s.T << " chunk " << chunk << " gates " << gates;
                        EXPECT_LE(r.util_state, 1) << name << " T=" << s.T << " chunk " << chunk << " gates " << gates;
                        worst[name] = std::max({worst[name], r.util_y, r.util_state});
                    }
        }
    for (const auto& [name, u] : worst) std::printf("  %-26s max utilization %.3g\n", name.c_str(), u);
}

TEST(GdnKernel, SimdAndScalarAgreeWithinTheirBounds) {
    for (const std::string& name : names("simd")) {
        const KernelInfo& simd = kernel(name);
        const KernelInfo& scalar = kernel("cpu.scalar" + name.substr(8));
        const props::Case c = make_case(simd.op, simd.in, {130, 2, 16, 8}, props::mixed_gates, 7, 32);
        const auto ref = fp64_reference(simd.op, c.params, c.views());
        const auto b = oracle::delta_rule_bound(c.params, c.views(), ref.y, model_of(simd));
        const auto a = run_kernel(simd, c.params, c.views()), s = run_kernel(scalar, c.params, c.views());
        for (std::int64_t i = 0; i < a[0].numel(); ++i)
            ASSERT_LE(std::fabs(a[0].value(i) - s[0].value(i)), 2 * b.y[static_cast<std::size_t>(i)]) << name << " y " << i;
        for (std::int64_t i = 0; i < a[1].numel(); ++i)
            ASSERT_LE(std::fabs(a[1].value(i) - s[1].value(i)), 2 * b.state[static_cast<std::size_t>(i)]) << name << " state " << i;
    }
}

// T = 4096 with realistic head sizes: mixed gates, and GDN's floor alpha =
// 1e-12 on every token; the naive recurrent baseline is reported beside.
TEST(GdnKernel, LongSequencesStayWithinTheBound) {
    std::vector<std::string> all = names("simd");
    for (const std::string& n : names("naive")) all.push_back(n);
    for (const std::string& name : all) {
        const KernelInfo& k = kernel(name);
        for (DeltaGates gates : {props::mixed_gates, props::saturated_gates}) {
            const props::Case c = make_case(k.op, k.in, {4096, 2, 16, 16}, gates, 11, 64);
            const Checked r = check(k, c);
            std::printf("  %-26s T=4096 %-9s utilization y %.3g, state %.3g\n", name.c_str(),
                        gates == props::mixed_gates ? "mixed" : "saturated", r.util_y, r.util_state);
            for (const Tensor& t : r.out)
                for (std::int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(std::isfinite(t.value(i))) << name;
            if (k.role != Role::kernel) continue;  // the baseline is not held to the chunkwise bound
            EXPECT_LE(r.util_y, 1) << name;
            EXPECT_LE(r.util_state, 1) << name;
        }
    }
}

// g = g_min on every token and channel (KDA -5, GDN ln 1e-12), chunk 64: the
// chunk's cumulative log-decay reaches -320 and -1768, where e^{-G} is far
// past FP32; and a reset (g = -inf) in the middle of a chunk.
TEST(GdnKernel, SaturatedGatesAndResetsStayFiniteAndWithinTheBound) {
    for (const std::string& name : names("simd")) {
        const KernelInfo& k = kernel(name);
        props::Case c = make_case(k.op, k.in, {300, 1, 8, 4}, props::saturated_gates, 3, 64, props::one_betas);
        Checked r = check(k, c);
        EXPECT_LE(std::max(r.util_y, r.util_state), 1) << name << " saturated";
        c = make_case(k.op, k.in, {150, 1, 8, 4}, props::mixed_gates, 5, 64);
        const std::int64_t width = c.inputs[3].numel() / 150;
        for (std::int64_t i = 37 * width; i < 38 * width; ++i) c.inputs[3].set_value(i, -INFINITY);
        r = check(k, c);
        EXPECT_LE(std::max(r.util_y, r.util_state), 1) << name << " reset";
        for (const Tensor& t : r.out)
            for (std::int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(std::isfinite(t.value(i))) << name;
    }
}

// A decay factor below the smallest subnormal is 0 in FP32, and the kernel
// multiplies it by the entry: q_r e^{G_r} loses |q_r| 2^-150, not 2^-150
// (docs/gdn.md, error bound, step 2).  With q = 2^20 and S0 = 2^11 the lost
// output is ~2^-130, which an entry-independent underflow term (2 eta sum|S|,
// ~2^-137) does not cover; the bound must, and the kernel must stay within it.
TEST(GdnKernel, UnderflowedDecayTimesALargeEntryStaysWithinTheBound) {
    for (const char* variant : {"scalar", "simd"})
        for (const std::string& name : names(variant)) {
            const KernelInfo& k = kernel(name);
            if (k.in != Format::fp32) continue;
            props::Case c = make_case(k.op, k.in, {24, 1, 4, 4}, props::saturated_gates, 11, 64, props::zero_betas);
            const std::int64_t width = c.inputs[3].numel() / 24;  // gates per token (1 or d_k)
            std::int64_t r = 0;
            for (double sum = c.inputs[3].value(0); sum > -150 * std::log(2.0); sum += c.inputs[3].value(r * width)) ++r;
            ASSERT_LT(r, 24) << name;
            c.inputs[0].set_value(r * 4, 0x1p20);                                 // q[r, 0, 0]
            for (std::int64_t m = 0; m < 4; ++m) c.inputs[5].set_value(m, 0x1p11);  // S0[0, m]
            const auto ref = fp64_reference(k.op, c.params, c.views());
            const Checked got = check(k, c);
            EXPECT_LE(std::max(got.util_y, got.util_state), 1) << name;
            const double err = std::fabs(got.out[0].value(r * 4) - ref.y[static_cast<std::size_t>(r * 4)]);
            EXPECT_GT(err, 0x1p-136) << name << ": the factor did not underflow at token " << r;
        }
}

// The same for K_e in the state update: the factor from token 0 to the
// chunk's end, e^-105, is 0 in FP32, so K_e[0] = k_0 * 0 loses |k_0| e^-105
// (k_0 = 2^20) times V~_0 = beta_0 v_0 = 2^60: the final state is off by
// ~2^-71.5, far above an entry-independent 2 eta |V~| (~2^-88).  The bound's
// K_e term must scale with |k| (eta (1 + |k_hat|), as K_s's and Q_s's do).
TEST(GdnKernel, UnderflowedEndDecayTimesALargeKeyStaysWithinTheBound) {
    for (const char* variant : {"scalar", "simd"})
        for (const std::string& name : names(variant)) {
            const KernelInfo& k = kernel(name);
            if (k.in != Format::fp32) continue;
            props::Case c = make_case(k.op, k.in, {2, 1, 1, 1}, props::mixed_gates, 3, 64, props::uniform_betas);
            const double values[][2] = {{0, 0}, {0x1p20, 1}, {0x1p100, 1}, {0, -105}, {0x1p-40, 0}};  // q, k, v, g, beta
            for (int i = 0; i < 5; ++i)
                for (std::int64_t t = 0; t < 2; ++t) c.inputs[static_cast<std::size_t>(i)].set_value(t, values[i][t]);
            c.inputs[5].set_value(0, 0);
            const auto ref = fp64_reference(k.op, c.params, c.views());
            const Checked got = check(k, c);
            EXPECT_LE(got.util_state, 1) << name;
            EXPECT_GT(std::fabs(got.out[1].value(0) - ref.state[0]), 0x1p-80) << name << ": the factor did not underflow";
        }
}

// The CUDA kernels (under the emulation) at the models' head size, d_k =
// d_v = 128, and at d_k != d_v, where the MPFR suite cannot go: within the
// bound against the FP64 tier, with l2norm and an initial state, over three
// chunks.  GDN's chunk of 64 at d = 128 fits on chip (~210 KiB), KDA's does
// not (the global workspace): both paths.
TEST(GdnKernel, CudaKernelsAtHeadSize128AndUnequalHeadSizes) {
    for (const char* op : {"gdn", "kda"})
        for (const char* f : {"fp32", "bf16"}) {
            const KernelInfo& k = *cuda_emu_registry().kernels.find(std::string("cuda.") + op + "." + f);
            for (const Shape& s : {Shape{150, 1, 128, 128}, Shape{70, 2, 128, 64}, Shape{70, 1, 32, 128}}) {
                const props::Case c = make_case(op, k.in, s, props::mixed_gates, 21, 64, props::uniform_betas, 1);
                const Checked got = check(k, c);
                EXPECT_LE(std::max(got.util_y, got.util_state), 1)
                    << k.name << " d_k " << s.dk << " d_v " << s.dv << ": y " << got.util_y << ", state " << got.util_state;
                EXPECT_EQ(got.out[0].numel(), s.T * s.H * s.dv);
                std::printf("[ cuda-emu ] %-16s d_k %3lld d_v %3lld: utilization y %.3g, state %.3g\n", k.name.c_str(),
                            static_cast<long long>(s.dk), static_cast<long long>(s.dv), got.util_y, got.util_state);
            }
        }
}

// The scaled form's range: C |g_min| < ln(max).  The split_exp mutants (the
// scaled form's factors exp(G_r) exp(-G_i) in fp32) are finite and within
// the bound up to that chunk and return Inf/NaN one token beyond it.
TEST(GdnKernel, FiniteRangeEnvelopeOfTheScaledForm) {
    const double gdn_min = std::log(1e-12);
    EXPECT_EQ(oracle::scaled_form_max_chunk(Format::fp32, -5), 17);
    EXPECT_EQ(oracle::scaled_form_max_chunk(Format::bf16, -5), 17);
    EXPECT_EQ(oracle::scaled_form_max_chunk(Format::fp16, -5), 2);
    EXPECT_EQ(oracle::scaled_form_max_chunk(Format::fp32, gdn_min), 3);
    EXPECT_EQ(oracle::scaled_form_max_chunk(Format::bf16, gdn_min), 3);
    EXPECT_EQ(oracle::scaled_form_max_chunk(Format::fp16, gdn_min), 0);
    for (const auto& [name, g_min] : {std::pair{"mutant.kda.split_exp.fp32", -5.0}, {"mutant.gdn.split_exp.fp32", gdn_min}}) {
        const KernelInfo& k = kernel(name);
        const std::int64_t envelope = oracle::scaled_form_max_chunk(Format::fp32, g_min);
        for (std::int64_t chunk : {envelope, envelope + 1}) {
            props::Case c = make_case(k.op, k.in, {2 * (envelope + 1), 1, 4, 3}, props::saturated_gates, 9,
                                      static_cast<double>(chunk), props::mixed_betas);
            const Checked r = check(k, c);
            bool finite = true;
            for (const Tensor& t : r.out)
                for (std::int64_t i = 0; i < t.numel(); ++i) finite = finite && std::isfinite(t.value(i));
            if (chunk == envelope) {
                EXPECT_TRUE(finite) << name << " chunk " << chunk;
                EXPECT_LE(std::max(r.util_y, r.util_state), 1) << name << " chunk " << chunk;
            } else {
                EXPECT_FALSE(finite) << name << " chunk " << chunk << " is past the envelope";
            }
        }
    }
}

// The AVX2 exp within 2 ulp of e^x for normal results (the budget's e_exp),
// within the smallest subnormal below them; NaN, +-inf and overflow exact.
TEST(GdnKernel, AvxExpWithinTwoUlp) {
    if (!cpu::has_avx2()) GTEST_SKIP() << "no AVX2";
    std::vector<float> x;
    for (double v = -110; v <= 90; v += 1.0 / 1024) x.push_back(static_cast<float>(v));
    for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.72f, 88.73f, -103.9f}) x.push_back(v);
    std::vector<float> y = x;
    cpu::delta_exp_avx2(y.data(), static_cast<long>(y.size()));
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double want = std::exp(static_cast<double>(x[i]));
        const double err = std::fabs(y[i] - want);
        if (want > std::numeric_limits<float>::max()) {
            EXPECT_EQ(y[i], INFINITY) << x[i];
        } else if (want >= std::numeric_limits<float>::min()) {
            EXPECT_LE(err, 2 * 0x1p-24 * want) << x[i];
        } else {
            EXPECT_LE(err, 0x1p-149) << x[i];
        }
    }
    float special[] = {NAN, INFINITY, -INFINITY, 100.0f, -200.0f, 0, 0, 0};
    cpu::delta_exp_avx2(special, 5);
    EXPECT_TRUE(std::isnan(special[0]));
    EXPECT_EQ(special[1], INFINITY);
    EXPECT_EQ(special[2], 0.0f);
    EXPECT_EQ(special[3], INFINITY);
    EXPECT_EQ(special[4], 0.0f);
}

// A NaN in one input element reaches exactly the outputs the recurrence
// gives it (v_j[m]: column m from token j on; q_j: y_j; k_j, g_j, beta_j:
// everything from j on; S_0[c, m]: column m).
TEST(GdnKernel, NanReachesExactlyTheRecurrencesOutputs) {
    for (const std::string variant : {"simd", "scalar"})
        for (const std::string& name : names(variant)) {
            const KernelInfo& k = kernel(name);
            for (std::size_t input = 0; input < 6; ++input) {
                // l2norm on every other input: a NaN row's norm scaled into a buffer's padding once reached
                // the next head (the padding is now reset on every load).
                props::Case c = make_case(k.op, k.in, {40, 2, 5, 3}, props::mixed_gates, 13 + input, 16,
                                          props::uniform_betas, static_cast<double>(input % 2));
                Tensor& t = c.inputs[input];
                t.set_value(t.numel() / 4 + 1, NAN);  // head 0 (of 2) of a token mid-sequence
                const Checked r = check(k, c);
                EXPECT_LE(std::max(r.util_y, r.util_state), 1) << name << " NaN in input " << input;
            }
        }
}

}  // namespace

// ---- packed variable-length calls (cu_seqlens) ------------------------------------

namespace {

// The case's tokens packed as sequences cut at `cu`, each from its own
// initial state (fresh values, [N, H, d_k, d_v]).
props::Case packed_case(const std::string& op, Format f, const std::vector<std::int64_t>& cu, std::uint64_t seed) {
    props::Case c = make_case(op, f, {cu.back(), 2, 5, 3}, props::mixed_gates, seed, 16);
    const auto n = static_cast<std::int64_t>(cu.size()) - 1;
    Tensor s0(f, {n, 2, 5, 3});
    for (std::int64_t i = 0; i < s0.numel(); ++i) s0.set_value(i, std::sin(0.3 + 0.7 * static_cast<double>(i)));
    Tensor seqlens(Format::fp32, {n + 1});
    for (std::int64_t i = 0; i <= n; ++i) seqlens.set_value(i, static_cast<double>(cu[static_cast<std::size_t>(i)]));
    c.inputs.resize(5);
    c.inputs.push_back(std::move(s0));
    c.inputs.push_back(std::move(seqlens));
    return c;
}

}  // namespace

// Every built-in kernel cuts a packed call into separate calls with chunks
// restarting at each sequence, so packed outputs equal the separate runs
// bit for bit (the property varlen_packing only asks for the bound).
TEST(GdnKernel, PackedCallEqualsSeparateCallsBitForBit) {
    const std::vector<std::int64_t> cu{0, 7, 7, 40, 41};  // an empty sequence, one past a chunk, one token
    for (const char* variant : {"simd", "scalar", "naive"})
        for (const std::string& name : names(variant)) {
            const KernelInfo& k = kernel(name);
            const props::Case c = packed_case(k.op, k.in, cu, 5);
            const std::vector<TensorView> in = c.views();
            const std::vector<Tensor> packed = run_kernel(k, c.params, in);
            ASSERT_EQ(packed[1].shape(), (std::vector<std::int64_t>{4, 2, 5, 3})) << name;
            const std::vector<TensorView> packed_views{packed[0].view(), packed[1].view()};
            for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
                const std::vector<Tensor> alone = run_kernel(k, c.params, delta_sequence_inputs(in, cu, n));
                const std::vector<TensorView> got = delta_sequence_outputs(packed_views, cu, n);
                for (std::size_t o = 0; o < 2; ++o)
                    for (std::int64_t i = 0; i < alone[o].numel(); ++i)
                        ASSERT_EQ(got[o].bits(i), alone[o].bits(i)) << name << " sequence " << n << " output " << o << " [" << i << "]";
            }
            // Without initial states (an empty placeholder): sequence 3 starts from zero.
            std::vector<TensorView> no_state = in;
            no_state[5] = TensorView::contiguous(nullptr, k.in, {0});
            const std::vector<Tensor> zero = run_kernel(k, c.params, no_state);
            std::vector<TensorView> seq = delta_sequence_inputs(in, cu, 3);
            seq.resize(5);
            const std::vector<Tensor> alone = run_kernel(k, c.params, seq);
            EXPECT_EQ(zero[0].bits(zero[0].numel() - 1), alone[0].bits(alone[0].numel() - 1)) << name;
        }
}

TEST(GdnKernel, MalformedCuSeqlensAreRejectedNamingTheEntry) {
    const KernelInfo& k = kernel("cpu.simd.gdn.fp32");
    for (const auto& [values, why] : std::vector<std::pair<std::vector<double>, std::string>>{
             {{0, 9, 5, 12}, "entry 2 is smaller"}, {{0, 2.5, 12}, "entry 1"}, {{1, 12}, "must start at 0"},
             {{0, 11}, "must start at 0 and end at T = 12"}, {{0, 13}, "entry 1"}}) {
        props::Case c = packed_case("gdn", Format::fp32, {0, 12}, 3);
        Tensor seqlens(Format::fp32, {static_cast<std::int64_t>(values.size())});
        for (std::size_t i = 0; i < values.size(); ++i) seqlens.set_value(static_cast<std::int64_t>(i), values[i]);
        c.inputs[6] = std::move(seqlens);
        c.inputs[5] = Tensor(Format::fp32, {0});
        try {
            run_kernel(k, c.params, c.views());
            ADD_FAILURE() << "accepted cu_seqlens " << ::testing::PrintToString(values);
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("cu_seqlens"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
        }
    }
}

// The oracle's packed evaluation (delta_varlen) against the FP64 tier of each
// sequence alone, and the packed bound against the per-sequence bound.
TEST(GdnKernel, PackedOracleAndBoundAreThoseOfTheSequences) {
    const std::vector<std::int64_t> cu{0, 3, 3, 20};
    for (const char* op : {"gdn", "kda"}) {
        const props::Case c = packed_case(op, Format::fp32, cu, 11);
        const std::vector<TensorView> in = c.views();
        const oracle::StructuredResult ex = oracle::evaluate_structured(op, c.params, in, {Format::fp32, Format::fp32});
        ASSERT_EQ(ex.exact[1].size(), 3u * 2 * 5 * 3) << op;
        const KernelInfo& k = kernel(std::string("cpu.simd.") + op + ".fp32");
        const std::vector<std::vector<double>> bound =
            oracle::find_structured_bound(op)(c.params, in, ex.exact, k.acc, {k.out, Format::fp32});
        for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
            const std::vector<TensorView> seq = delta_sequence_inputs(in, cu, n);
            const auto ref = fp64_reference(op, c.params, seq);
            const oracle::DeltaBound b = oracle::delta_rule_bound(c.params, seq, ref.y, model_of(k));
            const std::size_t y0 = static_cast<std::size_t>(cu[n] * 2 * 3), s0 = n * 2 * 5 * 3;
            for (std::size_t i = 0; i < ref.y.size(); ++i) {
                EXPECT_NEAR(ex.exact[0][y0 + i], ref.y[i], 1e-12) << op << " y " << n << " " << i;
                EXPECT_NEAR(bound[0][y0 + i], b.y[i], 1e-3 * b.y[i]) << op << " bound y " << n << " " << i;
            }
            for (std::size_t i = 0; i < ref.state.size(); ++i)
                EXPECT_NEAR(ex.exact[1][s0 + i], ref.state[i], 1e-12) << op << " state " << n << " " << i;
        }
    }
}

}  // namespace gdn_kernel_test
