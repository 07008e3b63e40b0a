// Attention forward on the CPU: cpu.simd.attention fp32 and bf16 at batch 1,
// 32 query heads, 8 KV heads, head dim 128, causal, lengths 512 and 2048,
// reported as FLOP/s with FLOPs = 4 Hq Lq Lk_visible D (two matrix products,
// counting only the visible keys: Lk_visible = L (L + 1) / 2 per head for a
// square causal mask).  cpu.naive at 512 is the baseline the ratio is taken
// against (compare the FLOP/s columns: same FLOP count).
#include <benchmark/benchmark.h>

#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "impls/cpu/attention.hpp"

namespace {

using namespace conform;

constexpr std::int64_t kHq = 32, kHkv = 8, kD = 128;

// The kernels as a list (Registry::add needs the op declared in numerics/op.cpp).
const KernelInfo& attention_kernel(const std::string& name) {
    static const std::vector<KernelInfo> all = cpu_attention_kernels();
    for (const KernelInfo& k : all)
        if (k.name == name) return k;
    throw std::invalid_argument("no kernel " + name);
}

Tensor normal(Format f, std::vector<std::int64_t> shape, unsigned seed) {
    Tensor t(f, std::move(shape));
    std::mt19937 g(seed);
    std::normal_distribution<double> d;
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, d(g));
    return t;
}

// q, k, v for (format, length), built once.
const std::vector<Tensor>& inputs(Format f, std::int64_t len) {
    static std::map<std::pair<Format, std::int64_t>, std::vector<Tensor>> cache;
    auto& in = cache[{f, len}];
    if (in.empty()) in = {normal(f, {kHq, len, kD}, 1), normal(f, {kHkv, len, kD}, 2), normal(f, {kHkv, len, kD}, 3)};
    return in;
}

void attention(benchmark::State& state, const std::string& kernel, std::int64_t len) {
    const KernelInfo& k = attention_kernel(kernel);
    const Params params(std::map<std::string, double>{{"causal", 1}});
    Tensor o(k.out, {kHq, len, kD}), lse(Format::fp32, {kHq, len});
    KernelCall call{params, {}, {o.view(), lse.view()}};
    for (const Tensor& t : inputs(k.in, len)) call.in.push_back(t.view());
    for (auto _ : state) {
        k.fn(call);
        benchmark::DoNotOptimize(o.data());
        benchmark::ClobberMemory();
    }
    const double flops = 4.0 * kHq * (len * (len + 1) / 2.0) * kD;
    state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

const int registered = [] {
    for (const char* f : {"fp32", "bf16"}) {
        for (std::int64_t len : {512, 2048}) {
            const std::string kn = std::string("cpu.simd.attention.") + f;
            benchmark::RegisterBenchmark((kn + "/" + std::to_string(len)).c_str(), attention, kn, len)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
        const std::string naive = std::string("cpu.naive.attention.") + f;  // ~1 s per iteration
        benchmark::RegisterBenchmark((naive + "/512").c_str(), attention, naive, 512)
            ->Unit(benchmark::kMillisecond)
            ->Iterations(1)
            ->UseRealTime();
    }
    return 0;
}();

}  // namespace
