// What a kernel source of impls/cuda/ includes first: the real CUDA headers
// under nvcc (backend "cuda"), or the CPU emulation when the same source is
// compiled as C++ with CONFORM_CUDA_EMU (backend "cuda-emu", docs/cuda.md).
// Sources write kernel<<<g, b, s, stream>>>(args) as
// CONFORM_LAUNCH(kernel, g, b, s, stream)(args) (kernel: a name without
// commas, e.g. a local pointer to a template's instance), loops to unroll
// with CONFORM_UNROLL, and put their code in
// namespace conform::CONFORM_CUDA_NS so that both builds link into one binary.
#pragma once

#if defined(CONFORM_CUDA_EMU)
#include "impls/cuda/emu/emu.hpp"
#define CONFORM_CUDA_NS cuda_emu_kernels
#define CONFORM_CUDA_BACKEND "cuda-emu"
#define CONFORM_UNROLL
namespace conform::cuda_emu_kernels {
using namespace ::conform::cuda_emu;
}
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define CONFORM_CUDA_NS cuda_kernels
#define CONFORM_CUDA_BACKEND "cuda"
#define CONFORM_UNROLL _Pragma("unroll")
#define CONFORM_LAUNCH(kernel, grid, block, shared, stream) kernel<<<grid, block, shared, stream>>>
#endif

namespace conform::CONFORM_CUDA_NS {

// The block's dynamic shared memory (the launch's `shared` bytes) as T*.
template <class T>
__device__ __forceinline__ T* dynamic_shared() {
#if defined(CONFORM_CUDA_EMU)
    return static_cast<T*>(::conform::cuda_emu::dynamic_shared());
#else
    extern __shared__ __align__(16) unsigned char conform_dynamic_smem[];
    return reinterpret_cast<T*>(conform_dynamic_smem);
#endif
}

}  // namespace conform::CONFORM_CUDA_NS
