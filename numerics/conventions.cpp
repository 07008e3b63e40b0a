#include "numerics/conventions.hpp"

#include <algorithm>
#include <stdexcept>

namespace conform {
namespace {

const std::vector<std::string> kElementwise{"sigmoid", "silu",  "gelu_erf", "gelu_tanh", "softplus",
                                           "softcap", "swiglu", "geglu",    "situ_glu",  "swiglu_clamp"};

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::string joined(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
}

const ConventionSpec* find_spec(const std::string& key) {
    for (const ConventionSpec& s : convention_specs())
        if (s.key == key) return &s;
    return nullptr;
}

// Whether c declares something that means anything for op (check_conventions).
bool meaningful(const Conventions& c, const std::string& op) {
    try {
        check_conventions(c, op);
        return true;
    } catch (const std::invalid_argument&) {
        return false;
    }
}

std::size_t value_index(const ConventionSpec& s, const std::string& v) {
    return static_cast<std::size_t>(std::find(s.values.begin(), s.values.end(), v) - s.values.begin());
}

}  // namespace

const std::vector<ConventionSpec>& convention_specs() {
    static const std::vector<ConventionSpec> v{
        {"masked_row", {"zero", "nan"}, {"softmax", "attention", "gated_attention", "sink_attention"},
         "a row with no visible entry: the empty distribution (0, lse -inf), or NaN as softmax(s) @ v computes it"},
        {"eps_placement", {"inside", "outside"}, {"rms_norm", "layer_norm", "l2_norm"},
         "eps inside the root, sqrt(mean x^2 + eps), or added to it, sqrt(mean x^2) + eps"},
        {"l2_form", {"sqrt", "max"}, {"l2_norm"},
         "x / sqrt(sum x^2 + eps), or x / max(||x||, eps) (eps a floor on the norm, as torch.nn.functional.normalize)"},
        {"special_values", {"ml", "ieee"}, kElementwise,
         "at an infinite input, the formula's limit (silu(-inf) = -0), or the formula evaluated literally in IEEE "
         "arithmetic (silu(-inf) = -inf * 0 = NaN)"},
        {"gelu", {"erf", "tanh"}, {"geglu"}, "the gate's GELU: the erf form, or the tanh approximation"},
        {"act_arith", {"ulp", "quotient", "one_plus_tanh", "one_plus_erf", "log1p_exp", "scaled_tanh"},
         {"sigmoid", "silu", "swiglu", "gelu_tanh", "gelu_erf", "geglu", "softplus", "softcap"},
         "1 ulp of the correctly rounded result, or the class of the textbook form in FP32 with a library function: "
         "quotient n / (1 + exp(-x)) with a 1-ulp exp (sigmoid, silu, swiglu), one_plus_tanh x/2 (1 + tanh(...)) with a "
         "2-ulp tanh (gelu_tanh, geglu with gelu = tanh), one_plus_erf x/2 (1 + erf(x/sqrt 2)) with an erf within 2^-20 "
         "absolute (gelu_erf, geglu with gelu = erf), log1p_exp max(x, 0) + log1p(exp(-|x|)) or log1p(exp(x)) with a 1-ulp "
         "exp and log1p (softplus), scaled_tanh beta tanh(x / beta) with a 2-ulp tanh (softcap); a gated op's product "
         "in FP32: the budget only"},
        {"causal", {"bottom_right", "top_left"}, {"attention", "gated_attention", "sink_attention"},
         "causal mask aligned so the last query sees the last key, or so query i sees keys 0..i"},
        {"attention_arith", {"fp32", "input"}, {"attention", "sink_attention"},
         "logits, weights and lse kept in FP32 (a flash kernel), or rounded to the input format: the logits after "
         "every stage (q.k, the scale, the softcap, the mask add), the weights before P V, the lse (PyTorch's eager "
         "attention, XLA's dot_product_attention in BF16/FP16): the budget only"},
        {"rope_pairing", {"interleaved", "half"}, {"rope"},
         "a kernel that implements one pairing: pins the `pairing` parameter to 0, pairs (2j, 2j + 1), or 1, "
         "pairs (j, j + r/2)"},
        {"mla_form", {"explicit", "absorbed"}, {"mla"},
         "a kernel that computes one form: pins the `form` parameter to 0 or 1 (the same value for finite inputs; "
         "an infinite latent propagates differently, through W_uk's entries into every explicit key element but as "
         "one term of the absorbed logit)"},
    };
    return v;
}

std::vector<const ConventionSpec*> convention_specs_for(const std::string& op) {
    std::vector<const ConventionSpec*> out;
    for (const ConventionSpec& s : convention_specs())
        if (has(s.ops, op)) out.push_back(&s);
    return out;
}

std::vector<std::string> conventions_for(const std::string& op) {
    std::vector<std::string> out;
    for (const ConventionSpec* s : convention_specs_for(op))
        out.push_back(s->key + " = " + s->values.front() + " (default) | " +
                      joined(std::vector<std::string>(s->values.begin() + 1, s->values.end()), " | "));
    return out;
}

void check_conventions(const Conventions& c, const std::string& op) {
    std::vector<std::string> keys;
    for (const ConventionSpec& s : convention_specs()) keys.push_back(s.key);
    for (const auto& [key, value] : c) {
        const ConventionSpec* s = find_spec(key);
        if (!s) throw std::invalid_argument("unknown convention \"" + key + "\" (known: " + joined(keys, ", ") + ")");
        if (!has(s->values, value))
            throw std::invalid_argument("convention " + key + " = \"" + value + "\": expected one of " + joined(s->values, ", "));
        if (!op.empty() && !has(s->ops, op))
            throw std::invalid_argument("convention " + key + " does not apply to op " + op + " (it applies to " +
                                        joined(s->ops, ", ") + ")");
    }
    if (const std::string a = convention(c, "act_arith"); a != "ulp" && !op.empty()) {
        const std::string gelu = convention(c, "gelu");
        const std::string fits = op == "gelu_tanh" || (op == "geglu" && gelu == "tanh") ? "one_plus_tanh"
                                 : op == "gelu_erf" || op == "geglu"                     ? "one_plus_erf"
                                 : op == "softplus"                                      ? "log1p_exp"
                                 : op == "softcap"                                       ? "scaled_tanh"
                                                                                         : "quotient";
        if (a != fits)
            throw std::invalid_argument("convention act_arith = " + a + " does not fit op " + op +
                                        (op == "geglu" ? " with gelu = " + gelu : std::string()) + " (it takes " + fits + ")");
    }
    if (convention(c, "l2_form") == "max" && convention(c, "eps_placement") == "outside")
        throw std::invalid_argument("conventions l2_form = max and eps_placement = outside: the max form has no eps "
                                    "placement (eps is a floor on the norm)");
}

std::string convention(const Conventions& c, const std::string& key) {
    if (auto it = c.find(key); it != c.end()) return it->second;
    const ConventionSpec* s = find_spec(key);
    return s ? s->values.front() : "";
}

Params with_convention_params(const Params& p, const Conventions& c) {
    Params out = p;
    for (const auto& [key, value] : c)
        if (const ConventionSpec* s = find_spec(key); s && value_index(*s, value) > 0 && value_index(*s, value) < s->values.size())
            out.set("convention." + key, static_cast<double>(value_index(*s, value)));
    return out;
}

std::optional<std::pair<std::string, double>> pinned_param(const std::string& op, const Conventions& c) {
    if (op == "rope" && c.count("rope_pairing")) return std::make_pair(std::string("pairing"), c.at("rope_pairing") == "half" ? 1.0 : 0.0);
    if (op == "mla" && c.count("mla_form")) return std::make_pair(std::string("form"), c.at("mla_form") == "absorbed" ? 1.0 : 0.0);
    return std::nullopt;
}

std::vector<std::pair<std::string, Conventions>> convention_alternatives(const std::string& op, const Conventions& c) {
    std::vector<std::pair<std::string, Conventions>> out;
    for (const ConventionSpec* s : convention_specs_for(op))
        for (const std::string& v : s->values) {
            if (v == convention(c, s->key)) continue;
            Conventions alt = c;
            alt[s->key] = v;
            if (meaningful(alt, op)) out.emplace_back(s->key + "=" + v, std::move(alt));
        }
    return out;
}

std::vector<std::pair<std::string, Conventions>> convention_pairs(const std::string& op, const Conventions& c) {
    const std::vector<const ConventionSpec*> specs = convention_specs_for(op);
    std::vector<std::pair<std::string, Conventions>> out;
    for (std::size_t i = 0; i < specs.size(); ++i)
        for (std::size_t j = i + 1; j < specs.size(); ++j)
            for (const std::string& a : specs[i]->values)
                for (const std::string& b : specs[j]->values) {
                    if (a == convention(c, specs[i]->key) || b == convention(c, specs[j]->key)) continue;
                    Conventions alt = c;
                    alt[specs[i]->key] = a, alt[specs[j]->key] = b;
                    if (meaningful(alt, op))
                        out.emplace_back(conventions_text({{specs[i]->key, a}, {specs[j]->key, b}}), std::move(alt));
                }
    return out;
}

std::string conventions_text(const Conventions& c) {
    std::string s;
    for (const auto& [k, v] : c) s += (s.empty() ? "" : ", ") + k + "=" + v;
    return s;
}

}  // namespace conform
