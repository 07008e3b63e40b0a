// Shared pieces of the benchmark programs: the machine's copy bandwidth as
// the reference every memory-bound kernel is compared against, and inputs.
#pragma once
#include <benchmark/benchmark.h>
#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <new>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "impls/registry.hpp"
#include "numerics/tensor.hpp"

namespace conform::bench {

// CPU seconds of this thread (on a loaded machine the wall clock also counts
// the time other processes held the core).
inline double thread_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// A page-aligned buffer of `bytes` (rounded up to a page), filled with `fill`.
using Buffer = std::unique_ptr<char, decltype(&std::free)>;
inline Buffer page_buffer(std::size_t bytes, int fill) {
    const std::size_t padded = (bytes + 4095) / 4096 * 4096;
    Buffer b(static_cast<char*>(std::aligned_alloc(4096, padded)), &std::free);
    if (!b) throw std::bad_alloc();
    std::memset(b.get(), fill, padded);
    return b;
}

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Shapes with more elements than this are "out of cache": they get the
// paired share/... benchmarks.
inline constexpr std::int64_t kOutOfCacheElements = std::int64_t{1} << 18;

// memcpy of `bytes` bytes: reports bytes/s counting read + write, the same
// accounting the kernels use (input bytes read + output bytes written).
inline void copy_bandwidth(benchmark::State& state) {
    const std::size_t bytes = static_cast<std::size_t>(state.range(0));
    const Buffer a = page_buffer(bytes, 1), b = page_buffer(bytes, 0);
    for (auto _ : state) {
        std::memcpy(b.get(), a.get(), bytes);
        benchmark::DoNotOptimize(b.get());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * static_cast<std::int64_t>(bytes));
}

// The same copy as a loop of 16-byte loads and streaming (non-temporal)
// stores, 64 bytes per step, on page-aligned buffers.  glibc's memcpy uses
// streaming stores only above its x86_non_temporal_threshold, 3/4 of the L3
// size the CPU reports; the development VM reports a 256 MiB L3, so every
// benchmark size here gets plain stores, and a plain store first reads the
// line it overwrites: 3 bytes of traffic per 2 copied.  Measured out of
// cache there: memcpy 8.5-11 GB/s, this loop 12.6-17 GB/s.  Kernels are held
// to the faster of the two copies (bench/ratio_table.py); in cache memcpy is
// the faster one.
[[gnu::noinline]] inline void stream_copy(const char* src, char* dst, std::size_t bytes) {
    std::size_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
        const auto* s = reinterpret_cast<const __m128i*>(src + i);
        auto* d = reinterpret_cast<__m128i*>(dst + i);
        const __m128i a = _mm_load_si128(s), b = _mm_load_si128(s + 1), c = _mm_load_si128(s + 2),
                      e = _mm_load_si128(s + 3);
        _mm_stream_si128(d, a);
        _mm_stream_si128(d + 1, b);
        _mm_stream_si128(d + 2, c);
        _mm_stream_si128(d + 3, e);
    }
    _mm_sfence();
    std::memcpy(dst + i, src + i, bytes - i);
}

inline void copy_stream_bandwidth(benchmark::State& state) {
    const std::size_t bytes = static_cast<std::size_t>(state.range(0));
    const Buffer a = page_buffer(bytes, 1), b = page_buffer(bytes, 0);
    for (auto _ : state) {
        stream_copy(a.get(), b.get(), bytes);
        benchmark::DoNotOptimize(b.get());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * static_cast<std::int64_t>(bytes));
}

// Both copy references for `bytes`: "copy<suffix>" (memcpy) and
// "copy_stream<suffix>".
inline void register_copies(const std::string& suffix, std::int64_t bytes) {
    benchmark::RegisterBenchmark(("copy" + suffix).c_str(), copy_bandwidth)->Arg(bytes);
    benchmark::RegisterBenchmark(("copy_stream" + suffix).c_str(), copy_stream_bandwidth)->Arg(bytes);
}

// Two calls timed alternately in every iteration (which one goes first
// alternates too, so neither always pays the other's write-backs); manual
// time = the first's.  Pairing cancels the slow swings of a shared machine
// (+-20 % between runs on the development VM), which two benchmarks seconds
// apart do not.  Returns the per-iteration seconds of each.
struct PairTimes {
    std::vector<double> first, second;
};
inline PairTimes time_alternately(benchmark::State& state, const std::function<void()>& first,
                                  const std::function<void()>& second) {
    using Clock = std::chrono::steady_clock;
    const auto seconds = [](const std::function<void()>& f) {
        const auto t0 = Clock::now();
        f();
        return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    PairTimes t;
    bool first_first = true;
    for (auto _ : state) {
        double t1, t2;
        if (first_first) t1 = seconds(first), t2 = seconds(second);
        else t2 = seconds(second), t1 = seconds(first);
        first_first = !first_first;
        state.SetIterationTime(t1);
        t.first.push_back(t1);
        t.second.push_back(t2);
    }
    return t;
}

// The median over iterations of a / b.
inline double median_ratio(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> r(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) r[i] = a[i] / b[i];
    return median(r);
}

// A kernel call moving `bytes` (read + written) against the streaming copy of
// the same bytes, timed alternately.  The counter `share` is the median of
// the per-iteration ratios copy time / kernel time.
inline void paired_share(benchmark::State& state, std::int64_t bytes, const std::function<void()>& kernel) {
    const std::size_t half = static_cast<std::size_t>(bytes / 2);  // the copy reads half, writes half
    const Buffer a = page_buffer(half, 1), b = page_buffer(half, 0);
    const PairTimes t = time_alternately(state, kernel, [&] { stream_copy(a.get(), b.get(), half); });
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
    state.counters["share"] = median_ratio(t.second, t.first);
    state.counters["kernel_GBps"] = static_cast<double>(bytes) / median(t.first) / 1e9;
    state.counters["copy_GBps"] = static_cast<double>(bytes) / median(t.second) / 1e9;
}

// A registered kernel's call on `in`, the output ([out_shape], preallocated)
// and the bytes it moves (inputs read + output written).  Not movable:
// `call` refers to `params`.
struct Prepared {
    const KernelInfo* k;
    Params params;
    Tensor out;
    KernelCall call;
    std::int64_t bytes = 0;

    Prepared(const KernelInfo* kernel, const std::vector<TensorView>& in, std::vector<std::int64_t> out_shape)
        : k(kernel), params(Params::defaults(*find_op(k->op))), out(k->out, std::move(out_shape)),
          call{params, in, {out.view()}} {
        for (const TensorView& v : in) bytes += v.numel() * info(v.format).bytes;
        bytes += out.numel() * info(out.format()).bytes;
    }
    Prepared(const Prepared&) = delete;
    Prepared& operator=(const Prepared&) = delete;
};

// The prepared call timed alone (bytes/s), or, for share/... benchmarks,
// paired with the streaming copy (paired_share).
inline void measure(benchmark::State& state, const Prepared& p, bool paired) {
    if (paired) return paired_share(state, p.bytes, [&p] { p.k->fn(p.call); });
    for (auto _ : state) {
        p.k->fn(p.call);
        benchmark::DoNotOptimize(p.out.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * p.bytes);
}

// A [rows, cols] tensor of N(0, 1) values (deterministic seed).
inline Tensor normal_tensor(Format f, std::int64_t rows, std::int64_t cols, unsigned seed = 1) {
    Tensor t(f, {rows, cols});
    std::mt19937 gen(seed);
    std::normal_distribution<double> d;
    for (std::int64_t i = 0; i < rows * cols; ++i) t.set_value(i, d(gen));
    return t;
}

// ---- the elementwise families' driver (activation_bench, gated_bench) ----
// Every cpu.simd kernel of `ops` and the copy reference per (shape, format),
// plus one naive baseline on the cache-resident shapes.  (Own namespace:
// norm_bench has its own Shape.)
namespace elementwise {

struct Shape {
    std::int64_t rows, cols;
};
// Two cache-resident shapes and two transformer-sized ones well beyond the
// caches (4096 tokens x hidden 4096, 2048 x 8192), where bandwidth is the limit.
inline constexpr Shape kShapes[] = {{64, 4096}, {32, 8192}, {4096, 4096}, {2048, 8192}};
constexpr Format kFormats[] = {Format::fp32, Format::bf16, Format::fp16};

// N(0,1) inputs, built once per (format, shape, seed): large ones take a while.
inline const Tensor& input(Format f, Shape s, unsigned seed) {
    static std::map<std::tuple<Format, std::int64_t, std::int64_t, unsigned>, Tensor> cache;
    auto key = std::make_tuple(f, s.rows, s.cols, seed);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, normal_tensor(f, s.rows, s.cols, seed)).first;
    return it->second;
}

// One registered kernel on its op's inputs (x, or gate and up); `paired`:
// the share/... form.
inline void run_registered(benchmark::State& state, const std::string& kernel, Shape s, bool paired) {
    const KernelInfo* k = builtin_registry().find(kernel);
    std::vector<TensorView> in;
    for (std::size_t i = 0; i < find_op(k->op)->inputs.size(); ++i) in.push_back(input(k->in, s, 1 + i).view());
    const Prepared p(k, in, {s.rows, s.cols});
    measure(state, p, paired);
}

inline void register_family(const std::vector<std::string>& ops, const std::string& naive_op) {
    for (Shape s : kShapes) {
        const std::string dims = std::to_string(s.rows) + "x" + std::to_string(s.cols);
        for (Format f : kFormats) {
            const std::string tail = std::string(".") + name(f);
            const std::int64_t bytes = s.rows * s.cols * info(f).bytes;
            register_copies("/" + dims + tail, bytes);
            const bool out_of_cache = s.rows * s.cols > kOutOfCacheElements;
            for (const auto& op : ops) {
                std::string kn = "cpu.simd." + op + tail;
                benchmark::RegisterBenchmark((kn + "/" + dims).c_str(), run_registered, kn, s, false);
                if (out_of_cache)
                    benchmark::RegisterBenchmark(("share/" + kn + "/" + dims).c_str(), run_registered, kn, s, true)
                        ->UseManualTime();
            }
            if (out_of_cache) continue;  // naive: ~1 us/element, cache-resident shapes only
            std::string kn = "cpu.naive." + naive_op + tail;
            benchmark::RegisterBenchmark((kn + "/" + dims).c_str(), run_registered, kn, s, false);
        }
    }
}

}  // namespace elementwise
}  // namespace conform::bench
