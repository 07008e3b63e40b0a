// The sparse attention ops' shared core on the GPU (dsa.cuh, block_sparse.cuh,
// nsa.cuh, compressed_attention.cuh): a selection turned into a 0 / -inf
// mask over the keys, storage widened to FP32 and rounded back, and FP32
// attention under the mask.
//
// The FP32 attention is attention.cuh's attention_simt with one split: a
// key whose mask is -inf is skipped before its dot product, so an
// unselected key is never read (a NaN or an infinity there cannot reach
// the row), which makes the mask the gather of the selected keys that the
// sparse ops' oracles evaluate.  The CPU twins attend in FP32 too.
#pragma once
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "impls/cuda/attention.cuh"
#include "impls/cuda/sparse.cuh"

namespace conform::CONFORM_CUDA_NS {

// y = x rounded once into To (widening is exact), grid-stride.
template <class From, class To>
__global__ void convert_values(const From* __restrict__ x, To* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        y[i] = store<To>(load(x[i]));
}

template <class From, class To>
void launch_convert(const From* x, To* y, long long n, const Launch& lc, cudaStream_t s) {
    if (n <= 0) return;
    auto* fn = convert_values<From, To>;
    CONFORM_LAUNCH(fn, dim3(blocks_for(n, lc)), dim3(lc.threads), 0, s)(x, y, n);
}

// How a selection [rows, slots] of ids becomes a mask [rows, cols]: id n
// opens the keys [n r, min(keys, n r + r)), and with `causal` only those
// at positions <= offset + i; a window opens the keys at columns
// window_col + [p - window + 1, p], p = offset + i.  Every other key -inf,
// a row with a NaN id all NaN (its output NaN, as the CPU kernels').
struct SelectionMask {
    long long rows = 0, cols = 0, keys = 0, r = 1, offset = 0;
    int slots = 0;
    bool causal = false;
    long long window = 0, window_col = 0;
};

// A block per row (grid-stride); the barrier orders the row's -inf before its zeros.
template <class S>
__global__ void selection_mask(const float* __restrict__ ids, S* __restrict__ mask, SelectionMask m) {
    for (long long i = blockIdx.x; i < m.rows; i += gridDim.x) {
        const float* row = ids + i * m.slots;
        bool nan_row = false;
        for (int j = 0; j < m.slots; ++j) nan_row = nan_row || isnan(row[j]);
        S* out = mask + i * m.cols;
        for (long long n = threadIdx.x; n < m.cols; n += blockDim.x) out[n] = store<S>(nan_row ? NAN : -INFINITY);
        __syncthreads();
        if (!nan_row) {
            const long long pos = m.offset + i, last = m.causal ? pos : LLONG_MAX;
            for (int j = 0; j < m.slots; ++j) {
                const float id = row[j];
                if (!(id >= 0)) continue;  // -1: an unfilled slot
                const long long first = static_cast<long long>(id) * m.r;
                for (long long t = first + threadIdx.x; t < first + m.r && t < m.keys && t <= last; t += blockDim.x)
                    out[t] = store<S>(0.0);
            }
            for (long long t = (pos - m.window + 1 > 0 ? pos - m.window + 1 : 0) + threadIdx.x; m.window > 0 && t <= pos; t += blockDim.x)
                out[m.window_col + t] = store<S>(0.0);
        }
    }
}

template <class S>
void launch_selection_mask(const float* ids, S* mask, const SelectionMask& m, const Launch& lc, cudaStream_t s) {
    if (m.rows <= 0) return;
    auto* fn = selection_mask<S>;
    CONFORM_LAUNCH(fn, dim3(static_cast<unsigned>(std::min<long long>(m.rows, lc.max_blocks))), dim3(lc.threads), 0, s)(
        ids, mask, m);
}

// FP32 attention of q [hq, lq, d] over k [hkv, lk, d], v [hkv, lk, dv]
// with `scale` (0: 1/sqrt(d)) under a mask [lq, lk] or a causal window:
// attention_simt, one split, keys 32 a step (the kernels declare
// key_block = 32 to the bounds).
struct Fp32Attention {
    int hq = 1, hkv = 1, lq = 0, lk = 0, d = 0, dv = 0, window = 0;
    double scale = 0;
};

inline constexpr int kSparseKeyStep = 32;

// Its one limit: Dv <= 32 kSimtCols value columns (any D).
inline void check_fp32_dv(long long dv, const std::string& who) {
    if (dv > 32 * kSimtCols)
        throw std::invalid_argument(who + ": Dv = " + std::to_string(dv) + " > " + std::to_string(32 * kSimtCols) +
                                    ": not supported by the FP32 attention kernel");
}

// o and lse on device memory (lse: hq lq floats of scratch if unwanted);
// `warps` per block (0: the kernel's 4).
template <class Bug = AttnNoBug>
void launch_fp32_attention(const Fp32Attention& f, const float* q, const float* k, const float* v, const float* mask,
                           float* o, float* lse, cudaStream_t s, int warps = 0) {
    if (f.hq <= 0 || f.lq <= 0) return;
    AttnArgs a{};
    a.hq = f.hq, a.hkv = f.hkv, a.lq = f.lq, a.lk = f.lk, a.d = f.d, a.dv = f.dv;
    a.scale = static_cast<float>(f.scale != 0 ? f.scale : 1 / std::sqrt(static_cast<double>(f.d)));
    a.window = f.window;
    a.has_mask = mask != nullptr;
    a.splits = 1, a.split_keys = std::max(1, f.lk);
    const AttnBuffers<float> b{q, k, v, mask, o, lse, nullptr, nullptr, nullptr, nullptr};
    launch_attention<float, Bug>(a, b, warps, s);
}

}  // namespace conform::CONFORM_CUDA_NS
