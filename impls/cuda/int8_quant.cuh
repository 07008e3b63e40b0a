// The INT8 family's kernels around the GEMM (int8_quant.cu registers
// cuda.quantize, cuda.dequantize and cuda.smooth_quant; the GPU mutants of
// impls/mutants/cuda_int8.cu instantiate quantize with one bug).
// docs/int8.md holds the formulas and the budgets; every decision here is
// the CPU kernels' (impls/cpu/int8_gemm.cpp, int8_quant.cpp), so their
// outputs agree bit for bit:
//   quantize     amax per group (tensor, row or column) as a NaN-sticky
//                maximum (exact in any order), s = amax / 127 in FP32 (or the
//                static scale), code = RNE(x / s) with the quotient in double
//                (no false ties: docs/int8.md), clamped to [-127, 127]; 0 for a
//                non-finite x or scale
//   dequantize   y = q * scale in double (exact: 8 + 24 bits), one rounding
//   smooth_quant channel maxima of x (columns) and w (rows), s_j =
//                exp(alpha ln ax - (1 - alpha) ln aw) in double, xs = x (1/s_j)
//                and ws = w s_j in double, one rounding each
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/reduce.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct QuantNoBug {
    static constexpr bool kTiesAway = false;  // codes by round() (half away from zero), not rint()
};

// max |v| over a group, NaN once any element is not finite (the CPU kernels' amax_update).
struct NanMax {
    __device__ float operator()(float a, float b) const { return a != a || b != b ? NAN : fmaxf(a, b); }
};
__device__ __forceinline__ float amax_step(float a, float v) { return isfinite(v) ? NanMax{}(a, fabsf(v)) : NAN; }

// Element e of group g: at g * group_stride + e * elem_stride (tensor: one
// group of every element; rows: contiguous groups; columns: strided).
struct Groups {
    long long count, length, group_stride, elem_stride;
};

inline Groups quant_groups(int axis, long long rows, long long cols) {
    if (axis == 0) return {1, rows * cols, 0, 1};
    if (axis == 1) return {rows, cols, cols, 1};
    return {cols, rows, 1, cols};
}

// One block per group (grid-stride): the group's NaN-sticky amax, then
// s = amax / 127 (FP32 division, correctly rounded) or the static scale.
template <class S>
__global__ void quant_scales(const S* __restrict__ x, Groups g, float fixed, float* __restrict__ scale) {
    for (long long q = blockIdx.x; q < g.count; q += gridDim.x) {
        float a = 0;
        for (long long e = threadIdx.x; e < g.length; e += blockDim.x)
            a = amax_step(a, static_cast<float>(load(x[q * g.group_stride + e * g.elem_stride])));
        a = block_reduce(a, NanMax{}, 0.0f);
        if (threadIdx.x == 0) scale[q] = fixed > 0 ? fixed : a / 127.0f;
    }
}

template <class Bug>
__device__ __forceinline__ signed char quant_code(float x, float s) {
    if (!isfinite(x) || !(s > 0) || !isfinite(s)) return 0;
    const double q = static_cast<double>(x) / static_cast<double>(s);
    const double t = Bug::kTiesAway ? round(q) : rint(q);
    return static_cast<signed char>(fmin(fmax(t, -127.0), 127.0));
}

// Codes and each element's group scale, a thread per element (grid-stride).
template <class S, class Bug>
__global__ void quant_codes(const S* __restrict__ x, const float* __restrict__ scale, int axis, long long rows,
                            long long cols, signed char* __restrict__ q, float* __restrict__ scale_out) {
    const long long n = rows * cols, stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n; i += stride) {
        const float s = scale[axis == 0 ? 0 : axis == 1 ? i / cols : i % cols];
        q[i] = quant_code<Bug>(static_cast<float>(load(x[i])), s);
        scale_out[i] = s;
    }
}

inline int read_axis(const KernelCall& c, const std::string& who) {
    const double axis = c.params.get("axis", 0.0);
    if (axis != 0 && axis != 1 && axis != 2) throw std::invalid_argument(who + ": axis must be 0, 1 or 2");
    return static_cast<int>(axis);
}

template <class S, class Bug = QuantNoBug>
void run_quantize_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const std::string who = kernel;
    if (c.in.size() != 1 || c.out.size() != 2 || c.in[0].rank != 2)
        throw std::invalid_argument(who + ": expects x [rows, cols] -> q, scale");
    const int axis = read_axis(c, who);
    const long long rows = c.in[0].shape[0], cols = c.in[0].shape[1], n = rows * cols;
    const Groups g = quant_groups(axis, rows, cols);
    Stream s(kernel);
    DeviceBuffer x(static_cast<std::size_t>(n) * sizeof(S), kernel), scale(static_cast<std::size_t>(g.count) * 4, kernel);
    DeviceBuffer q(static_cast<std::size_t>(n), kernel), scale_out(static_cast<std::size_t>(n) * 4, kernel);
    upload(c.in[0], x, s.get(), kernel);
    poison(q, s.get(), kernel), poison(scale_out, s.get(), kernel);
    if (n > 0) {
        auto* scales_fn = quant_scales<S>;
        CONFORM_LAUNCH(scales_fn, dim3(static_cast<unsigned>(std::min<long long>(g.count, lc.max_blocks))),
                       dim3(lc.threads), 0, s.get())(x.as<S>(), g, static_cast<float>(c.params.get("scale", 0.0)),
                                                     scale.as<float>());
        check_launch(s.get(), kernel);
        auto* codes_fn = quant_codes<S, Bug>;
        CONFORM_LAUNCH(codes_fn, dim3(blocks_for(n, lc)), dim3(lc.threads), 0, s.get())(
            x.as<S>(), scale.as<float>(), axis, rows, cols, q.as<signed char>(), scale_out.as<float>());
        check_launch(s.get(), kernel);
    }
    download(q, c.out[0], s.get(), kernel);
    download(scale_out, c.out[1], s.get(), kernel);
}

// ---- dequantize -----------------------------------------------------------------

template <class Out>
__global__ void dequant_kernel(const signed char* __restrict__ q, const double* __restrict__ scale, int axis,
                               long long rows, long long cols, Out* __restrict__ y) {
    const long long n = rows * cols, stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n; i += stride)
        y[i] = store<Out>(static_cast<double>(q[i]) * scale[axis == 0 ? 0 : axis == 1 ? i / cols : i % cols]);
}

template <class Out>
void run_dequantize_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const std::string who = kernel;
    if (c.in.size() != 2 || c.out.size() != 1 || c.in[0].rank != 2 || c.in[0].format != Format::int8 || c.in[1].rank != 1)
        throw std::invalid_argument(who + ": expects int8 q [rows, cols] and scale [groups] -> y");
    const int axis = read_axis(c, who);
    const long long rows = c.in[0].shape[0], cols = c.in[0].shape[1], n = rows * cols;
    const long long groups = axis == 0 ? 1 : axis == 1 ? rows : cols;
    if (c.in[1].shape[0] != groups) throw std::invalid_argument(who + ": scale has the wrong length for the axis");
    // The scales as exact doubles, whatever their format.
    std::vector<double> host(static_cast<std::size_t>(groups));
    for (long long i = 0; i < groups; ++i) host[static_cast<std::size_t>(i)] = c.in[1].value(i);
    Stream s(kernel);
    DeviceBuffer q(static_cast<std::size_t>(n), kernel), scale(host.size() * 8, kernel), y(static_cast<std::size_t>(n) * sizeof(Out), kernel);
    upload(c.in[0], q, s.get(), kernel);
    check(cudaMemcpyAsync(scale.as<void>(), host.data(), host.size() * 8, cudaMemcpyHostToDevice, s.get()), "cudaMemcpyAsync", kernel);
    poison(y, s.get(), kernel);
    if (n > 0) {
        auto* kernel_fn = dequant_kernel<Out>;
        CONFORM_LAUNCH(kernel_fn, dim3(blocks_for(n, lc)), dim3(lc.threads), 0, s.get())(
            q.as<signed char>(), scale.as<double>(), axis, rows, cols, y.as<Out>());
        check_launch(s.get(), kernel);
    }
    download(y, c.out[0], s.get(), kernel);
}

// ---- smooth_quant ---------------------------------------------------------------

// A thread per channel j (grid-stride): the maxima of column j of x [T, C]
// and row j of w [C, N], then s_j and 1 / s_j in double (1 for a zero
// channel, NaN for a non-finite one), s_j stored in FP32.
template <class S>
__global__ void smooth_factors(const S* __restrict__ x, const S* __restrict__ w, long long t, long long c, long long n,
                               double alpha, double* __restrict__ sd, double* __restrict__ rd, float* __restrict__ s_out) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long j = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; j < c; j += stride) {
        float ax = 0, aw = 0;
        for (long long i = 0; i < t; ++i) ax = amax_step(ax, static_cast<float>(load(x[i * c + j])));
        for (long long p = 0; p < n; ++p) aw = amax_step(aw, static_cast<float>(load(w[j * n + p])));
        double f = 1;
        if (ax != ax || aw != aw) f = NAN;
        else if (ax != 0 && aw != 0) f = exp(alpha * log(static_cast<double>(ax)) - (1 - alpha) * log(static_cast<double>(aw)));
        sd[j] = f, rd[j] = 1 / f;
        s_out[j] = static_cast<float>(f);
    }
}

// xs = x (1 / s_j) and ws = w s_j, a thread per element of both.
template <class S>
__global__ void smooth_apply(const S* __restrict__ x, const S* __restrict__ w, const double* __restrict__ sd,
                             const double* __restrict__ rd, long long t, long long c, long long n, S* __restrict__ xs,
                             S* __restrict__ ws) {
    const long long nx = t * c, total = nx + c * n, stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total; i += stride) {
        if (i < nx) xs[i] = store<S>(load(x[i]) * rd[i % c]);
        else ws[i - nx] = store<S>(load(w[i - nx]) * sd[(i - nx) / n]);
    }
}

template <class S>
void run_smooth_quant_as(const KernelCall& k, const char* kernel, const Launch& lc) {
    const std::string who = kernel;
    if (k.in.size() != 2 || k.out.size() != 3 || k.in[0].rank != 2 || k.in[1].rank != 2 || k.in[1].shape[0] != k.in[0].shape[1])
        throw std::invalid_argument(who + ": expects x [T, C] and w [C, N] -> xs, ws, s");
    const double alpha = k.params.get("alpha", 0.5);
    if (!(alpha >= 0 && alpha <= 1)) throw std::invalid_argument(who + ": alpha must be in [0, 1]");
    const long long t = k.in[0].shape[0], c = k.in[0].shape[1], n = k.in[1].shape[1];
    Stream s(kernel);
    DeviceBuffer x(static_cast<std::size_t>(t * c) * sizeof(S), kernel), w(static_cast<std::size_t>(c * n) * sizeof(S), kernel);
    DeviceBuffer xs(x.bytes(), kernel), ws(w.bytes(), kernel), s_out(static_cast<std::size_t>(c) * 4, kernel);
    DeviceBuffer sd(static_cast<std::size_t>(c) * 8, kernel), rd(static_cast<std::size_t>(c) * 8, kernel);
    upload(k.in[0], x, s.get(), kernel), upload(k.in[1], w, s.get(), kernel);
    poison(xs, s.get(), kernel), poison(ws, s.get(), kernel), poison(s_out, s.get(), kernel);
    if (c > 0) {
        auto* factors_fn = smooth_factors<S>;
        CONFORM_LAUNCH(factors_fn, dim3(blocks_for(c, lc)), dim3(lc.threads), 0, s.get())(
            x.as<S>(), w.as<S>(), t, c, n, alpha, sd.as<double>(), rd.as<double>(), s_out.as<float>());
        check_launch(s.get(), kernel);
        auto* apply_fn = smooth_apply<S>;
        CONFORM_LAUNCH(apply_fn, dim3(blocks_for(t * c + c * n, lc)), dim3(lc.threads), 0, s.get())(
            x.as<S>(), w.as<S>(), sd.as<double>(), rd.as<double>(), t, c, n, xs.as<S>(), ws.as<S>());
        check_launch(s.get(), kernel);
    }
    download(xs, k.out[0], s.get(), kernel);
    download(ws, k.out[1], s.get(), kernel);
    download(s_out, k.out[2], s.get(), kernel);
}

}  // namespace conform::CONFORM_CUDA_NS
