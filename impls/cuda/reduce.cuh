// Block-wide reductions for the row kernels (norm.cu, softmax.cu): a warp
// reduces by butterfly shuffles, lane 0 of each warp leaves its part in
// shared memory, warp 0 reduces those, and every thread gets the total.
// Any block size that is a multiple of 32, up to 1024.
#pragma once
#include "impls/cuda/cuda_compat.cuh"

namespace conform::CONFORM_CUDA_NS {

constexpr unsigned kFullMask = 0xffffffffu;

// The GPU mutants' bugs (impls/mutants/cuda_*.cu), all off in the kernels.
struct NoBug {
    static constexpr bool kHalfWarp = false;      // butterfly over 16 lanes: half of each warp's sum lost
    static constexpr bool kEarlyRead = false;     // warp 0 reads the warps' parts before the barrier
    static constexpr bool kFp16Sum = false;       // norms: the row sum accumulated in fp16
    static constexpr bool kPlainWeight = false;   // rms_norm: zero_centered ignored, w instead of 1 + w
    static constexpr bool kDropTail = false;      // elementwise: the elements after the last full pack skipped
    static constexpr bool kTruncateBf16 = false;  // elementwise: bf16 stored by truncating a float
    static constexpr bool kSkipRescale = false;   // softmax: one side of a merge keeps its own maximum's sum
    static constexpr bool kFastSincos = false;    // rope: the angle in float through __sinf/__cosf
    static constexpr bool kNoGridStride = false;  // elementwise: one pass of the grid, no loop beyond it
};

// A butterfly step's exchange; a struct of several values overloads it
// (softmax.cu's running maximum and sum).
template <class T>
__device__ __forceinline__ T shuffle_xor(T v, int lane_mask) {
    return __shfl_xor_sync(kFullMask, v, lane_mask);
}

template <class Bug = NoBug, class T, class Combine>
__device__ __forceinline__ T warp_reduce(T v, Combine f) {
    for (int m = Bug::kHalfWarp ? 8 : 16; m > 0; m /= 2) v = f(v, shuffle_xor(v, m));
    return v;
}

// (v, i) comes before (bv, bi): a larger value, or an equal one at a lower
// index (the selection order of top-k with ties to the lower index).
template <class I>
__device__ __forceinline__ bool comes_before(float v, I i, float bv, I bi) {
    return v > bv || (v == bv && i < bi);
}

// The first (value, index) of the warp's lanes in comes_before's order;
// every lane gets it (kHalfWarp: a mutant's butterfly over 16 lanes, each
// half-warp its own).  NaN never comes before anything: a lane's scan must
// leave it out.
template <bool kHalfWarp = false, class I>
__device__ __forceinline__ void warp_argmax(float& v, I& i) {
    for (int m = kHalfWarp ? 8 : 16; m > 0; m /= 2) {
        const float ov = __shfl_xor_sync(kFullMask, v, m);
        const I oi = __shfl_xor_sync(kFullMask, i, m);
        if (comes_before(ov, oi, v, i)) v = ov, i = oi;
    }
}

// Safe to call several times in a row: a thread reads the previous total
// before the next call's first barrier, which every writer waits for.
template <class Bug = NoBug, class T, class Combine>
__device__ T block_reduce(T v, Combine f, T identity) {
    __shared__ T parts[32];
    __shared__ T total;
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_reduce<Bug>(v, f);
    if (lane == 0) parts[warp] = v;
    if (!Bug::kEarlyRead) __syncthreads();
    if (warp == 0) {
        T w = lane < warps ? parts[lane] : identity;
        w = warp_reduce<Bug>(w, f);
        if (lane == 0) total = w;
    }
    __syncthreads();
    return total;
}

struct Add {
    template <class T>
    __device__ T operator()(T a, T b) const { return a + b; }
};

// fmaxf: a NaN lane is dropped (callers vote on NaN separately).
struct MaxOf {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

}  // namespace conform::CONFORM_CUDA_NS
