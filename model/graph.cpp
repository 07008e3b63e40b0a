#include "model/graph.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

namespace conform::model {

const char* name(StepKind k) {
    switch (k) {
        case StepKind::norm: return "norm";
        case StepKind::head_norm: return "head_norm";
        case StepKind::l2_head: return "l2_head";
        case StepKind::matmul: return "matmul";
        case StepKind::rope: return "rope";
        case StepKind::attention: return "attention";
        case StepKind::sigmoid: return "sigmoid";
        case StepKind::log_decay: return "log_decay";
        case StepKind::mul: return "mul";
        case StepKind::glu: return "glu";
        case StepKind::gelu: return "gelu";
        case StepKind::gdn: return "gdn";
        case StepKind::kda: return "kda";
        case StepKind::add: return "add";
        case StepKind::hc_mix: return "hc_mix";
        case StepKind::hc_update: return "hc_update";
        case StepKind::sinkhorn: return "sinkhorn";
        case StepKind::mla: return "mla";
        case StepKind::embed: return "embed";
        case StepKind::softcap: return "softcap";
        case StepKind::router: return "router";
        case StepKind::moe: return "moe";
        case StepKind::latent_out: return "latent_out";
        case StepKind::short_conv: return "short_conv";
        case StepKind::silu: return "silu";
        case StepKind::bounded_decay: return "bounded_decay";
        case StepKind::softplus_decay: return "softplus_decay";
        case StepKind::int8_matmul: return "int8_matmul";
        case StepKind::attn_res: return "attn_res";
        case StepKind::gated_read: return "gated_read";
        case StepKind::gated_write: return "gated_write";
    }
    return "?";
}

std::optional<StepKind> step_kind_from_name(const std::string& n) {
    for (int k = 0; k <= static_cast<int>(StepKind::gated_write); ++k)
        if (n == name(static_cast<StepKind>(k))) return static_cast<StepKind>(k);
    return std::nullopt;
}

bool is_o_norm(const Step& s) {
    const std::string tail = ".o_norm";
    return s.kind == StepKind::head_norm && s.point.size() > tail.size() &&
           s.point.compare(s.point.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_mla_split_attention(const ModelContract& c, const Step& s) {
    return s.kind == StepKind::attention && s.layer >= 0 && s.layer < c.layers && c.layer_kind(s.layer) == AttentionKind::mla &&
           c.mla_split();
}

bool norm_offset(const ModelContract& c, const Step& s) { return is_o_norm(s) ? c.o_norm_offset() : c.zero_centered; }

Conventions step_conventions(const Conventions& conv, const Step& s) {
    // The point within its layer: "layers.3.o_norm" -> "o_norm".
    std::string local = s.point;
    if (s.layer >= 0 && local.rfind("layers.", 0) == 0) local = local.substr(local.find('.', 7) + 1);
    Conventions out;
    for (const auto& [k, v] : conv)
        if (k.find(':') == std::string::npos) out.emplace(k, v);
    for (const auto& [k, v] : conv) {
        const std::size_t colon = k.find(':');
        if (colon != std::string::npos && k.compare(0, colon, local) == 0 && colon == local.size()) out[k.substr(colon + 1)] = v;
    }
    return out;
}

std::string block_input(const ModelContract& c, std::int64_t layer) {
    if (layer == 0) return c.logits ? (c.embed_scale ? "embed_scaled" : "embed") : "input";
    return "layers." + std::to_string(layer - 1) + ".output";
}

namespace {

using Shape = std::vector<std::int64_t>;

// Builds the step list of one contract, and the weights (with shapes) the
// steps read.  Each add_* appends steps of one layer in execution order.
class Builder {
public:
    explicit Builder(const ModelContract& c) : c_(c), T_(c.tokens), C_(c.width) {}

    void build() {
        if (c_.logits) embed();
        if (attn_res()) sources_ = {block_input(c_, 0)};
        for (std::int64_t l = 0; l < c_.layers; ++l) layer(l);
        if (c_.logits) head();
    }
    std::vector<Step> steps;
    std::map<std::string, Shape> weights;

private:
    const ModelContract& c_;
    std::int64_t T_, C_;
    std::int64_t layer_ = 0;
    std::string sub_;

    bool model_level_ = false;  // the ends' points and weights have no layer prefix

    std::string p(const std::string& n) const { return model_level_ ? n : "layers." + std::to_string(layer_) + "." + n; }

    // The embedding lookup, counted with layer 0 (sublayer "embed").
    void embed() {
        layer_ = 0, sub_ = "embed", model_level_ = true;
        step("embed", StepKind::embed, {"input"}, {{"embed.weight", {c_.vocab, C_}}}, {T_, C_}, true);
        if (c_.embed_scale) {  // Gemma: rows times sqrt(C) stored in dtype, rounded once
            weights["embed_scale"] = {1};
            step("embed_scaled", StepKind::mul, {"embed", "embed_scale"}, {}, {T_, C_}, true);
        }
        model_level_ = false;
    }

    // The final norm and the FP32 logits, as one more "layer" (sublayer "head").
    void head() {
        layer_ = c_.layers, sub_ = "head", model_level_ = true;
        const std::string in = attn_res() ? "layers." + std::to_string(c_.layers - 1) + ".final_res" : block_input(c_, c_.layers);
        const std::string n = norm("final_norm", in, "final_norm", true);
        const bool cap = c_.logit_softcap > 0;
        const std::string y = matmul(cap ? "logits_raw" : "logits", n, c_.tied_embeddings ? "embed" : "lm_head", c_.vocab, C_,
                                     false, !cap);
        step_format(logits_product_format(c_, c_.conventions));  // FP32, or the dtype (logits_format)
        if (cap) {
            step("logits", StepKind::softcap, {y}, {}, {T_, c_.vocab}, true);
            step_format(Format::fp32);
        }
        model_level_ = false;
    }

    // Appends a step; returns its point name.
    std::string step(const std::string& point, StepKind kind, std::vector<std::string> in,
                     std::vector<std::pair<std::string, Shape>> w, Shape shape, bool required = false,
                     std::int64_t heads = 0, bool residual = false) {
        Step s;
        s.point = p(point);
        s.layer = layer_;
        s.sublayer = sub_;
        s.kind = kind;
        s.inputs = std::move(in);
        for (auto& [n, sh] : w) {
            s.weights.push_back(p(n));
            weights[p(n)] = sh;
        }
        s.heads = heads;
        s.required = required;
        s.shape = std::move(shape);
        s.format = residual ? c_.residual_format : c_.dtype;
        steps.push_back(std::move(s));
        return steps.back().point;
    }

    std::string matmul(const std::string& point, const std::string& x, const std::string& w, std::int64_t out,
                       std::int64_t in, bool bias, bool required = false) {
        std::vector<std::pair<std::string, Shape>> ws{{w + ".weight", {out, in}}};
        if (bias) ws.push_back({w + ".bias", {out}});
        const bool int8 = !model_level_ && c_.int8_layer(layer_);
        return step(point, int8 ? StepKind::int8_matmul : StepKind::matmul, {x}, ws, {T_, out}, required);
    }

    std::string norm(const std::string& point, const std::string& x, const std::string& w, bool required) {
        std::vector<std::pair<std::string, Shape>> ws{{w + ".weight", {C_}}};
        if (c_.norm == NormKind::layer_norm) ws.push_back({w + ".bias", {C_}});
        return step(point, StepKind::norm, {x}, ws, {T_, C_}, required);
    }

    bool mhc() const { return c_.residual == ResidualKind::mhc; }
    bool gated() const { return c_.residual == ResidualKind::gated; }
    bool attn_res() const { return c_.residual == ResidualKind::attn_res; }

    // Block AttnRes: the block representations so far, and the current
    // block's partial sum of sub-layer outputs ("" at a block start).
    std::vector<std::string> sources_;
    std::string partial_;

    // op block_attn_res over the sources and the partial sum.
    std::string res_read(const std::string& name) {
        std::vector<std::string> src = sources_;
        if (!partial_.empty()) src.push_back(partial_);
        return step(name, StepKind::attn_res, src, {{name + ".query", {C_}}, {name + ".key_norm", {C_}}}, {T_, C_});
    }
    Shape streams() const { return {c_.hc_streams, T_, C_}; }

    // The residual update of one sub-layer: plain add (pre or post norm) or
    // mHC; returns the point that the next sub-layer reads.
    std::string residual(const std::string& x, const std::string& f, const std::string& point, bool last) {
        const std::string norm_w = sub_ + "_norm";
        if (gated()) {
            const std::vector<std::pair<std::string, Shape>> s{{sub_ + "_gr.write", {c_.hc_streams}}};
            if (!last) return step(point, StepKind::gated_write, {x, f}, s, streams(), true, 0, true);
            const std::string st = step("streams", StepKind::gated_write, {x, f}, s, streams(), false, 0, true);
            return step(point, StepKind::hc_mix, {st}, {}, {T_, C_}, true, 0, true);
        }
        if (attn_res()) {  // the sub-layer's output joins the current block's partial sum
            partial_ = partial_.empty() ? f : step(point, StepKind::add, {partial_, f}, {}, {T_, C_}, true, 0, true);
            return partial_;
        }
        if (mhc()) {
            const std::int64_t n = c_.hc_streams;
            const std::string b = step(sub_ + "_hc_b", StepKind::sinkhorn, {}, {{sub_ + "_hc.logits", {n, n}}}, {n, n});
            if (!last) return step(point, StepKind::hc_update, {x, f, b}, {{sub_ + "_hc.gamma", {n}}}, streams(), true,
                                   0, true);
            const std::string s = step("streams", StepKind::hc_update, {x, f, b}, {{sub_ + "_hc.gamma", {n}}}, streams(),
                                       false, 0, true);
            return step(point, StepKind::hc_mix, {s}, {}, {T_, C_}, true, 0, true);
        }
        if (c_.placement == Placement::pre) return step(point, StepKind::add, {x, f}, {}, {T_, C_}, true, 0, true);
        if (c_.placement == Placement::sandwich) {  // the branch's output normalized before the add
            const std::string n = norm(sub_ + "_post_norm", f, sub_ + "_post_norm", false);
            return step(point, StepKind::add, {x, n}, {}, {T_, C_}, true, 0, true);
        }
        const std::string sum = step(sub_ + "_add", StepKind::add, {x, f}, {}, {T_, C_}, false, 0, true);
        return norm(point, sum, norm_w, true);
    }

    // The sub-layer's input: the norm (pre), the block input itself (post),
    // the norm of the stream mix (mHC).
    std::string branch_input(const std::string& x) {
        if (c_.placement == Placement::post) return x;
        std::string in = x;
        if (mhc()) in = step(sub_ + "_mix", StepKind::hc_mix, {x}, {{sub_ + "_hc.alpha", {c_.hc_streams}}}, {T_, C_});
        if (gated()) {
            const std::int64_t n = c_.hc_streams, nc = n * C_, r = c_.gated_rank;
            in = step(sub_ + "_read", StepKind::gated_read, {x},
                      {{sub_ + "_gr.norm", {n, C_}}, {sub_ + "_gr.down", {nc, r}}, {sub_ + "_gr.up", {r, nc}}}, {T_, C_});
        }
        if (attn_res()) in = res_read(sub_ + "_res");
        return norm(sub_ + "_norm", in, sub_ + "_norm", true);
    }

    void layer(std::int64_t l) {
        layer_ = l;
        const bool last = l + 1 == c_.layers;
        sub_ = "attn";
        const std::string x = block_input(c_, l);
        const std::string a = branch_input(x);
        const AttentionKind kind = c_.layer_kind(l);
        const std::string o = (kind == AttentionKind::gdn || kind == AttentionKind::kda) ? linear_attention(a, kind)
                                                                                          : softmax_attention(a, kind);
        const std::string mid = residual(x, o, "mid", false);
        sub_ = "mlp";
        const std::string m = branch_input(mid);
        residual(mid, mlp(m), "output", last);
        if (!attn_res()) return;
        if ((l + 1) % c_.attn_res_block == 0 || last) sources_.push_back(partial_), partial_.clear();
        if (last) res_read("final_res");  // the model's output: every block representation read once more
    }

    // q, k, v projections with the contract's qkv bias.
    void qkv(const std::string& x, std::int64_t hq, std::int64_t hkv, std::int64_t dk, std::int64_t dv) {
        matmul("q", x, "q", hq * dk, C_, c_.qkv_bias);
        matmul("k", x, "k", hkv * dk, C_, c_.qkv_bias);
        if (dv > 0) matmul("v", x, "v", hkv * dv, C_, c_.qkv_bias);
    }

    // MLA (docs/mla.md): the op's weights as its own layouts; the latent
    // and rotated rope-key caches [P, d_c], [P, d_r].
    std::string mla_attention(const std::string& x) {
        if (c_.mla_split()) return mla_split_attention(x);
        const std::int64_t H = c_.heads, dc = c_.mla_latent, dn = c_.mla_nope_dim, dr = c_.mla_rope_dim,
                           dv = c_.mla_v_dim, P = c_.cache_tokens;
        std::vector<std::string> in{x};
        if (P > 0) {
            in.push_back(p("cache.c_kv"));
            in.push_back(p("cache.k_r"));
            weights[p("cache.c_kv")] = {P, dc};
            weights[p("cache.k_r")] = {P, dr};
        }
        const std::string attn = step("attn", StepKind::mla, in,
                                      {{"mla.w_dkv.weight", {dc, C_}}, {"mla.w_uk.weight", {H, dn, dc}},
                                       {"mla.w_uv.weight", {H, dv, dc}}, {"mla.w_q.weight", {H, dn + dr, C_}},
                                       {"mla.w_kr.weight", {dr, C_}}},
                                      {T_, H * dv}, false, H);
        return matmul("attn_out", attn, "o", C_, H * dv, c_.o_bias, true);
    }

    // DeepSeek-V2/V3's MLA as Hugging Face's DeepseekV3Attention computes it
    // (docs/mla.md, "In the model"), one point per module output:
    //   q_a = x W_qa^T, q_a_norm = RMSNorm(q_a), q = q_a_norm W_qb^T   (mla_q_rank > 0)
    //   q = x W_q^T                                                     (mla_q_rank = 0)
    //   kv_a = x W_kva^T [T, d_c + d_r]  (kv_a_proj_with_mqa: [c_raw | k_rot] per token)
    //   kv_norm = RMSNorm(kv_a[:, :d_c]) [T, d_c]  (the latent the cache would hold)
    //   kv_b = kv_norm W_kvb^T [T, H (d_nope + d_v)]  (per head [k_nope | v])
    //   q_rope = RoPE(q's last d_r of each head) [T, H d_r], k_rope = RoPE(kv_a[:, d_c:]) [T, d_r]
    //   attn = attention(Q = [q_nope | q_rope], K = [k_nope | k_rope (every head)], V = v),
    //          scale (d_nope + d_r)^-1/2; then attn_out = attn W_o^T.
    // With P cached tokens (caches c_kv [P, d_c] = their kv_norm, k_r [P, d_r]
    // rotated) kv_b_cache = c_kv W_kvb^T [P, H (d_nope + d_v)] and the keys
    // and values are the cached rows, then the new ones.
    std::string mla_split_attention(const std::string& x) {
        const std::int64_t H = c_.heads, dc = c_.mla_latent, dn = c_.mla_nope_dim, dr = c_.mla_rope_dim,
                           dv = c_.mla_v_dim, R = c_.mla_q_rank, dq = dn + dr, P = c_.cache_tokens;
        std::string q;
        if (R > 0) {
            const std::string qa = matmul("q_a", x, "q_a", R, C_, c_.qkv_bias);
            const std::string qn = step("q_a_norm", StepKind::head_norm, {qa}, {{"q_a_norm.weight", {R}}}, {T_, R}, false, 1);
            q = matmul("q", qn, "q_b", H * dq, R, false);
        } else {
            q = matmul("q", x, "q", H * dq, C_, false);
        }
        const std::string kva = matmul("kv_a", x, "kv_a", dc + dr, C_, c_.qkv_bias);
        const std::string latent = step("kv_norm", StepKind::head_norm, {kva}, {{"kv_norm.weight", {dc}}}, {T_, dc}, false, 1);
        const std::string kvb = matmul("kv_b", latent, "kv_b", H * (dn + dv), dc, false);
        const std::string qr = step("q_rope", StepKind::rope, {q}, {}, {T_, H * dr}, false, H);
        steps.back().in_offset = dn;
        const std::string kr = step("k_rope", StepKind::rope, {kva}, {}, {T_, dr}, false, 1);
        steps.back().in_offset = dc;
        std::vector<std::string> in{q, qr, kvb, kr};
        if (P > 0) {  // the cache holds the normalized latents and the rotated rope keys, as Hugging Face's
            weights[p("cache.c_kv")] = {P, dc};
            weights[p("cache.k_r")] = {P, dr};
            in.push_back(matmul("kv_b_cache", p("cache.c_kv"), "kv_b", H * (dn + dv), dc, false));
            steps.back().shape[0] = P;  // kv_b of the cached tokens: [P, H (d_nope + d_v)]
            in.push_back(p("cache.k_r"));
        }
        const std::string attn = step("attn", StepKind::attention, in, {}, {T_, H * dv}, false, H);
        return matmul("attn_out", attn, "o", C_, H * dv, c_.o_bias, true);
    }

    std::string softmax_attention(const std::string& x, AttentionKind kind) {
        if (kind == AttentionKind::mla) return mla_attention(x);
        const std::int64_t H = c_.heads, G = c_.kv_heads, D = c_.head_dim, P = c_.cache_tokens;
        qkv(x, H, G, D, D);
        std::string q = p("q"), k = p("k");
        if (c_.qk_norm) {
            q = step("q_norm", StepKind::head_norm, {q}, {{"q_norm.weight", {D}}}, {T_, H * D}, false, H);
            k = step("k_norm", StepKind::head_norm, {k}, {{"k_norm.weight", {D}}}, {T_, G * D}, false, G);
        }
        q = step("q_rope", StepKind::rope, {q}, {}, {T_, H * D}, false, H);
        k = step("k_rope", StepKind::rope, {k}, {}, {T_, G * D}, false, G);
        std::vector<std::string> in{q, k, p("v")};
        if (P > 0) {
            in.push_back(p("cache.k"));
            in.push_back(p("cache.v"));
            weights[p("cache.k")] = weights[p("cache.v")] = {c_.cache_rows(layer_), G * D};
        }
        std::string attn = step("attn", StepKind::attention, in, {}, {T_, H * D}, false, H);
        if (kind == AttentionKind::gated) {
            const std::string g = matmul("gate", x, "gate", H * D, C_, false);
            const std::string s = step("gate_sig", StepKind::sigmoid, {g}, {}, {T_, H * D});
            attn = step("attn_gated", StepKind::mul, {attn, s}, {}, {T_, H * D});
        }
        return matmul("attn_out", attn, "o", C_, H * D, c_.o_bias, true);
    }

    // The short convolution and SiLU of one projection (docs/model.md,
    // "Linear-attention block extras"); its cache holds the K - 1 earlier inputs.
    std::string short_conv(const std::string& name, std::int64_t F) {
        const std::int64_t K = c_.short_conv;
        std::vector<std::string> in{p(name)};
        if (c_.cache_tokens > 0 && K > 1) {
            in.push_back(p("cache." + name + "_conv"));
            weights[p("cache." + name + "_conv")] = {K - 1, F};
        }
        const std::string y = step(name + "_conv", StepKind::short_conv, in, {{name + "_conv.weight", {F, K}}}, {T_, F});
        return step(name + "_act", StepKind::silu, {y}, {}, {T_, F});
    }

    // The decay of the contract's parameterization (per value head, or per
    // key channel of it for KDA).
    std::string decay(std::int64_t Hv, std::int64_t gw) {
        if (c_.decay == "lower_bounded")
            return step("g", StepKind::bounded_decay, {p("g_logit")}, {{"decay_a.weight", {Hv}}}, {T_, gw}, false, Hv);
        if (c_.decay == "softplus") return step("g", StepKind::log_decay, {p("g_logit")}, {}, {T_, gw});
        const std::string g = step("g", StepKind::softplus_decay, {p("g_logit")},
                                   {{"decay_a.weight", {Hv}}, {"decay_dt.bias", {Hv}}}, {T_, gw}, false, Hv);
        step_format(Format::fp32);
        return g;
    }

    // q, k: linear_heads H; v, the decay, beta, the state and the output:
    // value heads Hv (a multiple of H; the delta-rule step repeats q and k).
    std::string linear_attention(const std::string& x, AttentionKind kind) {
        const std::int64_t H = c_.linear_heads, Hv = c_.value_heads(), d = c_.linear_head_dim;
        const std::int64_t gw = kind == AttentionKind::kda ? Hv * d : Hv;  // decay per head or per key channel
        qkv(x, H, H, d, 0);
        matmul("v", x, "v", Hv * d, C_, c_.qkv_bias);
        std::string qp = p("q"), kp = p("k"), vp = p("v");
        if (c_.short_conv > 0) qp = short_conv("q", H * d), kp = short_conv("k", H * d), vp = short_conv("v", Hv * d);
        const Format l2 = c_.l2_format == "fp32" ? Format::fp32 : c_.dtype;
        const std::string q = step("q_l2", StepKind::l2_head, {qp}, {}, {T_, H * d}, false, H);
        step_format(l2);
        const std::string k = step("k_l2", StepKind::l2_head, {kp}, {}, {T_, H * d}, false, H);
        step_format(l2);
        matmul("g_logit", x, "g", gw, C_, false);
        const std::string g = decay(Hv, gw);
        matmul("b_logit", x, "b", Hv, C_, false);
        const std::string beta = step("beta", StepKind::sigmoid, {p("b_logit")}, {}, {T_, Hv});
        std::vector<std::string> in{q, k, vp, g, beta};
        if (c_.cache_tokens > 0) {
            in.push_back(p("cache.state"));
            weights[p("cache.state")] = {Hv, d, d};
        }
        const StepKind sk = kind == AttentionKind::kda ? StepKind::kda : StepKind::gdn;
        std::string attn = step("attn", sk, in, {}, {T_, Hv * d}, false, Hv);
        if (c_.linear_output_gate) {  // eq 1.23: sigmoid(x W_g) * RMSNorm(o) per head; or silu(x W_g) in FP32
            const std::string on = step("o_norm", StepKind::head_norm, {attn}, {{"o_norm.weight", {d}}}, {T_, Hv * d}, false, Hv);
            const std::string gt = matmul("gate", x, "gate", Hv * d, C_, false);
            const bool silu = c_.linear_gate_act == "silu";
            const std::string gs = step(silu ? "gate_act" : "gate_sig", silu ? StepKind::silu : StepKind::sigmoid, {gt}, {},
                                        {T_, Hv * d});
            if (silu) step_format(Format::fp32);
            attn = step("attn_gated", StepKind::mul, {on, gs}, {}, {T_, Hv * d});
        }
        return matmul("attn_out", attn, "o", C_, Hv * d, c_.o_bias, true);
    }

    // The MoE MLP: the router point, then the experts on its selection.
    // Expert weights are in the registry ops' layouts (numerics/op.cpp):
    // [in, out] per matrix, experts stacked first.
    std::string moe_mlp(const std::string& x) {
        const std::int64_t E = c_.experts, S = c_.dense_shared() ? 0 : c_.shared_experts, F = c_.expert_ffn;
        const bool latent = c_.mlp == MlpKind::latent_moe;
        const std::int64_t W = latent ? c_.latent_dim : C_;
        std::vector<std::pair<std::string, Shape>> rw{{"router.weight", {C_, E}}};
        if (c_.selection_bias) rw.push_back({"router.bias", {E}});
        const std::string r = step("router", StepKind::router, {x}, rw, {T_, 2 * c_.top_k});
        step_format(Format::fp32);
        // mlp_out reads the router's weights too: the layer op's inputs (its
        // dimensions, and the routing of the MPFR cross-check).
        std::vector<std::pair<std::string, Shape>> w = rw;
        w.push_back({"experts.gate_up.weight", {E, W, 2 * F}});
        w.push_back({"experts.down.weight", {E, F, W}});
        if (S > 0) {
            w.push_back({"shared.gate_up.weight", {S, C_, 2 * F}});
            w.push_back({"shared.down.weight", {S, F, C_}});
        }
        if (latent) {
            w.push_back({"latent.down.weight", {C_, W}});
            w.push_back({"latent.up.weight", {W, C_}});
            if (c_.normalized) w.push_back({"latent_norm.weight", {W}});
        }
        if (!latent && c_.dense_shared()) return dense_shared(x, step("experts", StepKind::moe, {x, r}, w, {T_, C_}));
        if (!latent) return step("mlp_out", StepKind::moe, {x, r}, w, {T_, C_}, true);
        // latent_moe in two points: RMSNorm(u) has no useful bound when u's
        // own budget nears |u| / 8, which the four stored stages before it
        // reach in BF16 (docs/moe.md, "In the model").
        const std::string u = step("latent_u", StepKind::moe, {x, r}, w, {T_, W});
        return step("mlp_out", StepKind::latent_out, {x, u}, w, {T_, C_}, true);
    }

    // shared_dense (DeepSeek) and shared_gate (Qwen3-Next): the shared expert
    // as a dense SwiGLU, [scaled by sigmoid(x w_sg)], added to the routed
    // sum, each in the model's format.
    std::string dense_shared(const std::string& x, const std::string& routed) {
        const std::int64_t F = c_.shared_ffn > 0 ? c_.shared_ffn : c_.expert_ffn;
        const std::string gu = matmul("shared_gate_up", x, "shared_mlp.gate_up", 2 * F, C_, false);
        const std::string h = step("shared_h", StepKind::glu, {gu}, {}, {T_, F});
        const std::string y = matmul("shared_out", h, "shared_mlp.down", C_, F, false);
        if (!c_.shared_gate) return step("mlp_out", StepKind::add, {routed, y}, {}, {T_, C_}, true);
        const std::string g = matmul("shared_logit", x, "shared_gate", 1, C_, false);
        const std::string s = step("shared_sig", StepKind::sigmoid, {g}, {}, {T_, 1});
        const std::string gated = step("shared_gated", StepKind::mul, {y, s}, {}, {T_, C_});
        return step("mlp_out", StepKind::add, {routed, gated}, {}, {T_, C_}, true);
    }

    void step_format(Format f) { steps.back().format = f; }

    std::string mlp(const std::string& x) {
        if (c_.moe_layer(layer_)) return moe_mlp(x);
        const std::int64_t F = c_.ffn;
        std::string h;
        if (c_.mlp == MlpKind::gelu) {
            const std::string up = matmul("up", x, "up", F, C_, false);
            h = step("h", StepKind::gelu, {up}, {}, {T_, F});
        } else {
            const std::string gu = matmul("gate_up", x, "gate_up", 2 * F, C_, false);
            h = step("h", StepKind::glu, {gu}, {}, {T_, F});
        }
        return matmul("mlp_out", h, "down", C_, F, false, true);
    }
};

Builder built(const ModelContract& c) {
    validate(c);
    Builder b(c);
    b.build();
    return b;
}

}  // namespace

std::vector<Step> build_graph(const ModelContract& c) { return built(c).steps; }

LayerRange parse_layer_range(const std::string& text, std::int64_t layers) {
    const auto bad = [&](const std::string& why) {
        return std::invalid_argument("--layers \"" + text + "\": " + why + " (expected A:B, A:, :B or A with 0 <= A < B <= " +
                                     std::to_string(layers) + ", the end excluded)");
    };
    const auto number = [&](const std::string& part, std::int64_t dflt) -> std::int64_t {
        if (part.empty()) return dflt;
        std::size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(part, &used);
        } catch (const std::exception&) {
            throw bad("\"" + part + "\" is not a layer number");
        }
        if (used != part.size()) throw bad("\"" + part + "\" is not a layer number");
        return v;
    };
    const std::size_t colon = text.find(':');
    LayerRange r;
    if (colon == std::string::npos) {
        r.first = number(text, -1);
        r.end = r.first + 1;
    } else {
        r.first = number(text.substr(0, colon), 0);
        r.end = number(text.substr(colon + 1), layers);
    }
    if (r.first < 0 || r.end > layers || r.first >= r.end)
        throw bad("the model has " + std::to_string(layers) + " layers");
    return r;
}

std::vector<Step> steps_in_range(const std::vector<Step>& graph, const LayerRange& r, std::int64_t layers) {
    std::vector<Step> out;
    for (const Step& s : graph) {
        // The embedding is counted with layer 0, the head (final norm,
        // lm_head) as layer `layers`: it goes with the range that ends there.
        const std::int64_t l = s.layer < 0 ? 0 : std::min(s.layer, layers - 1);
        if (l >= r.first && l < r.end) out.push_back(s);
    }
    return out;
}

std::map<std::string, std::size_t> last_uses(const std::vector<Step>& steps) {
    std::map<std::string, std::size_t> last;
    for (std::size_t i = 0; i < steps.size(); ++i) {
        last.try_emplace(steps[i].point, i);  // read later: overwritten below
        for (const auto* names : {&steps[i].inputs, &steps[i].weights})
            for (const std::string& n : *names) last[n] = i;
    }
    return last;
}

std::vector<std::string> outside_inputs(const std::vector<Step>& steps,
                                        const std::function<bool(const std::string&)>& is_weight) {
    std::set<std::string> made, seen;
    std::vector<std::string> out;
    for (const Step& s : steps) {
        for (const std::string& in : s.inputs)
            if (!made.count(in) && !is_weight(in) && seen.insert(in).second) out.push_back(in);
        made.insert(s.point);
    }
    return out;
}

std::vector<WeightSpec> weight_specs(const ModelContract& c) {
    std::vector<WeightSpec> out;
    for (auto& [n, s] : built(c).weights) out.push_back({n, s});
    return out;
}

std::vector<std::int64_t> point_shape(const ModelContract&, const Step& s) { return s.shape; }
Format point_format(const ModelContract&, const Step& s) { return s.format; }

bool is_logits_product(const Step& s) {
    return s.kind == StepKind::matmul && (s.point == "logits" || s.point == "logits_raw");
}

Format logits_product_format(const ModelContract& c, const Conventions& conv) {
    const auto it = conv.find("logits_format");
    return it != conv.end() && it->second == "dtype" ? c.dtype : Format::fp32;
}

}  // namespace conform::model
