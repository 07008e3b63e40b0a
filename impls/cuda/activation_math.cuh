// The activations and the gated products as device functors in double
// (activation.cu, gated.cu, the benchmarks): the CPU kernels' scalar formulas
// (impls/cpu/simd_math.hpp), special values included.
#pragma once
#include <cfloat>

#include "impls/cuda/cuda_compat.cuh"

namespace conform::CONFORM_CUDA_NS {

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluTanhCubic = 0.044715;

struct Sigmoid {
    __device__ double operator()(double x) const { return 1.0 / (1.0 + exp(-x)); }
};
// fmax(x, -DBL_MAX): x = -inf gives -DBL_MAX / inf = -0, not -inf / inf = NaN.
struct Silu {
    __device__ double operator()(double x) const { return fmax(x, -DBL_MAX) / (1.0 + exp(-x)); }
};
struct GeluErf {
    __device__ double operator()(double x) const { return fmax(x, -DBL_MAX) * 0.5 * erfc(-x * kSqrt1_2); }
};
struct GeluTanh {
    __device__ double operator()(double x) const {
        const double z2 = 2.0 * kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x);
        return fmax(x, -DBL_MAX) / (1.0 + exp(-z2));
    }
};
struct Softplus {
    __device__ double operator()(double x) const { return fmax(x, 0.0) + log1p(exp(-fabs(x))); }
};
struct Softcap {
    double beta;
    __device__ double operator()(double x) const { return beta * tanh(x / beta); }
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
};

struct SituGlu {
    Softcap cap1, cap2;
    __device__ double operator()(double g, double u) const { return cap1(g) * Sigmoid{}(g) * cap2(u); }
};

// silu(min(g, L)) * clamp(u, -L, L), NaN kept as std::min and std::clamp keep it.
struct SwigluClamp {
    double limit;
    __device__ double operator()(double g, double u) const {
        const double gc = limit < g ? limit : g;
        const double uc = u < -limit ? -limit : (limit < u ? limit : u);
        return Glu<Silu>{}(gc, 1.0) * uc;
    }
};

}  // namespace conform::CONFORM_CUDA_NS
