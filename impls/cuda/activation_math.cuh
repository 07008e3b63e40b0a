// The activations as device functors in double (activation.cu, and the
// gate factors of gated.cu): the CPU kernels' scalar formulas
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

}  // namespace conform::CONFORM_CUDA_NS
