// Throughput of the batched Sinkhorn kernels (docs/sinkhorn.md "Performance"):
// matrices per second for n = 4, 8, 16, 32 (20 iterations, mHC's default) in
// fp32 and bf16, cpu.simd (eight matrices per AVX2 register) beside
// cpu.scalar, on a batch of about 2^20 logits (65 536 matrices at n = 4).
// Run: ./bench/sinkhorn_bench --benchmark_min_time=0.5
#include <random>
#include <string>

#include "bench/bench_util.hpp"

namespace {

using conform::Format;

void sinkhorn(benchmark::State& state, const std::string& kernel, std::int64_t n) {
    const conform::KernelInfo& k = *conform::builtin_registry().find(kernel);
    const std::int64_t batch = (std::int64_t{1} << 20) / (n * n);
    conform::Tensor logits(k.in, {batch, n, n}), out(k.out, {batch, n, n});
    std::mt19937 g(1);
    std::normal_distribution<double> d;
    for (std::int64_t i = 0; i < logits.numel(); ++i) logits.set_value(i, d(g));
    const conform::Params params = conform::Params::defaults(*conform::find_op("sinkhorn"));
    conform::KernelCall call{params, {logits.view()}, {out.view()}};
    for (auto _ : state) {
        k.fn(call);
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["matrices/s"] = benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
}

const int registered = [] {
    for (std::int64_t n : {4, 8, 16, 32})
        for (Format f : {Format::fp32, Format::bf16})
            for (const char* variant : {"simd", "scalar"}) {
                const std::string kernel = std::string("cpu.") + variant + ".sinkhorn." + conform::name(f);
                benchmark::RegisterBenchmark((kernel + "/n=" + std::to_string(n)).c_str(), sinkhorn, kernel, n)
                    ->Unit(benchmark::kMillisecond);
            }
    return 0;
}();

}  // namespace
