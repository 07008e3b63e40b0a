// CPU softmax kernels over the last dimension (docs/softmax.md):
// cpu.simd (AVX2, 8-lane float, exp by vf::exp_neg), cpu.scalar (portable,
// expf) and cpu.naive (every intermediate rounded to the storage format), for
// fp32, fp16 and bf16.  Three passes with FP32 state: the row max m, the sum
// S of exp(x - m), then y = exp(x - m) * (1/S) (the exp is recomputed rather
// than stored, so a 16-bit output never holds an unrounded intermediate).
// The error budget this meets is derived in docs/softmax.md.
#include <cmath>
#include <cstring>
#include <limits>

#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/simd_math.hpp"

namespace conform::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Rows the arithmetic cannot take as they are (shared by every variant; the
// oracle's conventions in docs/softmax.md): a NaN or a +inf anywhere makes
// the row NaN (IEEE on the formula: +inf - +inf); a row of only -inf (a fully
// masked row) is all zeros.  Returns true when the row was handled.
template <Format F>
bool special_row(storage_t<F>* y, long n, float m, bool has_nan) {
    if (!has_nan && m != kInf && m != -kInf) return false;
    const float v = m == -kInf && !has_nan ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    for (long i = 0; i < n; ++i) Storage<F>::store(y, i, v);
    return true;
}

// ---- portable scalar --------------------------------------------------------

template <Format F>
void scalar_row(const storage_t<F>* x, storage_t<F>* y, long n) {
    float m = -kInf;
    bool nan = false;
    for (long i = 0; i < n; ++i) {
        const float v = Storage<F>::load(x, i);
        nan |= std::isnan(v);
        m = std::fmax(m, v);
    }
    if (special_row<F>(y, n, m, nan)) return;
    float s = 0;
    for (long i = 0; i < n; ++i) s += std::exp(Storage<F>::load(x, i) - m);
    const float r = 1.0f / s;
    for (long i = 0; i < n; ++i) Storage<F>::store(y, i, std::exp(Storage<F>::load(x, i) - m) * r);
}

// ---- AVX2 --------------------------------------------------------------------
// Full 8-element blocks in vector code; the tail goes through the same code
// on a copy padded with -inf (exp(-inf - m) = 0 adds nothing to the sum).

template <Format F>
CONFORM_AVX2 __attribute__((noinline)) __m256 load_tail(const storage_t<F>* x, long i, long n) {
    alignas(32) float buf[8];
    for (long j = 0; j < 8; ++j) buf[j] = i + j < n ? Storage<F>::load(x, i + j) : -kInf;
    return _mm256_load_ps(buf);
}

template <Format F>
CONFORM_AVX2 __attribute__((noinline)) void store_tail(storage_t<F>* y, long i, long n, __m256 v) {
    alignas(32) float buf[8];
    _mm256_store_ps(buf, v);
    for (long j = 0; i + j < n; ++j) Storage<F>::store(y, i + j, buf[j]);
}

// The full-block path stays inline in the row loops; only the tail calls out.
template <Format F>
CONFORM_AVX2 inline __m256 load_padded(const storage_t<F>* x, long i, long n) {
    return i + 8 <= n ? load8_as<F>(x + i) : load_tail<F>(x, i, n);
}

template <Format F>
CONFORM_AVX2 inline void store_padded(storage_t<F>* y, long i, long n, __m256 v) {
    if (i + 8 <= n) store8_as<F>(y + i, v);
    else store_tail<F>(y, i, n, v);
}

CONFORM_AVX2 inline float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return std::fmax(_mm_cvtss_f32(m), _mm_cvtss_f32(_mm_shuffle_ps(m, m, 1)));
}

CONFORM_AVX2 inline float hsum(__m256 v) {
    alignas(32) float b[8];
    _mm256_store_ps(b, v);
    return ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
}

template <Format F>
CONFORM_AVX2 void simd_row(const storage_t<F>* x, storage_t<F>* y, long n) {
    __m256 vmax = _mm256_set1_ps(-kInf), nan = _mm256_setzero_ps();
    for (long i = 0; i < n; i += 8) {
        const __m256 v = load_padded<F>(x, i, n);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        vmax = _mm256_max_ps(vmax, v);
    }
    const float m = hmax(vmax);
    if (special_row<F>(y, n, m, _mm256_movemask_ps(nan) != 0)) return;
    const __m256 vm = _mm256_set1_ps(m);
    __m256 s = _mm256_setzero_ps();
    for (long i = 0; i < n; i += 8) s = _mm256_add_ps(s, vf::exp_neg(_mm256_sub_ps(load_padded<F>(x, i, n), vm)));
    const __m256 r = _mm256_set1_ps(1.0f / hsum(s));
    for (long i = 0; i < n; i += 8)
        store_padded<F>(y, i, n, _mm256_mul_ps(vf::exp_neg(_mm256_sub_ps(load_padded<F>(x, i, n), vm)), r));
}

// ---- naive: every intermediate rounded to the storage format ------------------

template <Format F>
void naive_row(const storage_t<F>* x, storage_t<F>* y, long n) {
    auto r = [](double v) { return decode(F, encode(F, v)); };
    double m = -INFINITY;
    for (long i = 0; i < n; ++i) m = std::fmax(m, Storage<F>::load(x, i));
    double s = 0;
    for (long i = 0; i < n; ++i) s = r(s + r(std::exp(r(Storage<F>::load(x, i) - m))));
    for (long i = 0; i < n; ++i)
        Storage<F>::store(y, i, static_cast<float>(r(r(std::exp(r(Storage<F>::load(x, i) - m))) / s)));
}

template <Format F, void (*Row)(const storage_t<F>*, storage_t<F>*, long)>
void each_row(const KernelCall& c) {
    const TensorView &x = c.in[0], &y = c.out[0];
    for (std::int64_t r = 0; r < x.rows(); ++r) Row(x.row<const storage_t<F>>(r), y.row<storage_t<F>>(r), x.cols());
}

template <Format F>
void simd_kernel(const KernelCall& c) {
    if (has_avx2()) each_row<F, simd_row<F>>(c);
    else each_row<F, scalar_row<F>>(c);
}

template <Format F>
void add_format(Registry& reg) {
    const std::string contract = "max, sum of exp(x - max) and 1/sum in fp32, y = exp(x - max) * (1/sum), one "
                                 "rounding to the format";
    reg.add(kernel_info("softmax", "simd", F, Format::fp32, Role::kernel,
                        "AVX2 8-lane float (exp within 2 ulps), scalar path without AVX2; " + contract,
                        simd_kernel<F>));
    reg.add(kernel_info("softmax", "scalar", F, Format::fp32, Role::kernel, "portable scalar, expf; " + contract,
                        each_row<F, scalar_row<F>>));
    reg.add(kernel_info("softmax", "naive", F, F, Role::baseline,
                        "plain formula, every intermediate rounded to the storage format", each_row<F, naive_row<F>>));
}

}  // namespace
}  // namespace conform::cpu

namespace conform {

void register_cpu_softmax(Registry& r) {
    cpu::add_format<Format::fp32>(r);
    cpu::add_format<Format::fp16>(r);
    cpu::add_format<Format::bf16>(r);
}

}  // namespace conform

// ---- lse_merge: the merge of two partial attention states (split-KV) ----------
// (o_a, lse_a) and (o_b, lse_b) -> (o, lse) per row, in FP32 (docs/softmax.md,
// "lse_merge kernel"): lse = hi + log1p(exp(lo - hi)), o = e^(lse_a - lse) o_a
// + e^(lse_b - lse) o_b.  Empty states (lse = -inf) are the identity, returned
// bit for bit; two empty states give (0, -inf); a NaN or +inf lse gives NaN.
namespace conform::cpu {
namespace {

struct MergeRow {
    float lse;
    float wa, wb;    // weights of o_a and o_b (NaN: the row is NaN)
    bool copy_a, copy_b;
};

MergeRow merge_weights(float la, float lb) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    if (std::isnan(la) || std::isnan(lb) || la == kInf || lb == kInf) return {nan, nan, nan, false, false};
    if (la == -kInf && lb == -kInf) return {-kInf, 0, 0, false, false};
    if (lb == -kInf) return {la, 1, 0, true, false};
    if (la == -kInf) return {lb, 0, 1, false, true};
    const float hi = std::fmax(la, lb), lo = std::fmin(la, lb);
    const float lse = hi + std::log1p(std::exp(lo - hi));
    return {lse, std::exp(la - lse), std::exp(lb - lse), false, false};
}

template <Format F>
void lse_merge_kernel(const KernelCall& c) {
    const TensorView &oa = c.in[0], &la = c.in[1], &ob = c.in[2], &lb = c.in[3], &o = c.out[0], &lse = c.out[1];
    const std::int64_t dv = oa.cols();
    for (std::int64_t r = 0; r < oa.rows(); ++r) {
        const MergeRow m = merge_weights(static_cast<float>(la.value(r)), static_cast<float>(lb.value(r)));
        for (std::int64_t d = 0; d < dv; ++d) {
            const std::int64_t i = r * dv + d;
            if (m.copy_a || m.copy_b) {  // the other state is empty: this one, bit for bit
                o.set_bits(i, (m.copy_a ? oa : ob).bits(i));
                continue;
            }
            if (m.lse == -kInf) {  // both empty: the empty state
                o.set_bits(i, encode(F, 0.0));
                continue;
            }
            const float va = static_cast<float>(oa.value(i)), vb = static_cast<float>(ob.value(i));
            // Two roundings and one for the sum.  A weight e^(lse_x - lse) is
            // positive even where it underflows fp32, so an infinite o_x stays
            // infinite (0 * inf would make it NaN).
            const float a = std::isinf(va) ? va : m.wa * va, b = std::isinf(vb) ? vb : m.wb * vb;
            o.set_bits(i, encode(F, std::isnan(m.lse) ? m.lse : a + b));
        }
        lse.set_bits(r, encode(Format::fp32, m.lse));
    }
}

template <Format F>
void add_lse_merge(Registry& reg) {
    KernelInfo k = kernel_info("lse_merge", "scalar", F, Format::fp32, Role::kernel,
                               "portable scalar, FP32: lse = hi + log1pf(expf(lo - hi)), o = expf(lse_a - lse) o_a + "
                               "expf(lse_b - lse) o_b; empty states returned bit for bit; lse stored in fp32",
                               lse_merge_kernel<F>);
    k.out_formats = {F, Format::fp32};
    reg.add(std::move(k));
}

}  // namespace
}  // namespace conform::cpu

namespace conform {

void register_cpu_lse_merge(Registry& r) {
    cpu::add_lse_merge<Format::fp32>(r);
    cpu::add_lse_merge<Format::fp16>(r);
    cpu::add_lse_merge<Format::bf16>(r);
}

}  // namespace conform
