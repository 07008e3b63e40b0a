// One elementwise driver for the activation and gated families: it walks the
// [rows, cols] views of N inputs (1: x; 2: gate, up) and one output, widens
// each element to double, applies a functor and rounds once into the storage
// format.  Functors (simd_math.hpp, the naive models below, the mutants)
// provide scalar(x) / scalar(g, u) and, for the AVX2 path, vec(...).
//
// NaN policy, shared by every path: any NaN input gives a NaN output, decided
// here, so the math is free to clamp NaNs away.
#pragma once
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "impls/cpu/convert.hpp"
#include "impls/cpu/isa.hpp"
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
    __m256 y = _mm256_set_m128(narrow_pd<F>(hi), narrow_pd<F>(lo));
    // NaN in -> NaN out: x0 + x1 is NaN wherever an input is (the mask excludes inf - inf).
    const __m256 b = N == 1 ? x[0] : x[N - 1];
    const __m256 nan = _mm256_cmp_ps(x[0], b, _CMP_UNORD_Q);
    return _mm256_blendv_ps(y, _mm256_add_ps(x[0], b), nan);
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
                       op.vecf(x, x);
                       op.float_ok(x);
                   });

template <Format F, int N, class Op>
CONFORM_AVX2 inline __m256 apply8f(const Op& op, const __m256 (&x)[N]) {
    __m256 y;
    if constexpr (N == 1) y = op.vecf(x[0]);
    else y = op.vecf(x[0], x[1]);
    const __m256 b = N == 1 ? x[0] : x[N - 1];
    const __m256 nan = _mm256_cmp_ps(x[0], b, _CMP_UNORD_Q);
    return _mm256_blendv_ps(y, _mm256_add_ps(x[0], b), nan);
}

template <Format F, int N, class Op>
CONFORM_AVX2 inline void block8(const Op& op, const std::array<const elem_t<F>*, N>& in, elem_t<F>* out) {
    __m256 x[N];
    for (int k = 0; k < N; ++k) x[k] = vload<F>(in[k]);
    if constexpr (F != Format::fp32 && FloatVec<Op, N>) {
        if constexpr (N == 1) {
            vstore<F>(out, apply8f<F, N>(op, x));
            return;
        } else if (op.float_ok(x[0])) {
            vstore<F>(out, apply8f<F, N>(op, x));
            return;
        }
    }
    vstore<F>(out, apply8<F, N>(op, x));
}

template <Format F, int N, class Op>
CONFORM_AVX2 void run_simd(const KernelCall& c, const Op& op) {
    const TensorView& y = c.out[0];
    const std::int64_t rows = y.rows(), cols = y.cols(), body = cols & ~std::int64_t{7};
    for (std::int64_t r = 0; r < rows; ++r) {
        auto in = input_rows<F, N>(c, r);
        elem_t<F>* out = y.row<elem_t<F>>(r);
        for (std::int64_t i = 0; i < body; i += 8) {
            std::array<const elem_t<F>*, N> at;
            for (int k = 0; k < N; ++k) at[k] = in[k] + i;
            block8<F, N>(op, at, out + i);
        }
        if (body == cols) continue;
        // Tail: run the same 8-lane code on zero-padded copies (one code path).
        const std::size_t n = static_cast<std::size_t>(cols - body) * sizeof(elem_t<F>);
        elem_t<F> buf[N][8] = {}, res[8];
        std::array<const elem_t<F>*, N> at;
        for (int k = 0; k < N; ++k) {
            std::memcpy(buf[k], in[k] + body, n);
            at[k] = buf[k];
        }
        block8<F, N>(op, at, res);
        std::memcpy(out + body, res, n);
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

inline KernelInfo kernel_info(const std::string& op, const std::string& variant, Format f, Format acc, Role role,
                              std::string description, KernelFn fn) {
    KernelInfo k;
    k.name = "cpu." + variant + "." + op + "." + name(f);
    k.op = op;
    k.variant = variant;
    k.in = k.out = f;
    k.acc = acc;
    k.role = role;
    k.description = std::move(description);
    k.fn = std::move(fn);
    return k;
}

// cpu.simd / cpu.scalar / cpu.naive for one op in one format.
template <Format F, int N, class Op, class Naive>
void register_op_format(Registry& r, const std::string& op) {
    constexpr bool in_float = F != Format::fp32 && FloatVec<Op, N>;
    r.add(kernel_info(op, "simd", F, in_float ? Format::fp32 : Format::fp64, Role::kernel,
                      in_float ? "AVX2: 8-lane float polynomials (far gate tails in double), one rounding to the "
                                 "format (scalar path without AVX2)"
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
    KernelInfo k = kernel_info(op, bug, F, acc, Role::mutant, std::move(description), scalar_kernel<F, N, Op>());
    k.name = "mutant." + op + "." + bug + "." + name(F);
    k.bug_class = bug_class;
    r.add(std::move(k));
}

}  // namespace conform::cpu
