// CPU softmax kernels over the last dimension (docs/softmax.md):
// cpu.simd (AVX-512 16 lanes or AVX2 8 lanes, exp by vf::exp_neg's
// operations, the chunked online form below), cpu.scalar (portable, expf,
// three passes: max, sum of exp(x - m), y = exp(x - m) * (1/S)) and
// cpu.naive (every intermediate rounded to the storage format), for fp32,
// fp16 and bf16, FP32 state.  The error budget this meets is derived in
// docs/softmax.md.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/simd_lanes.hpp"
#include "impls/cpu/scratch.hpp"
#include "impls/cpu/simd_math.hpp"
#include "impls/cpu/streaming.hpp"
#include "impls/lse_merge_weights.hpp"

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

// ---- SIMD: AVX2 (F8) and AVX-512 (F16) ------------------------------------
// One pass over the row in chunks of kChunk elements (4 KiB of fp32, held in
// L1 between the chunk's two loops): the chunk's max updates the running max
// M_c; the chunk's exponentials e_i = exp(x_i - M_c) go to a float scratch
// row and their sum s_c is kept with M_c.  With m the last M_c,
//     S = sum_c s_c exp(M_c - m),   y_i = e_i * fl(exp(M_c - m) * (1/S)),
// one rescaling per chunk, never a chain of them, and none at all for the
// chunks whose M_c is m (every chunk of a row of at most kChunk elements:
// their bits are those of exp(x - m) * (1/S)).  A chunk whose M_c is below
// m - 80 (or -inf) is recomputed from x with m instead, so that no rescaling
// factor is subnormal.  The second pass writes y once (streaming stores for
// outputs beyond the caches).  Why this stays within softmax_bound:
// docs/softmax.md, "The chunked online form".
constexpr long kChunk = 1024;
constexpr float kFarBelow = 80.0f;  // e^-80 > 2^-116: the factors stay normal

template <class L>
struct RowLanes;

template <>
struct RowLanes<F8> {
    using R = __m256;
    static constexpr long W = 8;
    template <Format F>
    CONFORM_AVX2 static R load(const storage_t<F>* p) { return load8_as<F>(p); }
    template <Format F>
    CONFORM_AVX2 static R load_part(const storage_t<F>* p, long count) {  // -inf past count
        alignas(32) float buf[8];
        for (long j = 0; j < 8; ++j) buf[j] = j < count ? Storage<F>::load(p, j) : -kInf;
        return _mm256_load_ps(buf);
    }
    template <Format F>
    CONFORM_AVX2 static void store(storage_t<F>* p, R v) { store8_as<F>(p, v); }
    template <Format F>
    CONFORM_AVX2 static void store_part(storage_t<F>* p, R v, long count) {
        alignas(32) float buf[8];
        _mm256_store_ps(buf, v);
        for (long j = 0; j < count; ++j) Storage<F>::store(p, j, buf[j]);
    }
    template <Format F>
    CONFORM_AVX2 static void stream(storage_t<F>* p, R v) { stream8_as<F>(p, v); }  // p 16-byte aligned
    static constexpr std::size_t kStreamAlign = 16;
    CONFORM_AVX2 static R exp_neg(R x) { return vf::exp_neg(x); }
    CONFORM_AVX2 static R unordered(R a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
    CONFORM_AVX2 static bool any(R mask) { return _mm256_movemask_ps(mask) != 0; }
    CONFORM_AVX2 static float hmax(R v) {
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        return std::fmax(_mm_cvtss_f32(m), _mm_cvtss_f32(_mm_shuffle_ps(m, m, 1)));
    }
    CONFORM_AVX2 static float hsum(R v) {
        alignas(32) float b[8];
        _mm256_store_ps(b, v);
        return ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
    }
};

template <>
struct RowLanes<F16> {
    using R = __m512;
    static constexpr long W = 16;
    CONFORM_AVX512 static __mmask16 first(long count) { return static_cast<__mmask16>((1u << count) - 1); }
    template <Format F>
    CONFORM_AVX512 static R load(const storage_t<F>* p) {
        return load16_as<F>(p);
    }
    template <Format F>
    CONFORM_AVX512 static R load_part(const storage_t<F>* p, long count) {
        const __mmask16 k = first(count);
        if constexpr (F == Format::fp32) return _mm512_mask_loadu_ps(_mm512_set1_ps(-kInf), k, p);
        else return _mm512_mask_blend_ps(k, _mm512_set1_ps(-kInf), widen16(_mm256_maskz_loadu_epi16(k, p), F));
    }
    template <Format F>
    CONFORM_AVX512 static void store(storage_t<F>* p, R v) {
        if constexpr (F == Format::fp32) _mm512_storeu_ps(p, v);
        else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow16(v, F));
    }
    template <Format F>
    CONFORM_AVX512 static void store_part(storage_t<F>* p, R v, long count) {
        if constexpr (F == Format::fp32) _mm512_mask_storeu_ps(p, first(count), v);
        else _mm256_mask_storeu_epi16(p, first(count), narrow16(v, F));
    }
    template <Format F>
    CONFORM_AVX512 static void stream(storage_t<F>* p, R v) {  // p 64-byte (fp32) or 32-byte aligned
        if constexpr (F == Format::fp32) _mm512_stream_ps(p, v);
        else _mm256_stream_si256(reinterpret_cast<__m256i*>(p), narrow16(v, F));
    }
    static constexpr std::size_t kStreamAlign = 64;
    CONFORM_AVX512 static R exp_neg(R x) { return vf::exp_neg_l<F16, false>(x, x); }
    CONFORM_AVX512 static R unordered(R a) {
        return _mm512_castsi512_ps(_mm512_movm_epi32(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)));
    }
    CONFORM_AVX512 static bool any(R mask) { return _mm512_movepi32_mask(_mm512_castps_si512(mask)) != 0; }
    CONFORM_AVX512 static float hmax(R v) { return RowLanes<F8>::hmax(_mm256_max_ps(lo8(v), hi8(v))); }
    CONFORM_AVX512 static float hsum(R v) { return RowLanes<F8>::hsum(_mm256_add_ps(lo8(v), hi8(v))); }
};

struct Chunk {
    float max, sum;     // M_c and s_c
    float factor = 0;   // exp(M_c - m) once m is known; 0: recomputed from x
};

// Loops over blocks of W elements are written out (no lambdas): a lambda
// has no target attribute, so the vector operations inside it would not be
// inlined.  The last, partial block takes load_part / store_part.

// The chunk [c0, c1): its max into the running max m (false once a NaN is
// seen), then e = exp(x - m) into e[c0..c1) and their sum.
template <class L, Format F>
[[gnu::always_inline]] inline Chunk first_pass(const storage_t<F>* x, float* e, long c0, long c1, float& m, bool& nan) {
    using V = RowLanes<L>;
    constexpr long W = V::W;
    typename V::R vmax = L::set(-kInf), vnan = L::zero();
    long i = c0;
    for (; i + W <= c1; i += W) {
        const auto v = V::template load<F>(x + i);
        vnan = L::or_(vnan, V::unordered(v));
        vmax = L::max(vmax, v);
    }
    if (i < c1) {
        const auto v = V::template load_part<F>(x + i, c1 - i);
        vnan = L::or_(vnan, V::unordered(v));
        vmax = L::max(vmax, v);
    }
    nan = nan || V::any(vnan);
    m = std::fmax(m, V::hmax(vmax));
    if (nan || m == kInf || m == -kInf) return {m, 0};  // a special row, or nothing yet above -inf
    const auto vm = L::set(m);
    auto s = L::zero();
    for (i = c0; i + W <= c1; i += W) {
        // The next chunk, a line per block, while this one computes (from L1):
        // the hardware's stream alone falls behind between the chunk's loops.
        _mm_prefetch(reinterpret_cast<const char*>(x + i + kChunk), _MM_HINT_T0);
        const auto ei = V::exp_neg(L::sub(V::template load<F>(x + i), vm));
        V::template store<Format::fp32>(e + i, ei);
        s = L::add(s, ei);
    }
    if (i < c1) {  // the padding's -inf gives 0
        const auto ei = V::exp_neg(L::sub(V::template load_part<F>(x + i, c1 - i), vm));
        V::template store_part<Format::fp32>(e + i, ei, c1 - i);
        s = L::add(s, ei);
    }
    return {m, V::hsum(s)};
}

// x or e over [i, i + count), count <= W, as a vector.
template <class L, Format F>
[[gnu::always_inline]] inline typename L::R load_block(const storage_t<F>* p, long count) {
    using V = RowLanes<L>;
    return count == V::W ? V::template load<F>(p) : V::template load_part<F>(p, count);
}

// The sum of exp(x - m) over [c0, c1), for the chunks recomputed from x.
template <class L, Format F>
[[gnu::always_inline]] inline float plain_sum(const storage_t<F>* x, long c0, long c1, float m) {
    using V = RowLanes<L>;
    auto s = L::zero();
    const auto vm = L::set(m);
    for (long i = c0; i < c1; i += V::W) s = L::add(s, V::exp_neg(L::sub(load_block<L, F>(x + i, std::min(V::W, c1 - i)), vm)));
    return V::hsum(s);
}

// y over [c0, c1): e * g, or (recompute) exp(x - m) * g.
template <class L, Format F>
[[gnu::always_inline]] inline void second_pass(const storage_t<F>* x, const float* e, storage_t<F>* y, long c0, long c1,
                                               float m, float g, bool recompute, bool stream) {
    using V = RowLanes<L>;
    constexpr long W = V::W;
    const auto vg = L::set(g), vm = L::set(m);
    long i = c0;
    if (!recompute && stream)
        for (; i + W <= c1; i += W) V::template stream<F>(y + i, L::mul(V::template load<Format::fp32>(e + i), vg));
    if (!recompute)
        for (; i + W <= c1; i += W) V::template store<F>(y + i, L::mul(V::template load<Format::fp32>(e + i), vg));
    for (; i < c1; i += W) {
        const long count = std::min(W, c1 - i);
        auto v = recompute ? V::exp_neg(L::sub(load_block<L, F>(x + i, count), vm)) : load_block<L, Format::fp32>(e + i, count);
        v = L::mul(v, vg);
        if (count == W) V::template store<F>(y + i, v);
        else V::template store_part<F>(y + i, v, count);
    }
}

template <class L, Format F>
[[gnu::always_inline]] inline void chunked_row(const storage_t<F>* x, storage_t<F>* y, long n, bool stream) {
    thread_local std::vector<float> scratch_row;
    thread_local std::vector<Chunk> chunk_buffer;
    float* e = grown(scratch_row, n);
    const long count = (n + kChunk - 1) / kChunk;
    Chunk* chunks = grown(chunk_buffer, count);
    const auto end = [n](long c) { return std::min(n, (c + 1) * kChunk); };
    float m = -kInf;
    bool nan = false;
    for (long c = 0; c < count; ++c) chunks[c] = first_pass<L, F>(x, e, c * kChunk, end(c), m, nan);
    if (special_row<F>(y, n, m, nan)) return;
    // Each chunk's factor exp(M_c - m), or 0 for a chunk recomputed from x:
    // -inf, or far below m.  ch.max - m is exact (Sterbenz, or -inf): the very
    // argument exp gets (m - kFarBelow rounds, by up to 64 for |m| near 2^30).
    float sum = 0;
    for (long c = 0; c < count; ++c) {
        Chunk& ch = chunks[c];
        const bool far = !(ch.max - m >= -kFarBelow);
        ch.factor = far ? 0.0f : ch.max == m ? 1.0f : std::exp(ch.max - m);
        sum += far ? plain_sum<L, F>(x, c * kChunk, end(c), m) : ch.max == m ? ch.sum : ch.sum * ch.factor;
    }
    const float r = 1.0f / sum;
    for (long c = 0; c < count; ++c) {
        const float f = chunks[c].factor;
        second_pass<L, F>(x, e, y, c * kChunk, end(c), m, f == 0 || f == 1 ? r : f * r, f == 0, stream);
    }
}

// `stream`: the output row written by streaming stores (outputs beyond the
// caches, rows aligned for them).
template <Format F>
CONFORM_AVX2 void simd_row(const storage_t<F>* x, storage_t<F>* y, long n, bool stream) {
    chunked_row<F8, F>(x, y, n, stream);
}

template <Format F>
CONFORM_AVX512 void simd_row16(const storage_t<F>* x, storage_t<F>* y, long n, bool stream) {
    chunked_row<F16, F>(x, y, n, stream);
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

template <Format F, class L>
void chunked_rows(const KernelCall& c, void (*row)(const storage_t<F>*, storage_t<F>*, long, bool)) {
    const TensorView &x = c.in[0], &y = c.out[0];
    const bool stream = streaming_output(y);
    for (std::int64_t r = 0; r < x.rows(); ++r) {
        storage_t<F>* yr = y.row<storage_t<F>>(r);
        row(x.row<const storage_t<F>>(r), yr, x.cols(),
            stream && reinterpret_cast<std::uintptr_t>(yr) % RowLanes<L>::kStreamAlign == 0);
    }
    if (stream) _mm_sfence();
}

template <Format F>
void simd_kernel(const KernelCall& c) {
    if (has_avx512()) chunked_rows<F, F16>(c, simd_row16<F>);
    else if (has_avx2()) chunked_rows<F, F8>(c, simd_row<F>);
    else each_row<F, scalar_row<F>>(c);
}

template <Format F>
void add_format(Registry& reg) {
    const std::string contract = "max, sum of exp(x - max) and 1/sum in fp32, y = exp(x - max) * (1/sum), one "
                                 "rounding to the format";
    reg.add(kernel_info("softmax", "simd", F, Format::fp32, Role::kernel,
                        "AVX-512 16 / AVX2 8-lane float (exp within 2 ulps), one pass for the max and the sum by chunks "
                        "of 1024 (online form, one rescaling per chunk), scalar path without AVX2; " + contract,
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

template <Format F>
void lse_merge_kernel(const KernelCall& c) {
    const TensorView &oa = c.in[0], &la = c.in[1], &ob = c.in[2], &lb = c.in[3], &o = c.out[0], &lse = c.out[1];
    const std::int64_t dv = oa.cols();
    for (std::int64_t r = 0; r < oa.rows(); ++r) {
        const lse_merge::Row m = lse_merge::weights(static_cast<float>(la.value(r)), static_cast<float>(lb.value(r)));
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
            o.set_bits(i, encode(F, lse_merge::element(m, static_cast<float>(oa.value(i)), static_cast<float>(ob.value(i)))));
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
