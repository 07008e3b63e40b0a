#include "model/contract.hpp"

#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>

namespace conform::model {

const char* name(AttentionKind k) {
    switch (k) {
        case AttentionKind::softmax: return "softmax";
        case AttentionKind::gated: return "gated";
        case AttentionKind::gdn: return "gdn";
        case AttentionKind::kda: return "kda";
        case AttentionKind::mla: return "mla";
    }
    return "?";
}
const char* name(MlpKind k) {
    switch (k) {
        case MlpKind::swiglu: return "swiglu";
        case MlpKind::situ_glu: return "situ_glu";
        case MlpKind::gelu: return "gelu";
        case MlpKind::moe: return "moe";
        case MlpKind::latent_moe: return "latent_moe";
        case MlpKind::geglu: return "geglu";
        case MlpKind::swiglu_clamp: return "swiglu_clamp";
    }
    return "?";
}
const char* name(RouterScore s) { return s == RouterScore::softmax ? "softmax" : "sigmoid"; }
const char* name(NormKind k) { return k == NormKind::rms_norm ? "rms_norm" : "layer_norm"; }
const char* name(Placement p) { return p == Placement::pre ? "pre" : p == Placement::post ? "post" : "sandwich"; }
const char* name(ResidualKind r) {
    switch (r) {
        case ResidualKind::plain: return "plain";
        case ResidualKind::mhc: return "mhc";
        case ResidualKind::attn_res: return "attn_res";
        case ResidualKind::gated: return "gated";
    }
    return "?";
}

const std::map<std::string, std::vector<std::string>>& convention_values() {
    static const std::map<std::string, std::vector<std::string>> v{
        {"rope_pairing", {"half", "interleaved"}},       {"eps_placement", {"inside", "outside"}},
        {"gate_order", {"gate_up", "up_gate"}},          {"gelu", {"erf", "tanh"}},
        {"norm_cast", {"after_weight", "before_weight"}}, {"causal", {"bottom_right", "top_left"}},
        {"window_keys", {"w", "w_plus_one"}}, {"lm_head", {"own", "embed"}},
        {"conv_padding", {"causal", "same"}}, {"logit_softcap", {"applied", "skipped"}},
        {"rolling_order", {"positions", "slots"}},
        // Arithmetic a narrow-format model may do in its own format
        // (Hugging Face's PyTorch code in bf16/fp16; docs/model.md):
        {"rope_arith", {"fp32", "dtype", "fp32_angles"}}, {"attention_probs", {"fp32", "dtype"}}, {"router_arith", {"fp32", "dtype"}},
        {"attention_logits", {"fp32", "dtype"}},
        // The logits rounded to the model's format (an lm_head in it), and
        // SwiGLU as act(gate) stored, then the product rounded (docs/model.md).
        {"logits_format", {"fp32", "dtype"}}, {"glu_arith", {"fused", "separate"}}, {"act_arith", {"ulp", "quotient"}},
        {"softcap_arith", {"ulp", "dtype"}},
    };
    return v;
}

Conventions default_conventions() {
    Conventions c;
    for (const auto& [k, vals] : convention_values()) c[k] = vals.front();
    return c;
}

std::int64_t ModelContract::cache_rows(std::int64_t layer) const {
    const std::int64_t w = layer_window(layer);
    return kv_cache == "rolling" && w > 0 ? std::min(cache_tokens, w) : cache_tokens;
}

std::int64_t ModelContract::layer_window(std::int64_t layer) const {
    if (window <= 0 || window_pattern.empty()) return 0;
    return window_pattern[static_cast<std::size_t>(layer) % window_pattern.size()] == 'L' ? window : 0;
}

bool ModelContract::moe_layer(std::int64_t layer) const {
    return moe() && !mlp_pattern.empty() && mlp_pattern[static_cast<std::size_t>(layer) % mlp_pattern.size()] == 'M';
}

bool ModelContract::int8_layer(std::int64_t layer) const {
    return quant == "int8" && !quant_pattern.empty() &&
           quant_pattern[static_cast<std::size_t>(layer) % quant_pattern.size()] == 'Q';
}

namespace {

// The kind a letter of an explicit pattern names (docs/model.md).
std::optional<AttentionKind> pattern_kind(char ch) {
    switch (ch) {
        case 'S': return AttentionKind::softmax;
        case 'G': return AttentionKind::gated;
        case 'M': return AttentionKind::mla;
        case 'D': return AttentionKind::gdn;
        case 'K': return AttentionKind::kda;
        default: return std::nullopt;
    }
}

}  // namespace

AttentionKind ModelContract::layer_kind(std::int64_t layer) const {
    if (pattern == "dense") return attention_kind;
    if (pattern == "hybrid") return layer % 4 != 3 ? linear_kind : attention_kind;
    return pattern_kind(pattern[static_cast<std::size_t>(layer) % pattern.size()]).value_or(attention_kind);
}

bool ModelContract::has_kind(AttentionKind k) const {
    for (std::int64_t l = 0; l < layers; ++l)
        if (layer_kind(l) == k) return true;
    return false;
}

namespace {

[[noreturn]] void fail(const std::string& field, const std::string& why) {
    throw std::invalid_argument("contract." + field + ": " + why);
}

void require_positive(const std::string& field, std::int64_t v) {
    if (v < 1) fail(field, "must be >= 1 (is " + std::to_string(v) + ")");
}

void require_finite(const std::string& field, double v, bool positive) {
    if (!std::isfinite(v) || (positive && !(v > 0)) || v < 0)
        fail(field, std::string("must be a finite ") + (positive ? "positive" : "nonnegative") + " number");
}

void require_model_format(const std::string& field, Format f) {
    if (f != Format::fp32 && f != Format::bf16 && f != Format::fp16) fail(field, "must be fp32, bf16 or fp16");
}

void check_conventions(const Conventions& conv) {
    for (const auto& [key, v] : conv) {
        const std::size_t colon = key.find(':');  // "STEP:key": scoped to one step name
        if (colon == 0 || (colon != std::string::npos && key.find_first_of(" :", colon + 1) != std::string::npos))
            fail("conventions." + key, "a scoped convention is STEP:key, e.g. o_norm:norm_cast");
        const std::string k = colon == std::string::npos ? key : key.substr(colon + 1);
        auto it = convention_values().find(k);
        if (it == convention_values().end()) fail("conventions." + key, "unknown convention");
        bool known = false;
        std::string list;
        for (const auto& a : it->second) known |= a == v, list += (list.empty() ? "" : " | ") + a;
        if (!known) fail("conventions." + key, "'" + v + "' is not one of " + list);
    }
}

// MoE MLPs: the router and expert shapes (capacity is not a model key: inference drops no token).
void validate_moe(const ModelContract& c) {
    require_positive("experts", c.experts);
    require_positive("expert_ffn", c.expert_ffn);
    if (c.top_k < 1 || c.top_k > c.experts)
        fail("top_k", "must be in [1, experts = " + std::to_string(c.experts) + "] (is " + std::to_string(c.top_k) + ")");
    if (c.shared_experts < 0) fail("shared_experts", "must be >= 0");
    if (c.shared_ffn < 0) fail("shared_ffn", "must be >= 0 (0: expert_ffn)");
    if (c.mlp_pattern.empty() || c.mlp_pattern.find_first_not_of("MD") != std::string::npos)
        fail("mlp_pattern", "must be a non-empty string of M (MoE) and D (dense SwiGLU of ffn), e.g. \"DMMM\"");
    if (c.dense_shared()) {
        const char* key = c.shared_gate ? "shared_gate" : "shared_dense";
        if (c.shared_experts != 1) fail(key, "needs shared_experts = 1 (one dense shared expert)");
        if (c.mlp != MlpKind::moe) fail(key, "needs mlp moe");
        if (c.residual_scale != 1) fail(key, "needs residual_scale 1 (the routed and shared sums add unscaled)");
    }
    if (c.mlp == MlpKind::latent_moe) require_positive("latent_dim", c.latent_dim);
    if (c.router_groups < 1 || c.experts % c.router_groups != 0 || (c.router_groups > 1 && c.experts / c.router_groups < 2))
        fail("router_groups", "must divide experts = " + std::to_string(c.experts) + " into groups of at least 2 experts (is " +
                                  std::to_string(c.router_groups) + ")");
    if (c.router_group_top != 1 && c.router_group_top != 2)
        fail("router_group_top", "must be 1 (a group's largest score) or 2 (the sum of its two largest)");
    if (c.router_topk_groups < 0 || c.router_topk_groups > c.router_groups)
        fail("router_topk_groups", "must be in [0, router_groups] (0: all groups)");
    const std::int64_t kept = (c.router_topk_groups ? c.router_topk_groups : c.router_groups) * (c.experts / c.router_groups);
    if (c.top_k > kept) fail("top_k", "exceeds the " + std::to_string(kept) + " experts of the kept groups");
    if (!(std::isfinite(c.routed_scaling) && c.routed_scaling > 0)) fail("routed_scaling", "must be finite and > 0");
}

}  // namespace

// The frequency scaling's keys (docs/model.md): values the rope op accepts.
void validate_rope_scaling(const ModelContract& c) {
    if (c.rope_scaling != "none" && c.rope_scaling != "linear" && c.rope_scaling != "llama3" && c.rope_scaling != "yarn")
        fail("rope_scaling", "must be none, linear, llama3 or yarn");
    for (const auto& [key, v] : {std::pair<const char*, double>{"rope_factor", c.rope_factor},
                                 {"rope_low_freq_factor", c.rope_low_freq_factor},
                                 {"rope_high_freq_factor", c.rope_high_freq_factor},
                                 {"rope_original_max_pos", c.rope_original_max_pos},
                                 {"rope_beta_fast", c.rope_beta_fast},
                                 {"rope_beta_slow", c.rope_beta_slow},
                                 {"rope_attention_factor", c.rope_attention_factor}})
        if (!std::isfinite(v) || !(v > 0)) fail(key, "must be finite and > 0");
    if (c.rope_scaling == "llama3" && !(c.rope_high_freq_factor > c.rope_low_freq_factor))
        fail("rope_high_freq_factor", "must be > rope_low_freq_factor for llama3");
    if (!std::isfinite(c.attention_scale) || c.attention_scale < 0)
        fail("attention_scale", "must be finite and >= 0 (0: 1/sqrt(head dim))");
    if (!std::isfinite(c.attention_softcap) || c.attention_softcap < 0)
        fail("attention_softcap", "must be finite and >= 0 (0: none)");
    if (c.attention_softcap > 0 && c.attention_kind == AttentionKind::mla)
        fail("attention_softcap", "the mla op takes no softcap (0 with attention_kind mla)");
    // The fused MLA op has no frequency scaling: the decomposed layer rotates in a rope step.
    if (c.rope_scaling != "none" && c.attention_kind == AttentionKind::mla && !c.mla_latent_norm)
        fail("rope_scaling", "needs mla_latent_norm (the decomposed MLA layer) with attention_kind mla");
}

void validate(const ModelContract& c) {
    require_positive("layers", c.layers);
    if (c.pattern != "dense" && c.pattern != "hybrid" &&
        (c.pattern.empty() || c.pattern.find_first_not_of("SGMDK") != std::string::npos))
        fail("pattern", "must be dense, hybrid or one letter per layer of S (softmax), G (gated), M (mla), D (gdn), K (kda)");
    if (c.linear_kind != AttentionKind::gdn && c.linear_kind != AttentionKind::kda) fail("linear_kind", "must be gdn or kda");
    if (c.attention_kind != AttentionKind::softmax && c.attention_kind != AttentionKind::gated &&
        c.attention_kind != AttentionKind::mla)
        fail("attention_kind", "must be softmax, gated or mla");
    if (c.has_kind(AttentionKind::mla)) {
        for (const auto& [f, v] : {std::pair<const char*, std::int64_t>{"mla_latent", c.mla_latent},
                                   {"mla_nope_dim", c.mla_nope_dim}, {"mla_v_dim", c.mla_v_dim}})
            require_positive(f, v);
        if (c.mla_rope_dim < 2 || c.mla_rope_dim % 2) fail("mla_rope_dim", "must be even and >= 2");
        if (c.mla_form != "explicit" && c.mla_form != "absorbed") fail("mla_form", "must be explicit or absorbed");
        if (c.mla_q_rank < 0) fail("mla_q_rank", "must be >= 0 (0: no low-rank query)");
        if (c.mla_q_rank > 0 && !c.mla_latent_norm)
            fail("mla_q_rank", "the low-rank query is a form of the decomposed MLA layer: it needs mla_latent_norm");
        const auto it = c.conventions.find("causal");
        if (it != c.conventions.end() && it->second == "top_left" && c.cache_tokens > 0)
            fail("conventions.causal", "mla layers take the bottom-right alignment only");
        for (std::int64_t l = 0; l < c.layers; ++l)
            if (c.layer_kind(l) == AttentionKind::mla && c.layer_window(l) > 0)
                fail("window_pattern", "layer " + std::to_string(l) +
                                           " is an mla layer marked local: mla takes no sliding window (mark it G)");
    }
    for (const auto& [f, v] : {std::pair<const char*, std::int64_t>{"width", c.width}, {"heads", c.heads},
                               {"kv_heads", c.kv_heads}, {"head_dim", c.head_dim}, {"linear_heads", c.linear_heads},
                               {"linear_head_dim", c.linear_head_dim}, {"ffn", c.ffn}, {"tokens", c.tokens}})
        require_positive(f, v);
    if (c.heads % c.kv_heads) fail("kv_heads", "must divide heads (" + std::to_string(c.heads) + ")");
    if (c.cache_tokens < 0) fail("cache_tokens", "must be >= 0");
    if (c.window < 0) fail("window", "must be >= 0 (0: no sliding window)");
    if (c.window_pattern.empty() || c.window_pattern.find_first_not_of("LG") != std::string::npos)
        fail("window_pattern", "must be a non-empty string of L (local) and G (global), e.g. \"LLLLLG\"");
    if (c.kv_cache != "full" && c.kv_cache != "rolling") fail("kv_cache", "must be full or rolling");
    if (c.kv_cache == "rolling" && c.window == 0) fail("kv_cache", "rolling needs a sliding window (window > 0)");
    if (c.short_conv < 0) fail("short_conv", "must be >= 0 (0: no short convolution)");
    if (c.quant != "none" && c.quant != "int8") fail("quant", "must be none or int8");
    if (c.quant_pattern.empty() || c.quant_pattern.find_first_not_of("QF") != std::string::npos)
        fail("quant_pattern", "must be a non-empty string of Q (INT8) and F (float), e.g. \"QQQF\"");
    if (c.quant == "int8" && (c.qkv_bias || c.o_bias))
        fail("quant", "int8 layers take no projection bias (qkv_bias, o_bias)");
    if (c.decay != "softplus" && c.decay != "lower_bounded" && c.decay != "exp_softplus")
        fail("decay", "must be softplus, lower_bounded or exp_softplus");
    if (c.linear_v_heads < 0) fail("linear_v_heads", "must be >= 0 (0: linear_heads)");
    if (c.value_heads() % c.linear_heads)
        fail("linear_v_heads", "must be a multiple of linear_heads (" + std::to_string(c.linear_heads) + ")");
    if (c.linear_gate_act != "sigmoid" && c.linear_gate_act != "silu") fail("linear_gate_act", "must be sigmoid or silu");
    if (c.l2_format != "dtype" && c.l2_format != "fp32") fail("l2_format", "must be dtype or fp32");
    if (!(c.decay_min < 0) || !std::isfinite(c.decay_min) || static_cast<double>(static_cast<float>(c.decay_min)) != c.decay_min)
        fail("decay_min", "must be a negative FP32 value (eq 1.22: -5)");
    require_finite("eps", c.eps, false);
    require_finite("rope_base", c.rope_base, true);
    if (c.rope_base <= 1) fail("rope_base", "must be > 1");
    const std::int64_t r = c.rotary_dim ? c.rotary_dim : c.head_dim;
    if (r % 2 || r < 2 || r > c.head_dim)
        fail(c.rotary_dim ? "rotary_dim" : "head_dim", "the rotary dimension must be even, in [2, head_dim]");
    validate_rope_scaling(c);
    if (c.rope_local_base != 0 && !(std::isfinite(c.rope_local_base) && c.rope_local_base > 1))
        fail("rope_local_base", "must be 0 (the layers' one base) or > 1");
    if (c.embed_scale && !c.logits) fail("embed_scale", "scales the embedding: needs logits (token ids in)");
    require_finite("situ_beta1", c.situ_beta1, true);
    require_finite("situ_beta2", c.situ_beta2, true);
    require_finite("swiglu_limit", c.swiglu_limit, true);
    require_model_format("dtype", c.dtype);
    require_model_format("residual_format", c.residual_format);
    if (!std::isfinite(c.residual_scale)) fail("residual_scale", "must be finite");
    if (c.residual == ResidualKind::attn_res || c.residual == ResidualKind::gated) {
        if (c.placement != Placement::pre) fail("residual", std::string(name(c.residual)) + " needs placement pre");
        if (c.residual_scale != 1) fail("residual_scale", std::string("must be 1 with ") + name(c.residual));
        require_positive("attn_res_block", c.attn_res_block);
        require_positive("gated_rank", c.gated_rank);
        require_positive("hc_streams", c.hc_streams);
    }
    if (c.residual == ResidualKind::mhc) {
        require_positive("hc_streams", c.hc_streams);
        if (c.placement != Placement::pre) fail("residual", "mhc needs placement pre");
        if (c.residual_scale != 1) fail("residual_scale", "must be 1 with mhc (c = 2 sigmoid(gamma) scales the branch)");
    }
    if (c.moe()) validate_moe(c);
    if (c.logits) {
        require_positive("vocab", c.vocab);
        if (c.vocab > (std::int64_t{1} << 24)) fail("vocab", "at most 2^24 (token ids are stored as exact FP32 values)");
        require_finite("logit_softcap", c.logit_softcap, false);
    }
    check_conventions(c.conventions);
    if (const auto g = c.conventions.find("glu_arith"); g != c.conventions.end() && g->second == "separate" &&
        (c.mlp == MlpKind::situ_glu || c.mlp == MlpKind::swiglu_clamp))
        fail("conventions.glu_arith", "separate is derived for SwiGLU, GeGLU (and MoE experts) only, not " +
                                          std::string(name(c.mlp)));
}

// ---- JSON ----------------------------------------------------------------

namespace {

template <class E>
E parse_enum(const std::string& field, const std::string& s, const std::vector<E>& all) {
    std::string list;
    for (E e : all) {
        if (s == name(e)) return e;
        list += (list.empty() ? "" : " | ") + std::string(name(e));
    }
    fail(field, "'" + s + "' is not one of " + list);
}

Format parse_model_format(const std::string& field, const std::string& s) {
    auto f = parse_format(s);
    if (!f) fail(field, "unknown format '" + s + "'");
    return *f;
}

const nlohmann::json& typed(const std::string& field, const nlohmann::json& v, nlohmann::json::value_t t) {
    using vt = nlohmann::json::value_t;
    const bool ok = v.type() == t || (t == vt::number_float && v.is_number()) ||
                    (t == vt::number_integer && (v.is_number_unsigned() || v.is_number_integer()));
    if (!ok) {
        const char* want = t == vt::string ? "a string" : t == vt::boolean ? "a boolean" : t == vt::object ? "an object"
                           : t == vt::number_integer                        ? "an integer" : "a number";
        fail(field, std::string("expected ") + want + ", got " + v.type_name());
    }
    return v;
}

// One JSON key: how to read it into the contract and how to write it back
// (one table for both directions, so a field cannot be read but not written).
using Reader = std::function<void(ModelContract&, const std::string&, const nlohmann::json&)>;
using Writer = std::function<nlohmann::json(const ModelContract&)>;
struct Field {
    Reader read;
    Writer write;
};

template <class T>
Writer plain(T ModelContract::*m) {
    return [m](const ModelContract& c) { return nlohmann::json(c.*m); };
}
template <class T>
Writer named(T ModelContract::*m) {
    return [m](const ModelContract& c) { return nlohmann::json(name(c.*m)); };
}

template <class T>
Field int_field(T ModelContract::*m) {
    return {[m](ModelContract& c, const std::string& f, const nlohmann::json& v) {
                c.*m = typed(f, v, nlohmann::json::value_t::number_integer).get<std::int64_t>();
            },
            plain(m)};
}
Field num_field(double ModelContract::*m) {
    return {[m](ModelContract& c, const std::string& f, const nlohmann::json& v) {
                c.*m = typed(f, v, nlohmann::json::value_t::number_float).get<double>();
            },
            plain(m)};
}
Field bool_field(bool ModelContract::*m) {
    return {[m](ModelContract& c, const std::string& f, const nlohmann::json& v) {
                c.*m = typed(f, v, nlohmann::json::value_t::boolean).get<bool>();
            },
            plain(m)};
}
std::string str(const std::string& f, const nlohmann::json& v) {
    return typed(f, v, nlohmann::json::value_t::string).get<std::string>();
}
// An enum field: its name() of one of `all`.
template <class E>
Field enum_field(E ModelContract::*m, std::vector<E> all) {
    return {[m, all = std::move(all)](ModelContract& c, const std::string& f, const nlohmann::json& v) {
                c.*m = parse_enum(f, str(f, v), all);
            },
            named(m)};
}
const std::vector<AttentionKind> kAttentionKinds{AttentionKind::softmax, AttentionKind::gated, AttentionKind::gdn,
                                                 AttentionKind::kda, AttentionKind::mla};
Field format_field(Format ModelContract::*m) {
    return {[m](ModelContract& c, const std::string& f, const nlohmann::json& v) {
                c.*m = parse_model_format(f, str(f, v));
            },
            named(m)};
}
Field string_field(std::string ModelContract::*m) {
    return {[m](ModelContract& c, const std::string& f, const nlohmann::json& v) { c.*m = str(f, v); }, plain(m)};
}
Field conventions_field() {
    return {[](ModelContract& c, const std::string& f, const nlohmann::json& v) {
                for (const auto& [k, val] : typed(f, v, nlohmann::json::value_t::object).items())
                    c.conventions[k] = str(f + "." + k, val);
            },
            plain(&ModelContract::conventions)};
}

const std::map<std::string, Field>& fields() {
    static const std::map<std::string, Field> r{
        {"layers", int_field(&ModelContract::layers)},
        {"pattern", string_field(&ModelContract::pattern)},
        {"linear_kind", enum_field(&ModelContract::linear_kind, kAttentionKinds)},
        {"attention_kind", enum_field(&ModelContract::attention_kind, kAttentionKinds)},
        {"width", int_field(&ModelContract::width)},
        {"heads", int_field(&ModelContract::heads)},
        {"kv_heads", int_field(&ModelContract::kv_heads)},
        {"head_dim", int_field(&ModelContract::head_dim)},
        {"linear_heads", int_field(&ModelContract::linear_heads)},
        {"linear_head_dim", int_field(&ModelContract::linear_head_dim)},
        {"short_conv", int_field(&ModelContract::short_conv)},
        {"linear_v_heads", int_field(&ModelContract::linear_v_heads)},
        {"linear_output_gate", bool_field(&ModelContract::linear_output_gate)},
        {"linear_gate_act", string_field(&ModelContract::linear_gate_act)},
        {"o_norm_zero_centered", {[](ModelContract& c, const std::string& f, const nlohmann::json& v) {
                                      c.o_norm_zero_centered = typed(f, v, nlohmann::json::value_t::boolean).get<bool>();
                                  },
                                  [](const ModelContract& c) { return nlohmann::json(c.o_norm_offset()); }}},
        {"decay", string_field(&ModelContract::decay)},
        {"l2_format", string_field(&ModelContract::l2_format)},
        {"decay_min", num_field(&ModelContract::decay_min)},
        {"quant", string_field(&ModelContract::quant)},
        {"quant_pattern", string_field(&ModelContract::quant_pattern)},
        {"ffn", int_field(&ModelContract::ffn)},
        {"tokens", int_field(&ModelContract::tokens)},
        {"cache_tokens", int_field(&ModelContract::cache_tokens)},
        {"window", int_field(&ModelContract::window)},
        {"mla_latent", int_field(&ModelContract::mla_latent)},
        {"mla_nope_dim", int_field(&ModelContract::mla_nope_dim)},
        {"mla_rope_dim", int_field(&ModelContract::mla_rope_dim)},
        {"mla_v_dim", int_field(&ModelContract::mla_v_dim)},
        {"mla_form", string_field(&ModelContract::mla_form)},
        {"mla_q_rank", int_field(&ModelContract::mla_q_rank)},
        {"mla_latent_norm", bool_field(&ModelContract::mla_latent_norm)},
        {"window_pattern", string_field(&ModelContract::window_pattern)},
        {"kv_cache", string_field(&ModelContract::kv_cache)},
        {"qkv_bias", bool_field(&ModelContract::qkv_bias)},
        {"o_bias", bool_field(&ModelContract::o_bias)},
        {"norm", enum_field(&ModelContract::norm, {NormKind::rms_norm, NormKind::layer_norm})},
        {"eps", num_field(&ModelContract::eps)},
        {"zero_centered", bool_field(&ModelContract::zero_centered)},
        {"placement", enum_field(&ModelContract::placement, {Placement::pre, Placement::post, Placement::sandwich})},
        {"qk_norm", bool_field(&ModelContract::qk_norm)},
        {"rope_base", num_field(&ModelContract::rope_base)},
        {"rotary_dim", int_field(&ModelContract::rotary_dim)},
        {"rope_local_base", num_field(&ModelContract::rope_local_base)},
        {"embed_scale", bool_field(&ModelContract::embed_scale)},
        {"rope_scaling", string_field(&ModelContract::rope_scaling)},
        {"rope_factor", num_field(&ModelContract::rope_factor)},
        {"rope_low_freq_factor", num_field(&ModelContract::rope_low_freq_factor)},
        {"rope_high_freq_factor", num_field(&ModelContract::rope_high_freq_factor)},
        {"rope_original_max_pos", num_field(&ModelContract::rope_original_max_pos)},
        {"rope_beta_fast", num_field(&ModelContract::rope_beta_fast)},
        {"rope_beta_slow", num_field(&ModelContract::rope_beta_slow)},
        {"rope_truncate", bool_field(&ModelContract::rope_truncate)},
        {"rope_attention_factor", num_field(&ModelContract::rope_attention_factor)},
        {"attention_scale", num_field(&ModelContract::attention_scale)},
        {"attention_softcap", num_field(&ModelContract::attention_softcap)},
        {"mlp", enum_field(&ModelContract::mlp,
                           {MlpKind::swiglu, MlpKind::situ_glu, MlpKind::gelu, MlpKind::moe, MlpKind::latent_moe,
                            MlpKind::geglu, MlpKind::swiglu_clamp})},
        {"swiglu_limit", num_field(&ModelContract::swiglu_limit)},
        {"logits", bool_field(&ModelContract::logits)},
        {"vocab", int_field(&ModelContract::vocab)},
        {"tied_embeddings", bool_field(&ModelContract::tied_embeddings)},
        {"logit_softcap", num_field(&ModelContract::logit_softcap)},
        {"experts", int_field(&ModelContract::experts)},
        {"top_k", int_field(&ModelContract::top_k)},
        {"shared_experts", int_field(&ModelContract::shared_experts)},
        {"expert_ffn", int_field(&ModelContract::expert_ffn)},
        {"shared_dense", bool_field(&ModelContract::shared_dense)},
        {"shared_gate", bool_field(&ModelContract::shared_gate)},
        {"shared_ffn", int_field(&ModelContract::shared_ffn)},
        {"mlp_pattern", string_field(&ModelContract::mlp_pattern)},
        {"router_score", enum_field(&ModelContract::router_score, {RouterScore::softmax, RouterScore::sigmoid})},
        {"renormalize", bool_field(&ModelContract::renormalize)},
        {"selection_bias", bool_field(&ModelContract::selection_bias)},
        {"router_groups", int_field(&ModelContract::router_groups)},
        {"router_topk_groups", int_field(&ModelContract::router_topk_groups)},
        {"router_group_top", int_field(&ModelContract::router_group_top)},
        {"routed_scaling", num_field(&ModelContract::routed_scaling)},
        {"latent_dim", int_field(&ModelContract::latent_dim)},
        {"normalized", bool_field(&ModelContract::normalized)},
        {"situ_beta1", num_field(&ModelContract::situ_beta1)},
        {"situ_beta2", num_field(&ModelContract::situ_beta2)},
        {"dtype", format_field(&ModelContract::dtype)},
        {"residual_scale", num_field(&ModelContract::residual_scale)},
        {"residual_format", format_field(&ModelContract::residual_format)},
        {"residual", enum_field(&ModelContract::residual,
                                {ResidualKind::plain, ResidualKind::mhc, ResidualKind::attn_res, ResidualKind::gated})},
        {"attn_res_block", int_field(&ModelContract::attn_res_block)},
        {"gated_rank", int_field(&ModelContract::gated_rank)},
        {"hc_streams", int_field(&ModelContract::hc_streams)},
        {"conventions", conventions_field()},
    };
    return r;
}

}  // namespace

ModelContract contract_from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw std::invalid_argument("contract: expected a JSON object");
    ModelContract c;
    for (const auto& [k, v] : j.items()) {
        auto it = fields().find(k);
        if (it == fields().end()) fail(k, "unknown key");
        it->second.read(c, k, v);
    }
    validate(c);
    return c;
}

nlohmann::json to_json(const ModelContract& c) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [key, field] : fields()) j[key] = field.write(c);
    return j;
}

}  // namespace conform::model
