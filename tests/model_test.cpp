// The model core (docs/model.md): contract, graph, FP64-tier oracle and its
// fused form, MPFR cross-check, synthetic model and the kernel executor.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <map>
#include <cmath>
#include <random>
#include <set>

#include "model/graph.hpp"
#include "model/layout.hpp"
#include "model/mpfr_check.hpp"
#include "model/run.hpp"

namespace model_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using namespace conform::model;

namespace {

ModelContract small(const std::string& pattern = "dense", Format f = Format::fp32) {
    ModelContract c;
    c.layers = 4;
    c.pattern = pattern;
    c.width = 32;
    c.heads = 4, c.kv_heads = 2, c.head_dim = 8;
    c.linear_heads = 2, c.linear_head_dim = 8;
    c.ffn = 48;
    c.tokens = 6;
    c.dtype = f;
    return c;
}

Named as_values(const NamedTensors& t) {
    Named v;
    for (const auto& [n, x] : t) v[n] = values_of(x.view());
    return v;
}

struct Model {
    ModelContract c;
    Synthetic syn;
    Named weights;
    Values input;
};
Model make(const ModelContract& c, std::uint64_t seed = 7) {
    Model m{c, synthetic_model(c, seed), {}, {}};
    m.weights = as_values(m.syn.weights);
    m.input = values_of(m.syn.input.view());
    return m;
}

bool same_bits(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape() || a.format() != b.format()) return false;
    for (std::int64_t i = 0; i < a.numel(); ++i)
        if (a.bits(i) != b.bits(i)) return false;
    return true;
}

// |c - r|_2 / |r|_2 over one point.
double rel_l2(const Values& c, const Values& r) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < r.v.size(); ++i) num += (c.v[i] - r.v[i]) * (c.v[i] - r.v[i]), den += r.v[i] * r.v[i];
    return std::sqrt(num / std::max(den, 1e-300));
}

std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

// ---- contract ---------------------------------------------------------------

// A valid small contract with every structural choice drawn (inside a property).
ModelContract random_contract() {
    ModelContract c = small(*rc::gen::element<std::string>("dense", "hybrid"));
    c.layers = *rc::gen::inRange<std::int64_t>(1, 6);
    c.linear_kind = *rc::gen::element(AttentionKind::gdn, AttentionKind::kda);
    c.attention_kind = *rc::gen::element(AttentionKind::softmax, AttentionKind::gated, AttentionKind::mla);
    c.mla_form = *rc::gen::element<std::string>("explicit", "absorbed");
    c.mlp = *rc::gen::element(MlpKind::swiglu, MlpKind::situ_glu, MlpKind::gelu, MlpKind::moe, MlpKind::latent_moe,
                              MlpKind::geglu, MlpKind::swiglu_clamp);
    c.experts = *rc::gen::inRange<std::int64_t>(1, 9);
    c.top_k = *rc::gen::inRange<std::int64_t>(1, c.experts + 1);
    c.shared_experts = *rc::gen::inRange<std::int64_t>(0, 3);
    c.expert_ffn = *rc::gen::inRange<std::int64_t>(1, 17);
    c.router_score = *rc::gen::element(RouterScore::softmax, RouterScore::sigmoid);
    c.renormalize = *rc::gen::arbitrary<bool>();
    c.selection_bias = *rc::gen::arbitrary<bool>();
    c.latent_dim = *rc::gen::inRange<std::int64_t>(1, 33);
    c.normalized = *rc::gen::arbitrary<bool>();
    c.window = *rc::gen::element<std::int64_t>(0, 0, 2, 5);
    c.logits = *rc::gen::arbitrary<bool>();
    c.vocab = *rc::gen::inRange<std::int64_t>(1, 70);
    c.tied_embeddings = *rc::gen::arbitrary<bool>();
    c.logit_softcap = *rc::gen::element(0.0, 0.0, 30.0);
    c.window_pattern = *rc::gen::element<std::string>("L", "LG", "LLLLLG");
    if (c.attention_kind == AttentionKind::mla) c.window = 0;  // MLA layers take no window
    c.norm = *rc::gen::element(NormKind::rms_norm, NormKind::layer_norm);
    c.residual = *rc::gen::element(ResidualKind::plain, ResidualKind::mhc);
    c.placement = c.residual == ResidualKind::mhc ? Placement::pre : *rc::gen::element(Placement::pre, Placement::post);
    c.cache_tokens = *rc::gen::inRange<std::int64_t>(0, 4);
    c.qk_norm = *rc::gen::arbitrary<bool>();
    c.qkv_bias = *rc::gen::arbitrary<bool>();
    c.zero_centered = *rc::gen::arbitrary<bool>();
    if (c.residual == ResidualKind::plain) c.residual_scale = *rc::gen::element(1.0, 0.5, 1.0 / 3);
    return c;
}

RC_GTEST_PROP(ModelContract, JsonRoundTrip, ()) {
    ModelContract c = random_contract();
    c.dtype = *rc::gen::element(Format::fp32, Format::bf16, Format::fp16);
    c.residual_format = *rc::gen::element(Format::fp32, Format::bf16, Format::fp16);
    c.eps = *rc::gen::element(1e-6, 1e-5, 0.1, 0.0);
    for (auto& [k, vals] : convention_values()) c.conventions[k] = *rc::gen::elementOf(vals);
    if (c.attention_kind == AttentionKind::mla) c.conventions["causal"] = "bottom_right";  // the only one MLA takes
    if (c.mlp == MlpKind::situ_glu || c.mlp == MlpKind::swiglu_clamp)
        c.conventions["glu_arith"] = "fused";  // separate is derived for SwiGLU and GeGLU only
    const nlohmann::json j = to_json(c);
    RC_ASSERT(to_json(contract_from_json(nlohmann::json::parse(j.dump()))) == j);
}

TEST(ModelContract, ErrorsNameTheField) {
    nlohmann::json j = to_json(small());
    j["kv_heads"] = 3;
    EXPECT_EQ(message_of([&] { contract_from_json(j); }), "contract.kv_heads: must divide heads (4)");
    j = to_json(small());
    j["widht"] = 3;
    EXPECT_EQ(message_of([&] { contract_from_json(j); }), "contract.widht: unknown key");
    j = to_json(small());
    j["conventions"]["rope_pairing"] = "zigzag";
    EXPECT_NE(message_of([&] { contract_from_json(j); }).find("contract.conventions.rope_pairing"), std::string::npos);
    j = to_json(small());
    j["width"] = "wide";
    EXPECT_NE(message_of([&] { contract_from_json(j); }).find("contract.width: expected an integer"), std::string::npos);
    j = to_json(small());
    j["dtype"] = "int8";
    EXPECT_NE(message_of([&] { contract_from_json(j); }).find("contract.dtype"), std::string::npos);
    ModelContract c = small();
    c.residual = ResidualKind::mhc;
    c.placement = Placement::post;
    EXPECT_NE(message_of([&] { validate(c); }).find("contract.residual"), std::string::npos);
    j = to_json(small());
    j["mlp"] = "moe", j["experts"] = 4, j["top_k"] = 5;
    EXPECT_EQ(message_of([&] { contract_from_json(j); }), "contract.top_k: must be in [1, experts = 4] (is 5)");
    j["top_k"] = 2, j["router_score"] = "relu";
    EXPECT_NE(message_of([&] { contract_from_json(j); }).find("contract.router_score: 'relu' is not one of softmax | sigmoid"),
              std::string::npos);
    j["router_score"] = "sigmoid", j["shared_experts"] = -1;
    EXPECT_EQ(message_of([&] { contract_from_json(j); }), "contract.shared_experts: must be >= 0");
    j = to_json(small());
    j["rope_scaling"] = "ntk";
    EXPECT_EQ(message_of([&] { contract_from_json(j); }), "contract.rope_scaling: must be none, linear, llama3 or yarn");
    j["rope_scaling"] = "llama3", j["rope_low_freq_factor"] = 4.0;
    EXPECT_EQ(message_of([&] { contract_from_json(j); }), "contract.rope_high_freq_factor: must be > rope_low_freq_factor for llama3");
    j = to_json(small());
    j["rope_attention_factor"] = 0.0;
    EXPECT_EQ(message_of([&] { contract_from_json(j); }), "contract.rope_attention_factor: must be finite and > 0");
    j = to_json(small());
    j["attention_scale"] = -0.5;
    EXPECT_NE(message_of([&] { contract_from_json(j); }).find("contract.attention_scale"), std::string::npos);
    j = to_json(small());
    j["attention_softcap"] = -1.0;
    EXPECT_EQ(message_of([&] { contract_from_json(j); }), "contract.attention_softcap: must be finite and >= 0 (0: none)");
    j["attention_softcap"] = 50.0, j["attention_kind"] = "mla";
    EXPECT_NE(message_of([&] { contract_from_json(j); }).find("contract.attention_softcap: the mla op takes no softcap"),
              std::string::npos);
    j = to_json(small());
    j["window"] = 4, j["window_pattern"] = "LLX";
    EXPECT_NE(message_of([&] { contract_from_json(j); }).find("contract.window_pattern"), std::string::npos);
}

// The MoE MLPs' points: the router [T, 2k] (FP32) and mlp_out; latent_moe
// holds u [T, L] between them.  Weights in the registry ops' layouts.
TEST(ModelGraph, MoePointsAndWeights) {
    ModelContract c = small("dense", Format::bf16);
    c.mlp = MlpKind::latent_moe, c.experts = 6, c.top_k = 2, c.shared_experts = 1, c.expert_ffn = 8, c.latent_dim = 12;
    std::vector<std::string> mlp;
    for (const Step& s : build_graph(c))
        if (s.layer == 0 && s.sublayer == "mlp") mlp.push_back(s.point + ":" + name(s.kind) + ":" + shape_string(s.shape) + ":" + name(s.format));
    const std::vector<std::string> want{"layers.0.mlp_norm:norm:[6, 32]:bf16", "layers.0.router:router:[6, 4]:fp32",
                                        "layers.0.latent_u:moe:[6, 12]:bf16", "layers.0.mlp_out:latent_out:[6, 32]:bf16",
                                        "layers.0.output:add:[6, 32]:fp32"};
    EXPECT_EQ(mlp, want);
    std::map<std::string, std::vector<std::int64_t>> w;
    for (const WeightSpec& s : weight_specs(c)) w[s.name] = s.shape;
    EXPECT_EQ(w.at("layers.0.router.weight"), (std::vector<std::int64_t>{32, 6}));
    EXPECT_EQ(w.at("layers.0.experts.gate_up.weight"), (std::vector<std::int64_t>{6, 12, 16}));
    EXPECT_EQ(w.at("layers.0.shared.down.weight"), (std::vector<std::int64_t>{1, 8, 32}));
    EXPECT_EQ(w.at("layers.0.latent.down.weight"), (std::vector<std::int64_t>{32, 12}));
    EXPECT_EQ(w.count("layers.0.router.bias"), 0u);
    c.selection_bias = true, c.shared_experts = 0, c.normalized = false;
    w.clear();
    for (const WeightSpec& s : weight_specs(c)) w[s.name] = s.shape;
    EXPECT_EQ(w.at("layers.0.router.bias"), (std::vector<std::int64_t>{6}));
    EXPECT_EQ(w.count("layers.0.shared.down.weight") + w.count("layers.0.latent_norm.weight"), 0u);
}

TEST(ModelContract, HybridPattern) {
    ModelContract c = small("hybrid");
    c.layers = 8;
    for (std::int64_t l = 0; l < 8; ++l)
        EXPECT_EQ(c.layer_kind(l), l % 4 == 3 ? AttentionKind::softmax : AttentionKind::gdn) << l;
}

// ---- graph ----------------------------------------------------------------------

// Every step reads points computed before it, weights and caches of
// weight_specs; shapes agree with the inputs; the required points are there.
void check_graph(const ModelContract& c) {
    std::map<std::string, std::vector<std::int64_t>> known{{"input", {c.tokens, c.width}}};
    for (const WeightSpec& w : weight_specs(c)) known[w.name] = w.shape;
    std::set<std::string> required;
    for (const Step& s : build_graph(c)) {
        for (const auto& in : s.inputs) EXPECT_TRUE(known.count(in)) << s.point << " reads " << in << " before it exists";
        for (const auto& w : s.weights) EXPECT_TRUE(known.count(w)) << s.point << " reads unknown weight " << w;
        EXPECT_FALSE(known.count(s.point)) << s.point << " computed twice";
        known[s.point] = s.shape;
        if (s.kind == StepKind::matmul) {
            EXPECT_EQ(known[s.inputs[0]].back(), known[s.weights[0]][1]) << s.point;
            EXPECT_EQ(s.shape.back(), known[s.weights[0]][0]) << s.point;
        }
        if (s.required) required.insert(s.point);
    }
    for (std::int64_t l = 0; l < c.layers; ++l)
        for (const char* p : {"attn_out", "mid", "mlp_out", "output"})
            EXPECT_TRUE(required.count("layers." + std::to_string(l) + "." + p)) << l << p;
    const std::string last = "layers." + std::to_string(c.layers - 1) + ".output";
    EXPECT_EQ(known[last], (std::vector<std::int64_t>{c.tokens, c.width}));
}

TEST(ModelGraph, ShapesAndOrdering) {
    ModelContract c = small();
    check_graph(c);
    c.pattern = "hybrid", c.linear_kind = AttentionKind::kda, c.cache_tokens = 3, c.qk_norm = true;
    check_graph(c);
    c.placement = Placement::post, c.mlp = MlpKind::gelu, c.attention_kind = AttentionKind::gated;
    check_graph(c);
    c.placement = Placement::pre, c.residual = ResidualKind::mhc;
    check_graph(c);
    const auto g = build_graph(c);
    const auto mid = std::find_if(g.begin(), g.end(), [](const Step& s) { return s.point == "layers.0.mid"; });
    EXPECT_EQ(mid->shape, (std::vector<std::int64_t>{4, c.tokens, c.width}));
    EXPECT_EQ(mid->kind, StepKind::hc_update);
}

// Any valid contract: a well-formed graph, and the fused form equal to the
// plain one bit for bit.
RC_GTEST_PROP(ModelGraph, AnyContractWellFormedAndFusedEqualsPlain, ()) {
    const ModelContract c = random_contract();
    check_graph(c);
    const Model m = make(c, *rc::gen::arbitrary<std::uint32_t>());
    const Named plain = run_oracle(c, m.weights, m.input), fused = run_oracle_fused(c, m.weights, m.input);
    RC_ASSERT(plain.size() == fused.size());
    for (const auto& [n, v] : plain)
        for (std::size_t i = 0; i < v.v.size(); ++i)
            RC_ASSERT(std::bit_cast<std::uint64_t>(v.v[i]) == std::bit_cast<std::uint64_t>(fused.at(n).v[i]));
}

TEST(ModelGraph, PreNormPointOrder) {
    std::vector<std::string> names;
    for (const Step& s : build_graph(small()))
        if (s.layer == 0) names.push_back(s.point.substr(9));
    EXPECT_EQ(names, (std::vector<std::string>{"attn_norm", "q", "k", "v", "q_rope", "k_rope", "attn", "attn_out", "mid",
                                               "mlp_norm", "gate_up", "h", "mlp_out", "output"}));
}

// ---- FP64 tier ----------------------------------------------------------------

TEST(ModelOracle, FusedEqualsPlainBitForBit) {
    std::vector<ModelContract> cs{small(), small("hybrid")};
    cs.back().linear_kind = AttentionKind::kda;
    ModelContract c = small();
    c.placement = Placement::post, c.norm = NormKind::layer_norm, c.residual_scale = 0.7;
    cs.push_back(c);
    c = small("hybrid");
    c.residual = ResidualKind::mhc, c.zero_centered = true, c.cache_tokens = 2;
    cs.push_back(c);
    for (const ModelContract& mc : cs) {
        const Model m = make(mc);
        const Named plain = run_oracle(mc, m.weights, m.input), fused = run_oracle_fused(mc, m.weights, m.input);
        ASSERT_EQ(plain.size(), fused.size());
        for (const auto& [n, v] : plain) {
            ASSERT_TRUE(fused.count(n)) << n;
            EXPECT_EQ(v.shape, fused.at(n).shape) << n;
            for (std::size_t i = 0; i < v.v.size(); ++i)
                ASSERT_EQ(std::bit_cast<std::uint64_t>(v.v[i]), std::bit_cast<std::uint64_t>(fused.at(n).v[i]))
                    << to_json(mc).dump() << " " << n << "[" << i << "]";
        }
    }
}

TEST(ModelOracle, Fp64TierAgreesWithMpfr) {
    for (ModelContract c : {small(), small("hybrid")}) {
        c.cache_tokens = 2, c.qk_norm = true, c.layers = 4;
        if (c.pattern == "hybrid") c.residual = ResidualKind::mhc, c.linear_kind = AttentionKind::kda;
        const Model m = make(c);
        const CrossCheck x = cross_check_mpfr(c, m.weights, run_oracle(c, m.weights, m.input), 3, 11);
        std::printf("%s: %s\n", c.pattern.c_str(), x.summary().c_str());
        EXPECT_LT(x.max(), 1e-13) << x.summary();
        EXPECT_GT(x.elements, 100);
        EXPECT_GE(x.max_rel.size(), c.pattern == "hybrid" ? 13u : 7u) << x.summary();
    }
}

// The MoE steps' FP64 tier against the registry's MPFR oracles (moe_router,
// moe and latent_moe staged with the tier's router point).
TEST(ModelOracle, MoeStepsAgreeWithMpfr) {
    for (MlpKind k : {MlpKind::moe, MlpKind::latent_moe}) {
        ModelContract c = small();
        c.mlp = k, c.layers = 2, c.selection_bias = k == MlpKind::moe, c.router_score = RouterScore::sigmoid;
        const Model m = make(c);
        const CrossCheck x = cross_check_mpfr(c, m.weights, run_oracle(c, m.weights, m.input), 3, 11);
        EXPECT_LT(x.max(), 1e-13) << x.summary();
        EXPECT_TRUE(x.max_rel.count("router")) << x.summary();
        EXPECT_TRUE(x.max_rel.count(k == MlpKind::moe ? "moe" : "latent_out")) << x.summary();
    }
}

// The cross-check sees a wrong FP64 value.
TEST(ModelOracle, MpfrCrossCheckDetectsAWrongPoint) {
    const ModelContract c = small();
    const Model m = make(c);
    Named p = run_oracle(c, m.weights, m.input);
    for (double& v : p.at("layers.1.attn_norm").v) v *= 1 + 1e-9;
    EXPECT_GT(cross_check_mpfr(c, m.weights, p, 3, 11).max_rel.at("norm"), 1e-10);
}

// ---- synthetic model --------------------------------------------------------------

TEST(ModelSynthetic, DeterministicAndBounded) {
    ModelContract c = small("dense", Format::bf16);
    c.layers = 32;
    const Synthetic a = synthetic_model(c, 3), b = synthetic_model(c, 3), d = synthetic_model(c, 4);
    ASSERT_EQ(a.weights.size(), weight_specs(c).size());
    for (const auto& [n, t] : a.weights) {
        EXPECT_TRUE(same_bits(t, b.weights.at(n))) << n;
        EXPECT_EQ(t.format(), Format::bf16);
    }
    EXPECT_FALSE(same_bits(a.input, d.input));
    EXPECT_EQ(a.input.bits(0), 0x3fa9);  // pins the generator (platform-independent draws)
    const Model m = make(c, 3);
    const Named p = run_oracle(c, m.weights, m.input);
    for (std::int64_t l : {0, 15, 31}) {
        const Values& out = p.at("layers." + std::to_string(l) + ".output");
        double ms = 0;
        for (double v : out.v) ms += v * v;
        ms /= static_cast<double>(out.numel());
        EXPECT_GT(ms, 0.1) << l;
        EXPECT_LT(ms, 10.0) << l;
    }
}

// ---- kernels ----------------------------------------------------------------------------

// A smoke check, not a budget (budgets belong to the divergence analysis):
// every required point within 16 u (layer + 1) (normwise) of the oracle, u the
// unit roundoff of the dtype (a dozen roundings per layer; measured at most
// about 5 u (layer + 1)).
TEST(ModelKernels, CloseToTheOracleInEveryFormat) {
    for (Format f : {Format::fp32, Format::bf16, Format::fp16})
        for (const std::string pattern : {"dense", "hybrid", "dense variant", "hybrid variant"}) {
            ModelContract c = small(pattern.substr(0, pattern.find(' ')), f);
            c.cache_tokens = 2;
            if (pattern == "dense variant") {  // gated attention, QK-norm, biases, post layer norm, GELU MLP
                c.attention_kind = AttentionKind::gated, c.qk_norm = true, c.qkv_bias = c.o_bias = true;
                c.placement = Placement::post, c.norm = NormKind::layer_norm, c.mlp = MlpKind::gelu;
            } else if (pattern == "hybrid variant") {  // kda, mHC, SiTU-GLU, zero-centred norms, partial RoPE
                c.linear_kind = AttentionKind::kda, c.residual = ResidualKind::mhc, c.mlp = MlpKind::situ_glu;
                c.zero_centered = true, c.rotary_dim = 4;
            }
            const Model m = make(c);
            const Named ref = run_oracle(c, m.weights, m.input);
            const NamedTensors got = run_kernels(c, m.syn.weights, m.syn.input);
            double worst = 0;
            for (const Step& s : build_graph(c)) {
                ASSERT_TRUE(got.count(s.point)) << s.point;
                EXPECT_EQ(got.at(s.point).format(), s.format) << s.point;
                if (!s.required) continue;
                const double e = rel_l2(values_of(got.at(s.point).view()), ref.at(s.point));
                worst = std::max(worst, e / (unit_roundoff(f) * static_cast<double>(s.layer + 1)));
                EXPECT_LT(e, 16 * unit_roundoff(f) * static_cast<double>(s.layer + 1)) << name(f) << " " << pattern << " " << s.point;
            }
            RecordProperty(std::string(name(f)) + "_" + pattern + "_worst_u_per_layer", std::to_string(worst));
            std::printf("%s %s: max normwise error %.2f u (layer + 1)\n", name(f), pattern.c_str(), worst);
        }
}

TEST(ModelKernels, MutantChangesItsLayerOnly) {
    const ModelContract c = small("dense", Format::fp32);
    const Model m = make(c);
    const NamedTensors base = run_kernels(c, m.syn.weights, m.syn.input);
    CandidateOptions opt;
    opt.mutant = "mutant.rms_norm.eps_outside.fp32";
    opt.at = 2;
    const NamedTensors mut = run_kernels(c, m.syn.weights, m.syn.input, opt);
    for (const Step& s : build_graph(c)) {
        if (s.layer < 2) {
            EXPECT_TRUE(same_bits(base.at(s.point), mut.at(s.point))) << s.point;
        }
        if (s.point == "layers.2.attn_norm") {
            EXPECT_FALSE(same_bits(base.at(s.point), mut.at(s.point)));
        }
    }
    opt.mutant = "mutant.rms_norm.nope.fp32";
    EXPECT_NE(message_of([&] { run_kernels(c, m.syn.weights, m.syn.input, opt); }).find("not a registered mutant"), std::string::npos);
    opt.mutant = "mutant.gdn.varlen_shared_state.fp32";  // no gdn layer in a dense stack
    EXPECT_NE(message_of([&] { run_kernels(c, m.syn.weights, m.syn.input, opt); }).find("has no gdn step"), std::string::npos);
}

// Each convention override changes the step it concerns (the first step of
// that kind) and nothing before it, in both tiers.
TEST(ModelKernels, EachConventionChangesItsStep) {
    struct Case {
        std::string key, value;
        StepKind kind;
        MlpKind mlp;
    };
    const std::vector<Case> cases{{"rope_pairing", "interleaved", StepKind::rope, MlpKind::swiglu},
                                  {"eps_placement", "outside", StepKind::norm, MlpKind::swiglu},
                                  {"gate_order", "up_gate", StepKind::glu, MlpKind::swiglu},
                                  {"gelu", "tanh", StepKind::gelu, MlpKind::gelu},
                                  {"norm_cast", "before_weight", StepKind::norm, MlpKind::swiglu},
                                  {"causal", "top_left", StepKind::attention, MlpKind::swiglu}};
    for (Format f : {Format::fp32, Format::bf16})
        for (const Case& k : cases) {
            ModelContract c = small("dense", f);
            c.mlp = k.mlp, c.cache_tokens = 3, c.eps = 0.05;  // eps large enough for its placement to show in bf16
            const Model m = make(c);
            CandidateOptions opt;
            opt.conventions[k.key] = k.value;
            const NamedTensors base = run_kernels(c, m.syn.weights, m.syn.input);
            const NamedTensors alt = run_kernels(c, m.syn.weights, m.syn.input, opt);
            const Named ref = run_oracle(c, m.weights, m.input);
            Conventions conv = c.conventions;
            conv[k.key] = k.value;
            const Lookup get = [&](const std::string& n) -> const Values& {
                return ref.count(n) ? ref.at(n) : m.weights.at(n);
            };
            for (const Step& s : build_graph(c)) {
                if (s.kind != k.kind) {
                    EXPECT_TRUE(same_bits(base.at(s.point), alt.at(s.point))) << k.key << " " << s.point;
                    continue;
                }
                EXPECT_FALSE(same_bits(base.at(s.point), alt.at(s.point))) << name(f) << " " << k.key << " " << s.point;
                const Values a = eval_step(c, s, get, conv);
                EXPECT_NE(a.v, ref.at(s.point).v) << k.key << " " << s.point;
                break;
            }
        }
}

TEST(ModelLayout, HeadsMajorRoundTripsAndOpCallsMatchTheOracle) {
    Values x{{3, 8}, {}};
    for (int i = 0; i < 24; ++i) x.v.push_back(i);
    const Values h = heads_major(x, 2);
    EXPECT_EQ(h.shape, (std::vector<std::int64_t>{2, 3, 4}));
    EXPECT_EQ(h.v[4], 8);  // head 0, token 1, channel 0 = x[1, 0]
    EXPECT_EQ(tokens_major(h).v, x.v);
    const ModelContract c = small();
    const Model m = make(c);
    const Named ref = run_oracle(c, m.weights, m.input);
    const Lookup get = [&](const std::string& n) -> const Values& { return ref.count(n) ? ref.at(n) : m.weights.at(n); };
    for (const Step& s : build_graph(c)) {
        const OpCall call = op_call(c, s, get, c.conventions);
        if (s.kind == StepKind::attention) {
            EXPECT_EQ(call.op, "attention");
            EXPECT_EQ(call.in[1].shape(), (std::vector<std::int64_t>{c.kv_heads, c.tokens, c.head_dim}));
            EXPECT_EQ(call.params.at("causal"), 1);
        }
        if (s.kind == StepKind::matmul) {
            EXPECT_EQ(call.op, "");
        }
    }
}

}  // namespace model_test
