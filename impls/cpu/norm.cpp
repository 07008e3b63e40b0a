// CPU kernels of the norm family (rms_norm, layer_norm, l2_norm; docs/norm.md):
// an AVX2+FMA+F16C path and a portable scalar path sharing one algorithm
// (impls/cpu/norm_rows.hpp), plus the same-precision naive baselines.
#include <map>
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "impls/cpu/convert.hpp"
#include "impls/cpu/isa.hpp"
#include "impls/cpu/streaming.hpp"
#include "impls/registry.hpp"

namespace conform::cpu::norm_detail {

template <Format F> using St = typename Storage<F>::T;

enum class NormOp { rms, layer, l2 };
enum class Affine { none, weight, weight_bias };

const char* op_name(NormOp op) {
    return op == NormOp::rms ? "rms_norm" : op == NormOp::layer ? "layer_norm" : "l2_norm";
}

struct NormArgs {
    TensorView x, y;
    const void* w = nullptr;  // [n] in the kernel's format, or null
    const void* b = nullptr;
    std::int64_t rows = 0;
    long n = 0;
    double eps = 0;
    bool zero_centered = false;
};

void check_view(const TensorView& v, Format f, const char* what) {
    if (v.format != f) throw std::invalid_argument(std::string(what) + ": expected format " + name(f));
    if (v.rank > 0 && v.strides[v.rank - 1] != 1) throw std::invalid_argument(std::string(what) + ": last dim not contiguous");
}

// Unpack and validate a call: x [rows, n], weight [n], bias [n], y like x.
NormArgs norm_args(const KernelCall& call, Format f, NormOp op) {
    NormArgs a;
    a.x = call.in.at(0);
    a.y = call.out.at(0);
    check_view(a.x, f, "x");
    check_view(a.y, f, "y");
    a.rows = a.x.rows();
    a.n = static_cast<long>(a.x.cols());
    const std::size_t nin = op == NormOp::layer ? 3 : op == NormOp::rms ? 2 : 1;
    const char* names[] = {"x", "weight", "bias"};
    for (std::size_t i = 1; i < nin; ++i) {
        const TensorView& v = call.in.at(i);
        check_view(v, f, names[i]);
        if (v.numel() != a.n) throw std::invalid_argument(std::string(names[i]) + ": expected [n] elements");
        (i == 1 ? a.w : a.b) = v.data;
    }
    a.eps = call.params.get("eps", op == NormOp::layer ? 1e-5 : 1e-6);
    a.zero_centered = call.params.get("zero_centered", 0) != 0;
    return a;
}

// Below 2^-100 an fp32 sum of squares may have lost bits to underflow
// (absolute error ~n * 2^-150); at Inf it overflowed, or the row holds Inf/NaN.
inline bool needs_rescue(float d) { return !(d >= 0x1p-100f && d <= FLT_MAX); }

// Exact power-of-two prescale x' = x * 2^-k, eps' = eps * 2^-2k, with k chosen
// from max(amax^2, eps) so that amax' lies in [2^40, 2^41): squares neither
// overflow (n < 2^46) nor underflow for any element that matters.  The norms
// are invariant under this scaling, and k depends only on the exponent of
// amax (eps = 0), so norm(2^j x) == norm(x) bit for bit.  Returns false for
// rows holding Inf/NaN or all zeros with eps = 0, where plain IEEE arithmetic
// already yields the special value exact arithmetic gives.
template <Format F>
bool prescale_row(const St<F>* x, long n, double eps, std::vector<float>& out, double& eps_scaled) {
    float amax = 0;
    for (long i = 0; i < n; ++i) {
        const float a = std::fabs(Storage<F>::load(x, i));
        if (!(a <= FLT_MAX)) return false;
        amax = std::fmax(amax, a);
    }
    const double m2 = std::fmax(static_cast<double>(amax) * amax, eps);
    if (!(m2 > 0) || !std::isfinite(m2)) return false;
    const int k = (std::ilogb(m2) >> 1) - 40;  // floor(log2(m2) / 2) - 40
    const double c = std::ldexp(1.0, -k);      // may be outside float's range, hence double
    out.resize(static_cast<std::size_t>(n));
    for (long i = 0; i < n; ++i) out[i] = static_cast<float>(Storage<F>::load(x, i) * c);
    eps_scaled = eps * c * c;
    return true;
}

// ---- lane types -------------------------------------------------------------

// Eight fp32 lanes in plain C++: each operation rounds exactly like the
// corresponding AVX2 instruction (std::fma is a single rounding).
struct ScalarLanes {
    struct R {
        float v[8];
    };
    template <class Op>
    static R map(R a, R b, Op op) {
        for (int j = 0; j < 8; ++j) a.v[j] = op(a.v[j], b.v[j]);
        return a;
    }
    static R set1(float f) {
        R r;
        for (float& e : r.v) e = f;
        return r;
    }
    static R zero() { return set1(0.0f); }
    static R loadf(const float* p) {
        R r;
        std::memcpy(r.v, p, sizeof r.v);
        return r;
    }
    static void storef(float* p, R v) { std::memcpy(p, v.v, sizeof v.v); }
    template <Format F>
    static R load(const St<F>* p) {
        R r;
        for (int j = 0; j < 8; ++j) r.v[j] = Storage<F>::load(p, j);
        return r;
    }
    template <Format F>
    static void store(St<F>* p, R v) {
        for (int j = 0; j < 8; ++j) Storage<F>::store(p, j, v.v[j]);
    }
    template <Format F>
    static void store_stream(St<F>* p, R v) {
        store<F>(p, v);
    }
    static void fence() {}
    static R add(R a, R b) { return map(a, b, [](float x, float y) { return x + y; }); }
    static R sub(R a, R b) { return map(a, b, [](float x, float y) { return x - y; }); }
    static R mul(R a, R b) { return map(a, b, [](float x, float y) { return x * y; }); }
    static R fma(R a, R b, R c) {
        for (int j = 0; j < 8; ++j) c.v[j] = std::fma(a.v[j], b.v[j], c.v[j]);
        return c;
    }
};

struct Avx2Lanes {
    using R = __m256;
    CONFORM_AVX2 static R set1(float f) { return _mm256_set1_ps(f); }
    CONFORM_AVX2 static R zero() { return _mm256_setzero_ps(); }
    CONFORM_AVX2 static R loadf(const float* p) { return _mm256_loadu_ps(p); }
    CONFORM_AVX2 static void storef(float* p, R v) { _mm256_storeu_ps(p, v); }
    template <Format F>
    CONFORM_AVX2 static R load(const St<F>* p) { return load8_as<F>(p); }
    template <Format F>
    CONFORM_AVX2 static void store(St<F>* p, R v) { store8_as<F>(p, v); }
    template <Format F>
    CONFORM_AVX2 static void store_stream(St<F>* p, R v) { stream8_as<F>(p, v); }  // p 16-byte aligned
    static void fence() { _mm_sfence(); }
    CONFORM_AVX2 static R add(R a, R b) { return _mm256_add_ps(a, b); }
    CONFORM_AVX2 static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
    CONFORM_AVX2 static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
    CONFORM_AVX2 static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
};

// Avx2Lanes with bf16 stores by vcvtneps2bf16 (narrow8_bf16: the same bits
// as narrow8, in ~2 operations instead of ~10), and a 16-lane form W of the
// operations that norm_rows.hpp uses where kWide: the sums keep their four
// 8-lane accumulators as the two halves of two 16-lane ones (wide_steps),
// and the scale pass is lane by lane, so the avx512 copy below sums and
// scales exactly as the avx2 copy does (tests/avx512_test.cpp).  The bf16
// and fp16 kernels take it on CPUs with AVX512_BF16.
struct Avx512Bf16Lanes : Avx2Lanes {
    static constexpr bool kWide = true;
    using W = __m512;
    using Avx2Lanes::add, Avx2Lanes::sub, Avx2Lanes::mul, Avx2Lanes::fma;
    template <Format F>
    CONFORM_AVX512_BF16 static void store(St<F>* p, R v) {
        if constexpr (F == Format::bf16) store8_bf16(p, v);
        else Avx2Lanes::store<F>(p, v);
    }
    template <Format F>
    CONFORM_AVX512_BF16 static void store_stream(St<F>* p, R v) {  // p 16-byte aligned
        if constexpr (F == Format::bf16) stream8_bf16(p, v);
        else Avx2Lanes::store_stream<F>(p, v);
    }
    CONFORM_AVX512_BF16 static W set16(float f) { return _mm512_set1_ps(f); }
    CONFORM_AVX512_BF16 static W zero16() { return _mm512_setzero_ps(); }
    CONFORM_AVX512_BF16 static W loadf16(const float* p) { return _mm512_loadu_ps(p); }
    template <Format F>
    CONFORM_AVX512_BF16 static W load16(const St<F>* p) {
        return load16_as<F>(p);
    }
    // 16 results rounded as store does lane by lane (bf16: narrow16_bf16).
    template <Format F>
    CONFORM_AVX512_BF16 static __m256i narrow(W v) {
        if constexpr (F == Format::bf16) return narrow16_bf16(v);
        else return narrow16(v, F);
    }
    template <Format F>
    CONFORM_AVX512_BF16 static void store16(St<F>* p, W v) {
        if constexpr (F == Format::fp32) _mm512_storeu_ps(p, v);
        else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow<F>(v));
    }
    template <Format F>
    CONFORM_AVX512_BF16 static void store16_stream(St<F>* p, W v) {  // p 16-byte aligned, as store_stream
        static_assert(F != Format::fp32, "these lanes serve the bf16 and fp16 kernels, whose outputs are 16-bit");
        stream32_as_halves(p, narrow<F>(v));
    }
    // 32 results as two store16_stream would write them; p 64-byte aligned.
    template <Format F>
    CONFORM_AVX512_BF16 static void store32_stream(St<F>* p, W a, W b) {
        __m512i v;
        if constexpr (F == Format::bf16) v = narrow32_bf16(a, b);
        else v = concat256(narrow<F>(a), narrow<F>(b));
        _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
    }
    CONFORM_AVX512_BF16 static W add(W a, W b) { return _mm512_add_ps(a, b); }
    CONFORM_AVX512_BF16 static W sub(W a, W b) { return _mm512_sub_ps(a, b); }
    CONFORM_AVX512_BF16 static W mul(W a, W b) { return _mm512_mul_ps(a, b); }
    CONFORM_AVX512_BF16 static W fma(W a, W b, W c) { return _mm512_fmadd_ps(a, b, c); }
    CONFORM_AVX512_BF16 static R lo(W v) { return lo8(v); }
    CONFORM_AVX512_BF16 static R hi(W v) { return hi8(v); }
    CONFORM_AVX512_BF16 static W join(R lo, R hi) { return join16(lo, hi); }
};

namespace scalar {
using V = ScalarLanes;
#define CONFORM_NORM_TARGET
#include "impls/cpu/norm_rows.hpp"
#undef CONFORM_NORM_TARGET
}  // namespace scalar

namespace avx2 {
using V = Avx2Lanes;
#define CONFORM_NORM_TARGET CONFORM_AVX2
#include "impls/cpu/norm_rows.hpp"
#undef CONFORM_NORM_TARGET
}  // namespace avx2

namespace avx512_bf16 {
using V = Avx512Bf16Lanes;
#define CONFORM_NORM_TARGET CONFORM_AVX512_BF16
#include "impls/cpu/norm_rows.hpp"
#undef CONFORM_NORM_TARGET
}  // namespace avx512_bf16

// ---- naive same-precision baselines ------------------------------------------

// Every +, -, *, /, sqrt rounded to the storage format, in formula order:
// what plain code in that dtype computes.  Diagnostic only (never gated).
void naive_run(NormOp op, Format f, const KernelCall& call) {
    const NormArgs a = norm_args(call, f, op);
    auto q = [f](double v) { return decode(f, encode(f, v)); };
    const long n = a.n;
    const double nq = q(static_cast<double>(n)), eps = q(a.eps);
    auto vec = [&](const void* p) {  // the [n] weight/bias as a view, to read exact values
        TensorView v;
        v.data = const_cast<void*>(p);
        v.format = f;
        v.rank = 1;
        v.shape[0] = n;
        v.strides[0] = 1;
        return v;
    };
    const TensorView wv = vec(a.w), bv = vec(a.b);
    auto wt = [&](long i) {
        const double w = wv.value(i);
        return a.zero_centered && op == NormOp::rms ? q(1 + w) : w;
    };
    for (std::int64_t r = 0; r < a.rows; ++r) {
        auto x = [&](long i) { return a.x.value(r * n + i); };
        double mu = 0, s = 0;
        if (op == NormOp::layer) {
            for (long i = 0; i < n; ++i) mu = q(mu + x(i));
            mu = q(mu / nq);
        }
        for (long i = 0; i < n; ++i) {
            const double d = q(x(i) - mu);
            s = q(s + q(d * d));
        }
        const double rr = q(std::sqrt(q((op == NormOp::l2 ? s : q(s / nq)) + eps)));
        for (long i = 0; i < n; ++i) {
            double y = q(q(x(i) - mu) / rr);
            if (op != NormOp::l2) y = q(y * wt(i));
            if (op == NormOp::layer) y = q(y + bv.value(i));
            a.y.set_bits(r * n + i, encode(f, y));
        }
    }
}

// ---- registration --------------------------------------------------------------

template <NormOp Op, Format F>
void simd_kernel(const KernelCall& c) {
    if constexpr (F != Format::fp32)
        if (has_avx512_bf16()) return avx512_bf16::run<Op, F>(c);
    if (has_avx2()) avx2::run<Op, F>(c);
    else scalar::run<Op, F>(c);
}

template <NormOp Op, Format F>
void add_kernels(Registry& r) {
    const std::string op = op_name(Op), f = name(F);
    const std::string contract =
        "fp32 accumulation (FMA), 1/sqrtf(sum/n + eps) correctly rounded, (x*inv)*w in fp32, one rounding to " + f +
        "; exact power-of-two prescale of rows whose fp32 sum over/underflows";
    // layer_norm's mean is x[0] + sum (x - x[0]) / n (norm_rows.hpp, row_scales): its error follows the spread.
    const std::map<std::string, double> declared =
        Op == NormOp::layer ? std::map<std::string, double>{{"centred_mean", 1}} : std::map<std::string, double>{};
    KernelInfo simd = kernel_info(op, "simd", F, Format::fp32, Role::kernel,
                                  "AVX2+FMA+F16C, 4x8-lane accumulators (bf16/fp16 in 16-lane AVX-512 steps, bf16 "
                                  "rounded by vcvtneps2bf16, where the CPU has AVX512_BF16; scalar fallback without "
                                  "AVX2); " + contract, simd_kernel<Op, F>);
    KernelInfo scalar = kernel_info(op, "scalar", F, Format::fp32, Role::kernel,
                                    "portable scalar code, same lane order as cpu.simd (bit-identical); " + contract,
                                    scalar::run<Op, F>);
    simd.declared = scalar.declared = declared;
    r.add(std::move(simd));
    r.add(std::move(scalar));
    r.add(kernel_info(op, "naive", F, F, Role::baseline,
                      std::string("plain ") + f + " arithmetic: every add, multiply, division and sqrt rounded to " + f,
                      [](const KernelCall& c) { naive_run(Op, F, c); }));
}

template <NormOp Op>
void add_op(Registry& r) {
    add_kernels<Op, Format::fp32>(r);
    add_kernels<Op, Format::fp16>(r);
    add_kernels<Op, Format::bf16>(r);
}

}  // namespace conform::cpu::norm_detail

namespace conform {

void register_cpu_norm(Registry& r) {
    using cpu::norm_detail::NormOp;
    cpu::norm_detail::add_op<NormOp::rms>(r);
    cpu::norm_detail::add_op<NormOp::layer>(r);
    cpu::norm_detail::add_op<NormOp::l2>(r);
}

}  // namespace conform
