// The softmax kernel and host call (softmax.cu registers them; the GPU
// mutants of impls/mutants/cuda_softmax.cu instantiate them with one bug).
#pragma once
#include <algorithm>
#include <stdexcept>
#include <string>

#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/reduce.cuh"
#include "impls/lse_merge_weights.hpp"

namespace conform::CONFORM_CUDA_NS {


// The running state over some entries: m their maximum (NaN once any is
// NaN), l = Σ exp(x − m) (0 while m = −∞).  Each term exp(x − m) is an expf
// of a float difference (docs/softmax.md's plain-exp model with acc = fp32,
// e_exp = 4u for CUDA's 2-ulp expf); l is held in double and rescaled, when
// the maximum grows, by a factor exp(m − m') in double, so the rescales
// (at most a few per thread and one per merge) add only double roundings
// and the sum stays far inside the bound's γ_{n−1}.
struct MaxSum {
    float m;
    double l;
};

template <>
__device__ __forceinline__ MaxSum shuffle_xor(MaxSum v, int lane_mask) {
    return {__shfl_xor_sync(kFullMask, v.m, lane_mask), __shfl_xor_sync(kFullMask, v.l, lane_mask)};
}

// l · exp(m − m'), which is 0 for an empty part (m = −∞) instead of NaN.
__device__ __forceinline__ double rescaled(const MaxSum& s, float m) {
    return s.m == -INFINITY ? 0.0 : s.l * exp(static_cast<double>(s.m) - static_cast<double>(m));
}

template <class Bug>
struct Merge {
    __device__ MaxSum operator()(const MaxSum& a, const MaxSum& b) const {
        if (isnan(a.m) || isnan(b.m)) return {NAN, NAN};
        const float m = fmaxf(a.m, b.m);
        if (m == -INFINITY) return {m, 0.0};
        // The mutant's bug: one side's sum kept against its own maximum.
        return {m, (Bug::kSkipRescale ? a.l : rescaled(a, m)) + rescaled(b, m)};
    }
};

// exp(x − m) as the model has it: the difference rounded once to float, expf.
__device__ __forceinline__ float term(float x, float m) { return expf(x - m); }

// One entry into a running state.
__device__ __forceinline__ MaxSum push(MaxSum s, float x) {
    if (isnan(x) || isnan(s.m)) return {NAN, NAN};
    if (x == -INFINITY) return s;  // contributes exp(−∞) = 0
    if (x > s.m) return {x, rescaled(s, x) + 1.0};
    return {s.m, s.l + term(x, s.m)};
}

// A thread's state over the entries it holds in registers: their maximum
// m_t first (exact), then l_t = Σ exp(x − m_t) summed in float in visiting
// order (γ_{k−1} for k terms, the bound's γ_{n−1} covering it) — no rescale
// inside a thread; the rescales are the merges', in double.
template <class S, int K>
__device__ __forceinline__ MaxSum held_state(const RowRegs<S, K>& row, const S* xr, int n) {
    float m = -INFINITY;
    bool nan = false;
    row.read(xr, n, [&](int, double v) {
        const float x = static_cast<float>(v);
        nan = nan || isnan(x);
        m = fmaxf(m, x);
    });
    if (nan) return {NAN, NAN};
    if (m == -INFINITY) return {m, 0.0};
    float l = 0;
    row.read(xr, n, [&](int, double v) { l += term(static_cast<float>(v), m); });
    return {m, l};
}

template <class S, bool kNanRows, class Bug = NoBug>
__global__ void softmax_rows(const S* __restrict__ x, S* __restrict__ y, long long rows, int n) {
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const S* xr = x + r * n;
        S* yr = y + r * n;
        RowRegs<S> row;
        row.load_row(xr, n);
        MaxSum s{-INFINITY, 0.0};
        if (row.held) s = held_state(row, xr, n);
        else row_read(xr, n, [&](int, double v) { s = push(s, static_cast<float>(v)); });  // the online recurrence
        s = block_reduce(s, Merge<Bug>{}, MaxSum{-INFINITY, 0.0});
        // exp(x − m) · (1/l): 1/l in double, rounded once to float (with the
        // product, the two roundings the bound's γ_2 grants the division).
        const float inv = static_cast<float>(1.0 / s.l);
        // An all −∞ row: the empty distribution, 0 (or NaN, as exp(−∞ − (−∞)) / 0 gives it).
        row.map(xr, yr, n, [&](int, double v) -> double {
            return s.m == -INFINITY ? (kNanRows ? NAN : 0.0) : term(static_cast<float>(v), s.m) * inv;
        });
    }
}

template <class S, bool kNanRows, class Bug = NoBug>
void launch_softmax(const S* x, S* y, long long rows, int n, const Launch& l, cudaStream_t s) {
    auto* kernel_fn = softmax_rows<S, kNanRows, Bug>;
    const unsigned threads = static_cast<unsigned>(std::clamp((n + 31) / 32 * 32, 32, static_cast<int>(l.threads)));
    CONFORM_LAUNCH(kernel_fn, dim3(static_cast<unsigned>(std::min<long long>(rows, l.max_blocks))), dim3(threads), 0,
                   s)(x, y, rows, n);
}

template <class S, bool kNanRows, class Bug = NoBug>
void run_softmax_as(const KernelCall& c, const char* kernel, const Launch& l) {
    const TensorView& xv = c.in[0];
    const int n = static_cast<int>(xv.cols());
    const long long rows = xv.rows();
    const std::size_t bytes = static_cast<std::size_t>(xv.numel()) * sizeof(S);
    Stream s(kernel);
    DeviceBuffer x(bytes, kernel), y(bytes, kernel);
    poison(y, s.get(), kernel);
    upload(xv, x, s.get(), kernel);
    if (rows > 0 && n > 0) {
        launch_softmax<S, kNanRows, Bug>(x.as<S>(), y.as<S>(), rows, n, l, s.get());
        check_launch(s.get(), kernel);
    }
    download(y, c.out[0], s.get(), kernel);
}

template <bool kNanRows, class Bug = NoBug>
void run_softmax(const KernelCall& c, Format f, const char* kernel, const Launch& l = {}) {
    by_storage(f, [&](auto s) { run_softmax_as<decltype(s), kNanRows, Bug>(c, kernel, l); });
}

// ---------------------------------------------------------------------------
// lse_merge (docs/softmax.md): one thread per element of o, grid-stride, each
// forming its row's weights by lse_merge::weights -- the CPU kernel's FP32
// arithmetic (impls/lse_merge_weights.hpp; expf and log1pf within CUDA's
// documented 2 and 1 ulps, the bound's e = 4u) -- and the row's first
// thread storing its lse in FP32.  A copied state is copied bit for bit.

struct LseMergeNoBug {
    static constexpr bool kNaiveLogsumexp = false;  // lse = log(e^a + e^b): overflows and underflows beyond |lse| ~ 88
};

template <class S, class Bug>
__global__ void lse_merge_kernel(const S* __restrict__ oa, const S* __restrict__ la, const S* __restrict__ ob,
                                 const S* __restrict__ lb, long long rows, int dv, S* __restrict__ o,
                                 float* __restrict__ lse) {
    const int width = dv > 0 ? dv : 1;  // a row without o still stores its lse
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < rows * width;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long r = i / width;
        const float a = static_cast<float>(load(la[r])), b = static_cast<float>(load(lb[r]));
        lse_merge::Row m = lse_merge::weights(a, b);
        if (Bug::kNaiveLogsumexp && !m.copy_a && !m.copy_b && m.lse == m.lse && m.lse != -INFINITY)
            m.lse = logf(expf(a) + expf(b)), m.wa = expf(a - m.lse), m.wb = expf(b - m.lse);
        if (dv > 0) {
            if (m.copy_a || m.copy_b) o[i] = m.copy_a ? oa[i] : ob[i];
            else if (m.lse == -INFINITY) o[i] = store<S>(0.0);
            else o[i] = store<S>(lse_merge::element(m, static_cast<float>(load(oa[i])), static_cast<float>(load(ob[i]))));
        }
        if (i % width == 0) lse[r] = m.lse;
    }
}

template <class S, class Bug = LseMergeNoBug>
void run_lse_merge_as(const KernelCall& c, const char* kernel, const Launch& l) {
    const std::string who = kernel;
    if (c.in.size() != 4 || c.out.size() != 2) throw std::invalid_argument(who + ": expects o_a, lse_a, o_b, lse_b -> o, lse");
    const TensorView &oa = c.in[0], &ob = c.in[2];
    const int dv = static_cast<int>(oa.cols());
    const long long rows = oa.rank ? oa.rows() : 0;
    if (ob.numel() != oa.numel() || c.in[1].numel() != rows || c.in[3].numel() != rows)
        throw std::invalid_argument(who + ": o_b must be shaped as o_a, and lse_a, lse_b hold one value per row of o_a");
    Stream s(kernel);
    DeviceBuffer in[4] = {DeviceBuffer(oa.numel() * sizeof(S), kernel), DeviceBuffer(rows * sizeof(S), kernel),
                          DeviceBuffer(ob.numel() * sizeof(S), kernel), DeviceBuffer(rows * sizeof(S), kernel)};
    for (int t = 0; t < 4; ++t) upload(c.in[t], in[t], s.get(), kernel);
    DeviceBuffer o(oa.numel() * sizeof(S), kernel), lse(rows * sizeof(float), kernel);
    poison(o, s.get(), kernel), poison(lse, s.get(), kernel);
    if (rows > 0) {
        auto* kernel_fn = lse_merge_kernel<S, Bug>;
        CONFORM_LAUNCH(kernel_fn, dim3(blocks_for(rows * (dv > 0 ? dv : 1), l)), dim3(l.threads), 0, s.get())(
            in[0].as<S>(), in[1].as<S>(), in[2].as<S>(), in[3].as<S>(), rows, dv, o.as<S>(), lse.as<float>());
        check_launch(s.get(), kernel);
    }
    download(o, c.out[0], s.get(), kernel);
    download(lse, c.out[1], s.get(), kernel);
}

// cuda.lse_merge.<fmt> (or a mutant's entry, from `base`): lse in FP32.
template <class Bug = LseMergeNoBug>
KernelInfo lse_merge_info(KernelInfo k, Format f) {
    k.acc = Format::fp32;
    k.out_formats = {f, Format::fp32};
    with_launches(k, [f, kernel = k.name](Launch l) -> KernelFn {
        return [f, kernel, l](const KernelCall& c) {
            by_storage(f, [&](auto s) { run_lse_merge_as<decltype(s), Bug>(c, kernel.c_str(), l); });
        };
    });
    return k;
}

}  // namespace conform::CONFORM_CUDA_NS
