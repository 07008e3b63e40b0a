// The activations and the gated products as device functors (activation.cu,
// gated.cu, the benchmarks): operator() in double, the CPU kernels' scalar
// formulas (impls/cpu/simd_math.hpp), special values included; f() in float
// for the 16-bit formats, within 2^-14 relative of the exact value wherever
// the result is a normal number of the storage format (docs/cuda.md, "The
// float path of the 16-bit formats"), NaN where it cannot say (softcap's β
// out of range).  Special inputs and results near overflow take operator().
#pragma once
#include <cfloat>

#include "impls/cuda/cuda_compat.cuh"

namespace conform::CONFORM_CUDA_NS {

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluTanhCubic = 0.044715;

// A factor of a gated product below float's normal range (zero included)
// has lost its relative accuracy, which the product with a large u would
// show: the float path declines (NaN sends the element to the double path).
__device__ __forceinline__ float factor(float a) { return fabsf(a) >= 0x1p-126f ? a : NAN; }

// σ(z) without overflow: e = exp(−|z|) ≤ 1, so a large |z| underflows e
// (gradually) instead of overflowing 1 + exp(−z).
__device__ __forceinline__ float sigmoid_f(float z) {
    const float e = expf(-fabsf(z));
    return z >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

struct Sigmoid {
    __device__ double operator()(double x) const { return 1.0 / (1.0 + exp(-x)); }
    __device__ float f(float x) const { return sigmoid_f(x); }
};
// fmax(x, -DBL_MAX): x = -inf gives -DBL_MAX / inf = -0, not -inf / inf = NaN.
struct Silu {
    __device__ double operator()(double x) const { return fmax(x, -DBL_MAX) / (1.0 + exp(-x)); }
    __device__ float f(float x) const { return x * sigmoid_f(x); }
};
struct GeluErf {
    __device__ double operator()(double x) const { return fmax(x, -DBL_MAX) * 0.5 * erfc(-x * kSqrt1_2); }
    __device__ float f(float x) const { return x * 0.5f * erfcf(-x * static_cast<float>(kSqrt1_2)); }
};
struct GeluTanh {
    __device__ double operator()(double x) const {
        const double z2 = 2.0 * kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x);
        return fmax(x, -DBL_MAX) / (1.0 + exp(-z2));
    }
    __device__ float f(float x) const {
        const float c = static_cast<float>(kGeluTanhCubic), k = static_cast<float>(2.0 * kSqrt2OverPi);
        return x * sigmoid_f(k * (x + c * x * x * x));
    }
};
struct Softplus {
    __device__ double operator()(double x) const { return fmax(x, 0.0) + log1p(exp(-fabs(x))); }
    __device__ float f(float x) const { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }
};
struct Softcap {
    double beta;
    __device__ double operator()(double x) const { return beta * tanh(x / beta); }
    // β rounded to float moves the result by 2^-24 relative; outside
    // [2^-60, 2^60] (or not positive) the float path declines.
    __device__ float f(float x) const {
        if (!(beta >= 0x1p-60 && beta <= 0x1p60)) return NAN;
        const float b = static_cast<float>(beta);
        return b * tanhf(x / b);
    }
};

// a(g) * u, where a(g) in double may have rounded to g itself (silu and
// gelu for g beyond ~37, where the true value lies just below g) or to 0
// (far left tail, where it is a tiny number of g's sign): nudging it one
// double ulp that way keeps the product on the right side of a rounding
// midpoint that g * u may land on exactly.
template <class Act>
struct Glu {
    Act act;
    __device__ double operator()(double g, double u) const {
        double a = act(g);
        if (a == g && g > 0 && isfinite(g)) a = nextafter(a, 0.0);
        if (a == 0 && g != 0 && isfinite(g)) a = copysign(4.9406564584124654e-324, g);
        return a * u;
    }
    // 2^-21 off at most before the product: no midpoint needs the nudge.
    __device__ float f(float g, float u) const { return factor(act.f(g)) * u; }
};

struct SituGlu {
    Softcap cap1, cap2;
    __device__ double operator()(double g, double u) const { return cap1(g) * Sigmoid{}(g) * cap2(u); }
    __device__ float f(float g, float u) const {
        return factor(factor(cap1.f(g)) * factor(sigmoid_f(g))) * factor(cap2.f(u));
    }
};

// silu(min(g, L)) * clamp(u, -L, L), NaN kept as std::min and std::clamp keep it.
struct SwigluClamp {
    double limit;
    __device__ double operator()(double g, double u) const {
        const double gc = limit < g ? limit : g;
        const double uc = u < -limit ? -limit : (limit < u ? limit : u);
        return Glu<Silu>{}(gc, 1.0) * uc;
    }
    // The clamps compare against the limit in double; a clamped value is the
    // limit rounded to float (2^-24 relative).
    __device__ float f(float g, float u) const {
        const double gc = limit < g ? limit : g;
        const double uc = u < -limit ? -limit : (limit < u ? limit : u);
        return factor(Silu{}.f(static_cast<float>(gc))) * static_cast<float>(uc);
    }
};

}  // namespace conform::CONFORM_CUDA_NS
