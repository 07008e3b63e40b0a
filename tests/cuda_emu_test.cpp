// The CPU emulation of CUDA (impls/cuda/emu, docs/cuda.md "Emulation"):
// coordinates, barriers, warp shuffles and votes behave as on the device,
// a missing barrier gives a wrong result deterministically, and a divergent
// barrier is an error naming the threads, not a hang.
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

#include "impls/cuda/emu/emu.hpp"

namespace {

using namespace conform::cuda_emu;

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
