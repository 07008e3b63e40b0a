// Throughput of the norm kernels against the machine's copy bandwidth at the
// same sizes.  Bytes counted per iteration: x read + y written + weight/bias
// read (the copy reference counts its read + write the same way).
//   ninja -C build norm_bench && ./build/bench/norm_bench --benchmark_min_time=0.2
#include <algorithm>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "impls/registry.hpp"

namespace conform::bench {
namespace {

struct Shape {
    std::int64_t rows, n;
};
// Two cache-resident shapes; 1024x8192 (16-bit x is 16 MiB: partly L3-resident
// on a Zen 3 CCD's 32 MiB) and 4096x8192 (64 MiB and more: out of every cache).
const Shape kShapes[] = {{64, 4096}, {32, 8192}, {1024, 8192}, {4096, 8192}};

// A [rows, n] N(0,1) input, then [n] weight and bias where the op has them.
std::vector<Tensor> norm_inputs(const KernelInfo& k, Shape s) {
    std::vector<Tensor> in{normal_tensor(k.in, s.rows, s.n)};
    for (std::size_t i = 1; i < find_op(k.op)->inputs.size(); ++i) {
        const Tensor row = normal_tensor(k.in, 1, s.n, 2 + i);
        in.emplace_back(k.in, std::vector<std::int64_t>{s.n});
        for (std::int64_t j = 0; j < s.n; ++j) in.back().set_bits(j, row.bits(j));
    }
    return in;
}

// The registered kernel `name` on norm_inputs; `paired`: the share/... form.
void run_norm(benchmark::State& state, const std::string& name, Shape s, bool paired) {
    const KernelInfo* k = builtin_registry().find(name);
    if (!k) return state.SkipWithError(("no kernel " + name).c_str());
    const std::vector<Tensor> in = norm_inputs(*k, s);
    std::vector<TensorView> views;
    for (const Tensor& t : in) views.push_back(t.view());
    const Prepared p(k, views, {s.rows, s.n});
    measure(state, p, paired);
}

std::string shape_name(Shape s) { return std::to_string(s.rows) + "x" + std::to_string(s.n); }

const bool registered = [] {
    // Copy references: x's size in each format at each shape.
    std::vector<std::int64_t> sizes;
    for (Shape s : kShapes)
        for (int b : {2, 4}) sizes.push_back(s.rows * s.n * b);
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    for (std::int64_t b : sizes) register_copies("", b);

    auto add = [](const std::string& kernel, Shape s) {
        benchmark::RegisterBenchmark((kernel + "/" + shape_name(s)).c_str(),
                                     [kernel, s](benchmark::State& st) { run_norm(st, kernel, s, false); });
        if (s.rows * s.n > kOutOfCacheElements)
            benchmark::RegisterBenchmark(("share/" + kernel + "/" + shape_name(s)).c_str(),
                                         [kernel, s](benchmark::State& st) { run_norm(st, kernel, s, true); })
                ->UseManualTime();
    };
    for (const char* op : {"rms_norm", "layer_norm", "l2_norm"})
        for (const char* f : {"fp32", "bf16", "fp16"})
            for (Shape s : kShapes) add(std::string("cpu.simd.") + op + "." + f, s);
    // Comparison points: the portable path and the naive baseline.
    add("cpu.scalar.rms_norm.fp16", kShapes[0]);
    add("cpu.naive.rms_norm.fp16", kShapes[0]);
    return true;
}();

}  // namespace
}  // namespace conform::bench
