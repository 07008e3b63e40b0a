// GPU benchmarks of the cuda kernels (docs/cuda.md, "Performance"; nvcc
// only): bytes/s of each kernel on 4096 x 8192 rows (norms, softmax) or
// 2^26 elements (activations, gated, RoPE as [32, 16384, 128]), beside a
// device-to-device cudaMemcpy of the same bytes in the same run; the share
// of that copy is the figure.  Times are CUDA events around 20 launches
// after 3 warm-up launches.
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "impls/cuda/activation_math.cuh"
#include "impls/cuda/attention.cuh"
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/norm.cuh"
#include "impls/cuda/rope.cuh"
#include "impls/cuda/softmax.cuh"

namespace conform::cuda_kernels {
namespace {

constexpr const char* kWhere = "cuda benchmark";

// Deterministic values of order 1 (a hash of the index), any storage type.
template <class S>
__global__ void fill(S* p, long long n, unsigned seed) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = store<S>((static_cast<double>(h & 0xffffff) / 0x800000 - 1.0) * 3.0);
    }
}

// Milliseconds per call of f, by CUDA events around `reps` calls.
double time_ms(const std::function<void()>& f, cudaStream_t s, int reps = 20) {
    for (int i = 0; i < 3; ++i) f();
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate", kWhere);
    check(cudaEventCreate(&b), "cudaEventCreate", kWhere);
    check(cudaEventRecord(a, s), "cudaEventRecord", kWhere);
    for (int i = 0; i < reps; ++i) f();
    check(cudaEventRecord(b, s), "cudaEventRecord", kWhere);
    check(cudaEventSynchronize(b), "cudaEventSynchronize", kWhere);
    check(cudaGetLastError(), "kernel launch", kWhere);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a), cudaEventDestroy(b);
    return ms / reps;
}

struct Row {
    std::string kernel, shape;
    double bytes, ms, copy_ms;
    double flops = 0;  // attention: its FLOPs per call (bytes and copy_ms unused)
};

class Bench {
public:
    Bench() : s_(kWhere) {}

    // Kernel moving `bytes` (read + written) in one call, against a copy of bytes / 2.
    void add(const std::string& kernel, const std::string& shape, double bytes, const std::function<void()>& f) {
        const std::size_t half = static_cast<std::size_t>(bytes / 2);
        DeviceBuffer a(half, kWhere), b(half, kWhere);
        const double copy = time_ms(
            [&] { check(cudaMemcpyAsync(b.as<void>(), a.as<void>(), half, cudaMemcpyDeviceToDevice, s_.get()), "cudaMemcpyAsync", kWhere); },
            s_.get());
        rows_.push_back({kernel, shape, bytes, time_ms(f, s_.get()), copy});
        const Row& r = rows_.back();
        std::fprintf(stderr, "%-28s %-16s %8.3f ms  %7.1f GB/s  copy %7.1f GB/s  share %.2f\n", r.kernel.c_str(),
                     r.shape.c_str(), r.ms, r.bytes / r.ms / 1e6, r.bytes / r.copy_ms / 1e6, r.copy_ms / r.ms);
    }
    // Kernel doing `flops` per call (attention): TFLOP/s, fewer repetitions for long calls.
    void add_flops(const std::string& kernel, const std::string& shape, double flops, const std::function<void()>& f) {
        const double first = time_ms(f, s_.get(), 1);
        rows_.push_back({kernel, shape, 0, time_ms(f, s_.get(), first > 50 ? 3 : 20), 0, flops});
        const Row& r = rows_.back();
        std::fprintf(stderr, "%-28s %-24s %8.3f ms  %7.1f TFLOP/s\n", r.kernel.c_str(), r.shape.c_str(), r.ms,
                     r.flops / r.ms / 1e9);
    }
    cudaStream_t stream() const { return s_.get(); }
    const std::vector<Row>& rows() const { return rows_; }

    template <class S>
    DeviceBuffer filled(long long n, unsigned seed) {
        DeviceBuffer d(static_cast<std::size_t>(n) * sizeof(S), kWhere);
        auto* k = fill<S>;
        k<<<1024, 256, 0, s_.get()>>>(d.as<S>(), n, seed);
        check(cudaStreamSynchronize(s_.get()), "fill", kWhere);
        return d;
    }

private:
    Stream s_;
    std::vector<Row> rows_;
};

template <class S, class Op>
void unary(Bench& b, const char* op, const char* fmt, const Op& f) {
    const long long n = 1ll << 26;
    DeviceBuffer x = b.filled<S>(n, 1), y(static_cast<std::size_t>(n) * sizeof(S), kWhere);
    b.add(std::string("cuda.") + op + "." + fmt, "2^26", 2.0 * n * sizeof(S),
          [&] { launch_unary<S>(x.as<S>(), y.as<S>(), n, f, Launch{}, b.stream()); });
}

template <class S, class Op>
void binary(Bench& b, const char* op, const char* fmt, const Op& f) {
    const long long n = 1ll << 26;
    DeviceBuffer g = b.filled<S>(n, 1), u = b.filled<S>(n, 2), h(static_cast<std::size_t>(n) * sizeof(S), kWhere);
    b.add(std::string("cuda.") + op + "." + fmt, "2^26", 3.0 * n * sizeof(S),
          [&] { launch_binary<S>(g.as<S>(), u.as<S>(), h.as<S>(), n, f, Launch{}, b.stream()); });
}

template <Norm Op, class S>
void norm(Bench& b, const char* op, const char* fmt) {
    RowArgs a;
    a.rows = 4096, a.n = 8192, a.eps = 1e-6;
    const long long n = a.rows * a.n;
    DeviceBuffer x = b.filled<S>(n, 1), w = b.filled<S>(a.n, 2), bias = b.filled<S>(a.n, 3);
    DeviceBuffer y(static_cast<std::size_t>(n) * sizeof(S), kWhere);
    b.add(std::string("cuda.") + op + "." + fmt, "4096x8192", 2.0 * n * sizeof(S),
          [&] { launch_norm<Op, S>(x.as<S>(), w.as<S>(), bias.as<S>(), y.as<S>(), a, Launch{}, b.stream()); });
}

template <class S>
void softmax(Bench& b, const char* fmt) {
    const long long rows = 4096;
    const int n = 8192;
    DeviceBuffer x = b.filled<S>(rows * n, 1), y(static_cast<std::size_t>(rows * n) * sizeof(S), kWhere);
    b.add(std::string("cuda.softmax.") + fmt, "4096x8192", 2.0 * rows * n * sizeof(S),
          [&] { launch_softmax<S, false>(x.as<S>(), y.as<S>(), rows, n, Launch{}, b.stream()); });
}

template <class S>
void rope(Bench& b, const char* fmt) {
    RopeShape a;
    a.L = 16384, a.D = 128, a.rows = 32ll * a.L, a.r = 128, a.base = 10000, a.offset = 0;
    const long long n = a.rows * a.D;
    DeviceBuffer x = b.filled<S>(n, 1), y(static_cast<std::size_t>(n) * sizeof(S), kWhere);
    b.add(std::string("cuda.rope.") + fmt, "32x16384x128", 2.0 * n * sizeof(S),
          [&] { launch_rope<S>(x.as<S>(), y.as<S>(), a, Launch{}, b.stream()); });
}

template <class S>
void all_of_format(Bench& b, const char* fmt) {
    unary<S>(b, "sigmoid", fmt, Sigmoid{});
    unary<S>(b, "silu", fmt, Silu{});
    unary<S>(b, "gelu_erf", fmt, GeluErf{});
    unary<S>(b, "gelu_tanh", fmt, GeluTanh{});
    unary<S>(b, "softplus", fmt, Softplus{});
    unary<S>(b, "softcap", fmt, Softcap{30});
    binary<S>(b, "swiglu", fmt, Glu<Silu>{});
    binary<S>(b, "geglu", fmt, Glu<GeluErf>{});
    binary<S>(b, "situ_glu", fmt, SituGlu{{4}, {25}});
    binary<S>(b, "swiglu_clamp", fmt, SwigluClamp{10});
    norm<Norm::rms, S>(b, "rms_norm", fmt);
    norm<Norm::layer, S>(b, "layer_norm", fmt);
    norm<Norm::l2, S>(b, "l2_norm", fmt);
    softmax<S>(b, fmt);
    rope<S>(b, fmt);
}

// cuda.attention.bf16 on the shapes of docs/cuda.md's table: B H = 32 x 16
// heads (MHA), D = 128, prefill L = 1k, 4k, 16k causal and not, decode
// Lq = 1 over Lk = 32k; FLOPs 4 B H Lq Lk D, halved for causal prefill.
void attention(Bench& b) {
    using S = __nv_bfloat16;
    const int heads = 32 * 16, d = 128;
    auto one = [&](int lq, int lk, bool causal) {
        AttnArgs a{};
        a.hq = a.hkv = heads, a.lq = lq, a.lk = lk, a.d = a.dv = d;
        a.scale = static_cast<float>(1 / std::sqrt(static_cast<double>(d)));
        a.causal = causal;
        a.splits = choose_splits(Params{}, AttnLaunch{}, lq, lk);
        a.split_keys = (lk + a.splits - 1) / a.splits;
        a.block = TcTile<128>::kBk;
        const long long nq = 1ll * heads * lq * d, nk = 1ll * heads * lk * d, rows = 1ll * heads * lq;
        DeviceBuffer in[3] = {b.filled<S>(nq, 1), b.filled<S>(nk, 2), b.filled<S>(nk, 3)};
        DeviceBuffer o(nq * sizeof(S), kWhere), lse(rows * sizeof(float), kWhere);
        DeviceBuffer po((a.splits > 1 ? a.splits : 0) * nq * sizeof(float), kWhere);
        DeviceBuffer pl((a.splits > 1 ? a.splits : 0) * rows * sizeof(float), kWhere);
        const int warps = lq <= 16 ? 1 : 4;
        const dim3 grid((lq + 16 * warps - 1) / (16 * warps), heads, a.splits), block(32 * warps);
        const double flops = 4.0 * heads * lq * lk * d * (causal && lq == lk ? 0.5 : 1.0);
        const std::string shape = "BH=512 Lq=" + std::to_string(lq) + " Lk=" + std::to_string(lk) + (causal ? " causal" : "");
        b.add_flops("cuda.attention.bf16", shape, flops, [&] {
            AttnLaunchFn<S, AttnNoBug>::tc<128>(a, grid, block, in, nullptr, o.as<S>(), lse.as<float>(), po.as<float>(),
                                                 pl.as<float>(), b.stream());
            if (a.splits > 1)
                attention_merge<S><<<static_cast<unsigned>((rows + 3) / 4), 128, 0, b.stream()>>>(
                    po.as<float>(), pl.as<float>(), a, o.as<S>(), lse.as<float>());
        });
    };
    for (int l : {1024, 4096, 16384})
        for (bool causal : {false, true}) one(l, l, causal);
    one(1, 32768, false);
}

}  // namespace

std::string benchmark_json() {
    Bench b;
    all_of_format<float>(b, "fp32");
    all_of_format<__half>(b, "fp16");
    all_of_format<__nv_bfloat16>(b, "bf16");
    attention(b);
    std::string j = "[\n";
    for (std::size_t i = 0; i < b.rows().size(); ++i) {
        const Row& r = b.rows()[i];
        char line[512];
        if (r.flops > 0) {
            std::snprintf(line, sizeof line,
                          "  {\"kernel\": \"%s\", \"shape\": \"%s\", \"flops\": %.0f, \"ms\": %.6f, "
                          "\"tflop_per_s\": %.3f}%s\n",
                          r.kernel.c_str(), r.shape.c_str(), r.flops, r.ms, r.flops / r.ms / 1e9,
                          i + 1 < b.rows().size() ? "," : "");
            j += line;
            continue;
        }
        std::snprintf(line, sizeof line,
                      "  {\"kernel\": \"%s\", \"shape\": \"%s\", \"bytes\": %.0f, \"ms\": %.6f, \"gb_per_s\": %.2f, "
                      "\"copy_gb_per_s\": %.2f, \"share_of_copy\": %.4f}%s\n",
                      r.kernel.c_str(), r.shape.c_str(), r.bytes, r.ms, r.bytes / r.ms / 1e6, r.bytes / r.copy_ms / 1e6,
                      r.copy_ms / r.ms, i + 1 < b.rows().size() ? "," : "");
        j += line;
    }
    return j + "]\n";
}

}  // namespace conform::cuda_kernels
