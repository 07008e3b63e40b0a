// CPU kernels of the Hyper-Connections mixings (docs/hc_residual.md,
// "Kernels"):
//   cpu.simd.<op>.<fmt>    AVX2: the channels of a token eight at a time (the
//                          n streams' registers stay live across the n + 1
//                          outputs of a channel block); mHC's projections by
//                          the batched simd Sinkhorn (eight tokens per
//                          register); scalar path without AVX2
//   cpu.scalar.<op>.<fmt>  portable, one element at a time
// Both compute a coefficient as (l >= 0 ? 1 : t) / (1 + t), t = e^-|l| (no
// overflow, no cancellation), and every output as the same left-to-right
// chain of separate multiplies and adds, so simd and scalar agree bit for bit
// apart from mHC's projection (vf::exp_neg vs expf inside Sinkhorn).
#include "impls/cpu/hc_residual.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/sinkhorn.hpp"

namespace conform::cpu {
namespace {

struct Geometry {
    std::int64_t tokens = 0, n = 0, d = 0;
    int iters = 20;
    float eps = 0;  // the projection's guard, rounded to FP32 once
};

Geometry read_geometry(const KernelCall& c, bool project) {
    const char* op = project ? "mhc_residual kernel" : "hc_residual kernel";
    if (c.in.size() != 5 || c.out.size() != (project ? 3u : 2u))
        throw std::invalid_argument(std::string(op) + ": expects x, f, a_logits, b, c_logits -> h, x_next" +
                                    (project ? ", b" : ""));
    const TensorView& x = c.in[0];
    if (x.rank != 3) throw std::invalid_argument(std::string(op) + ": x must be [T, n, d]");
    Geometry g{x.shape[0], x.shape[1], x.shape[2]};
    if (g.n < 1) throw std::invalid_argument(std::string(op) + ": x needs at least one stream (n >= 1)");
    const std::int64_t want[5] = {g.tokens * g.n * g.d, g.tokens * g.d, g.tokens * g.n, g.tokens * g.n * g.n, g.tokens * g.n};
    for (std::size_t k = 0; k < 5; ++k)
        if (c.in[k].numel() != want[k]) throw std::invalid_argument(std::string(op) + ": input shapes do not match x");
    for (const auto* list : {&c.in, &c.out})
        for (const TensorView& t : *list)
            for (int a = t.rank - 1, stride = 1; a >= 0; stride *= static_cast<int>(t.shape[a]), --a)
                if (t.shape[a] > 1 && t.strides[a] != stride) throw std::invalid_argument(std::string(op) + ": tensors must be packed");
    if (project) {
        const SinkhornParams p = sinkhorn_params(c.params, "mhc_residual kernel");
        g.iters = p.iters, g.eps = p.eps;
    }
    return g;
}

// sigma(l) = (l >= 0 ? 1 : t) / (1 + t), t = e^-|l|: no overflow, no
// cancellation; sigma(-inf) = 0, sigma(NaN) = NaN.
float sigmoid(float l) {
    const float t = std::exp(-std::fabs(l));
    return (std::signbit(l) ? t : 1.0f) / (1.0f + t);
}

template <Format F>
std::vector<float> widen(const TensorView& t) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    const auto* p = static_cast<const storage_t<F>*>(t.data);
    for (std::size_t e = 0; e < v.size(); ++e) v[e] = Storage<F>::load(p, static_cast<long>(e));
    return v;
}

// Every token's mixing matrix in FP32, [T, n, n]: B as given (HC), or its
// projection (mHC), or what a flaw makes of it.
template <Format F>
std::vector<float> mixing_matrices(const KernelCall& c, const Geometry& g, bool project, bool simd, const HcFlaws& fl) {
    std::vector<float> b = widen<F>(c.in[3]);
    const std::int64_t nn = g.n * g.n;
    if (project && !fl.unprojected) {
        if (fl.rows_only) {
            for (std::int64_t t = 0; t < g.tokens; ++t)
                sinkhorn_matrix(b.data() + t * nn, g.n, g.iters, {.rows_only = true}, g.eps);
        } else {
            std::vector<float> out(b.size());
            sinkhorn_batch(b.data(), out.data(), g.tokens, g.n, g.iters, simd, g.eps);
            b = std::move(out);
        }
    }
    if (fl.transposed)
        for (std::int64_t t = 0; t < g.tokens; ++t)
            for (std::int64_t i = 0; i < g.n; ++i)
                for (std::int64_t j = 0; j < i; ++j) std::swap(b[static_cast<std::size_t>(t * nn + i * g.n + j)], b[static_cast<std::size_t>(t * nn + j * g.n + i)]);
    return b;
}

// A token's coefficients: a_i = sigma(a_logit_i), c_i = 2 sigma(c_logit_i).
struct Coefs {
    std::vector<float> a, c;
};
Coefs coefficients(const std::vector<float>& a_logits, const std::vector<float>& c_logits, std::int64_t t, std::int64_t n,
                   const HcFlaws& fl) {
    Coefs k{std::vector<float>(static_cast<std::size_t>(n)), std::vector<float>(static_cast<std::size_t>(n))};
    const std::vector<float>& pre = fl.swapped ? c_logits : a_logits;
    const std::vector<float>& post = fl.swapped ? a_logits : c_logits;
    for (std::int64_t i = 0; i < n; ++i) {
        k.a[static_cast<std::size_t>(i)] = sigmoid(pre[static_cast<std::size_t>(t * n + i)]);
        k.c[static_cast<std::size_t>(i)] = (fl.c_sigma ? 1.0f : 2.0f) * sigmoid(post[static_cast<std::size_t>(t * n + i)]);
    }
    return k;
}

// The pointers of one token.
template <Format F>
struct Token {
    const storage_t<F>* x;  // [n, d]
    const storage_t<F>* f;  // [d]
    storage_t<F>* h;        // [d]
    storage_t<F>* next;     // [n, d]
    const float* b;         // [n, n], FP32
};

// Channels [k0, d) of a token, one at a time.
template <Format F>
void mix_scalar(const Token<F>& tk, const Coefs& k, std::int64_t n, std::int64_t d, std::int64_t k0) {
    auto x = [&](std::int64_t i, std::int64_t e) { return Storage<F>::load(tk.x, static_cast<long>(i * d + e)); };
    for (std::int64_t e = k0; e < d; ++e) {
        float h = k.a[0] * x(0, e);
        for (std::int64_t i = 1; i < n; ++i) h = h + k.a[static_cast<std::size_t>(i)] * x(i, e);
        Storage<F>::store(tk.h, static_cast<long>(e), h);
        const float f = Storage<F>::load(tk.f, static_cast<long>(e));
        for (std::int64_t i = 0; i < n; ++i) {
            float y = tk.b[i * n] * x(0, e);
            for (std::int64_t j = 1; j < n; ++j) y = y + tk.b[i * n + j] * x(j, e);
            y = y + k.c[static_cast<std::size_t>(i)] * f;
            Storage<F>::store(tk.next, static_cast<long>(i * d + e), y);
        }
    }
}

// Channels [0, d - d % 8) of a token, eight at a time, in the same order of
// operations as mix_scalar; returns where the scalar tail starts.
template <Format F>
CONFORM_AVX2 std::int64_t mix_simd(const Token<F>& tk, const Coefs& k, std::int64_t n, std::int64_t d) {
    constexpr std::int64_t kMaxStreams = 16;
    if (n < 1 || n > kMaxStreams) return 0;  // n >= 1 is checked on entry; this keeps xs[0] defined for the compiler
    std::int64_t e = 0;
    __m256 xs[kMaxStreams];
    for (; e + 8 <= d; e += 8) {
        for (std::int64_t i = 0; i < n; ++i) xs[i] = load8_as<F>(tk.x + i * d + e);
        __m256 h = _mm256_mul_ps(_mm256_set1_ps(k.a[0]), xs[0]);
        for (std::int64_t i = 1; i < n; ++i) h = _mm256_add_ps(h, _mm256_mul_ps(_mm256_set1_ps(k.a[static_cast<std::size_t>(i)]), xs[i]));
        store8_as<F>(tk.h + e, h);
        const __m256 f = load8_as<F>(tk.f + e);
        for (std::int64_t i = 0; i < n; ++i) {
            __m256 y = _mm256_mul_ps(_mm256_set1_ps(tk.b[i * n]), xs[0]);
            for (std::int64_t j = 1; j < n; ++j) y = _mm256_add_ps(y, _mm256_mul_ps(_mm256_set1_ps(tk.b[i * n + j]), xs[j]));
            y = _mm256_add_ps(y, _mm256_mul_ps(_mm256_set1_ps(k.c[static_cast<std::size_t>(i)]), f));
            store8_as<F>(tk.next + i * d + e, y);
        }
    }
    return e;
}

template <Format F>
void run(const KernelCall& c, bool project, bool simd, const HcFlaws& fl = {}) {
    const Geometry g = read_geometry(c, project);
    simd = simd && has_avx2();
    const std::vector<float> b = mixing_matrices<F>(c, g, project, simd, fl);
    const std::vector<float> a_logits = widen<F>(c.in[2]), c_logits = widen<F>(c.in[4]);
    for (std::int64_t t = 0; t < g.tokens && g.n > 0; ++t) {
        const Token<F> tk{static_cast<const storage_t<F>*>(c.in[0].data) + t * g.n * g.d,
                          static_cast<const storage_t<F>*>(c.in[1].data) + t * g.d,
                          static_cast<storage_t<F>*>(c.out[0].data) + t * g.d,
                          static_cast<storage_t<F>*>(c.out[1].data) + t * g.n * g.d, b.data() + t * g.n * g.n};
        const Coefs k = coefficients(a_logits, c_logits, t, g.n, fl);
        mix_scalar<F>(tk, k, g.n, g.d, simd ? mix_simd<F>(tk, k, g.n, g.d) : 0);
    }
    if (project) {
        auto* out = static_cast<storage_t<F>*>(c.out[2].data);
        for (std::size_t e = 0; e < b.size(); ++e) Storage<F>::store(out, static_cast<long>(e), b[e]);
    }
}

// ---- naive baseline: every intermediate rounded to the storage format ----------

template <Format F>
void naive(const KernelCall& c, bool project) {
    const Geometry g = read_geometry(c, project);
    auto fmt = [](double v) { return decode(F, encode(F, v)); };
    auto sigma = [&](double l) { return fmt(1.0 / fmt(1.0 + fmt(std::exp(-l)))); };
    if (project) sinkhorn_naive({c.params, {c.in[3]}, {c.out[2]}});  // B in the storage format
    const TensorView &x = c.in[0], &f = c.in[1], &b = project ? c.out[2] : c.in[3];
    const std::int64_t n = g.n, d = g.d;
    for (std::int64_t t = 0; t < g.tokens; ++t)
        for (std::int64_t e = 0; e < d; ++e) {
            double h = 0;
            for (std::int64_t i = 0; i < n; ++i) h = fmt(h + fmt(sigma(c.in[2].value(t * n + i)) * x.value((t * n + i) * d + e)));
            c.out[0].set_bits(t * d + e, encode(F, h));
            for (std::int64_t i = 0; i < n; ++i) {
                double y = 0;
                for (std::int64_t j = 0; j < n; ++j) y = fmt(y + fmt(b.value((t * n + i) * n + j) * x.value((t * n + j) * d + e)));
                y = fmt(y + fmt(fmt(2 * sigma(c.in[4].value(t * n + i))) * f.value(t * d + e)));
                c.out[1].set_bits((t * n + i) * d + e, encode(F, y));
            }
        }
}

template <Format F>
void add_format(Registry& r) {
    for (const bool project : {false, true}) {
        const std::string op = project ? "mhc_residual" : "hc_residual";
        const std::string b = project ? "B by the batched AVX2 Sinkhorn (eight tokens per register); " : "";
        r.add(kernel_info(op, "simd", F, Format::fp32, Role::kernel,
                          "AVX2: " + b + "h and x_next eight channels per register, separate multiplies and adds "
                          "(scalar path without AVX2)",
                          [project](const KernelCall& c) { run<F>(c, project, true); }));
        r.add(kernel_info(op, "scalar", F, Format::fp32, Role::kernel,
                          std::string("portable scalar FP32: ") + (project ? "B by the scalar Sinkhorn; " : "") +
                              "sums of products left to right",
                          [project](const KernelCall& c) { run<F>(c, project, false); }));
        r.add(kernel_info(op, "naive", F, F, Role::baseline,
                          std::string("baseline: sigmoid, every product and partial sum") +
                              (project ? " and the naive Sinkhorn's B" : "") + " rounded to the storage format",
                          [project](const KernelCall& c) { naive<F>(c, project); }));
    }
}

}  // namespace

void hc_residual_fp32(const KernelCall& c, bool project, const HcFlaws& flaws) {
    run<Format::fp32>(c, project, false, flaws);
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_hc_residual(Registry& r) {
    cpu::add_format<Format::fp32>(r);
    cpu::add_format<Format::fp16>(r);
    cpu::add_format<Format::bf16>(r);
}

}  // namespace conform
