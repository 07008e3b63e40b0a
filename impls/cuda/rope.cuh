// The RoPE kernel and host call (rope.cu registers them; the GPU mutants of
// impls/mutants/cuda_rope.cu instantiate them with one bug).
//
// One thread per position and pair (interleaved (2j, 2j+1) or half-split
// (j, j + r/2)), for every head: it forms θ_j = (b s)^(−2j/r) and the angle
// (offset + l) θ_j in double once, takes sincos in double (full range
// reduction: the angle's own rounding is the only position-dependent
// error, 2^-53 relative; a frequency scaling forms θ'_j by rope_scaled_theta
// and attention_factor scales cos and sin) and rotates in double, rounding once; a dim past rotary_dim is copied (bit-identical when the
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
    RopeScalingArgs sc{};  // frequency scaling (rope_scaled_theta) and attention_factor
};

template <class Bug>
__device__ __forceinline__ void angle_sincos(double m, int j, const RopeShape& a, double* s, double* c) {
    const double theta = rope_scaled_theta(pow(a.base, -2.0 * j / a.r), j, a.sc);
    if constexpr (Bug::kFastSincos) {
        const float angle = static_cast<float>(m) * static_cast<float>(theta);
        *s = __sinf(angle), *c = __cosf(angle);
    } else {
        sincos(m * theta, s, c);
    }
    *s *= a.sc.attention_factor, *c *= a.sc.attention_factor;
}

// One thread per (position l, pair j), grid-stride: the angle and its sincos
// depend on (l, j) alone, so they are formed once and applied to that pair
// in every head (x is [H, L, D]); a dim past rotary_dim is one item of its
// own, copied in every head.  Neighbouring threads take neighbouring pairs,
// so each head's row is read and written contiguously across a warp.
template <class S, class Bug = NoBug>
__global__ void rope_kernel(const S* __restrict__ x, S* __restrict__ y, RopeShape a) {
    const int half = a.r / 2;
    const int per_pos = half + (a.D - a.r);  // pairs, then passed-through dims
    const long long items = static_cast<long long>(a.L) * per_pos, heads = a.rows / a.L;
    const long long head_stride = static_cast<long long>(a.L) * a.D;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < items; i += stride) {
        const int l = static_cast<int>(i / per_pos), k = static_cast<int>(i % per_pos);
        const long long row0 = static_cast<long long>(l) * a.D;
        if (k >= half) {
            const int d = a.r + (k - half);
            for (long long h = 0; h < heads; ++h) y[h * head_stride + row0 + d] = store<S>(load(x[h * head_stride + row0 + d]));
            continue;
        }
        const int da = a.pairing == 0 ? 2 * k : k, db = a.pairing == 0 ? 2 * k + 1 : k + half;
        double s, c;
        angle_sincos<Bug>(a.offset + static_cast<double>(l), k, a, &s, &c);
        for (long long h = 0; h < heads; ++h) {
            const long long at = h * head_stride + row0;
            const double xa = load(x[at + da]), xb = load(x[at + db]);
            y[at + da] = store<S>(xa * c - xb * s);
            y[at + db] = store<S>(xa * s + xb * c);
        }
    }
}

// CUDA's double pow is within 2 ulp (the table model's default: one): the
// bound's angle takes the declared ulps (oracle::rope_pow_units).
inline constexpr double kCudaPowUlps = 2;
inline KernelInfo rope_info(KernelInfo k) {
    k.declared["pow_ulps"] = kCudaPowUlps;
    return k;
}

template <class S, class Bug = NoBug>
void launch_rope(const S* x, S* y, const RopeShape& a, const Launch& l, cudaStream_t s) {
    auto* kernel_fn = rope_kernel<S, Bug>;
    CONFORM_LAUNCH(kernel_fn, dim3(blocks_for(static_cast<long long>(a.L) * (a.r / 2 + a.D - a.r), l)), dim3(l.threads), 0, s)(x, y, a);
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
    a.sc = p.scaling;
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
