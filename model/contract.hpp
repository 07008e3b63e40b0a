// The implementation contract of a decoder block stack (docs/diverge.md):
// everything a porter must match for two implementations of the same model to
// agree -- norm type, eps and placement, projection shapes and biases, head
// layout, positional transform, attention kind, MLP activation and gate order,
// residual scaling, accumulation format and residual kind.  Serialized as the
// `conform.contract` JSON of a model dump (model/1).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "numerics/format.hpp"

namespace conform::model {

enum class AttentionKind { softmax, gated, gdn, kda, mla };
// gelu: h = gelu(up), no gate; geglu: gelu(gate) * up (the `gelu` convention
// picks erf or tanh); swiglu_clamp: DeepSeek-V4's silu(min(gate, L)) * clamp(up, -L, L)
enum class MlpKind { swiglu, situ_glu, gelu, moe, latent_moe, geglu, swiglu_clamp };
enum class RouterScore { softmax, sigmoid };
enum class NormKind { rms_norm, layer_norm };
// pre: x + f(norm(x)); post: norm(x + f(x)); sandwich: x + norm'(f(norm(x)))
// (Gemma 2/3: a second norm on each branch's output before the add).
enum class Placement { pre, post, sandwich };
enum class ResidualKind { plain, mhc, attn_res, gated };

const char* name(AttentionKind k);
const char* name(MlpKind k);
const char* name(RouterScore s);
const char* name(NormKind k);
const char* name(Placement p);
const char* name(ResidualKind r);

// Conventions a contract declares and a dump may silently violate.  Keys and
// values (first value = default):
//   rope_pairing    half | interleaved      pair (j, j + r/2) or (2j, 2j + 1)
//   eps_placement   inside | outside        sqrt(mean x^2 + eps) or sqrt(mean x^2) + eps
//   gate_order      gate_up | up_gate       which half of the fused gate_up projection is the gate
//   gelu            erf | tanh              GELU variant of the gelu MLP (and GeGLU)
//   norm_cast       after_weight | before_weight
//                                           norm output rounded once after the weight, or
//                                           x / rms rounded to the model format first (Llama)
//   causal          bottom_right | top_left causal mask alignment when Lq != Lk (a KV cache)
//   lm_head         own | embed             the logits' weight: lm_head.weight, or the embedding
//                                           (weights tied where the contract unties them)
//   window_keys     w | w_plus_one          a sliding window sees the W keys (pos - W, pos], or
//                                           W + 1 keys [pos - W, pos] (a `j >= i - W` mask)
//   conv_padding    causal | same           the short convolution's window: the K - 1 earlier
//                                           tokens, or centred (Conv1d(padding = (K - 1) / 2))
//   logit_softcap   applied | skipped       the contract's logit softcap applied, or the raw logits
//   rolling_order   positions | slots       a rolling KV cache read oldest first (the ring
//                                           unrolled), or in its slots' order as stored
//   logits_format   fp32 | dtype            the lm_head product stored in FP32, or rounded to the
//                                           model's dtype (an lm_head in it: Hugging Face)
//   glu_arith       fused | separate        SwiGLU/GeGLU within 1 ulp, or act(gate) computed in FP32
//                                           as PyTorch does (x / (1 + exp(-x)); the tanh GELU; the
//                                           erf GELU with an erf within 2^-20), stored in the model's
//                                           format, times up rounded
//   attention_logits fp32 | dtype          attention logits in FP32, or rounded to the model's
//                                           format after every stage (the dot product, the scale,
//                                           the softcap's divide, tanh and multiply, the mask
//                                           add: eager attention in PyTorch)
//   act_arith       ulp | quotient          sigmoid and silu steps within 1 ulp, or the FP32
//                                           quotients 1 / (1 + exp(-x)), x / (1 + exp(-x)) with a
//                                           1-ulp exp (PyTorch's CPU sigmoid and silu)
//   softcap_arith   ulp | dtype             the logit softcap within 1 ulp, or c tanh(x / c) with
//                                           the divide, tanh and multiply each rounded to the
//                                           model's format (PyTorch: Gemma 2's final softcap)
// A key "STEP:key" (e.g. "o_norm:norm_cast") declares `key` for the steps
// whose point is STEP in every layer ("layers.N.STEP"), over the plain key:
// a model whose modules differ (Qwen3-Next's gated output norm casts before
// its weight, its other norms after).  step_conventions resolves them.
using Conventions = std::map<std::string, std::string>;
const std::map<std::string, std::vector<std::string>>& convention_values();
Conventions default_conventions();
struct Step;
// The conventions of step s: the plain keys, each overridden by a scoped
// "STEP:key" whose STEP is s's point within its layer; no scoped key left.
Conventions step_conventions(const Conventions& conv, const Step& s);

struct ModelContract {
    // Stack.
    std::int64_t layers = 4;
    // dense: every layer attention_kind; hybrid: 3 linear (linear_kind) : 1
    // attention_kind; or one letter per layer, repeated (layer l reads
    // pattern[l % size]): S softmax, G gated, M mla, D gdn, K kda -- e.g.
    // "KKKM" (Kimi K3's 3 KDA : 1 MLA), "SSSSSM".
    std::string pattern = "dense";
    AttentionKind linear_kind = AttentionKind::gdn;  // the linear layers of a hybrid stack
    AttentionKind attention_kind = AttentionKind::softmax;  // the full-attention layers: softmax | gated | mla
    // MLA (attention_kind mla; docs/mla.md): latent width d_c, per-head
    // content and rope query/key dims, value dim; the executor's kernel form.
    std::int64_t mla_latent = 32, mla_nope_dim = 16, mla_rope_dim = 8, mla_v_dim = 16;
    std::string mla_form = "explicit";  // explicit (prefill) | absorbed (decode)
    // DeepSeek-V2/V3's MLA (docs/mla.md, "In the model"): mla_latent_norm
    // (RMSNorm on the latent) makes an MLA layer the decomposed steps q_a,
    // q_a_norm, q, kv_a, kv_norm, kv_b, q_rope, k_rope, attn (mla_split());
    // in it a low-rank query q = W_qb RMSNorm(W_qa x) of rank mla_q_rank
    // (0: q = W_q x).  mla_q_rank > 0 requires mla_latent_norm.
    std::int64_t mla_q_rank = 0;
    bool mla_latent_norm = false;
    bool mla_split() const { return mla_latent_norm; }
    // Shapes.
    std::int64_t width = 64;  // C: hidden size
    std::int64_t heads = 4, kv_heads = 2, head_dim = 16;
    std::int64_t linear_heads = 4, linear_head_dim = 16;  // gdn/kda: d_k = d_v = linear_head_dim
    // Value heads of the linear layers (0: linear_heads).  More value heads
    // than query/key heads (Qwen3-Next's 32 : 16): value head h reads query
    // and key head h / (linear_v_heads / linear_heads), as repeat_interleave.
    std::int64_t linear_v_heads = 0;
    // The linear (gdn/kda) block's extras (docs/model.md, "Linear-attention
    // block extras"): short_conv K > 0: q, k, v pass through a depthwise
    // causal convolution of K taps and SiLU before the L2 norms (conv caches
    // of K - 1 rows with cache_tokens); linear_output_gate: o = sigmoid(x W_g)
    // * RMSNorm_head(o) before W_o (eq 1.23), with linear_gate_act silu: o =
    // silu(x W_g) * RMSNorm_head(o), the gate in FP32 and the product rounded
    // once (Qwen3-Next's gated RMSNorm); o_norm_zero_centered: its weight
    // applied as 1 + w (unset: zero_centered); decay: softplus (g =
    // -softplus(x W_g)), lower_bounded (g = decay_min sigmoid(e^A_h x W_g), eq
    // 1.22) or exp_softplus (g = -e^{A_h} softplus(x W_g + b_h), FP32:
    // Mamba-2's and Qwen3-Next's A_log and dt_bias).
    std::int64_t short_conv = 0;
    bool linear_output_gate = false;
    std::string linear_gate_act = "sigmoid";
    std::optional<bool> o_norm_zero_centered;
    std::string decay = "softplus";
    // The format of the linear layers' L2-normalized q and k: dtype, or fp32
    // (normalized in FP32 and never rounded, as Hugging Face's chunked delta
    // rule and FLA's kernels do; the delta rule then runs in FP32).
    std::string l2_format = "dtype";
    double decay_min = -5;
    // INT8 layers (docs/model.md, "INT8 layers"): quant = int8 makes every
    // projection of the layers quant_pattern marks 'Q' (layer l reads
    // pattern[l % size]; 'F' keeps a layer in the float format) a W8A8
    // product: x per token and W per output channel quantized to INT8,
    // exact integer accumulation, y = acc s_x s_w (docs/int8.md).
    std::string quant = "none";
    std::string quant_pattern = "Q";
    std::int64_t ffn = 128;                                // F: MLP hidden size
    std::int64_t tokens = 16;                              // T: model input length
    std::int64_t cache_tokens = 0;  // P > 0: attention layers see P cached keys first (Lk = P + T)
    // Sliding-window attention: window W > 0 makes the full-attention layers
    // that window_pattern marks 'L' local (layer l reads pattern[l % size]):
    // "L" every layer, "LG" alternating (gpt-oss), "LLLLLG" Gemma's 5:1.
    std::int64_t window = 0;
    std::string window_pattern = "L";
    // The KV cache of the local layers: "full" holds the P cached keys in
    // position order; "rolling" (Mistral's rolling buffer) holds the last
    // min(P, W) in a ring of W slots, position p in slot p mod W.
    std::string kv_cache = "full";
    // Internal, never in the contract's JSON: the positions of the queries
    // when an attention step is restated over sampled rows (docs/diverge.md,
    // "Scale"): query i at position query_positions[i] over the keys from 0.
    std::vector<std::int64_t> query_positions;
    bool qkv_bias = false, o_bias = false;
    // Norms.
    NormKind norm = NormKind::rms_norm;
    double eps = 1e-6;
    bool zero_centered = false;  // RMSNorm weight stored as w, applied as 1 + w
    Placement placement = Placement::pre;
    bool qk_norm = false;  // RMSNorm over head_dim of q and k before RoPE
    // Positions.
    double rope_base = 10000;
    // > 0: the layers the window pattern marks local (L) rotate with this
    // base and no frequency scaling (Gemma 3's rope_local_base_freq).
    double rope_local_base = 0;
    std::int64_t rotary_dim = 0;  // 0: the whole head_dim
    // RoPE frequency scaling (docs/rope.md, "Frequency scaling"): none,
    // linear, llama3 or yarn, with the rope op's parameters of the same names.
    std::string rope_scaling = "none";
    double rope_factor = 1, rope_low_freq_factor = 1, rope_high_freq_factor = 4, rope_original_max_pos = 8192;
    double rope_beta_fast = 32, rope_beta_slow = 1;
    bool rope_truncate = true;
    double rope_attention_factor = 1;
    // The attention's softmax scale (0: 1/sqrt(d_qk)); DeepSeek's YaRN
    // multiplies it by mscale^2.
    double attention_scale = 0;
    // The attention logits capped c tanh(s / c) after the scale, before the
    // mask (Gemma 2's attn_logit_softcapping; 0: none).
    double attention_softcap = 0;
    // MLP.
    MlpKind mlp = MlpKind::swiglu;
    double situ_beta1 = 4, situ_beta2 = 25;
    double swiglu_limit = 10;  // swiglu_clamp's L
    // MoE MLPs (mlp: moe | latent_moe; docs/moe.md, "In the model"): the
    // router's top_k of `experts` SwiGLU experts of hidden size expert_ffn
    // each, plus `shared_experts` always-on experts of the same size.
    std::int64_t experts = 8, top_k = 2, shared_experts = 1, expert_ffn = 32;
    // shared_dense: the shared expert is a separate dense SwiGLU of hidden
    // size shared_ffn (0: expert_ffn), added to the routed sum in the model's
    // format (DeepSeek-V2/V3's n_shared_experts as one MLP); shared_gate:
    // such a one scaled by sigmoid(x w_sg), w_sg [1, C] (Qwen3-Next, Qwen2-MoE).
    bool shared_dense = false, shared_gate = false;
    std::int64_t shared_ffn = 0;
    // Which layers of a MoE stack are MoE (layer l reads mlp_pattern[l %
    // size]): 'M' MoE, 'D' a dense SwiGLU of `ffn` (DeepSeek's first dense
    // layers, Qwen-MoE's mlp_only_layers, a decoder_sparse_step).
    std::string mlp_pattern = "M";
    RouterScore router_score = RouterScore::softmax;
    bool renormalize = true;      // weights over the k chosen (or the raw scores)
    bool selection_bias = false;  // DeepSeek-V3's aux-loss-free bias: chooses, never weighs
    // DeepSeek-V3's group-limited routing and routed scaling (moe_router's
    // groups, topk_groups (0: all), scaling; docs/moe.md).
    std::int64_t router_groups = 1, router_topk_groups = 0;
    std::int64_t router_group_top = 2;  // a group's score: its 2 largest summed (V3) or its largest (1, V2)
    double routed_scaling = 1;
    std::int64_t latent_dim = 32; // latent_moe: the routed experts' width L
    bool normalized = true;       // latent_moe: RMSNorm(u) before latent_up (eps: the contract's)
    // Formats: weights, activations and every point of the model are stored in
    // `dtype`; kernels accumulate in FP32.
    Format dtype = Format::fp32;
    // Ends (logits: true): the model input is token ids [T] (FP32 values);
    // point embed = rows of embed.weight [V, C]; after the last layer
    // final_norm, then logits [T, V] in FP32 = final_norm lm_head^T
    // (embed.weight when tied), softcapped as cap tanh(x / cap) when cap > 0.
    bool logits = false;
    std::int64_t vocab = 256;
    bool tied_embeddings = false;
    double logit_softcap = 0;
    // Gemma: embed_scaled = embed * embed_scale (weight [1], sqrt(C) stored in
    // dtype), the first layer's input.
    bool embed_scale = false;
    // Residual.
    double residual_scale = 1;  // x + s * branch
    Format residual_format = Format::fp32;  // the residual stream's accumulation/storage format
    ResidualKind residual = ResidualKind::plain;
    std::int64_t hc_streams = 4;  // mHC and gated: n parallel residual streams
    // residual attn_res (Block Attention Residuals, seed 001 eqs 6.6-6.7): each
    // sub-layer's input is op block_attn_res over the block representations
    // (the model input, then the sum of each completed block's sub-layer
    // outputs, then the current block's partial sum); a block is
    // attn_res_block layers.  residual gated (Gated Residual, eq 6.8): n =
    // hc_streams streams, each sub-layer reads op gated_residual (rank
    // gated_rank) and writes f to stream i with the scalar gate sigmoid(s_i).
    std::int64_t attn_res_block = 2, gated_rank = 8;
    // Declared conventions (defaults filled in).
    Conventions conventions = default_conventions();

    AttentionKind layer_kind(std::int64_t layer) const;  // hybrid: layer % 4 == 3 is full attention
    bool has_kind(AttentionKind k) const;                // some layer is of kind k
    bool moe() const { return mlp == MlpKind::moe || mlp == MlpKind::latent_moe; }
    bool moe_layer(std::int64_t layer) const;  // moe() and mlp_pattern marks the layer 'M'
    bool dense_shared() const { return shared_dense || shared_gate; }  // the shared expert as its own steps
    std::int64_t layer_window(std::int64_t layer) const;  // W on a local layer, 0 on a global one
    std::int64_t cache_rows(std::int64_t layer) const;    // rows of the layer's KV cache: P, or min(P, W) rolling
    bool int8_layer(std::int64_t layer) const;  // quant = int8 and the pattern marks the layer 'Q'
    std::int64_t value_heads() const { return linear_v_heads > 0 ? linear_v_heads : linear_heads; }
    bool o_norm_offset() const { return o_norm_zero_centered.value_or(zero_centered); }
};

// std::invalid_argument naming the field ("contract.heads: must divide ...").
void validate(const ModelContract& c);
ModelContract contract_from_json(const nlohmann::json& j);  // unknown keys are errors
nlohmann::json to_json(const ModelContract& c);

}  // namespace conform::model
