// The elementwise kernels' shared parts (activation.cu, gated.cu): storage
// loads and stores through double, 16-byte packs, and the host calls of a
// unary and a binary op.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>

#include "impls/cuda/device_io.cuh"
#include "impls/cuda/reduce.cuh"  // NoBug
#include "impls/registry.hpp"

namespace conform::CONFORM_CUDA_NS {

__device__ __forceinline__ double load(float v) { return v; }
__device__ __forceinline__ double load(__half v) { return __half2float(v); }
__device__ __forceinline__ double load(__nv_bfloat16 v) { return __bfloat162float(v); }

// The k order of the CPU kernels' FMA chains (impls/cpu/matmul.cpp, Order):
// ascending, but for BF16 inputs each pair swapped (1, 0, 3, 2, ...; an odd
// K's last term alone), the order AVX512-BF16's dpbf16 forms.  A GPU chain
// in this order has the CPU scalar kernel's bits.
template <class S>
__device__ __forceinline__ int chain_index(int p, int k) {
    if constexpr (std::is_same_v<S, __nv_bfloat16>) return p % 2 ? p - 1 : (p + 1 < k ? p + 1 : p);
    else return p;
}

// One rounding from double into the storage format (no detour through float,
// whose rounding and then the 16-bit one would be a double rounding).
template <class S>
__device__ __forceinline__ S store(double d);
template <>
__device__ __forceinline__ float store<float>(double d) { return static_cast<float>(d); }
template <>
__device__ __forceinline__ __half store<__half>(double d) { return __double2half(d); }
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(double d) { return __double2bfloat16(d); }

// 16 bytes of storage: one vector load or store.
template <class S>
struct alignas(16) Pack {
    static constexpr int kLanes = 16 / static_cast<int>(sizeof(S));
    S v[kLanes];
};

// The store of a result; the truncating one is a GPU mutant's bug
// (__float2bfloat16_rz of the float result).
template <class S, class Bug>
__device__ __forceinline__ S store_as(double d) {
    if constexpr (Bug::kTruncateBf16 && std::is_same_v<S, __nv_bfloat16>)
        return __float2bfloat16_rz(static_cast<float>(d));
    else
        return store<S>(d);
}

// The 16-bit formats' float path (docs/cuda.md, "The float path of the
// 16-bit formats"): a result within 2^-14 relative, rounded once into the
// format, is within one ulp of the exact value.  Its limit keeps results
// clear of the format's overflow threshold, which a relative error could
// cross; special inputs, results past the limit and NaN (the functor
// declining) take the double path, whose special values are the CPU's.
template <class S>
constexpr float kFloatPathLimit = std::is_same_v<S, __half> ? 65504.0f * (1 - 0x1p-8f) : 0x1.fep127f * (1 - 0x1p-8f);

template <class S, class Bug>
__device__ __forceinline__ S store_float_as(float y) {
    if constexpr (std::is_same_v<S, __half>) return __float2half_rn(y);
    else if constexpr (Bug::kTruncateBf16) return __float2bfloat16_rz(y);
    else return __float2bfloat16_rn(y);
}

template <class S, class Bug, class Op, class... X>
__device__ __forceinline__ S evaluate(const Op& op, X... x) {
    if constexpr (std::is_same_v<S, float>) {
        return store_as<S, Bug>(op(load(x)...));
    } else {
        const float y = op.f(static_cast<float>(load(x))...);
        if ((isfinite(static_cast<float>(load(x))) && ...) && fabsf(y) < kFloatPathLimit<S>) return store_float_as<S, Bug>(y);
        return store_as<S, Bug>(op(load(x)...));
    }
}

template <class Op, class S, class Bug = NoBug>
__global__ void unary_kernel(const S* __restrict__ x, S* __restrict__ y, long long n, Op op) {
    constexpr int V = Pack<S>::kLanes;
    const long long tid = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
    const long long stride = Bug::kNoGridStride ? n + 1 : static_cast<long long>(gridDim.x) * blockDim.x;
    const long long packs = n / V;
    const Pack<S>* xp = reinterpret_cast<const Pack<S>*>(x);
    Pack<S>* yp = reinterpret_cast<Pack<S>*>(y);
    for (long long p = tid; p < packs; p += stride) {
        Pack<S> a = xp[p];
        CONFORM_UNROLL
        for (int j = 0; j < V; ++j) a.v[j] = evaluate<S, Bug>(op, a.v[j]);
        yp[p] = a;
    }
    if constexpr (!Bug::kDropTail)
        for (long long i = packs * V + tid; i < n; i += stride) y[i] = evaluate<S, Bug>(op, x[i]);
}

// A row of n elements in a row kernel (one block per row): the block's
// threads stride over it as 16-byte packs when the row is a whole number of
// packs (every row then starts 16-byte aligned in a dense tensor), else one
// element at a time.  row_read calls f(i, x_i); row_map stores g(i, x_i)
// into y_i.
template <class S, class F>
__device__ __forceinline__ void row_read(const S* __restrict__ xr, int n, F f) {
    constexpr int V = Pack<S>::kLanes;
    if (n % V == 0) {
        const Pack<S>* p = reinterpret_cast<const Pack<S>*>(xr);
        for (int q = threadIdx.x; q < n / V; q += blockDim.x) {
            const Pack<S> a = p[q];
            CONFORM_UNROLL
            for (int j = 0; j < V; ++j) f(q * V + j, load(a.v[j]));
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) f(i, load(xr[i]));
    }
}

template <class S, class G>
__device__ __forceinline__ void row_map(const S* __restrict__ xr, S* __restrict__ yr, int n, G g) {
    constexpr int V = Pack<S>::kLanes;
    if (n % V == 0) {
        const Pack<S>* p = reinterpret_cast<const Pack<S>*>(xr);
        Pack<S>* o = reinterpret_cast<Pack<S>*>(yr);
        for (int q = threadIdx.x; q < n / V; q += blockDim.x) {
            const Pack<S> a = p[q];
            Pack<S> c;
            CONFORM_UNROLL
            for (int j = 0; j < V; ++j) c.v[j] = store<S>(g(q * V + j, load(a.v[j])));
            o[q] = c;
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = store<S>(g(i, load(xr[i])));
    }
}

// A thread's share of a row held in registers between a row kernel's passes,
// so that the row is read from memory once: when the row is a whole number
// of 16-byte packs and the block's threads hold it in at most K packs each
// (K * 16 bytes of registers); otherwise (held = false) each pass reads the
// row again through row_read / row_map.  Thread t holds packs t, t + T, ...,
// the order in which row_read visits them, so a pass over the registers
// performs the same operations in the same order as one over memory.
// kHold = false never holds (the kernel reads the row each pass).
template <class S, int K = 8, bool kHold = true>
struct RowRegs {
    static constexpr int V = Pack<S>::kLanes;
    Pack<S> p[K];
    bool held = false;

    __device__ __forceinline__ void load_row(const S* __restrict__ xr, int n) {
        held = kHold && n % V == 0 && n / V <= K * static_cast<int>(blockDim.x);
        if (!held) return;
        const Pack<S>* src = reinterpret_cast<const Pack<S>*>(xr);
        CONFORM_UNROLL
        for (int k = 0; k < K; ++k) {
            const int q = threadIdx.x + k * blockDim.x;
            if (q < n / V) p[k] = src[q];
        }
    }
    // f(i, x_i) over this thread's entries.
    template <class F>
    __device__ __forceinline__ void read(const S* __restrict__ xr, int n, F f) const {
        if (!held) return row_read(xr, n, f);
        CONFORM_UNROLL
        for (int k = 0; k < K; ++k) {
            const int q = threadIdx.x + k * blockDim.x;
            if (q >= n / V) break;
            CONFORM_UNROLL
            for (int j = 0; j < V; ++j) f(q * V + j, load(p[k].v[j]));
        }
    }
    // y_i = g(i, x_i) over this thread's entries.
    template <class G>
    __device__ __forceinline__ void map(const S* __restrict__ xr, S* __restrict__ yr, int n, G g) const {
        if (!held) return row_map(xr, yr, n, g);
        Pack<S>* o = reinterpret_cast<Pack<S>*>(yr);
        CONFORM_UNROLL
        for (int k = 0; k < K; ++k) {
            const int q = threadIdx.x + k * blockDim.x;
            if (q >= n / V) break;
            Pack<S> c;
            CONFORM_UNROLL
            for (int j = 0; j < V; ++j) c.v[j] = store<S>(g(q * V + j, load(p[k].v[j])));
            o[q] = c;
        }
    }
};

// The gated ops: h = op(gate, up), two inputs of one shape.
template <class Op, class S>
__global__ void binary_kernel(const S* __restrict__ g, const S* __restrict__ u, S* __restrict__ h, long long n, Op op) {
    constexpr int V = Pack<S>::kLanes;
    const long long tid = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    const long long packs = n / V;
    const Pack<S>* gp = reinterpret_cast<const Pack<S>*>(g);
    const Pack<S>* up = reinterpret_cast<const Pack<S>*>(u);
    Pack<S>* hp = reinterpret_cast<Pack<S>*>(h);
    for (long long p = tid; p < packs; p += stride) {
        const Pack<S> a = gp[p], b = up[p];
        Pack<S> c;
        CONFORM_UNROLL
        for (int j = 0; j < V; ++j) c.v[j] = evaluate<S, NoBug>(op, a.v[j], b.v[j]);
        hp[p] = c;
    }
    for (long long i = packs * V + tid; i < n; i += stride) h[i] = evaluate<S, NoBug>(op, g[i], u[i]);
}

// Calls fn with a value of f's storage type: float, __half or __nv_bfloat16.
template <class Fn>
void by_storage(Format f, Fn&& fn) {
    if (f == Format::fp32) return fn(float{});
    if (f == Format::fp16) return fn(__half{});
    fn(__nv_bfloat16{});
}

// The registry entry of cuda.<op>.<fmt> (fn left to the caller).
inline KernelInfo kernel_info(const char* op, Format f, const std::string& what) {
    KernelInfo k;
    k.op = op;
    k.name = std::string("cuda.") + op + "." + name(f);
    k.variant = "cuda";
    k.in = k.out = f;
    k.acc = Format::fp64;
    k.backend = CONFORM_CUDA_BACKEND;
    k.description = what + " in double, one rounding into " + name(f) + "; 16-byte packs, grid-stride";
    return k;
}

// cuda.<op>.nan_rows.<fmt>: the variant of k whose empty rows (softmax: all
// -inf; attention: a query that sees no key) give NaN, declared masked_row = nan.
inline void make_nan_rows(KernelInfo& k, const char* op, Format f) {
    k.name = std::string("cuda.") + op + ".nan_rows." + name(f);
    k.variant = "cuda.nan_rows";
    k.conventions = {{"masked_row", "nan"}};
}

// The registry entry of a GPU mutant, mutant.cuda.<op>.<bug>.<fmt> (fn left
// to the caller).
inline KernelInfo mutant_kernel_info(const char* op, const char* bug, Format f, const char* bug_class,
                                     const char* what) {
    KernelInfo k = kernel_info(op, f, what);
    k.name = std::string("mutant.cuda.") + op + "." + bug + "." + name(f);
    k.variant = bug;
    k.role = Role::mutant;
    k.bug_class = bug_class;
    k.description = what;
    return k;
}

// A launch configuration: the kernels' own (the defaults) or the
// determinism property's others (one block, one warp), under which every
// grid-stride loop and reduction must give a result within budget.
struct Launch {
    unsigned max_blocks = 4096;
    unsigned threads = 256;  // per block, a multiple of 32
};

// Blocks for `work` items at one item per thread (grid-stride beyond the cap).
inline unsigned blocks_for(long long work, const Launch& l) {
    return static_cast<unsigned>(std::clamp<long long>((work + l.threads - 1) / l.threads, 1, l.max_blocks));
}

// k.fn = make(the default launch), and the other launches the determinism
// property checks.
template <class Make>
void with_launches(KernelInfo& k, Make make) {
    k.fn = make(Launch{});
    k.launches = {{"one block of 256 threads", make(Launch{1, 256})}, {"one block of one warp", make(Launch{1, 32})}};
}

// cuda.<op>.<fmt> for each format of a composed op: info(k, f) sets its
// formats and declarations, what(f) its description, and run(c, f,
// kernel, launch) is its call under each launch.
template <class Info, class What, class Run>
void add_composed(Registry& r, const char* op, std::initializer_list<Format> formats, Info info, What what, Run run) {
    for (Format f : formats) {
        KernelInfo k = info(kernel_info(op, f, ""), f);
        k.description = what(f);
        with_launches(k, [f, run, kernel = k.name](Launch l) -> KernelFn {
            return [f, run, kernel, l](const KernelCall& c) { run(c, f, kernel.c_str(), l); };
        });
        r.add(std::move(k));
    }
}

// The launches on device memory (the host calls below, and the benchmarks).
template <class S, class Op, class Bug = NoBug>
void launch_unary(const S* x, S* y, long long n, const Op& op, const Launch& l, cudaStream_t s) {
    auto* kernel_fn = unary_kernel<Op, S, Bug>;
    CONFORM_LAUNCH(kernel_fn, dim3(blocks_for(n / Pack<S>::kLanes + 1, l)), dim3(l.threads), 0, s)(x, y, n, op);
}

template <class S, class Op>
void launch_binary(const S* g, const S* u, S* h, long long n, const Op& op, const Launch& l, cudaStream_t s) {
    auto* kernel_fn = binary_kernel<Op, S>;
    CONFORM_LAUNCH(kernel_fn, dim3(blocks_for(n / Pack<S>::kLanes + 1, l)), dim3(l.threads), 0, s)(g, u, h, n, op);
}

template <class S, class Op, class Bug = NoBug>
void run_unary_as(const KernelCall& c, const Op& op, const char* kernel, const Launch& l) {
    const long long n = c.in[0].numel();
    Stream s(kernel);
    DeviceBuffer x(static_cast<std::size_t>(n) * sizeof(S), kernel), y(static_cast<std::size_t>(n) * sizeof(S), kernel);
    poison(y, s.get(), kernel);
    upload(c.in[0], x, s.get(), kernel);
    if (n > 0) {
        launch_unary<S, Op, Bug>(x.as<S>(), y.as<S>(), n, op, l, s.get());
        check_launch(s.get(), kernel);
    }
    download(y, c.out[0], s.get(), kernel);
}

template <class S, class Op>
void run_binary_as(const KernelCall& c, const Op& op, const char* kernel, const Launch& l) {
    const long long n = c.in[0].numel();
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(S);
    Stream s(kernel);
    DeviceBuffer g(bytes, kernel), u(bytes, kernel), h(bytes, kernel);
    poison(h, s.get(), kernel);
    upload(c.in[0], g, s.get(), kernel);
    upload(c.in[1], u, s.get(), kernel);
    if (n > 0) {
        launch_binary<S>(g.as<S>(), u.as<S>(), h.as<S>(), n, op, l, s.get());
        check_launch(s.get(), kernel);
    }
    download(h, c.out[0], s.get(), kernel);
}

template <class Op>
void run_binary(const KernelCall& c, Format f, const Op& op, const char* kernel, const Launch& l = {}) {
    by_storage(f, [&](auto s) { run_binary_as<decltype(s)>(c, op, kernel, l); });
}

template <class Bug = NoBug, class Op>
void run_unary(const KernelCall& c, Format f, const Op& op, const char* kernel, const Launch& l = {}) {
    by_storage(f, [&](auto s) { run_unary_as<decltype(s), Op, Bug>(c, op, kernel, l); });
}

// A 16-bit elementwise kernel computes in float (evaluate above): declared so.
inline void float_path(KernelInfo& k) {
    if (k.in == Format::fp32) return;
    k.acc = Format::fp32;
    const auto at = k.description.find(" in double");
    if (at != std::string::npos)
        k.description.replace(at, 10, " in float (in double for special inputs and results near overflow)");
}

// cuda.<op>.<fmt> for each storage format in `formats`: outputs in `out`
// (none: the storage format), arithmetic `acc`, the description `what`
// (with "; one rounding into <fmt>" appended when `rounding`), and k.fn and
// the determinism property's launches from run(c, f, kernel, launch).
template <class Run>
void add_per_format(Registry& r, const char* op, std::initializer_list<Format> formats, std::optional<Format> out,
                    Format acc, const std::string& what, bool rounding, Run run) {
    for (Format f : formats) {
        KernelInfo k = kernel_info(op, f, "");
        if (out) k.out = *out;
        k.acc = acc;
        k.description = rounding ? what + "; one rounding into " + name(f) : what;
        with_launches(k, [f, run, kernel = k.name](Launch l) -> KernelFn {
            return [f, run, kernel, l](const KernelCall& c) { run(c, f, kernel.c_str(), l); };
        });
        r.add(std::move(k));
    }
}

// cuda.<op>.<fmt> for the three storage formats of an elementwise op with
// `Arity` inputs (activation.cu: 1, gated.cu: 2), its functor built from
// the call's parameters by `make`, with the determinism property's launches.
template <int Arity, class Op>
void add_elementwise(Registry& r, const char* op, const char* what, Op (*make)(const Params&)) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = kernel_info(op, f, what);
        float_path(k);
        with_launches(k, [f, make, kernel = k.name](Launch l) -> KernelFn {
            return [f, make, kernel, l](const KernelCall& c) {
                if constexpr (Arity == 1) run_unary(c, f, make(c.params), kernel.c_str(), l);
                else run_binary(c, f, make(c.params), kernel.c_str(), l);
            };
        });
        r.add(std::move(k));
    }
}

}  // namespace conform::CONFORM_CUDA_NS
