// One elementwise driver for the activation and gated families: it walks the
// [rows, cols] views of N inputs (1: x; 2: gate, up) and one output, widens
// each element to double, applies a functor and rounds once into the storage
// format.  Functors (simd_math.hpp, the naive models below, the mutants)
// provide scalar(x) / scalar(g, u) and, for the AVX2 path, vec(...).
//
// NaN policy, shared by every path: any NaN input gives a NaN output, decided
// here, so the math is free to clamp NaNs away.
#pragma once
#include "impls/cpu/x86_intrinsics.hpp"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "impls/cpu/convert.hpp"
#include "impls/cpu/isa.hpp"
#include "impls/cpu/lut.hpp"
#include "impls/cpu/simd_lanes.hpp"
#include "impls/cpu/streaming.hpp"
#include "impls/registry.hpp"
#include "numerics/format.hpp"

namespace conform::cpu {

template <Format F>
using elem_t = storage_t<F>;

// ---- scalar path: exact widening, one correctly rounded narrowing ---------

template <Format F>
inline double load_d(const elem_t<F>* p, std::int64_t i) {
    if constexpr (F == Format::fp32) return p[i];
    else if constexpr (F == Format::bf16) return bf16_to_f32(p[i]);
    else return f16_to_f32_portable(p[i]);
}

template <Format F>
inline void store_d(elem_t<F>* p, std::int64_t i, double v) {
    if constexpr (F == Format::fp32) p[i] = static_cast<float>(v);  // RNE from double
    else p[i] = static_cast<std::uint16_t>(encode(F, v));           // RNE from double, no float step
}

template <int N, class Op>
inline double apply_scalar(const Op& op, const std::array<double, N>& v) {
    if constexpr (N == 1) return std::isnan(v[0]) ? v[0] : op.scalar(v[0]);
    else return std::isnan(v[0]) || std::isnan(v[1]) ? v[0] + v[1] : op.scalar(v[0], v[1]);
}

template <Format F, int N>
inline std::array<const elem_t<F>*, N> input_rows(const KernelCall& c, std::int64_t r) {
    std::array<const elem_t<F>*, N> in;
    for (int k = 0; k < N; ++k) in[k] = c.in[k].template row<const elem_t<F>>(r);
    return in;
}

template <Format F, int N, class Op>
void run_scalar(const KernelCall& c, const Op& op) {
    const TensorView& y = c.out[0];
    const std::int64_t rows = y.rows(), cols = y.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        auto in = input_rows<F, N>(c, r);
        elem_t<F>* out = y.row<elem_t<F>>(r);
        for (std::int64_t i = 0; i < cols; ++i) {
            std::array<double, N> v;
            for (int k = 0; k < N; ++k) v[k] = load_d<F>(in[k], i);
            store_d<F>(out, i, apply_scalar<N>(op, v));
        }
    }
}

// ---- AVX2 path: 8 elements per step, evaluated as two 4-lane doubles ------
// fp32 outputs: vcvtpd2ps rounds the double result once (RNE).  fp16/bf16
// outputs go double -> float -> 16 bits; the first step rounds to odd so that
// the second (RNE) gives the correctly rounded result of the double (24 >= 11
// + 2 and 24 >= 8 + 2 bits), with no double-rounding error at midpoints.

template <Format F>
CONFORM_AVX2 inline __m256 vload(const elem_t<F>* p) { return load8_as<F>(p); }

template <Format F>
CONFORM_AVX2 inline void vstore(elem_t<F>* p, __m256 v) { store8_as<F>(p, v); }

CONFORM_AVX2 inline __m256d lo_pd(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
CONFORM_AVX2 inline __m256d hi_pd(__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }

// 4 x 64-bit lane masks -> 4 x 32-bit lane masks.
CONFORM_AVX2 inline __m128i narrow_mask(__m256d m) {
    const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(m), idx));
}

// double -> float rounded to odd: the RNE result, stepped back toward zero
// when it rounded away from zero, with the last bit forced to 1 when inexact.
CONFORM_AVX2 inline __m128 cvtpd_ps_odd(__m256d v) {
    const __m128 f = _mm256_cvtpd_ps(v);
    const __m256d back = _mm256_cvtps_pd(f), sign = _mm256_set1_pd(-0.0);
    const __m256d inexact = _mm256_cmp_pd(back, v, _CMP_NEQ_OQ);
    const __m256d away = _mm256_cmp_pd(_mm256_andnot_pd(sign, back), _mm256_andnot_pd(sign, v), _CMP_GT_OQ);
    __m128i b = _mm_add_epi32(_mm_castps_si128(f), narrow_mask(away));  // mask -1: one ulp toward zero
    b = _mm_or_si128(b, _mm_and_si128(narrow_mask(inexact), _mm_set1_epi32(1)));
    return _mm_castsi128_ps(b);
}

template <Format F>
CONFORM_AVX2 inline __m128 narrow_pd(__m256d v) {
    if constexpr (F == Format::fp32) return _mm256_cvtpd_ps(v);
    else return cvtpd_ps_odd(v);
}

// Functors whose vector form leaves rare extremes to the scalar path declare
// kScalarAtExtremes (GluFn: products near the output format's overflow
// threshold, and act(g) underflowing to 0 against an infinite up,
// docs/gated.md §4).  An output that is NaN, infinite or at least the
// format's largest finite value in magnitude is recomputed by op.scalar: one
// compare per 8 outputs on ordinary data.
template <class Op>
concept ScalarAtExtremes = requires { requires Op::kScalarAtExtremes; };

// Lanes of y that are NaN, infinite or >= `limit` in magnitude (all ones).
CONFORM_AVX2 inline __m256 extreme_lanes(__m256 y, float limit = FLT_MAX) {
    const __m256 ay = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), y);
    return _mm256_cmp_ps(ay, _mm256_set1_ps(limit), _CMP_NLT_UQ);
}

// The largest finite value of the output format F, as a float: a double-path
// result at or past it may sit on F's overflow midpoint (max + 1/2 ulp),
// which ties to infinity while the true value may lie a hair below it.
template <Format F>
inline constexpr float kOutputMax = F == Format::fp16 ? 65504.0f : F == Format::bf16 ? 0x1.fep+127f : FLT_MAX;

// Whether some lane of a float-path result (fp16/bf16 outputs) reaches the
// format's largest finite value: there a product off by the path's ~2^-21
// (and its float rounding before the narrowing) may sit on the wrong side of
// the overflow midpoint, so a ScalarAtExtremes functor redoes the block on
// the double path (finish8).  NaN lanes do not count.
template <Format F>
CONFORM_AVX2 inline bool reaches_output_max(__m256 y) {
    const __m256 ay = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), y);
    return _mm256_movemask_ps(_mm256_cmp_ps(ay, _mm256_set1_ps(kOutputMax<F>), _CMP_GE_OQ)) != 0;
}
template <Format F>
CONFORM_AVX512 inline bool reaches_output_max16(__m512 y) {
    const __m512 ay = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), y);
    return _mm512_cmp_ps_mask(ay, _mm512_set1_ps(kOutputMax<F>), _CMP_GE_OQ) != 0;
}
CONFORM_AVX512 inline __mmask16 extreme_lanes16(__m512 y) {
    const __m512 ay = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), y);
    return _mm512_cmp_ps_mask(ay, _mm512_set1_ps(FLT_MAX), _CMP_NLT_UQ);
}

// The 8 lanes by the scalar path (NaN policy included), rounded as apply8 does.
template <Format F, int N, class Op>
CONFORM_AVX2 __m256 scalar8(const Op& op, const __m256 (&x)[N]) {
    alignas(32) float in[N][8];
    for (int k = 0; k < N; ++k) _mm256_store_ps(in[k], x[k]);
    alignas(32) double out[8];
    for (int i = 0; i < 8; ++i) {
        std::array<double, N> v;
        for (int k = 0; k < N; ++k) v[k] = in[k][i];
        out[i] = apply_scalar<N>(op, v);
    }
    return _mm256_set_m128(narrow_pd<F>(_mm256_load_pd(out + 4)), narrow_pd<F>(_mm256_load_pd(out)));
}

// NaN in -> NaN out: y where no input is NaN, else the first NaN input,
// quieted (x86's rule for x0 + x1).  Chosen explicitly, not as x0 + x1:
// the compiler may commute an addition, which changes the payload where
// both inputs are NaN, and then two builds of one path could differ.
inline constexpr int kQuietBit = 0x00400000;
template <int N>
CONFORM_AVX2 inline __m256 nan_policy(__m256 y, const __m256 (&x)[N]) {
    const __m256 b = x[N - 1];
    const __m256 x0_nan = _mm256_cmp_ps(x[0], x[0], _CMP_UNORD_Q);
    const __m256 first = N == 1 ? x[0] : _mm256_blendv_ps(b, x[0], x0_nan);
    const __m256 quiet = _mm256_or_ps(first, _mm256_castsi256_ps(_mm256_set1_epi32(kQuietBit)));
    return _mm256_blendv_ps(y, quiet, N == 1 ? x0_nan : _mm256_cmp_ps(x[0], b, _CMP_UNORD_Q));
}

// The same for two inputs, 16 lanes (AVX-512).
CONFORM_AVX512 inline __m512 nan_policy16(__m512 y, __m512 x0, __m512 x1) {
    const __m512 first = _mm512_mask_mov_ps(x1, _mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q), x0);
    const __m512 quiet = _mm512_or_ps(first, _mm512_castsi512_ps(_mm512_set1_epi32(kQuietBit)));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x0, x1, _CMP_UNORD_Q), quiet);
}

// The block's 8 results from the double values of its lanes 0-3 and 4-7.
template <Format F, int N, class Op>
CONFORM_AVX2 inline __m256 finish8(const Op& op, const __m256 (&x)[N], __m256d lo, __m256d hi) {
    __m256 y = _mm256_set_m128(narrow_pd<F>(hi), narrow_pd<F>(lo));
    // Only the extreme lanes take the scalar value, so that a lane's result
    // depends on its own inputs alone.  The scalar lanes get the NaN policy
    // too: the payload of a scalar product of two NaNs depends on the
    // operand order the compiler chose.
    if constexpr (ScalarAtExtremes<Op>) {
        const __m256 extreme = extreme_lanes(y, kOutputMax<F>);
        if (_mm256_movemask_ps(extreme) != 0) y = _mm256_blendv_ps(y, scalar8<F, N>(op, x), extreme);
    }
    return nan_policy<N>(y, x);
}

template <Format F, int N, class Op>
CONFORM_AVX2 inline __m256 apply8(const Op& op, const __m256 (&x)[N]) {
    __m256d lo, hi;
    if constexpr (N == 1) {
        lo = op.vec(lo_pd(x[0]));
        hi = op.vec(hi_pd(x[0]));
    } else {
        lo = op.vec(lo_pd(x[0]), lo_pd(x[1]));
        hi = op.vec(hi_pd(x[0]), hi_pd(x[1]));
    }
    return finish8<F, N>(op, x, lo, hi);
}

// The double path 8 lanes at a time (AVX-512), for functors whose vec8 is
// their vec written over the lane type (simd_lanes.hpp D4/D8: the same bits
// in every lane), so apply8_wide gives apply8's bits.
template <class Op, int N>
concept DoubleVec8 = (N == 1 && requires(const Op& op, __m512d x) { op.vec8(x); }) ||
                     (N == 2 && requires(const Op& op, __m512d x) { op.vec8(x, x); });

template <Format F, int N, class Op>
[[gnu::always_inline]] CONFORM_AVX512 inline __m256 apply8_wide(const Op& op, const __m256 (&x)[N]) {
    __m512d v;
    if constexpr (N == 1) v = op.vec8(_mm512_maskz_cvtps_pd(0xFF, x[0]));
    else v = op.vec8(_mm512_maskz_cvtps_pd(0xFF, x[0]), _mm512_maskz_cvtps_pd(0xFF, x[1]));
    return finish8<F, N>(op, x, _mm512_maskz_extractf64x4_pd(0xF, v, 0), _mm512_maskz_extractf64x4_pd(0xF, v, 1));
}

// ---- AVX2 float path for fp16/bf16 outputs: 8 lanes of float ------------
// Used where the functor offers vecf(...) (simd_math.hpp, namespace vf: ~2^-21
// relative error, enough for <= 1 ulp in fp16/bf16; fp32 keeps double).  A
// gated functor names the gate values its float form does not cover
// (float_ok(g) false in some lane: the far negative tail, where act(g) is a
// float subnormal whose absolute error an unbounded up could magnify); such
// 8-element blocks take the double path above.

template <class Op, int N>
concept FloatVec = (N == 1 && requires(const Op& op, __m256 x) { op.vecf(x); }) ||
                   (N == 2 && requires(const Op& op, __m256 x) {
                       op.vecf(x, x);  // = gate_f(g) * up_f(u)
                       op.gate_f(x);
                       op.up_f(x);
                       op.float_ok(x);
                   });

template <Format F, int N, class Op>
CONFORM_AVX2 inline __m256 apply8f(const Op& op, const __m256 (&x)[N]) {
    if constexpr (N == 1) return nan_policy<N>(op.vecf(x[0]), x);
    else return nan_policy<N>(op.vecf(x[0], x[1]), x);
}

// ---- AVX2 float-float path for fp32 outputs ------------------------------
// Functors may offer vec32(x) (unary) or vec32(g, u) (gated), an 8-lane
// float evaluation accurate to < 2^-26 before its one final rounding
// (simd_math.hpp, namespace vff; gated.cpp), for blocks where fp32_ok holds
// in every lane of x (the gate); fp32_ok is false for NaN.  Gated results
// of magnitude >= FLT_MAX or NaN (an infinite, huge or NaN up) go to the
// double path (which treats them as GluFn documents); other NaN inputs get
// the NaN policy.  Other blocks take the double path.
template <class Op, int N>
concept Fp32FloatVec = (N == 1 && requires(const Op& op, __m256 x) {
                           op.vec32(x);  // an __m256
                           { op.fp32_ok(x) } -> std::same_as<bool>;
                       }) || (N == 2 && requires(const Op& op, __m256 x) {
                           op.vec32(x, x);
                           { op.fp32_ok(x) } -> std::same_as<bool>;
                       });

// The float-float value of a block whose x[0] passed fp32_ok; `bad` collects
// the lanes of a gated result that the double path must redo.
template <int N, class Op>
CONFORM_AVX2 inline __m256 ff32_value(const Op& op, const __m256 (&x)[N], __m256& bad) {
    if constexpr (N == 1) {
        return op.vec32(x[0]);
    } else {
        const __m256 y = op.vec32(x[0], x[1]);
        bad = _mm256_or_ps(bad, extreme_lanes(y));
        return nan_policy<N>(y, x);
    }
}

// apply8 out of line, for rare blocks: it reloads the inputs, so the hot loop
// neither spills them nor gives up registers to the double path.
template <Format F, int N, class Op>
[[gnu::noinline]] CONFORM_AVX2 __m256 apply8_cold(const Op& op, const std::array<const elem_t<F>*, N>& in) {
    __m256 x[N];
    for (int k = 0; k < N; ++k) x[k] = vload<F>(in[k]);
    return apply8<F, N>(op, x);
}

// The 8 results of one block, as floats ready for vstore.
template <Format F, int N, class Op>
CONFORM_AVX2 inline __m256 value8(const Op& op, const std::array<const elem_t<F>*, N>& in) {
    __m256 x[N];
    for (int k = 0; k < N; ++k) x[k] = vload<F>(in[k]);
    if constexpr (F == Format::fp32 && Fp32FloatVec<Op, N>) {
        if (op.fp32_ok(x[0])) {
            __m256 bad = _mm256_setzero_ps();
            const __m256 y = ff32_value<N>(op, x, bad);
            if (_mm256_movemask_ps(bad) == 0) return y;
        }
        return apply8_cold<F, N>(op, in);
    }
    if constexpr (F != Format::fp32 && FloatVec<Op, N>) {
        if constexpr (N == 1) {
            return apply8f<F, N>(op, x);
        } else if (op.float_ok(x[0])) {
            const __m256 y = apply8f<F, N>(op, x);
            if (!ScalarAtExtremes<Op> || !reaches_output_max<F>(y)) return y;
        }
    }
    return apply8<F, N>(op, x);
}

template <Format F, int N, class Op>
CONFORM_AVX2 inline void block8(const Op& op, const std::array<const elem_t<F>*, N>& in, elem_t<F>* out) {
    vstore<F>(out, value8<F, N>(op, in));
}

// The first n < 8 elements at `in` through block(inputs, output), on
// zero-padded copies: a row's head or tail takes the same code path as its body.
template <Format F, int N, class Block>
CONFORM_AVX2 inline void partial_block8(const Block& block, const std::array<const elem_t<F>*, N>& in, elem_t<F>* out,
                                        std::int64_t n) {
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(elem_t<F>);
    elem_t<F> buf[N][8] = {}, res[8];
    std::array<const elem_t<F>*, N> at;
    for (int k = 0; k < N; ++k) {
        std::memcpy(buf[k], in[k], bytes);
        at[k] = buf[k];
    }
    block(at, res);
    std::memcpy(out, res, bytes);
}

// Every 8-element block of the call's rows, as block(inputs, output).
template <Format F, int N, class Block>
CONFORM_AVX2 inline void each_block8(const KernelCall& c, const Block& block) {
    const TensorView& y = c.out[0];
    const std::int64_t rows = y.rows(), cols = y.cols(), body = cols & ~std::int64_t{7};
    for (std::int64_t r = 0; r < rows; ++r) {
        auto in = input_rows<F, N>(c, r);
        elem_t<F>* out = y.row<elem_t<F>>(r);
        for (std::int64_t i = 0; i < body; i += 8) {
            std::array<const elem_t<F>*, N> at;
            for (int k = 0; k < N; ++k) at[k] = in[k] + i;
            block(at, out + i);
        }
        if (body == cols) continue;
        for (int k = 0; k < N; ++k) in[k] += body;
        partial_block8<F, N>(block, in, out + body, cols - body);
    }
}


// ---- fp32 float-float rows ----------------------------------------------
// The fp32 kernels with vec32 run their rows here.  Chunks of 256 elements
// whose every x (gate) passes fp32_ok (N(0,1) data: all of them) run a loop
// with no branch or call in it, so the polynomial constants stay in
// registers; a gated chunk with a lane for the double path is then redone,
// and other chunks go block by block through value8.  Streaming outputs peel
// a head so that the body is written with 32-byte aligned 256-bit streaming
// stores.
inline constexpr std::int64_t kFfChunk = 256;
// Inputs are prefetched this many floats (8 KiB) ahead, one prefetch per
// line: out of cache on the Intel machine the loop otherwise took about the
// sum of its arithmetic and memory times (docs/activation.md §8, "The
// 16-lane table kernels": gelu_erf 37-39 % of the streaming copy without it).
inline constexpr std::int64_t kFfPrefetch = 2048;

template <class Op>
CONFORM_AVX2 inline bool chunk_fp32_ok(const Op& op, const float* x, std::int64_t n) {
    bool ok = true;
    for (std::int64_t i = 0; i < n; i += 8) ok &= op.fp32_ok(_mm256_loadu_ps(x + i));
    return ok;
}

// Functors whose vec32 branches per block (softcap's polynomial-only blocks):
// two blocks per step measured slower there.
template <class Op>
concept OneBlockFf = requires { requires Op::kFfOneBlock; };

template <bool kStream>
CONFORM_AVX2 inline void store8_fp32(float* p, __m256 v) {
    if constexpr (kStream) _mm256_stream_ps(p, v);
    else _mm256_storeu_ps(p, v);
}

// The row pointers i elements on.
template <int N>
inline std::array<const float*, N> offset_rows(std::array<const float*, N> in, std::int64_t i) {
    for (int k = 0; k < N; ++k) in[k] += i;
    return in;
}

// n elements (a multiple of 8) from in[k] to y block by block (value8: the
// float-float value, or the double path for a block that needs it).
template <bool kStream, int N, class Op>
CONFORM_AVX2 inline void ff32_blocks(const Op& op, const std::array<const float*, N>& in, float* y, std::int64_t n) {
    for (std::int64_t i = 0; i < n; i += 8) {
        std::array<const float*, N> at;
        for (int k = 0; k < N; ++k) at[k] = in[k] + i;
        store8_fp32<kStream>(y + i, value8<Format::fp32, N>(op, at));
    }
}

// n elements (a multiple of 8) from in[k] to y.
template <bool kStream, int N, class Op>
CONFORM_AVX2 inline void ff32_span(const Op& op, const std::array<const float*, N>& in, float* y, std::int64_t n) {
    for (std::int64_t c = 0; c < n; c += kFfChunk) {
        const std::int64_t m = std::min(kFfChunk, n - c);
        bool ok = chunk_fp32_ok(op, in[0] + c, m);
        if (ok) {
            __m256 bad = _mm256_setzero_ps();
            std::int64_t i = c;
            // Two independent blocks per step: each is a long dependency
            // chain, and the out-of-order window overlaps two better (not for
            // functors that branch per block: OneBlockFf).
            if constexpr (!OneBlockFf<Op>) for (; i + 16 <= c + m; i += 16) {
                for (int k = 0; k < N; ++k)
                    prefetch_ahead(in[k] + i, kFfPrefetch);
                __m256 x0[N], x1[N];
                for (int k = 0; k < N; ++k) x0[k] = _mm256_loadu_ps(in[k] + i), x1[k] = _mm256_loadu_ps(in[k] + i + 8);
                const __m256 y0 = ff32_value<N>(op, x0, bad), y1 = ff32_value<N>(op, x1, bad);
                store8_fp32<kStream>(y + i, y0);
                store8_fp32<kStream>(y + i + 8, y1);
            }
            for (; i < c + m; i += 8) {
                if constexpr (OneBlockFf<Op>)
                    if (i % 16 == 0)
                        for (int k = 0; k < N; ++k)
                            prefetch_ahead(in[k] + i, kFfPrefetch);
                __m256 x[N];
                for (int k = 0; k < N; ++k) x[k] = _mm256_loadu_ps(in[k] + i);
                store8_fp32<kStream>(y + i, ff32_value<N>(op, x, bad));
            }
            ok = _mm256_movemask_ps(bad) == 0;
        }
        if (!ok) ff32_blocks<kStream, N>(op, offset_rows<N>(in, c), y + c, m);
    }
}

// Gated functors with a 16-lane form of vec32 (AVX-512, simd_lanes.hpp:
// the same bits as vec32 in every lane; swiglu, swiglu_clamp).  The unary
// FP32 kernels have table kernels on AVX-512 instead (run_lanes16).
template <class Op, int N>
concept Fp32FloatVec16 = N == 2 && requires(const Op& op, __m512 x) {
    op.vec32_16(x, x);
    { op.fp32_ok16(x) } -> std::same_as<bool>;
};

// ff32_value 16 lanes at a time; `bad` collects the lanes of the result
// that the double path must redo (extreme_lanes16).
template <int N, class Op>
CONFORM_AVX512 inline __m512 ff32_value16(const Op& op, const __m512 (&x)[N], __mmask16& bad) {
    const __m512 y = op.vec32_16(x[0], x[1]);
    bad |= extreme_lanes16(y);
    return nan_policy16(y, x[0], x[1]);
}

// ff32_span 16 lanes at a time (y 64-byte aligned when kStream).  Chunks
// with a lane outside fp32_ok16 or (gated) a result for the double path, and
// the last 8 elements of a span that is not a multiple of 16, go to
// ff32_span, which gives them the same values.
template <bool kStream, int N, class Op>
CONFORM_AVX512 void ff32_span16(const Op& op, const std::array<const float*, N>& in, float* y, std::int64_t n) {
    const auto put = [y](std::int64_t i, __m512 v) CONFORM_AVX512 {
        if constexpr (kStream) _mm512_stream_ps(y + i, v);
        else _mm512_storeu_ps(y + i, v);
    };
    const auto load = [&in](__m512 (&x)[N], std::int64_t i) CONFORM_AVX512 {
        for (int k = 0; k < N; ++k) x[k] = _mm512_loadu_ps(in[k] + i);
    };
    for (std::int64_t c = 0; c < n; c += kFfChunk) {
        const std::int64_t m = std::min(kFfChunk, n - c), end = c + (m & ~std::int64_t{15});
        bool ok = true;
        for (std::int64_t i = c; i < end; i += 16) ok &= op.fp32_ok16(_mm512_loadu_ps(in[0] + i));
        if (!ok) {
            ff32_span<kStream, N>(op, offset_rows<N>(in, c), y + c, m);
            continue;
        }
        __mmask16 bad = 0;
        std::int64_t i = c;
        for (; i + 32 <= end; i += 32) {  // two independent chains per step, as in ff32_span
            for (int k = 0; k < N; ++k) {
                prefetch_ahead(in[k] + i, kFfPrefetch);
                prefetch_ahead(in[k] + i + 16, kFfPrefetch);
            }
            __m512 x0[N], x1[N];
            load(x0, i);
            load(x1, i + 16);
            const __m512 y0 = ff32_value16<N>(op, x0, bad), y1 = ff32_value16<N>(op, x1, bad);
            put(i, y0);
            put(i + 16, y1);
        }
        if (i < end) {
            __m512 x[N];
            load(x, i);
            put(i, ff32_value16<N>(op, x, bad));
        }
        if (end < c + m) ff32_span<kStream, N>(op, offset_rows<N>(in, end), y + end, c + m - end);
        if (bad != 0) ff32_blocks<kStream, N>(op, offset_rows<N>(in, c), y + c, m);
    }
}

// One row's body (n a multiple of 8, y 32-byte aligned when kStream), 16
// lanes at a time where the functor and the CPU allow it.  64-byte streaming
// stores need y 64-byte aligned: if it is not, one 8-element block goes
// first through ff32_span.  The 8-element blocks thus stay where the AVX2
// path draws them, which matters: a block with a lane outside fp32_ok takes
// the double path whole, and that rounds its other lanes differently.
template <bool kStream, int N, class Op>
CONFORM_AVX2 inline void ff32_body(const Op& op, const std::array<const float*, N>& in, float* y, std::int64_t n,
                                   bool wide) {
    if constexpr (Fp32FloatVec16<Op, N>) {
        if (wide) {
            const std::int64_t lead = kStream && reinterpret_cast<std::uintptr_t>(y) % 64 != 0 ? std::min<std::int64_t>(8, n) : 0;
            if (lead > 0) ff32_span<kStream, N>(op, in, y, lead);
            return ff32_span16<kStream, N>(op, offset_rows<N>(in, lead), y + lead, n - lead);
        }
    }
    ff32_span<kStream, N>(op, in, y, n);
}

// The fp32 elements of a row at addr before its first kAlign-byte boundary
// (at most cols; none if addr is not float-aligned): a streamed row's head.
template <int kAlign>
inline std::int64_t stream_head(std::uintptr_t addr, std::int64_t cols) {
    if (addr % 4 != 0) return 0;
    return std::min<std::int64_t>(cols, static_cast<std::int64_t>((kAlign - addr % kAlign) % kAlign / 4));
}

template <int N, class Op>
CONFORM_AVX2 void run_ff32(const KernelCall& c, const Op& op) {
    const TensorView& y = c.out[0];
    const std::int64_t rows = y.rows(), cols = y.cols();
    const bool stream = streaming_output(y);
    const auto block = [&op](const std::array<const float*, N>& in, float* out) CONFORM_AVX2 {
        _mm256_storeu_ps(out, value8<Format::fp32, N>(op, in));
    };
    const bool wide = Fp32FloatVec16<Op, N> && has_avx512();
    for (std::int64_t r = 0; r < rows; ++r) {
        const auto in = input_rows<Format::fp32, N>(c, r);
        float* out = y.row<float>(r);
        const auto addr = reinterpret_cast<std::uintptr_t>(out);
        const std::int64_t head = stream ? stream_head<32>(addr, cols) : 0;
        if (head > 0) partial_block8<Format::fp32, N>(block, in, out, head);
        const std::int64_t body = (cols - head) & ~std::int64_t{7}, end = head + body;
        if (stream && (addr + 4 * head) % 32 == 0) ff32_body<true, N>(op, offset_rows<N>(in, head), out + head, body, wide);
        else ff32_body<false, N>(op, offset_rows<N>(in, head), out + head, body, wide);
        if (end < cols) partial_block8<Format::fp32, N>(block, offset_rows<N>(in, end), out + end, cols - end);
    }
    if (stream) _mm_sfence();
}

// ---- fp32 rows 16 lanes at a time, lane by lane (AVX-512) ---------------
// For functors whose fp32 float evaluation exists only in 16 lanes
// (lanes16, for the lanes of ok16; gelu_erf's table of vpermi2ps): every
// other lane takes the double path (apply8_wide) instead, so each lane's
// value depends on its own input alone, not on its neighbours or on where
// the row starts.
template <class Op, int N>
concept Fp32Lanes16 = ((N == 1 && requires(const Op& op, __m512 x) {
                                                op.lanes16(x);
                                                { op.ok16(x) } -> std::same_as<__mmask16>;
                                            }) || (N == 2 && requires(const Op& op, __m512 x) {
                                                op.lanes16(x, x);
                                                { op.ok16(x, x) } -> std::same_as<__mmask16>;
                                            }));

// A functor may switch its 16-lane form off at run time (lanes16_on: e.g.
// SituGluFn, whose tables hold for its default parameters only).
template <class Op>
bool lanes16_enabled(const Op& op) {
    if constexpr (requires { op.lanes16_on; }) return op.lanes16_on;
    else return true;
}

// The 16 lanes of x by the double path (apply8_wide, or apply8 for
// functors without vec8), out of line (rare).
template <int N, class Op>
[[gnu::noinline]] CONFORM_AVX512 __m512 double16(const Op& op, const __m512 (&x)[N]) {
    __m256 lo[N], hi[N];
    for (int k = 0; k < N; ++k) lo[k] = lo8(x[k]), hi[k] = hi8(x[k]);
    __m256 a, b;
    if constexpr (DoubleVec8<Op, N>) {
        a = apply8_wide<Format::fp32, N>(op, lo), b = apply8_wide<Format::fp32, N>(op, hi);
    } else {
        a = apply8<Format::fp32, N>(op, lo), b = apply8<Format::fp32, N>(op, hi);
    }
    return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1);
}

// Gated: results that are NaN, infinite or >= FLT_MAX in magnitude take
// the double path too (which treats them as GluFn documents).
template <int N, class Op>
CONFORM_AVX512 inline __m512 lanes16_value(const Op& op, const __m512 (&x)[N]) {
    __mmask16 ok;
    __m512 y;
    if constexpr (N == 1) {
        ok = op.ok16(x[0]);
        y = op.lanes16(x[0]);
    } else {
        y = op.lanes16(x[0], x[1]);
        ok = op.ok16(x[0], x[1]) & static_cast<__mmask16>(~extreme_lanes16(y));
    }
    if (ok == 0xFFFF) [[likely]] return y;
    return _mm512_mask_blend_ps(ok, double16<N>(op, x), y);
}

// The first n < 16 elements (masked loads and stores).
template <int N, class Op>
CONFORM_AVX512 inline void lanes16_partial(const Op& op, const std::array<const float*, N>& in, float* y, std::int64_t n) {
    const auto m = static_cast<__mmask16>((1u << n) - 1);
    __m512 x[N];
    for (int k = 0; k < N; ++k) x[k] = _mm512_maskz_loadu_ps(m, in[k]);
    _mm512_mask_storeu_ps(y, m, lanes16_value<N>(op, x));
}

template <bool kStream, int N, class Op>
CONFORM_AVX512 inline void lanes16_body(const Op& op, const std::array<const float*, N>& in, float* y, std::int64_t n) {
    for (std::int64_t i = 0; i < n; i += 16) {
        __m512 x[N];
        for (int k = 0; k < N; ++k) {
            prefetch_ahead(in[k] + i, kFfPrefetch);
            x[k] = _mm512_loadu_ps(in[k] + i);
        }
        const __m512 v = lanes16_value<N>(op, x);
        if constexpr (kStream) _mm512_stream_ps(y + i, v);
        else _mm512_storeu_ps(y + i, v);
    }
}

// Streaming outputs: the elements before the first 64-byte boundary go
// first (masked), then the body with 64-byte streaming stores.
template <int N, class Op>
CONFORM_AVX512 void run_lanes16(const KernelCall& c, const Op& op) {
    const TensorView& yv = c.out[0];
    const std::int64_t rows = yv.rows(), cols = yv.cols();
    const bool stream = streaming_output(yv);
    for (std::int64_t r = 0; r < rows; ++r) {
        const auto in = input_rows<Format::fp32, N>(c, r);
        float* out = yv.row<float>(r);
        const auto addr = reinterpret_cast<std::uintptr_t>(out);
        const std::int64_t head = stream ? stream_head<64>(addr, cols) : 0;
        if (head > 0) lanes16_partial<N>(op, in, out, head);
        const std::int64_t body = (cols - head) & ~std::int64_t{15}, end = head + body;
        if (stream && (addr + 4 * head) % 64 == 0) lanes16_body<true, N>(op, offset_rows<N>(in, head), out + head, body);
        else lanes16_body<false, N>(op, offset_rows<N>(in, head), out + head, body);
        if (end < cols) lanes16_partial<N>(op, offset_rows<N>(in, end), out + end, cols - end);
    }
    if (stream) _mm_sfence();
}

// ---- 16-bit table kernels (lut.hpp) ---------------------------------------
// Unary: out = T[x], T filled by block8 (float path + NaN policy) over every
// bit pattern.  Gated: h = G[g] * U(u) with G the float gate factor (and U a
// table when the functor sets kTabulateUp), NaN policy and the far-gate
// double fallback exactly as block8 does them.

// Cache keys: one table per (format, functor, which table).
template <Format F, class Op, int kWhich>
struct LutTag {};

template <Format F, class Op>
CONFORM_AVX2 std::vector<std::uint16_t> build_unary_table(const Params& p) {
    const Op op(p);
    // One entry past the 65536: lookup16_avx512 reads 32 bits at entry x, and
    // x = 0xffff must not read past the table (the extra half is discarded).
    std::vector<std::uint16_t> x(65536), y(65537, 0);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint16_t>(i);
    for (std::size_t i = 0; i < x.size(); i += 8) block8<F, 1>(op, {x.data() + i}, y.data() + i);
    return y;
}

// Table of one float factor of a gated functor (gate_f or up_f) over every pattern.
template <Format F, class Op, bool kUp>
CONFORM_AVX2 std::vector<float> build_factor_table(const Params& p) {
    const Op op(p);
    std::vector<float> t(65536);
    alignas(32) std::uint16_t x[8];
    for (std::size_t i = 0; i < t.size(); i += 8) {
        for (int k = 0; k < 8; ++k) x[k] = static_cast<std::uint16_t>(i + k);
        const __m256 v = vload<F>(x);
        _mm256_storeu_ps(t.data() + i, kUp ? op.up_f(v) : op.gate_f(v));
    }
    return t;
}

template <class Op>
concept TabulatedUp = requires { requires Op::kTabulateUp; };

// table[bits[k]] for k < 8.  Scalar loads assembled by inserts: measured
// ~2.5x faster than vgatherdps on Zen 3 (which costs ~24 cycles per 8).
CONFORM_AVX2 inline __m256 gather8(const float* table, const std::uint16_t* bits) {
    return _mm256_setr_ps(table[bits[0]], table[bits[1]], table[bits[2]], table[bits[3]], table[bits[4]],
                          table[bits[5]], table[bits[6]], table[bits[7]]);
}

// vstore, streaming (streaming.hpp) where `stream` and the address allow it.
template <Format F>
CONFORM_AVX2 inline void vstore_maybe_stream(elem_t<F>* p, __m256 v, bool stream) {
    if (stream && aligned16(p)) stream8_as<F>(p, v);
    else vstore<F>(p, v);
}

// out[i] = T[x[i]], 16 per step: scalar table reads (2-3 loads per cycle;
// they measured faster than 8-lane gathers on Zen 3, the fp16 table of
// typical activations spilling out of L1) into a buffer written out as one
// 256-bit store, which avoids the 4K-aliasing stalls of 16-bit stores.
template <bool kStream>
CONFORM_AVX2 inline void lookup16(const std::uint16_t* T, const std::uint16_t* x, std::uint16_t* out, std::int64_t n) {
    std::int64_t i = 0;
    if constexpr (kStream)  // streaming stores need 32-byte aligned addresses
        for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 32 != 0; ++i) out[i] = T[x[i]];
    alignas(32) std::uint16_t buf[16];
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 16; ++k) buf[k] = T[x[i + k]];
        const __m256i p = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
        if constexpr (kStream) _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), p);
        else _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), p);
    }
    for (; i < n; ++i) out[i] = T[x[i]];
}

// The same with AVX-512: 16 table reads per vpgatherdd, 32 elements (one
// 64-byte line of x) per step.  Each lane reads the 32 bits at entry x[i]
// (the table has one entry of padding) and vpmovdw keeps the low 16, entry
// x[i] itself.  On Intel cores the 16-bit stores into `buf` above cost a
// failed store-to-load forwarding per 16 elements; gathers avoid it.  One
// prefetch per line of x, kLookupPrefetch elements ahead: without it the
// gathers and the memory stream took about the sum of their times out of
// cache, not the larger (docs/activation.md §8, "The 16-bit kernels
// (tables)"; past the end it is harmless, a prefetch never faults).
inline constexpr std::int64_t kLookupPrefetch = 2048;  // 4 KiB ahead: 60-76 % of the streaming copy, none: 47-49 %
template <bool kStream>
CONFORM_AVX512 void lookup16_avx512(const std::uint16_t* T, const std::uint16_t* x, std::uint16_t* out,
                                    std::int64_t n) {
    std::int64_t i = 0;
    if constexpr (kStream)
        for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 32 != 0; ++i) out[i] = T[x[i]];
    const auto half = [T](const std::uint16_t* at) CONFORM_AVX512 {
        // Zero-masked forms with all-ones masks: the plain intrinsics' undefined
        // operands draw false GCC 12 warnings; the gather merges into a zeroed
        // register, so it does not wait on an earlier gather's destination.
        const __m256i at16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
        const __m512i idx = _mm512_maskz_cvtepu16_epi32(0xFFFF, at16);
        return _mm512_maskz_cvtepi32_epi16(0xFFFF, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), 0xFFFF, idx, T, 2));
    };
    for (; i + 32 <= n; i += 32) {
        prefetch_ahead(x + i, kLookupPrefetch);
        const __m256i lo = half(x + i), hi = half(x + i + 16);
        auto* o = reinterpret_cast<__m256i*>(out + i);
        if constexpr (kStream) _mm256_stream_si256(o, lo), _mm256_stream_si256(o + 1, hi);
        else _mm256_storeu_si256(o, lo), _mm256_storeu_si256(o + 1, hi);
    }
    for (; i < n; ++i) out[i] = T[x[i]];
}

template <bool kStream>
CONFORM_AVX2 void lookup16_best(const std::uint16_t* T, const std::uint16_t* x, std::uint16_t* out, std::int64_t n) {
    if (has_avx512()) lookup16_avx512<kStream>(T, x, out, n);
    else lookup16<kStream>(T, x, out, n);
}

// One block of the gated table kernel: h = G[g] * U(u) in float (U a table
// or the functor's up_f), the NaN policy, the double path for gates outside
// the float range; store(out, h) rounds and writes the 8 results.
template <Format F, class Op, class Store>
CONFORM_AVX2 inline void gated_lut_block8(const Op& op, const float* G, const float* U,
                                          const std::array<const elem_t<F>*, 2>& in, elem_t<F>* out,
                                          const Store& store) {
    const __m256 x[2] = {vload<F>(in[0]), vload<F>(in[1])};
    __m256 y;
    if (op.float_ok(x[0])) {
        __m256 u;
        if constexpr (TabulatedUp<Op>) u = gather8(U, in[1]);
        else u = op.up_f(x[1]);
        y = nan_policy<2>(_mm256_mul_ps(gather8(G, in[0]), u), x);
        if constexpr (ScalarAtExtremes<Op>)
            if (reaches_output_max<F>(y)) y = apply8<F, 2>(op, x);
    } else {
        y = apply8<F, 2>(op, x);
    }
    store(out, y);
}

template <Format F, class Op, class Store>
CONFORM_AVX2 inline void gated_lut_rows(const KernelCall& c, const Op& op, const float* G, const float* U,
                                        const Store& store) {
    each_block8<F, 2>(c, [&](const std::array<const elem_t<F>*, 2>& in, elem_t<F>* out) CONFORM_AVX2 {
        // The inputs kLookupPrefetch elements ahead, as lookup16_avx512 does:
        // on the Intel machine 52-57 % of the streaming copy for bf16, 62-69 %
        // for fp16, against 33-41 % and ~60 % without (the bf16 figures are in
        // docs/gated.md §8, "16-bit table kernels"; the fp16 ones are from
        // commit 68e6859).
        prefetch_ahead(in[0], kLookupPrefetch);
        prefetch_ahead(in[1], kLookupPrefetch);
        gated_lut_block8<F>(op, G, U, in, out, store);
    });
}

// The same 16 lanes at a time (AVX-512), the tables read by vgatherdps: the
// AVX2 rows above assemble each 8 table reads by inserts, which on the Intel
// machine made situ_glu (two tables) bound by the shuffle port.  Every lane
// takes the same float operations as in gated_lut_block8 (widen16, narrow16:
// the same bits as load8, narrow8), and a 16-element step whose gates are not
// all float_ok runs its two 8-element blocks through gated_lut_block8, so the
// double-path blocks are the AVX2 path's too.  False (nothing written) there.
template <Format F, class Op>
CONFORM_AVX512 inline bool gated_lut16(const Op& op, const float* G, const float* U, const std::uint16_t* g,
                                       const std::uint16_t* u, std::uint16_t* out, bool stream) {
    const __m256i gb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g));
    const __m256i ub = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u));
    const __m512 xg = widen16(gb, F), xu = widen16(ub, F);
    if (!op.float_ok(lo8(xg)) || !op.float_ok(hi8(xg))) return false;
    const auto gather = [](const float* T, __m256i bits) CONFORM_AVX512 {
        const __m512i idx = _mm512_maskz_cvtepu16_epi32(0xFFFF, bits);
        return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, idx, T, 4);
    };
    __m512 up;
    if constexpr (TabulatedUp<Op>) {
        // The functor may compute the table's entries instead (up16: the
        // same bits), which spares the second table's reads.
        if constexpr (requires { op.up16(xu); }) up = op.up16_ok(xu) ? op.up16(xu) : gather(U, ub);
        else up = gather(U, ub);
    } else {
        up = _mm512_insertf32x8(_mm512_castps256_ps512(op.up_f(lo8(xu))), op.up_f(hi8(xu)), 1);
    }
    const __m512 y = nan_policy16(_mm512_mul_ps(gather(G, gb), up), xg, xu);
    if constexpr (ScalarAtExtremes<Op>)
        if (reaches_output_max16<F>(y)) return false;  // gated_lut_block8 redoes both halves
    const __m256i h = narrow16(y, F);
    const auto addr = reinterpret_cast<std::uintptr_t>(out);
    if (stream && addr % 32 == 0) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(out), h);
    } else if (stream && addr % 16 == 0) {
        stream32_as_halves(out, h);
    } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
    }
    return true;
}

template <Format F, class Op>
CONFORM_AVX512 void gated_lut_avx512(const KernelCall& c, const Op& op, const float* G, const float* U, bool stream) {
    const auto block = [&](const std::array<const elem_t<F>*, 2>& in, elem_t<F>* out) CONFORM_AVX2 {
        gated_lut_block8<F>(op, G, U, in, out,
                            [stream](elem_t<F>* o, __m256 y) CONFORM_AVX2 { vstore_maybe_stream<F>(o, y, stream); });
    };
    const TensorView& y = c.out[0];
    const std::int64_t rows = y.rows(), cols = y.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const auto in = input_rows<F, 2>(c, r);
        elem_t<F>* out = y.row<elem_t<F>>(r);
        std::int64_t i = 0;
        for (; i + 16 <= cols; i += 16) {
            if (i % 32 == 0) {  // once per 64-byte line of each input
                prefetch_ahead(in[0] + i, kLookupPrefetch);
                prefetch_ahead(in[1] + i, kLookupPrefetch);
            }
            if (gated_lut16<F>(op, G, U, in[0] + i, in[1] + i, out + i, stream)) continue;
            block({in[0] + i, in[1] + i}, out + i);
            block({in[0] + i + 8, in[1] + i + 8}, out + i + 8);
        }
        for (; i + 8 <= cols; i += 8) block({in[0] + i, in[1] + i}, out + i);
        if (i < cols) partial_block8<F, 2>(block, {in[0] + i, in[1] + i}, out + i, cols - i);
    }
}

template <Format F, int N, class Op>
CONFORM_AVX2 void run_lut(const KernelCall& c, const Op& op) {
    if constexpr (N == 1) {
        const auto t = cached_table<std::uint16_t>(typeid(LutTag<F, Op, 0>), c.params, &build_unary_table<F, Op>);
        const TensorView& y = c.out[0];
        const std::int64_t rows = y.rows(), cols = y.cols();
        const bool stream = streaming_output(y);
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::uint16_t* x = c.in[0].row<const std::uint16_t>(r);
            if (stream) lookup16_best<true>(t->data(), x, y.row<std::uint16_t>(r), cols);
            else lookup16_best<false>(t->data(), x, y.row<std::uint16_t>(r), cols);
        }
        if (stream) _mm_sfence();
    } else {
        const auto gt = cached_table<float>(typeid(LutTag<F, Op, 1>), c.params, &build_factor_table<F, Op, false>);
        std::shared_ptr<const std::vector<float>> ut;
        if constexpr (TabulatedUp<Op>)
            ut = cached_table<float>(typeid(LutTag<F, Op, 2>), c.params, &build_factor_table<F, Op, true>);
        const float* U = nullptr;
        if constexpr (TabulatedUp<Op>) U = ut->data();
        const bool stream = streaming_output(c.out[0]);
        const auto store = [stream](elem_t<F>* out, __m256 y) CONFORM_AVX2 { vstore_maybe_stream<F>(out, y, stream); };
        if (has_avx512()) gated_lut_avx512<F>(c, op, gt->data(), U, stream);
        else gated_lut_rows<F>(c, op, gt->data(), U, store);
        if (stream) _mm_sfence();
    }
}

// Every block by value8 (here: apply8, the double path), or by apply8_wide.
template <Format F, int N, class Op>
CONFORM_AVX2 void run_double(const KernelCall& c, const Op& op, bool stream) {
    each_block8<F, N>(c, [&op, stream](const std::array<const elem_t<F>*, N>& in, elem_t<F>* out) CONFORM_AVX2 {
        vstore_maybe_stream<F>(out, value8<F, N>(op, in), stream);
    });
}
// The same blocks by apply8_wide; the row loop is written out here (not
// each_block8) so that the AVX-512 block code is inlined into it.
template <Format F, int N, class Op>
CONFORM_AVX512 void run_double_wide(const KernelCall& c, const Op& op, bool stream) {
    const auto block = [&op, stream](const std::array<const elem_t<F>*, N>& in, elem_t<F>* out) CONFORM_AVX512 {
        __m256 x[N];
        for (int k = 0; k < N; ++k) x[k] = vload<F>(in[k]);
        vstore_maybe_stream<F>(out, apply8_wide<F, N>(op, x), stream);
    };
    const TensorView& y = c.out[0];
    const std::int64_t rows = y.rows(), cols = y.cols(), body = cols & ~std::int64_t{7};
    for (std::int64_t r = 0; r < rows; ++r) {
        const auto in = input_rows<F, N>(c, r);
        elem_t<F>* out = y.row<elem_t<F>>(r);
        std::array<const elem_t<F>*, N> at;
        for (std::int64_t i = 0; i < body; i += 8) {
            for (int k = 0; k < N; ++k) {
                at[k] = in[k] + i;
                if (i % 16 == 0) prefetch_ahead(at[k], kFfPrefetch);
            }
            block(at, out + i);
        }
        if (body == cols) continue;
        for (int k = 0; k < N; ++k) at[k] = in[k] + body;
        partial_block8<F, N>(block, at, out + body, cols - body);
    }
}

template <Format F, int N, class Op>
CONFORM_AVX2 void run_simd(const KernelCall& c, const Op& op) {
    // fp32 table kernels first, where the CPU and the functor's parameters
    // allow them; the float-float or double path otherwise.
    if constexpr (F == Format::fp32 && Fp32Lanes16<Op, N>) {
        if (has_avx512() && lanes16_enabled(op)) return run_lanes16<N>(c, op);
    }
    if constexpr (F != Format::fp32 && FloatVec<Op, N>) {
        run_lut<F, N>(c, op);
    } else if constexpr (F == Format::fp32 && Fp32FloatVec<Op, N>) {
        run_ff32<N>(c, op);
    } else {
        const bool stream = streaming_output(c.out[0]);
        if constexpr (DoubleVec8<Op, N>) {
            if (has_avx512()) run_double_wide<F, N>(c, op, stream);
            else run_double<F, N>(c, op, stream);
        } else {
            run_double<F, N>(c, op, stream);
        }
        if (stream) _mm_sfence();
    }
}

// ---- naive baseline arithmetic ------------------------------------------
// Every intermediate is rounded to the storage format: "how much error does
// plain arithmetic in this dtype make?"  Plain formulas, no special cases.

struct NaiveMath {
    Format f;
    double r(double v) const { return decode(f, encode(f, v)); }
    double sigmoid(double x) const { return r(1.0 / r(1.0 + r(std::exp(-x)))); }
    double silu(double x) const { return r(x * sigmoid(x)); }
    double gelu_erf(double x) const {
        return r(r(x / 2) * r(1.0 + r(std::erf(r(x / r(std::sqrt(2.0)))))));
    }
    double gelu_tanh(double x) const {
        const double cube = r(r(r(x * x) * x) * r(0.044715));
        const double z = r(r(std::sqrt(2.0 / M_PI)) * r(x + cube));
        return r(r(x / 2) * r(1.0 + r(std::tanh(z))));
    }
    double softplus(double x) const { return r(std::log(r(1.0 + r(std::exp(x))))); }
    double softcap(double x, double beta) const {
        const double b = r(beta);
        return r(b * r(std::tanh(r(x / b))));
    }
};

// ---- registration --------------------------------------------------------
// Kernel functors are built from the call's Params; naive functors from
// (Params, Format).

template <Format F, int N, class Op>
KernelFn simd_kernel() {
    return [](const KernelCall& c) {
        const Op op(c.params);
        if (has_avx2()) run_simd<F, N>(c, op);
        else run_scalar<F, N>(c, op);
    };
}

template <Format F, int N, class Op>
KernelFn scalar_kernel() {
    return [](const KernelCall& c) { run_scalar<F, N>(c, Op(c.params)); };
}

template <Format F, int N, class Naive>
KernelFn naive_kernel() {
    return [](const KernelCall& c) { run_scalar<F, N>(c, Naive(c.params, F)); };
}

// cpu.simd / cpu.scalar / cpu.naive for one op in one format.
template <Format F, int N, class Op, class Naive>
void register_op_format(Registry& r, const std::string& op) {
    constexpr bool in_float = F != Format::fp32 && FloatVec<Op, N>;
    r.add(kernel_info(op, "simd", F, in_float ? Format::fp32 : Format::fp64, Role::kernel,
                      in_float ? "AVX2: tables over all 65536 inputs filled by 8-lane float polynomials (gated: "
                                 "gate/up factor tables, product in float, far gate tails in double), one rounding to "
                                 "the format (scalar path without AVX2)"
                      : F == Format::fp32 && Fp32FloatVec<Op, N>
                          ? "AVX2: 8-lane float with float-float steps (relative error < 2^-26.7), blocks outside the "
                            "proven range (docs/activation.md, docs/gated.md §4) or with NaN in 4-lane double; one "
                            "rounding to fp32 (scalar path without AVX2)"
                          : "AVX2: 4-lane double polynomials, one rounding to the format (scalar path without AVX2)",
                      simd_kernel<F, N, Op>()));
    r.add(kernel_info(op, "scalar", F, Format::fp64, Role::kernel,
                      "portable scalar: libm in double, one correctly rounded store", scalar_kernel<F, N, Op>()));
    r.add(kernel_info(op, "naive", F, F, Role::baseline,
                      "plain formula, every intermediate rounded to the storage format", naive_kernel<F, N, Naive>()));
}

template <int N, class Op, class Naive>
void register_op(Registry& r, const std::string& op) {
    register_op_format<Format::fp32, N, Op, Naive>(r, op);
    register_op_format<Format::fp16, N, Op, Naive>(r, op);
    register_op_format<Format::bf16, N, Op, Naive>(r, op);
}

// A mutant: simple scalar code through the same driver (NaN policy included).
template <Format F, int N, class Op>
void register_mutant(Registry& r, const std::string& op, const std::string& bug, const std::string& bug_class,
                     std::string description, Format acc = Format::fp64) {
    r.add(mutant_info(op, bug, F, acc, bug_class, std::move(description), scalar_kernel<F, N, Op>()));
}

}  // namespace conform::cpu
