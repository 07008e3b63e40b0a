// The FP8 GEMM kernels (docs/fp8.md "Kernels") and the family's registry
// entries.  Per K block of `block` products: the block sum in FP32 (the
// chain acc = fma(a, b, acc) from +0, k ascending), then promoted: times
// scale_a, times scale_b, added to the FP32 accumulator of y_ij.  The SIMD
// kernel decodes each block of codes to FP32 through a 256-entry table and
// runs the FP32 matmul kernel on it (the same chain, so the same bits).
#include <cmath>
#include <vector>

#include "impls/cpu/fp8.hpp"
#include "impls/cpu/matmul.hpp"
#include "numerics/fp8.hpp"

namespace conform::cpu {
namespace {

// Every code's value as a float (exact: at most 4 significant bits).
std::vector<float> code_table(Format f) {
    std::vector<float> t(256);
    for (int i = 0; i < 256; ++i) t[static_cast<std::size_t>(i)] = static_cast<float>(decode(f, static_cast<std::uint64_t>(i)));
    return t;
}

const std::vector<float>& table(Format f) {
    static const std::vector<float> e4m3 = code_table(Format::fp8_e4m3), e5m2 = code_table(Format::fp8_e5m2);
    return f == Format::fp8_e4m3 ? e4m3 : e5m2;
}

// A value rounded to 14 significant bits (RNE): the emulated accumulator
// of the no-promotion mutant (Hopper's FP8 tensor cores keep about 14).
float round14(float v) {
    if (!std::isfinite(v) || v == 0) return v;
    int e;
    std::frexp(v, &e);
    const double q = std::ldexp(1.0, e - 14);
    return static_cast<float>(std::nearbyint(v / q) * q);
}

struct Operands {
    const TensorView &a, &sa, &b, &sb;
    Fp8GemmDims d;
    std::int64_t nb, sbn;
    const std::vector<float>& lut;
    float sa_at(std::int64_t i, std::int64_t kb) const { return static_cast<float>(sa.value(i * nb + kb)); }
    float sb_at(std::int64_t kb, std::int64_t j) const { return static_cast<float>(sb.value(kb * sbn + j / d.block)); }
    float a_at(std::int64_t i, std::int64_t k) const { return lut[a.row<std::uint8_t>(i)[k]]; }
    float b_at(std::int64_t k, std::int64_t j) const { return lut[b.row<std::uint8_t>(k)[j]]; }
};

// The promotion of one block sum: the same expression in both kernels.
float promote(float acc, float block_sum, float sa, float sb) { return acc + (block_sum * sa) * sb; }

float element_scalar(const Operands& o, std::int64_t i, std::int64_t j, const Fp8Flaws& f) {
    float acc = 0;
    for (std::int64_t kb = 0; kb < o.nb; ++kb) {
        const std::int64_t k0 = kb * o.d.block, k1 = std::min(o.d.k, k0 + o.d.block);
        const float sa = o.sa_at(i, f.a_scale_by_column ? std::min(j / o.d.block, o.nb - 1) : kb), sb = o.sb_at(kb, j);
        if (f.no_promotion) {  // every scaled product into one 14-bit accumulator
            for (std::int64_t k = k0; k < k1; ++k) acc = round14(acc + (o.a_at(i, k) * o.b_at(k, j) * sa) * sb);
            continue;
        }
        float s = 0;
        for (std::int64_t k = k0; k < k1; ++k) s = std::fma(o.a_at(i, k), o.b_at(k, j), s);
        acc = promote(acc, s, sa, sb);
    }
    return acc;
}

// Block kb of the codes as FP32 matrices A_kb [M, len] and B_kb [len, N],
// their product by the FP32 matmul kernel, then promoted into acc.
void block_simd(const Operands& o, std::int64_t kb, std::vector<float>& acc) {
    const std::int64_t m = o.d.m, n = o.d.n, k0 = kb * o.d.block, len = std::min(o.d.k, k0 + o.d.block) - k0;
    Tensor a(Format::fp32, {m, len}), b(Format::fp32, {len, n}), c(Format::fp32, {m, n});
    auto* pa = static_cast<float*>(a.data());
    auto* pb = static_cast<float*>(b.data());
    for (std::int64_t i = 0; i < m; ++i) {
        const std::uint8_t* row = o.a.row<std::uint8_t>(i) + k0;
        for (std::int64_t t = 0; t < len; ++t) pa[i * len + t] = o.lut[row[t]];
    }
    for (std::int64_t t = 0; t < len; ++t) {
        const std::uint8_t* row = o.b.row<std::uint8_t>(k0 + t);
        for (std::int64_t j = 0; j < n; ++j) pb[t * n + j] = o.lut[row[j]];
    }
    matmul_into(a.view(), b.view(), c.view(), best_matmul_path(Format::fp32));
    const auto* pc = static_cast<const float*>(c.data());
    std::vector<float> sb(static_cast<std::size_t>(n));  // B's scale of each column for this block
    for (std::int64_t j = 0; j < n; ++j) sb[static_cast<std::size_t>(j)] = o.sb_at(kb, j);
    for (std::int64_t i = 0; i < m; ++i) {
        const float sa = o.sa_at(i, kb);
        float* out = acc.data() + i * n;
        for (std::int64_t j = 0; j < n; ++j) out[j] = promote(out[j], pc[i * n + j], sa, sb[static_cast<std::size_t>(j)]);
    }
}

}  // namespace

void fp8_gemm_call(const KernelCall& call, bool simd, const Fp8Flaws& f) {
    const Fp8GemmDims d = fp8_gemm_dims(call.in, call.params);
    const TensorView &a = call.in[0], &b = call.in[2], &y = call.out.at(0);
    if (!is_fp8(a.format) || b.format != a.format)
        throw std::invalid_argument(std::string("fp8_gemm: inputs 'a' and 'b' must share one FP8 format, are ") +
                                    name(a.format) + " and " + name(b.format));
    const Operands o{a, call.in[1], b, call.in[3], d, ceil_div(d.k, d.block), ceil_div(d.n, d.block), table(a.format)};
    std::vector<float> acc(static_cast<std::size_t>(d.m * d.n), 0.0f);
    if (simd && !f.no_promotion && !f.a_scale_by_column) {
        for (std::int64_t kb = 0; kb < o.nb; ++kb) block_simd(o, kb, acc);
    } else {
        for (std::int64_t i = 0; i < d.m; ++i)
            for (std::int64_t j = 0; j < d.n; ++j) acc[static_cast<std::size_t>(i * d.n + j)] = element_scalar(o, i, j, f);
    }
    for (std::int64_t e = 0; e < d.m * d.n; ++e) y.set_bits(e, encode(y.format, acc[static_cast<std::size_t>(e)]));
}

}  // namespace conform::cpu

namespace conform {
namespace {

// Baseline: plain BF16 arithmetic on the dequantized operands (every
// dequantization, product and addition rounded to BF16).
void naive_fp8_gemm(const KernelCall& c) {
    const Fp8GemmDims d = fp8_gemm_dims(c.in, c.params);
    const std::int64_t nb = ceil_div(d.k, d.block), sbn = ceil_div(d.n, d.block);
    auto bf = [](double v) { return decode(Format::bf16, encode(Format::bf16, v)); };
    for (std::int64_t i = 0; i < d.m; ++i)
        for (std::int64_t j = 0; j < d.n; ++j) {
            double acc = 0;
            for (std::int64_t k = 0; k < d.k; ++k) {
                const double a = bf(c.in[0].value(i * d.k + k) * c.in[1].value(i * nb + k / d.block));
                const double b = bf(c.in[2].value(k * d.n + j) * c.in[3].value(k / d.block * sbn + j / d.block));
                acc = bf(acc + bf(a * b));
            }
            c.out[0].set_bits(i * d.n + j, encode(c.out[0].format, acc));
        }
}

KernelInfo fp8_info(const std::string& op, const std::string& variant, const std::string& tail, Format in, Format out,
                    Role role, std::string description, KernelFn fn) {
    KernelInfo k;
    k.name = "cpu." + variant + "." + op + "." + tail;
    k.op = op;
    k.variant = variant;
    k.in = in, k.out = out, k.acc = Format::fp32;
    k.role = role;
    k.description = std::move(description);
    k.fn = std::move(fn);
    return k;
}

// Named by the input format, then the codes' format when it is not E4M3.
void add_quantize(Registry& r, Format in, Format codes, bool simd) {
    const std::string tail = std::string(name(in)) + (codes == Format::fp8_e4m3 ? "" : std::string(".") + name(codes));
    KernelInfo k = fp8_info("fp8_quantize", simd ? "simd" : "scalar", tail, in, codes, Role::kernel,
                            std::string(simd ? "AVX2 lanes (amax, division, integer FP8 rounding), the portable loop "
                                               "without AVX2; "
                                             : "portable loop; ") +
                                "s by one FP32 division (the power of two from amax's exponent), q = x / s in FP32 "
                                "rounded to " + name(codes) + " on the bits, the FP8 midpoints decided by the exact "
                                "residual fma(-q, s, x)",
                            [simd](const KernelCall& c) { cpu::fp8_quantize_call(c, simd); });
    k.out_formats = {codes, Format::fp32};
    r.add(std::move(k));
}

// Named by the codes' format, then the output format when it is not BF16.
void add_gemm(Registry& r, Format codes, Format out) {
    const std::string tail = std::string(name(codes)) + (out == Format::bf16 ? "" : std::string(".") + name(out));
    const std::string contract = std::string("per 128-deep K block the FP32 fma chain from +0, then acc += (sum * "
                                             "scale_a) * scale_b in FP32, y rounded once to ") + name(out);
    r.add(fp8_info("fp8_gemm", "simd", tail, codes, out, Role::kernel,
                   "codes decoded by a 256-entry table, each K block by the FP32 matmul kernel (cpu.simd.matmul); " + contract,
                   [](const KernelCall& c) { cpu::fp8_gemm_call(c, true); }));
    r.add(fp8_info("fp8_gemm", "scalar", tail, codes, out, Role::kernel, "portable loop; " + contract,
                   [](const KernelCall& c) { cpu::fp8_gemm_call(c, false); }));
}

}  // namespace

void register_cpu_fp8(Registry& r) {
    for (bool simd : {true, false}) {
        add_quantize(r, Format::fp32, Format::fp8_e4m3, simd);
        add_quantize(r, Format::bf16, Format::fp8_e4m3, simd);
    }
    add_quantize(r, Format::bf16, Format::fp8_e5m2, true);
    add_quantize(r, Format::fp32, Format::fp8_e5m2, false);
    add_gemm(r, Format::fp8_e4m3, Format::bf16);
    add_gemm(r, Format::fp8_e4m3, Format::fp32);
    add_gemm(r, Format::fp8_e5m2, Format::bf16);
    KernelInfo naive = fp8_info("fp8_gemm", "naive", "fp8_e4m3", Format::fp8_e4m3, Format::bf16, Role::baseline,
                                "plain BF16 arithmetic: every dequantized operand, product and addition rounded to BF16",
                                naive_fp8_gemm);
    naive.acc = Format::bf16;
    r.add(std::move(naive));
}

}  // namespace conform
