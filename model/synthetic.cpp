// The synthetic model (docs/model.md, "Synthetic model"): deterministic
// weights, caches and input from a seed.  Each tensor draws from its own
// generator, seeded from (seed, name), so adding a weight never changes the
// others; the normal variates are our own (sum of four uniforms, scaled to
// unit variance: exact arithmetic and one correctly rounded sqrt, the same
// on every platform -- std::normal_distribution is implementation-defined).
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

#include "model/run.hpp"

namespace conform::model {
namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finalizer
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

std::uint64_t stream_seed(std::uint64_t seed, const std::string& name) {
    std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the name
    for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ULL;
    return mix(seed ^ mix(h));
}

// Approximately N(0, 1): Irwin-Hall with four 32-bit uniforms (the two
// halves of two 64-bit draws; their integer sum is exact), |z| <= 2 sqrt(3).
class Normal {
public:
    explicit Normal(std::uint64_t seed) : gen_(seed) {}
    double operator()() {
        const std::uint64_t a = gen_(), b = gen_(), lo = 0xffffffffULL;
        const double s = static_cast<double>((a >> 32) + (a & lo) + (b >> 32) + (b & lo));
        return (s * 0x1p-32 - 2) * sqrt3_;
    }

private:
    std::mt19937_64 gen_;
    const double sqrt3_ = std::sqrt(3.0);
};

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// value = offset + scale * z for the tensor `name` (shape [out, in] for a
// projection: scale 1/sqrt(in), output projections also 1/sqrt(2 layers) so
// the residual stream's variance stays O(1) at any depth).
struct Law {
    double offset = 0, scale = 1;
};

// The MoE weights are in the registry ops' [in, out] layouts (experts
// stacked first): the fan-in is dimension 0 of a matrix, 1 of a stack.
Law moe_law(const ModelContract& c, const std::string& name, const std::vector<std::int64_t>& shape) {
    const double fan_in = static_cast<double>(shape.size() == 3 ? shape[1] : shape[0]);
    double s = 1 / std::sqrt(fan_in);
    // The output projections of the layer: the routed experts' down
    // projection only where nothing follows it (moe, not latent_moe).
    const bool out = ends_with(name, "shared.down.weight") || ends_with(name, "latent.up.weight") ||
                     (ends_with(name, "experts.down.weight") && c.mlp == MlpKind::moe);
    if (out) s /= std::sqrt(2.0 * static_cast<double>(c.layers));
    return {0, s};
}

bool moe_weight(const std::string& name) {
    for (const char* part : {".router.weight", ".experts.", ".shared.", ".latent."})
        if (name.find(part) != std::string::npos) return true;
    return false;
}

Law law(const ModelContract& c, const std::string& name, const std::vector<std::int64_t>& shape) {
    if (ends_with(name, "latent_norm.weight")) return {1, 0.1};  // applied as w, never 1 + w
    if (name == "embed.weight") return {0, 1};                  // unit hidden states, as the non-logits input
    if (name == "embed_scale") return {std::sqrt(static_cast<double>(c.width)), 0};  // Gemma's sqrt(C), rounded to dtype
    if (moe_weight(name)) return moe_law(c, name, shape);
    if (name.find(".mla.") != std::string::npos)  // the op's layouts: the fan-in is the last dimension
        return {0, 1 / std::sqrt(static_cast<double>(shape.back()))};
    const bool norm = ends_with(name, "norm.weight");
    const bool offset = ends_with(name, ".o_norm.weight") ? c.o_norm_offset() : c.zero_centered;
    if (norm) return {offset && c.norm == NormKind::rms_norm ? 0.0 : 1.0, 0.1};
    if (ends_with(name, ".bias")) return {0, 0.1};
    if (ends_with(name, "_hc.alpha") || ends_with(name, "_hc.gamma")) return {0, 0.5};
    if (ends_with(name, "_hc.logits")) return {0, 2};
    if (ends_with(name, "cache.state")) return {0, 0.1};
    if (ends_with(name, "decay_a.weight")) return {0, 0.5};  // A_h: e^A in [0.2, 5.6]
    // The residual reads: logits w . RMSNorm(v) of O(1); the gated map's
    // logits O(1); write gates sigmoid(s) around 1/2.
    if (ends_with(name, "_res.query")) return {0, 1 / std::sqrt(static_cast<double>(c.width))};
    if (ends_with(name, "_res.key_norm") || ends_with(name, "_gr.norm")) return {1, 0.1};
    if (ends_with(name, "_gr.down") || ends_with(name, "_gr.up")) return {0, 1 / std::sqrt(static_cast<double>(shape.at(0)))};
    if (ends_with(name, "_gr.write")) return {0, 0.5};
    if (name.find(".cache.") != std::string::npos) return {0, 1};
    double s = 1 / std::sqrt(static_cast<double>(shape.at(1)));
    if (ends_with(name, ".o.weight") || ends_with(name, ".down.weight")) s /= std::sqrt(2.0 * static_cast<double>(c.layers));
    return {0, s};
}

Tensor draw(const ModelContract& c, std::uint64_t seed, const std::string& name, const std::vector<std::int64_t>& shape,
            const Law& l) {
    Tensor t(c.dtype, shape);
    Normal z(stream_seed(seed, name));
    const TensorView v = t.view();  // dense: element i at offset i
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        const std::uint64_t bits = encode(c.dtype, l.offset + l.scale * z());
        if (info(c.dtype).bytes == 2) static_cast<std::uint16_t*>(v.data)[i] = static_cast<std::uint16_t>(bits);
        else static_cast<std::uint32_t*>(v.data)[i] = static_cast<std::uint32_t>(bits);
    }
    return t;
}

}  // namespace

Tensor synthetic_input(const ModelContract& c, std::uint64_t seed) {
    if (!c.logits) return draw(c, seed, "input", {c.tokens, c.width}, {0, 1});
    Tensor input(Format::fp32, {c.tokens});  // token ids, uniform over the vocabulary, stored as exact FP32 values
    std::mt19937_64 g(stream_seed(seed, "input"));
    for (std::int64_t t = 0; t < c.tokens; ++t) input.set_value(t, static_cast<double>(g() % static_cast<std::uint64_t>(c.vocab)));
    return input;
}

Tensor synthetic_weight(const ModelContract& c, std::uint64_t seed, const std::string& name) {
    for (const WeightSpec& w : weight_specs(c))
        if (w.name == name) return draw(c, seed, w.name, w.shape, law(c, w.name, w.shape));
    throw std::invalid_argument("synthetic_weight: the contract has no weight '" + name + "'");
}

Synthetic synthetic_model(const ModelContract& c, std::uint64_t seed) {
    Synthetic s;
    for (const WeightSpec& w : weight_specs(c)) s.weights[w.name] = draw(c, seed, w.name, w.shape, law(c, w.name, w.shape));
    s.input = synthetic_input(c, seed);
    return s;
}

}  // namespace conform::model
