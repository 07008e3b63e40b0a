// Shared pieces of the benchmark programs: the machine's copy bandwidth as
// the reference every memory-bound kernel is compared against, and inputs.
#pragma once
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "numerics/tensor.hpp"

namespace conform::bench {

// memcpy of `bytes` bytes: reports bytes/s counting read + write, the same
// accounting the kernels use (input bytes read + output bytes written).
inline void copy_bandwidth(benchmark::State& state) {
    const std::size_t bytes = static_cast<std::size_t>(state.range(0));
    std::vector<char> a(bytes, 1), b(bytes);
    for (auto _ : state) {
        std::memcpy(b.data(), a.data(), bytes);
        benchmark::DoNotOptimize(b.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * static_cast<std::int64_t>(bytes));
}

// A [rows, cols] tensor of N(0, 1) values (deterministic seed).
inline Tensor normal_tensor(Format f, std::int64_t rows, std::int64_t cols, unsigned seed = 1) {
    Tensor t(f, {rows, cols});
    std::mt19937 gen(seed);
    std::normal_distribution<double> d;
    for (std::int64_t i = 0; i < rows * cols; ++i) t.set_value(i, d(gen));
    return t;
}

}  // namespace conform::bench
