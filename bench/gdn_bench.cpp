// Gated delta rule on the CPU: the chunkwise kernels cpu.simd.gdn / kda (fp32
// and bf16 inputs, FP32 state, chunk 64) at 16 heads, d_k = d_v = 128,
// lengths 1024 to 16384, reported as tokens/s (all 16 heads of a token) and
// x_naive, the naive recurrent baseline's CPU time per token over the
// kernel's (the baseline is measured once per op and format at 1024 tokens:
// its cost per token does not depend on the length).  The naive baseline is
// plain scalar loops, so x_naive of the AVX2 kernels combines the vector
// units and the chunkwise algorithm; cpu.scalar at 1024 shows the algorithm
// alone.  Single-threaded; rates
// are per CPU second, so a busy shared machine distorts them little.
#include <benchmark/benchmark.h>

#include <cmath>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "impls/registry.hpp"

namespace {

using namespace conform;

constexpr std::int64_t kHeads = 16, kD = 128;

Tensor filled(Format f, std::vector<std::int64_t> shape, unsigned seed, double lo, double hi) {
    Tensor t(f, std::move(shape));
    std::mt19937 g(seed);
    std::uniform_real_distribution<double> d(lo, hi);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, d(g));
    return t;
}

// q, k, v, g, beta of (op, format, length), built once: model-like values
// (unit keys through l2norm, g in (-5, 0) as KDA's lower-bounded gate).
const std::vector<Tensor>& inputs(const std::string& op, Format f, std::int64_t len) {
    static std::map<std::tuple<std::string, Format, std::int64_t>, std::vector<Tensor>> cache;
    auto& in = cache[{op, f, len}];
    if (in.empty()) {
        const std::vector<std::int64_t> gate_shape =
            op == "kda" ? std::vector<std::int64_t>{len, kHeads, kD} : std::vector<std::int64_t>{len, kHeads};
        in.push_back(filled(f, {len, kHeads, kD}, 1, -1, 1));
        in.push_back(filled(f, {len, kHeads, kD}, 2, -1, 1));
        in.push_back(filled(f, {len, kHeads, kD}, 3, -1, 1));
        in.push_back(filled(f, gate_shape, 4, -5, 0));
        in.push_back(filled(f, {len, kHeads}, 5, 0, 1));
    }
    return in;
}

struct Call {
    const KernelInfo& k;
    Params params{std::map<std::string, double>{{"l2norm", 1}, {"scale", 0}, {"chunk", 64}}};
    Tensor y, state;
    KernelCall call;
    Call(const KernelInfo& kernel, std::int64_t len)
        : k(kernel), y(k.out, {len, kHeads, kD}), state(Format::fp32, {kHeads, kD, kD}),
          call{params, {}, {y.view(), state.view()}} {
        for (const Tensor& t : inputs(k.op, k.in, len)) call.in.push_back(t.view());
    }
    void operator()() { k.fn(call); }
};

double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

// CPU seconds per token of the naive recurrent baseline (at 1024 tokens).
double naive_seconds_per_token(const std::string& op, Format f) {
    static std::map<std::pair<std::string, Format>, double> cache;
    auto it = cache.find({op, f});
    if (it != cache.end()) return it->second;
    Call naive(*builtin_registry().find("cpu.naive." + op + "." + name(f)), 1024);
    const double t0 = cpu_seconds();
    naive();
    return cache[{op, f}] = (cpu_seconds() - t0) / 1024;
}

void delta_rule(benchmark::State& state, const std::string& kernel, std::int64_t len) {
    Call run(*builtin_registry().find(kernel), len);
    const double t0 = cpu_seconds();
    for (auto _ : state) {
        run();
        benchmark::DoNotOptimize(run.y.data());
        benchmark::ClobberMemory();
    }
    const double per_token = (cpu_seconds() - t0) / static_cast<double>(state.iterations()) / static_cast<double>(len);
    state.counters["tokens/s"] = 1 / per_token;
    if (run.k.variant != "naive") state.counters["x_naive"] = naive_seconds_per_token(run.k.op, run.k.in) / per_token;
}

const int registered = [] {
    for (const char* op : {"gdn", "kda"})
        for (const char* f : {"fp32", "bf16"}) {
            for (std::int64_t len : {1024, 4096, 16384}) {
                const std::string kn = std::string("cpu.simd.") + op + "." + f;
                auto* b = benchmark::RegisterBenchmark((kn + "/" + std::to_string(len)).c_str(), delta_rule, kn, len)
                              ->Unit(benchmark::kMillisecond);
                if (len >= 4096) b->Iterations(1);
            }
            // The portable chunkwise kernel: against the (scalar) naive recurrence, the gain of the
            // chunkwise algorithm alone, without the vector units.
            const std::string scalar = std::string("cpu.scalar.") + op + "." + f;
            benchmark::RegisterBenchmark((scalar + "/1024").c_str(), delta_rule, scalar, 1024)
                ->Unit(benchmark::kMillisecond)
                ->Iterations(2);
            const std::string naive = std::string("cpu.naive.") + op + "." + f;
            benchmark::RegisterBenchmark((naive + "/1024").c_str(), delta_rule, naive, 1024)
                ->Unit(benchmark::kMillisecond)
                ->Iterations(1);
        }
    return 0;
}();

}  // namespace
