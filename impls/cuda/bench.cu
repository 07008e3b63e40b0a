// GPU benchmarks of the cuda kernels (docs/cuda.md, "Performance"; nvcc
// only): bytes/s of each kernel on 4096 x 8192 rows (norms, softmax) or
// 2^26 elements (activations, gated, RoPE as [32, 16384, 128]), beside a
// device-to-device cudaMemcpy of the same bytes in the same run; the share
// of that copy is the figure; attention and the INT8 GEMM in (integer)
// operations per second, the delta rule in tokens per second.  Times are
// CUDA events around 20 launches (3 for calls over 50 ms) after 3 warm-up
// launches.
#include <cuda_runtime.h>

#include <cmath>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "impls/cuda/activation_math.cuh"
#include "impls/cuda/attention.cuh"
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/emu/mma_model.hpp"
#include "impls/cuda/gdn.cuh"
#include "impls/cuda/int8.cuh"
#include "impls/cuda/matmul.cuh"
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
    double flops = 0;   // attention, INT8 GEMM: its (integer) operations per call (bytes and copy_ms unused)
    double tokens = 0;  // gdn, kda: tokens per call (bytes and copy_ms unused)
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
    // Kernel processing `tokens` tokens per call (the delta rule): tokens/s.
    void add_tokens(const std::string& kernel, const std::string& shape, double tokens, const std::function<void()>& f) {
        const double first = time_ms(f, s_.get(), 1);
        Row r{kernel, shape, 0, time_ms(f, s_.get(), first > 50 ? 3 : 20), 0};
        r.tokens = tokens;
        rows_.push_back(r);
        std::fprintf(stderr, "%-28s %-24s %8.3f ms  %9.0f tokens/s\n", r.kernel.c_str(), r.shape.c_str(), r.ms,
                     r.tokens / r.ms * 1e3);
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
        const long long nq = 1ll * heads * lq * d, nk = 1ll * heads * lk * d, rows = 1ll * heads * lq;
        DeviceBuffer q = b.filled<S>(nq, 1), k = b.filled<S>(nk, 2), v = b.filled<S>(nk, 3);
        DeviceBuffer o(nq * sizeof(S), kWhere), lse(rows * sizeof(float), kWhere);
        DeviceBuffer po((a.splits > 1 ? a.splits : 0) * nq * sizeof(float), kWhere);
        DeviceBuffer pl((a.splits > 1 ? a.splits : 0) * rows * sizeof(float), kWhere);
        const AttnBuffers<S> buf{q.as<S>(), k.as<S>(), v.as<S>(), nullptr, o.as<S>(), lse.as<float>(),
                                 po.as<float>(), pl.as<float>(), nullptr, nullptr};
        const double flops = 4.0 * heads * lq * lk * d * (causal && lq == lk ? 0.5 : 1.0);
        const std::string shape = "BH=512 Lq=" + std::to_string(lq) + " Lk=" + std::to_string(lk) + (causal ? " causal" : "");
        b.add_flops("cuda.attention.bf16", shape, flops, [&] { launch_attention<S>(a, buf, 0, b.stream()); });
    };
    for (int l : {1024, 4096, 16384})
        for (bool causal : {false, true}) one(l, l, causal);
    one(1, 32768, false);
}

// A log-decay in (-0.1, 0] from values of order 1 (the delta rule's gates).
template <class S>
__global__ void to_log_decay(S* p, long long n) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        p[i] = store<S>(-fabs(load(p[i])) / 30);
}

// cuda.gdn.bf16 and cuda.kda.bf16 on one sequence of T = 4k and 32k tokens,
// H = 16, d_k = d_v = 128, chunk 64, l2norm, scale 1/sqrt(128), no initial
// state: tokens/s (bench/gdn_fla.py times flash-linear-attention on the same shapes).
template <bool PerChannel>
void delta(Bench& b, const char* kernel) {
    using S = __nv_bfloat16;
    const int heads = 16, d = 128;
    for (long long t : {4096LL, 32768LL}) {
        const long long nq = t * heads * d, ng = t * heads * (PerChannel ? d : 1);
        DeviceBuffer q = b.filled<S>(nq, 1), k = b.filled<S>(nq, 2), v = b.filled<S>(nq, 3);
        DeviceBuffer g = b.filled<S>(ng, 4), beta = b.filled<S>(t * heads, 5);
        auto* decay_fn = to_log_decay<S>;
        decay_fn<<<1024, 256, 0, b.stream()>>>(g.as<S>(), ng);
        const long long cu_host[2] = {0, t};
        DeviceBuffer cu(sizeof cu_host, kWhere), y(nq * sizeof(S), kWhere), state(4ll * heads * d * d, kWhere);
        check(cudaMemcpy(cu.as<void>(), cu_host, sizeof cu_host, cudaMemcpyHostToDevice), "cudaMemcpy", kWhere);
        const DeltaArgs a{heads, d, d, 64, 1, 0, 1, 1e-6f, static_cast<float>(1 / std::sqrt(128.0))};
        const DeltaLayout lay = delta_layout(64, d, d, PerChannel);
        DeviceBuffer ws(static_cast<std::size_t>(delta_workspace(a, lay, Launch{})) * 4, kWhere);
        const DeltaIo<S> io{q.as<S>(), k.as<S>(), v.as<S>(), g.as<S>(), beta.as<S>(), nullptr,
                            cu.as<long long>(), y.as<S>(), state.as<float>(), ws.as<float>()};
        b.add_tokens(kernel, "T=" + std::to_string(t) + " H=16 d=128", static_cast<double>(t),
                     [&] { launch_delta<S, PerChannel>(io, a, lay, Launch{}, b.stream()); });
    }
}

// cuda.int8_gemm.fp32 at M = N = K = 4096 and M = 16, N = K = 8192: integer
// operations 2 M N K per call (bench/gemm_torch.py times torch._int_mm,
// cuBLASLt's INT8 GEMM, on the same shapes).
void int8_gemm(Bench& b) {
    for (const auto& [m, n, k] : {std::array<int, 3>{4096, 4096, 4096}, std::array<int, 3>{16, 8192, 8192}}) {
        DeviceBuffer a(1ull * m * k, kWhere), w(1ull * k * n, kWhere), sa(4, kWhere), sb(4, kWhere);
        DeviceBuffer acc(4ull * m * n, kWhere), y(4ull * m * n, kWhere);
        check(cudaMemset(a.as<void>(), 0x35, a.bytes()), "cudaMemset", kWhere);
        check(cudaMemset(w.as<void>(), 0xc7, w.bytes()), "cudaMemset", kWhere);
        const float one = 1;
        check(cudaMemcpy(sa.as<void>(), &one, 4, cudaMemcpyHostToDevice), "cudaMemcpy", kWhere);
        check(cudaMemcpy(sb.as<void>(), &one, 4, cudaMemcpyHostToDevice), "cudaMemcpy", kWhere);
        const GemmArgs g{m, n, k, 0, 0};
        b.add_flops("cuda.int8_gemm.fp32", "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k),
                    2.0 * m * n * k, [&] {
                        launch_int8_gemm<float>(a.as<std::int8_t>(), w.as<std::int8_t>(), sa.as<float>(), sb.as<float>(),
                                                g, acc.as<std::int32_t>(), y.as<float>(), Launch{}, b.stream());
                    });
    }
}

// cuda.matmul.bf16 (tensor cores) and cuda.matmul.fp32 (FMA) at M = N = K =
// 4096 and M = 16, N = K = 8192: 2 M N K per call (bench/gemm_torch.py
// times torch.matmul, cuBLAS, on the same shapes; TF32 off for FP32).
void matmul(Bench& b) {
    for (const auto& [m, n, k] : {std::array<int, 3>{4096, 4096, 4096}, std::array<int, 3>{16, 8192, 8192}})
        for (const bool bf16 : {true, false}) {
            const std::size_t width = bf16 ? 2 : 4;
            DeviceBuffer a(width * m * k, kWhere), w(width * k * n, kWhere), y(width * m * n, kWhere);
            check(cudaMemset(a.as<void>(), 0x3c, a.bytes()), "cudaMemset", kWhere);  // finite in both formats
            check(cudaMemset(w.as<void>(), 0x3b, w.bytes()), "cudaMemset", kWhere);
            const MatmulArgs g{m, n, k};
            const std::string shape = "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k);
            b.add_flops(bf16 ? "cuda.matmul.bf16" : "cuda.matmul.fp32", shape, 2.0 * m * n * k, [&] {
                using B16 = __nv_bfloat16;
                if (bf16) launch_matmul<B16, B16>(a.as<void>(), w.as<void>(), g, y.as<B16>(), Launch{}, b.stream());
                else launch_matmul<float, float>(a.as<void>(), w.as<void>(), g, y.as<float>(), Launch{}, b.stream());
            });
        }
}

// ---- the tensor cores' accumulation against the model (docs/attention.md,
// "Tensor-core accumulation") ----

// Block `blockIdx.x`: D = C + A B for A [16 x 16], B [16 x 8] (row-major
// 16-bit values) and C [16 x 8], through the fragments of mma.cuh.
template <class S>
__global__ void mma_probe_kernel(const unsigned short* a, const unsigned short* b, const float* c, float* d) {
    const int lane = threadIdx.x, group = lane / 4, t = lane % 4;
    a += blockIdx.x * 256, b += blockIdx.x * 128, c += blockIdx.x * 128, d += blockIdx.x * 128;
    const std::uint32_t af[4] = {pair_at(a + group * 16 + 2 * t), pair_at(a + (group + 8) * 16 + 2 * t),
                                 pair_at(a + group * 16 + 2 * t + 8), pair_at(a + (group + 8) * 16 + 2 * t + 8)};
    const std::uint32_t bf[2] = {
        static_cast<std::uint32_t>(b[2 * t * 8 + group]) | static_cast<std::uint32_t>(b[(2 * t + 1) * 8 + group]) << 16,
        static_cast<std::uint32_t>(b[(2 * t + 8) * 8 + group]) | static_cast<std::uint32_t>(b[(2 * t + 9) * 8 + group]) << 16};
    const float cf[4] = {c[group * 8 + 2 * t], c[group * 8 + 2 * t + 1], c[(group + 8) * 8 + 2 * t],
                         c[(group + 8) * 8 + 2 * t + 1]};
    float df[4];
    mma16816<S>(df, af, bf, cf);
    d[group * 8 + 2 * t] = df[0], d[group * 8 + 2 * t + 1] = df[1];
    d[(group + 8) * 8 + 2 * t] = df[2], d[(group + 8) * 8 + 2 * t + 1] = df[3];
}

struct ProbeResult {
    std::string name;
    long long elements = 0, equal_to_model = 0, equal_to_nearest = 0;
    double max_util = 0;  // |d - exact| / block_fma_bound: <= 1 inside the model's bound
};

// With CONFORM_PROBE_DUMP=DIR, DIR/<name>.bin gets the probe's raw data for
// study off the device: A (blocks x 16 x 16 u16, row-major), B (blocks x 16 x
// 8 u16, k-major), C and D (blocks x 16 x 8 float, row-major), in that order.
void dump_probe(const char* name, const std::vector<unsigned short>& a, const std::vector<unsigned short>& b,
                const std::vector<float>& c, const std::vector<float>& d) {
    const char* dir = std::getenv("CONFORM_PROBE_DUMP");
    if (!dir || !*dir) return;
    const std::string path = std::string(dir) + "/" + name + ".bin";
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
        std::fprintf(stderr, "cuda benchmark: cannot write %s\n", path.c_str());
        return;
    }
    std::fwrite(a.data(), 2, a.size(), f), std::fwrite(b.data(), 2, b.size(), f);
    std::fwrite(c.data(), 4, c.size(), f), std::fwrite(d.data(), 4, d.size(), f);
    std::fclose(f);
}

// Random blocks of three kinds, random signs throughout: values with
// exponents in [-6, 6]; the same with C set to cancel most of the sum; and A
// in the format's subnormal range and just above it (the attention weights
// P that the bound's p_eta assumes are multiplied exactly), with a C of the
// products' size.  Each block's terms span fewer than 53 bits, so their sum
// in double is exact.
template <class S>
ProbeResult mma_probe(const char* name, Format f, int blocks) {
    std::uint64_t state = 12345;
    auto uniform = [&] {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<double>(state >> 11) * 0x1p-53;
    };
    auto value = [&](int lo, int hi) {
        return (uniform() < 0.5 ? -1 : 1) * (1 + uniform()) * std::ldexp(1.0, lo + static_cast<int>(uniform() * (hi - lo + 1)));
    };
    const int emin = info(f).emin, tiny = emin - (info(f).precision - 1);  // smallest normal, subnormal exponents
    std::vector<unsigned short> a(blocks * 256), b(blocks * 128);
    std::vector<double> av(a.size()), bv(b.size());
    std::vector<float> c(blocks * 128), d(c.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        const bool sub = i / 256 % 3 == 2;
        a[i] = static_cast<unsigned short>(encode(f, sub ? value(tiny, tiny + 12) : value(-6, 6))), av[i] = decode(f, a[i]);
    }
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned short>(encode(f, value(-6, 6))), bv[i] = decode(f, b[i]);
    auto products = [&](int blk, int r, int n, double* p) {
        for (int k = 0; k < 16; ++k) p[k] = av[blk * 256 + r * 16 + k] * bv[blk * 128 + k * 8 + n];
    };
    for (int blk = 0; blk < blocks; ++blk)
        for (int e = 0; e < 128; ++e) {
            double p[16], sum = 0;
            products(blk, e / 8, e % 8, p);
            for (double x : p) sum += x;
            const int kind = blk % 3;
            c[blk * 128 + e] = static_cast<float>(kind == 1 ? -sum * (1 + 0x1p-10 * uniform())
                                                  : kind == 2 ? sum * uniform()
                                                              : value(-6, 6));
        }
    DeviceBuffer da(a.size() * 2, kWhere), db(b.size() * 2, kWhere), dc(c.size() * 4, kWhere), dd(d.size() * 4, kWhere);
    check(cudaMemcpy(da.as<void>(), a.data(), a.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy", kWhere);
    check(cudaMemcpy(db.as<void>(), b.data(), b.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy", kWhere);
    check(cudaMemcpy(dc.as<void>(), c.data(), c.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy", kWhere);
    mma_probe_kernel<S><<<blocks, 32>>>(da.as<unsigned short>(), db.as<unsigned short>(), dc.as<float>(), dd.as<float>());
    check(cudaDeviceSynchronize(), "mma probe", kWhere);
    check(cudaMemcpy(d.data(), dd.as<void>(), d.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy", kWhere);
    dump_probe(name, a, b, c, d);
    ProbeResult r;
    r.name = name;
    for (int blk = 0; blk < blocks; ++blk)
        for (int e = 0; e < 128; ++e) {
            double ak[16], bk[16], exact = c[blk * 128 + e], mags = std::fabs(c[blk * 128 + e]), m = 0;
            for (int k = 0; k < 16; ++k) {
                ak[k] = av[blk * 256 + (e / 8) * 16 + k], bk[k] = bv[blk * 128 + k * 8 + e % 8];
                exact += ak[k] * bk[k], mags += std::fabs(ak[k] * bk[k]);  // exact: the terms span < 53 bits
                m = std::max({m, std::fabs(ak[k]), std::fabs(bk[k])});
            }
            const float got = d[blk * 128 + e];
            ++r.elements;
            r.equal_to_model += got == ::conform::cuda_emu::block_fma(c[blk * 128 + e], ak, bk, 16, emin);
            r.equal_to_nearest += got == static_cast<float>(exact);
            r.max_util = std::max(r.max_util, std::fabs(got - exact) / ::conform::cuda_emu::block_fma_bound(mags, m, 16, emin));
        }
    std::fprintf(stderr, "%-28s %lld elements: max error %.3f of the model's bound; equal to the model %lld, to "
                 "round-to-nearest %lld\n", name, r.elements, r.max_util, r.equal_to_model, r.equal_to_nearest);
    return r;
}

}  // namespace

std::string benchmark_json() {
    // The probes first: seconds, and the bound's model rests on them.
    const ProbeResult probes[] = {mma_probe<__half>("mma.m16n8k16.f16", Format::fp16, 2048),
                                  mma_probe<__nv_bfloat16>("mma.m16n8k16.bf16", Format::bf16, 2048)};
    Bench b;
    all_of_format<float>(b, "fp32");
    all_of_format<__half>(b, "fp16");
    all_of_format<__nv_bfloat16>(b, "bf16");
    attention(b);
    delta<false>(b, "cuda.gdn.bf16");
    delta<true>(b, "cuda.kda.bf16");
    int8_gemm(b);
    matmul(b);
    std::string j = "[\n";
    for (const ProbeResult& p : probes) {
        char line[512];
        std::snprintf(line, sizeof line,
                      "  {\"probe\": \"%s\", \"elements\": %lld, \"max_error_over_model_bound\": %.6f, "
                      "\"within_model\": %s, \"equal_to_model\": %lld, \"equal_to_nearest\": %lld},\n",
                      p.name.c_str(), p.elements, p.max_util, p.max_util <= 1 ? "true" : "false", p.equal_to_model,
                      p.equal_to_nearest);
        j += line;
    }
    for (std::size_t i = 0; i < b.rows().size(); ++i) {
        const Row& r = b.rows()[i];
        char line[512];
        if (r.tokens > 0) {
            std::snprintf(line, sizeof line,
                          "  {\"kernel\": \"%s\", \"shape\": \"%s\", \"tokens\": %.0f, \"ms\": %.6f, "
                          "\"tokens_per_s\": %.1f}%s\n",
                          r.kernel.c_str(), r.shape.c_str(), r.tokens, r.ms, r.tokens / r.ms * 1e3,
                          i + 1 < b.rows().size() ? "," : "");
            j += line;
            continue;
        }
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
