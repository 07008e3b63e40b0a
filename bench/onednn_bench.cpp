// conform's CPU kernels beside oneDNN's on the same op, format and shape,
// single-threaded on both sides (oneDNN's OpenMP pool is set to one thread:
// conform's kernels are single-threaded).  Each benchmark times the two
// calls alternately in every iteration (bench_util.hpp time_alternately),
// so the ratio is taken on the same machine state.  Row and elementwise ops:
// bytes/s (inputs read + output written).  INT8 GEMM: FLOP/s (2 M N K) of
// y = (a b) * s_a * s_b with per-tensor s_a and per-column s_b.  Counters:
// `conform` and `onednn` (each side's median rate), `onednn_over_conform`
// (median over iterations of conform's time / oneDNN's).  At the end a table
// gives each pair (docs/onednn.md; bench/ratio_table.py --onednn reads the
// JSON).
//   ninja -C build onednn_bench && ./build/bench/onednn_bench --benchmark_min_time=0.3s
#include <dnnl.hpp>
#include <omp.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
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

// A call that owns its data, and the work it does (bytes or FLOPs).
struct Call {
    std::function<void()> run;
    double work = 0;
    std::string label;
};

// A registered kernel on [rows, cols] N(0,1) inputs ([cols] weight and bias
// for layer_norm), output preallocated; work = bytes read + written.
Call rows_call(const KernelInfo& k, Shape s) {
    const OpSpec& op = *find_op(k.op);
    struct Data {
        std::vector<Tensor> in;
        Tensor y;
        Params params;
        std::unique_ptr<KernelCall> call;  // refers to params
    };
    auto d = std::make_shared<Data>();
    d->in.push_back(normal_tensor(k.in, s.rows, s.cols));
    for (std::size_t i = 1; i < op.inputs.size(); ++i) d->in.push_back(normal_tensor(k.in, 1, s.cols, 2 + static_cast<unsigned>(i)));
    d->y = Tensor(k.out, {s.rows, s.cols});
    d->params = Params::defaults(op);
    d->call = std::make_unique<KernelCall>(KernelCall{d->params, {}, {d->y.view()}});
    double bytes = static_cast<double>(d->y.numel() * info(d->y.format()).bytes);
    for (std::size_t i = 0; i < d->in.size(); ++i) {
        const TensorView v = d->in[i].view();
        d->call->in.push_back(i ? TensorView::contiguous(v.data, v.format, {s.cols}) : v);  // weight, bias: [n]
        bytes += static_cast<double>(d->in[i].numel() * info(d->in[i].format()).bytes);
    }
    const KernelInfo* kp = &k;
    return {[d, kp] { kp->fn(*d->call); }, bytes, ""};
}

// ---- INT8 GEMM ---------------------------------------------------------------

struct Gemm {
    std::int64_t m, k, n;
};
std::string gemm_name(Gemm g) { return std::to_string(g.m) + "x" + std::to_string(g.k) + "x" + std::to_string(g.n); }

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

double flops(Gemm g) { return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k); }

// conform's registered cpu.simd.int8_gemm.fp32 (both outputs, one GEMM).
Call cpu_gemm_call(Gemm g) {
    const KernelInfo* k = builtin_registry().find("cpu.simd.int8_gemm.fp32");
    struct Data {
        GemmData d;
        Params params;
        KernelCall call;
        explicit Data(Gemm g) : d(g), call{params, {d.a.view(), d.b.view(), d.sa.view(), d.sb.view()}, {d.acc.view(), d.y.view()}} {}
    };
    auto d = std::make_shared<Data>(g);
    return {[d, k] { k->fn(d->call); }, flops(g), ""};
}

// A oneDNN matmul primitive y = a b (row-major [M, K] x [K, N]) created once
// with `attr` and executed in the loop, as a oneDNN user would; `owner`
// keeps a, b and y alive.  Throws dnnl::error where oneDNN has no
// implementation.
Call onednn_matmul(std::shared_ptr<void> owner, Gemm g, dnnl::memory::data_type in, dnnl::memory::data_type out,
                   const dnnl::primitive_attr& attr, void* a, void* b, void* y) {
    using dnnl::memory;
    struct Run {
        dnnl::engine eng{dnnl::engine::kind::cpu, 0};
        dnnl::stream strm{eng};
        std::unique_ptr<dnnl::matmul> mm;
        memory xa, xb, xy;
    };
    auto r = std::make_shared<Run>();
    const memory::desc ma({g.m, g.k}, in, memory::format_tag::ab), mb({g.k, g.n}, in, memory::format_tag::ab),
        my({g.m, g.n}, out, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd({ma, mb, my}, attr, r->eng);
    r->mm = std::make_unique<dnnl::matmul>(pd);
    r->xa = memory(ma, r->eng, a), r->xb = memory(mb, r->eng, b), r->xy = memory(my, r->eng, y);
    return {[r, owner] {
                r->mm->execute(r->strm, {{DNNL_ARG_SRC, r->xa}, {DNNL_ARG_WEIGHTS, r->xb}, {DNNL_ARG_DST, r->xy}});
                r->strm.wait();
            },
            flops(g), pd.impl_info_str()};
}

// oneDNN's INT8 matmul for y alone, per-column s_b with s_a folded in (the
// registered onednn.int8_gemm kernel also runs a second s32 matmul for the
// op's `acc` output, which would halve it).
Call onednn_gemm_call(Gemm g) {
    auto d = std::make_shared<GemmData>(g);
    std::vector<float> scales(static_cast<std::size_t>(g.n));
    for (std::int64_t j = 0; j < g.n; ++j)
        scales[static_cast<std::size_t>(j)] = static_cast<float>(d->sb.value(j)) * static_cast<float>(d->sa.value(0));
    dnnl::primitive_attr attr;
    attr.set_output_scales(1 << 1, scales);
    using dt = dnnl::memory::data_type;
    return onednn_matmul(d, g, dt::s8, dt::f32, attr, d->a.data(), d->b.data(), d->y.data());
}

// ---- float matmul ------------------------------------------------------------

// a [M, K] b [K, N] N(0,1) in format f, y in f.
struct MatmulData {
    Tensor a, b, y;
    MatmulData(Gemm g, Format f) : a(normal_tensor(f, g.m, g.k)), b(normal_tensor(f, g.k, g.n, 2)), y(f, {g.m, g.n}) {}
};

Call cpu_matmul_call(Gemm g, Format f) {
    const KernelInfo* k = builtin_registry().find(std::string("cpu.simd.matmul.") + name(f));
    struct Data {
        MatmulData d;
        Params params;
        KernelCall call;
        Data(Gemm g, Format f) : d(g, f), call{params, {d.a.view(), d.b.view()}, {d.y.view()}} {}
    };
    auto d = std::make_shared<Data>(g, f);
    return {[d, k] { k->fn(d->call); }, flops(g), ""};
}

// oneDNN's float matmul in f; none (the pair is skipped) where oneDNN has
// no implementation for f here.
Call onednn_matmul_call(Gemm g, Format f) {
    using dt = dnnl::memory::data_type;
    const dt t = f == Format::fp32 ? dt::f32 : f == Format::fp16 ? dt::f16 : dt::bf16;
    auto d = std::make_shared<MatmulData>(g, f);
    try {
        return onednn_matmul(d, g, t, t, {}, d->a.data(), d->b.data(), d->y.data());
    } catch (const dnnl::error&) {
        return {};
    }
}

// ---- one pair ----------------------------------------------------------------

void run_pair(benchmark::State& state, const std::function<Call()>& conform_side, const std::function<Call()>& onednn_side,
              const char* unit) {
    const Call c = conform_side(), o = onednn_side();
    if (!c.run || !o.run) return state.SkipWithError("kernel not available");
    state.SetLabel(o.label);
    const PairTimes t = time_alternately(state, c.run, o.run);
    state.counters["conform"] = c.work / median(t.first);
    state.counters["onednn"] = o.work / median(t.second);
    state.counters["onednn_over_conform"] = median_ratio(t.first, t.second);
    state.counters[unit] = 1;  // the unit of the two rates
}

// ---- the ratio table --------------------------------------------------------------

// Prints each pair's medians and ratio after the console output.
class RatioReporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const auto& r : runs) {
            if (r.error_occurred || !r.counters.count("onednn_over_conform")) continue;
            const bool gemm = r.counters.count("FLOP/s");
            std::string name = r.benchmark_name();
            if (const auto cut = name.find("/manual_time"); cut != std::string::npos) name.erase(cut);
            rows_.push_back({name, gemm ? "GFLOP/s" : "GB/s", r.counters.at("conform").value / 1e9,
                             r.counters.at("onednn").value / 1e9, r.counters.at("onednn_over_conform").value});
        }
    }
    void print_table() const {
        std::printf("\n| op / shape | unit | conform cpu.simd | oneDNN | oneDNN / conform |\n|---|---|---|---|---|\n");
        for (const Row& r : rows_)
            std::printf("| %s | %s | %.3g | %.3g | %.2f |\n", r.name.c_str(), r.unit, r.conform, r.onednn, r.ratio);
    }

private:
    struct Row {
        std::string name;
        const char* unit;
        double conform, onednn, ratio;
    };
    std::vector<Row> rows_;
};

void register_all() {
    const Registry& onednn = onednn_registry().kernels;
    const Shape rows[] = {{64, 4096}, {4096, 4096}};
    for (const char* op : {"softmax", "layer_norm", "silu", "gelu_erf", "gelu_tanh", "sigmoid", "softplus"})
        for (Shape s : rows) {
            if (std::string(op) != "softmax" && std::string(op) != "layer_norm" && s.rows != 4096) continue;
            const KernelInfo* c = builtin_registry().find(std::string("cpu.simd.") + op + ".fp32");
            const KernelInfo* o = onednn.find(std::string("onednn.") + op + ".fp32");
            const auto side = [s](const KernelInfo* k) { return [k, s] { return k ? rows_call(*k, s) : Call{}; }; };
            benchmark::RegisterBenchmark((std::string(op) + ".fp32/" + shape_name(s)).c_str(), run_pair, side(c), side(o),
                                         "bytes/s")
                ->UseManualTime();
        }
    // The two shapes, one whose sizes are multiples of 8 but not of
    // the kernels' tiles, and a ragged one (K not a multiple of 4).
    for (Gemm g : {Gemm{128, 4096, 4096}, Gemm{512, 1024, 1024}, Gemm{200, 1032, 2056}, Gemm{129, 1023, 1001}})
        benchmark::RegisterBenchmark(("int8_gemm.fp32/" + gemm_name(g)).c_str(), run_pair, [g] { return cpu_gemm_call(g); },
                                     [g] { return onednn_gemm_call(g); }, "FLOP/s")
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
    // Float matmul: a prefill projection, a square one, a ragged one and a
    // decode step (one token: B streamed once).
    for (Format f : {Format::fp32, Format::bf16, Format::fp16})
        for (Gemm g : {Gemm{128, 4096, 4096}, Gemm{512, 1024, 1024}, Gemm{129, 1023, 1001}, Gemm{1, 4096, 4096}})
            benchmark::RegisterBenchmark((std::string("matmul.") + name(f) + "/" + gemm_name(g)).c_str(), run_pair,
                                         [g, f] { return cpu_matmul_call(g, f); }, [g, f] { return onednn_matmul_call(g, f); },
                                         "FLOP/s")
                ->UseManualTime()
                ->Unit(benchmark::kMillisecond);
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
