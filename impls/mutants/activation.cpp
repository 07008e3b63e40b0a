// Mutants of the activation family: simple scalar kernels, each with exactly
// one realistic bug (DESIGN.md "Mutation testing").  They run through the same
// elementwise driver as the real kernels, so only the formula differs.
#include <cmath>

#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/simd_math.hpp"

namespace conform {
namespace {

using namespace cpu;

// gelu_erf implemented with the tanh approximation (the two differ by up to
// ~1e-3 absolute near |x| ~ 2, and by large factors in the negative tail).
struct GeluErfAsTanh {
    explicit GeluErfAsTanh(const Params&) {}
    static double scalar(double x) { return GeluTanhFn::scalar(x); }
};

// softcap written as x * tanh(x / beta): right near 0 only to first order,
// unbounded for large |x| instead of capped at beta.
struct SoftcapXTanh {
    double beta;
    explicit SoftcapXTanh(const Params& p) : beta(p.get("beta", 30)) {}
    double scalar(double x) const { return x * std::tanh(x / beta); }
};

// softcap with the cap hard-coded to the common default 30: right for
// default parameters, wrong for every other beta.
struct SoftcapBetaIgnored {
    explicit SoftcapBetaIgnored(const Params&) {}
    static double scalar(double x) { return 30.0 * std::tanh(x / 30.0); }
};

// The "overflow-safe" rewrite sigmoid(x) = 1 - sigmoid(-x) for x < 0, in
// float: it cancels catastrophically (sigmoid(-20) comes out 0, sigmoid(-10)
// with ~7 bits right) where e^x / (1 + e^x) would have been exact-ish.
struct SigmoidCancellation {
    explicit SigmoidCancellation(const Params&) {}
    static double scalar(double x) {
        const float xf = static_cast<float>(x);
        if (xf >= 0) return 1.0f / (1.0f + std::exp(-xf));
        return 1.0f - 1.0f / (1.0f + std::exp(xf));
    }
};

// softplus as log1p(exp(x)) in float without the x > 0 branch: exp overflows
// for x > 88.7 and the result is +inf instead of x.
struct SoftplusOverflow {
    explicit SoftplusOverflow(const Params&) {}
    static double scalar(double x) { return std::log1p(std::exp(static_cast<float>(x))); }
};

// The value of format f nearest v toward zero (truncation of the
// significand): within 1 ulp of v everywhere, but every inexact result lies
// on the same side, toward zero.
double toward_zero(Format f, double v) {
    if (!std::isfinite(v) || v == 0) return v;
    const std::uint64_t bits = encode(f, v);
    const double r = decode(f, bits);
    return std::fabs(r) <= std::fabs(v) ? r : decode(f, bits - 1);  // sign-magnitude: one step toward zero
}

// silu rounded into bf16 by truncation, as a kernel that drops the low 16
// bits of its float result does (bf16 = the high half of an fp32 pattern).
struct SiluTruncatedBf16 {
    explicit SiluTruncatedBf16(const Params&) {}
    static double scalar(double x) { return toward_zero(Format::bf16, SiluFn::scalar(x)); }
};

// sigmoid and silu evaluated in plain float for an fp32 output, the usual
// 8-lane shortcut: e^-|x|, 1 + t and the quotient each rounded to float
// (~2^-22 relative before the store, where 1 ulp needs < 2^-25).  The
// float-float path of cpu.simd (simd_math.hpp, vff) exists to avoid this.
float sigmoid_in_float(float x) {
    const float t = std::exp(-std::fabs(x)), d = 1.0f + t;
    return (x >= 0 ? 1.0f : t) / d;
}
struct SigmoidPlainFloat {
    explicit SigmoidPlainFloat(const Params&) {}
    static double scalar(double x) { return sigmoid_in_float(static_cast<float>(x)); }
};
struct SiluPlainFloat {
    explicit SiluPlainFloat(const Params&) {}
    static double scalar(double x) {
        const float xf = static_cast<float>(x);
        return xf * sigmoid_in_float(xf);
    }
};

// gelu_tanh with its exponent 2z = x (A + B x^2) in plain float and the rest
// exact: e^-|2z| turns 2z's ~2^-23 relative rounding into |2z| 2^-23 relative
// error (several ulps for x around -3).  The float-float path of cpu.simd
// (vff::gelu_tanh_arg) exists to avoid this.
struct GeluTanhPlainFloatArg {
    explicit GeluTanhPlainFloatArg(const Params&) {}
    static double scalar(double x) {
        const float xf = static_cast<float>(x);
        const float a = static_cast<float>(2 * kSqrt2OverPi), b = static_cast<float>(2 * kSqrt2OverPi * kGeluTanhCubic);
        const float z2 = xf * (a + b * (xf * xf));
        return x / (1.0 + std::exp(-static_cast<double>(z2)));
    }
};

// softcap in plain float for an fp32 output, the usual 8-lane shortcut:
// a = x RN(1/beta), tanhf(a) and beta t each rounded to float (~2^-22
// relative before the store, where 1 ulp needs < 2^-25).  The float-float
// path of cpu.simd (vff::softcap_abs: a = x/beta in float-float, tanh with a
// residual-corrected quotient) exists to avoid this.
struct SoftcapPlainFloat {
    float beta, inv_beta;
    explicit SoftcapPlainFloat(const Params& p)
        : beta(static_cast<float>(p.get("beta", 30))), inv_beta(static_cast<float>(1.0 / p.get("beta", 30))) {}
    double scalar(double x) const {
        const float a = static_cast<float>(x) * inv_beta;
        return beta * std::tanh(a);
    }
};

// softplus with t = e^-|x|, log1p(t) and the sum each in plain float, the
// usual shortcut for an fp32 output: log1p(t) = 2 atanh(s), s = t / (2 + t),
// by its series in float (truncation < 2^-36; the roundings of t, s, the
// series and 2 s p leave ~2^-22 relative before the store, where 1 ulp needs
// < 2^-25).  The float-float path of cpu.simd (vff::softplus_ff) exists to
// avoid this.
struct SoftplusPlainFloat {
    explicit SoftplusPlainFloat(const Params&) {}
    static double scalar(double x) {
        const float xf = static_cast<float>(x);
        const float t = std::exp(-std::fabs(xf));
        const float s = t / (2.0f + t), s2 = s * s;
        float p = 1.0f / 19;
        for (int k = 17; k >= 1; k -= 2) p = p * s2 + 1.0f / static_cast<float>(k);
        return std::fmax(xf, 0.0f) + 2.0f * s * p;
    }
};

}  // namespace

void register_mutants_activation(Registry& r) {
    register_mutant<Format::fp32, 1, GeluErfAsTanh>(r, "gelu_erf", "tanh_approx", "11 wrong function variant",
                                                    "gelu_erf computed with the tanh approximation");
    register_mutant<Format::bf16, 1, GeluErfAsTanh>(r, "gelu_erf", "tanh_approx", "11 wrong function variant",
                                                    "gelu_erf computed with the tanh approximation");
    register_mutant<Format::fp16, 1, SoftcapXTanh>(r, "softcap", "x_tanh", "11 wrong function variant",
                                                   "softcap as x * tanh(x / beta) instead of beta * tanh(x / beta)");
    register_mutant<Format::fp32, 1, SoftcapBetaIgnored>(r, "softcap", "beta_ignored", "12 silently ignored parameter",
                                                         "softcap ignores its beta parameter and always caps at 30");
    register_mutant<Format::fp32, 1, SigmoidCancellation>(
        r, "sigmoid", "one_minus", "1 exp-range overflow",
        "overflow-avoiding rewrite 1 - sigmoid(-x) for x < 0, in float: cancels to 0 below x ~ -17", Format::fp32);
    register_mutant<Format::fp32, 1, SigmoidPlainFloat>(
        r, "sigmoid", "plain_float", "6 low-precision accumulation/storage",
        "sigmoid of an fp32 input evaluated in plain float (e^-|x|, 1 + t, quotient each rounded)", Format::fp32);
    register_mutant<Format::fp32, 1, SiluPlainFloat>(
        r, "silu", "plain_float", "6 low-precision accumulation/storage",
        "silu of an fp32 input evaluated in plain float (e^-|x|, 1 + t, quotient, product each rounded)", Format::fp32);
    register_mutant<Format::fp32, 1, GeluTanhPlainFloatArg>(
        r, "gelu_tanh", "plain_float_arg", "6 low-precision accumulation/storage",
        "gelu_tanh of an fp32 input with its exponent 2z = x (A + B x^2) rounded to float (the rest exact)");
    register_mutant<Format::fp32, 1, SoftcapPlainFloat>(
        r, "softcap", "plain_float", "6 low-precision accumulation/storage",
        "softcap of an fp32 input evaluated in plain float (x * RN(1/beta), tanhf, times beta, each rounded)",
        Format::fp32);
    register_mutant<Format::fp32, 1, SoftplusPlainFloat>(
        r, "softplus", "plain_float", "6 low-precision accumulation/storage",
        "softplus of an fp32 input evaluated in plain float (e^-|x|, log1p(t) as a float atanh series, the sum)", Format::fp32);
    register_mutant<Format::bf16, 1, SiluTruncatedBf16>(
        r, "silu", "truncated", "18 rounding mode",
        "silu rounded into bf16 by truncation (the low half of the fp32 pattern dropped): within 1 ulp everywhere, "
        "every inexact result toward zero");
    register_mutant<Format::fp32, 1, SoftplusOverflow>(r, "softplus", "exp_overflow", "1 exp-range overflow",
                                                       "log1p(exp(x)) in float: +inf for x > 88.7 instead of x",
                                                       Format::fp32);
}

}  // namespace conform
