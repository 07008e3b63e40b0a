// The divergence analysis (docs/diverge.md): the matmul budget against hand
// cases (tight within a known factor; a BF16 accumulation exceeds it), the
// metrics, then whole synthetic models run by the built-in kernels: clean
// stacks pass with a negligible FP64-tier bound, a mutant is found at its
// layer and point, a dump made under another convention is named, and the
// CLI refuses bad dumps with exit status 2 naming the file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <random>

#include "cli_testing.hpp"
#include "io/model_dump.hpp"
#include "model/diverge.hpp"
#include "impls/cpu/isa.hpp"
#include "model/dense_gemm.hpp"
#include "model/diverge_local.hpp"
#include "model/diverge_report.hpp"
#include "model/layout.hpp"
#include "model/metrics.hpp"
#include "model/step_bound.hpp"

namespace diverge_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

namespace fs = std::filesystem;
using namespace conform;
using namespace conform::model;

namespace {

Values values(std::vector<std::int64_t> shape, std::vector<double> v) { return Values{std::move(shape), std::move(v)}; }

// y = x W^T with every sum accumulated left to right in `acc` (fp32 or a
// narrower format: each partial sum rounded into it), stored into `out`.
std::vector<double> sequential_matmul(const Values& x, const Values& w, Format acc, Format out) {
    const std::int64_t K = x.shape.back(), T = x.numel() / K, N = w.shape[0];
    std::vector<double> y(static_cast<std::size_t>(T * N));
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < N; ++j) {
            float s = 0;
            for (std::int64_t k = 0; k < K; ++k) {
                s = static_cast<float>(s + static_cast<float>(x.v[t * K + k] * w.v[j * K + k]));
                s = static_cast<float>(decode(acc, encode(acc, s)));
            }
            y[static_cast<std::size_t>(t * N + j)] = decode(out, encode(out, s));
        }
    return y;
}

std::vector<double> exact_matmul(const Values& x, const Values& w) {
    const std::int64_t K = x.shape.back(), T = x.numel() / K, N = w.shape[0];
    std::vector<double> y(static_cast<std::size_t>(T * N));
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < N; ++j) {
            long double s = 0;  // the hand cases below are exact in long double
            for (std::int64_t k = 0; k < K; ++k) s += static_cast<long double>(x.v[t * K + k]) * w.v[j * K + k];
            y[static_cast<std::size_t>(t * N + j)] = static_cast<double>(s);
        }
    return y;
}

double max_utilization(const std::vector<double>& got, const std::vector<double>& exact, const std::vector<double>& bound) {
    double m = 0;
    for (std::size_t i = 0; i < got.size(); ++i) m = std::max(m, std::fabs(got[i] - exact[i]) / bound[i]);
    return m;
}

Values random_values(std::vector<std::int64_t> shape, Format f, std::uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<double> n(0, 1);
    Values v{shape, {}};
    std::int64_t count = 1;
    for (auto d : shape) count *= d;
    for (std::int64_t i = 0; i < count; ++i) v.v.push_back(decode(f, encode(f, n(g))));
    return v;
}

}  // namespace

// 1 + 63 terms of 2^-24 (1 + 2^-23): each FP32 add lands just above a
// midpoint and rounds up by almost u, so the error is 63 u (1 - 2^-23) against
// the bound gamma_64(u) (1 + 63 2^-24 ...) ~ 64 u: utilization 63/64 within
// 1e-3.  The bound is tight for this order, not an overestimate by K.
TEST(MatmulBound, TightWithinAKnownFactorOnAnAdversarialSum) {
    const std::int64_t K = 64;
    Values x = values({1, K}, std::vector<double>(K, 1.0));
    Values w = values({1, K}, std::vector<double>(K, std::ldexp(1 + std::ldexp(1, -23), -24)));
    w.v[0] = 1;
    const std::vector<double> got = sequential_matmul(x, w, Format::fp32, Format::fp32), exact = exact_matmul(x, w);
    const std::vector<double> bound = matmul_budget(abs_products(x, w, nullptr), exact, {Format::fp32, Format::fp32, Format::fp32});
    const double util = max_utilization(got, exact, bound);
    EXPECT_LE(util, 1.0);
    EXPECT_NEAR(util, 63.0 / 64.0, 2e-3);
}

// Random bf16 inputs, K = 512: an FP32-accumulating kernel stays inside the
// bound (errors grow like sqrt(K), so far inside); the same sums accumulated
// in BF16 (bug class 6) exceed it.
TEST(MatmulBound, Bf16AccumulationExceedsWhatFp32AccumulationMeets) {
    const Values x = random_values({4, 512}, Format::bf16, 1), w = random_values({16, 512}, Format::bf16, 2);
    const std::vector<double> exact = exact_matmul(x, w);
    const MatmulModel m{Format::bf16, Format::fp32, Format::bf16};
    const std::vector<double> bound = matmul_budget(abs_products(x, w, nullptr), exact, m);
    EXPECT_LE(max_utilization(sequential_matmul(x, w, Format::fp32, Format::bf16), exact, bound), 1.0);
    EXPECT_GT(max_utilization(sequential_matmul(x, w, Format::bf16, Format::bf16), exact, bound), 1.0);
}

// The FP64 tier's own matmul bound is 2^-29 of the FP32 one (before the output rounding).
TEST(MatmulBound, OracleBoundIsFarBelowTheBudget) {
    const Values x = random_values({2, 64}, Format::fp32, 3), w = random_values({8, 64}, Format::fp32, 4);
    const AbsProducts p = abs_products(x, w, nullptr);
    const std::vector<double> exact = exact_matmul(x, w);
    const std::vector<double> b = matmul_budget(p, exact, {Format::fp32, Format::fp32, Format::fp32});
    const std::vector<double> o = matmul_oracle_bound(p);
    for (std::size_t i = 0; i < b.size(); ++i) EXPECT_LT(o[i] / b[i], 1e-8);
}

TEST(UlpWindow, OneUlpAroundOneInBf16) {
    // Up: 1 + 2^-7; down: 1 - 2^-8 (the binade below is finer).
    EXPECT_EQ(ulp_window(Format::bf16, 1.0, 0, 1), std::ldexp(1, -7));
    EXPECT_EQ(ulp_window(Format::bf16, 1.0, 0, 0), 0.0);
    // Half-way between 1 and 1 + 2^-7: known exactly it rounds to 1 (even), one
    // ulp each way; known only to within e it may round to either, and the
    // window reaches one ulp above 1 + 2^-7.
    EXPECT_EQ(ulp_window(Format::bf16, 1 + std::ldexp(1, -8), 0, 1), std::ldexp(1, -7));
    EXPECT_EQ(ulp_window(Format::bf16, 1 + std::ldexp(1, -8), std::ldexp(1, -20), 1), 3 * std::ldexp(1, -8));
    EXPECT_EQ(ulp_window(Format::bf16, -1.0, 0, 1), std::ldexp(1, -7));
}

TEST(Metrics, EqualVectors) {
    const ErrorMetrics m = compare({1, -2, 0.5}, {1, -2, 0.5}, {0, 0, 0}, Format::fp32);
    EXPECT_EQ(m.max_ulp, 0);
    EXPECT_EQ(m.utilization, 0);
    EXPECT_EQ(m.cosine, 1);
    EXPECT_TRUE(std::isinf(m.sqnr_db));
    EXPECT_FALSE(exceeds(m));
}

TEST(Metrics, UlpRelativeSqnrUtilizationAndWorst) {
    const double up = 1 + std::ldexp(1, -7);  // one bf16 ulp above 1
    const ErrorMetrics m = compare({1, up, 4}, {1, 1, 4.0 + 1.0 / 16}, {1, 0.005, 0.125}, Format::bf16);
    EXPECT_EQ(m.max_ulp, 2);  // 4 + 1/16 rounds to 4 + 1/16 (bf16 spacing 1/32 at 4): two ulps from 4
    EXPECT_DOUBLE_EQ(m.max_rel, (1.0 / 16) / (4.0 + 1.0 / 16));
    EXPECT_DOUBLE_EQ(m.utilization, std::ldexp(1, -7) / 0.005);
    EXPECT_EQ(m.worst, 1);
    const double ee = std::ldexp(1, -14) + 1.0 / 256, rr = 1 + 1 + (4.0 + 1.0 / 16) * (4.0 + 1.0 / 16);
    EXPECT_NEAR(m.sqnr_db, 10 * std::log10(rr / ee), 1e-9);
    EXPECT_TRUE(exceeds(m));
    EXPECT_LT(m.cosine, 1);
}

TEST(Metrics, SpecialValuesAreClassesFirst) {
    const double inf = INFINITY, nan = NAN;
    EXPECT_TRUE(compare({nan}, {1}, {1}, Format::fp32).class_mismatch);   // NaN the reference lacks
    EXPECT_TRUE(compare({1}, {inf}, {1}, Format::fp32).class_mismatch);   // Inf the candidate lacks
    EXPECT_TRUE(compare({nan}, {nan}, {1}, Format::fp32).class_mismatch); // a NaN reference never passes
    EXPECT_FALSE(compare({inf}, {inf}, {0}, Format::fp32).class_mismatch);
    EXPECT_TRUE(compare({-inf}, {inf}, {1}, Format::fp32).class_mismatch);
    // A finite reference whose rounding overflows fp16 matches the Inf a correct kernel returns.
    EXPECT_FALSE(compare({inf}, {70000}, {1}, Format::fp16).class_mismatch);
    // NaN inherited from the step's inputs: both sides NaN is not a local failure.
    EXPECT_FALSE(compare({nan}, {nan}, {1}, Format::fp32, true).class_mismatch);
    const ErrorMetrics m = compare({1, nan}, {1, 1}, {1, 1}, Format::fp32);
    EXPECT_EQ(m.worst, 1);
    EXPECT_TRUE(exceeds(m));
    EXPECT_TRUE(exceeds(compare({1.5}, {1}, {0}, Format::fp32)));  // a zero allowance demands equality
    const ErrorMetrics u = compare({1.5, 2}, {1, 2}, {-INFINITY, 0}, Format::fp32);  // an undefined budget: not judged
    EXPECT_FALSE(exceeds(u));
    EXPECT_EQ(u.not_judged, 1);
}

// ---- whole synthetic models ---------------------------------------------------

namespace {

ModelContract small(const std::string& pattern, Format f) {
    ModelContract c;
    c.layers = 4;
    c.pattern = pattern;
    c.width = 32;
    c.heads = 4, c.kv_heads = 2, c.head_dim = 8;
    c.linear_heads = 2, c.linear_head_dim = 16;
    c.ffn = 64;
    c.tokens = 12;
    c.dtype = f;
    return c;
}

// The first failing point is `point`, and the analysis names `convention` there.
void expect_first_failing(const DivergeReport& r, const std::string& point, const std::string& convention) {
    ASSERT_TRUE(r.first_failing) << point;
    EXPECT_EQ(r.points[*r.first_failing].point, point);
    EXPECT_EQ(r.points[*r.first_failing].convention_match.value_or("none"), convention) << first_failing_text(r);
}

DivergeReport analyse(const ModelContract& c, const CandidateOptions& opt = {}, std::uint64_t seed = 5) {
    const Synthetic m = synthetic_model(c, seed);
    return diverge(c, m.weights, m.input, run_kernels(c, m.weights, m.input, opt));
}

}  // namespace

// The built-in kernels are sound: no point of any layer exceeds its local
// budget, and the FP64 tier's own bound is negligible beside every budget.
TEST(Diverge, BuiltinKernelsPassInEveryFormat) {
    for (const char* pattern : {"dense", "hybrid"})
        for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
            const ModelContract c = small(pattern, f);
            const DivergeReport r = analyse(c);
            EXPECT_FALSE(r.first_failing) << pattern << " " << name(f) << ": " << first_failing_text(r);
            EXPECT_LE(r.oracle_bound_ratio, 1e-3) << pattern << " " << name(f);
            EXPECT_EQ(r.points.size(), build_graph(c).size());
            for (const PointReport& p : r.points) {
                EXPECT_EQ(p.status, PointStatus::pass) << pattern << " " << name(f) << " " << p.point;
                EXPECT_LE(p.local.utilization, 1.0) << p.point;
            }
        }
}

// The budgets of the other step kinds hold for the built-in kernels too:
// kda, mHC streams (hc_mix, hc_update, sinkhorn), post-norm layer_norm,
// gated attention with QK-norm, SiTU-GLU, GeGLU, DeepSeek-V4's clamped SwiGLU.
TEST(Diverge, ContractVariantsPass) {
    const std::vector<std::function<void(ModelContract&)>> variants{
        [](ModelContract& c) { c.linear_kind = AttentionKind::kda; },
        [](ModelContract& c) { c.residual = ResidualKind::mhc; },
        [](ModelContract& c) { c.placement = Placement::post, c.norm = NormKind::layer_norm; },
        [](ModelContract& c) { c.attention_kind = AttentionKind::gated, c.qk_norm = true; },
        [](ModelContract& c) { c.mlp = MlpKind::situ_glu; },
        [](ModelContract& c) { c.mlp = MlpKind::geglu; },
        [](ModelContract& c) { c.mlp = MlpKind::swiglu_clamp, c.swiglu_limit = 0.5; },  // the clamp active on O(1) values
        // RoPE frequency scaling with a trained length short enough for 16
        // tokens to meet every band; YaRN's attention factor and a softmax scale.
        [](ModelContract& c) { c.rope_scaling = "llama3", c.rope_factor = 8, c.rope_original_max_pos = 16; },
        [](ModelContract& c) {
            c.rope_scaling = "yarn", c.rope_factor = 4, c.rope_original_max_pos = 64, c.rope_truncate = false;
            c.rope_attention_factor = 1.1386294364929199, c.attention_scale = 0.3;
        },
        // Gemma 3: sandwich norms, the embedding times sqrt(C), local layers
        // with their own unscaled RoPE base beside linearly scaled global ones.
        [](ModelContract& c) {
            c.placement = Placement::sandwich, c.zero_centered = true, c.logits = true, c.embed_scale = true;
            c.pattern = "dense", c.window = 64, c.window_pattern = "LG", c.rope_local_base = 10;
            c.rope_scaling = "linear", c.rope_factor = 8;
        },
        // Gemma 2: attention logits capped (at 0.5, below the synthetic
        // model's logits) and the output logits capped.
        [](ModelContract& c) {
            c.placement = Placement::sandwich, c.zero_centered = true, c.logits = true, c.embed_scale = true;
            c.pattern = "dense", c.window = 64, c.window_pattern = "LG", c.attention_softcap = 0.5, c.logit_softcap = 3;
        }};
    for (std::size_t v = 0; v < variants.size(); ++v)
        for (Format f : {Format::fp32, Format::bf16}) {
            ModelContract c = small("hybrid", f);
            variants[v](c);
            const DivergeReport r = analyse(c);
            EXPECT_FALSE(r.first_failing) << "variant " << v << " " << name(f) << ": " << first_failing_text(r);
            EXPECT_LE(r.oracle_bound_ratio, 1e-3) << "variant " << v << " " << name(f) << " at " << r.oracle_bound_worst;
        }
}

// A mutant substituted at one layer: that layer's point fails locally, the
// points before it pass, and later layers fail only by propagation.
TEST(Diverge, MutantIsFoundAtItsLayerAndPoint) {
    struct Case {
        std::string pattern, mutant;
        std::int64_t at;
        StepKind kind;
        std::function<void(ModelContract&)> variant = [](ModelContract&) {};
        Format f = Format::bf16;
    };
    const std::vector<Case> cases{
        {"dense", "mutant.rope.bf16_angles.bf16", 1, StepKind::rope},
        {"hybrid", "mutant.rope.bf16_angles.bf16", 3, StepKind::rope},
        {"dense", "mutant.rms_norm.zc_as_w.bf16", 2, StepKind::norm},
        // The other stacks: a KDA hybrid, mHC residual streams, post-norm.
        {"hybrid", "mutant.kda.beta_missing.bf16", 1, StepKind::kda,
         [](ModelContract& c) { c.linear_kind = AttentionKind::kda; }},
        {"dense", "mutant.rope.bf16_angles.bf16", 2, StepKind::rope,
         [](ModelContract& c) { c.residual = ResidualKind::mhc; }},
        {"dense", "mutant.rms_norm.zc_as_w.bf16", 1, StepKind::norm,
         [](ModelContract& c) { c.placement = Placement::post; }},
        // Frequency scaling: llama3's blend inverted; YaRN's mscale dropped.
        {"dense", "mutant.rope.llama3_smooth_inverted.bf16", 2, StepKind::rope,
         [](ModelContract& c) { c.rope_scaling = "llama3", c.rope_factor = 8, c.rope_original_max_pos = 16; }},
        {"dense", "mutant.rope.attention_factor_ignored.bf16", 1, StepKind::rope,
         [](ModelContract& c) {
             c.rope_scaling = "yarn", c.rope_factor = 4, c.rope_original_max_pos = 64, c.rope_attention_factor = 1.1386294364929199;
         }},
        // Gated attention: the output gate's sigmoid, rewritten as 1 - sigmoid(-x)
        // in float, cancels on the negative gate logits of that layer only.
        {"dense", "mutant.sigmoid.one_minus.fp32", 2, StepKind::sigmoid,
         [](ModelContract& c) { c.attention_kind = AttentionKind::gated; }, Format::fp32}};
    for (const Case& k : cases) {
        ModelContract c = small(k.pattern, k.f);
        c.layers = 6;
        c.zero_centered = k.kind == StepKind::norm;
        k.variant(c);
        CandidateOptions opt;
        opt.mutant = k.mutant, opt.at = k.at;
        const DivergeReport r = analyse(c, opt);
        ASSERT_TRUE(r.first_failing) << k.mutant;
        const PointReport& f = r.points[*r.first_failing];
        EXPECT_EQ(f.layer, k.at) << k.mutant;
        EXPECT_EQ(f.kind, k.kind) << f.point;
        bool propagated = false;
        for (std::size_t i = 0; i < r.points.size(); ++i) {
            const PointReport& p = r.points[i];
            if (i < *r.first_failing) {
                EXPECT_EQ(p.status, PointStatus::pass) << p.point;
            }
            if (p.layer > k.at) {
                EXPECT_NE(p.status, PointStatus::fail_local) << k.mutant << " " << p.point;
            }
            propagated = propagated || (p.layer > k.at && p.status == PointStatus::fail_propagated);
        }
        EXPECT_TRUE(propagated) << k.mutant << ": no later layer carries the error";
        EXPECT_EQ(to_json(r)["first_failing"]["layer"], k.at);
        EXPECT_EQ(to_json(r)["first_failing"]["point"], f.point);
    }
}

// The match at a failing point: a convention that changes the reference
// wins with its lowest passing utilization; else the tightest passing
// widening of the budget (attention_probs over the much wider
// attention_logits, which passes wherever it does); nothing that fails.
TEST(Diverge, ConventionMatchPrefersTheReferenceThenTheTightestWidening) {
    EXPECT_EQ(convention_match({{"attention_probs=dtype", 0.9}, {"attention_logits=dtype", 0.05}}), "attention_probs=dtype");
    EXPECT_EQ(convention_match({{"rope_arith=dtype", 0.9}, {"rope_pairing=interleaved", 0.75}, {"rope_arith=fp32_angles", 0.3}}),
              "rope_pairing=interleaved");
    EXPECT_EQ(convention_match({{"causal=top_left", 0.8}, {"window_keys=w_plus_one", 0.2}}), "window_keys=w_plus_one");
    EXPECT_EQ(convention_match({{"rope_arith=dtype", 0.99}, {"rope_arith=fp32_angles", 1.5}}), "rope_arith=dtype");
    EXPECT_EQ(convention_match({{"rope_pairing=interleaved", 3.0}, {"attention_probs=dtype", NAN}}), std::nullopt);
}

// A model whose attention ignores the contract's softcap (a kernel run
// without it) fails first at layer 0's attention step, locally.
TEST(Diverge, AttentionSoftcapIgnoredFailsAtTheFirstAttention) {
    for (Format f : {Format::fp32, Format::bf16}) {
        ModelContract c = small("dense", f);
        c.attention_softcap = 0.5;
        const Synthetic m = synthetic_model(c, 5);
        ModelContract uncapped = c;
        uncapped.attention_softcap = 0;
        const DivergeReport r = diverge(c, m.weights, m.input, run_kernels(uncapped, m.weights, m.input));
        ASSERT_TRUE(r.first_failing) << name(f);
        const PointReport& p = r.points[*r.first_failing];
        EXPECT_EQ(p.layer, 0) << name(f);
        EXPECT_EQ(p.kind, StepKind::attention) << name(f) << " " << p.point;
        EXPECT_EQ(p.status, PointStatus::fail_local) << name(f) << " " << p.point;
        EXPECT_FALSE(diverge(c, m.weights, m.input, run_kernels(c, m.weights, m.input)).first_failing) << name(f);
    }
}

// Gemma's GeGLU with the tanh GELU under a contract that declares erf: no
// built-in kernel computes it (the executor says so), so the dump's h is
// rewritten to the correctly rounded tanh GeGLU of its own gate_up; the
// analysis fails at that h and names the convention.
TEST(Diverge, GegluTanhIsIdentified) {
    ModelContract c = small("dense", Format::fp32);
    c.mlp = MlpKind::geglu;
    const Synthetic m = synthetic_model(c, 5);
    CandidateOptions tanh;
    tanh.conventions["gelu"] = "tanh";
    EXPECT_THROW(run_kernels(c, m.weights, m.input, tanh), std::invalid_argument);
    NamedTensors pts = run_kernels(c, m.weights, m.input);
    Conventions conv = c.conventions;
    conv["gelu"] = "tanh";
    for (const Step& s : build_graph(c))
        if (s.point == "layers.1.h") {
            const Values gu = values_of(pts.at("layers.1.gate_up").view());
            const Lookup get = [&](const std::string&) -> const Values& { return gu; };
            pts["layers.1.h"] = to_tensor(eval_step(c, s, get, conv), Format::fp32);
        }
    expect_first_failing(diverge(c, m.weights, m.input, pts), "layers.1.h", "gelu=tanh");
}

// Sliding-window layers (Gemma's local/global interleave, with a KV cache
// and both causal alignments) pass with the built-in kernels; their
// attention points differ from the same stack without a window.
TEST(Diverge, SlidingWindowLayersPass) {
    for (const std::string conv : {"bottom_right", "top_left"})
        for (Format f : {Format::fp32, Format::bf16}) {
            ModelContract c = small("dense", f);
            c.window = 3, c.window_pattern = "GL", c.cache_tokens = 5;
            c.conventions["causal"] = conv;
            const Synthetic m = synthetic_model(c, 5);
            const NamedTensors pts = run_kernels(c, m.weights, m.input);
            const DivergeReport r = diverge(c, m.weights, m.input, pts);
            EXPECT_FALSE(r.first_failing) << conv << " " << name(f) << ": " << first_failing_text(r);
            ModelContract global = c;
            global.window = 0;
            const NamedTensors g = run_kernels(global, m.weights, m.input);
            for (const char* p : {"layers.0.attn", "layers.1.attn"}) {
                bool same = true;
                for (std::int64_t i = 0; i < pts.at(p).numel(); ++i) same = same && pts.at(p).bits(i) == g.at(p).bits(i);
                EXPECT_EQ(same, std::string(p) == "layers.0.attn") << p << ": layer 0 is global, layer 1 local";
            }
        }
}

// The ends (token ids to FP32 logits): stacks with untied, tied and
// softcapped heads pass, the logits read top-1 agreement 1 against the
// oracle; a logit row corrupted in the dump fails locally at the logits and
// lowers the agreement; an id outside the vocabulary is refused naming the input.
TEST(Diverge, LogitsFromTokenIds) {
    const std::vector<std::function<void(ModelContract&)>> variants{
        [](ModelContract&) {}, [](ModelContract& c) { c.tied_embeddings = true, c.logit_softcap = 30; },
        [](ModelContract& c) { c.residual = ResidualKind::mhc; }};
    for (const auto& v : variants)
        for (Format f : {Format::fp32, Format::bf16}) {
            ModelContract c = small("dense", f);
            c.logits = true, c.vocab = 300;
            v(c);
            const DivergeReport r = analyse(c);
            EXPECT_FALSE(r.first_failing) << name(f) << ": " << first_failing_text(r);
            EXPECT_EQ(r.points.front().point, "embed");
            EXPECT_EQ(r.points.back().point, "logits");
            ASSERT_TRUE(r.points.back().logits);
            EXPECT_EQ(r.points.back().logits->top1, 1.0) << name(f);
            EXPECT_LT(r.points.back().logits->kl, 1e-3) << name(f);
        }
    ModelContract c = small("dense", Format::bf16);
    c.logits = true, c.vocab = 300;
    const Synthetic m = synthetic_model(c, 5);
    NamedTensors pts = run_kernels(c, m.weights, m.input);
    Tensor& lg = pts.at("logits");
    for (std::int64_t t = 0; t < c.tokens; ++t) {  // each token's largest logit moved to the next id
        std::int64_t best = 0;
        for (std::int64_t i = 1; i < c.vocab; ++i) best = lg.value(t * c.vocab + i) > lg.value(t * c.vocab + best) ? i : best;
        const std::int64_t other = (best + 1) % c.vocab;
        const std::uint64_t a = lg.bits(t * c.vocab + best), b = lg.bits(t * c.vocab + other);
        lg.set_bits(t * c.vocab + best, b), lg.set_bits(t * c.vocab + other, a);
    }
    const DivergeReport r = diverge(c, m.weights, m.input, pts);
    ASSERT_TRUE(r.first_failing);
    EXPECT_EQ(r.points[*r.first_failing].point, "logits");
    EXPECT_EQ(r.points.back().logits->top1, 0.0);
    // Weights tied by the candidate where the contract unties them: found at
    // the logits and named.
    CandidateOptions tied;
    tied.conventions["lm_head"] = "embed";
    expect_first_failing(analyse(c, tied), "logits", "lm_head=embed");
    Tensor bad = m.input;
    bad.set_value(3, 300);
    try {
        diverge(c, m.weights, bad, pts);
        ADD_FAILURE() << "an id past the vocabulary was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("input: token id 300.000000 at position 3"), std::string::npos) << e.what();
    }
}

// MLA layers (attention_kind mla): explicit and absorbed kernels, with a
// latent cache, on dense and hybrid stacks, pass in every format; each MLA
// mutant is found at its layer's attn point; a dump whose rope parts pair
// (2j, 2j + 1) under a half-split contract is named.
TEST(Diverge, MlaLayers) {
    const std::vector<std::function<void(ModelContract&)>> variants{
        [](ModelContract&) {}, [](ModelContract& c) { c.mla_form = "absorbed", c.cache_tokens = 4; },
        [](ModelContract& c) { c.pattern = "hybrid"; }};
    for (const auto& v : variants)
        for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
            ModelContract c = small("dense", f);
            c.attention_kind = AttentionKind::mla;
            v(c);
            const DivergeReport r = analyse(c);
            EXPECT_FALSE(r.first_failing) << c.mla_form << " " << name(f) << ": " << first_failing_text(r);
            EXPECT_LE(r.oracle_bound_ratio, 1e-3) << r.oracle_bound_worst;
            EXPECT_NE(r.mpfr_cross_check.find("mla"), std::string::npos) << r.mpfr_cross_check;
        }
    ModelContract c = small("dense", Format::fp32);
    c.attention_kind = AttentionKind::mla, c.cache_tokens = 3;
    for (const char* m : {"mutant.mla.rope_key_per_head.fp32", "mutant.mla.uk_untransposed.fp32", "mutant.mla.cache_rerotated.fp32"}) {
        CandidateOptions opt;
        opt.mutant = m, opt.at = 2;
        const DivergeReport r = analyse(c, opt);
        ASSERT_TRUE(r.first_failing) << m;
        EXPECT_EQ(r.points[*r.first_failing].point, "layers.2.attn") << m;
        EXPECT_EQ(r.points[*r.first_failing].kind, StepKind::mla) << m;
    }
    CandidateOptions opt;
    opt.conventions["rope_pairing"] = "interleaved";
    expect_first_failing(analyse(c, opt), "layers.0.attn", "rope_pairing=interleaved");
}

// DeepSeek-V2/V3's MLA as decomposed steps (mla_latent_norm, mla_q_rank;
// docs/mla.md, "In the model").
namespace {

ModelContract deepseek_like(Format f, std::int64_t q_rank) {
    ModelContract c = small("dense", f);
    c.layers = 2;
    c.attention_kind = AttentionKind::mla;
    c.mla_latent = 16, c.mla_nope_dim = 8, c.mla_rope_dim = 4, c.mla_v_dim = 6;  // d_v != d_nope + d_r
    c.mla_latent_norm = true, c.mla_q_rank = q_rank;
    return c;
}

}  // namespace

// The steps compute what Hugging Face's DeepseekV3Attention computes: on the
// FP64 tier's points, kv_norm is the RMSNorm of kv_a's first d_c columns,
// q_rope / k_rope the half-split rotation of the last d_r columns of each
// query head / of kv_a at positions P + t, and attn the causal softmax of
// [q_nope | q_rope] . [k_nope | k_rope] (k_rope shared by the heads, scale
// (d_nope + d_r)^-1/2) over the values, the P cached keys (kv_b_cache, the
// cache's rotated rope keys) before the new ones, recomputed here in double
// (2^-40 of the largest).
TEST(Diverge, DeepSeekMlaStepsComputeTheLayer) {
    for (std::int64_t P : {0, 3}) {
        ModelContract c = deepseek_like(Format::fp32, 24);
        c.cache_tokens = P;
        const Synthetic m = synthetic_model(c, 3);
        Named w;
        for (const auto& [n, t] : m.weights) w.emplace(n, values_of(t.view()));
        const Named pts = run_oracle(c, w, values_of(m.input.view()));
        const std::int64_t T = c.tokens, H = c.heads, dc = c.mla_latent, dn = c.mla_nope_dim, dr = c.mla_rope_dim,
                           dv = c.mla_v_dim, dq = dn + dr, dkv = dn + dv;
        const auto& q = pts.at("layers.1.q").v;
        const auto& kva = pts.at("layers.1.kv_a").v;
        const auto& kn = pts.at("layers.1.kv_norm").v;
        const auto& nw = w.at("layers.1.kv_norm.weight").v;
        // The keys' rows: the cached ones, then the new ones.
        std::vector<double> kvb = P > 0 ? pts.at("layers.1.kv_b_cache").v : std::vector<double>{};
        kvb.insert(kvb.end(), pts.at("layers.1.kv_b").v.begin(), pts.at("layers.1.kv_b").v.end());
        std::vector<double> kr = P > 0 ? w.at("layers.1.cache.k_r").v : std::vector<double>{};
        const auto rotated = [&](const double* x, std::int64_t pos) {  // half-split pairs (j, j + d_r / 2)
            std::vector<double> y(static_cast<std::size_t>(dr));
            for (std::int64_t j = 0; j < dr / 2; ++j) {
                const double a = static_cast<double>(pos) * std::pow(c.rope_base, -2.0 * static_cast<double>(j) / static_cast<double>(dr));
                y[j] = x[j] * std::cos(a) - x[j + dr / 2] * std::sin(a);
                y[j + dr / 2] = x[j + dr / 2] * std::cos(a) + x[j] * std::sin(a);
            }
            return y;
        };
        double worst = 0, largest = 0;
        const auto check = [&](double got, double want) {
            worst = std::max(worst, std::fabs(got - want)), largest = std::max(largest, std::fabs(want));
        };
        std::vector<double> qr(static_cast<std::size_t>(T * H * dr));
        for (std::int64_t t = 0; t < T; ++t) {
            double ms = 0;
            for (std::int64_t i = 0; i < dc; ++i) ms += kva[t * (dc + dr) + i] * kva[t * (dc + dr) + i] / static_cast<double>(dc);
            for (std::int64_t i = 0; i < dc; ++i) check(kn[t * dc + i], nw[i] * kva[t * (dc + dr) + i] / std::sqrt(ms + c.eps));
            const std::vector<double> k = rotated(&kva[t * (dc + dr) + dc], P + t);
            kr.insert(kr.end(), k.begin(), k.end());
            for (std::int64_t h = 0; h < H; ++h) {
                const std::vector<double> y = rotated(&q[t * H * dq + h * dq + dn], P + t);
                std::copy(y.begin(), y.end(), qr.begin() + (t * H + h) * dr);
            }
        }
        for (std::size_t i = 0; i < qr.size(); ++i) check(pts.at("layers.1.q_rope").v[i], qr[i]);
        for (std::int64_t i = 0; i < T * dr; ++i) check(pts.at("layers.1.k_rope").v[i], kr[P * dr + i]);
        const auto& attn = pts.at("layers.1.attn").v;
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t t = 0; t < T; ++t) {
                std::vector<double> s(static_cast<std::size_t>(P + t + 1));
                for (std::int64_t j = 0; j <= P + t; ++j) {
                    double d = 0;
                    for (std::int64_t e = 0; e < dn; ++e) d += q[t * H * dq + h * dq + e] * kvb[j * H * dkv + h * dkv + e];
                    for (std::int64_t e = 0; e < dr; ++e) d += qr[(t * H + h) * dr + e] * kr[j * dr + e];
                    s[j] = d / std::sqrt(static_cast<double>(dq));
                }
                const double mx = *std::max_element(s.begin(), s.end());
                double l = 0;
                for (double& e : s) l += (e = std::exp(e - mx));
                for (std::int64_t e = 0; e < dv; ++e) {
                    double o = 0;
                    for (std::int64_t j = 0; j <= P + t; ++j) o += s[j] / l * kvb[j * H * dkv + h * dkv + dn + e];
                    check(attn[t * H * dv + h * dv + e], o);
                }
            }
        EXPECT_LE(worst, std::ldexp(largest, -40)) << "cache " << P;
        EXPECT_EQ(pts.at("layers.1.q_a_norm").shape, (std::vector<std::int64_t>{T, 24}));
        EXPECT_EQ(pts.at("layers.1.attn").shape, (std::vector<std::int64_t>{T, H * dv}));
        if (P > 0) {
            EXPECT_EQ(pts.at("layers.1.kv_b_cache").shape, (std::vector<std::int64_t>{P, H * dkv}));
        }
    }
}

// Every point of the decomposed layer is judged and the built-in kernels
// pass in fp32 and bf16, with the low-rank query and a cache of 5 tokens and
// without either; the FP64 tier's
// bound stays negligible and the MPFR cross-check covers the new steps.  A
// latent norm with its eps outside the root (a contract with eps 0.1, where
// that moves the norm well past its budget) fails at kv_norm, a rope pairing
// (2j, 2j + 1) under a half-split contract at q_rope, a top-left causal
// attention kernel over a cache at attn, each named; on a sample of the
// tokens too.  The contract refuses a low-rank query without the latent norm.
TEST(Diverge, DeepSeekMlaLayers) {
    for (Format f : {Format::fp32, Format::bf16})
        for (std::int64_t rank : {0, 24}) {
            ModelContract c = deepseek_like(f, rank);
            c.cache_tokens = rank > 0 ? 5 : 0;
            const DivergeReport r = analyse(c);
            const std::string what = std::string(name(f)) + " q rank " + std::to_string(rank) + " cache " +
                                     std::to_string(c.cache_tokens);
            EXPECT_FALSE(r.first_failing) << what << ": " << first_failing_text(r);
            EXPECT_LE(r.oracle_bound_ratio, 1e-3) << what << " at " << r.oracle_bound_worst;
            std::map<std::string, StepKind> kinds;
            for (const PointReport& p : r.points) kinds[p.point] = p.kind;
            for (const char* p : {"q", "kv_a", "kv_norm", "kv_b", "q_rope", "k_rope", "attn", "attn_out"})
                EXPECT_TRUE(kinds.count(std::string("layers.1.") + p)) << what << " " << p;
            EXPECT_EQ(kinds.count("layers.1.q_a") + kinds.count("layers.1.q_a_norm"), rank > 0 ? 2u : 0u) << what;
            EXPECT_EQ(kinds.count("layers.1.kv_b_cache"), c.cache_tokens > 0 ? 1u : 0u) << what;
            EXPECT_EQ(kinds["layers.1.attn"], StepKind::attention) << what;
            for (const char* k : {"head_norm", "rope", "attention"})
                EXPECT_NE(r.mpfr_cross_check.find(k), std::string::npos) << what << " " << r.mpfr_cross_check;
        }
    ModelContract c = deepseek_like(Format::bf16, 24);
    c.eps = 0.1;
    CandidateOptions eps;
    eps.conventions["kv_norm:eps_placement"] = "outside";
    expect_first_failing(analyse(c, eps), "layers.0.kv_norm", "eps_placement=outside");
    CandidateOptions pairing;
    pairing.conventions["rope_pairing"] = "interleaved";
    expect_first_failing(analyse(c, pairing), "layers.0.q_rope", "rope_pairing=interleaved");
    // With cached keys an attention kernel aligning the mask top-left (new
    // token t sees keys j <= t only) fails at its layer's attn, named.
    c.cache_tokens = 5;
    CandidateOptions mutant;
    mutant.mutant = "mutant.attention.top_left_causal.bf16", mutant.at = 1;
    expect_first_failing(analyse(c, mutant), "layers.1.attn", "causal=top_left");

    // Judged on 6 of the 12 tokens (docs/diverge.md, "Scale"): the sampled
    // queries over the keys before them; clean passes, an attention kernel
    // that drops the scale fails at its attn.
    const ModelContract sc = deepseek_like(Format::bf16, 24);
    const Synthetic m = synthetic_model(sc, 5);
    DivergeOptions few;
    few.tokens = 6;
    const DivergeReport clean = diverge(sc, ModelRun{m.weights, m.input, run_kernels(sc, m.weights, m.input), "c"}, few);
    EXPECT_EQ(clean.tokens_checked, 6);
    EXPECT_FALSE(clean.first_failing) << first_failing_text(clean);
    CandidateOptions scale;
    scale.mutant = "mutant.attention.scale_dropped.bf16", scale.at = 1;
    const DivergeReport dropped =
        diverge(sc, ModelRun{m.weights, m.input, run_kernels(sc, m.weights, m.input, scale), "c"}, few);
    ASSERT_TRUE(dropped.first_failing);
    EXPECT_EQ(dropped.points[*dropped.first_failing].point, "layers.1.attn");

    ModelContract bad = deepseek_like(Format::fp32, 24);
    bad.mla_latent_norm = false;
    EXPECT_THROW(validate(bad), std::invalid_argument);
}

// ---- drift against the same-dtype reference (docs/diverge.md, "Drift") ---------

// A clean stack of the built-in kernels drifts like a correctly rounded one
// of its dtype (drift about 1 at every point); a planted defect reads its
// factor at its layer, where the propagated utilization of a clean BF16
// stack already reads millions.
TEST(DivergeDrift, CleanModelsReadAboutOneADefectReadsItsFactor) {
    for (const char* pattern : {"dense", "hybrid"})
        for (Format f : {Format::bf16, Format::fp16}) {
            const DivergeReport r = analyse(small(pattern, f));
            int computed = 0;
            for (const PointReport& p : r.points) {
                if (std::isnan(p.drift)) continue;
                ++computed;
                EXPECT_GE(p.drift, 0.5) << pattern << " " << name(f) << " " << p.point;
                EXPECT_LE(p.drift, 2.0) << pattern << " " << name(f) << " " << p.point;
            }
            EXPECT_GT(computed, static_cast<int>(r.points.size()) / 2) << pattern << " " << name(f);
        }
    ModelContract c = small("dense", Format::bf16);
    c.zero_centered = true;
    CandidateOptions opt;
    opt.mutant = "mutant.rms_norm.zc_as_w.bf16", opt.at = 2;
    const DivergeReport r = analyse(c, opt);
    for (const LayerSummary& l : layer_summaries(r)) {
        if (l.layer < opt.at) {
            EXPECT_LE(l.drift, 2.0) << l.layer;
        }
        if (l.layer == opt.at) {
            EXPECT_GT(l.drift, 50.0);
        }
    }
    EXPECT_TRUE(to_json(r)["layers"][2]["drift"].is_number());
}

// ---- MoE MLPs (docs/moe.md, "In the model") ---------------------------------------

namespace {

ModelContract moe_model(MlpKind k, Format f) {
    ModelContract c = small("dense", f);
    c.mlp = k, c.experts = 6, c.top_k = 2, c.shared_experts = 1, c.expert_ffn = 16, c.latent_dim = 16;
    return c;
}

// The synthetic model's input and weights and the built-in kernels' points, as values.
Named kernel_values(const ModelContract& c, const Synthetic& m) {
    const NamedTensors run = run_kernels(c, m.weights, m.input);
    Named vals{{"input", values_of(m.input.view())}};
    for (const NamedTensors* ts : {&m.weights, &run})
        for (const auto& [n, t] : *ts) vals.emplace(n, values_of(t.view()));
    return vals;
}

}  // namespace

// The MoE steps' budgets hold for the built-in kernels in every format and
// router variant, and the FP64 tier's bound stays negligible beside them.
TEST(DivergeMoe, BuiltinKernelsPass) {
    const std::vector<std::function<void(ModelContract&)>> variants{
        [](ModelContract&) {},
        [](ModelContract& c) { c.router_score = RouterScore::sigmoid, c.selection_bias = true, c.renormalize = false; },
        [](ModelContract& c) { c.shared_experts = 0, c.normalized = false, c.top_k = 1; },
        [](ModelContract& c) { c.pattern = "hybrid", c.linear_kind = AttentionKind::kda, c.residual = ResidualKind::mhc; }};
    for (MlpKind k : {MlpKind::moe, MlpKind::latent_moe})
        for (std::size_t v = 0; v < variants.size(); ++v)
            for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
                if (v > 0 && f == Format::fp16) continue;
                ModelContract c = moe_model(k, f);
                variants[v](c);
                const DivergeReport r = analyse(c);
                const std::string what = std::string(name(k)) + " variant " + std::to_string(v) + " " + name(f);
                EXPECT_FALSE(r.first_failing) << what << ": " << first_failing_text(r);
                EXPECT_LE(r.oracle_bound_ratio, 1e-3) << what << " at " << r.oracle_bound_worst;
                EXPECT_NE(r.mpfr_cross_check.find("router"), std::string::npos) << r.mpfr_cross_check;
            }
}

// The conventions of a narrow format's own arithmetic (Hugging Face's
// PyTorch code in bf16, docs/diverge.md "Recording Hugging Face models"):
// rope_arith, attention_probs, attention_logits and router_arith = dtype widen only their own
// step's budget (in an fp32 model only rope_arith, for its FP32 angles),
// keep a clean run passing when declared, and the executor refuses them (no
// built-in kernel computes that way).  The recorded Hugging Face models that need them:
// tests/python/hf_model_test.py.
TEST(DivergeMoe, NarrowArithmeticConventionsWidenOnlyTheirStep) {
    const std::vector<std::pair<std::string, StepKind>> cases{
        {"rope_arith", StepKind::rope}, {"attention_probs", StepKind::attention},
        {"attention_logits", StepKind::attention}, {"router_arith", StepKind::router}};
    for (Format f : {Format::bf16, Format::fp32}) {
        const ModelContract c = moe_model(MlpKind::moe, f);
        const Synthetic m = synthetic_model(c, 5);
        const Named vals = kernel_values(c, m);
        const Lookup get = [&](const std::string& n) -> const Values& { return vals.at(n); };
        for (const auto& [key, kind] : cases) {
            Conventions conv = c.conventions;
            conv[key] = "dtype";
            for (const Step& s : build_graph(c)) {
                if (s.layer != 0) continue;
                const Values ref = eval_step(c, s, get, c.conventions);
                const std::vector<double> a = step_bound(c, s, get, ref, c.conventions, s.format).budget;
                const std::vector<double> b = step_bound(c, s, get, ref, conv, s.format).budget;
                if (s.kind != kind || (f == Format::fp32 && key != "rope_arith")) {
                    EXPECT_EQ(a, b) << key << " " << name(f) << " " << s.point;
                    continue;
                }
                double sa = 0, sb = 0;
                for (std::size_t i = 0; i < a.size(); ++i) {
                    EXPECT_GE(b[i], a[i]) << key << " " << s.point << " element " << i;
                    sa += a[i], sb += b[i];
                }
                EXPECT_GT(sb, (f == Format::fp32 ? 1.01 : 2) * sa) << key << " " << name(f) << " " << s.point;
            }
            if (f == Format::fp32 && key != "rope_arith") continue;
            CandidateOptions opt;
            opt.conventions[key] = "dtype";
            try {
                run_kernels(c, m.weights, m.input, opt);
                ADD_FAILURE() << key << ": run_kernels ran";
            } catch (const std::invalid_argument& e) {
                EXPECT_NE(std::string(e.what()).find(key + "=dtype"), std::string::npos) << e.what();
            }
        }
        ModelContract declared = c;
        for (const auto& [key, kind] : cases) declared.conventions[key] = "dtype";
        const DivergeReport r = diverge(declared, m.weights, m.input, run_kernels(c, m.weights, m.input));
        EXPECT_FALSE(r.first_failing) << name(f) << ": " << first_failing_text(r);
    }
}

namespace {

// Every step's budget under the contract's conventions and under `conv`, on
// the built-in kernels' run of c: (step, budget a, budget b) for each step.
struct BudgetPair {
    Step s;
    std::vector<double> a, b;
};
std::vector<BudgetPair> budgets_under(const ModelContract& c, const Conventions& conv) {
    const Named vals = kernel_values(c, synthetic_model(c, 5));
    const Lookup get = [&](const std::string& n) -> const Values& { return vals.at(n); };
    std::vector<BudgetPair> out;
    for (const Step& s : build_graph(c)) {
        const Values ref = eval_step(c, s, get, c.conventions);
        out.push_back({s, step_bound(c, s, get, ref, c.conventions, s.format).budget, step_bound(c, s, get, ref, conv, s.format).budget});
    }
    return out;
}

double total(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
}

}  // namespace

// logits_format = dtype (the lm_head product rounded to the model's dtype,
// as Hugging Face's lm_head returns it) widens only the logits step, by the
// rounding to the dtype (changes nothing in fp32); the logits point is
// judged in the format the contract declares, whatever the dump stores, so
// BF16 logits -- stored as BF16 or widened to FP32 -- fail an FP32-logits
// contract at the logits, named, and pass one that declares them.  The
// executor runs the convention (an FP32-accumulating product rounded to the
// dtype, stored in the point's declared format).
TEST(DivergeEnds, LogitsFormatWidensOnlyTheLogitsStep) {
    for (Format f : {Format::bf16, Format::fp32}) {
        ModelContract c = small("dense", f);
        c.logits = true, c.vocab = 300, c.layers = 2;
        Conventions conv = c.conventions;
        conv["logits_format"] = "dtype";
        for (const BudgetPair& p : budgets_under(c, conv)) {
            if (p.s.point != "logits" || f == Format::fp32) {
                EXPECT_EQ(p.a, p.b) << name(f) << " " << p.s.point;
                continue;
            }
            for (std::size_t i = 0; i < p.a.size(); ++i) ASSERT_GE(p.b[i], p.a[i]) << "element " << i;
            EXPECT_GT(total(p.b), 100 * total(p.a));  // half a bf16 ulp against gamma_32(2^-24) A
        }
    }
    ModelContract c = small("dense", Format::bf16);
    c.logits = true, c.vocab = 300;
    const Synthetic m = synthetic_model(c, 5);
    CandidateOptions opt;
    opt.conventions["logits_format"] = "dtype";
    // The executor stores the dtype-rounded logits in the declared FP32 (as a
    // port that calls .float() on them); the same values stored as BF16.
    NamedTensors widened = run_kernels(c, m.weights, m.input, opt);
    ASSERT_EQ(widened.at("logits").format(), Format::fp32);
    NamedTensors bf16_logits = widened;
    bf16_logits.at("logits") = to_tensor(values_of(widened.at("logits").view()), Format::bf16);
    EXPECT_EQ(values_of(bf16_logits.at("logits").view()).v, values_of(widened.at("logits").view()).v);
    EXPECT_NE(values_of(widened.at("logits").view()).v, values_of(run_kernels(c, m.weights, m.input).at("logits").view()).v);
    ModelContract declared = c;
    declared.conventions["logits_format"] = "dtype";
    EXPECT_EQ(build_graph(declared).back().format, Format::bf16);
    EXPECT_EQ(build_graph(c).back().format, Format::fp32);
    for (const NamedTensors* run : {&bf16_logits, &widened}) {
        expect_first_failing(diverge(c, m.weights, m.input, *run), "logits", "logits_format=dtype");
        const DivergeReport r = diverge(declared, m.weights, m.input, *run);
        EXPECT_FALSE(r.first_failing) << first_failing_text(r);
        ASSERT_TRUE(r.points.back().logits);
        EXPECT_EQ(r.points.back().logits->top1, 1.0);
        EXPECT_GT(r.points.back().local.utilization, 0.1);  // the dtype's rounding uses the budget
    }
    // The clean FP32-logits run passes the contract that declares FP32 logits.
    EXPECT_FALSE(analyse(c).first_failing);
}

// Top-1 and top-k read ties in the candidate (BF16 logits) in the
// reference's favour: no order of equal values is wrong.
TEST(DivergeEnds, LogitMetricsReadTiesInTheReferencesFavour) {
    // k = 5 of V = 7: the candidate ties ids 4 and 5 at its 5th place, and 0 and 1 at its top.
    const std::vector<double> cand{5, 5, 3, 2, 1, 1, 0}, ref{4.9, 5, 3, 2, 0.5, 1, 0};
    const LogitMetrics m = logit_metrics(cand, ref, 7);
    EXPECT_EQ(m.top1, 1.0);
    EXPECT_EQ(m.topk, 1.0);
    const std::vector<double> apart{5, 4.5, 3, 2, 1, 1, 0};  // no tie at the top: id 0 is not the reference's argmax
    EXPECT_EQ(logit_metrics(apart, ref, 7).top1, 0.0);
    const std::vector<double> out{5, 5, 3, 2, 1, 0.5, 0};  // the reference's 5th (id 5) below the candidate's
    EXPECT_EQ(logit_metrics(out, ref, 7).topk, 0.8);
}

namespace {

// SwiGLU as PyTorch computes act_fn(gate) * up in FP32 with the weakest exp
// glu_arith = separate admits: exp(-g) rounded upwards (within 1 ulp), 1 +
// exp and g / (1 + exp) rounded to nearest, the product rounded.
double separate_swiglu_fp32(double g, double up) {
    const double e = std::exp(-g);
    float ef = static_cast<float>(e);
    if (static_cast<double>(ef) < e) ef = std::nextafter(ef, INFINITY);
    const float d = 1.0f + ef, s = static_cast<float>(g) / d;
    return static_cast<double>(s * static_cast<float>(up));
}

// Every layer's h rewritten as act(gate) * up by `glu` from its gate_up.
void rewrite_h(NamedTensors& run, std::int64_t layers, const std::function<double(double, double)>& glu) {
    for (std::int64_t l = 0; l < layers; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        const Tensor& gu = run.at(p + "gate_up");
        Tensor& h = run.at(p + "h");
        const std::int64_t F = h.shape()[1];
        for (std::int64_t t = 0; t < h.shape()[0]; ++t)
            for (std::int64_t j = 0; j < F; ++j) h.set_value(t * F + j, glu(gu.value(t * 2 * F + j), gu.value(t * 2 * F + F + j)));
    }
}

}  // namespace

// glu_arith = separate changes only the glu step's budget (every other one
// is unchanged): in fp32 it widens it everywhere (the FP32 SiLU's 4u and a
// second rounding); in bf16 its derived budget sums to less than the fused
// 1-ulp window (both are dominated by the format's own roundings); an FP32 SwiGLU computed separately with a
// 1-ulp exp fails the fused budget at layer 0's h, named, and passes when
// declared; the executor refuses it (no built-in kernel); a GLU other than
// SwiGLU refuses the declaration.
TEST(DivergeEnds, GluArithSeparateWidensOnlyTheGluStep) {
    for (Format f : {Format::fp32, Format::bf16}) {
        ModelContract c = small("dense", f);
        c.layers = 2;
        Conventions conv = c.conventions;
        conv["glu_arith"] = "separate";
        for (const BudgetPair& p : budgets_under(c, conv)) {
            if (p.s.kind != StepKind::glu) {
                EXPECT_EQ(p.a, p.b) << name(f) << " " << p.s.point;
                continue;
            }
            if (f != Format::fp32) {  // derived, not widened: about half an ulp of s times up, plus the product's half ulp
                EXPECT_NE(p.a, p.b) << p.s.point;
                EXPECT_GT(total(p.b), 0.5 * total(p.a)) << p.s.point;
                continue;
            }
            EXPECT_GT(total(p.b), 1.5 * total(p.a)) << p.s.point;
            for (std::size_t i = 0; i < p.a.size(); ++i)  // >= 2.5 ulps of h against the fused <= 1.5 wherever h != 0
                if (p.a[i] > 1e-40) {
                    ASSERT_GE(p.b[i], p.a[i]) << p.s.point << " element " << i;
                }
        }
        CandidateOptions opt;
        opt.conventions["glu_arith"] = "separate";
        try {
            run_kernels(c, synthetic_model(c, 5).weights, synthetic_model(c, 5).input, opt);
            ADD_FAILURE() << "run_kernels ran glu_arith=separate";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("glu_arith=separate"), std::string::npos) << e.what();
        }
    }
    ModelContract c = small("dense", Format::fp32);
    const Synthetic m = synthetic_model(c, 5);
    NamedTensors run = run_kernels(c, m.weights, m.input);
    rewrite_h(run, c.layers, separate_swiglu_fp32);
    expect_first_failing(diverge(c, m.weights, m.input, run), "layers.0.h", "glu_arith=separate");
    ModelContract declared = c;
    declared.conventions["glu_arith"] = "separate";
    const DivergeReport r = diverge(declared, m.weights, m.input, run);
    EXPECT_FALSE(r.first_failing) << first_failing_text(r);
    ModelContract situ = small("dense", Format::fp32);
    situ.mlp = MlpKind::situ_glu, situ.conventions["glu_arith"] = "separate";
    EXPECT_THROW(validate(situ), std::invalid_argument);  // not derived
}

// GeGLU with the tanh GELU computed in two ops (Gemma: PyTorch's FP32 tanh
// GELU stored, then the product rounded): only the glu step's budget
// changes; in fp32 it widens everywhere h != 0 (the GELU's FP32 error, then
// a second rounding); a tanh GELU computed in FP32 with its tanh one ulp
// above the nearest float (within the derivation's 2 ulps) fails the fused
// budget at layers.0.h, named, and passes declared.
TEST(DivergeEnds, GluArithSeparateCoversTheTanhGeglu) {
    for (Format f : {Format::fp32, Format::bf16}) {
        ModelContract erf = small("dense", f);  // the built-in kernels' values (no tanh GeGLU kernel)
        erf.layers = 2, erf.mlp = MlpKind::geglu;
        ModelContract c = erf;
        c.conventions["gelu"] = "tanh";
        Conventions conv = c.conventions;
        conv["glu_arith"] = "separate";
        const Named vals = kernel_values(erf, synthetic_model(erf, 5));
        const Lookup get = [&](const std::string& n) -> const Values& { return vals.at(n); };
        for (const Step& s : build_graph(c)) {
            const Values ref = eval_step(c, s, get, c.conventions);
            const auto a = step_bound(c, s, get, ref, c.conventions, s.format).budget, b = step_bound(c, s, get, ref, conv, s.format).budget;
            if (s.kind != StepKind::glu) {
                EXPECT_EQ(a, b) << name(f) << " " << s.point;
                continue;
            }
            EXPECT_NE(a, b) << s.point;
            if (f == Format::fp32) {
                EXPECT_GT(total(b), 1.5 * total(a)) << s.point;
            }
        }
    }
    ModelContract erf = small("dense", Format::fp32);
    erf.mlp = MlpKind::geglu;
    ModelContract c = erf;
    c.conventions["gelu"] = "tanh";
    const Synthetic m = synthetic_model(c, 5);
    NamedTensors run = run_kernels(erf, m.weights, m.input);
    rewrite_h(run, c.layers, [](double gd, double upd) {
        const auto g = static_cast<float>(gd), up = static_cast<float>(upd);
        const float z = 0.7978845608f * (g + 0.044715f * (g * g * g));
        float th = static_cast<float>(std::tanh(static_cast<double>(z)));
        th = std::nextafter(th, INFINITY);  // up to 1.5 ulps high: within the model's 2
        const float w = 1.0f + th;
        return static_cast<double>((0.5f * g * w) * up);
    });
    expect_first_failing(diverge(c, m.weights, m.input, run), "layers.0.h", "glu_arith=separate");
    ModelContract declared = c;
    declared.conventions["glu_arith"] = "separate";
    // Declared, h passes (the run's later points came from the erf kernels'
    // h: the first one reading it, mlp_out, fails).
    expect_first_failing(diverge(declared, m.weights, m.input, run), "layers.0.mlp_out", "none");
}

namespace {

// GeGLU as PyTorch computes act_fn(gate) * up in FP32 with the erf GELU
// (0.5 x)(1 + Ê(x α̂)), its erf Ê moved by `off` toward -1 (held in [-1, 1]).
std::function<double(double, double)> erf_geglu_fp32(double off) {
    return [off](double gd, double upd) {
        const auto g = static_cast<float>(gd), up = static_cast<float>(upd);
        const float a = g * static_cast<float>(M_SQRT1_2);
        const auto e = static_cast<float>(std::max(-1.0, std::erf(static_cast<double>(a)) - off));
        return static_cast<double>((0.5f * g * (1.0f + e)) * up);
    };
}

}  // namespace

// GeGLU with the erf GELU computed in two ops (PyTorch's CPU GELU: an erf
// within 2^-20 of erf, so 1 + erf has no relative accuracy where it
// cancels): an FP32 model whose erf is 0.9 of that class off fails the fused
// budget at layers.0.h, named glu_arith=separate, and passes declared (the
// rest of the model moves too little to fail); one twice as far off fails h
// declared too (the class is sharp: 1.2 times fails as well).
TEST(DivergeEnds, GluArithSeparateCoversTheErfGeglu) {
    ModelContract c = small("dense", Format::fp32);
    c.mlp = MlpKind::geglu;
    const Synthetic m = synthetic_model(c, 5);
    ModelContract declared = c;
    declared.conventions["glu_arith"] = "separate";
    EXPECT_NO_THROW(validate(declared));
    NamedTensors run = run_kernels(c, m.weights, m.input);
    rewrite_h(run, c.layers, erf_geglu_fp32(0.9 * 0x1p-20));
    expect_first_failing(diverge(c, m.weights, m.input, run), "layers.0.h", "glu_arith=separate");
    const DivergeReport r = diverge(declared, m.weights, m.input, run);
    EXPECT_FALSE(r.first_failing) << first_failing_text(r);
    NamedTensors worse = run_kernels(c, m.weights, m.input);
    rewrite_h(worse, c.layers, erf_geglu_fp32(2.0 * 0x1p-20));
    expect_first_failing(diverge(declared, m.weights, m.input, worse), "layers.0.h", "none");
}

// Gemma 3's layer: the branch outputs normalized before their adds
// (attn_post_norm, mlp_post_norm), the scaled embedding the first layer's
// input, and the local layers' rotations at their own base, unscaled, the
// global ones at the contract's with its scaling.
TEST(Diverge, GemmaSandwichStepsAndLocalRope) {
    ModelContract c = small("dense", Format::bf16);
    c.placement = Placement::sandwich, c.zero_centered = true, c.logits = true, c.embed_scale = true;
    c.window = 64, c.window_pattern = "LG", c.rope_local_base = 10, c.rope_scaling = "linear", c.rope_factor = 8;
    const Synthetic m = synthetic_model(c, 5);
    const Named vals = kernel_values(c, m);
    const Lookup get = [&](const std::string& n) -> const Values& { return vals.at(n); };
    std::map<std::string, Step> by_point;
    for (const Step& s : build_graph(c)) by_point.emplace(s.point, s);
    EXPECT_EQ(by_point.at("embed_scaled").kind, StepKind::mul);
    EXPECT_EQ(by_point.at("layers.0.attn_norm").inputs.at(0), "embed_scaled");
    EXPECT_EQ(by_point.at("layers.1.mid").inputs, (std::vector<std::string>{"layers.0.output", "layers.1.attn_post_norm"}));
    EXPECT_EQ(by_point.at("layers.1.mlp_post_norm").inputs.at(0), "layers.1.mlp_out");
    const OpCall local = op_call(c, by_point.at("layers.0.q_rope"), get, c.conventions);
    const OpCall global = op_call(c, by_point.at("layers.1.q_rope"), get, c.conventions);
    EXPECT_EQ(local.params.get("base", 0), 10);
    EXPECT_EQ(local.params.get("scaling", 0), 0);
    EXPECT_EQ(global.params.get("base", 0), c.rope_base);
    EXPECT_EQ(global.params.get("scaling", 0), 1);
    EXPECT_EQ(global.params.get("factor", 0), 8);
    EXPECT_EQ(vals.at("embed_scale").v.at(0), decode(Format::bf16, encode(Format::bf16, std::sqrt(static_cast<double>(c.width)))));
}

// rope_arith = fp32_angles (DeepSeek-V2's FP32 complex product: FP32
// angles, cos, sin and rotation, one rounding) changes only the rope steps:
// in bf16 between the default (double angles) and dtype (bf16 tables and
// products) at every element; in fp32 it is dtype's arithmetic exactly.
// The executor refuses it.
TEST(DivergeMoe, RopeArithFp32AnglesSitsBetweenTheDefaultAndDtype) {
    for (Format f : {Format::bf16, Format::fp32}) {
        const ModelContract c = moe_model(MlpKind::moe, f);
        Conventions angles = c.conventions, dtype = c.conventions;
        angles["rope_arith"] = "fp32_angles", dtype["rope_arith"] = "dtype";
        const std::vector<BudgetPair> a = budgets_under(c, angles), d = budgets_under(c, dtype);
        ASSERT_EQ(a.size(), d.size());
        for (std::size_t k = 0; k < a.size(); ++k) {
            if (a[k].s.kind != StepKind::rope) {
                EXPECT_EQ(a[k].a, a[k].b) << name(f) << " " << a[k].s.point;
                continue;
            }
            if (f == Format::fp32) {
                EXPECT_EQ(a[k].b, d[k].b) << a[k].s.point;
                continue;
            }
            for (std::size_t i = 0; i < a[k].a.size(); ++i) {
                ASSERT_GE(a[k].b[i], a[k].a[i]) << a[k].s.point << " element " << i;
                ASSERT_LE(a[k].b[i], d[k].b[i]) << a[k].s.point << " element " << i;
            }
            EXPECT_LT(total(a[k].b), 0.8 * total(d[k].b)) << a[k].s.point;
        }
        CandidateOptions opt;
        opt.conventions["rope_arith"] = "fp32_angles";
        const Synthetic m = synthetic_model(c, 5);
        EXPECT_THROW(run_kernels(c, m.weights, m.input, opt), std::invalid_argument);
    }
}

// glu_arith = separate in a bf16/fp16 MoE stack: each expert's SiLU stored
// in the model's format before the product (Hugging Face's experts) widens
// only the moe step, everywhere (half an ulp of the activation carried by
// the up value); in fp32 it changes nothing (the activation stays FP32).
// The executor refuses it in bf16 (the built-in experts keep it FP32).
TEST(DivergeMoe, GluArithSeparateStoresTheExpertsActivation) {
    for (Format f : {Format::fp32, Format::bf16}) {
        const ModelContract c = moe_model(MlpKind::moe, f);
        Conventions conv = c.conventions;
        conv["glu_arith"] = "separate";
        bool widened = false;
        for (const BudgetPair& p : budgets_under(c, conv)) {
            if (p.s.kind != StepKind::moe || f == Format::fp32) {
                EXPECT_EQ(p.a, p.b) << name(f) << " " << p.s.point;
                continue;
            }
            for (std::size_t i = 0; i < p.a.size(); ++i) ASSERT_GE(p.b[i], p.a[i]) << p.s.point << " element " << i;
            EXPECT_GT(total(p.b), 1.05 * total(p.a)) << p.s.point;
            widened = true;
        }
        EXPECT_EQ(widened, f == Format::bf16);
        CandidateOptions opt;
        opt.conventions["glu_arith"] = "separate";
        const Synthetic m = synthetic_model(c, 5);
        if (f == Format::fp32) {
            EXPECT_NO_THROW(run_kernels(c, m.weights, m.input, opt));
            continue;
        }
        try {
            run_kernels(c, m.weights, m.input, opt);
            ADD_FAILURE() << "run_kernels ran glu_arith=separate experts in bf16";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("glu_arith=separate"), std::string::npos) << e.what();
        }
    }
}

// A router mutant (weights renormalized over every expert) substituted at
// one layer fails locally at that layer's router point, first.
TEST(DivergeMoe, RouterMutantFailsAtItsRouterPoint) {
    ModelContract c = moe_model(MlpKind::moe, Format::fp32);
    c.layers = 4;
    CandidateOptions opt;
    opt.mutant = "mutant.moe_router.renormalize_all.fp32", opt.at = 2;
    const DivergeReport r = analyse(c, opt);
    ASSERT_TRUE(r.first_failing);
    const PointReport& f = r.points[*r.first_failing];
    EXPECT_EQ(f.point, "layers.2.router");
    EXPECT_EQ(f.kind, StepKind::router);
    for (std::size_t i = 0; i < *r.first_failing; ++i) EXPECT_EQ(r.points[i].status, PointStatus::pass) << r.points[i].point;
    opt.mutant = "mutant.moe.gate_up_swapped.fp32";
    try {
        run_kernels(c, synthetic_model(c, 5).weights, synthetic_model(c, 5).input, opt);
        ADD_FAILURE() << "a whole-layer mutant was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("whole-layer mutant"), std::string::npos) << e.what();
    }
}

// DeepSeek-V3's router in the stack (router_groups, router_topk_groups,
// routed_scaling; docs/moe.md): sigmoid scores, the selection bias, 8
// experts in 4 groups of 2 with 2 kept, weights renormalized and scaled by
// 2.5.  The built-in kernels pass; their dump judged as ungrouped or
// unscaled fails at the first router (the keys change the routing); a
// router mutant at layer 1 (group score = its largest score; the scaling
// before renormalizing) fails there, at its router point.
TEST(DivergeMoe, GroupLimitedScaledRouterPassesMutantsFailAtTheirRouter) {
    ModelContract c = moe_model(MlpKind::moe, Format::fp32);
    c.layers = 3, c.experts = 8, c.top_k = 3, c.router_score = RouterScore::sigmoid, c.selection_bias = true;
    c.router_groups = 4, c.router_topk_groups = 2, c.routed_scaling = 2.5;
    const ModelContract back = contract_from_json(to_json(c));
    EXPECT_EQ(back.router_groups, 4);
    EXPECT_EQ(back.router_topk_groups, 2);
    EXPECT_EQ(back.routed_scaling, 2.5);
    ModelContract bad = c;
    bad.router_groups = 3;  // does not divide 8
    EXPECT_THROW(validate(bad), std::invalid_argument);
    bad = c, bad.router_topk_groups = 1;  // 2 experts kept, top_k 3
    EXPECT_THROW(validate(bad), std::invalid_argument);
    const Synthetic m = synthetic_model(c, 5);
    const NamedTensors run = run_kernels(c, m.weights, m.input);
    const DivergeReport r = diverge(c, m.weights, m.input, run);
    EXPECT_FALSE(r.first_failing) << first_failing_text(r);
    EXPECT_LE(r.oracle_bound_ratio, 1e-3) << r.oracle_bound_worst;
    // The FP64 tier's routing (groups, scaling) agrees with the MPFR oracle's.
    const std::size_t at = r.mpfr_cross_check.find("router ");
    ASSERT_NE(at, std::string::npos) << r.mpfr_cross_check;
    EXPECT_LT(std::stod(r.mpfr_cross_check.substr(at + 7)), 1e-12) << r.mpfr_cross_check;
    for (const auto& change : std::vector<std::function<void(ModelContract&)>>{
             [](ModelContract& o) { o.router_groups = 1, o.router_topk_groups = 0; },
             [](ModelContract& o) { o.routed_scaling = 1; }}) {
        ModelContract other = c;
        change(other);
        const DivergeReport o = diverge(other, m.weights, m.input, run);
        ASSERT_TRUE(o.first_failing);
        EXPECT_EQ(o.points[*o.first_failing].point, "layers.0.router");
    }
    for (const char* mutant : {"mutant.moe_router.group_score_max.fp32", "mutant.moe_router.scaling_before_renormalize.fp32"}) {
        CandidateOptions opt;
        opt.mutant = mutant, opt.at = 1;
        const DivergeReport f = analyse(c, opt);
        ASSERT_TRUE(f.first_failing) << mutant;
        EXPECT_EQ(f.points[*f.first_failing].point, "layers.1.router") << mutant;
        for (std::size_t i = 0; i < *f.first_failing; ++i) EXPECT_EQ(f.points[i].status, PointStatus::pass) << f.points[i].point;
    }
}

namespace {

// Expert 1 made a copy of expert 0 in layer 0 (router column and both
// matrices): every token's two scores tie exactly, and either is a correct
// choice whose layer output is the same.
Synthetic tied_experts(const ModelContract& c) {
    Synthetic m = synthetic_model(c, 5);
    Tensor& w = m.weights.at("layers.0.router.weight");  // [C, E]
    for (std::int64_t i = 0; i < c.width; ++i) w.view().set_bits(i * c.experts + 1, w.bits(i * c.experts));
    for (const char* name : {"layers.0.experts.gate_up.weight", "layers.0.experts.down.weight"}) {
        Tensor& t = m.weights.at(name);
        const std::int64_t per = t.numel() / c.experts;
        for (std::int64_t i = 0; i < per; ++i) t.view().set_bits(per + i, t.bits(i));
    }
    return m;
}

}  // namespace

// The ambiguity-aware router verdict in the model: a candidate that breaks
// the exact ties toward the higher index passes and is counted; a choice
// outside the scores' budget fails locally at the router point.
TEST(DivergeMoe, TiedChoicePassesOutOfBudgetChoiceFailsAtTheRouter) {
    ModelContract c = moe_model(MlpKind::moe, Format::bf16);
    c.layers = 2, c.experts = 4;
    const Synthetic m = tied_experts(c);
    NamedTensors pts = run_kernels(c, m.weights, m.input);
    Tensor& rp = pts.at("layers.0.router");  // [T, 2k]: ids, then weights
    int changed = 0;  // tokens whose selection now differs from the tie rule's
    for (std::int64_t t = 0; t < c.tokens; ++t) {
        bool any = false;
        for (std::int64_t j = 0; j < c.top_k; ++j) {
            const double id = rp.value(t * 2 * c.top_k + j);
            if (id == 0 || id == 1) rp.set_value(t * 2 * c.top_k + j, 1 - id), any = true;
        }
        changed += any;
    }
    ASSERT_GT(changed, 0);
    DivergeReport r = diverge(c, m.weights, m.input, pts);
    EXPECT_FALSE(r.first_failing) << first_failing_text(r);
    for (const PointReport& p : r.points)
        if (p.point == "layers.0.router") {
            EXPECT_NE(p.note.find(", " + std::to_string(changed) + " other than the oracle's accepted"), std::string::npos)
                << p.note;
            EXPECT_EQ(p.note.find("router: 0 ambiguous"), std::string::npos) << p.note;
        }
    // Token 0's first slot naming its lowest-scoring expert: out of budget.
    const Tensor& x = pts.at("layers.0.mlp_norm");
    const Tensor& w = m.weights.at("layers.0.router.weight");
    std::int64_t low = 0;
    double low_logit = INFINITY;
    for (std::int64_t e = 0; e < c.experts; ++e) {
        double l = 0;
        for (std::int64_t i = 0; i < c.width; ++i) l += x.value(i) * w.value(i * c.experts + e);
        if (l < low_logit) low_logit = l, low = e;
    }
    ASSERT_NE(rp.value(0), static_cast<double>(low));
    ASSERT_NE(rp.value(1), static_cast<double>(low));
    rp.set_value(0, static_cast<double>(low));
    r = diverge(c, m.weights, m.input, pts);
    ASSERT_TRUE(r.first_failing);
    EXPECT_EQ(r.points[*r.first_failing].point, "layers.0.router");
    EXPECT_EQ(r.points[*r.first_failing].local.worst, 0);
    // A row that is no routing (an id past E): the router fails there, and
    // mlp_out's reference on it is NaN (no expert read out of range).
    rp.set_value(0, static_cast<double>(c.experts));
    r = diverge(c, m.weights, m.input, pts);
    ASSERT_TRUE(r.first_failing);
    EXPECT_EQ(r.points[*r.first_failing].point, "layers.0.router");
}

// A dump made under another convention than the contract declares fails at
// the first step of that convention, and the analysis names the convention.
TEST(Diverge, EachConventionIsIdentified) {
    struct Case {
        std::string key, value;
        StepKind kind;
        MlpKind mlp;
        Format f;
    };
    const std::vector<Case> cases{{"rope_pairing", "interleaved", StepKind::rope, MlpKind::swiglu, Format::bf16},
                                  {"eps_placement", "outside", StepKind::norm, MlpKind::swiglu, Format::fp32},
                                  {"gate_order", "up_gate", StepKind::glu, MlpKind::swiglu, Format::bf16},
                                  {"gelu", "tanh", StepKind::gelu, MlpKind::gelu, Format::fp32},
                                  {"norm_cast", "before_weight", StepKind::norm, MlpKind::swiglu, Format::bf16},
                                  {"causal", "top_left", StepKind::attention, MlpKind::swiglu, Format::bf16},
                                  {"window_keys", "w_plus_one", StepKind::attention, MlpKind::swiglu, Format::bf16}};
    for (const Case& k : cases) {
        ModelContract c = small("dense", k.f);
        c.mlp = k.mlp;
        c.cache_tokens = k.key == "causal" ? 4 : 0;
        c.window = k.key == "window_keys" ? 3 : 0;
        c.eps = k.key == "eps_placement" ? 1e-2 : 1e-6;  // eps must matter beside mean x^2 ~ 1
        CandidateOptions opt;
        opt.conventions[k.key] = k.value;
        const DivergeReport r = analyse(c, opt);
        ASSERT_TRUE(r.first_failing) << k.key;
        const PointReport& p = r.points[*r.first_failing];
        EXPECT_EQ(p.kind, k.kind) << k.key << ": " << p.point;
        EXPECT_EQ(p.layer, 0) << k.key;
        EXPECT_EQ(p.convention_match.value_or("none"), k.key + "=" + k.value) << first_failing_text(r);
        EXPECT_FALSE(p.conventions_tried.empty());
    }
}

// The same inference on the other stacks: mHC residual streams, a KDA hybrid
// (its first full-attention layer is layer 3) and post-norm (norms after the
// residual adds).
TEST(Diverge, ConventionsAreIdentifiedOnEveryStack) {
    struct Case {
        std::string what, key, value;
        StepKind kind;
        std::int64_t layer;
        std::function<void(ModelContract&)> variant;
    };
    const std::vector<Case> cases{
        {"mHC", "rope_pairing", "interleaved", StepKind::rope, 0,
         [](ModelContract& c) { c.residual = ResidualKind::mhc; }},
        {"mHC", "gate_order", "up_gate", StepKind::glu, 0, [](ModelContract& c) { c.residual = ResidualKind::mhc; }},
        {"KDA hybrid", "rope_pairing", "interleaved", StepKind::rope, 3,
         [](ModelContract& c) { c.pattern = "hybrid", c.linear_kind = AttentionKind::kda; }},
        {"post-norm", "norm_cast", "before_weight", StepKind::norm, 0,
         [](ModelContract& c) { c.placement = Placement::post; }},
        {"gated attention", "rope_pairing", "interleaved", StepKind::rope, 0,
         [](ModelContract& c) { c.attention_kind = AttentionKind::gated; }},
        {"gated attention", "causal", "top_left", StepKind::attention, 0,
         [](ModelContract& c) { c.attention_kind = AttentionKind::gated, c.cache_tokens = 4; }},
        // The final softcap in the model's format (PyTorch's, Gemma 2): three roundings.
        {"logit softcap", "softcap_arith", "dtype", StepKind::softcap, 4,
         [](ModelContract& c) { c.logits = true, c.logit_softcap = 3; }}};
    for (const Case& k : cases) {
        ModelContract c = small("dense", Format::bf16);
        k.variant(c);
        CandidateOptions opt;
        opt.conventions[k.key] = k.value;
        const DivergeReport r = analyse(c, opt);
        ASSERT_TRUE(r.first_failing) << k.what << " " << k.key;
        const PointReport& p = r.points[*r.first_failing];
        EXPECT_EQ(p.kind, k.kind) << k.what << " " << k.key << ": " << p.point;
        EXPECT_EQ(p.layer, k.layer) << k.what << " " << k.key;
        EXPECT_EQ(p.convention_match.value_or("none"), k.key + "=" + k.value) << k.what << ": " << first_failing_text(r);
    }
}

// ---- the command -------------------------------------------------------------

namespace {

int run_cli(const std::string& args, std::string* output = nullptr) { return cli_testing::run_conform(args, output); }

std::string temp(const std::string& name) {
    return (fs::temp_directory_path() / (name + "." + std::to_string(getpid()))).string();
}

const std::string kSynth = "synth --layers 4 --pattern hybrid --dtype bf16 --width 32 --heads 4 --kv-heads 2 "
                           "--head-dim 8 --ffn 48 --tokens 8 ";

nlohmann::json read_json(const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
}

}  // namespace

TEST(DivergeCli, CleanDumpExitsZeroMutantExitsOneWithItsLayer) {
    const std::string clean = temp("dv_clean") + ".safetensors", bad = temp("dv_mutant") + ".safetensors";
    const std::string out = temp("dv_report");
    std::string log;
    ASSERT_EQ(run_cli(kSynth + "--out " + clean, &log), 0) << log;
    ASSERT_EQ(run_cli(kSynth + "--mutant mutant.rope.bf16_angles.bf16 --at 3 --out " + bad, &log), 0) << log;
    EXPECT_EQ(run_cli("diverge " + clean + " --out " + out, &log), 0) << log;
    EXPECT_NE(log.find("first failing: none"), std::string::npos) << log;
    const nlohmann::json j = read_json(fs::path(out) / "diverge.json");
    EXPECT_EQ(j["schema"], kDivergeSchema);
    EXPECT_TRUE(j["first_failing"].is_null());
    EXPECT_TRUE(fs::exists(fs::path(out) / "diverge.md"));
    EXPECT_NE(std::ifstream(fs::path(out) / "diverge.html").peek(), EOF);
    EXPECT_EQ(run_cli("diverge " + bad + " --out " + out, &log), 1) << log;
    const nlohmann::json m = read_json(fs::path(out) / "diverge.json");
    EXPECT_EQ(m["first_failing"]["layer"], 3) << log;
    EXPECT_NE(log.find("first failing: layer 3"), std::string::npos) << log;
    const auto text = [&](const char* f) {
        std::ifstream in(fs::path(out) / f);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    EXPECT_NE(text("diverge.md").find("# Divergence report: FAILED at layer 3"), std::string::npos);
    const std::string html = text("diverge.html");
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_NE(html.find("first failing: layer 3"), std::string::npos);  // the plot's marker
    EXPECT_EQ(html.find("<script"), std::string::npos);
    // Two dumps: the mutant against the clean one fails at the same layer; the clean one against itself passes.
    EXPECT_EQ(run_cli("diverge " + bad + " --reference " + clean + " --out " + out, &log), 1) << log;
    EXPECT_EQ(read_json(fs::path(out) / "diverge.json")["first_failing"]["layer"], 3);
    EXPECT_EQ(run_cli("diverge " + clean + " --reference " + clean + " --out " + out, &log), 0) << log;
    for (const auto& f : {clean, bad}) fs::remove(f);
    fs::remove_all(out);
}

TEST(DivergeCli, BadInputExitsTwoNamingTheFile) {
    const std::string good = temp("dv_good") + ".safetensors", junk = temp("dv_junk") + ".safetensors";
    const std::string shape = temp("dv_shape") + ".safetensors", contract = temp("dv_contract") + ".safetensors";
    std::string log;
    ASSERT_EQ(run_cli(kSynth + "--out " + good, &log), 0) << log;
    std::ofstream(junk) << "not a safetensors file";
    EXPECT_EQ(run_cli("diverge " + junk, &log), 2);
    EXPECT_NE(log.find(junk), std::string::npos) << log;
    EXPECT_EQ(run_cli("diverge /no/such/dump.safetensors", &log), 2);
    EXPECT_NE(log.find("/no/such/dump.safetensors"), std::string::npos) << log;

    io::ModelDump d = io::read_model_dump(good);
    io::ModelDump wrong = d;
    wrong.weights.at("layers.0.down.weight") = io::StoredTensor::zeros(io::DType::bf16, {3, 5});
    io::write_model_dump(wrong, shape);
    EXPECT_EQ(run_cli("diverge " + shape, &log), 2);
    EXPECT_NE(log.find(shape), std::string::npos) << log;
    EXPECT_NE(log.find("layers.0.down.weight"), std::string::npos) << log;

    d.contract["heads"] = 3;  // does not divide into the KV heads
    io::write_model_dump(d, contract);
    EXPECT_EQ(run_cli("diverge " + contract, &log), 2);
    EXPECT_NE(log.find(contract), std::string::npos) << log;
    EXPECT_NE(log.find("heads"), std::string::npos) << log;
    EXPECT_EQ(run_cli("diverge " + good + " --reference " + contract, &log), 2);
    for (const auto& f : {good, junk, shape, contract}) fs::remove(f);
}

// ---- layer ranges and merged reports (docs/diverge.md, "Splitting a deep model") ----

TEST(DivergeRange, ParsesRangesAndRefusesBadOnes) {
    EXPECT_EQ(parse_layer_range("2:4", 6), (LayerRange{2, 4}));
    EXPECT_EQ(parse_layer_range("2:", 6), (LayerRange{2, 6}));
    EXPECT_EQ(parse_layer_range(":3", 6), (LayerRange{0, 3}));
    EXPECT_EQ(parse_layer_range("5", 6), (LayerRange{5, 6}));
    for (const char* bad : {"4:2", "3:3", "x", "1:y", "0:7", "-1:2", "6", "2:4:6"})
        EXPECT_THROW(parse_layer_range(bad, 6), std::invalid_argument) << bad;
}

// The ranges of a split cover the graph exactly once, in order: the
// embedding with the first range, the final norm and logits with the last.
TEST(DivergeRange, RangesPartitionTheGraph) {
    ModelContract c = small("hybrid", Format::bf16);
    c.logits = true, c.vocab = 40;
    const std::vector<Step> g = build_graph(c);
    std::vector<std::string> joined;
    for (const LayerRange& r : {LayerRange{0, 1}, LayerRange{1, 3}, LayerRange{3, 4}})
        for (const Step& s : steps_in_range(g, r, c.layers)) joined.push_back(s.point);
    ASSERT_EQ(joined.size(), g.size());
    for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(joined[i], g[i].point);
    EXPECT_EQ(steps_in_range(g, {0, 1}, c.layers).front().point, "embed");
    EXPECT_EQ(steps_in_range(g, {3, 4}, c.layers).back().point, "logits");
}

// Each part judges its points locally exactly as the whole analysis does
// (a local verdict reads only the dump); the propagated error of a part
// starts at the dump's own hidden state, so a part after the defect reads
// clean; the merged report fails at the whole analysis's first failing
// point, survives its JSON, and names the layers a missing part leaves.
TEST(DivergeRange, PartsJudgeAsTheWholeAndMergeToItsFirstFailing) {
    ModelContract c = small("hybrid", Format::bf16);
    c.layers = 6;
    CandidateOptions opt;
    opt.mutant = "mutant.rope.bf16_angles.bf16", opt.at = 3;
    const Synthetic m = synthetic_model(c, 5);
    const ModelRun run{m.weights, m.input, run_kernels(c, m.weights, m.input, opt), "cand"};
    const DivergeReport whole = diverge(c, run);
    ASSERT_TRUE(whole.first_failing);
    std::map<std::string, const PointReport*> by_point;
    for (const PointReport& p : whole.points) by_point[p.point] = &p;
    std::vector<DivergeReport> parts;
    const std::vector<std::string> files{"part0", "part1", "part2"};
    for (const LayerRange& r : {LayerRange{4, 6}, LayerRange{0, 2}, LayerRange{2, 4}}) {  // any order
        DivergeOptions o;
        o.layers = r;
        parts.push_back(diverge(c, run, o));
        const DivergeReport& p = parts.back();
        EXPECT_EQ(p.range, r);
        EXPECT_EQ(p.propagated_from.find("layers." + std::to_string(r.first - 1) + ".output") != std::string::npos,
                  r.first > 0) << p.propagated_from;
        for (const PointReport& q : p.points) {
            ASSERT_TRUE(by_point.count(q.point)) << q.point;
            EXPECT_GE(q.layer, r.first);
            EXPECT_LT(q.layer, r.end);
            EXPECT_EQ(q.local.utilization, by_point[q.point]->local.utilization) << q.point;
            EXPECT_EQ(q.status == PointStatus::fail_local, by_point[q.point]->status == PointStatus::fail_local) << q.point;
        }
    }
    bool whole_propagates = false;
    for (const PointReport& q : whole.points) whole_propagates |= q.layer >= 4 && q.status == PointStatus::fail_propagated;
    EXPECT_TRUE(whole_propagates);
    for (const PointReport& q : parts[0].points) EXPECT_EQ(q.status, PointStatus::pass) << q.point;
    EXPECT_FALSE(parts[1].first_failing);
    EXPECT_NE(diverge_headline(parts[1]).find("layers 0:2 of 6"), std::string::npos) << diverge_headline(parts[1]);

    const DivergeReport merged = merge_reports(parts, files);
    EXPECT_TRUE(merged.missing.empty());
    ASSERT_EQ(merged.points.size(), whole.points.size());
    for (std::size_t i = 0; i < merged.points.size(); ++i) EXPECT_EQ(merged.points[i].point, whole.points[i].point);
    ASSERT_TRUE(merged.first_failing);
    EXPECT_EQ(merged.points[*merged.first_failing].point, whole.points[*whole.first_failing].point);
    EXPECT_EQ(diverge_headline(merged), diverge_headline(whole));
    const DivergeReport back = report_from_json(to_json(merged), "merged.json");
    EXPECT_EQ(to_json(back), to_json(merged));

    // A part left out: reported as missing, the failure inside it not claimed.
    const DivergeReport gap = merge_reports({parts[0], parts[1]}, {"part0", "part1"});
    ASSERT_EQ(gap.missing.size(), 1u);
    EXPECT_EQ(gap.missing[0], (LayerRange{2, 4}));
    EXPECT_FALSE(gap.first_failing);
    EXPECT_NE(diverge_headline(gap).find("INCOMPLETE"), std::string::npos) << diverge_headline(gap);
    // Overlapping parts are refused, naming the part.
    DivergeOptions o;
    o.layers = LayerRange{1, 4};
    try {
        merge_reports({parts[1], diverge(c, run, o)}, {"part1", "overlap.json"});
        ADD_FAILURE() << "overlap accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("overlap.json"), std::string::npos) << e.what();
    }
}

TEST(DivergeRange, MalformedReportNamesTheField) {
    const ModelContract c = small("dense", Format::bf16);
    nlohmann::json j = to_json(analyse(c));
    j["points"][2]["local"]["cosine"] = "high";
    try {
        report_from_json(j, "r.json");
        ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("r.json: field \"points[2].local.cosine\""), std::string::npos) << e.what();
    }
}

TEST(DivergeCli, LayerRangesSplitAndMerge) {
    const std::string bad = temp("dv_range") + ".safetensors", a = temp("dv_part_a"), b = temp("dv_part_b");
    const std::string merged = temp("dv_merged");
    std::string log;
    ASSERT_EQ(run_cli(kSynth + "--mutant mutant.rope.bf16_angles.bf16 --at 3 --out " + bad, &log), 0) << log;
    EXPECT_EQ(run_cli("diverge " + bad + " --layers 0:2 --out " + a, &log), 0) << log;
    EXPECT_NE(log.find("PASSED (layers 0:2 of 4)"), std::string::npos) << log;
    EXPECT_EQ(run_cli("diverge " + bad + " --layers 2: --out " + b, &log), 1) << log;
    EXPECT_EQ(run_cli("diverge --merge " + a + " " + b + "/diverge.json --out " + merged, &log), 1) << log;
    EXPECT_NE(log.find("first failing: layer 3"), std::string::npos) << log;
    EXPECT_EQ(read_json(fs::path(merged) / "diverge.json")["first_failing"]["layer"], 3);
    EXPECT_EQ(run_cli("diverge --merge " + a + " --out " + merged, &log), 2) << log;
    EXPECT_NE(log.find("not analysed: layers 2:4"), std::string::npos) << log;
    EXPECT_TRUE(fs::exists(fs::path(merged) / "diverge.md"));  // written all the same
    EXPECT_EQ(run_cli("diverge " + bad + " --layers 3:9 --out " + a, &log), 2) << log;
    EXPECT_NE(log.find(bad), std::string::npos) << log;
    EXPECT_EQ(run_cli("diverge --merge /no/such/report --out " + merged, &log), 2) << log;
    EXPECT_NE(log.find("/no/such/report"), std::string::npos) << log;
    fs::remove(bad);
    for (const auto& d : {a, b, merged}) fs::remove_all(d);
}

// ---- the linear block's extras (docs/model.md, "Linear-attention block extras") ----

namespace {

ModelContract linear_extras(AttentionKind kind, Format f) {
    ModelContract c = small("hybrid", f);
    c.linear_kind = kind;
    c.short_conv = 4;
    c.linear_output_gate = true;
    c.decay = "lower_bounded";
    return c;
}

}  // namespace

// Short convolution + SiLU, the lower-bounded decay and the output gate:
// the executor's kernels meet every local budget in GDN and KDA stacks, with
// and without caches, and the FP64 tier's own bound stays negligible.
TEST(Diverge, LinearBlockExtrasPass) {
    for (AttentionKind kind : {AttentionKind::gdn, AttentionKind::kda})
        for (Format f : {Format::fp32, Format::bf16})
            for (std::int64_t cache : {0, 5}) {
                ModelContract c = linear_extras(kind, f);
                c.cache_tokens = cache;
                const DivergeReport r = analyse(c);
                const std::string what = std::string(name(kind)) + " " + name(f) + " cache " + std::to_string(cache);
                EXPECT_FALSE(r.first_failing) << what << ": " << first_failing_text(r);
                EXPECT_LE(r.oracle_bound_ratio, 1e-3) << what << " at " << r.oracle_bound_worst;
                std::set<std::string> kinds;
                for (const PointReport& p : r.points) kinds.insert(name(p.kind));
                for (const char* k : {"short_conv", "silu", "bounded_decay", "head_norm"}) EXPECT_TRUE(kinds.count(k)) << k;
                EXPECT_NE(r.mpfr_cross_check.find("short_conv"), std::string::npos) << r.mpfr_cross_check;
                EXPECT_NE(r.mpfr_cross_check.find("bounded_decay"), std::string::npos) << r.mpfr_cross_check;
            }
}

// A centred ("same") convolution and skipped logit softcap are found at
// their step and named; the decay's budget is sharp enough that the old
// softplus decay under a lower_bounded contract fails at g.
TEST(Diverge, LinearBlockConventionsAreIdentified) {
    ModelContract c = linear_extras(AttentionKind::gdn, Format::bf16);
    CandidateOptions same;
    same.conventions["conv_padding"] = "same";
    expect_first_failing(analyse(c, same), "layers.0.q_conv", "conv_padding=same");

    ModelContract capped = small("dense", Format::bf16);
    capped.logits = true, capped.vocab = 40, capped.logit_softcap = 30;
    CandidateOptions raw;
    raw.conventions["logit_softcap"] = "skipped";
    expect_first_failing(analyse(capped, raw), "logits", "logit_softcap=skipped");

    // The dump of a softplus-decay model judged under the lower_bounded contract.
    ModelContract softplus = c;
    softplus.decay = "softplus";
    const Synthetic m = synthetic_model(softplus, 5);
    NamedTensors weights = m.weights;
    const Synthetic lb = synthetic_model(c, 5);
    for (const auto& [n, t] : lb.weights)
        if (n.find("decay_a") != std::string::npos) weights.emplace(n, t);
    const DivergeReport r = diverge(c, weights, m.input, run_kernels(softplus, m.weights, m.input));
    ASSERT_TRUE(r.first_failing);
    EXPECT_EQ(r.points[*r.first_failing].point, "layers.0.g");
}

// ---- Qwen3-Next's hybrid layers (docs/model.md, "Linear-attention block extras") ----

namespace {

// 3 Gated DeltaNet : 1 gated attention, twice the value heads of the
// query/key heads, q and k normalized in FP32, g = -e^A softplus(x W_g + b)
// in FP32, the output gate
// silu(x W_z) RMSNorm(o) with a plain-weight norm that casts before its
// weight (the others: zero-centred, cast after), a MoE with a sigmoid-gated
// shared expert.
ModelContract qwen3_next_like(Format f) {
    ModelContract c = small("DDDG", f);
    c.linear_v_heads = 2 * c.linear_heads;
    c.short_conv = 4;
    c.decay = "exp_softplus";
    c.linear_output_gate = true, c.linear_gate_act = "silu", c.o_norm_zero_centered = false;
    c.zero_centered = true, c.qk_norm = true, c.rotary_dim = 4;
    c.attention_kind = AttentionKind::gated;
    c.mlp = MlpKind::moe, c.experts = 4, c.top_k = 2, c.shared_experts = 1, c.shared_gate = true, c.shared_ffn = 24;
    c.residual_format = f;
    c.l2_format = "fp32";
    c.conventions["o_norm:norm_cast"] = "before_weight";
    return c;
}

}  // namespace

// The executor's kernels meet every local budget of the Qwen3-Next layer
// kinds, with and without a cache; the FP64 tier's bound stays negligible
// and the MPFR cross-check covers the softplus decay.
TEST(Diverge, Qwen3NextLayersPass) {
    for (Format f : {Format::fp32, Format::bf16})
        for (std::int64_t cache : {0, 5}) {
            ModelContract c = qwen3_next_like(f);
            c.cache_tokens = cache;
            const DivergeReport r = analyse(c);
            const std::string what = std::string(name(f)) + " cache " + std::to_string(cache);
            EXPECT_FALSE(r.first_failing) << what << ": " << first_failing_text(r);
            EXPECT_LE(r.oracle_bound_ratio, 1e-3) << what << " at " << r.oracle_bound_worst;
            std::set<std::string> points;
            for (const PointReport& p : r.points) points.insert(p.point);
            for (const char* p : {"layers.0.g", "layers.0.gate_act", "layers.0.o_norm", "layers.0.experts",
                                  "layers.0.shared_gated", "layers.3.attn_gated"})
                EXPECT_TRUE(points.count(p)) << p;
            EXPECT_NE(r.mpfr_cross_check.find("softplus_decay"), std::string::npos) << r.mpfr_cross_check;
        }
    // mlp_pattern: dense SwiGLU layers between the MoE ones (layer 0 dense, layer 1 MoE, ...).
    ModelContract c = qwen3_next_like(Format::bf16);
    c.mlp_pattern = "DM";
    const DivergeReport r = analyse(c);
    EXPECT_FALSE(r.first_failing) << first_failing_text(r);
    std::set<std::string> points;
    for (const PointReport& p : r.points) points.insert(p.point);
    for (const char* p : {"layers.0.gate_up", "layers.0.h", "layers.1.router", "layers.2.h", "layers.3.experts"})
        EXPECT_TRUE(points.count(p)) << p;
    EXPECT_FALSE(points.count("layers.0.router"));
    // shared_dense: the shared expert ungated (DeepSeek's).
    c.shared_gate = false, c.shared_dense = true;
    const DivergeReport d = analyse(c);
    EXPECT_FALSE(d.first_failing) << first_failing_text(d);
    std::set<std::string> dense;
    for (const PointReport& p : d.points) dense.insert(p.point);
    EXPECT_TRUE(dense.count("layers.1.shared_out"));
    EXPECT_FALSE(dense.count("layers.1.shared_sig"));
}

// A scoped convention binds only its step: the contract's o_norm casts after
// its weight, the candidate's casts before (as Hugging Face's Qwen3-Next) and
// fails there, named; the layer norms (cast after in both) pass.  And the
// decay's budget is sharp: a candidate that drops dt_bias fails at g.
TEST(Diverge, Qwen3NextDefectsAreFound) {
    ModelContract c = qwen3_next_like(Format::bf16);
    c.conventions.erase("o_norm:norm_cast");
    CandidateOptions cast;
    cast.conventions["o_norm:norm_cast"] = "before_weight";
    expect_first_failing(analyse(c, cast), "layers.0.o_norm", "norm_cast=before_weight");

    const Synthetic m = synthetic_model(c, 5);
    NamedTensors no_bias = m.weights;
    for (auto& [n, t] : no_bias)
        if (n.find("decay_dt.bias") != std::string::npos)
            for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, 0.0);
    const DivergeReport r = diverge(c, m.weights, m.input, run_kernels(c, no_bias, m.input));
    ASSERT_TRUE(r.first_failing);
    EXPECT_EQ(r.points[*r.first_failing].point, "layers.0.g");
}

// Value heads: a stack with H query/key heads and 2H value heads computes
// what one with 2H query/key heads computes when each query/key head's
// projection rows are repeated for its two value heads (repeat_interleave:
// value head h reads head h / 2), to the FP64 tier's rounding (2^-45 of the
// largest output; the head mapping changes the values by ~10^-2).
TEST(Diverge, ValueHeadsReadTheirQueryKeyHeadRepeated) {
    ModelContract grouped = small("D", Format::fp32);
    grouped.layers = 1, grouped.short_conv = 4, grouped.linear_v_heads = 2 * grouped.linear_heads;
    ModelContract full = grouped;
    full.linear_heads = full.linear_v_heads;
    const Synthetic m = synthetic_model(grouped, 5);
    const std::int64_t d = grouped.linear_head_dim;
    Named wg, wf;
    for (const auto& [n, t] : m.weights) wg.emplace(n, values_of(t.view()));
    wf = wg;
    for (const char* n : {"layers.0.q.weight", "layers.0.k.weight", "layers.0.q_conv.weight", "layers.0.k_conv.weight"}) {
        const Values& w = wg.at(n);
        const std::int64_t cols = w.shape[1], rows_per_head = d;
        Values r{{2 * w.shape[0], cols}, {}};
        for (std::int64_t row = 0; row < 2 * w.shape[0]; ++row) {
            const std::int64_t head = row / rows_per_head / 2, src = head * rows_per_head + row % rows_per_head;
            r.v.insert(r.v.end(), w.v.begin() + src * cols, w.v.begin() + (src + 1) * cols);
        }
        wf[n] = r;
    }
    const Values input = values_of(m.input.view());
    const Named a = run_oracle(grouped, wg, input), b = run_oracle(full, wf, input);
    for (const char* p : {"layers.0.attn", "layers.0.output"}) {
        ASSERT_EQ(a.at(p).v.size(), b.at(p).v.size()) << p;
        double scale = 0;
        for (double v : a.at(p).v) scale = std::max(scale, std::fabs(v));
        for (std::size_t i = 0; i < a.at(p).v.size(); ++i) ASSERT_NEAR(a.at(p).v[i], b.at(p).v[i], 0x1p-45 * scale) << p << " " << i;
    }
    // Not vacuous: the other head order (value head h reading head h mod H) differs.
    for (const char* n : {"layers.0.q.weight", "layers.0.k.weight", "layers.0.q_conv.weight", "layers.0.k_conv.weight"}) {
        const Values& w = wg.at(n);
        Values r{{2 * w.shape[0], w.shape[1]}, {}};
        for (int rep = 0; rep < 2; ++rep) r.v.insert(r.v.end(), w.v.begin(), w.v.end());
        wf[n] = r;
    }
    const Named mod = run_oracle(full, wf, input);
    double diff = 0;
    for (std::size_t i = 0; i < a.at("layers.0.attn").v.size(); ++i)
        diff = std::max(diff, std::fabs(mod.at("layers.0.attn").v[i] - a.at("layers.0.attn").v[i]));
    EXPECT_GT(diff, 1e-6);
}

// act_arith = quotient changes only the sigmoid and silu steps' budgets,
// widening them in fp32 (PyTorch's FP32 quotient with a 1-ulp exp, 4u of
// the result); an FP32 SiLU computed that way with the weakest exp admitted
// (rounded upwards) fails the 1-ulp budget at its first step, named, and
// passes when declared; the executor's own quotient passes the declared
// contract.
TEST(Diverge, ActArithQuotientWidensOnlyTheLogisticSteps) {
    ModelContract c = qwen3_next_like(Format::fp32);
    c.tokens = 32;
    Conventions conv = c.conventions;
    conv["act_arith"] = "quotient";
    for (const BudgetPair& p : budgets_under(c, conv)) {
        if (p.s.kind != StepKind::sigmoid && p.s.kind != StepKind::silu) {
            EXPECT_EQ(p.a, p.b) << p.s.point;
            continue;
        }
        EXPECT_GT(total(p.b), total(p.a)) << p.s.point;
        for (std::size_t i = 0; i < p.a.size(); ++i)
            if (p.a[i] > 1e-40) {
                ASSERT_GE(p.b[i], p.a[i]) << p.s.point << " element " << i;
            }
    }
    const Synthetic m = synthetic_model(c, 5);
    NamedTensors run = run_kernels(c, m.weights, m.input);
    for (const char* name : {"q", "k", "v"}) {
        const std::string p = std::string("layers.0.") + name;
        const Tensor& x = run.at(p + "_conv");
        Tensor& y = run.at(p + "_act");
        for (std::int64_t i = 0; i < x.numel(); ++i) {
            const double g = x.value(i), e = std::exp(-g);
            float ef = static_cast<float>(e);
            if (static_cast<double>(ef) < e) ef = std::nextafter(ef, INFINITY);
            y.set_value(i, static_cast<double>(static_cast<float>(g) / (1.0f + ef)));
        }
    }
    expect_first_failing(diverge(c, m.weights, m.input, run), "layers.0.q_act", "act_arith=quotient");
    ModelContract declared = c;
    declared.conventions["act_arith"] = "quotient";
    EXPECT_FALSE(diverge(declared, m.weights, m.input, run).first_failing);
    const DivergeReport own = analyse(declared);
    EXPECT_FALSE(own.first_failing) << first_failing_text(own);
}

// ---- INT8 layers (docs/model.md, "INT8 layers") ----

// The W8A8 projections of the layers the pattern quantizes: the registry's
// quantize and int8_gemm kernels meet the exact flow's budget in every model
// format; float layers keep their matmul steps.
TEST(Diverge, Int8LayersPass) {
    for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
        ModelContract c = small("hybrid", f);
        c.quant = "int8", c.quant_pattern = "QF";
        const DivergeReport r = analyse(c);
        EXPECT_FALSE(r.first_failing) << name(f) << ": " << first_failing_text(r);
        EXPECT_LE(r.oracle_bound_ratio, 1e-3) << name(f) << " at " << r.oracle_bound_worst;
        std::set<std::int64_t> int8_layers, float_layers;
        for (const PointReport& p : r.points) {
            if (p.kind == StepKind::int8_matmul) int8_layers.insert(p.layer);
            if (p.kind == StepKind::matmul) float_layers.insert(p.layer);
        }
        EXPECT_EQ(int8_layers, (std::set<std::int64_t>{0, 2})) << name(f);
        EXPECT_EQ(float_layers, (std::set<std::int64_t>{1, 3})) << name(f);
    }
}

// An INT8 GEMM mutant at one quantized layer fails there first (the codes
// are decided exactly, so the budget is three FP32 roundings wide).
TEST(Diverge, Int8GemmMutantFailsAtItsLayer) {
    for (const char* mutant : {"mutant.int8_gemm.int16_acc.fp32", "mutant.int8_gemm.scale_a_tensor.fp32"}) {
        ModelContract c = small("dense", Format::bf16);
        c.quant = "int8";
        CandidateOptions opt;
        opt.mutant = mutant, opt.at = 2;
        const DivergeReport r = analyse(c, opt);
        ASSERT_TRUE(r.first_failing) << mutant;
        EXPECT_EQ(r.points[*r.first_failing].layer, 2) << mutant;
        EXPECT_EQ(r.points[*r.first_failing].kind, StepKind::int8_matmul) << mutant;
    }
}

// ---- per-layer mixes (docs/model.md, pattern letters) ----

// One stack of MLA, windowed softmax, KDA and GDN layers with an MoE MLP and
// logits (the README's demo): every layer's steps are of its own kind, and
// the built-in kernels pass; an MLA layer marked local is refused by name.
TEST(Diverge, MixedLayerPatternsPass) {
    ModelContract c = small("MSKD", Format::bf16);
    c.window = 3, c.window_pattern = "GLGG";
    c.mlp = MlpKind::moe, c.experts = 4, c.top_k = 2, c.expert_ffn = 16;
    c.logits = true, c.vocab = 40;
    const DivergeReport r = analyse(c);
    EXPECT_FALSE(r.first_failing) << first_failing_text(r);
    std::map<std::int64_t, std::set<StepKind>> kinds;
    for (const PointReport& p : r.points) kinds[p.layer].insert(p.kind);
    EXPECT_TRUE(kinds[0].count(StepKind::mla));
    EXPECT_TRUE(kinds[1].count(StepKind::attention));
    EXPECT_TRUE(kinds[2].count(StepKind::kda));
    EXPECT_TRUE(kinds[3].count(StepKind::gdn));
    EXPECT_TRUE(kinds[1].count(StepKind::router));
    c.window_pattern = "L";
    try {
        validate(c);
        ADD_FAILURE() << "an mla layer marked local was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("window_pattern"), std::string::npos) << e.what();
    }
    c.pattern = "SXK";
    EXPECT_THROW(validate(c), std::invalid_argument);
}

// ---- residual paths: Block Attention Residuals and the Gated Residual (docs/model.md) ----

// Each sub-layer reads block_attn_res over the block representations, or
// gated_residual over n streams and writes with sigmoid(s_i): the registry
// kernels and the write meet their budgets in dense and hybrid stacks.
TEST(Diverge, ResidualReadsPass) {
    for (ResidualKind kind : {ResidualKind::attn_res, ResidualKind::gated})
        for (const char* pattern : {"dense", "hybrid"})
            for (Format f : {Format::fp32, Format::bf16}) {
                ModelContract c = small(pattern, f);
                c.residual = kind;
                const DivergeReport r = analyse(c);
                const std::string what = std::string(name(kind)) + " " + pattern + " " + name(f);
                EXPECT_FALSE(r.first_failing) << what << ": " << first_failing_text(r);
                EXPECT_LE(r.oracle_bound_ratio, 1e-3) << what << " at " << r.oracle_bound_worst;
                std::set<StepKind> kinds;
                for (const PointReport& p : r.points) kinds.insert(p.kind);
                if (kind == ResidualKind::attn_res) {
                    EXPECT_TRUE(kinds.count(StepKind::attn_res)) << what;
                    EXPECT_EQ(r.points.back().point, "layers.3.final_res") << what;
                } else {
                    EXPECT_TRUE(kinds.count(StepKind::gated_read) && kinds.count(StepKind::gated_write)) << what;
                }
            }
}

TEST(Diverge, ResidualReadMutantFailsAtItsLayer) {
    const std::vector<std::pair<ResidualKind, std::string>> cases{
        {ResidualKind::attn_res, "mutant.block_attn_res.raw_keys.fp32"},
        {ResidualKind::gated, "mutant.gated_residual.index_shift.fp32"}};
    for (const auto& [kind, mutant] : cases) {
        ModelContract c = small("dense", Format::fp32);
        c.residual = kind;
        CandidateOptions opt;
        opt.mutant = mutant, opt.at = 2;
        const DivergeReport r = analyse(c, opt);
        ASSERT_TRUE(r.first_failing) << mutant;
        EXPECT_EQ(r.points[*r.first_failing].layer, 2) << mutant << ": " << first_failing_text(r);
        EXPECT_TRUE(r.points[*r.first_failing].kind == StepKind::attn_res ||
                    r.points[*r.first_failing].kind == StepKind::gated_read) << first_failing_text(r);
    }
}

// ---- scale: streamed synthesis, sampled tokens (docs/diverge.md, "Scale") -----

// run_kernels_streamed computes the points run_kernels computes, bit for
// bit, from weights drawn one at a time.
TEST(DivergeScale, StreamedKernelRunEmitsTheWholeRunsPoints) {
    ModelContract c = small("hybrid", Format::bf16);
    c.mlp = MlpKind::moe;
    const Synthetic m = synthetic_model(c, 3);
    const NamedTensors whole = run_kernels(c, m.weights, m.input);
    std::map<std::string, int> drawn;
    CandidateOptions opt;
    std::size_t emitted = 0;
    opt.emit = [&](const std::string& point, const Tensor& t) {
        ++emitted;
        ASSERT_TRUE(whole.count(point)) << point;
        EXPECT_EQ(io::StoredTensor::from_tensor(t), io::StoredTensor::from_tensor(whole.at(point))) << point;
    };
    run_kernels_streamed(c, [&](const std::string& n) { ++drawn[n]; return synthetic_weight(c, 3, n); }, m.input, opt);
    EXPECT_EQ(emitted, build_graph(c).size());
    EXPECT_EQ(drawn.size(), m.weights.size()) << "every weight drawn";
    for (const auto& [n, count] : drawn) EXPECT_EQ(count, 1) << n << ": drawn once, read while held";
    EXPECT_EQ(io::StoredTensor::from_tensor(synthetic_input(c, 3)), io::StoredTensor::from_tensor(m.input));
}

// The sample: the first half of the tokens and one per stratum of the rest,
// the last token included; every token where the points are not [T, F].
TEST(DivergeScale, TokenSampleHoldsThePrefixAndSpreadsOverTheRest) {
    ModelContract c = small("dense", Format::bf16);
    c.tokens = 2048;
    const TokenSample s = token_sample(c, build_graph(c), 0);
    ASSERT_FALSE(s.all);
    EXPECT_EQ(s.prefix, 64);
    ASSERT_EQ(s.rows.size(), 128u);
    for (std::int64_t r = 0; r < 64; ++r) EXPECT_EQ(s.rows[static_cast<std::size_t>(r)], r);
    EXPECT_TRUE(std::is_sorted(s.rows.begin(), s.rows.end()));
    EXPECT_EQ(std::adjacent_find(s.rows.begin(), s.rows.end()), s.rows.end());
    EXPECT_EQ(s.rows.back(), 2047);
    EXPECT_GT(s.rows[64], 63);
    EXPECT_LT(s.rows[64], 64 + 2048 / 64);  // one per stratum: the first in the first
    EXPECT_TRUE(token_sample(c, build_graph(c), 4096).all);
    c.tokens = 200;  // up to 256 tokens: every one, the whole-point path
    EXPECT_TRUE(token_sample(c, build_graph(c), 0).all);
    EXPECT_FALSE(token_sample(c, build_graph(c), 200).all);  // N = T: every token, sampled path
    c.residual = ResidualKind::mhc;  // [n, T, C] streams: not by rows
    c.tokens = 2048;
    EXPECT_TRUE(token_sample(c, build_graph(c), 0).all);
}

// Every token through the sampled path (the steps restated over rows, the
// attention per query over its visible keys) gives the whole-point path's
// verdicts: the same statuses and first failing point, the same local
// figures everywhere but at attention, whose bound counts only the keys a
// query sees (never looser than the whole row's).
TEST(DivergeScale, SampledPathOnEveryTokenAgreesWithTheWholePointPath) {
    const auto check = [](const ModelContract& c, const CandidateOptions& opt, const std::string& what) {
        const Synthetic m = synthetic_model(c, 5);
        const NamedTensors pts = run_kernels(c, m.weights, m.input, opt);
        const DivergeReport whole = diverge(c, m.weights, m.input, pts);
        DivergeOptions o;
        o.tokens = c.tokens;
        const DivergeReport rows = diverge(c, ModelRun{m.weights, m.input, pts, "candidate"}, o);
        EXPECT_EQ(rows.tokens_checked, c.tokens);
        ASSERT_EQ(whole.points.size(), rows.points.size());
        EXPECT_EQ(whole.first_failing, rows.first_failing) << what << ": " << first_failing_text(rows);
        for (std::size_t i = 0; i < whole.points.size(); ++i) {
            const PointReport &a = whole.points[i], &b = rows.points[i];
            EXPECT_EQ(a.status, b.status) << what << " " << a.point;
            EXPECT_EQ(a.convention_match, b.convention_match) << what << " " << a.point;
            if (a.kind == StepKind::attention) {
                EXPECT_GE(b.local.utilization, a.local.utilization * (1 - 1e-12)) << what << " " << a.point;
                EXPECT_LE(b.local.utilization, a.local.utilization * 1.05) << what << " " << a.point;
            } else {
                EXPECT_EQ(a.local.utilization, b.local.utilization) << what << " " << a.point;
                EXPECT_EQ(a.local.worst, b.local.worst) << what << " " << a.point;
                EXPECT_EQ(a.local.max_ulp, b.local.max_ulp) << what << " " << a.point;
            }
        }
    };
    ModelContract c = small("dense", Format::bf16);
    check(c, {}, "dense");
    CandidateOptions mutant;
    mutant.mutant = "mutant.rms_norm.zc_as_w.bf16", mutant.at = 2;
    check(c, mutant, "norm mutant");
    CandidateOptions interleaved;
    interleaved.conventions["gate_order"] = "up_gate";
    check(c, interleaved, "gate_order");
    c.mlp = MlpKind::moe;
    check(c, {}, "moe");
    c.mlp = MlpKind::swiglu;
    c.logits = true, c.vocab = 64;
    check(c, {}, "logits");
}

// With more tokens than the whole-point path takes, a defect at one layer
// is still found there on the sample, and the report says what was judged.
TEST(DivergeScale, SampledTokensFindAMutantAtItsLayer) {
    ModelContract c = small("dense", Format::bf16);
    c.layers = 3;
    c.tokens = 300;
    CandidateOptions opt;
    opt.mutant = "mutant.rms_norm.zc_as_w.bf16", opt.at = 1;
    const Synthetic m = synthetic_model(c, 5);
    const DivergeReport r = diverge(c, m.weights, m.input, run_kernels(c, m.weights, m.input, opt));
    EXPECT_EQ(r.tokens_checked, 128);
    EXPECT_EQ(r.tokens_propagated, 64);
    ASSERT_TRUE(r.first_failing) << first_failing_text(r);
    EXPECT_EQ(r.points[*r.first_failing].layer, 1);
    EXPECT_EQ(r.points[*r.first_failing].kind, StepKind::norm);
    const DivergeReport clean = diverge(c, m.weights, m.input, run_kernels(c, m.weights, m.input));
    EXPECT_FALSE(clean.first_failing) << first_failing_text(clean);
    const nlohmann::json j = to_json(clean);
    EXPECT_EQ(j.at("tokens_checked"), 128);
    EXPECT_EQ(report_from_json(j, "r.json").tokens_propagated, 64);
}

// Each ISA build of the dense products the CPU can run (model/dense_gemm.hpp)
// computes X W^T within gamma_K |X| |W|^T of the exact product, and the
// dispatched one is the best the CPU has.
TEST(DenseGemm, EveryBuildIsWithinGammaKOfTheExactProduct) {
    const std::int64_t T = 7, K = 301, N = 300;  // N past one block of gemm_abs_xwt
    std::mt19937_64 g(11);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> x(T * K), w(N * K), y(T * N), a(T * N);
    for (double& v : x) v = u(g);
    for (double& v : w) v = u(g) * 1e3;
    gemm_abs_xwt(x.data(), w.data(), a.data(), T, K, N);
    std::vector<std::string> builds{"baseline"};
    if (cpu::has_avx2()) builds.push_back("avx2");
    if (cpu::has_avx512()) builds.push_back("avx512");
    EXPECT_EQ(std::string(gemm_isa()), builds.back());
    for (const std::string& isa : builds) {
        gemm_xwt(isa.c_str(), x.data(), w.data(), y.data(), T, K, N);
        for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t n = 0; n < N; ++n) {
                long double exact = 0, mag = 0;
                for (std::int64_t k = 0; k < K; ++k) {
                    exact += static_cast<long double>(x[t * K + k]) * w[n * K + k];
                    mag += std::fabs(static_cast<long double>(x[t * K + k]) * w[n * K + k]);
                }
                const double gamma = K * 0x1p-53 / (1 - K * 0x1p-53);
                EXPECT_LE(std::fabs(static_cast<double>(y[t * N + n] - exact)), gamma * static_cast<double>(mag)) << isa;
                EXPECT_NEAR(a[t * N + n], static_cast<double>(mag), 1e-12 * static_cast<double>(mag)) << isa;
            }
    }
}

// Mistral's rolling-buffer KV cache (kv_cache rolling): a local layer's
// cache holds the last min(P, W) keys, position p in slot p mod W; global
// layers keep all P.  Clean stacks pass, wrapped or not; a port that reads
// the ring in slot order fails at its first local attention, named.
TEST(Diverge, RollingBufferCacheLayers) {
    for (Format f : {Format::fp32, Format::bf16}) {
        ModelContract c = small("dense", f);
        c.window = 6, c.window_pattern = "LG", c.kv_cache = "rolling", c.tokens = 8;
        for (std::int64_t P : {4, 9, 12}) {
            c.cache_tokens = P;
            std::map<std::string, std::vector<std::int64_t>> shapes;
            for (const WeightSpec& w : weight_specs(c)) shapes[w.name] = w.shape;
            EXPECT_EQ(shapes.at("layers.0.cache.k")[0], std::min<std::int64_t>(P, 6)) << P;
            EXPECT_EQ(shapes.at("layers.1.cache.v")[0], P) << P;
            const DivergeReport r = analyse(c);
            EXPECT_FALSE(r.first_failing) << name(f) << " P " << P << ": " << first_failing_text(r);
        }
        c.cache_tokens = 9;  // wrapped: slot order is not position order
        CandidateOptions slots;
        slots.conventions["rolling_order"] = "slots";
        expect_first_failing(analyse(c, slots), "layers.0.attn", "rolling_order=slots");
    }
    ModelContract bad = small("dense", Format::bf16);
    bad.kv_cache = "rolling";
    EXPECT_THROW(validate(bad), std::invalid_argument);  // no window: nothing rolls
}

// On a sample, every step is judged on a subset of the rows with the same
// per-element budgets (RoPE's rows at their own positions), so no point's
// local utilization exceeds the whole analysis's, and the worst element
// named lies in a sampled row; attention rows are judged over their own
// keys (a bound never looser).
TEST(DivergeScale, SampleJudgesASubsetOfTheWholeAnalysis) {
    ModelContract c = small("dense", Format::bf16);
    c.layers = 2, c.tokens = 300, c.qk_norm = true;
    const Synthetic m = synthetic_model(c, 9);
    const NamedTensors pts = run_kernels(c, m.weights, m.input);
    DivergeOptions all, sampled;
    all.tokens = 301;
    sampled.tokens = 40;
    const DivergeReport w = diverge(c, ModelRun{m.weights, m.input, pts, "c"}, all);
    const DivergeReport s = diverge(c, ModelRun{m.weights, m.input, pts, "c"}, sampled);
    EXPECT_EQ(w.tokens_checked, 300);
    EXPECT_EQ(s.tokens_checked, 40);
    const TokenSample rows = token_sample(c, build_graph(c), 40);
    ASSERT_EQ(w.points.size(), s.points.size());
    for (std::size_t i = 0; i < w.points.size(); ++i) {
        const PointReport &a = w.points[i], &b = s.points[i];
        EXPECT_EQ(b.status, PointStatus::pass) << b.point;
        if (a.kind != StepKind::attention) {
            EXPECT_LE(b.local.utilization, a.local.utilization * (1 + 1e-12)) << b.point;
        }
        if (b.local.worst >= 0) {
            const std::int64_t row = b.local.worst / (pts.at(b.point).numel() / c.tokens);
            EXPECT_TRUE(std::binary_search(rows.rows.begin(), rows.rows.end(), row)) << b.point << " row " << row;
        }
        if (a.kind == StepKind::rope) {
            EXPECT_GT(b.local.utilization, 0.1) << b.point;
        }
    }
}

}  // namespace diverge_test
