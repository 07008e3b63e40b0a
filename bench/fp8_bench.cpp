// Throughput of the FP8 GEMM (docs/fp8.md "Performance"): the SIMD kernel
// (codes decoded per 128-deep block, the FP32 matmul kernel on each block,
// promotion) beside conform's own FP32 matmul kernel on the same shape in
// the same run: each shape runs `matmul_fp32/...` first and `fp8_gemm/...`
// reads its rate (counter vs_matmul_fp32).  E4M3 codes, scales near 1, BF16
// output; one thread; FLOP/s are 2 M N K per call of CPU time.
// Run: ./bench/fp8_bench --benchmark_min_time=0.3
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_util.hpp"
#include "impls/registry.hpp"

namespace {

using conform::Format;
using conform::Tensor;

std::map<std::string, double>& matmul_rate() {  // FLOP/s of the FP32 matmul per shape, this run
    static std::map<std::string, double> r;
    return r;
}

Tensor filled(Format f, std::vector<std::int64_t> shape, double lo, double hi, unsigned seed) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    Tensor t(f, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, u(g));  // rounded into f (codes for FP8)
    return t;
}

// The kernel on preallocated outputs (as a caller holding y would).
double run(benchmark::State& state, const char* name, const std::vector<Tensor>& in, Tensor& y, double flop) {
    const conform::KernelInfo& k = *conform::builtin_registry().find(name);
    std::vector<conform::TensorView> views;
    for (const Tensor& t : in) views.push_back(t.view());
    const conform::Params p({{"block", 128.0}});
    const conform::KernelCall call{p, views, {y.view()}};
    const double t0 = conform::bench::thread_cpu_seconds();
    for (auto _ : state) {
        k.fn(call);
        benchmark::DoNotOptimize(y.data());
    }
    const double s = conform::bench::thread_cpu_seconds() - t0;
    state.counters["FLOP/s"] = benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
    return flop * static_cast<double>(state.iterations()) / s;
}

void matmul_fp32(benchmark::State& state, std::int64_t m, std::int64_t k, std::int64_t n, const std::string& shape) {
    const std::vector<Tensor> in{filled(Format::fp32, {m, k}, -4, 4, 1), filled(Format::fp32, {k, n}, -4, 4, 2)};
    Tensor y(Format::fp32, {m, n});
    matmul_rate()[shape] = run(state, "cpu.simd.matmul.fp32", in, y, 2.0 * m * k * n);
}

void fp8_gemm(benchmark::State& state, std::int64_t m, std::int64_t k, std::int64_t n, const std::string& shape) {
    const std::int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
    const std::vector<Tensor> in{filled(Format::fp8_e4m3, {m, k}, -400, 400, 1), filled(Format::fp32, {m, kb}, 0.5, 1, 3),
                                 filled(Format::fp8_e4m3, {k, n}, -400, 400, 2), filled(Format::fp32, {kb, nb}, 0.5, 1, 4)};
    Tensor y(Format::bf16, {m, n});
    const double rate = run(state, "cpu.simd.fp8_gemm.fp8_e4m3", in, y, 2.0 * m * k * n);
    if (matmul_rate().count(shape)) state.counters["vs_matmul_fp32"] = rate / matmul_rate()[shape];
}

const int registered = [] {
    for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{128, 4096, 4096}, {128, 4096, 1024},
                           {129, 1023, 1001}, {1, 4096, 4096}}) {
        const std::string shape = "/M=" + std::to_string(m) + "/K=" + std::to_string(k) + "/N=" + std::to_string(n);
        benchmark::RegisterBenchmark(("matmul_fp32" + shape).c_str(),
                                     [=](benchmark::State& st) { matmul_fp32(st, m, k, n, shape); })
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("fp8_gemm" + shape).c_str(), [=](benchmark::State& st) { fp8_gemm(st, m, k, n, shape); })
            ->Unit(benchmark::kMillisecond);
    }
    return 0;
}();

}  // namespace
