#include "numerics/op.hpp"

#include <stdexcept>

namespace conform {
namespace {

std::vector<OpSpec> make_specs() {
    const std::vector<std::string> x{"x"}, y{"y"}, gu{"gate", "up"}, h{"h"};
    std::vector<OpSpec> s;
    s.push_back({"rms_norm", "norm", OpKind::row, {"x", "weight"}, y,
                 {{"eps", 1e-6, "added to the mean square, inside the square root"},
                  {"zero_centered", 0, "1: the weight is stored as w and applied as (1 + w)"}},
                 "y = w * x / sqrt(mean(x^2) + eps)"});
    s.push_back({"layer_norm", "norm", OpKind::row, {"x", "weight", "bias"}, y,
                 {{"eps", 1e-5, "added to the variance, inside the square root"}},
                 "y = w * (x - mean(x)) / sqrt(var(x) + eps) + b"});
    s.push_back({"l2_norm", "norm", OpKind::row, x, y,
                 {{"eps", 1e-6, "added to sum(x^2), inside the square root"}},
                 "y = x / sqrt(sum(x^2) + eps)"});
    s.push_back({"sigmoid", "activation", OpKind::unary, x, y, {}, "y = 1 / (1 + exp(-x))"});
    s.push_back({"silu", "activation", OpKind::unary, x, y, {}, "y = x * sigmoid(x)"});
    s.push_back({"gelu_erf", "activation", OpKind::unary, x, y, {}, "y = x/2 * (1 + erf(x / sqrt(2)))"});
    s.push_back({"gelu_tanh", "activation", OpKind::unary, x, y, {},
                 "y = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))"});
    s.push_back({"softplus", "activation", OpKind::unary, x, y, {}, "y = log(1 + exp(x))"});
    s.push_back({"softcap", "activation", OpKind::unary, x, y, {{"beta", 30, "cap, > 0"}},
                 "y = beta * tanh(x / beta)"});
    s.push_back({"swiglu", "gated", OpKind::gated, gu, h, {}, "h = silu(gate) * up"});
    s.push_back({"geglu", "gated", OpKind::gated, gu, h, {}, "h = gelu_erf(gate) * up"});
    s.push_back({"situ_glu", "gated", OpKind::gated, gu, h,
                 {{"beta1", 4, "cap of the gate's linear factor"}, {"beta2", 25, "cap of the up branch"}},
                 "h = [beta1 tanh(gate/beta1) sigmoid(gate)] * [beta2 tanh(up/beta2)]"});
    s.push_back({"swiglu_clamp", "gated", OpKind::gated, gu, h,
                 {{"limit", 10, "gate capped above at limit; up clamped to [-limit, limit]"}},
                 "h = silu(min(gate, limit)) * clamp(up, -limit, limit)"});
    s.push_back({"softmax", "softmax", OpKind::row, x, y, {},
                 "y = exp(x - max x) / sum exp(x - max x) over the last dimension; a NaN or +inf makes the row "
                 "NaN, an all -inf row is all 0"});
    return s;
}

}  // namespace

const std::vector<OpSpec>& op_specs() {
    static const std::vector<OpSpec> specs = make_specs();
    return specs;
}

const OpSpec* find_op(std::string_view name) {
    for (const auto& s : op_specs())
        if (s.name == name) return &s;
    return nullptr;
}

std::vector<std::string> op_names() {
    std::vector<std::string> n;
    for (const auto& s : op_specs()) n.push_back(s.name);
    return n;
}

Params Params::defaults(const OpSpec& op) {
    Params p;
    for (const auto& ps : op.params) p.set(ps.name, ps.default_value);
    return p;
}

double Params::get(const std::string& name, double fallback) const {
    auto it = v_.find(name);
    return it == v_.end() ? fallback : it->second;
}

double Params::at(const std::string& name) const {
    auto it = v_.find(name);
    if (it == v_.end()) throw std::out_of_range("missing op parameter '" + name + "'");
    return it->second;
}

}  // namespace conform
