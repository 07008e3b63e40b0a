// The RoPE kernel and host call (rope.cu registers them; the GPU mutants of
// impls/mutants/cuda_rope.cu instantiate them with one bug).
//
// One thread per output element, grid-stride over x [H, L, D]: a rotated
// dim finds its pair (interleaved (2j, 2j+1) or half-split (j, j + r/2)),
// forms θ_j = (b s)^(−2j/r) and the angle (offset + l) θ_j in double, takes
// sincos in double (full range reduction: the angle's own rounding is the
// only position-dependent error, 2^-53 relative) and rotates in double,
// rounding once; a dim past rotary_dim is copied (bit-identical when the
// formats agree).  Parameters are validated as the CPU kernels do.
#pragma once
#include "impls/cpu/rope.hpp"
#include "impls/cuda/elementwise.cuh"

namespace conform::CONFORM_CUDA_NS {

struct RopeShape {
    long long rows = 0;  // H * L
    int L = 0, D = 0, r = 0, pairing = 0;
    double base = 0;     // b s
    double offset = 0;   // exact: |offset| <= 2^53
};

template <class Bug>
__device__ __forceinline__ void angle_sincos(double m, int j, const RopeShape& a, double* s, double* c) {
    const double theta = pow(a.base, -2.0 * j / a.r);
    if constexpr (Bug::kFastSincos) {
        const float angle = static_cast<float>(m) * static_cast<float>(theta);
        *s = __sinf(angle), *c = __cosf(angle);
    } else {
        sincos(m * theta, s, c);
    }
}

template <class S, class Bug = NoBug>
__global__ void rope_kernel(const S* __restrict__ x, S* __restrict__ y, RopeShape a) {
    const long long n = a.rows * a.D;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    const int half = a.r / 2;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n; i += stride) {
        const int d = static_cast<int>(i % a.D);
        if (d >= a.r) {
            y[i] = store<S>(load(x[i]));
            continue;
        }
        const long long row = i / a.D;
        const bool first = a.pairing == 0 ? d % 2 == 0 : d < half;
        const int j = a.pairing == 0 ? d / 2 : d % half;
        const int da = a.pairing == 0 ? 2 * j : j, db = a.pairing == 0 ? 2 * j + 1 : j + half;
        const double xa = load(x[row * a.D + da]), xb = load(x[row * a.D + db]);
        double s, c;
        angle_sincos<Bug>(a.offset + static_cast<double>(row % a.L), j, a, &s, &c);
        y[i] = store<S>(first ? xa * c - xb * s : xa * s + xb * c);
    }
}

template <class S, class Bug = NoBug>
void launch_rope(const S* x, S* y, const RopeShape& a, const Launch& l, cudaStream_t s) {
    auto* kernel_fn = rope_kernel<S, Bug>;
    CONFORM_LAUNCH(kernel_fn, dim3(blocks_for(a.rows * a.D, l)), dim3(l.threads), 0, s)(x, y, a);
}

template <class S, class Bug = NoBug>
void run_rope_as(const KernelCall& call, const char* kernel, const Launch& l) {
    const TensorView& xv = call.in[0];
    if (xv.rank != 3) throw std::invalid_argument(std::string(kernel) + ": input 'x' must have rank 3");
    const cpu::RopeArgs p = cpu::rope_args(call.params, xv.dim(2));
    RopeShape a;
    a.L = static_cast<int>(xv.dim(1));
    a.D = static_cast<int>(xv.dim(2));
    a.rows = xv.dim(0) * xv.dim(1);
    a.r = static_cast<int>(p.rotary_dim);
    a.pairing = p.pairing;
    a.base = p.base * p.ntk_scale;
    a.offset = static_cast<double>(p.offset);
    const std::size_t bytes = static_cast<std::size_t>(xv.numel()) * sizeof(S);
    Stream s(kernel);
    DeviceBuffer x(bytes, kernel), y(bytes, kernel);
    poison(y, s.get(), kernel);
    upload(xv, x, s.get(), kernel);
    if (xv.numel() > 0) {
        launch_rope<S, Bug>(x.as<S>(), y.as<S>(), a, l, s.get());
        check_launch(s.get(), kernel);
    }
    download(y, call.out[0], s.get(), kernel);
}

template <class Bug = NoBug>
void run_rope(const KernelCall& c, Format f, const char* kernel, const Launch& l = {}) {
    by_storage(f, [&](auto s) { run_rope_as<decltype(s), Bug>(c, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
