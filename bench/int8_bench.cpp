// Throughput of the INT8 GEMM (docs/int8.md "Performance"): the AVX2 kernel
// (vpmaddwd into INT32, b packed ahead of time as weights are) at
// 4096 x 4096 x 4096 and at decode shapes M = 1, 2, 4, 8, 16 (K = N = 4096),
// as OP/s (2 M N K per call) and as the ratio to an FP32 GEMM through Eigen on
// the same shape in the same run: each shape runs `fp32_eigen/...` first and
// `int8_avx2/...` reads its rate (counter vs_fp32_eigen).  One thread each.
// And the whole int8_block kernel (docs/int8.md "int8_block as an op") at a
// prefill shape, simd against scalar, as tokens per second.
// Run: ./bench/int8_bench --benchmark_min_time=0.5
#include "impls/cpu/x86_intrinsics.hpp"  // before Eigen: GCC 12's false warnings in <immintrin.h>
#include <Eigen/Dense>

#include <cmath>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "impls/cpu/int8_gemm.hpp"
#include "impls/cpu/isa.hpp"
#include "impls/registry.hpp"

namespace {

constexpr std::int64_t kK = 4096, kN = 4096;

std::vector<std::int8_t> random_codes(std::int64_t count, unsigned seed) {
    std::mt19937 g(seed);
    std::vector<std::int8_t> v(static_cast<std::size_t>(count));
    for (auto& c : v) c = static_cast<std::int8_t>(static_cast<int>(g() % 255) - 127);
    return v;
}

const conform::cpu::PackedInt8B& packed_weights() {  // built once, as weights are
    static const conform::cpu::PackedInt8B b = conform::cpu::pack_int8_b(random_codes(kK * kN, 2).data(), kK, kN);
    return b;
}

const Eigen::MatrixXf& fp32_weights() {
    static const Eigen::MatrixXf b = Eigen::MatrixXf::Random(kK, kN);
    return b;
}

std::map<std::int64_t, double>& fp32_rate() {  // OP/s of the Eigen GEMM per M, this run
    static std::map<std::int64_t, double> r;
    return r;
}

// Runs `call` under the state's loop; returns the operations per second of
// CPU time (as the OP/s counter reports them: on a loaded machine the wall
// clock also counts the time other processes held the core).
template <class F>
double timed(benchmark::State& state, std::int64_t m, F&& call) {
    const double t0 = conform::bench::thread_cpu_seconds();
    for (auto _ : state) call();
    const double s = conform::bench::thread_cpu_seconds() - t0;
    const double ops = 2.0 * static_cast<double>(m) * kK * kN;
    state.counters["OP/s"] = benchmark::Counter(ops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
    return ops * static_cast<double>(state.iterations()) / s;
}

void fp32_eigen(benchmark::State& state) {
    const std::int64_t m = state.range(0);
    const Eigen::MatrixXf a = Eigen::MatrixXf::Random(m, kK);
    Eigen::MatrixXf c(m, kN);
    fp32_rate()[m] = timed(state, m, [&] {
        c.noalias() = a * fp32_weights();
        benchmark::DoNotOptimize(c.data());
    });
}

void int8_avx2(benchmark::State& state) {
    if (!conform::cpu::has_avx2()) return state.SkipWithError("no AVX2");
    const std::int64_t m = state.range(0);
    const auto a = random_codes(m * kK, 3);
    std::vector<std::int32_t> acc(static_cast<std::size_t>(m * kN));
    const double rate = timed(state, m, [&] {
        conform::cpu::int8_matmul_avx2_packed(a.data(), packed_weights(), acc.data(), m);
        benchmark::DoNotOptimize(acc.data());
    });
    if (fp32_rate().count(m)) state.counters["vs_fp32_eigen"] = rate / fp32_rate()[m];
}

// One pre-norm block, T = 128 tokens, d = 256, 4 heads, FFN 1024, FP16
// values from N(0, 1) (weights N(0, 1/fan_in), LN gains 1): every stage as
// the registered kernel computes it, weights quantized per call.
std::vector<conform::Tensor> block_inputs() {
    using conform::Format;
    constexpr std::int64_t t = 128, d = 256, ffn = 1024;
    std::mt19937 g(3);
    auto gaussian = [&g](std::vector<std::int64_t> shape, double mean, double sd) {
        std::normal_distribution<double> n(mean, sd);
        conform::Tensor x(Format::fp16, std::move(shape));
        for (std::int64_t i = 0; i < x.numel(); ++i) x.set_value(i, n(g));
        return x;
    };
    const double sd = 1 / std::sqrt(double(d)), sf = 1 / std::sqrt(double(ffn));
    return {gaussian({t, d}, 0, 1),    gaussian({d}, 1, 0.1),    gaussian({d}, 0, 0.1),      gaussian({d, d}, 0, sd),
            gaussian({d, d}, 0, sd),   gaussian({d, d}, 0, sd),  gaussian({d, d}, 0, sd),    gaussian({d}, 1, 0.1),
            gaussian({d}, 0, 0.1),     gaussian({d, ffn}, 0, sd), gaussian({ffn, d}, 0, sf)};
}

void int8_block(benchmark::State& state, const char* kernel) {
    static const std::vector<conform::Tensor> in = block_inputs();
    std::vector<conform::TensorView> views;
    for (const auto& x : in) views.push_back(x.view());
    const conform::Params p({{"heads", 4.0}, {"eps", 1e-5}});
    const conform::KernelInfo& k = *conform::builtin_registry().find(kernel);
    for (auto _ : state) benchmark::DoNotOptimize(conform::run_kernel(k, p, views));
    state.counters["tokens/s"] = benchmark::Counter(128.0 * double(state.iterations()), benchmark::Counter::kIsRate);
}

const int registered = [] {
    for (const char* k : {"cpu.simd.int8_block.fp16", "cpu.scalar.int8_block.fp16"})
        benchmark::RegisterBenchmark((std::string("int8_block/T=128/d=256/heads=4/ffn=1024/") + k).c_str(),
                                     [k](benchmark::State& st) { int8_block(st, k); })
            ->Unit(benchmark::kMillisecond);
    for (std::int64_t m : {1, 2, 4, 8, 16, 4096}) {
        const std::string shape = "/M=" + std::to_string(m) + "/K=4096/N=4096";
        auto* f = benchmark::RegisterBenchmark(("fp32_eigen" + shape).c_str(), fp32_eigen)->Arg(m)->Unit(benchmark::kMillisecond);
        auto* i = benchmark::RegisterBenchmark(("int8_avx2" + shape).c_str(), int8_avx2)->Arg(m)->Unit(benchmark::kMillisecond);
        if (m > 16) f->Iterations(1), i->Iterations(1);  // seconds per call
    }
    return 0;
}();

}  // namespace
