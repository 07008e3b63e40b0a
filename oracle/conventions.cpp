#include "oracle/conventions.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace conform::oracle {
namespace {

void ieee_elements(const std::string& op, const Params& p, const std::vector<TensorView>& in, Tensor& rounded,
                   std::vector<double>& exact);

bool is_attention(const std::string& op) {
    return op == "attention" || op == "qk_norm_attention" || op == "gated_attention" || op == "sink_attention";
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

void apply_conventions(const std::string& op, const Conventions& c, const Params& p, const std::vector<TensorView>& in,
                       std::vector<Tensor>& rounded, std::vector<std::vector<double>>& exact) {
    check_conventions(c);
    if (convention(c, "special_values") == "ieee") ieee_elements(op, p, in, rounded.at(0), exact.at(0));
    if (convention(c, "masked_row") != "nan") return;
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
    if (op == "geglu") return (p.get("convention.gelu", 0) != 0 ? lit_gelu_tanh(x) : lit_gelu_erf(x)) * u;
    if (op == "situ_glu")
        return lit_softcap(x, p.get("beta1", 4)) * lit_sigmoid(x) * lit_softcap(u, p.get("beta2", 25));
    if (op == "swiglu_clamp") {
        const double limit = p.get("limit", 10);
        return lit_silu(std::fmin(x, limit)) * std::fmax(std::fmin(u, limit), -limit);
    }
    return std::nullopt;
}

namespace {

// special_values = ieee: every element with an infinite argument becomes the
// literal IEEE evaluation, exact and rounded alike (a special value or a
// finite limit, both exactly representable or compared as classes).
void ieee_elements(const std::string& op, const Params& p, const std::vector<TensorView>& in, Tensor& rounded,
                   std::vector<double>& exact) {
    for (std::int64_t i = 0; i < rounded.numel(); ++i) {
        std::vector<double> args;
        for (const TensorView& v : in) args.push_back(v.value(i));
        const auto lit = ieee_special(op, p, args);
        if (!lit) continue;
        rounded.set_value(i, *lit);
        exact[static_cast<std::size_t>(i)] = *lit;
    }
}

}  // namespace

}  // namespace conform::oracle
