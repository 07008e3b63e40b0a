// Asynchronous copies from global to shared memory (cp.async, sm_80 and
// newer): a thread issues 16-byte copies, commits them as a group, and
// waits for all but its newest groups before reading what they wrote --
// so the next tile loads while this one is computed on.  Under the
// emulation (impls/cuda/emu) a copy's destination holds NaN bytes from the
// issue until its group is waited for, so a read that does not wait, and a
// read of the old contents after a copy was issued over them, fail every time.
#pragma once
#include "impls/cuda/cuda_compat.cuh"

namespace conform::CONFORM_CUDA_NS {

// 16 bytes from src (global) to dst (shared), both 16-byte aligned; zeros
// instead where !valid (src is then not read, but must be a valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
#if defined(CONFORM_CUDA_EMU)
    ::conform::cuda_emu::cp_async16(dst, src, valid ? 16 : 0);
#else
    const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    const auto g = static_cast<unsigned long long>(__cvta_generic_to_global(src));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(valid ? 16 : 0) : "memory");
#endif
}

// This thread's copies since the last commit become one group.
__device__ __forceinline__ void cp_async_commit() {
#if defined(CONFORM_CUDA_EMU)
    ::conform::cuda_emu::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's newest groups are still in
// flight; what the others wrote is then visible to this thread (to the
// block after a barrier).
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(CONFORM_CUDA_EMU)
    ::conform::cuda_emu::cp_async_wait(kPending);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

}  // namespace conform::CONFORM_CUDA_NS
