// conform diverge on the size: a 32-layer hybrid synthetic model of
// width 1024 at 128 tokens, BF16 built-in kernels (docs/diverge.md,
// "Checks and figures").  The candidate is made once, outside the timing.
//   ninja -C build diverge_bench && ./build/bench/diverge_bench
// CONFORM_DIVERGE_LAYERS / _WIDTH / _TOKENS override the size (a quick run).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "model/diverge.hpp"

namespace conform::bench {
namespace {

std::int64_t env(const char* name, std::int64_t fallback) {
    const char* v = std::getenv(name);
    return v ? std::atoll(v) : fallback;
}

model::ModelContract contract() {
    model::ModelContract c;
    c.layers = env("CONFORM_DIVERGE_LAYERS", 32);
    c.pattern = "hybrid";
    c.width = env("CONFORM_DIVERGE_WIDTH", 1024);
    c.heads = c.width / 64, c.kv_heads = c.heads / 4, c.head_dim = 64;
    c.linear_heads = c.width / 64, c.linear_head_dim = 64;
    c.ffn = 3 * c.width;
    c.tokens = env("CONFORM_DIVERGE_TOKENS", 128);
    c.dtype = Format::bf16;
    return c;
}

void diverge_hybrid(benchmark::State& state) {
    const model::ModelContract c = contract();
    const model::Synthetic m = model::synthetic_model(c, 1);
    const model::NamedTensors points = model::run_kernels(c, m.weights, m.input);
    model::DivergeReport r;
    for (auto _ : state) {
        r = model::diverge(c, m.weights, m.input, points);
        benchmark::DoNotOptimize(r.points.data());
    }
    state.counters["layers"] = static_cast<double>(c.layers);
    state.counters["points"] = static_cast<double>(r.points.size());
    state.counters["failing"] = r.first_failing ? 1 : 0;
    state.counters["oracle_ratio"] = r.oracle_bound_ratio;
}
BENCHMARK(diverge_hybrid)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

}  // namespace
}  // namespace conform::bench
