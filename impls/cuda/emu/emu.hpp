// A CPU emulation of the CUDA subset conform's kernels use (docs/cuda.md,
// "Emulation"), so that the same .cu sources compile as C++ and run their
// indexing, tiling, reductions, tails and special values on a machine
// without a GPU (backend "cuda-emu").
//
// A launch runs its blocks one after another; each thread of a block is a
// fiber (Boost.Context) that runs until it finishes or reaches a
// synchronization point: __syncthreads (all live threads of the block), a
// warp shuffle, vote or __syncwarp (all live lanes of its warp).  Values
// cross lanes only at those points, as on the device.  A thread that
// reaches a point its peers never reach (divergent barriers) is an error
// naming the block and thread, not a hang.
//
// Everything lives in namespace conform::cuda_emu; an emulated source is
// compiled with `using namespace conform::cuda_emu` in scope (cuda_compat.cuh)
// so that it reads exactly like CUDA, and no symbol collides with the real
// CUDA runtime linked into the same binary.
#pragma once
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace conform::cuda_emu {

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;

constexpr int warpSize = 32;

// The running emulated thread's coordinates (threadIdx and friends).
struct Coords {
    dim3 thread, block, block_dim, grid_dim;
};
const Coords& coords();

// Runs body(block coordinates) as grid x block threads: every block in
// turn, its threads as fibers, with `shared` bytes of dynamic shared memory
// (filled with all-ones bytes, NaN in every float format, at every block's
// start: a read of what the block never wrote is wrong every time).  Throws
// std::runtime_error on a synchronization error or when the body throws.
void launch(dim3 grid, dim3 block, std::size_t shared, const std::function<void()>& body);
inline void launch(dim3 grid, dim3 block, const std::function<void()>& body) { launch(grid, block, 0, body); }
// The running block's dynamic shared memory (extern __shared__), 16-byte aligned.
void* dynamic_shared();

// Synchronization points.
void syncthreads();
void syncwarp(unsigned mask);
// Deposits `bits` for this lane, waits for the warp's live lanes in `mask`,
// and returns the bits lane `src` deposited (this lane's own when src lies
// outside the warp).
std::uint64_t warp_exchange(unsigned mask, std::uint64_t bits, int src);
// Deposits a predicate and returns the warp's ballot over `mask`.
unsigned warp_ballot(unsigned mask, bool predicate);
// cp.async.cg.shared.global [dst], [src], 16, src_bytes: this thread's copy
// of 16 bytes from global to shared memory, the bytes past src_bytes zero.
// The source is read at once (global memory a kernel reads does not change
// under it); the destination holds all-ones bytes (NaN in every float
// format) from the issue until cp_async_wait completes the copy's group --
// so a read that does not wait for it, and a read of the old contents
// after another thread issued the copy, both see NaN every time.
// Both addresses 16-byte aligned, else an error.
void cp_async16(void* dst, const void* src, int src_bytes);
// cp.async.commit_group: this thread's copies since the last commit become a group.
void cp_async_commit();
// cp.async.wait_group n: completes this thread's groups but the newest n.
void cp_async_wait(int newest_pending);
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: four 8 x 8 matrices of
// 16-bit values; lane l gives the address of row l % 8 of matrix l / 8 (16
// bytes, 16-byte aligned) and gets in r[i] matrix i's elements (row l / 4,
// columns 2 (l % 4) and 2 (l % 4) + 1), with trans (rows 2 (l % 4) and
// 2 (l % 4) + 1, column l / 4), the first in the low half: mma's A and B
// fragments.  Every lane of the warp must take part.
void ldmatrix_x4(std::uint32_t r[4], const unsigned short* row, bool trans);
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.f32: every lane of the
// warp deposits its fragments (a: 4 registers of two 16-bit values, b: 2,
// c: 4 floats) at one warp synchronization point and gets its 4 floats of
// D = C + A B, laid out as the PTX ISA documents for this shape (lane =
// 4 group + t: A rows group and group + 8, columns 2t, 2t + 1 and 8 more;
// B rows 2t, 2t + 1 (+ 8), column group; C and D rows group, group + 8,
// columns 2t, 2t + 1; the lower half of a register holds the element of
// lower index).  The arithmetic is block_fma (mma_model.hpp), measured on an H200.
// Every lane of the warp must take part, as .aligned requires.
void mma_m16n8k16(float d[4], const std::uint32_t a[4], const std::uint32_t b[2], const float c[4], bool bf16);
// mma.sync.aligned.m16n8k32.row.col.s32.{s8,u8}.s8.s32: A 16 x 32 and B 32 x 8
// bytes, four to a register (the lowest byte the lowest index): A rows
// group and group + 8, columns 4t..4t + 3 and 16 more; B rows 4t..4t + 3
// (+ 16), column group; C and D as for m16n8k16, INT32.  Exact integer
// arithmetic, wrapping modulo 2^32 as the s32 accumulator does without
// .satfinite.  a_unsigned reads A's bytes as u8 (the .u8 variant).
void mma_m16n8k32_s8(std::int32_t d[4], const std::uint32_t a[4], const std::uint32_t b[2], const std::int32_t c[4],
                     bool a_unsigned);

// The thread's linear index in its block, and its lane in its warp.
inline int linear_thread() {
    const Coords& c = coords();
    return static_cast<int>(c.thread.x + c.block_dim.x * (c.thread.y + c.block_dim.y * c.thread.z));
}
inline int lane_id() { return linear_thread() % warpSize; }

template <class T>
T shuffle_from(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move at most 64 bits");
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    bits = warp_exchange(mask, bits, src);
    T out;
    std::memcpy(&out, &bits, sizeof(T));
    return out;
}

// ---- runtime API (the part the host wrappers call) ----

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorLaunchFailure = 719,
};
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
struct EmuStream;
using cudaStream_t = EmuStream*;

cudaError_t cudaMalloc(void** p, std::size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int* n);
const char* cudaGetErrorString(cudaError_t e);
// The last launch's failure (what the device would report as a launch failure).
void set_launch_error(const char* what);

// What a kernel may launch with on the device, as far as the emulation can
// tell (docs/cuda.md, "Launch resources"); throws std::runtime_error naming
// the excess.  Threads: at most kEmuMaxThreads, since the emulation cannot
// see the registers ptxas gives a kernel, and 256 threads fit any count it
// may choose (255 per thread, allocated as 256: 256 x 256 = the SM's 65536).
// Dynamic shared memory: at most 48 KiB unless cudaFuncSetAttribute raised
// that kernel's limit to at least the launch's bytes.
using AnyKernel = void (*)();
inline constexpr unsigned kEmuMaxThreads = 256;
inline constexpr std::size_t kEmuSharedDefault = 48 * 1024;
void check_launch_resources(AnyKernel kernel, dim3 block, std::size_t shared);
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), remembered.
void set_max_dynamic_shared(AnyKernel kernel, int bytes);

// kernel<<<grid, block, shared, stream>>>(args...) is written
// CONFORM_LAUNCH(kernel, grid, block, shared, stream)(args...).
template <class... P>
struct Launcher {
    void (*kernel)(P...);
    dim3 grid, block;
    std::size_t shared;
    template <class... A>
    void operator()(A&&... args) const {
        check_launch_resources(reinterpret_cast<AnyKernel>(kernel), block, shared);
        std::tuple<std::decay_t<P>...> bound(std::forward<A>(args)...);
        launch(grid, block, shared, [&] { std::apply(kernel, bound); });
    }
};
template <class... P>
Launcher<P...> launcher(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shared, cudaStream_t) {
    return {kernel, grid, block, shared};
}

// Opting a kernel into more than 48 KiB of dynamic shared memory, and the
// device's limit for it: the emulation's is the H100/H200's 227 KiB.
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
inline constexpr int kEmuMaxSharedOptin = 232448;
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
    *value = kEmuMaxSharedOptin;
    return cudaSuccess;
}
template <class... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute, int value) {
    if (value < 0 || value > kEmuMaxSharedOptin) return cudaErrorInvalidValue;
    set_max_dynamic_shared(reinterpret_cast<AnyKernel>(kernel), value);
    return cudaSuccess;
}

// ---- 16-bit formats (raw bits; conversions round as the device's do) ----

struct __half {
    std::uint16_t x;
};
struct __nv_bfloat16 {
    std::uint16_t x;
};
float __half2float(__half h);
__half __float2half_rn(float f);
__half __double2half(double d);
float __bfloat162float(__nv_bfloat16 h);
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline __half __ushort_as_half(unsigned short x) { return {x}; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return {x}; }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }

__nv_bfloat16 __float2bfloat16(float f);     // round to nearest even
__nv_bfloat16 __float2bfloat16_rn(float f);
__nv_bfloat16 __float2bfloat16_rz(float f);  // toward zero
__nv_bfloat16 __double2bfloat16(double d);

// ---- device intrinsics modelled where the device's differ from the host's ----

// __expf: the device's ex2.approx of x * log2(e) rounded to float (the
// product's rounding is what loses accuracy for large |x|).
inline float fast_expf(float x) { return std::exp2(static_cast<float>(x * 1.44269504088896340736f)); }
// __sinf/__cosf: sin.approx/cos.approx take no range reduction beyond
// float arithmetic; modelled by reducing x mod 2 pi in float.
inline float fast_reduce(float x) {
    const float k = std::nearbyint(x * 0.159154943091895335769f);
    return std::fma(-k, 6.28318530717958647692f, x);
}
inline float fast_sinf(float x) { return static_cast<float>(std::sin(static_cast<double>(fast_reduce(x)))); }
inline float fast_cosf(float x) { return static_cast<float>(std::cos(static_cast<double>(fast_reduce(x)))); }
// glibc declares its own __expf, __sinf and __cosf: the device names are
// macros here, so that a kernel's call reaches the model.
#define __expf ::conform::cuda_emu::fast_expf
#define __sinf ::conform::cuda_emu::fast_sinf
#define __cosf ::conform::cuda_emu::fast_cosf
// __byte_perm(x, y, s): byte i of the result is byte (s >> 4 i) & 7 of the
// eight bytes x.b0..b3, y.b0..b3 (PTX prmt, the default mode).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(y) << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>(bytes >> (8 * ((s >> (4 * i)) & 7)) & 0xff) << (8 * i);
    return r;
}
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline double rsqrt(double a) { return 1.0 / std::sqrt(a); }

// The <cmath> functions device code calls unqualified (for the emulated
// sources, which see this namespace through a using-directive).
using std::copysign;
using std::erfc;
using std::exp;
using std::fabs;
using std::fmax;
using std::fmin;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::log1p;
using std::nextafter;
using std::pow;
using std::signbit;
using std::tanh;
// sincos(double): the device's and glibc's, one call for both.
inline void sincos(double a, double* s, double* c) { *s = std::sin(a), *c = std::cos(a); }

// ---- atomics (blocks and threads run one at a time: plain read-modify-write) ----

template <class T>
T atomicAdd(T* p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
}
template <class T>
T atomicMax(T* p, T v) {
    const T old = *p;
    if (v > old) *p = v;
    return old;
}

}  // namespace conform::cuda_emu

// The built-in variables and qualifiers.
#define threadIdx (::conform::cuda_emu::coords().thread)
#define blockIdx (::conform::cuda_emu::coords().block)
#define blockDim (::conform::cuda_emu::coords().block_dim)
#define gridDim (::conform::cuda_emu::coords().grid_dim)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
// One block runs at a time and its threads share the function's statics.
#define __shared__ static

namespace conform::cuda_emu {

// Warp shuffles and votes with the device's lane arithmetic (width a power
// of two dividing 32: segments of `width` lanes).
template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = warpSize) {
    const int lane = lane_id();
    return shuffle_from(mask, v, (lane & ~(width - 1)) + (src_lane & (width - 1)));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
    const int lane = lane_id();
    const int src = lane ^ lane_mask;
    return shuffle_from(mask, v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
    const int lane = lane_id();
    const int src = lane + static_cast<int>(delta);
    return shuffle_from(mask, v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
    const int lane = lane_id();
    const int src = lane - static_cast<int>(delta);
    return shuffle_from(mask, v, src >= (lane & ~(width - 1)) ? src : lane);
}
inline unsigned __ballot_sync(unsigned mask, int p) { return warp_ballot(mask, p != 0); }
inline int __any_sync(unsigned mask, int p) { return warp_ballot(mask, p != 0) != 0; }
inline int __all_sync(unsigned mask, int p) { return warp_ballot(mask, p == 0) == 0; }
inline void __syncthreads() { syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { syncwarp(mask); }

}  // namespace conform::cuda_emu

#define CONFORM_LAUNCH(kernel, grid, block, shared, stream) \
    ::conform::cuda_emu::launcher(kernel, grid, block, shared, stream)
