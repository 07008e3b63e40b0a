// Attention forward on the CPU: cpu.simd.attention fp32 and bf16 at batch 1,
// 32 query heads, 8 KV heads, head dim 128, causal, lengths 512 to 8192,
// reported as FLOP/s with FLOPs = 4 Hq Lq Lk_visible D (two matrix products,
// counting only the visible keys: Lk_visible = L (L + 1) / 2 per head for a
// square causal mask).  cpu.naive at 512 is the baseline: the simd rows at
// 512 report x_naive, the naive kernel's CPU time over theirs.  The kernels are
// single-threaded and rates are per CPU second (not wall time), so a busy
// shared machine does not distort them much.
#include <benchmark/benchmark.h>

#include <ctime>
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

// The kernels as a list (the same kernels builtin_registry() holds).
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

// Runs the kernel once per call; binds the inputs of (format, length).
struct Call {
    const KernelInfo& k;
    Params params{std::map<std::string, double>{{"causal", 1}}};
    Tensor o, lse;
    KernelCall call;
    Call(const KernelInfo& kernel, std::int64_t len)
        : k(kernel), o(k.out, {kHq, len, kD}), lse(Format::fp32, {kHq, len}), call{params, {}, {o.view(), lse.view()}} {
        for (const Tensor& t : inputs(k.in, len)) call.in.push_back(t.view());
    }
    void operator()() { k.fn(call); }
};

double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

// CPU seconds of one naive call at length 512 (measured once per format).
double naive_seconds_512(Format f) {
    static std::map<Format, double> cache;
    auto it = cache.find(f);
    if (it != cache.end()) return it->second;
    Call naive(attention_kernel(std::string("cpu.naive.attention.") + name(f)), 512);
    const double t0 = cpu_seconds();
    naive();
    return cache[f] = cpu_seconds() - t0;
}

void attention(benchmark::State& state, const std::string& kernel, std::int64_t len) {
    Call run(attention_kernel(kernel), len);
    const double t0 = cpu_seconds();
    for (auto _ : state) {
        run();
        benchmark::DoNotOptimize(run.o.data());
        benchmark::ClobberMemory();
    }
    const double per_call = (cpu_seconds() - t0) / static_cast<double>(state.iterations());
    const double flops = 4.0 * kHq * (len * (len + 1) / 2.0) * kD;
    state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
    // speed-up over the naive kernel of the same format at 512 (simd kernels at 512 only)
    if (len == 512 && run.k.variant == "simd") state.counters["x_naive"] = naive_seconds_512(run.k.in) / per_call;
}

const int registered = [] {
    for (const char* f : {"fp32", "bf16"}) {
        for (std::int64_t len : {512, 2048, 8192}) {
            const std::string kn = std::string("cpu.simd.attention.") + f;
            auto* b = benchmark::RegisterBenchmark((kn + "/" + std::to_string(len)).c_str(), attention, kn, len)
                          ->Unit(benchmark::kMillisecond);
            if (len == 8192) b->Iterations(1);  // ~0.55 TFLOP: tens of seconds per call
        }
        const std::string naive = std::string("cpu.naive.attention.") + f;  // ~1 s per iteration
        benchmark::RegisterBenchmark((naive + "/512").c_str(), attention, naive, 512)
            ->Unit(benchmark::kMillisecond)
            ->Iterations(1);
    }
    return 0;
}();

}  // namespace
