// conform's CPU kernels beside oneDNN's on the same op, format and shape,
// measured in one run, single-threaded on both sides (oneDNN's OpenMP pool
// is set to one thread: conform's kernels are single-threaded).  Row and
// elementwise ops: bytes/s (inputs read + output written).  INT8 GEMM:
// FLOP/s (2 M N K) of y = (a b) * s_a * s_b with per-tensor s_a and
// per-column s_b.  At the end a table gives each pair's throughputs and the
// ratio oneDNN / conform (docs/onednn.md).
//   ninja -C build onednn_bench && ./build/bench/onednn_bench --benchmark_min_time=0.2
#include <dnnl.hpp>
#include <omp.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "impls/onednn/onednn.hpp"

namespace conform::bench {
namespace {

struct Shape {
    std::int64_t rows, cols;
};
std::string shape_name(Shape s) { return std::to_string(s.rows) + "x" + std::to_string(s.cols); }

// A registered kernel on [rows, cols] N(0,1) inputs ([cols] weight and bias
// for layer_norm), output preallocated; bytes/s.
void run_rows(benchmark::State& state, const KernelInfo* k, Shape s) {
    if (!k) return state.SkipWithError("kernel not available");
    const OpSpec& op = *find_op(k->op);
    std::vector<Tensor> in{normal_tensor(k->in, s.rows, s.cols)};
    for (std::size_t i = 1; i < op.inputs.size(); ++i)
        in.push_back(normal_tensor(k->in, 1, s.cols, 2 + static_cast<unsigned>(i)));
    Tensor y(k->out, {s.rows, s.cols});
    const Params params = Params::defaults(op);
    KernelCall call{params, {}, {y.view()}};
    std::int64_t bytes = y.numel() * info(y.format()).bytes;
    for (std::size_t i = 0; i < in.size(); ++i) {
        const TensorView v = in[i].view();
        call.in.push_back(i ? TensorView::contiguous(v.data, v.format, {s.cols}) : v);  // weight, bias: [n]
        bytes += in[i].numel() * info(in[i].format()).bytes;
    }
    for (auto _ : state) {
        k->fn(call);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
}

// ---- INT8 GEMM ---------------------------------------------------------------

struct Gemm {
    std::int64_t m, k, n;
};

struct GemmData {
    Tensor a, b, sa, sb, acc, y;
    explicit GemmData(Gemm g)
        : a(Format::int8, {g.m, g.k}), b(Format::int8, {g.k, g.n}), sa(Format::fp32, {1}), sb(Format::fp32, {g.n}),
          acc(Format::fp64, {g.m, g.n}), y(Format::fp32, {g.m, g.n}) {
        std::mt19937 gen(7);
        for (std::int64_t i = 0; i < a.numel(); ++i) a.set_value(i, static_cast<int>(gen() % 255) - 127);
        for (std::int64_t i = 0; i < b.numel(); ++i) b.set_value(i, static_cast<int>(gen() % 255) - 127);
        sa.set_value(0, 0x1p-7);
        for (std::int64_t j = 0; j < g.n; ++j) sb.set_value(j, 0x1p-8 * (1 + j % 7));
    }
};

void set_flops(benchmark::State& state, Gemm g) {
    state.counters["FLOP/s"] = benchmark::Counter(2.0 * g.m * g.n * g.k * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

// conform's registered cpu.simd.int8_gemm.fp32 (both outputs, one GEMM).
void run_cpu_gemm(benchmark::State& state, Gemm g) {
    const KernelInfo* k = builtin_registry().find("cpu.simd.int8_gemm.fp32");
    GemmData d(g);
    const Params params;
    KernelCall call{params, {d.a.view(), d.b.view(), d.sa.view(), d.sb.view()}, {d.acc.view(), d.y.view()}};
    for (auto _ : state) {
        k->fn(call);
        benchmark::DoNotOptimize(d.y.data());
    }
    set_flops(state, g);
}

// oneDNN's matmul primitive for y alone, created once and executed in the
// loop as a oneDNN user would (the registered onednn.int8_gemm kernel also
// runs a second s32 matmul for the op's `acc` output, which would halve it).
void run_onednn_gemm(benchmark::State& state, Gemm g) {
    using dnnl::memory;
    using dt = memory::data_type;
    GemmData d(g);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const memory::desc ma({g.m, g.k}, dt::s8, memory::format_tag::ab), mb({g.k, g.n}, dt::s8, memory::format_tag::ab),
        my({g.m, g.n}, dt::f32, memory::format_tag::ab);
    std::vector<float> scales(static_cast<std::size_t>(g.n));
    for (std::int64_t j = 0; j < g.n; ++j)
        scales[static_cast<std::size_t>(j)] = static_cast<float>(d.sb.value(j)) * static_cast<float>(d.sa.value(0));
    dnnl::primitive_attr attr;
    attr.set_output_scales(1 << 1, scales);
    const dnnl::matmul::primitive_desc pd({ma, mb, my}, attr, eng);
    state.SetLabel(pd.impl_info_str());
    const dnnl::matmul mm(pd);
    memory xa(ma, eng, d.a.data()), xb(mb, eng, d.b.data()), xy(my, eng, d.y.data());
    for (auto _ : state) {
        mm.execute(strm, {{DNNL_ARG_SRC, xa}, {DNNL_ARG_WEIGHTS, xb}, {DNNL_ARG_DST, xy}});
        strm.wait();
        benchmark::DoNotOptimize(d.y.data());
    }
    set_flops(state, g);
}

// ---- the ratio table --------------------------------------------------------------

// Benchmarks are named "<op>/<shape>/<side>"; the reporter keeps each run's
// rate and prints conform vs oneDNN per (op, shape) after the console output.
class RatioReporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const auto& r : runs) {
            const std::string n = r.benchmark_name();
            const auto cut = n.rfind('/');
            if (cut == std::string::npos || r.error_occurred) continue;
            for (const char* c : {"bytes_per_second", "FLOP/s"})
                if (auto it = r.counters.find(c); it != r.counters.end())
                    rates_[n.substr(0, cut)][n.substr(cut + 1)] = {it->second.value, c};
        }
    }
    void print_table() const {
        std::printf("\n| op / shape | unit | conform cpu.simd | oneDNN | oneDNN / conform |\n|---|---|---|---|---|\n");
        for (const auto& [what, sides] : rates_) {
            const auto c = sides.find("cpu"), o = sides.find("onednn");
            if (c == sides.end() || o == sides.end()) continue;
            const bool flops = c->second.unit == std::string("FLOP/s");
            std::printf("| %s | %s | %.3g | %.3g | %.2f |\n", what.c_str(), flops ? "GFLOP/s" : "GB/s",
                        c->second.value / 1e9, o->second.value / 1e9, o->second.value / c->second.value);
        }
    }

private:
    struct Rate {
        double value;
        const char* unit;
    };
    std::map<std::string, std::map<std::string, Rate>> rates_;
};

void register_all() {
    const Registry& onednn = onednn_registry().kernels;
    const Shape rows[] = {{64, 4096}, {4096, 4096}};
    for (const char* op : {"softmax", "layer_norm", "silu", "gelu_erf", "gelu_tanh", "sigmoid", "softplus"})
        for (Shape s : rows) {
            if (std::string(op) != "softmax" && std::string(op) != "layer_norm" && s.rows != 4096) continue;
            const std::string base = std::string(op) + ".fp32/" + shape_name(s);
            const std::string cpu = std::string("cpu.simd.") + op + ".fp32", dnn = std::string("onednn.") + op + ".fp32";
            benchmark::RegisterBenchmark((base + "/cpu").c_str(), run_rows, builtin_registry().find(cpu), s);
            benchmark::RegisterBenchmark((base + "/onednn").c_str(), run_rows, onednn.find(dnn), s);
        }
    for (Gemm g : {Gemm{128, 4096, 4096}, Gemm{512, 1024, 1024}}) {
        const std::string base = "int8_gemm.fp32/" + std::to_string(g.m) + "x" + std::to_string(g.k) + "x" + std::to_string(g.n);
        benchmark::RegisterBenchmark((base + "/cpu").c_str(), run_cpu_gemm, g)->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark((base + "/onednn").c_str(), run_onednn_gemm, g)->Unit(benchmark::kMillisecond);
    }
}

}  // namespace
}  // namespace conform::bench

int main(int argc, char** argv) {
    omp_set_num_threads(1);  // oneDNN's pool: one thread, like conform's kernels
    benchmark::Initialize(&argc, argv);
    conform::bench::register_all();
    std::printf("%s; one thread per side\n", conform::onednn_registry().library.c_str());
    conform::bench::RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    reporter.print_table();
    benchmark::Shutdown();
}
