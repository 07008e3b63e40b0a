// Throughput of the RoPE kernels (impls/cpu/rope.cpp) at a prefill shape,
// H = 32 heads x L = 4096 tokens x D = 128, against the machine's copy
// bandwidth at the same size.  Bytes per iteration: x read + y written (the
// cos/sin tables, built per call, are not counted: they are the kernel's own
// work, measured separately by rope_tables/...).
//   ninja -C build rope_bench && ./build/bench/rope_bench --benchmark_min_time=0.2
#include <string>

#include "bench/bench_util.hpp"
#include "impls/cpu/rope.hpp"

namespace conform::bench {
namespace {

constexpr std::int64_t kH = 32, kL = 4096, kD = 128;

// The rope kernels alone (builtin_registry() holds them too).
const Registry& rope_registry() {
    static const Registry r = [] {
        Registry reg;
        register_cpu_rope(reg);
        return reg;
    }();
    return r;
}

void run_rope(benchmark::State& state, const std::string& name, int pairing) {
    const KernelInfo* k = rope_registry().find(name);
    if (!k) return state.SkipWithError(("no kernel " + name).c_str());
    const Tensor flat = normal_tensor(k->in, kH * kL, kD);
    Tensor x(k->in, {kH, kL, kD}), y(k->out, {kH, kL, kD});
    for (std::int64_t i = 0; i < x.numel(); ++i) x.set_bits(i, flat.bits(i));
    const Params params({{"pairing", pairing}});
    KernelCall call{params, {x.view()}, {y.view()}};
    for (auto _ : state) {
        k->fn(call);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    const std::int64_t bytes = x.numel() * (info(k->in).bytes + info(k->out).bytes);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
}

// The per-call table construction alone: L x D/2 double sin/cos.
void tables_only(benchmark::State& state) {
    cpu::RopeArgs a;
    a.rotary_dim = kD;
    for (auto _ : state) {
        cpu::RopeTables t = cpu::rope_tables(a, kL);
        benchmark::DoNotOptimize(t.cos.data());
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * kL * kD / 2);
}

const bool registered = [] {
    const std::string dims = std::to_string(kH) + "x" + std::to_string(kL) + "x" + std::to_string(kD);
    for (const char* f : {"fp32", "bf16"}) {
        const std::int64_t bytes = kH * kL * kD * (std::string(f) == "fp32" ? 4 : 2);
        register_copies("/" + dims + "." + f, bytes);
        for (int pairing : {0, 1}) {
            const std::string kn = std::string("cpu.simd.rope.") + f;
            benchmark::RegisterBenchmark((kn + "/" + dims + (pairing ? "/half_split" : "/interleaved")).c_str(),
                                         run_rope, kn, pairing);
        }
    }
    // Comparison point: the portable path.
    benchmark::RegisterBenchmark(("cpu.scalar.rope.fp32/" + dims + "/interleaved").c_str(), run_rope,
                                 std::string("cpu.scalar.rope.fp32"), 0);
    benchmark::RegisterBenchmark(("rope_tables/L=" + std::to_string(kL) + ",r=" + std::to_string(kD)).c_str(),
                                 tables_only);
    return true;
}();

}  // namespace
}  // namespace conform::bench
