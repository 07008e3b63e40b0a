// CPU RoPE kernels (docs/rope.md, "Kernels"): x [H, L, D] -> y [H, L, D],
// token l of every head at position m = offset + l.
//   cpu.simd.rope.<fmt>    AVX2, 8 lanes over pairs (scalar path without AVX2)
//   cpu.scalar.rope.<fmt>  portable, same operations in the same order
//   cpu.naive.rope.<fmt>   baseline: angles, cos/sin and rotation rounded to the storage format
// simd and scalar share the tables (rope_tables) and do the rotation as
// y_a = x_a c - x_b s, y_b = x_a s + x_b c in FP32 without FMA, so they agree
// bit for bit (up to NaN payloads); the result is rounded once to the format.
// This is the reference design whose budget docs/rope.md derives
// (RopeTableModel defaults with out = the storage format).
#include "impls/cpu/rope.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "impls/cpu/elementwise.hpp"

namespace conform::cpu {

namespace {

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53: offset + l stays exact in double

[[noreturn]] void bad_param(const std::string& name, double v, const std::string& rule) {
    throw std::invalid_argument("rope: parameter '" + name + "' is " + std::to_string(v) + ", " + rule);
}

double integer_param(const Params& p, const std::string& name, double fallback, double lo, double hi) {
    const double v = p.get(name, fallback);
    if (!std::isfinite(v) || v != std::floor(v) || v < lo || v > hi) bad_param(name, v, "must be an integer in range");
    return v;
}

double positive_param(const Params& p, const std::string& name, double fallback) {
    const double v = p.get(name, fallback);
    if (!std::isfinite(v) || !(v > 0)) bad_param(name, v, "must be finite and > 0");
    return v;
}

}  // namespace

RopeArgs rope_args(const Params& p, std::int64_t D) {
    RopeArgs a;
    a.pairing = static_cast<int>(integer_param(p, "pairing", 0, 0, 1));
    const auto r0 = static_cast<std::int64_t>(integer_param(p, "rotary_dim", 0, 0, kMaxExactInteger));
    a.rotary_dim = r0 == 0 ? D : r0;
    if (a.rotary_dim % 2 != 0 || a.rotary_dim < 2 || a.rotary_dim > D)
        throw std::invalid_argument("rope: input 'x' dimension 2 (head dim D) is " + std::to_string(D) +
                                    "; rotary_dim must be even, >= 2 and <= D");
    a.base = positive_param(p, "base", 10000.0);
    a.ntk_scale = positive_param(p, "ntk_scale", 1.0);
    a.offset = static_cast<std::int64_t>(integer_param(p, "offset", 0, -kMaxExactInteger, kMaxExactInteger));
    RopeScalingArgs& sc = a.scaling;
    sc.kind = static_cast<int>(integer_param(p, "scaling", 0, 0, 3));
    sc.factor = positive_param(p, "factor", 1.0);
    sc.low_freq_factor = positive_param(p, "low_freq_factor", 1.0);
    sc.high_freq_factor = positive_param(p, "high_freq_factor", 4.0);
    if (sc.kind == 2 && !(sc.high_freq_factor > sc.low_freq_factor))
        bad_param("high_freq_factor", sc.high_freq_factor, "must be > low_freq_factor");
    sc.original_max_pos = positive_param(p, "original_max_pos", 8192.0);
    sc.attention_factor = positive_param(p, "attention_factor", 1.0);
    const double beta_fast = positive_param(p, "beta_fast", 32.0), beta_slow = positive_param(p, "beta_slow", 1.0);
    const bool truncate = integer_param(p, "truncate", 1, 0, 1) != 0;
    if (sc.kind == 3) {
        if (a.base * a.ntk_scale == 1.0) bad_param("base", a.base, "times ntk_scale must not be 1 for yarn");
        rope_yarn_ramp_range(sc, static_cast<int>(a.rotary_dim), a.base * a.ntk_scale, beta_fast, beta_slow, truncate);
    }
    return a;
}

// The tables, in the precision docs/rope.md "Error budget" assumes
// (RopeTableModel{2^-53, 2^-52, fp32, ...}):
//   b'      = base * ntk_scale                 double, one rounding
//   θ_j     = pow(b', -2j/r)                   double; -2j/r rounded once, pow < 1 ulp
//   a_{l,j} = (double)(offset + l) * θ_j       double; the position is an exact integer
//   cos/sin = (float)cos(a), (float)sin(a)     glibc double cos/sin (< 1 ulp), rounded once to FP32
// so the angle is off by <= m θ_j (2|ln θ_j| + 4) 2^-53 and each entry by
// that + 2^-52 + half an FP32 ulp: position-independent below m ~ 10^7.
// A frequency scaling forms θ'_j from θ_j by rope_scaled_theta (double, the
// order oracle::rope_theta_error_units bounds) and attention_factor
// multiplies cos and sin in double before the FP32 rounding.
// FP32 angles would instead lose m θ_j 2^-24 (0.06 rad at 2^20).
// Built per call for positions [offset, offset + L), shared by the H heads.
RopeTables rope_tables(const RopeArgs& a, std::int64_t L) {
    RopeTables t;
    t.L = L;
    t.half = a.rotary_dim / 2;
    const double b = a.base * a.ntk_scale;
    std::vector<double> theta(static_cast<std::size_t>(t.half));
    for (std::int64_t j = 0; j < t.half; ++j)
        theta[j] = rope_scaled_theta(std::pow(b, -2.0 * static_cast<double>(j) / static_cast<double>(a.rotary_dim)),
                                     static_cast<int>(j), a.scaling);
    const double af = a.scaling.attention_factor;
    t.cos.resize(static_cast<std::size_t>(L * t.half));
    t.sin.resize(t.cos.size());
    for (std::int64_t l = 0; l < L; ++l) {
        const double m = static_cast<double>(a.offset + l);
        for (std::int64_t j = 0; j < t.half; ++j) {
            const double angle = m * theta[j];
            t.cos[l * t.half + j] = static_cast<float>(af * std::cos(angle));
            t.sin[l * t.half + j] = static_cast<float>(af * std::sin(angle));
        }
    }
    return t;
}

namespace {

// ---- portable scalar: pairs [j0, half) of one head vector ---------------------

template <Format F>
void scalar_pairs(const storage_t<F>* x, storage_t<F>* y, const float* c, const float* s, std::int64_t j0,
                  std::int64_t half, int pairing) {
    using S = Storage<F>;
    for (std::int64_t j = j0; j < half; ++j) {
        const long ia = pairing == 0 ? 2 * j : j, ib = pairing == 0 ? 2 * j + 1 : j + half;
        const float xa = S::load(x, ia), xb = S::load(x, ib);
        // Written out so that the SIMD path can reproduce it operation by operation.
        S::store(y, ia, xa * c[j] - xb * s[j]);
        S::store(y, ib, xa * s[j] + xb * c[j]);
    }
}

// ---- AVX2 --------------------------------------------------------------------

// Four interleaved pairs [a0 b0 a1 b1 a2 b2 a3 b3] with cd = [c0 c0 c1 c1 ...]
// and sn = [-s0 s0 -s1 s1 ...]: y = x*cd + swap(x)*sn, i.e. a c + b(-s) and
// b c + a s, the scalar path's a c - b s and a s + b c exactly (x - y is
// x + (-y) in IEEE, b(-s) = -(bs), and addition commutes).
template <Format F>
CONFORM_AVX2 void rotate4_interleaved(const storage_t<F>* x, storage_t<F>* y, __m256 cd, __m256 sn) {
    const __m256 v = load8_as<F>(x);
    const __m256 swapped = _mm256_permute_ps(v, 0xB1);
    store8_as<F>(y, _mm256_add_ps(_mm256_mul_ps(v, cd), _mm256_mul_ps(swapped, sn)));
}

template <Format F>
CONFORM_AVX2 void simd_interleaved(const storage_t<F>* x, storage_t<F>* y, const float* c, const float* s,
                                   std::int64_t half) {
    const __m256i lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    const __m256 neg_even = _mm256_castsi256_ps(_mm256_setr_epi32(INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0));
    std::int64_t j = 0;
    for (; j + 8 <= half; j += 8) {  // 8 pairs = 16 elements per step
        const __m256 c8 = _mm256_loadu_ps(c + j), s8 = _mm256_loadu_ps(s + j);
        rotate4_interleaved<F>(x + 2 * j, y + 2 * j, _mm256_permutevar8x32_ps(c8, lo),
                               _mm256_xor_ps(_mm256_permutevar8x32_ps(s8, lo), neg_even));
        rotate4_interleaved<F>(x + 2 * j + 8, y + 2 * j + 8, _mm256_permutevar8x32_ps(c8, hi),
                               _mm256_xor_ps(_mm256_permutevar8x32_ps(s8, hi), neg_even));
    }
    scalar_pairs<F>(x, y, c, s, j, half, 0);
}

// Half-split: 8 pairs (j..j+7, j+half..j+half+7) straight from memory.
template <Format F>
CONFORM_AVX2 void simd_half_split(const storage_t<F>* x, storage_t<F>* y, const float* c, const float* s,
                                  std::int64_t half) {
    std::int64_t j = 0;
    for (; j + 8 <= half; j += 8) {
        const __m256 xa = load8_as<F>(x + j), xb = load8_as<F>(x + j + half);
        const __m256 c8 = _mm256_loadu_ps(c + j), s8 = _mm256_loadu_ps(s + j);
        store8_as<F>(y + j, _mm256_sub_ps(_mm256_mul_ps(xa, c8), _mm256_mul_ps(xb, s8)));
        store8_as<F>(y + j + half, _mm256_add_ps(_mm256_mul_ps(xa, s8), _mm256_mul_ps(xb, c8)));
    }
    scalar_pairs<F>(x, y, c, s, j, half, 1);
}

template <Format F>
void simd_vector(const storage_t<F>* x, storage_t<F>* y, const float* c, const float* s, std::int64_t half,
                 int pairing) {
    if (pairing == 0) simd_interleaved<F>(x, y, c, s, half);
    else simd_half_split<F>(x, y, c, s, half);
}

template <Format F>
void scalar_vector(const storage_t<F>* x, storage_t<F>* y, const float* c, const float* s, std::int64_t half,
                   int pairing) {
    scalar_pairs<F>(x, y, c, s, 0, half, pairing);
}

// attention_factor != 1: af·cos can exceed 1, so x_a·c can overflow FP32
// where y_a does not.  The same rotation with the products (exact) and the
// sum in double, rounded to FP32, then to F: no intermediate overflows where
// the result does not, and the error stays within the FP32 model's γ_2.
template <Format F>
void wide_vector(const storage_t<F>* x, storage_t<F>* y, const float* c, const float* s, std::int64_t half,
                 int pairing) {
    using S = Storage<F>;
    for (std::int64_t j = 0; j < half; ++j) {
        const long ia = pairing == 0 ? 2 * j : j, ib = pairing == 0 ? 2 * j + 1 : j + half;
        const double xa = S::load(x, ia), xb = S::load(x, ib);
        S::store(y, ia, static_cast<float>(xa * c[j] - xb * s[j]));
        S::store(y, ib, static_cast<float>(xa * s[j] + xb * c[j]));
    }
}

// ---- driver ------------------------------------------------------------------

template <Format F, void (*Vec)(const storage_t<F>*, storage_t<F>*, const float*, const float*, std::int64_t, int)>
void run_rope(const KernelCall& call) {
    using T = storage_t<F>;
    const TensorView &x = call.in.at(0), &y = call.out.at(0);
    if (x.rank != 3) throw std::invalid_argument("rope: input 'x' must have rank 3");
    const std::int64_t H = x.shape[0], L = x.shape[1], D = x.shape[2];
    const RopeArgs a = rope_args(call.params, D);
    const RopeTables t = rope_tables(a, L);
    const auto vec = a.scaling.attention_factor != 1 ? &wide_vector<F> : Vec;
    for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t l = 0; l < L; ++l) {
            const T* xr = x.row<const T>(h * L + l);
            T* yr = y.row<T>(h * L + l);
            vec(xr, yr, t.cos_row(l), t.sin_row(l), t.half, a.pairing);
            // Pass-through dims: copied as bits (no widening, no NaN quieting).
            std::memcpy(yr + a.rotary_dim, xr + a.rotary_dim, static_cast<std::size_t>(D - a.rotary_dim) * sizeof(T));
        }
}

template <Format F>
void simd_kernel(const KernelCall& call) {
    if (has_avx2()) run_rope<F, simd_vector<F>>(call);
    else run_rope<F, scalar_vector<F>>(call);
}

// ---- naive: every step rounded to the storage format ------------------------
// The plain formula as a framework would run it in the activation dtype
// (positions, θ, m·θ, cos/sin, products and sums each rounded to F).

template <Format F>
void naive_kernel(const KernelCall& call) {
    auto rd = [](double v) { return decode(F, encode(F, v)); };
    const TensorView &x = call.in.at(0), &y = call.out.at(0);
    if (x.rank != 3) throw std::invalid_argument("rope: input 'x' must have rank 3");
    const std::int64_t H = x.shape[0], L = x.shape[1], D = x.shape[2];
    const RopeArgs a = rope_args(call.params, D);
    const std::int64_t r = a.rotary_dim, half = r / 2;
    const double b = rd(rd(a.base) * rd(a.ntk_scale));
    for (std::int64_t l = 0; l < L; ++l) {
        const double m = rd(static_cast<double>(a.offset + l));
        for (std::int64_t j = 0; j < half; ++j) {
            const double theta = rd(std::pow(b, rd(-2.0 * static_cast<double>(j) / static_cast<double>(r))));
            const double angle = rd(m * rd(rope_scaled_theta(theta, static_cast<int>(j), a.scaling)));
            const double af = rd(a.scaling.attention_factor);
            const double c = rd(af * rd(std::cos(angle))), s = rd(af * rd(std::sin(angle)));
            const std::int64_t ia = a.pairing == 0 ? 2 * j : j, ib = a.pairing == 0 ? 2 * j + 1 : j + half;
            for (std::int64_t h = 0; h < H; ++h) {
                const std::int64_t row = (h * L + l) * D;
                const double xa = x.value(row + ia), xb = x.value(row + ib);
                y.set_bits(row + ia, encode(F, rd(rd(xa * c) - rd(xb * s))));
                y.set_bits(row + ib, encode(F, rd(rd(xa * s) + rd(xb * c))));
            }
        }
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t i = r; i < D; ++i) y.set_bits((h * L + l) * D + i, x.bits((h * L + l) * D + i));
    }
}

template <Format F>
void add_format(Registry& reg) {
    const std::string contract = "cos/sin tables per call: double angles m*theta_j, FP32 entries; rotation in FP32 "
                                 "without FMA; one rounding to the format; pass-through dims copied";
    reg.add(kernel_info("rope", "simd", F, Format::fp32, Role::kernel,
                        "AVX2 8 lanes over pairs, scalar path without AVX2; " + contract, simd_kernel<F>));
    reg.add(kernel_info("rope", "scalar", F, Format::fp32, Role::kernel, "portable scalar; " + contract,
                        run_rope<F, scalar_vector<F>>));
    reg.add(kernel_info("rope", "naive", F, F, Role::baseline,
                        "positions, angles, cos/sin and the rotation each rounded to the storage format",
                        naive_kernel<F>));
}

}  // namespace
}  // namespace conform::cpu

namespace conform {

void register_cpu_rope(Registry& r) {
    cpu::add_format<Format::fp32>(r);
    cpu::add_format<Format::fp16>(r);
    cpu::add_format<Format::bf16>(r);
}

}  // namespace conform
