#include "numerics/domain.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "numerics/op.hpp"

namespace conform {
namespace {

[[noreturn]] void bad(const std::string& key, const std::string& why) {
    throw std::invalid_argument(key.empty() ? why : "\"" + key + "\": " + why);
}

double number(const nlohmann::json& v, const std::string& key) {
    if (!v.is_number()) bad(key, "expected a number, got " + v.dump());
    const double x = v.get<double>();
    if (!std::isfinite(x)) bad(key, "not a finite number");
    return x;
}

DomainRule parse_rule(const nlohmann::json& v, const std::string& key, bool dimension) {
    DomainRule r;
    if (v.is_array()) {
        if (v.empty()) bad(key, "an empty list allows nothing");
        for (const auto& e : v) r.values.push_back(number(e, key));
        std::sort(r.values.begin(), r.values.end());
        r.values.erase(std::unique(r.values.begin(), r.values.end()), r.values.end());
    } else if (v.is_object()) {
        for (const auto& [k, e] : v.items()) {
            if (k == "min") r.min = number(e, key + ".min");
            else if (k == "max") r.max = number(e, key + ".max");
            else if (k == "multiple_of") r.multiple_of = number(e, key + ".multiple_of");
            else bad(key, "unknown rule \"" + k + "\" (expected min, max, multiple_of, or a list of values)");
        }
        if (r.min && r.max && *r.min > *r.max) bad(key, "min > max");
        if (r.multiple_of && !(*r.multiple_of >= 1 && *r.multiple_of == std::floor(*r.multiple_of)))
            bad(key, "multiple_of must be a positive integer");
        if (r.multiple_of && r.max && std::floor(*r.max / *r.multiple_of) * *r.multiple_of < r.min.value_or(0))
            bad(key, "no multiple of " + std::to_string(*r.multiple_of) + " lies in [min, max]");
    } else {
        bad(key, "expected a list of values or an object {min, max, multiple_of}");
    }
    if (dimension && key == "mask") {  // a flag, not a size
        if (!v.is_array()) bad(key, "a flag: a list of 0 (no mask) and/or 1 (an additive mask)");
        for (double x : r.values)
            if (x != 0 && x != 1) bad(key, "a flag: its values are 0 (no mask) and 1 (an additive mask)");
    } else if (dimension) {
        for (double x : r.values)
            if (x < 1 || x != std::floor(x)) bad(key, "dimension values must be positive integers");
    }
    if (dimension && r.max && *r.max < 1) bad(key, "max must be >= 1");
    if (dimension && r.min && *r.min < 1) bad(key, "min must be >= 1 (a dimension of 0 elements is no case)");
    return r;
}

bool is_param(const OpSpec& op, const std::string& name) {
    return std::any_of(op.params.begin(), op.params.end(), [&](const ParamSpec& p) { return p.name == name; });
}

std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

}  // namespace

std::vector<std::string> domain_dims(const std::string& op) {
    static const std::map<std::string, std::vector<std::string>> dims{
        {"rope", {"heads", "seq_len", "head_dim"}},
        {"attention", {"heads", "kv_heads", "q_len", "kv_len", "head_dim", "v_head_dim", "mask"}},
        {"gated_attention", {"heads", "kv_heads", "q_len", "kv_len", "head_dim", "v_head_dim", "mask"}},
        {"sink_attention", {"heads", "kv_heads", "q_len", "kv_len", "head_dim", "v_head_dim", "mask"}},
        {"lse_merge", {"rows", "v_head_dim"}},
        {"gdn", {"tokens", "heads", "key_dim", "value_dim"}},
        {"kda", {"tokens", "heads", "key_dim", "value_dim"}},
        {"sinkhorn", {"batch", "n"}},
        {"hc_residual", {"tokens", "n", "d"}},
        {"mhc_residual", {"tokens", "n", "d"}},
        {"quantize", {"rows", "cols"}},
        {"dequantize", {"rows", "cols"}},
        {"int8_gemm", {"m", "k", "n"}},
        {"matmul", {"m", "k", "n"}},
        {"moe_router", {"tokens", "channels", "experts"}},
        {"topk_select", {"queries", "candidates"}},
        {"lightning_indexer", {"queries", "candidates", "heads", "dim"}},
        {"compressed_attention", {"heads", "tokens", "dim", "index_heads"}},
        {"block_sparse_attention", {"heads", "groups", "tokens", "dim", "index_heads", "index_dim"}},
        {"moe", {"tokens", "channels", "experts", "ffn"}},
        {"latent_moe", {"tokens", "channels", "experts", "ffn"}},
        {"fp8_quantize", {"rows", "cols"}},
        {"fp8_gemm", {"m", "k", "n"}},
        {"smooth_quant", {"tokens", "channels", "n"}},
        {"int8_block", {"tokens", "d", "heads", "ffn"}},
        {"mla", {"heads", "tokens", "cached", "d_model", "d_c", "d_nope", "d_r", "d_v"}},
        {"dsa_attention", {"queries", "keys", "index_heads", "index_dim", "heads", "head_dim", "v_head_dim"}},
        {"nsa_attention", {"heads", "kv_heads", "q_len", "kv_len", "head_dim", "v_head_dim"}},
        {"block_attn_res", {"sources", "tokens", "d"}},
        {"gated_residual", {"streams", "tokens", "d", "rank"}},
    };
    if (auto it = dims.find(op); it != dims.end()) return it->second;
    return {"rows", "cols"};
}

std::vector<std::string> tunable_params(const std::string& op) {
    if (softmax_attention_op(op)) return {"block"};
    return {};
}

Domain parse_domain(const std::string& json, const std::string& op_name, bool tunables) {
    Domain d;
    if (json.empty()) return d;
    const OpSpec* op = find_op(op_name);
    if (!op) bad("", "unknown op '" + op_name + "'");
    const auto j = nlohmann::json::parse(json, nullptr, false);
    if (j.is_discarded() || !j.is_object()) bad("", "not a JSON object: " + json);
    const std::vector<std::string> dims = domain_dims(op_name);
    for (const auto& [key, value] : j.items()) {
        const std::vector<std::string> tun = tunable_params(op_name);
        const bool tunable = std::find(tun.begin(), tun.end(), key) != tun.end();
        if (tunables && !tunable)
            bad(key, "not a tunable parameter of " + op_name + " (tunables: " + (tun.empty() ? "none" : joined(tun)) + ")");
        const bool dimension = !tunables && std::find(dims.begin(), dims.end(), key) != dims.end();
        if (!dimension && !tunable && !is_param(*op, key))
            bad(key, "not a dimension or parameter of " + op_name + " (dimensions: " + joined(dims) + "; parameters: see conform ops)");
        d.rules[key] = parse_rule(value, key, dimension);
    }
    return d;
}

double project(const DomainRule& r, double v, bool dimension) {
    if (!r.values.empty()) {
        if (std::find(r.values.begin(), r.values.end(), v) != r.values.end()) return v;
        if (dimension) {
            const auto i = static_cast<std::size_t>(std::fabs(std::floor(v))) % r.values.size();
            return r.values[i];
        }
        return *std::min_element(r.values.begin(), r.values.end(),
                                 [v](double a, double b) { return std::fabs(a - v) < std::fabs(b - v); });
    }
    double x = v;
    if (r.min) x = std::max(x, *r.min);
    if (r.max) x = std::min(x, *r.max);
    if (r.multiple_of) {
        const double m = *r.multiple_of;
        x = std::ceil(x / m) * m;
        if (r.max && x > *r.max) x -= m;
        if (dimension && x < m) x = m;
    }
    return x;
}

std::string Domain::text() const {
    // Integers as integers: {"head_dim":[64,128]}, not [64.0,128.0].
    auto num = [](double v) {
        return v == std::floor(v) && std::fabs(v) < 9e15 ? nlohmann::json(static_cast<std::int64_t>(v)) : nlohmann::json(v);
    };
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [key, r] : rules) {
        if (!r.values.empty()) {
            nlohmann::json a = nlohmann::json::array();
            for (double v : r.values) a.push_back(num(v));
            j[key] = a;
            continue;
        }
        nlohmann::json o = nlohmann::json::object();
        if (r.min) o["min"] = num(*r.min);
        if (r.max) o["max"] = num(*r.max);
        if (r.multiple_of) o["multiple_of"] = num(*r.multiple_of);
        j[key] = o;
    }
    return rules.empty() ? "" : j.dump();
}

}  // namespace conform
