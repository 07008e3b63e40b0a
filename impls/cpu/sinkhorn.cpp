// CPU Sinkhorn–Knopp kernels (docs/sinkhorn.md, "Kernels"), batched over the
// many small matrices mHC projects (one per token and layer, n = n_hc = 4):
//   cpu.simd.sinkhorn.<fmt>    AVX2, eight matrices at a time, one per lane
//                              (structure of arrays: entry (i, j) of eight
//                              matrices in one register, so every row and
//                              column sum is a chain of vertical adds; n = 4
//                              is compiled with n known, other n run the same
//                              code over a buffer); scalar path without AVX2
//   cpu.scalar.sinkhorn.<fmt>  portable, one matrix at a time (sinkhorn_matrix)
//   cpu.naive.sinkhorn.<fmt>   baseline: every intermediate rounded to the
//                              storage format
// simd and scalar add in the same order and divide the same way, so they
// differ only by the exp (vf::exp_neg vs expf, both within 2 ulps: the error
// bound's e_exp).  Division rather than a reciprocal and a multiply: one
// rounding, and no overflow of 1/s for a line sum below 2^-128.
#include "impls/cpu/sinkhorn.hpp"

#include <cmath>
#include <cstdlib>
#include <new>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/simd_math.hpp"
#include "numerics/sinkhorn_domain.hpp"

namespace conform::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- call geometry ------------------------------------------------------------

struct Batch {
    std::int64_t count = 0, n = 0;
    int iters = 20;
    float eps = 0;  // the guard, rounded to FP32 once
};

Batch read_batch(const KernelCall& c) {
    if (c.in.size() != 1 || c.out.size() != 1) throw std::invalid_argument("sinkhorn kernel: expects logits -> b");
    const TensorView &l = c.in[0], &b = c.out[0];
    if (l.rank != 2 && l.rank != 3) throw std::invalid_argument("sinkhorn kernel: logits must be [n, n] or [batch, n, n]");
    Batch g;
    g.n = l.shape[l.rank - 1];
    if (l.shape[l.rank - 2] != g.n) throw std::invalid_argument("sinkhorn kernel: logits matrices must be square");
    if (b.numel() != l.numel()) throw std::invalid_argument("sinkhorn kernel: b must have the shape of logits");
    for (const TensorView* t : {&l, &b})
        for (int a = t->rank - 1, stride = 1; a >= 0; stride *= static_cast<int>(t->shape[a]), --a)
            if (t->shape[a] > 1 && t->strides[a] != stride) throw std::invalid_argument("sinkhorn kernel: tensors must be packed");
    g.count = g.n ? l.numel() / (g.n * g.n) : 0;
    const SinkhornParams p = sinkhorn_params(c.params, "sinkhorn kernel");
    g.iters = p.iters, g.eps = p.eps;
    return g;
}

// Matrix k of a packed tensor: elements [k n^2, (k + 1) n^2).
template <Format F>
const storage_t<F>* matrix_in(const KernelCall& c, const Batch& g, std::int64_t k) {
    return static_cast<const storage_t<F>*>(c.in[0].data) + k * g.n * g.n;
}
template <Format F>
storage_t<F>* matrix_out(const KernelCall& c, const Batch& g, std::int64_t k) {
    return static_cast<storage_t<F>*>(c.out[0].data) + k * g.n * g.n;
}

// ---- scalar ---------------------------------------------------------------------

float round_to_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

bool poisoned(const float* m, std::int64_t nn) {
    for (std::int64_t e = 0; e < nn; ++e)
        if (std::isnan(m[e]) || m[e] == kInf) return true;
    return false;
}

// Divides one line by its sum: the row at `first` for step 1, the column at
// `first` for step n.
void normalize_line(float* m, std::int64_t n, std::int64_t first, std::int64_t step, const SinkhornFlaws& f, float eps) {
    float s = m[first];
    for (std::int64_t k = 1; k < n; ++k) s += m[first + k * step];
    if (f.bf16_sums) s = round_to_bf16(s);
    s += eps;
    if (s == 0) return;  // a zero line stays zero (never 0/0)
    for (std::int64_t k = 0; k < n; ++k) m[first + k * step] = m[first + k * step] / s + f.eps_after;
}

// ---- the wide domain: log-domain iteration (docs/sinkhorn.md, "The wide domain") ----

// log sum_k e^(v_k) of n floats at stride `step`, max-shifted, sums left to
// right; -inf when every entry is -inf.
float log_sum_exp(const float* v, std::int64_t n, std::int64_t step) {
    float m = -kInf;
    for (std::int64_t k = 0; k < n; ++k) m = std::fmax(m, v[k * step]);
    if (m == -kInf) return m;
    float s = 0;
    for (std::int64_t k = 0; k < n; ++k) s += std::exp(v[k * step] - m);
    return m + std::log(s);
}

// The potential of a line: -LSE, or 0 for a line of structural zeros (its
// entries stay 0, as "a zero line is left unchanged").
float potential(float lse) { return lse == -kInf ? 0.0f : -lse; }

// The same iterates as sinkhorn_matrix in potentials, on the row-shifted
// logits L' = fl(L - row max): f_i = -LSE_j(L'_ij + g_j), g_j = -LSE_i(L'_ij +
// f_i), B_ij = exp((L'_ij + f_i) + g_j).  Nothing underflows but the final
// exp, so no line is lost however wide the matrix.  Unguarded (eps = 0) only.
void sinkhorn_log_matrix(float* m, std::int64_t n, int iters) {
    for (std::int64_t i = 0; i < n; ++i) {
        float mx = -kInf;
        for (std::int64_t j = 0; j < n; ++j) mx = std::fmax(mx, m[i * n + j]);
        if (mx != -kInf)
            for (std::int64_t j = 0; j < n; ++j)
                m[i * n + j] = sinkhorn_below_range(m[i * n + j], mx) ? -kInf : m[i * n + j] - mx;
    }
    std::vector<float> f(static_cast<std::size_t>(n), 0.0f), g(f), v(f);
    for (int t = 0; t < iters; ++t) {
        for (std::int64_t i = 0; i < n; ++i) {
            for (std::int64_t j = 0; j < n; ++j) v[static_cast<std::size_t>(j)] = m[i * n + j] + g[static_cast<std::size_t>(j)];
            f[static_cast<std::size_t>(i)] = potential(log_sum_exp(v.data(), n, 1));
        }
        for (std::int64_t j = 0; j < n; ++j) {
            for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = m[i * n + j] + f[static_cast<std::size_t>(i)];
            g[static_cast<std::size_t>(j)] = potential(log_sum_exp(v.data(), n, 1));
        }
    }
    for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j)
            m[i * n + j] = std::exp((m[i * n + j] + f[static_cast<std::size_t>(i)]) + g[static_cast<std::size_t>(j)]);
}

bool wide(const float* m, std::int64_t n) {
    return sinkhorn_wide(n, [&](std::int64_t i, std::int64_t j) { return static_cast<double>(m[i * n + j]); });
}

template <Format F>
void scalar_kernel(const KernelCall& c) {
    const Batch g = read_batch(c);
    std::vector<float> m(static_cast<std::size_t>(g.n * g.n));
    for (std::int64_t k = 0; k < g.count; ++k) {
        const storage_t<F>* in = matrix_in<F>(c, g, k);
        for (std::size_t e = 0; e < m.size(); ++e) m[e] = Storage<F>::load(in, static_cast<long>(e));
        sinkhorn_matrix(m.data(), g.n, g.iters, {}, g.eps);
        storage_t<F>* out = matrix_out<F>(c, g, k);
        for (std::size_t e = 0; e < m.size(); ++e) Storage<F>::store(out, static_cast<long>(e), m[e]);
    }
}

// ---- AVX2: eight matrices, one per lane ------------------------------------------

constexpr int kLanes = 8;

// n*n registers of eight lanes, 32-byte aligned (std::vector does not align
// vector types here: their alignment attribute is dropped as a template
// argument outside the AVX2 target).
class LaneBuffer {
public:
    explicit LaneBuffer(std::int64_t regs)
        : p_(static_cast<float*>(std::aligned_alloc(32, static_cast<std::size_t>(std::max<std::int64_t>(regs, 1)) * 32))) {
        if (!p_) throw std::bad_alloc();
    }
    ~LaneBuffer() { std::free(p_); }
    LaneBuffer(const LaneBuffer&) = delete;
    LaneBuffer& operator=(const LaneBuffer&) = delete;
    __m256* regs() const { return reinterpret_cast<__m256*>(p_); }
    float* lanes(std::int64_t reg) const { return p_ + reg * kLanes; }

private:
    float* p_;
};

// The vector normalize_line: row at `first` (step 1) or column (step n) of
// eight matrices, divided by sum + eps; a zero divisor becomes 1 so that 0 / 1
// keeps a zero line.
CONFORM_AVX2 inline void normalize8(__m256* m, std::int64_t n, std::int64_t first, std::int64_t step, __m256 eps) {
    __m256 s = m[first];
    for (std::int64_t k = 1; k < n; ++k) s = _mm256_add_ps(s, m[first + k * step]);
    s = _mm256_add_ps(s, eps);
    s = _mm256_blendv_ps(s, _mm256_set1_ps(1.0f), _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_EQ_OQ));
    for (std::int64_t k = 0; k < n; ++k) m[first + k * step] = _mm256_div_ps(m[first + k * step], s);
}

// m: n*n registers, entry (i, j) of the eight matrices in m[i n + j].  kN > 0
// fixes n at compile time (the n = 4 path keeps the matrices in registers).
template <int kN>
CONFORM_AVX2 void sinkhorn8(__m256* m, std::int64_t n_rt, int iters, float eps_f) {
    const __m256 eps = _mm256_set1_ps(eps_f);
    const std::int64_t n = kN > 0 ? kN : n_rt;
    const __m256 inf = _mm256_set1_ps(kInf), zero = _mm256_setzero_ps();
    __m256 poison = zero;
    for (std::int64_t e = 0; e < n * n; ++e)
        poison = _mm256_or_ps(poison, _mm256_or_ps(_mm256_cmp_ps(m[e], m[e], _CMP_UNORD_Q), _mm256_cmp_ps(m[e], inf, _CMP_EQ_OQ)));
    for (std::int64_t i = 0; i < n; ++i) {
        __m256 mx = m[i * n];
        for (std::int64_t j = 1; j < n; ++j) mx = _mm256_max_ps(mx, m[i * n + j]);
        const __m256 dead = _mm256_cmp_ps(mx, _mm256_sub_ps(zero, inf), _CMP_EQ_OQ);  // all -inf: zero row
        for (std::int64_t j = 0; j < n; ++j) m[i * n + j] = _mm256_andnot_ps(dead, vf::exp_neg(_mm256_sub_ps(m[i * n + j], mx)));
    }
    for (int t = 0; t < iters; ++t) {
        for (std::int64_t i = 0; i < n; ++i) normalize8(m, n, i * n, 1, eps);
        for (std::int64_t j = 0; j < n; ++j) normalize8(m, n, j, n, eps);
    }
    const __m256 nan = _mm256_set1_ps(kNaN);
    for (std::int64_t e = 0; e < n * n; ++e) m[e] = _mm256_blendv_ps(m[e], nan, poison);
}

// One element in and out of a lane: F16C for fp16 (the portable conversion
// would dominate the run time), the exact widening / RNE narrowing otherwise.
template <Format F>
CONFORM_AVX2 inline float load_lane(const storage_t<F>* p, std::int64_t e) {
    if constexpr (F == Format::fp16) return _cvtsh_ss(p[e]);
    else return Storage<F>::load(p, static_cast<long>(e));
}
template <Format F>
CONFORM_AVX2 inline void store_lane(storage_t<F>* p, std::int64_t e, float v) {
    if constexpr (F == Format::fp16) p[e] = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
    else Storage<F>::store(p, static_cast<long>(e), v);
}

// Matrices [k0, k0 + 8) through the lanes; lanes past the batch get zero
// logits (a uniform matrix) and are not stored.
template <Format F, int kN>
CONFORM_AVX2 void simd_group(const KernelCall& c, const Batch& g, std::int64_t k0, const LaneBuffer& buf) {
    const std::int64_t nn = g.n * g.n, lanes = std::min<std::int64_t>(kLanes, g.count - k0);
    for (std::int64_t e = 0; e < nn; ++e)
        for (std::int64_t l = 0; l < kLanes; ++l)
            buf.lanes(e)[l] = l < lanes ? load_lane<F>(matrix_in<F>(c, g, k0 + l), e) : 0.0f;
    if constexpr (kN > 0) {
        __m256 m[kN * kN];  // a local array the compiler can keep in registers
        for (int e = 0; e < kN * kN; ++e) m[e] = buf.regs()[e];
        sinkhorn8<kN>(m, kN, g.iters, g.eps);
        for (int e = 0; e < kN * kN; ++e) buf.regs()[e] = m[e];
    } else {
        sinkhorn8<0>(buf.regs(), g.n, g.iters, g.eps);
    }
    for (std::int64_t e = 0; e < nn; ++e)
        for (std::int64_t l = 0; l < lanes; ++l)
            store_lane<F>(matrix_out<F>(c, g, k0 + l), e, buf.lanes(e)[l]);
}

// The wide matrices of a batch again, by the log-domain path (rare: the lanes
// stay in the exp domain, and these are recomputed one by one).
template <Format F>
void redo_wide(const KernelCall& c, const Batch& g) {
    std::vector<float> m(static_cast<std::size_t>(g.n * g.n));
    for (std::int64_t k = 0; k < g.count; ++k) {
        const storage_t<F>* in = matrix_in<F>(c, g, k);
        for (std::size_t e = 0; e < m.size(); ++e) m[e] = Storage<F>::load(in, static_cast<long>(e));
        if (!wide(m.data(), g.n)) continue;
        sinkhorn_log_matrix(m.data(), g.n, g.iters);
        storage_t<F>* out = matrix_out<F>(c, g, k);
        for (std::size_t e = 0; e < m.size(); ++e) Storage<F>::store(out, static_cast<long>(e), m[e]);
    }
}

template <Format F>
void simd_kernel(const KernelCall& c) {
    if (!has_avx2()) return scalar_kernel<F>(c);
    const Batch g = read_batch(c);
    const LaneBuffer buf(g.n * g.n);
    for (std::int64_t k0 = 0; k0 < g.count; k0 += kLanes) {
        if (g.n == 4) simd_group<F, 4>(c, g, k0, buf);
        else simd_group<F, 0>(c, g, k0, buf);
    }
    if (g.eps == 0) redo_wide<F>(c, g);
}

// ---- naive baseline: every intermediate rounded to the storage format --------------

template <Format F>
void naive_kernel(const KernelCall& c) {
    const Batch g = read_batch(c);
    auto fmt = [](double v) { return decode(F, encode(F, v)); };
    const std::int64_t n = g.n;
    std::vector<double> m(static_cast<std::size_t>(n * n));
    for (std::int64_t k = 0; k < g.count; ++k) {
        const std::int64_t base = k * n * n;
        bool bad = false;
        for (std::int64_t e = 0; e < n * n; ++e) {
            m[static_cast<std::size_t>(e)] = c.in[0].value(base + e);
            bad = bad || std::isnan(m[static_cast<std::size_t>(e)]) || m[static_cast<std::size_t>(e)] == kInf;
        }
        for (std::int64_t i = 0; i < n && !bad; ++i) {
            double mx = -kInf;
            for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, m[static_cast<std::size_t>(i * n + j)]);
            for (std::int64_t j = 0; j < n; ++j) {
                double& v = m[static_cast<std::size_t>(i * n + j)];
                v = mx == -kInf ? 0.0 : fmt(std::exp(fmt(v - mx)));
            }
        }
        for (int t = 0; t < g.iters && !bad; ++t)
            for (std::int64_t step : {std::int64_t{1}, n})  // rows, then columns
                for (std::int64_t line = 0; line < n; ++line) {
                    const std::int64_t first = step == 1 ? line * n : line, stride = step == 1 ? 1 : n;
                    double s = 0;
                    for (std::int64_t q = 0; q < n; ++q) s = fmt(s + m[static_cast<std::size_t>(first + q * stride)]);
                    s = fmt(s + fmt(g.eps));
                    if (s == 0) continue;
                    for (std::int64_t q = 0; q < n; ++q) {
                        double& v = m[static_cast<std::size_t>(first + q * stride)];
                        v = fmt(v / s);
                    }
                }
        for (std::int64_t e = 0; e < n * n; ++e)
            c.out[0].set_bits(base + e, encode(F, bad ? static_cast<double>(kNaN) : m[static_cast<std::size_t>(e)]));
    }
}

template <Format F>
void add_format(Registry& r) {
    r.add(kernel_info("sinkhorn", "simd", F, Format::fp32, Role::kernel,
                      "AVX2: eight matrices per register (one per lane), vf::exp_neg of the row-shifted logits, row "
                      "and column sums as vertical adds, division; n = 4 in registers (scalar path without AVX2)",
                      simd_kernel<F>));
    r.add(kernel_info("sinkhorn", "scalar", F, Format::fp32, Role::kernel,
                      "portable scalar FP32: expf of the row-shifted logits, sums left to right, division",
                      scalar_kernel<F>));
    r.add(kernel_info("sinkhorn", "naive", F, F, Role::baseline,
                      "baseline: exp, every partial sum and every quotient rounded to the storage format",
                      naive_kernel<F>));
}

}  // namespace

void sinkhorn_matrix(float* m, std::int64_t n, int iters, const SinkhornFlaws& f, float eps) {
    if (poisoned(m, n * n)) {
        for (std::int64_t e = 0; e < n * n; ++e) m[e] = kNaN;
        return;
    }
    if (eps == 0 && wide(m, n)) return sinkhorn_log_matrix(m, n, iters);
    for (std::int64_t i = 0; i < n; ++i) {
        float mx = -kInf;
        for (std::int64_t j = 0; j < n; ++j) mx = std::fmax(mx, m[i * n + j]);
        for (std::int64_t j = 0; j < n; ++j)
            m[i * n + j] = mx == -kInf ? 0.0f : std::exp(f.no_max_shift ? m[i * n + j] : m[i * n + j] - mx);
    }
    for (int t = 0; t < iters - f.missing_iters; ++t) {
        for (std::int64_t i = 0; i < n; ++i) normalize_line(m, n, i * n, 1, f, eps);
        if (f.rows_only) continue;
        for (std::int64_t j = 0; j < n; ++j) normalize_line(m, n, j, n, f, eps);
    }
}

void sinkhorn_batch(const float* logits, float* b, std::int64_t count, std::int64_t n, int iters, bool simd,
                    float eps) {
    const Params params({{"iters", static_cast<double>(iters)}, {"eps", static_cast<double>(eps)}});
    const std::vector<std::int64_t> shape{count, n, n};
    const KernelCall call{params, {TensorView::contiguous(const_cast<float*>(logits), Format::fp32, shape)},
                          {TensorView::contiguous(b, Format::fp32, shape)}};
    if (simd) simd_kernel<Format::fp32>(call);
    else scalar_kernel<Format::fp32>(call);
}

SinkhornParams sinkhorn_params(const Params& p, const std::string& who) {
    const double iters = p.get("iters", 20.0);
    if (!(iters >= 1) || iters != std::floor(iters) || iters > 1e6)
        throw std::invalid_argument(who + ": parameter 'iters' must be an integer in [1, 1e6]");
    const double eps = p.get("eps", 0.0);
    if (!(eps >= 0) || !std::isfinite(eps)) throw std::invalid_argument(who + ": parameter 'eps' must be finite and >= 0");
    const auto guard = static_cast<float>(eps);
    if (eps > 0 && (guard == 0 || !std::isfinite(guard)))  // guarded in the bound means guarded in FP32
        throw std::invalid_argument(who + ": parameter 'eps' must be 0 or representable in FP32");
    return {static_cast<int>(iters), guard};
}

void sinkhorn_naive(const KernelCall& c) {
    switch (c.in.at(0).format) {
        case Format::fp16: return naive_kernel<Format::fp16>(c);
        case Format::bf16: return naive_kernel<Format::bf16>(c);
        default: return naive_kernel<Format::fp32>(c);
    }
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_sinkhorn(Registry& r) {
    cpu::add_format<Format::fp32>(r);
    cpu::add_format<Format::fp16>(r);
    cpu::add_format<Format::bf16>(r);
}

}  // namespace conform
