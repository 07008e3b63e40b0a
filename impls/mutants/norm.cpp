// Deliberately wrong norm kernels (DESIGN.md, "Mutation testing"): each is
// the plain formula with exactly one bug from a public kernel.  Everything
// except the bug runs in double, so a mutant has no overflow, underflow or
// accumulation error of its own and can only be killed by its bug.  The
// exception is one_pass_var, whose bug *is* fp32 arithmetic.
#include <cmath>
#include <string>
#include <vector>

#include "impls/registry.hpp"

namespace conform {
namespace {

enum class Bug {
    eps_outside,         // w x / (sqrt(mean x^2) + eps)
    eps_dropped,         // w x / sqrt(mean x^2)
    fp16_sum,            // sum of squares accumulated (and squared) in fp16
    zc_as_w,             // zero_centered = 1 ignored: w applied, not (1 + w)
    zc_two_plus_w,       // zero_centered = 1 applied as (2 + w)
    cast_before_weight,  // (x / r) rounded to the storage format, then * w rounded again
    unbiased_var,        // layer_norm variance divided by n - 1
    one_pass_var,        // layer_norm variance as E[x^2] - E[x]^2 in fp32
};

double round_to(Format f, double v) { return decode(f, encode(f, v)); }

// One row: x, w, b are exact input values; returns y before the final rounding.
struct Row {
    std::vector<double> x, w, b;
};

double sum_squares(const std::vector<double>& x, double mu, Bug bug) {
    double s = 0;
    for (double v : x) {
        const double d = v - mu;
        s = bug == Bug::fp16_sum ? round_to(Format::fp16, s + round_to(Format::fp16, d * d)) : s + d * d;
    }
    return s;
}

// sqrt(m + eps), or the bug's version of it.
double denom(double m, double eps, Bug bug) {
    if (bug == Bug::eps_outside) return std::sqrt(m) + eps;
    if (bug == Bug::eps_dropped) return std::sqrt(m);
    return std::sqrt(m + eps);
}

double weight(double w, bool zc, Bug bug) {
    if (!zc || bug == Bug::zc_as_w) return w;
    return (bug == Bug::zc_two_plus_w ? 2 : 1) + w;
}

// layer_norm's mean and variance; the one-pass form in fp32, as buggy kernels do.
void moments(const std::vector<double>& x, Bug bug, double& mu, double& var) {
    const double n = static_cast<double>(x.size());
    if (bug == Bug::one_pass_var) {
        float s = 0, s2 = 0;
        for (double v : x) {
            const float f = static_cast<float>(v);
            s += f;
            s2 += f * f;
        }
        const float m = s / static_cast<float>(n);
        mu = m;
        var = std::fmax(s2 / static_cast<float>(n) - m * m, 0.0f);
        return;
    }
    mu = 0;
    for (double v : x) mu += v;
    mu /= n;
    var = sum_squares(x, mu, bug) / (bug == Bug::unbiased_var ? n - 1 : n);
}

std::vector<double> mutant_row(const std::string& op, const Row& r, const Params& p, Format f, Bug bug) {
    const std::size_t n = r.x.size();
    const bool zc = p.get("zero_centered", 0) != 0;
    double mu = 0, r_den;
    if (op == "layer_norm") {
        double var;
        moments(r.x, bug, mu, var);
        r_den = denom(var, p.get("eps", 1e-5), bug);
    } else if (op == "rms_norm") {
        r_den = denom(sum_squares(r.x, 0, bug) / static_cast<double>(n), p.get("eps", 1e-6), bug);
    } else {
        r_den = denom(sum_squares(r.x, 0, bug), p.get("eps", 1e-6), bug);
    }
    std::vector<double> y(n);
    for (std::size_t i = 0; i < n; ++i) {
        double t = (r.x[i] - mu) / r_den;
        if (bug == Bug::cast_before_weight) t = round_to(f, t);
        y[i] = r.w.empty() ? t : t * weight(r.w[i], zc, bug);
        if (!r.b.empty()) y[i] += r.b[i];
    }
    return y;
}

void run_mutant(const std::string& op, Format f, Bug bug, const KernelCall& call) {
    const TensorView& x = call.in.at(0);
    const TensorView& y = call.out.at(0);
    const std::int64_t n = x.cols();
    Row r;
    r.x.resize(n);
    for (std::size_t k = 1; k < call.in.size(); ++k) {
        std::vector<double>& v = k == 1 ? r.w : r.b;
        for (std::int64_t i = 0; i < n; ++i) v.push_back(call.in[k].value(i));
    }
    for (std::int64_t row = 0; row < x.rows(); ++row) {
        for (std::int64_t i = 0; i < n; ++i) r.x[i] = x.value(row * n + i);
        const std::vector<double> out = mutant_row(op, r, call.params, f, bug);
        for (std::int64_t i = 0; i < n; ++i) y.set_bits(row * n + i, encode(f, out[i]));
    }
}

void add(Registry& reg, const std::string& op, const char* bug_name, Bug bug, Format f, const char* bug_class,
         const char* what) {
    reg.add(mutant_info(op, bug_name, f, Format::fp32, bug_class, what,
                        [op, f, bug](const KernelCall& c) { run_mutant(op, f, bug, c); }));
}

}  // namespace

void register_mutants_norm(Registry& r) {
    using F = Format;
    const char* eps_out = "eps added outside the square root: w x / (sqrt(mean x^2) + eps)";
    add(r, "rms_norm", "eps_outside", Bug::eps_outside, F::fp16, "8 epsilon placement", eps_out);
    add(r, "rms_norm", "eps_outside", Bug::eps_outside, F::fp32, "8 epsilon placement", eps_out);
    add(r, "rms_norm", "eps_dropped", Bug::eps_dropped, F::fp32, "8 epsilon placement",
        "eps ignored: w x / sqrt(mean x^2) (NaN on an all-zero row, wrong where mean x^2 ~ eps)");
    add(r, "rms_norm", "fp16_sum", Bug::fp16_sum, F::fp16, "6 low-precision accumulation",
        "x^2 and every partial sum of squares rounded to fp16: overflows to Inf above 65504, stagnates on long rows");
    add(r, "rms_norm", "zc_as_w", Bug::zc_as_w, F::bf16, "9 scale/offset convention",
        "zero_centered = 1 ignored: weight applied as w instead of (1 + w)");
    add(r, "rms_norm", "zc_two_plus_w", Bug::zc_two_plus_w, F::fp16, "9 scale/offset convention",
        "zero_centered = 1 applied as (2 + w) instead of (1 + w)");
    const char* cast = "x / rms rounded to the storage format before the weight multiply, then rounded again";
    add(r, "rms_norm", "cast_before_weight", Bug::cast_before_weight, F::fp16, "10 cast order", cast);
    add(r, "rms_norm", "cast_before_weight", Bug::cast_before_weight, F::bf16, "10 cast order", cast);
    const char* l2_eps = "eps added outside the square root: x / (sqrt(sum x^2) + eps)";
    add(r, "l2_norm", "eps_outside", Bug::eps_outside, F::fp32, "8 epsilon placement", l2_eps);
    add(r, "l2_norm", "eps_outside", Bug::eps_outside, F::fp16, "8 epsilon placement", l2_eps);
    add(r, "layer_norm", "unbiased_var", Bug::unbiased_var, F::fp32, "9 scale/offset convention",
        "unbiased variance (divide by n - 1, torch.var's default) instead of the biased one (n)");
    add(r, "layer_norm", "one_pass_var", Bug::one_pass_var, F::fp32, "6 low-precision accumulation",
        "one-pass variance E[x^2] - E[x]^2 in fp32 (clamped at 0): cancels catastrophically when |mean| >> std");
}

}  // namespace conform
