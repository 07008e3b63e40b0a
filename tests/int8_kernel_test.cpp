// INT8 GEMM kernels beyond the property suite: the AVX2 product equals the
// scalar one bit for bit on ragged shapes (tails of the 4 x 16 blocks, odd K),
// and throughput (b packed ahead of time, as weights are) at decode shapes and
// M = 1024 beside an FP32 GEMM through Eigen (docs/int8.md "Measured"; reported, not gated: the machine is shared).
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "impls/cpu/int8_gemm.hpp"
#include "impls/cpu/isa.hpp"

using namespace conform;

namespace {

std::vector<std::int8_t> codes(std::mt19937_64& g, std::int64_t n) {
    std::vector<std::int8_t> v(static_cast<std::size_t>(n));
    for (auto& c : v) c = static_cast<std::int8_t>(static_cast<int>(g() % 256) - 128);
    return v;
}

template <class F>
double seconds_per_call(F&& f) {
    f();  // warm up
    const auto t0 = std::chrono::steady_clock::now();
    int reps = 0;
    double s = 0;
    while (s < 0.5 || reps < 2) {
        f();
        ++reps;
        s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return s / reps;
}

}  // namespace

TEST(Int8Kernels, Avx2EqualsScalarOnRaggedShapes) {
    if (!cpu::has_avx2()) GTEST_SKIP() << "no AVX2";
    std::mt19937_64 g(31);
    for (std::int64_t m : {1, 3, 4, 5, 9})
        for (std::int64_t k : {1, 2, 7, 64, 513})
            for (std::int64_t n : {1, 15, 16, 17, 40}) {
                const auto a = codes(g, m * k), b = codes(g, k * n);
                std::vector<std::int32_t> x(static_cast<std::size_t>(m * n)), y(x.size());
                cpu::int8_matmul_avx2(a.data(), b.data(), x.data(), m, k, n);
                cpu::int8_matmul_scalar(a.data(), b.data(), y.data(), m, k, n);
                EXPECT_EQ(x, y) << m << "x" << k << "x" << n;
            }
}

TEST(Int8Kernels, Throughput) {
    if (!cpu::has_avx2()) GTEST_SKIP() << "no AVX2";
    std::mt19937_64 g(32);
    const std::int64_t K = 4096, N = 4096;
    const auto b = codes(g, K * N);
    const Eigen::MatrixXf fb = Eigen::MatrixXf::Random(K, N);
    const cpu::PackedInt8B packed = cpu::pack_int8_b(b.data(), K, N);  // weights: packed once, ahead of time
    for (std::int64_t m : {1, 4, 16, 1024}) {
        const auto a = codes(g, m * K);
        std::vector<std::int32_t> acc(static_cast<std::size_t>(m * N));
        const double t8 = seconds_per_call([&] { cpu::int8_matmul_avx2_packed(a.data(), packed, acc.data(), m); });
        const Eigen::MatrixXf fa = Eigen::MatrixXf::Random(m, K);
        Eigen::MatrixXf fc(m, N);
        const double t32 = seconds_per_call([&] { fc.noalias() = fa * fb; });
        const double ops = 2.0 * static_cast<double>(m) * K * N;
        std::printf("M=%-5lld K=N=4096: int8 AVX2 %7.2f GOP/s, fp32 Eigen %7.2f GFLOP/s, ratio %.2f\n",
                    static_cast<long long>(m), ops / t8 / 1e9, ops / t32 / 1e9, t32 / t8);
    }
}
