// CPU INT8 kernels (docs/int8.md, "Kernels"):
//   cpu.simd.quantize.<fmt>      AVX2: amax by vector max of |x|, codes from
//                                x / s in double (4 lanes), RNE by vroundpd
//   cpu.scalar.quantize.<fmt>    portable, the same decisions
//   cpu.simd.int8_gemm.<out>     the product by the best path the CPU has:
//                                AMX-INT8 tdpbssd (impls/cpu/int8_amx.cpp),
//                                AVX-512 VNNI or AVX-VNNI vpdpbusd
//                                (impls/cpu/int8_vnni.cpp), else AVX2 (int8
//                                sign-extended to int16 pairs, vpmaddwd into
//                                INT32, 6 rows x 16 columns per block); then
//                                the dequantization in double, 8 or 4 lanes
//   cpu.scalar.int8_gemm.<out>   portable INT32 triple loop, same dequantization
// The code of x with scale s is round_half_even(x / s) clamped to [-127, 127]
// with the quotient in double: x and s have at most 24-bit significands, so a
// quotient that is not a half-integer is at least 2^-27 (relative) away from
// every half-integer while the double quotient errs by 2^-53: the double
// never lands on a false tie nor crosses one, and the codes are exact.
// vpmaddubsw is not used: it multiplies an unsigned by a signed byte and
// saturates its pair sums to INT16 (255 * 127 * 2 > 32767); vpmaddwd on
// sign-extended int16 pairs cannot saturate (2 * 128 * 128 = 2^15 fits its
// INT32 lanes), and vpdpbusd adds its four products into INT32 without
// saturation.  |acc| <= K 2^14 < 2^31 fits INT32 for K < 2^17.
#include "impls/cpu/int8_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/scratch.hpp"
#include "impls/cpu/simd_lanes.hpp"

namespace conform::cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int kMaxCode = 127;

// ---- quantize -----------------------------------------------------------------

struct QuantCall {
    std::int64_t rows = 0, cols = 0;
    int axis = 0;          // 0 tensor, 1 token (row), 2 channel (column)
    float fixed = 0;       // static scale, 0: dynamic
};

QuantCall read_quant(const KernelCall& c) {
    const TensorView& x = c.in.at(0);
    if (x.rank != 2) throw std::invalid_argument("quantize kernel: x must be [rows, cols]");
    QuantCall q{x.shape[0], x.shape[1], static_cast<int>(c.params.get("axis", 0.0)),
                static_cast<float>(c.params.get("scale", 0.0))};
    if (q.axis < 0 || q.axis > 2) throw std::invalid_argument("quantize kernel: axis must be 0, 1 or 2");
    return q;
}

std::int64_t group_of(int axis, std::int64_t i, std::int64_t j) { return axis == 0 ? 0 : axis == 1 ? i : j; }

// amax / 127 per group (FP32 division: correctly rounded), NaN for a group
// with a non-finite value, the static scale when given.
std::vector<float> group_scales(const TensorView& x, const QuantCall& q, int axis) {
    std::vector<float> amax(static_cast<std::size_t>(axis == 0 ? 1 : axis == 1 ? q.rows : q.cols), 0.0f);
    for (std::int64_t i = 0; i < q.rows; ++i)
        for (std::int64_t j = 0; j < q.cols; ++j) {
            float& a = amax[static_cast<std::size_t>(group_of(axis, i, j))];
            const float v = static_cast<float>(x.value(i * q.cols + j));
            a = std::isfinite(v) && !std::isnan(a) ? std::max(a, std::fabs(v)) : kNaN;
        }
    for (float& a : amax) a = q.fixed > 0 ? q.fixed : a / static_cast<float>(kMaxCode);
    return amax;
}

double round_code(double t, QuantizeFlaws::Rounding r) {
    switch (r) {
        case QuantizeFlaws::Rounding::half_away: return std::round(t);
        case QuantizeFlaws::Rounding::truncate: return std::trunc(t);
        default: return std::nearbyint(t);  // the default rounding mode: ties to even
    }
}

std::int8_t code(float x, float s, const QuantizeFlaws& f) {
    if (!std::isfinite(x) || !(s > 0) || !std::isfinite(s)) return 0;
    const double t = round_code(static_cast<double>(x) / static_cast<double>(s), f.rounding);
    if (f.wrap) return static_cast<std::int8_t>(static_cast<std::uint8_t>(static_cast<std::int64_t>(std::fmax(std::fmin(t, 1e9), -1e9)) & 0xFF));
    return static_cast<std::int8_t>(std::clamp(t, -static_cast<double>(kMaxCode), static_cast<double>(kMaxCode)));
}

void write_scales(const KernelCall& c, const QuantCall& q, const std::vector<float>& s) {
    float* out = static_cast<float*>(c.out.at(1).data);
    for (std::int64_t i = 0; i < q.rows; ++i)
        for (std::int64_t j = 0; j < q.cols; ++j) out[i * q.cols + j] = s[static_cast<std::size_t>(group_of(q.axis, i, j))];
}

// AVX2 codes of one row: 8 floats at a time as two 4-lane doubles.
CONFORM_AVX2 void codes_row_avx2(const float* x, const float* s, bool s_per_element, std::int8_t* q, std::int64_t n) {
    const __m256d lim = _mm256_set1_pd(kMaxCode), inf = _mm256_set1_pd(std::numeric_limits<double>::infinity());
    std::int64_t j = 0;
    alignas(32) std::int32_t lanes[4];
    for (; j + 4 <= n; j += 4) {
        const __m256d xv = _mm256_cvtps_pd(_mm_loadu_ps(x + j));
        const __m256d sv = s_per_element ? _mm256_cvtps_pd(_mm_loadu_ps(s + j)) : _mm256_set1_pd(*s);
        __m256d t = _mm256_round_pd(_mm256_div_pd(xv, sv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        t = _mm256_max_pd(_mm256_min_pd(t, lim), _mm256_sub_pd(_mm256_setzero_pd(), lim));
        // x finite, s > 0 and finite; else 0 (NaN compares false everywhere).
        const __m256d ok = _mm256_and_pd(_mm256_and_pd(_mm256_cmp_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), xv), inf, _CMP_LT_OQ),
                                                       _mm256_cmp_pd(sv, _mm256_setzero_pd(), _CMP_GT_OQ)),
                                         _mm256_cmp_pd(sv, inf, _CMP_LT_OQ));
        _mm_store_si128(reinterpret_cast<__m128i*>(lanes), _mm256_cvtpd_epi32(_mm256_and_pd(t, ok)));
        for (int l = 0; l < 4; ++l) q[j + l] = static_cast<std::int8_t>(lanes[l]);
    }
    for (; j < n; ++j) q[j] = code(x[j], s_per_element ? s[j] : *s, {});
}

void quantize_simd(const KernelCall& c) {
    if (!has_avx2()) return quantize_scalar(c);
    const QuantCall q = read_quant(c);
    const auto s = group_scales(c.in[0], q, q.axis);
    write_scales(c, q, s);
    std::vector<float> row(static_cast<std::size_t>(q.cols));
    for (std::int64_t i = 0; i < q.rows; ++i) {
        for (std::int64_t j = 0; j < q.cols; ++j) row[static_cast<std::size_t>(j)] = static_cast<float>(c.in[0].value(i * q.cols + j));
        const float* sp = q.axis == 2 ? s.data() : &s[static_cast<std::size_t>(q.axis == 1 ? i : 0)];
        codes_row_avx2(row.data(), sp, q.axis == 2, static_cast<std::int8_t*>(c.out[0].data) + i * q.cols, q.cols);
    }
}

// ---- int8 GEMM -------------------------------------------------------------------

constexpr std::int64_t kRowBlock = 6, kColBlock = 16, kRowPanel = 48;

// The pair (a[i][2p], a[i][2p+1]) as one int32 to broadcast.
std::vector<std::int32_t> pack_a(const std::int8_t* a, std::int64_t m, std::int64_t k) {
    const std::int64_t kp = (k + 1) / 2;
    std::vector<std::int32_t> packed(static_cast<std::size_t>(m * kp), 0);
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t p = 0; p < kp; ++p) {
            const std::uint16_t lo = static_cast<std::uint16_t>(static_cast<std::int16_t>(a[i * k + 2 * p]));
            const std::uint16_t hi = 2 * p + 1 < k ? static_cast<std::uint16_t>(static_cast<std::int16_t>(a[i * k + 2 * p + 1])) : 0;
            packed[static_cast<std::size_t>(i * kp + p)] = static_cast<std::int32_t>(static_cast<std::uint32_t>(lo) | (std::uint32_t{hi} << 16));
        }
    return packed;
}

// R rows (R <= kRowBlock) x 16 columns of acc; `panel` is the column
// block's packed pairs (contiguous: kp x 32 int16).
template <int R>
CONFORM_AVX2 void gemm_block(const std::int32_t* ap, const std::int16_t* panel, std::int64_t kp, std::int64_t j0,
                             std::int32_t* acc, std::int64_t n, std::int64_t cols) {
    __m256i c[R][2];
    for (int r = 0; r < R; ++r) c[r][0] = c[r][1] = _mm256_setzero_si256();
    for (std::int64_t p = 0; p < kp; ++p) {
        const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + p * 2 * kColBlock));
        const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + p * 2 * kColBlock + kColBlock));
        for (int r = 0; r < R; ++r) {
            const __m256i a = _mm256_set1_epi32(ap[r * kp + p]);
            c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(a, b0));
            c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(a, b1));
        }
    }
    alignas(32) std::int32_t out[kColBlock];
    for (int r = 0; r < R; ++r) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(out), c[r][0]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + 8), c[r][1]);
        std::copy(out, out + cols, acc + r * n + j0);
    }
}

// ---- the dequantization, 8 or 4 lanes -----------------------------------------

bool dense(const TensorView& v, Format f) {
    if (v.format != f || v.rank > 2) return false;
    if (v.rank == 0) return true;
    return v.strides[v.rank - 1] == 1 && (v.rank == 1 || v.strides[0] == v.shape[1]);
}

// FP32 scales, an FP64 acc and an FP32 y, all dense: the AVX2 epilogue.
bool fast_dequant(const KernelCall& c) {
    return has_avx2() && dense(c.in[2], Format::fp32) && dense(c.in[3], Format::fp32) && dense(c.out.at(0), Format::fp64) &&
           dense(c.out.at(1), Format::fp32);
}

// The scalar loop's arithmetic lane by lane: double(acc) * s_a * s_b in
// double (vmulpd twice, left to right), one RNE rounding to FP32
// (vcvtpd2ps, as encode() rounds, subnormals included: under the default
// MXCSR, round to nearest and no flush to zero, which the kernels assume),
// NaN as encode()'s quiet NaN.  8 double lanes (D8) while they fit where
// `wide`, then 4 (D4), then one at a time: the same operations per lane, so
// the same bits at either width.
struct DequantRow {
    const std::int32_t* acc;  // this row of acc, acc_out and y
    double* acc_out;
    float* y;
    double sa;
    const float* sb;
    bool sb_cols;
    float nan;
};

// Columns [j, n) of one row by D's width while it fits; returns where it
// stopped.  (A function, not a lambda: a lambda has no target attribute,
// and D's operations would not inline into it.)
template <class D>
CONFORM_LANES std::int64_t dequantize_lanes(const DequantRow& r, std::int64_t j, std::int64_t n) {
    for (; j + D::kWidth <= n; j += D::kWidth) {
        const typename D::R v = D::from_i32(r.acc + j);
        D::storeu(r.acc_out + j, v);
        const typename D::R s = r.sb_cols ? D::from_f32(r.sb + j) : D::set(r.sb[0]);
        D::store_f32(r.y + j, D::mul(D::mul(v, D::set(r.sa)), s), r.nan);
    }
    return j;
}

template <bool kWide>
CONFORM_LANES void dequantize_rows(const KernelCall& c, const std::int32_t* acc, std::int64_t m, std::int64_t n) {
    const float* sa = static_cast<const float*>(c.in[2].data);
    const bool sa_rows = c.in[2].numel() != 1;
    const std::uint32_t nan_bits = static_cast<std::uint32_t>(encode(Format::fp32, std::numeric_limits<double>::quiet_NaN()));
    DequantRow r{nullptr, nullptr, nullptr, 0, static_cast<const float*>(c.in[3].data), c.in[3].numel() != 1, 0};
    std::memcpy(&r.nan, &nan_bits, 4);
    for (std::int64_t i = 0; i < m; ++i) {
        r.acc = acc + i * n;
        r.acc_out = static_cast<double*>(c.out[0].data) + i * n;
        r.y = static_cast<float*>(c.out[1].data) + i * n;
        r.sa = sa[sa_rows ? i : 0];
        std::int64_t j = 0;
        if constexpr (kWide) j = dequantize_lanes<D8>(r, j, n);
        j = dequantize_lanes<D4>(r, j, n);
        for (; j < n; ++j) {
            r.acc_out[j] = r.acc[j];
            const double yv = static_cast<double>(r.acc[j]) * r.sa * static_cast<double>(r.sb[r.sb_cols ? j : 0]);
            const std::uint32_t bits = static_cast<std::uint32_t>(encode(Format::fp32, yv));
            std::memcpy(r.y + j, &bits, 4);
        }
    }
}

CONFORM_AVX2 void dequantize_avx2(const KernelCall& c, const std::int32_t* acc, std::int64_t m, std::int64_t n) {
    dequantize_rows<false>(c, acc, m, n);
}

CONFORM_AVX512 void dequantize_avx512(const KernelCall& c, const std::int32_t* acc, std::int64_t m, std::int64_t n) {
    dequantize_rows<true>(c, acc, m, n);
}

template <Format F>
void add_quantize(Registry& r) {
    KernelInfo simd = kernel_info("quantize", "simd", F, Format::fp64, Role::kernel,
                                  "AVX2: FP32 amax / 127 per group, codes RNE(x / s) from 4-lane double quotients "
                                  "(exact: no false ties), clamped to [-127, 127] (scalar path without AVX2)",
                                  quantize_simd);
    KernelInfo scalar = kernel_info("quantize", "scalar", F, Format::fp64, Role::kernel,
                                    "portable: FP32 amax / 127, nearbyint(double(x) / s) clamped to [-127, 127]",
                                    [](const KernelCall& c) { quantize_scalar(c); });
    for (KernelInfo* k : {&simd, &scalar}) {
        k->out = Format::int8;
        k->out_formats = {Format::int8, Format::fp32};
        r.add(std::move(*k));
    }
}

template <Format Out>
void add_gemm(Registry& r) {
    for (const bool simd : {true, false}) {
        KernelInfo k;
        k.name = std::string("cpu.") + (simd ? "simd" : "scalar") + ".int8_gemm." + name(Out);
        k.op = "int8_gemm";
        k.variant = simd ? "simd" : "scalar";
        k.in = Format::int8;
        k.out = Out;
        k.acc = Format::fp32;  // the dequantization; the product is exact INT32
        k.out_formats = {Format::fp64, Out};
        k.description = simd ? "AMX-INT8 tdpbssd, or AVX-512 VNNI / AVX-VNNI vpdpbusd (b + 128 as u8, -128 rowsum(a) taken back) or AVX2 "
                               "vpmaddwd into INT32, by CPU; y = double(acc) * sa * sb rounded once to the output"
                             : "portable INT32 triple loop, y = double(acc) * sa * sb rounded once";
        k.fn = [simd](const KernelCall& c) { int8_gemm_call(c, simd); };
        r.add(std::move(k));
    }
}

}  // namespace

void check_gemm(const KernelCall& c, std::int64_t& m, std::int64_t& k, std::int64_t& n) {
    const TensorView &a = c.in.at(0), &b = c.in.at(1);
    if (a.rank != 2 || b.rank != 2 || b.shape[0] != a.shape[1] || a.format != Format::int8 || b.format != Format::int8)
        throw std::invalid_argument("int8_gemm kernel: expects int8 a [M, K] and b [K, N]");
    m = a.shape[0], k = a.shape[1], n = b.shape[1];
    // K = 2^17 with every code -128 gives 2^31, one past INT32's maximum.
    if (k >= (std::int64_t{1} << 17)) throw std::invalid_argument("int8_gemm kernel: K >= 2^17 may overflow INT32");
    const std::int64_t sa = c.in.at(2).numel(), sb = c.in.at(3).numel();
    if ((sa != 1 && sa != m) || (sb != 1 && sb != n)) throw std::invalid_argument("int8_gemm kernel: scale sizes");
}

void quantize_scalar(const KernelCall& c, const QuantizeFlaws& f) {
    const QuantCall q = read_quant(c);
    // The mutants' axis and granularity mistakes change which groups the
    // maxima are taken over, not how the codes are stored.
    int stat_axis = q.axis;
    if (f.amax_wrong_axis && q.axis != 0) stat_axis = q.axis == 1 ? 2 : 1;
    if (f.token_is_tensor && q.axis == 1) stat_axis = 0;
    std::vector<float> s = group_scales(c.in[0], q, stat_axis);
    if (stat_axis != q.axis) {  // spread to the declared groups: each takes the scale of its first element
        std::vector<float> spread(static_cast<std::size_t>(q.axis == 1 ? q.rows : q.cols));
        for (std::size_t g = 0; g < spread.size(); ++g)
            spread[g] = s[static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(g), static_cast<std::int64_t>(s.size()) - 1))];
        s = std::move(spread);
    }
    write_scales(c, q, s);
    std::int8_t* out = static_cast<std::int8_t*>(c.out[0].data);
    for (std::int64_t i = 0; i < q.rows; ++i)
        for (std::int64_t j = 0; j < q.cols; ++j)
            out[i * q.cols + j] = code(static_cast<float>(c.in[0].value(i * q.cols + j)),
                                       s[static_cast<std::size_t>(group_of(q.axis, i, j))], f);
}

void quantize_call(const KernelCall& c, bool simd) {
    if (simd) quantize_simd(c);
    else quantize_scalar(c);
}

void int8_matmul_scalar(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                        std::int64_t n, const GemmFlaws& f) {
    auto sat16 = [](std::int32_t v) { return std::clamp<std::int32_t>(v, -32768, 32767); };
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            std::int32_t s = 0, colsum = 0;
            for (std::int64_t p = 0; p < k; p += 2) {
                const std::int32_t a0 = a[i * k + p], b0 = b[p * n + j];
                const std::int32_t a1 = p + 1 < k ? a[i * k + p + 1] : 0, b1 = p + 1 < k ? b[(p + 1) * n + j] : 0;
                if (f.maddubs) {  // (a + 128) as u8 times b, the pair saturated, later corrected
                    s += sat16((a0 + 128) * b0 + (a1 + 128) * b1);
                    colsum += b0 + b1;
                } else if (f.int16_acc) {
                    s = sat16(s + a0 * b0 + a1 * b1);
                } else {
                    s += a0 * b0 + a1 * b1;
                }
            }
            acc[i * n + j] = f.maddubs ? s - 128 * colsum : s;
        }
}

// Column block by column block (each contiguous, so the inner loop streams
// it): the vpmaddwd operands of block jb and pair p sit at
// pairs[(jb * kp + p) * 32], 16 columns x 2 values.
PackedInt8B pack_int8_b(const std::int8_t* b, std::int64_t k, std::int64_t n) {
    PackedInt8B pb{k, n, (n + kColBlock - 1) / kColBlock * kColBlock, {}};
    const std::int64_t kp = (k + 1) / 2;
    pb.pairs.assign(static_cast<std::size_t>(kp * pb.np * 2), 0);
    for (std::int64_t p = 0; p < k; ++p)
        for (std::int64_t j = 0; j < n; ++j)
            pb.pairs[static_cast<std::size_t>(((j / kColBlock * kp + p / 2) * kColBlock + j % kColBlock) * 2 + p % 2)] = b[p * n + j];
    return pb;
}

void int8_matmul_avx2(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                      std::int64_t n) {
    int8_matmul_avx2_packed(a, pack_int8_b(b, k, n), acc, m);
}

CONFORM_AVX2 void int8_matmul_avx2_packed(const std::int8_t* a, const PackedInt8B& b, std::int32_t* acc, std::int64_t m) {
    const std::int64_t k = b.k, n = b.n, kp = (k + 1) / 2;
    const std::vector<std::int32_t> ap = pack_a(a, m, k);
    // Panels of kRowPanel rows of a (kRowPanel * K * 2 bytes, L2-sized at K = 4096)
    // meet every 16-column block of b while it is in cache.
    for (std::int64_t i0 = 0; i0 < m; i0 += kRowPanel) {
        const std::int64_t i1 = std::min(m, i0 + kRowPanel);
        for (std::int64_t j0 = 0; j0 < n; j0 += kColBlock) {
            const std::int64_t cols = std::min(kColBlock, n - j0);
            const std::int16_t* panel = b.pairs.data() + j0 / kColBlock * kp * 2 * kColBlock;
            std::int64_t i = i0;
            for (; i + kRowBlock <= i1; i += kRowBlock)
                gemm_block<kRowBlock>(&ap[static_cast<std::size_t>(i * kp)], panel, kp, j0, acc + i * n, n, cols);
            for (; i < i1; ++i) gemm_block<1>(&ap[static_cast<std::size_t>(i * kp)], panel, kp, j0, acc + i * n, n, cols);
        }
    }
}

void int8_matmul_simd(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                      std::int64_t n) {
    if (has_amx_int8()) int8_matmul_amx(a, b, acc, m, k, n);
    else if (has_avx512_vnni()) int8_matmul_vnni512(a, b, acc, m, k, n);
    else if (has_avx_vnni()) int8_matmul_vnni256(a, b, acc, m, k, n);
    else if (has_avx2()) int8_matmul_avx2(a, b, acc, m, k, n);
    else int8_matmul_scalar(a, b, acc, m, k, n);
}

void int8_gemm_call(const KernelCall& c, bool simd, const GemmFlaws& f) {
    std::int64_t m, k, n;
    check_gemm(c, m, k, n);
    const auto* a = static_cast<const std::int8_t*>(c.in[0].data);
    const auto* b = static_cast<const std::int8_t*>(c.in[1].data);
    thread_local std::vector<std::int32_t> acc_buffer;  // every element written by the product
    std::int32_t* acc = grown(acc_buffer, m * n);
    if (simd) int8_matmul_simd(a, b, acc, m, k, n);
    else int8_matmul_scalar(a, b, acc, m, k, n, f);
    if (simd && fast_dequant(c)) return has_avx512() ? dequantize_avx512(c, acc, m, n) : dequantize_avx2(c, acc, m, n);
    const TensorView &sa = c.in[2], &sb = c.in[3], &acc_out = c.out.at(0), &y = c.out.at(1);
    for (std::int64_t i = 0; i < m; ++i) {
        const double si = sa.value(sa.numel() == 1 || f.scale_a_tensor ? 0 : i);
        for (std::int64_t j = 0; j < n; ++j) {
            const std::int32_t v = acc[i * n + j];
            acc_out.set_bits(i * n + j, encode(Format::fp64, v));
            // In double: acc * s_a * s_b can neither overflow nor underflow there
            // (2^31 2^128 2^128), so an FP32 scale near the top of the range
            // times a zero scale is 0, not Inf * 0; two roundings in double and
            // one into y's format.
            const double yv = static_cast<double>(v) * si * sb.value(sb.numel() == 1 ? 0 : j);
            y.set_bits(i * n + j, encode(y.format, yv));
        }
    }
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_int8(Registry& r) {
    cpu::add_quantize<Format::fp32>(r);
    cpu::add_quantize<Format::fp16>(r);
    cpu::add_quantize<Format::bf16>(r);
    cpu::add_gemm<Format::fp32>(r);
    cpu::add_gemm<Format::fp16>(r);
}

}  // namespace conform
