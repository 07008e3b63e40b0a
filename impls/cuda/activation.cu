// CUDA kernels of the activation family (sigmoid, silu, gelu_erf, gelu_tanh,
// softplus, softcap): cuda.<op>.<fmt> for fp32, fp16 and bf16 storage.
//
// Each element is evaluated in double and rounded once into its storage
// format: CUDA's double exp, erfc, log1p and tanh are within a few double
// ulps, so the one final rounding keeps every result within 1 ulp of the
// correctly rounded one (docs/cuda.md, "Meeting the budget"), which the
// single-precision functions (expf: 2 ulp, erff: 2 ulp, tanhf: 2 ulp) cannot
// promise.  The formulas, special values included, are those of the CPU
// kernels' scalar path (impls/cpu/simd_math.hpp).
//
// The loop is grid-stride over 16-byte packs (4 fp32 or 8 fp16/bf16 values
// per load and store), then the tail of fewer than one pack.
#include <cfloat>

#include "impls/cuda/cuda.hpp"
#include "impls/cuda/device_io.cuh"
#include "impls/cuda/elementwise.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

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

template <class Op>
void add(Registry& r, const char* op, const char* what, Op (*make)(const Params&)) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k;
        k.op = op;
        k.name = std::string("cuda.") + op + "." + name(f);
        k.variant = "cuda";
        k.in = k.out = f;
        k.acc = Format::fp64;
        k.backend = CONFORM_CUDA_BACKEND;
        k.description = std::string(what) + " in double, one rounding into " + name(f) + "; 16-byte packs, grid-stride";
        k.fn = [f, make, kernel = k.name](const KernelCall& c) { run_unary(c, f, make(c.params), kernel.c_str()); };
        r.add(std::move(k));
    }
}

template <class Op>
Op plain(const Params&) {
    return Op{};
}
Softcap softcap(const Params& p) { return Softcap{p.get("beta", 30)}; }

}  // namespace

void register_activation(Registry& r) {
    add<Sigmoid>(r, "sigmoid", "1 / (1 + exp(-x))", plain<Sigmoid>);
    add<Silu>(r, "silu", "x / (1 + exp(-x))", plain<Silu>);
    add<GeluErf>(r, "gelu_erf", "x/2 erfc(-x/sqrt 2)", plain<GeluErf>);
    add<GeluTanh>(r, "gelu_tanh", "x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3)))", plain<GeluTanh>);
    add<Softplus>(r, "softplus", "max(x, 0) + log1p(exp(-|x|))", plain<Softplus>);
    add<Softcap>(r, "softcap", "beta tanh(x / beta)", softcap);
}

}  // namespace conform::CONFORM_CUDA_NS
