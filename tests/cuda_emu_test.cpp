// The CPU emulation of CUDA (impls/cuda/emu, docs/cuda.md "Emulation"):
// coordinates, barriers, warp shuffles and votes behave as on the device,
// a missing barrier gives a wrong result deterministically, and a divergent
// barrier is an error naming the threads, not a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "impls/cuda/emu/emu.hpp"
#include "impls/cuda/emu/mma_model.hpp"
#include "numerics/format.hpp"

namespace cuda_emu_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

namespace {

using namespace conform::cuda_emu;
using conform::Format;
using conform::decode;
using conform::encode;

__global__ void write_global_index(int* out, int n) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] += i + 1;
}

TEST(CudaEmu, EveryThreadOfEveryBlockRunsOnce) {
    std::vector<int> out(1000, 0);
    auto* k = write_global_index;
    CONFORM_LAUNCH(k, dim3(8), dim3(128), 0, nullptr)(out.data(), 1000);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(out[i], i + 1) << i;
}

__global__ void coords_2d(int* out) {
    const int t = static_cast<int>(threadIdx.x + blockDim.x * threadIdx.y);
    const int b = static_cast<int>(blockIdx.x + gridDim.x * blockIdx.y);
    out[b * 64 + t] = static_cast<int>(1000 * blockIdx.y + 100 * blockIdx.x + 10 * threadIdx.y + threadIdx.x);
}

TEST(CudaEmu, TwoDimensionalCoordinates) {
    std::vector<int> out(4 * 64, -1);
    auto* k = coords_2d;
    CONFORM_LAUNCH(k, dim3(2, 2), dim3(8, 8), 0, nullptr)(out.data());
    EXPECT_EQ(out[0], 0);
    EXPECT_EQ(out[1 * 64 + 8 * 3 + 5], 100 + 30 + 5);
    EXPECT_EQ(out[3 * 64 + 63], 1000 + 100 + 70 + 7);
}

// Dynamic shared memory: the launch's bytes, one buffer per block, all-ones
// bytes (NaN) at every block's start -- what the previous block left is
// never seen -- and a request past the opt-in limit refused.
__global__ void dynamic_smem(unsigned* first, unsigned* sums) {
    auto* s = static_cast<unsigned*>(dynamic_shared());
    if (threadIdx.x == 0) first[blockIdx.x] = s[blockDim.x - 1];  // before anyone writes
    __syncthreads();
    s[threadIdx.x] = threadIdx.x + blockIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned sum = 0;
        for (unsigned t = 0; t < blockDim.x; ++t) sum += s[t];
        sums[blockIdx.x] = sum;
    }
}

TEST(CudaEmu, DynamicSharedMemoryIsPerBlockAndPoisoned) {
    std::vector<unsigned> first(3, 0), sums(3, 0);
    auto* k = dynamic_smem;
    CONFORM_LAUNCH(k, dim3(3), dim3(64), 64 * sizeof(unsigned), nullptr)(first.data(), sums.data());
    for (unsigned b = 0; b < 3; ++b) {
        EXPECT_EQ(first[b], 0xffffffffu) << b;
        EXPECT_EQ(sums[b], 64 * 63 / 2 + 64 * b) << b;
    }
    int limit = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
    EXPECT_EQ(limit, 232448);
    EXPECT_NE(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, limit + 1), cudaSuccess);
}

// The device refuses more than 48 KiB of dynamic shared memory unless the
// kernel opted in with cudaFuncSetAttribute, and the opt-in is per kernel.
TEST(CudaEmu, DynamicSharedMemoryPast48KiBNeedsTheKernelsOptIn) {
    std::vector<unsigned> first(1, 0), sums(1, 0);
    auto* k = dynamic_smem;
    EXPECT_NO_THROW(CONFORM_LAUNCH(k, dim3(1), dim3(64), 48 * 1024, nullptr)(first.data(), sums.data()));
    try {
        CONFORM_LAUNCH(k, dim3(1), dim3(64), 48 * 1024 + 16, nullptr)(first.data(), sums.data());
        ADD_FAILURE() << "49168 bytes launched without the opt-in";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("49168 bytes of dynamic shared memory: the kernel's limit is 49152"),
                  std::string::npos)
            << e.what();
    }
    ASSERT_EQ(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024), cudaSuccess);
    EXPECT_NO_THROW(CONFORM_LAUNCH(k, dim3(1), dim3(64), 64 * 1024, nullptr)(first.data(), sums.data()));
    EXPECT_EQ(sums[0], 64u * 63 / 2);
    EXPECT_THROW(CONFORM_LAUNCH(k, dim3(1), dim3(64), 64 * 1024 + 16, nullptr)(first.data(), sums.data()),
                 std::runtime_error);
    auto* other = write_global_index;  // another kernel keeps the default
    std::vector<int> out(64, 0);
    EXPECT_THROW(CONFORM_LAUNCH(other, dim3(1), dim3(64), 64 * 1024, nullptr)(out.data(), 64), std::runtime_error);
}

// A block larger than any register count allows is refused (the emulation
// cannot see the registers ptxas chose; 256 threads fit any of them).
TEST(CudaEmu, BlocksOfMoreThan256ThreadsAreRefused) {
    std::vector<int> out(512, 0);
    auto* k = write_global_index;
    EXPECT_NO_THROW(CONFORM_LAUNCH(k, dim3(2), dim3(256), 0, nullptr)(out.data(), 512));
    try {
        CONFORM_LAUNCH(k, dim3(1), dim3(16, 32), 0, nullptr)(out.data(), 512);
        ADD_FAILURE() << "a block of 512 threads launched";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("a block of 512 threads"), std::string::npos) << e.what();
    }
    EXPECT_EQ(out[511], 512) << "only the first launch ran";
}

// cp.async: each thread copies 16 bytes of its row into dynamic shared
// memory (zeros where !valid) and reads the block's rows after a barrier,
// having waited for its copies or not.
template <bool kWait>
__global__ void async_rows(const std::uint32_t* src, std::uint32_t* out, int valid_rows) {
    auto* s = static_cast<std::uint32_t*>(dynamic_shared());
    const unsigned t = threadIdx.x;
    cp_async16(s + 4 * t, src + 4 * t, static_cast<int>(t) < valid_rows ? 16 : 0);
    cp_async_commit();
    if (kWait) cp_async_wait(0);
    __syncthreads();
    for (int i = 0; i < 4; ++i) out[4 * t + i] = s[4 * ((t + 1) % blockDim.x) + i];  // the next thread's row
}

TEST(CudaEmu, AsyncCopiesLandWhenWaitedForAndNotBefore) {
    std::vector<std::uint32_t> src(4 * 32), out(4 * 32, 0);
    std::iota(src.begin(), src.end(), 1u);
    auto* waits = async_rows<true>;
    CONFORM_LAUNCH(waits, dim3(1), dim3(32), 4 * 32 * sizeof(std::uint32_t), nullptr)(src.data(), out.data(), 30);
    for (unsigned t = 0; t < 32; ++t)
        for (unsigned i = 0; i < 4; ++i) {
            const unsigned row = (t + 1) % 32;
            ASSERT_EQ(out[4 * t + i], row < 30 ? src[4 * row + i] : 0u) << "thread " << t << " word " << i;
        }
    auto* no_wait = async_rows<false>;
    CONFORM_LAUNCH(no_wait, dim3(1), dim3(32), 4 * 32 * sizeof(std::uint32_t), nullptr)(src.data(), out.data(), 32);
    for (unsigned x : out) ASSERT_EQ(x, 0xffffffffu) << "a copy landed without its wait";
    std::vector<std::uint32_t> odd(4 * 32 + 4);
    EXPECT_THROW(CONFORM_LAUNCH(waits, dim3(1), dim3(32), 4 * 32 * sizeof(std::uint32_t), nullptr)(
                     reinterpret_cast<const std::uint32_t*>(reinterpret_cast<const char*>(odd.data()) + 4), out.data(), 32),
                 std::runtime_error)
        << "a misaligned source";
}

// The destination is undefined from the issue on: a thread that reads the
// old contents of a row another thread is loading anew reads NaN bytes.
__global__ void overwrite_while_read(const std::uint32_t* src, std::uint32_t* out) {
    auto* s = static_cast<std::uint32_t*>(dynamic_shared());
    const unsigned t = threadIdx.x;
    for (int i = 0; i < 4; ++i) s[4 * t + i] = 7;
    __syncthreads();
    if (t == 0) cp_async16(s + 4, src, 16);  // over thread 1's row, in flight until thread 0 waits
    __syncthreads();
    if (t == 1) out[0] = s[4];
    __syncthreads();
    cp_async_commit();
    cp_async_wait(0);
}

TEST(CudaEmu, AnAsyncCopysDestinationIsUndefinedUntilItsWait) {
    std::vector<std::uint32_t> src(4, 1), out(1, 0);
    auto* k = overwrite_while_read;
    CONFORM_LAUNCH(k, dim3(1), dim3(2), 2 * 4 * sizeof(std::uint32_t), nullptr)(src.data(), out.data());
    EXPECT_EQ(out[0], 0xffffffffu) << "thread 1 read its old row after thread 0 issued a copy over it";
}

// A tree reduction in shared memory: with the barriers every block's sum
// is right; without them a thread reads partner slots its peers have not
// yet written (the emulation runs each thread until it synchronizes).
template <bool kBarriers>
__global__ void block_sum(const float* x, float* sums) {
    __shared__ float s[256];
    const unsigned t = threadIdx.x;
    s[t] = x[blockIdx.x * 256 + t];
    if (kBarriers) __syncthreads();
    for (unsigned half = 128; half > 0; half /= 2) {
        if (t < half) s[t] += s[t + half];
        if (kBarriers) __syncthreads();
    }
    if (t == 0) sums[blockIdx.x] = s[0];
}

TEST(CudaEmu, BarriersOrderSharedMemoryAndTheirAbsenceShows) {
    std::vector<float> x(3 * 256);
    std::iota(x.begin(), x.end(), 0.0f);
    std::vector<float> sums(3);
    auto* good = block_sum<true>;
    CONFORM_LAUNCH(good, dim3(3), dim3(256), 0, nullptr)(x.data(), sums.data());
    for (int b = 0; b < 3; ++b) EXPECT_EQ(sums[b], 256.0f * 256 * b + 255.0f * 256 / 2) << b;
    auto* racy = block_sum<false>;
    CONFORM_LAUNCH(racy, dim3(3), dim3(256), 0, nullptr)(x.data(), sums.data());
    EXPECT_NE(sums[1], 256.0f * 256 + 255.0f * 256 / 2) << "the missing barrier went unseen";
}

__global__ void warp_ops(int* out) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    int v = lane + 1;
    for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
    out[threadIdx.x * 6 + 0] = v;                                                 // 528 in every lane
    out[threadIdx.x * 6 + 1] = __shfl_down_sync(0xffffffffu, lane, 1, 16);         // lane + 1 within 16-lane halves
    out[threadIdx.x * 6 + 2] = __shfl_up_sync(0xffffffffu, lane, 2);               // lane - 2, own for lanes 0, 1
    out[threadIdx.x * 6 + 3] = __shfl_sync(0xffffffffu, lane * 10, 7);             // lane 7's value
    out[threadIdx.x * 6 + 4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
    out[threadIdx.x * 6 + 5] = __all_sync(0xffffffffu, lane < 31) * 2 + __any_sync(0xffffffffu, lane == 31);
}

TEST(CudaEmu, WarpShufflesAndVotesFollowTheDeviceLaneArithmetic) {
    std::vector<int> out(64 * 6);
    auto* k = warp_ops;
    CONFORM_LAUNCH(k, dim3(1), dim3(64), 0, nullptr)(out.data());
    unsigned every_third = 0;
    for (int l = 0; l < 32; l += 3) every_third |= 1u << l;
    for (int t = 0; t < 64; ++t) {
        const int lane = t % 32;
        EXPECT_EQ(out[t * 6 + 0], 528) << t;
        EXPECT_EQ(out[t * 6 + 1], lane % 16 == 15 ? lane : lane + 1) << t;
        EXPECT_EQ(out[t * 6 + 2], lane < 2 ? lane : lane - 2) << t;
        EXPECT_EQ(out[t * 6 + 3], 70) << t;
        EXPECT_EQ(static_cast<unsigned>(out[t * 6 + 4]), every_third) << t;
        EXPECT_EQ(out[t * 6 + 5], 1) << t << ": not all lanes below 31, one lane is 31";
    }
}

// A block of 48 threads: the second warp has 16 live lanes, and a shuffle
// from a lane beyond them returns the caller's own value.
__global__ void partial_warp(int* out) {
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, static_cast<int>(threadIdx.x), 8);
}

TEST(CudaEmu, PartialWarpShufflesOnlyAmongLiveLanes) {
    std::vector<int> out(48);
    auto* k = partial_warp;
    CONFORM_LAUNCH(k, dim3(1), dim3(48), 0, nullptr)(out.data());
    EXPECT_EQ(out[0], 8);
    EXPECT_EQ(out[31], 31);
    EXPECT_EQ(out[32], 40);
    EXPECT_EQ(out[40], 40) << "lane 16 of the second warp does not exist";
}

__global__ void divergent_barrier(int* out) {
    if (threadIdx.x < 16) __syncthreads();
    else out[0] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

TEST(CudaEmu, DivergentSynchronizationIsAnErrorNamingTheThreads) {
    int out = 0;
    auto* k = divergent_barrier;
    try {
        CONFORM_LAUNCH(k, dim3(1), dim3(32), 0, nullptr)(&out);
        FAIL() << "no error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("divergent synchronization"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("block (0,0,0) thread (0,0,0)"), std::string::npos) << e.what();
    }
}

__global__ void throws_in_one_thread(int* out) {
    if (blockIdx.x == 1 && threadIdx.x == 5) throw std::runtime_error("thread 5 of block 1");
    __syncthreads();
    out[blockIdx.x] = 1;
}

TEST(CudaEmu, AnExceptionInAThreadEndsTheLaunch) {
    int out[3] = {};
    auto* k = throws_in_one_thread;
    EXPECT_THROW(CONFORM_LAUNCH(k, dim3(3), dim3(32), 0, nullptr)(out), std::runtime_error);
    EXPECT_EQ(out[0], 1);
    EXPECT_EQ(out[2], 0) << "the launch stops at the failing block";
    // The emulation is usable again afterwards.
    std::vector<int> again(64, 0);
    auto* w = write_global_index;
    CONFORM_LAUNCH(w, dim3(1), dim3(64), 0, nullptr)(again.data(), 64);
    EXPECT_EQ(again[63], 64);
}

TEST(CudaEmu, ConversionsRoundAsTheDevice) {
    EXPECT_EQ(__float2bfloat16(1.0f + 0x1p-8f).x, 0x3f80) << "a tie rounds to even";
    EXPECT_EQ(__float2bfloat16(1.0f + 0x1.8p-8f).x, 0x3f81);
    EXPECT_EQ(__float2bfloat16_rz(1.0f + 0x1.8p-8f).x, 0x3f80);
    EXPECT_EQ(__float2bfloat16_rz(-1.0f - 0x1.8p-8f).x, 0xbf80) << "toward zero";
    EXPECT_EQ(__double2bfloat16(1.0 + 0x1p-8 + 0x1p-40).x, 0x3f81) << "one rounding from double";
    EXPECT_EQ(__double2half(1.0 + 0x1p-11 + 0x1p-40).x, 0x3c01);
    EXPECT_EQ(__half2float(__float2half_rn(65520.0f)), INFINITY);
    EXPECT_TRUE(std::isnan(__bfloat162float(__float2bfloat16_rz(NAN))));
    EXPECT_NE(__expf(80.0f), std::exp(80.0f)) << "the fast exponential is modelled, not the host's expf";
}

}  // namespace

// ---- tensor cores: mma.sync m16n8k16 (impls/cuda/mma.cuh, emu/mma_model.hpp) ----

namespace {

// One warp loads A (16 x 16, row-major) and B (16 x 8, row-major) into the
// fragments the PTX ISA documents for m16n8k16, written out here
// independently of the emulation, and stores D by the C layout.
__global__ void one_mma(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d, bool bf16) {
    const int lane = static_cast<int>(threadIdx.x), group = lane / 4, t = lane % 4;
    auto a_pair = [&](int r, int col) { return static_cast<std::uint32_t>(a[r * 16 + col]) | static_cast<std::uint32_t>(a[r * 16 + col + 1]) << 16; };
    auto b_pair = [&](int row, int col) { return static_cast<std::uint32_t>(b[row * 8 + col]) | static_cast<std::uint32_t>(b[(row + 1) * 8 + col]) << 16; };
    const std::uint32_t af[4] = {a_pair(group, 2 * t), a_pair(group + 8, 2 * t), a_pair(group, 2 * t + 8),
                                 a_pair(group + 8, 2 * t + 8)};
    const std::uint32_t bf[2] = {b_pair(2 * t, group), b_pair(2 * t + 8, group)};
    const float cf[4] = {c[group * 8 + 2 * t], c[group * 8 + 2 * t + 1], c[(group + 8) * 8 + 2 * t],
                         c[(group + 8) * 8 + 2 * t + 1]};
    float df[4];
    mma_m16n8k16(df, af, bf, cf, bf16);
    d[group * 8 + 2 * t] = df[0], d[group * 8 + 2 * t + 1] = df[1];
    d[(group + 8) * 8 + 2 * t] = df[2], d[(group + 8) * 8 + 2 * t + 1] = df[3];
}

std::vector<float> run_mma(const std::vector<double>& a, const std::vector<double>& b, const std::vector<float>& c,
                           bool bf16) {
    const conform::Format f = bf16 ? conform::Format::bf16 : conform::Format::fp16;
    std::vector<std::uint16_t> ab(256), bb(128);
    for (int i = 0; i < 256; ++i) ab[i] = static_cast<std::uint16_t>(conform::encode(f, a[i]));
    for (int i = 0; i < 128; ++i) bb[i] = static_cast<std::uint16_t>(conform::encode(f, b[i]));
    std::vector<float> d(128, NAN);
    auto* k = one_mma;
    CONFORM_LAUNCH(k, dim3(1), dim3(32), 0, nullptr)(ab.data(), bb.data(), c.data(), d.data(), bf16);
    return d;
}

}  // namespace

// Small integers: every product and sum is exact, so D must be the integer
// product; A, B and C asymmetric, so a transposed or shifted fragment index
// gives another matrix.
TEST(CudaEmuMma, FragmentsFollowThePtxLayout) {
    std::vector<double> a(256), b(128);
    std::vector<float> c(128);
    for (int i = 0; i < 256; ++i) a[i] = (i * 7 % 13) - 6;
    for (int i = 0; i < 128; ++i) b[i] = (i * 5 % 11) - 5, c[i] = static_cast<float>(i % 9);
    for (bool bf16 : {false, true}) {
        const std::vector<float> d = run_mma(a, b, c, bf16);
        for (int r = 0; r < 16; ++r)
            for (int n = 0; n < 8; ++n) {
                double want = c[r * 8 + n];
                for (int k = 0; k < 16; ++k) want += a[r * 16 + k] * b[k * 8 + n];
                EXPECT_EQ(d[r * 8 + n], want) << "D[" << r << "][" << n << "] bf16=" << bf16;
            }
    }
}

// The model drops what lies below 2^(E - 25): with c = 1, sixteen 2^-27
// products vanish (their exact sum 2^-23 would make 1 + 2^-23, an FP32
// value); a negative sum truncates toward zero; and the error stays within
// block_fma_bound on random blocks.
TEST(CudaEmuMma, BlockFmaTruncatesBelowTheLargestTerm) {
    double a[16], b[16];
    std::fill(a, a + 16, 0x1p-14), std::fill(b, b + 16, 0x1p-13);  // 2^-27 each, normal FP16 factors
    EXPECT_EQ(block_fma(1.0f, a, b, 16, -14), 1.0f);
    EXPECT_EQ(block_fma(0.0f, a, b, 16, -14), 0x1p-23f) << "alone, the small terms are exact";
    // -1 - 1.75 2^-24: the product truncates to -3 2^-25 on the grid 2^-25, and -(1 + 0.75 2^-23)
    // to -1 in FP32, where rounding to nearest would give -(1 + 2^-23).
    double one[1] = {1.0}, neg[1] = {-0x1.cp-24};
    EXPECT_EQ(block_fma(-1.0f, neg, one, 1, -126), -1.0f);
    EXPECT_EQ(static_cast<float>(-1.0 + neg[0]), -0x1.000002p0f);
    std::uint64_t state = 1;
    auto next = [&] {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<double>(state >> 11) * 0x1p-53 * 2 - 1;
    };
    for (int trial = 0; trial < 2000; ++trial) {
        double x[16], y[16], mags = 0, exact = 0, m = 0;
        const float c = static_cast<float>(next() * 100);
        for (int k = 0; k < 16; ++k) {
            x[k] = decode(Format::bf16, encode(Format::bf16, next() * std::ldexp(1.0, static_cast<int>(next() * 20))));
            y[k] = decode(Format::bf16, encode(Format::bf16, next()));
            mags += std::fabs(x[k] * y[k]), exact += x[k] * y[k], m = std::max({m, std::fabs(x[k]), std::fabs(y[k])});
        }
        mags += std::fabs(c), exact += c;
        const float d = block_fma(c, x, y, 16, -126);
        EXPECT_LE(std::fabs(d - exact), block_fma_bound(mags, m, 16, -126)) << trial;
    }
}

// A subnormal factor counts at its format's smallest normal exponent: the
// product 2^-24 * 2^10 = 2^-14 raises E to -14 + 10 = -4, so the other
// product, 2^-14 (1 + 2^-10)^2 = 2^-14 + 2^-23 + 2^-34, loses 2^-34 below
// the grid 2^-29, although no term is above 2^-13.
TEST(CudaEmuMma, ASubnormalFactorRaisesTheBlockExponent) {
    double a[2] = {0x1p-24, 0x1.004p-14}, b[2] = {0x1p10, 0x1.004p0};
    EXPECT_EQ(block_fma(0.0f, a, b, 2, -14), 0x1p-13f + 0x1p-23f);
    EXPECT_EQ(static_cast<float>(a[0] * b[0] + a[1] * b[1]), 0x1p-13f + 0x1p-23f + 0x1p-34f);
    EXPECT_EQ(block_fma(0.0f, a, b, 2, -126), 0x1p-13f + 0x1p-23f + 0x1p-34f) << "as BF16 values none is subnormal";
}

// Blocks measured on an H200 (golden/device/, the first 12 blocks of conform
// cuda-bench's probe: normal, cancelling and subnormal inputs): the model
// gives every element's bits, and the bound holds.
TEST(CudaEmuMma, MeasuredH200BlocksAreReproducedBitForBit) {
    for (const auto& [file, f, emin] : {std::tuple{"mma_m16n8k16_f16_h200.bin", Format::fp16, -14},
                                        std::tuple{"mma_m16n8k16_bf16_h200.bin", Format::bf16, -126}}) {
        const std::string path = std::string(CONFORM_SOURCE_DIR) + "/golden/device/" + file;
        std::FILE* in = std::fopen(path.c_str(), "rb");
        ASSERT_NE(in, nullptr) << path;
        constexpr int kBlocks = 12;
        std::vector<std::uint16_t> a(kBlocks * 256), b(kBlocks * 128);
        std::vector<float> c(kBlocks * 128), d(kBlocks * 128);
        const bool read = std::fread(a.data(), 2, a.size(), in) == a.size() && std::fread(b.data(), 2, b.size(), in) == b.size() &&
                          std::fread(c.data(), 4, c.size(), in) == c.size() && std::fread(d.data(), 4, d.size(), in) == d.size();
        std::fclose(in);
        ASSERT_TRUE(read) << path;
        int differ_from_true_exponents = 0;
        for (int blk = 0; blk < kBlocks; ++blk)
            for (int e = 0; e < 128; ++e) {
                double x[16], y[16], mags = std::fabs(c[blk * 128 + e]), exact = c[blk * 128 + e], m = 0;
                for (int k = 0; k < 16; ++k) {
                    x[k] = decode(f, a[blk * 256 + (e / 8) * 16 + k]), y[k] = decode(f, b[blk * 128 + k * 8 + e % 8]);
                    mags += std::fabs(x[k] * y[k]), exact += x[k] * y[k], m = std::max({m, std::fabs(x[k]), std::fabs(y[k])});
                }
                const float got = d[blk * 128 + e];
                ASSERT_EQ(block_fma(c[blk * 128 + e], x, y, 16, emin), got) << file << " block " << blk << " element " << e;
                EXPECT_LE(std::fabs(got - exact), block_fma_bound(mags, m, 16, emin)) << file << " block " << blk;
                differ_from_true_exponents += block_fma(c[blk * 128 + e], x, y, 16, -1000) != got;
            }
        if (f == Format::fp16) {
            EXPECT_GT(differ_from_true_exponents, 0) << "the subnormal rule is exercised";
        }
    }
}

TEST(CudaEmuMma, SpecialValuesFollowIeee) {
    double a[2] = {1.0, INFINITY}, b[2] = {1.0, 1.0};
    EXPECT_EQ(block_fma(1.0f, a, b, 2, -14), INFINITY);
    a[0] = -INFINITY;
    EXPECT_TRUE(std::isnan(block_fma(1.0f, a, b, 2, -14)));
    a[0] = NAN, a[1] = 0;
    EXPECT_TRUE(std::isnan(block_fma(1.0f, a, b, 2, -14)));
    a[0] = 0x1p-140, a[1] = 0x1p-141;  // a subnormal sum truncates to FP32's subnormal grid
    EXPECT_EQ(block_fma(0.0f, a, b, 2, -126), static_cast<float>(0x1p-140 + 0x1p-141));
}

// mma.sync is .aligned: a warp with lanes missing is an error, not a result.
TEST(CudaEmuMma, EveryLaneMustTakePart) {
    std::vector<float> c(128, 0);
    std::vector<std::uint16_t> ab(256, 0x3c00), bb(128, 0x3c00);
    std::vector<float> d(128);
    auto* k = one_mma;
    EXPECT_THROW(CONFORM_LAUNCH(k, dim3(1), dim3(16), 0, nullptr)(ab.data(), bb.data(), c.data(), d.data(), false),
                 std::runtime_error);
}

// ldmatrix.x4 gives each lane mma's fragment registers of four 8 x 8
// matrices (rows 8 i .. 8 i + 7 of a 32 x 16 shared array here, element
// (r, c) = 64 r + c: every value tells where it came from), straight and
// transposed; `offset` shifts every row address by that many elements.
template <bool kTrans>
__global__ void ldmatrix_all(std::uint32_t* out, int offset) {
    alignas(16) __shared__ unsigned short s[32][16];
    for (int c = 0; c < 16; ++c) s[threadIdx.x][c] = static_cast<unsigned short>(64 * threadIdx.x + c);
    __syncwarp(0xffffffffu);
    std::uint32_t r[4];
    ldmatrix_x4(r, &s[threadIdx.x][0] + offset, kTrans);  // lane l: row l % 8 of matrix l / 8, i.e. row l
    for (int i = 0; i < 4; ++i) out[4 * threadIdx.x + i] = r[i];
}

TEST(CudaEmuMma, LdmatrixFollowsThePtxFragmentLayout) {
    for (bool trans : {false, true}) {
        std::vector<std::uint32_t> out(128, 0);
        auto* k = trans ? ldmatrix_all<true> : ldmatrix_all<false>;
        CONFORM_LAUNCH(k, dim3(1), dim3(32), 0, nullptr)(out.data(), 0);
        for (int lane = 0; lane < 32; ++lane)
            for (int i = 0; i < 4; ++i) {
                const int group = lane / 4, t = lane % 4;
                // Straight: row group, columns 2t and 2t + 1; transposed: rows 2t and 2t + 1, column group.
                const int r0 = 8 * i + (trans ? 2 * t : group), c0 = trans ? group : 2 * t;
                const int r1 = trans ? r0 + 1 : r0, c1 = trans ? c0 : c0 + 1;
                const std::uint32_t want = static_cast<std::uint32_t>(64 * r0 + c0) | static_cast<std::uint32_t>(64 * r1 + c1) << 16;
                ASSERT_EQ(out[4 * lane + i], want) << (trans ? "trans" : "straight") << " lane " << lane << " matrix " << i;
            }
    }
    std::vector<std::uint32_t> out(128, 0);
    auto* k = ldmatrix_all<false>;
    try {
        CONFORM_LAUNCH(k, dim3(1), dim3(32), 0, nullptr)(out.data(), 4);  // 8 bytes into each row
        ADD_FAILURE() << "a row address off 16 bytes was read";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("not 16-byte aligned"), std::string::npos) << e.what();
    }
    EXPECT_THROW(CONFORM_LAUNCH(k, dim3(1), dim3(16), 0, nullptr)(out.data(), 0), std::runtime_error)
        << "half a warp took part";
}

}  // namespace cuda_emu_test
