// Shared pieces of the benchmark programs: the machine's copy bandwidth as
// the reference every memory-bound kernel is compared against, and inputs.
#pragma once
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "impls/registry.hpp"
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

// ---- the elementwise families' driver (activation_bench, gated_bench) ----
// Every cpu.simd kernel of `ops` and the copy reference per (shape, format),
// plus one naive baseline on the cache-resident shapes.  (Own namespace:
// norm_bench has its own Shape.)
namespace elementwise {

struct Shape {
    std::int64_t rows, cols;
};
// Two cache-resident shapes and two transformer-sized ones well beyond the
// caches (4096 tokens x hidden 4096, 2048 x 8192), where bandwidth is the limit.
inline constexpr Shape kShapes[] = {{64, 4096}, {32, 8192}, {4096, 4096}, {2048, 8192}};
constexpr Format kFormats[] = {Format::fp32, Format::bf16, Format::fp16};

// N(0,1) inputs, built once per (format, shape, seed): large ones take a while.
inline const Tensor& input(Format f, Shape s, unsigned seed) {
    static std::map<std::tuple<Format, std::int64_t, std::int64_t, unsigned>, Tensor> cache;
    auto key = std::make_tuple(f, s.rows, s.cols, seed);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, normal_tensor(f, s.rows, s.cols, seed)).first;
    return it->second;
}

// One registered kernel on its op's inputs (x, or gate and up), output preallocated.
inline void run_registered(benchmark::State& state, const std::string& kernel, Shape s) {
    const KernelInfo& k = *builtin_registry().find(kernel);
    const OpSpec& op = *find_op(k.op);
    const Params params = Params::defaults(op);
    Tensor out(k.out, {s.rows, s.cols});
    KernelCall call{params, {}, {out.view()}};
    for (std::size_t i = 0; i < op.inputs.size(); ++i) call.in.push_back(input(k.in, s, 1 + i).view());
    for (auto _ : state) {
        k.fn(call);
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    const std::int64_t bytes =
        s.rows * s.cols * info(k.in).bytes * static_cast<std::int64_t>(op.inputs.size() + 1);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
}

inline void register_family(const std::vector<std::string>& ops, const std::string& naive_op) {
    for (Shape s : kShapes) {
        const std::string dims = std::to_string(s.rows) + "x" + std::to_string(s.cols);
        for (Format f : kFormats) {
            const std::string tail = std::string(".") + name(f);
            const std::int64_t bytes = s.rows * s.cols * info(f).bytes;
            benchmark::RegisterBenchmark(("copy/" + dims + tail).c_str(), copy_bandwidth)->Arg(bytes);
            for (const auto& op : ops) {
                std::string kn = "cpu.simd." + op + tail;
                benchmark::RegisterBenchmark((kn + "/" + dims).c_str(), run_registered, kn, s);
            }
            if (s.rows * s.cols > (1 << 18)) continue;  // naive: ~1 us/element, cache-resident shapes only
            std::string kn = "cpu.naive." + naive_op + tail;
            benchmark::RegisterBenchmark((kn + "/" + dims).c_str(), run_registered, kn, s);
        }
    }
}

}  // namespace elementwise
}  // namespace conform::bench
