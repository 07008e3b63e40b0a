// Throughput of the gated kernels against the machine's copy bandwidth.
// bytes/s counts bytes read + bytes written (gate and up in, h out), as copy_bandwidth
// does; rows x hidden 64x4096 and 32x8192 (cache resident) and 1024x16384
// (out of cache).  Run: ./build/bench/gated_bench --benchmark_min_time=0.2
#include <map>
#include <string>
#include <tuple>

#include "bench/bench_util.hpp"
#include "impls/registry.hpp"

namespace conform::bench {
namespace {
// (Same driver as activation_bench.cpp; a candidate for bench_util.hpp.)

struct Shape {
    std::int64_t rows, cols;
};
constexpr Shape kShapes[] = {{64, 4096}, {32, 8192}, {1024, 16384}};
constexpr Format kFormats[] = {Format::fp32, Format::bf16, Format::fp16};

// N(0,1) inputs, built once per (format, shape, seed): large ones take a while.
const Tensor& input(Format f, Shape s, unsigned seed) {
    static std::map<std::tuple<Format, std::int64_t, std::int64_t, unsigned>, Tensor> cache;
    auto key = std::make_tuple(f, s.rows, s.cols, seed);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, normal_tensor(f, s.rows, s.cols, seed)).first;
    return it->second;
}

// One registered kernel on its op's inputs (x, or gate and up), output preallocated.
void run_registered(benchmark::State& state, const std::string& kernel, Shape s) {
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
    const std::int64_t bytes = s.rows * s.cols * info(k.in).bytes * static_cast<std::int64_t>(op.inputs.size() + 1);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
}

void register_family(const std::vector<std::string>& ops, const std::string& naive_op) {
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

}  // namespace
}  // namespace conform::bench
static const int registered =
    (conform::bench::register_family({"swiglu", "geglu", "situ_glu", "swiglu_clamp"}, "swiglu"), 0);
