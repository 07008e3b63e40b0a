#include "oracle/conventions.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace conform::oracle {
namespace {

const std::map<std::string, std::vector<std::string>>& accepted() {
    static const std::map<std::string, std::vector<std::string>> a{{"masked_row", {"zero", "nan"}}};
    return a;
}

bool is_attention(const std::string& op) {
    return op == "attention" || op == "qk_norm_attention" || op == "gated_attention";
}

// Every element of each row r with empty[r] set (rows of `cols` elements) becomes NaN.
void nan_rows(const std::vector<bool>& empty, std::int64_t cols, Tensor& rounded, std::vector<double>& exact) {
    constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    for (std::size_t r = 0; r < empty.size(); ++r)
        if (empty[r])
            for (std::int64_t j = 0; j < cols; ++j) {
                const std::int64_t i = static_cast<std::int64_t>(r) * cols + j;
                rounded.set_value(i, nan);
                exact[static_cast<std::size_t>(i)] = nan;
            }
}

// Softmax rows holding nothing but -inf (rows of the last axis of input 0).
std::vector<bool> all_minus_inf_rows(const TensorView& x) {
    std::vector<bool> empty(static_cast<std::size_t>(x.rows()), true);
    for (std::int64_t r = 0; r < x.rows(); ++r)
        for (std::int64_t j = 0; j < x.cols() && empty[r]; ++j) {
            const double v = x.value(r * x.cols() + j);
            empty[r] = std::isinf(v) && v < 0;
        }
    return empty;
}

// Attention rows whose exact lse (output 1) is -inf: the query saw no key.
std::vector<bool> keyless_rows(const std::vector<double>& lse) {
    std::vector<bool> empty(lse.size());
    for (std::size_t r = 0; r < lse.size(); ++r) empty[r] = std::isinf(lse[r]) && lse[r] < 0;
    return empty;
}

}  // namespace

std::vector<std::string> conventions_for(const std::string& op) {
    if (op == "softmax" || op == "online_softmax" || is_attention(op)) return {"masked_row = zero (default) | nan"};
    return {};
}

void check_conventions(const Conventions& c) {
    for (const auto& [key, value] : c) {
        auto it = accepted().find(key);
        if (it == accepted().end()) throw std::invalid_argument("unknown convention \"" + key + "\" (known: masked_row)");
        bool ok = false;
        std::string list;
        for (const auto& v : it->second) ok = ok || v == value, list += (list.empty() ? "" : ", ") + v;
        if (!ok) throw std::invalid_argument("convention " + key + " = \"" + value + "\": expected one of " + list);
    }
}

void apply_conventions(const std::string& op, const Conventions& c, const std::vector<TensorView>& in,
                       std::vector<Tensor>& rounded, std::vector<std::vector<double>>& exact) {
    check_conventions(c);
    auto it = c.find("masked_row");
    if (it == c.end() || it->second == "zero") return;
    if (op == "softmax" || op == "online_softmax") {
        nan_rows(all_minus_inf_rows(in.at(0)), in.at(0).cols(), rounded.at(0), exact.at(0));
    } else if (is_attention(op)) {
        const std::vector<bool> empty = keyless_rows(exact.at(1));  // before lse itself is rewritten
        nan_rows(empty, rounded.at(0).view().cols(), rounded.at(0), exact.at(0));
        nan_rows(empty, 1, rounded.at(1), exact.at(1));
    }
}

namespace {

// The formulas of docs/activation.md and docs/gated.md as written, in double.
double lit_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double lit_silu(double x) { return x * lit_sigmoid(x); }
double lit_gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double lit_gelu_tanh(double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double lit_softcap(double x, double beta) { return beta * std::tanh(x / beta); }

}  // namespace

std::optional<double> ieee_special(const std::string& op, const Params& p, const std::vector<double>& args) {
    if (std::none_of(args.begin(), args.end(), [](double v) { return std::isinf(v); })) return std::nullopt;
    const double x = args.at(0);
    if (op == "sigmoid") return lit_sigmoid(x);
    if (op == "silu") return lit_silu(x);
    if (op == "gelu_erf") return lit_gelu_erf(x);
    if (op == "gelu_tanh") return lit_gelu_tanh(x);
    if (op == "softplus") return std::log(1 + std::exp(x));
    if (op == "softcap") return lit_softcap(x, p.get("beta", 30));
    if (args.size() < 2) return std::nullopt;
    const double u = args[1];
    if (op == "swiglu") return lit_silu(x) * u;
    if (op == "geglu") return lit_gelu_erf(x) * u;
    if (op == "situ_glu")
        return lit_softcap(x, p.get("beta1", 4)) * lit_sigmoid(x) * lit_softcap(u, p.get("beta2", 25));
    if (op == "swiglu_clamp") {
        const double limit = p.get("limit", 10);
        return lit_silu(std::fmin(x, limit)) * std::fmax(std::fmin(u, limit), -limit);
    }
    return std::nullopt;
}

}  // namespace conform::oracle
