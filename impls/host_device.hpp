// CONFORM_HOST_DEVICE: a function compiled for the host and, under nvcc,
// for the device too -- arithmetic the CPU and CUDA kernels share
// (impls/fp8_codes.hpp, impls/lse_merge_weights.hpp).  Such functions call
// only what both sides have: the C math functions (expf, log1pf, fmaf) and
// memcpy.
#pragma once

#if defined(__CUDACC__)
#define CONFORM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define CONFORM_HOST_DEVICE inline
#endif
