// CPU kernels of the int8 family around the GEMM (docs/int8.md "Kernels"):
//   cpu.simd.dequantize.<out>     AVX2: codes widened to double, times the
//                                 FP32 scale (exact: 7 + 24 bits), one
//                                 rounding into y (round-to-odd floats for fp16)
//   cpu.scalar.dequantize.<out>   the same product in scalar double
//   cpu.naive.dequantize.<out>    baseline: q and the scale in y's format,
//                                 the product rounded there (fp16: the scale
//                                 rounded to fp16 first)
//   cpu.simd.smooth_quant.<fmt>   AVX2 channel maxima (vertical over the rows
//                                 of x, horizontal over the rows of w), s_j in
//                                 double, xs = x * (1 / s_j) and ws = w * s_j
//                                 in 4-lane doubles, one rounding into the format
//   cpu.scalar.smooth_quant.<fmt> the same arithmetic in scalar double
// simd and scalar compute the same doubles, so their outputs agree bit for bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/int8_gemm.hpp"

namespace conform::cpu {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// 8 doubles (lo: elements 0-3, hi: 4-7) rounded once into F (fp16 and bf16
// through round-to-odd floats, narrow_pd).
template <Format F>
CONFORM_AVX2 inline void store8_from_double(storage_t<F>* p, __m256d lo, __m256d hi) {
    store8_as<F>(p, _mm256_set_m128(narrow_pd<F>(hi), narrow_pd<F>(lo)));
}

// ---- dequantize -----------------------------------------------------------------

struct DequantCall {
    std::int64_t rows = 0, cols = 0;
    int axis = 0;               // 0 tensor, 1 token (row), 2 channel (column)
    std::vector<double> scale;  // the group scales, exact doubles
};

DequantCall read_dequant(const KernelCall& c) {
    const TensorView &q = c.in.at(0), &s = c.in.at(1);
    if (q.rank != 2 || q.format != Format::int8 || s.rank != 1)
        throw std::invalid_argument("dequantize kernel: expects int8 q [rows, cols] and scale [groups]");
    DequantCall d{q.shape[0], q.shape[1], static_cast<int>(c.params.get("axis", 0.0)), {}};
    if (d.axis < 0 || d.axis > 2) throw std::invalid_argument("dequantize kernel: axis must be 0, 1 or 2");
    const std::int64_t groups = d.axis == 0 ? 1 : d.axis == 1 ? d.rows : d.cols;
    if (s.shape[0] != groups) throw std::invalid_argument("dequantize kernel: scale has the wrong length for the axis");
    for (std::int64_t g = 0; g < groups; ++g) d.scale.push_back(s.value(g));
    return d;
}

// The scale of element (i, j), with the mutant's broadcast mistake: a [rows]
// vector broadcast along the columns (numpy's q * s instead of q * s[:, None]),
// and vice versa.
double scale_of(const DequantCall& d, std::int64_t i, std::int64_t j, bool wrong_axis) {
    const auto n = static_cast<std::int64_t>(d.scale.size());
    const std::int64_t g = d.axis == 0 ? 0 : (d.axis == 1) != wrong_axis ? i % n : j % n;
    return d.scale[static_cast<std::size_t>(g)];
}

template <Format Out>
CONFORM_AVX2 void dequant_row_avx2(const std::int8_t* q, const DequantCall& d, std::int64_t i, storage_t<Out>* y) {
    const double* per_col = d.axis == 2 ? d.scale.data() : nullptr;
    const __m256d row_scale = _mm256_set1_pd(d.scale[static_cast<std::size_t>(d.axis == 1 ? i : 0)]);
    std::int64_t j = 0;
    for (; j + 8 <= d.cols; j += 8) {
        const __m256i codes = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + j)));
        const __m256d lo = _mm256_cvtepi32_pd(_mm256_castsi256_si128(codes));
        const __m256d hi = _mm256_cvtepi32_pd(_mm256_extracti128_si256(codes, 1));
        const __m256d s_lo = per_col ? _mm256_loadu_pd(per_col + j) : row_scale;
        const __m256d s_hi = per_col ? _mm256_loadu_pd(per_col + j + 4) : row_scale;
        store8_from_double<Out>(y + j, _mm256_mul_pd(lo, s_lo), _mm256_mul_pd(hi, s_hi));  // exact products
    }
    for (; j < d.cols; ++j) store_d<Out>(y, j, q[j] * scale_of(d, i, j, false));
}

template <Format Out>
void dequantize_simd(const KernelCall& c) {
    if (!has_avx2()) return dequantize_scalar(c);
    const DequantCall d = read_dequant(c);
    for (std::int64_t i = 0; i < d.rows; ++i)
        dequant_row_avx2<Out>(c.in[0].row<const std::int8_t>(i), d, i, c.out[0].row<storage_t<Out>>(i));
}

// Naive: the scale rounded into y's format, the product rounded there.
void dequantize_naive(const KernelCall& c) {
    const DequantCall d = read_dequant(c);
    const Format f = c.out[0].format;
    for (std::int64_t i = 0; i < d.rows; ++i)
        for (std::int64_t j = 0; j < d.cols; ++j) {
            const double s = decode(f, encode(f, scale_of(d, i, j, false)));
            c.out[0].set_bits(i * d.cols + j, encode(f, c.in[0].value(i * d.cols + j) * s));
        }
}

// ---- smooth_quant --------------------------------------------------------------

// s_j = exp(alpha ln ax - (1 - alpha) ln aw) in double (docs/int8.md: the
// bound assumes log and exp within 2 ulps); 1 for a zero channel, NaN for a
// non-finite one.  `inverted`: the mutant's reciprocal.
double smoothing_factor(double ax, double aw, double alpha, bool inverted) {
    if (std::isnan(ax) || std::isnan(aw)) return kNaN;
    if (ax == 0 || aw == 0) return 1;
    const double t = alpha * std::log(ax) - (1 - alpha) * std::log(aw);
    return std::exp(inverted ? -t : t);
}

struct SmoothCall {
    std::int64_t t = 0, c = 0, n = 0;
    double alpha = 0.5;
};

SmoothCall read_smooth(const KernelCall& k) {
    const TensorView &x = k.in.at(0), &w = k.in.at(1);
    if (x.rank != 2 || w.rank != 2 || w.shape[0] != x.shape[1])
        throw std::invalid_argument("smooth_quant kernel: expects x [T, C] and w [C, N]");
    SmoothCall s{x.shape[0], x.shape[1], w.shape[1], k.params.get("alpha", 0.5)};
    if (!(s.alpha >= 0 && s.alpha <= 1)) throw std::invalid_argument("smooth_quant kernel: alpha must be in [0, 1]");
    return s;
}

// max |v| with a NaN for any non-finite element (scalar).
void amax_update(double& a, double v) { a = std::isfinite(v) && !std::isnan(a) ? std::max(a, std::fabs(v)) : kNaN; }

// Column maxima of x and row maxima of w, scalar.
void channel_amax_scalar(const KernelCall& k, const SmoothCall& s, std::vector<double>& ax, std::vector<double>& aw) {
    ax.assign(static_cast<std::size_t>(s.c), 0.0);
    aw.assign(static_cast<std::size_t>(s.c), 0.0);
    for (std::int64_t i = 0; i < s.t * s.c; ++i) amax_update(ax[static_cast<std::size_t>(i % s.c)], k.in[0].value(i));
    for (std::int64_t i = 0; i < s.c * s.n; ++i) amax_update(aw[static_cast<std::size_t>(i / s.n)], k.in[1].value(i));
}

// 8 lanes of |v| into the running maxima; `bad` collects non-finite lanes.
CONFORM_AVX2 inline void amax8(__m256 v, __m256& amax, __m256& bad) {
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, _mm256_set1_ps(std::numeric_limits<float>::infinity()), _CMP_NLT_UQ));
    amax = _mm256_max_ps(amax, a);
}

// Column maxima of x [T, C]: eight columns per register, vertically over the rows.
template <Format F>
CONFORM_AVX2 void column_amax_avx2(const TensorView& x, const SmoothCall& s, std::vector<double>& ax) {
    ax.assign(static_cast<std::size_t>(s.c), 0.0);
    const std::int64_t c8 = s.c / 8 * 8;
    alignas(32) float lanes[8];
    for (std::int64_t j0 = 0; j0 < c8; j0 += 8) {
        __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (std::int64_t i = 0; i < s.t; ++i) amax8(load8_as<F>(x.row<const storage_t<F>>(i) + j0), amax, bad);
        _mm256_store_ps(lanes, amax);
        const int nonfinite = _mm256_movemask_ps(bad);
        for (int l = 0; l < 8; ++l) ax[static_cast<std::size_t>(j0 + l)] = (nonfinite >> l) & 1 ? kNaN : lanes[l];
    }
    for (std::int64_t i = 0; i < s.t; ++i)
        for (std::int64_t j = c8; j < s.c; ++j) amax_update(ax[static_cast<std::size_t>(j)], x.value(i * s.c + j));
}

// Row maxima of w [C, N]: each row eight at a time, then across the lanes.
template <Format F>
CONFORM_AVX2 void row_amax_avx2(const TensorView& w, const SmoothCall& s, std::vector<double>& aw) {
    aw.assign(static_cast<std::size_t>(s.c), 0.0);
    const std::int64_t n8 = s.n / 8 * 8;
    alignas(32) float lanes[8];
    for (std::int64_t j = 0; j < s.c; ++j) {
        __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        const storage_t<F>* row = w.row<const storage_t<F>>(j);
        for (std::int64_t p = 0; p < n8; p += 8) amax8(load8_as<F>(row + p), amax, bad);
        _mm256_store_ps(lanes, amax);
        double a = _mm256_movemask_ps(bad) ? kNaN : *std::max_element(lanes, lanes + 8);
        for (std::int64_t p = n8; p < s.n; ++p) amax_update(a, w.value(j * s.n + p));
        aw[static_cast<std::size_t>(j)] = a;
    }
}

// s, and 1 / s, per channel from the maxima; s stored in FP32.
void smoothing_factors(const KernelCall& k, const SmoothCall& s, const std::vector<double>& ax,
                       const std::vector<double>& aw, bool inverted, std::vector<double>& sd, std::vector<double>& rd) {
    sd.resize(static_cast<std::size_t>(s.c));
    rd.resize(static_cast<std::size_t>(s.c));
    for (std::int64_t j = 0; j < s.c; ++j) {
        const auto u = static_cast<std::size_t>(j);
        sd[u] = smoothing_factor(ax[u], aw[u], s.alpha, inverted);
        rd[u] = 1 / sd[u];
        k.out.at(2).set_bits(j, encode(Format::fp32, sd[u]));
    }
}

// out[0..8) = in[0..8) times the factors (lo: elements 0-3, hi: 4-7) in double, rounded once.
template <Format F>
CONFORM_AVX2 inline void scale8(const storage_t<F>* in, storage_t<F>* out, __m256d f_lo, __m256d f_hi) {
    const __m256 v = load8_as<F>(in);
    store8_from_double<F>(out, _mm256_mul_pd(lo_pd(v), f_lo), _mm256_mul_pd(hi_pd(v), f_hi));
}

template <Format F>
CONFORM_AVX2 void smooth_rows_avx2(const KernelCall& k, const SmoothCall& s, const std::vector<double>& sd,
                                   const std::vector<double>& rd) {
    const std::int64_t c8 = s.c / 8 * 8, n8 = s.n / 8 * 8;
    for (std::int64_t i = 0; i < s.t; ++i) {  // xs = x * (1 / s_j)
        const storage_t<F>* x = k.in[0].row<const storage_t<F>>(i);
        storage_t<F>* xs = k.out[0].row<storage_t<F>>(i);
        std::int64_t j = 0;
        for (; j < c8; j += 8) scale8<F>(x + j, xs + j, _mm256_loadu_pd(&rd[static_cast<std::size_t>(j)]), _mm256_loadu_pd(&rd[static_cast<std::size_t>(j + 4)]));
        for (; j < s.c; ++j) store_d<F>(xs, j, load_d<F>(x, j) * rd[static_cast<std::size_t>(j)]);
    }
    for (std::int64_t j = 0; j < s.c; ++j) {  // ws = s_j * w
        const storage_t<F>* w = k.in[1].row<const storage_t<F>>(j);
        storage_t<F>* ws = k.out[1].row<storage_t<F>>(j);
        const __m256d f = _mm256_set1_pd(sd[static_cast<std::size_t>(j)]);
        std::int64_t p = 0;
        for (; p < n8; p += 8) scale8<F>(w + p, ws + p, f, f);
        for (; p < s.n; ++p) store_d<F>(ws, p, load_d<F>(w, p) * sd[static_cast<std::size_t>(j)]);
    }
}

template <Format F>
void smooth_quant_simd(const KernelCall& k) {
    if (!has_avx2()) return smooth_quant_scalar(k);
    const SmoothCall s = read_smooth(k);
    std::vector<double> ax, aw, sd, rd;
    column_amax_avx2<F>(k.in[0], s, ax);
    row_amax_avx2<F>(k.in[1], s, aw);
    smoothing_factors(k, s, ax, aw, false, sd, rd);
    smooth_rows_avx2<F>(k, s, sd, rd);
}

// ---- registration ---------------------------------------------------------------

// The simd and scalar kernels of `op` in format f, both computing in double.
std::vector<KernelInfo> simd_and_scalar(const std::string& op, Format f, std::string simd_what, KernelFn simd,
                                        std::string scalar_what, KernelFn scalar) {
    std::vector<KernelInfo> v;
    v.push_back(kernel_info(op, "simd", f, Format::fp64, Role::kernel, std::move(simd_what), std::move(simd)));
    v.push_back(kernel_info(op, "scalar", f, Format::fp64, Role::kernel, std::move(scalar_what), std::move(scalar)));
    return v;
}

template <Format Out>
void add_dequantize(Registry& r) {
    auto ks = simd_and_scalar("dequantize", Out,
                              "AVX2: codes widened to double times the FP32 scale (exact), one rounding into y (fp16 "
                              "through round-to-odd floats); scalar path without AVX2",
                              dequantize_simd<Out>, "portable: double(q) * scale (exact), one correctly rounded store",
                              [](const KernelCall& c) { dequantize_scalar(c); });
    ks.push_back(kernel_info("dequantize", "naive", Out, Out, Role::baseline,
                             "baseline: the scale rounded into y's format and the product rounded there", dequantize_naive));
    for (KernelInfo& k : ks) {
        k.in = Format::int8;
        r.add(std::move(k));
    }
}

template <Format F>
void add_smooth_quant(Registry& r) {
    auto ks = simd_and_scalar("smooth_quant", F,
                              "AVX2 channel maxima, s_j = exp(alpha ln ax - (1 - alpha) ln aw) in double, xs = x * (1 "
                              "/ s_j) and ws = w * s_j in 4-lane doubles, one rounding into the format",
                              smooth_quant_simd<F>, "portable: the same double arithmetic, one correctly rounded store",
                              [](const KernelCall& c) { smooth_quant_scalar(c); });
    for (KernelInfo& k : ks) {
        k.out_formats = {F, F, Format::fp32};
        r.add(std::move(k));
    }
}

}  // namespace

void dequantize_scalar(const KernelCall& c, bool wrong_axis) {
    const DequantCall d = read_dequant(c);
    const Format f = c.out[0].format;
    for (std::int64_t i = 0; i < d.rows; ++i)
        for (std::int64_t j = 0; j < d.cols; ++j)
            c.out[0].set_bits(i * d.cols + j, encode(f, c.in[0].value(i * d.cols + j) * scale_of(d, i, j, wrong_axis)));
}

void smooth_quant_scalar(const KernelCall& k, bool inverted) {
    const SmoothCall s = read_smooth(k);
    std::vector<double> ax, aw, sd, rd;
    channel_amax_scalar(k, s, ax, aw);
    smoothing_factors(k, s, ax, aw, inverted, sd, rd);
    const Format f = k.out[0].format;
    for (std::int64_t i = 0; i < s.t * s.c; ++i)
        k.out[0].set_bits(i, encode(f, k.in[0].value(i) * rd[static_cast<std::size_t>(i % s.c)]));
    for (std::int64_t i = 0; i < s.c * s.n; ++i)
        k.out[1].set_bits(i, encode(f, k.in[1].value(i) * sd[static_cast<std::size_t>(i / s.n)]));
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_int8_quant(Registry& r) {
    cpu::add_dequantize<Format::fp32>(r);
    cpu::add_dequantize<Format::fp16>(r);
    cpu::add_dequantize<Format::bf16>(r);
    cpu::add_smooth_quant<Format::fp32>(r);
    cpu::add_smooth_quant<Format::fp16>(r);
    cpu::add_smooth_quant<Format::bf16>(r);
}

}  // namespace conform
