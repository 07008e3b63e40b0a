// conform synth: a model dump of the synthetic model (docs/model.md).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cli/common.hpp"
#include "io/model_dump.hpp"
#include "model/run.hpp"

namespace conform::cli {
namespace {

struct SynthOptions {
    std::int64_t layers = 4;
    std::string pattern = "dense", dtype = "bf16", contract_file, out, mutant;
    std::int64_t width = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, tokens = 0, cache_tokens = -1, at = -1;
    std::uint64_t seed = 1;
    std::string attention, linear, mlp, placement, residual, norm;
    double eps = -1, attention_softcap = -1;
    bool qk_norm = false;
    std::vector<std::string> conventions;
};

template <class E>
E parse_kind(const std::string& opt, const std::string& v, std::initializer_list<E> all) {
    for (E e : all)
        if (v == model::name(e)) return e;
    throw UsageError(opt + ": unknown value '" + v + "'");
}

// Shapes that follow from --width alone (each explicit option still wins):
// heads of 64 dims (16 below width 256), a quarter as many KV heads, linear
// layers with the same heads, an MLP of 3 C.
void derive_shapes(model::ModelContract& c, std::int64_t width) {
    c.head_dim = width >= 256 ? 64 : std::min<std::int64_t>(16, width);
    c.heads = std::max<std::int64_t>(1, width / c.head_dim);
    c.kv_heads = std::max<std::int64_t>(1, c.heads / 4);
    while (c.heads % c.kv_heads) --c.kv_heads;
    c.linear_heads = c.heads, c.linear_head_dim = c.head_dim;
    c.ffn = 3 * width;
}

// The contract: --contract FILE first, then the command-line fields over it.
model::ModelContract make_contract(const SynthOptions& o, CLI::App* cmd) {
    model::ModelContract c;
    if (!o.contract_file.empty()) {
        std::ifstream in(o.contract_file);
        if (!in) throw UsageError("--contract: cannot read " + o.contract_file);
        try {
            c = model::contract_from_json(nlohmann::json::parse(in));
        } catch (const nlohmann::json::exception& e) {
            throw UsageError("--contract " + o.contract_file + ": " + e.what());
        }
    }
    auto given = [&](const char* opt) { return cmd->get_option(opt)->count() > 0; };
    if (given("--layers") || o.contract_file.empty()) c.layers = o.layers;
    if (given("--pattern") || o.contract_file.empty()) c.pattern = o.pattern;
    if (given("--dtype") || o.contract_file.empty()) {
        auto f = parse_format(o.dtype);
        if (!f) throw UsageError("--dtype: unknown format '" + o.dtype + "'");
        c.dtype = *f;
    }
    if (o.width > 0) derive_shapes(c, o.width);
    for (auto [v, field] : {std::pair{o.width, &c.width}, {o.heads, &c.heads}, {o.kv_heads, &c.kv_heads},
                            {o.head_dim, &c.head_dim}, {o.ffn, &c.ffn}, {o.tokens, &c.tokens}})
        if (v > 0) *field = v;
    if (o.heads > 0 || o.head_dim > 0) c.linear_heads = c.heads, c.linear_head_dim = c.head_dim;
    if (o.cache_tokens >= 0) c.cache_tokens = o.cache_tokens;
    using model::AttentionKind;
    if (!o.attention.empty()) c.attention_kind = parse_kind("--attention", o.attention, {AttentionKind::softmax, AttentionKind::gated});
    if (!o.linear.empty()) c.linear_kind = parse_kind("--linear", o.linear, {AttentionKind::gdn, AttentionKind::kda});
    if (!o.mlp.empty())
        c.mlp = parse_kind("--mlp", o.mlp, {model::MlpKind::swiglu, model::MlpKind::situ_glu, model::MlpKind::gelu,
                                            model::MlpKind::moe, model::MlpKind::latent_moe, model::MlpKind::geglu,
                                            model::MlpKind::swiglu_clamp});
    if (!o.placement.empty()) c.placement = parse_kind("--placement", o.placement, {model::Placement::pre, model::Placement::post, model::Placement::sandwich});
    if (!o.residual.empty())
        c.residual = parse_kind("--residual", o.residual, {model::ResidualKind::plain, model::ResidualKind::mhc});
    if (o.qk_norm) c.qk_norm = true;
    if (!o.norm.empty()) c.norm = parse_kind("--norm", o.norm, {model::NormKind::rms_norm, model::NormKind::layer_norm});
    if (o.eps >= 0) c.eps = o.eps;
    if (given("--attention-softcap")) c.attention_softcap = o.attention_softcap;  // a negative one: the contract's error
    try {
        model::validate(c);
    } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
    }
    return c;
}

std::string impl_string(const model::ModelContract& c, const model::CandidateOptions& opt) {
    std::ostringstream s;
    s << "conform synth " << name(c.dtype);
    if (!opt.mutant.empty()) s << " mutant=" << opt.mutant << " at=" << opt.at;
    for (const auto& [k, v] : opt.conventions) s << " " << k << "=" << v;
    return s.str();
}

int run_synth(const SynthOptions& o, CLI::App* cmd) {
    const model::ModelContract c = make_contract(o, cmd);
    model::CandidateOptions opt;
    opt.mutant = o.mutant;
    opt.at = o.at;
    opt.conventions = parse_key_values(o.conventions);
    if (!opt.mutant.empty() && opt.at < 0) throw UsageError("--mutant needs --at LAYER");
    const auto t0 = std::chrono::steady_clock::now();
    progress("synth: " + std::to_string(c.layers) + " layers (" + c.pattern + "), width " + std::to_string(c.width) +
             ", " + std::to_string(c.tokens) + " tokens, " + name(c.dtype));
    auto seconds = [t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    auto at = [&](const std::string& what) {
        char buf[64];
        std::snprintf(buf, sizeof buf, " (%.1f s, cpu %.1f s)", seconds(), static_cast<double>(std::clock()) / CLOCKS_PER_SEC);
        progress("synth: " + what + buf);
    };
    // Streamed: each weight drawn when a step first reads it and written
    // then, each point written as computed, both dropped after their last
    // use -- a model larger than memory is synthesized in bounded memory.
    const std::vector<model::Step> graph = model::build_graph(c);
    std::map<std::string, io::TensorLayout> points, weights;
    for (const model::Step& s : graph) points[s.point] = {io::dtype_of(s.format), s.shape};
    for (const model::WeightSpec& w : model::weight_specs(c)) weights[w.name] = {io::dtype_of(c.dtype), w.shape};
    const Tensor input = model::synthetic_input(c, o.seed);
    io::ModelDumpWriter out(o.out, model::to_json(c), impl_string(c, opt), {io::dtype_of(input.format()), input.shape()},
                            points, weights);
    out.put_input(input);
    std::set<std::string> written;
    const model::WeightSource weight = [&](const std::string& n) {
        Tensor t = model::synthetic_weight(c, o.seed, n);
        if (written.insert(n).second) out.put_weight(n, t);
        return t;
    };
    opt.emit = [&](const std::string& point, const Tensor& t) { out.put_activation(point, t); };
    opt.progress = [&](std::int64_t l) {
        if (c.layers >= 8 && (l + 1) % 8 == 0) at("layer " + std::to_string(l + 1) + " / " + std::to_string(c.layers));
    };
    try {
        model::run_kernels_streamed(c, weight, input, opt);
    } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
    }
    at("kernels run");
    for (const auto& [n, l] : weights)  // weights no step reads (none today): written all the same
        if (!written.count(n)) out.put_weight(n, model::synthetic_weight(c, o.seed, n));
    out.finish();
    char size[32];
    std::snprintf(size, sizeof size, "%.3g MB", static_cast<double>(out.bytes()) * 1e-6);
    at("wrote " + o.out + " (" + size + "), " + std::to_string(points.size()) + " points");
    return 0;
}

}  // namespace

Subcommand add_synth(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "synth", "write a model dump of the synthetic block stack run by the built-in kernels (docs/model.md)");
    auto o = std::make_shared<SynthOptions>();
    cmd->add_option("--layers", o->layers, "number of layers")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_option("--pattern", o->pattern, "dense (every layer attention) | hybrid (3 linear : 1 attention) | one letter per layer, "
                    "repeated: S softmax, G gated, M mla, D gdn, K kda (e.g. KKKM)")
        ->capture_default_str();
    cmd->add_option("--dtype", o->dtype, "fp32 | bf16 | fp16: weights, activations and kernels")->capture_default_str();
    cmd->add_option("--width", o->width, "hidden size C (alone it also sets heads of 64 dims, KV heads = heads / 4, ffn = 3 C)");
    cmd->add_option("--heads", o->heads, "query heads");
    cmd->add_option("--kv-heads", o->kv_heads, "KV heads (divides --heads)");
    cmd->add_option("--head-dim", o->head_dim, "head dim D");
    cmd->add_option("--ffn", o->ffn, "MLP hidden size F");
    cmd->add_option("--tokens", o->tokens, "model input length T");
    cmd->add_option("--cache-tokens", o->cache_tokens, "P > 0: attention layers see P cached keys, linear layers a state");
    cmd->add_option("--seed", o->seed, "seed of the weights, caches and input")->capture_default_str();
    cmd->add_option("--attention", o->attention, "softmax | gated (the full-attention layers)");
    cmd->add_option("--linear", o->linear, "gdn | kda (the linear layers of a hybrid stack)");
    cmd->add_option("--mlp", o->mlp,
                    "swiglu | situ_glu | gelu | geglu | swiglu_clamp | moe | latent_moe (the MoE keys -- experts, top_k, shared_experts, "
                    "expert_ffn, router_score, renormalize, selection_bias, router_groups, router_topk_groups, routed_scaling, "
                    "latent_dim, normalized -- from --contract)");
    cmd->add_option("--placement", o->placement, "pre | post | sandwich norm (sandwich: Gemma's post-norm on each branch too)");
    cmd->add_option("--residual", o->residual, "plain | mhc");
    cmd->add_flag("--qk-norm", o->qk_norm, "RMSNorm over head_dim of q and k before RoPE");
    cmd->add_option("--norm", o->norm, "rms_norm | layer_norm");
    cmd->add_option("--eps", o->eps, "norm epsilon (a large one, e.g. 0.1, makes eps_placement visible)");
    cmd->add_option("--attention-softcap", o->attention_softcap,
                    "c > 0: attention logits capped c tanh(s / c) (Gemma 2's attn_logit_softcapping; 0: none)");
    cmd->add_option("--contract", o->contract_file, "contract JSON (the fields above override it)");
    cmd->add_option("--mutant", o->mutant, "registry name of a mutant kernel of --dtype (see conform list) to substitute at --at");
    cmd->add_option("--at", o->at, "the layer the mutant is substituted at");
    cmd->add_option("--convention", o->conventions,
                    "KEY=VALUE the candidate really follows (repeatable; the dump still declares the contract's): "
                    "rope_pairing=interleaved, eps_placement=outside, gate_order=up_gate, gelu=tanh, "
                    "norm_cast=before_weight, causal=top_left, window_keys=w_plus_one, lm_head=embed, rolling_order=slots, "
                    "logits_format=dtype, act_arith=quotient, softcap_arith=dtype; STEP:KEY=VALUE for one step of every layer, e.g. "
                    "o_norm:norm_cast=before_weight (docs/model.md, \"Conventions\")");
    cmd->add_option("--out", o->out, "the model dump to write (safetensors)")->required();
    cmd->footer(
        "Shapes not given take the contract defaults (width 64, 4 heads of 16, 2 KV heads, ffn 128, 16 tokens).\n"
        "Examples:\n"
        "  conform synth --layers 32 --pattern hybrid --dtype bf16 --width 1024 --tokens 128 --out h.safetensors\n"
        "  conform synth --layers 8 --dtype bf16 --mutant mutant.rms_norm.cast_before_weight.bf16 --at 5 --out m.safetensors\n"
        "  conform synth --layers 4 --cache-tokens 8 --convention causal=top_left --out c.safetensors");
    return {cmd, [o, cmd]() { return run_synth(*o, cmd); }};
}

}  // namespace conform::cli
