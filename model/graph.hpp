// The block stack as a list of steps (docs/diverge.md): each step computes one
// named point from earlier points, weights and caches with one operation whose
// local error budget is derived on its own (oracle/bound.hpp and the matmul
// bound of docs/diverge.md).  The oracle tier, the kernel executor, the
// divergence analysis and model dumps all walk this one list.
//
// Point names: "input" (the model input [T, C]), then per layer l
// "layers.<l>.<name>".  Every point is stored as [T, features] (mHC streams:
// [n, T, C]).  The points the issue names for every layer are `required`:
//   input (block input), attn_norm, attn_out, mid, mlp_norm, mlp_out, output
// (post-norm: the norms are mid and output themselves).  Finer points (q, k,
// v, q_rope, attn, gate_up, h, ...) make every step checkable on its own.
// Weights are named "layers.<l>.<name>.weight" / ".bias"; caches
// "layers.<l>.cache.k" / ".cache.v" / ".cache.state".
//
// The block input of layer l is the point "layers.<l-1>.output" ("input" for
// layer 0): there is no separate copy.  Per layer, in graph order (docs/model.md
// has the full list): pre-norm  attn_norm, q, k, v[, q_norm, k_norm], q_rope,
// k_rope, attn[, gate, gate_sig, attn_gated], attn_out, mid, mlp_norm,
// gate_up | up, h, mlp_out, output;  gdn/kda layers  q, k, v, q_l2, k_l2,
// g_logit, g, b_logit, beta, attn;  post-norm  attn_add (the sum) then mid =
// norm(attn_add), mlp_add then output = norm(mlp_add) (no attn_norm/mlp_norm
// points);  mHC  attn_mix (hc_mix of the streams) before attn_norm, attn_hc_b
// (sinkhorn) before mid = hc_update, the same for mlp, and in the last layer
// streams = hc_update and output = the stream mean (hc_mix without weights).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "model/contract.hpp"

namespace conform::model {

enum class StepKind {
    norm,        // rms_norm / layer_norm over C: in {x}, weights {w[, b]}
    head_norm,   // rms_norm over head_dim of each head (QK-norm): in {x}, {w}; `heads`
    l2_head,     // l2_norm over the head dim of each head (gdn/kda q, k): in {x}; `heads`
    matmul,      // y = x W^T (+ b): in {x}, weights {W [out, in][, b [out]]}
    rope,        // RoPE of [T, heads * head_dim]; positions start at cache_tokens
    attention,   // causal softmax attention, GQA: in {q, k, v}[ + cache k, v]; out [T, Hq * D]
    sigmoid,     // elementwise
    log_decay,   // g = -softplus(x): the delta rule's log-decay
    mul,         // elementwise a * b; b [T, 1] scales row t of a (mul_index)
    glu,         // in {gate_up [T, 2F]}: swiglu / situ_glu of the halves (gate_order)
    gelu,        // in {up [T, F]}: gelu (erf | tanh)
    gdn,         // in {q, k, v, g [T, H], beta [T, H]}[ + cache state]
    kda,         // in {q, k, v, g [T, H * d_k], beta [T, H]}[ + cache state]
    add,         // residual: a + residual_scale * b, stored in residual_format
    hc_mix,      // mHC: branch input sum_i a_i X_i, a = sigmoid(alpha): in {X [n, T, C]}, {alpha [n]};
                 //      no weight: a_i = 1/n (the stream mean, the model's output)
    hc_update,   // mHC: X' = B X + c (x) f, c = 2 sigmoid(gamma): in {X, f, B}, {gamma [n]}
    sinkhorn,    // mHC: B = sinkhorn(logits [n, n]): in {}, weights {logits}
    mla,         // multi-head latent attention (op mla): in {x[, cache c_kv, cache k_r]}, weights {w_dkv, w_uk,
                 //      w_uv, w_q, w_kr}; out [T, H * d_v] before W_o
    embed,       // logits: rows of embed.weight [V, C] by the token ids of "input" [T] (exact copies)
    softcap,     // logits: cap tanh(x / cap), elementwise
    router,      // MoE: moe_router of x: in {x}, weights {router [C, E][, bias [E]]}; the point [T, 2k]
                 //      holds each token's k expert ids, then their k weights (FP32)
    moe,         // MoE: the routed experts on the router point's selection: in {x, router}; weights: every
                 //      weight of the layer (the registry op's inputs).  moe: y with the shared experts;
                 //      latent_moe: u [T, L], their weighted sum in the latent space
    latent_out,  // latent_moe: y = shared(x) + RMSNorm(u) latent_up (or u latent_up): in {x, u}, the layer's weights
    short_conv,  // linear block: depthwise causal convolution over tokens: in {x[, cache [K-1, F]]}, {w [F, K]}
    silu,        // elementwise x sigmoid(x) (after the short convolution)
    bounded_decay,  // g = decay_min sigmoid(e^A_h z): in {z}, {A [H]}; `heads`
    softplus_decay, // g = -e^A_h softplus(z + b_h), FP32: in {z}, {A [H], b [H]}; `heads`
    int8_matmul,    // a projection of an INT8 layer: y = x W^T as W8A8 (quant = int8): in {x}, {W [out, in]}
    attn_res,       // residual attn_res: op block_attn_res over the sources: in {v_0, ..., v_{N-1}} ([T, C] each),
                    //      {query [C], key_norm [C]}
    gated_read,     // residual gated: op gated_residual of the streams: in {X [n, T, C]}, {norm [n, C], down [n C, r],
                    //      up [r, n C]}
    gated_write,    // residual gated: X'_i = X_i + sigmoid(s_i) f: in {X, f}, {s [n]}
    // mHC: an X of shape [T, C] (the model input) is n copies of itself.
};
const char* name(StepKind k);
struct Step;
// Whether step s is a linear layer's output-gate norm (o_norm_zero_centered).
bool is_o_norm(const Step& s);
// Whether step s, a norm, applies its weight as 1 + w.
bool norm_offset(const ModelContract& c, const Step& s);
// The element of mul's second input that multiplies element i of the first
// (n_a, n_b elements): itself, or its row's scale when b is [T, 1].
inline std::int64_t mul_index(std::int64_t i, std::int64_t n_a, std::int64_t n_b) { return n_a == n_b ? i : i / (n_a / n_b); }
std::optional<StepKind> step_kind_from_name(const std::string& n);  // name()'s inverse
// Whether step s is the attention of a decomposed MLA layer (mla_split()):
// inputs {q, q_rope, kv_b, k_rope}, the queries [q_nope | q_rope] and keys
// [k_nope | k_rope] assembled per head by op_call (model/layout.hpp).
bool is_mla_split_attention(const ModelContract& c, const Step& s);

struct Step {
    std::string point;                 // the point it computes, e.g. "layers.3.q"
    std::int64_t layer = -1;           // -1: model level
    std::string sublayer;              // "attn" or "mlp" (the half of the block it belongs to)
    StepKind kind = StepKind::matmul;
    std::vector<std::string> inputs;   // point or cache names, in the kind's order
    std::vector<std::string> weights;  // weight names, in the kind's order
    std::int64_t heads = 0;            // head_norm, l2_head, rope: heads of the layout
    // head_norm, rope: the step reads columns [in_offset, in_offset + w) of
    // each of the `heads` equal groups of input 0, w = the point's features /
    // heads (all of them when the widths agree).  DeepSeek's MLA: the rope
    // part of each query head, the latent and the rope key of kv_a.
    std::int64_t in_offset = 0;
    bool required = false;             // one of the points every dump must hold
    std::vector<std::int64_t> shape;   // the point's shape ([T, features]; mHC streams [n, T, C]; B [n, n])
    Format format = Format::fp32;      // its storage format: residual_format for add / hc_update
                                       // (and the final stream mean), c.dtype otherwise
};

// Every step of the stack, in execution order (a step's inputs come before it).
std::vector<Step> build_graph(const ModelContract& c);

// Layers [first, end) of a stack (docs/diverge.md, "Splitting a deep model").
struct LayerRange {
    std::int64_t first = 0, end = 0;
    bool operator==(const LayerRange&) const = default;
};
// "A:B", "A:" (to the last layer), ":B", or "A" (one layer), 0-based, end
// excluded; std::invalid_argument saying why unless 0 <= A < B <= layers.
LayerRange parse_layer_range(const std::string& text, std::int64_t layers);
// The steps of the range, in graph order: the embedding (counted with layer
// 0) goes with a range that starts at 0, the head (final norm, lm_head,
// counted as layer `layers`) with one that ends at the last layer.
std::vector<Step> steps_in_range(const std::vector<Step>& graph, const LayerRange& r, std::int64_t layers);
// The points the steps read that no step of the list computes and that are
// not weights or caches (`is_weight`): a range's inputs from earlier layers.
// The index of the last step of `steps` that reads each point, weight or
// cache (or, for a point no step reads, the step that computes it): what a
// streamed run holds until then and may drop after.
std::map<std::string, std::size_t> last_uses(const std::vector<Step>& steps);
std::vector<std::string> outside_inputs(const std::vector<Step>& steps,
                                        const std::function<bool(const std::string&)>& is_weight);

struct WeightSpec {
    std::string name;
    std::vector<std::int64_t> shape;
};
std::vector<WeightSpec> weight_specs(const ModelContract& c);  // weights and caches, in name order
std::vector<std::int64_t> point_shape(const ModelContract& c, const Step& s);  // s.shape
Format point_format(const ModelContract& c, const Step& s);                     // s.format
// The block input of layer l: "input" (or "embed" with logits) or "layers.<l-1>.output".
std::string block_input(const ModelContract& c, std::int64_t layer);
// The lm_head product's step (the point logits, or logits_raw under a
// softcap) and its format under conventions conv: FP32, or the model's dtype
// under logits_format = dtype (docs/model.md).
bool is_logits_product(const Step& s);
Format logits_product_format(const ModelContract& c, const Conventions& conv);

}  // namespace conform::model
