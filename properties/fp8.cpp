// Generators and properties of the FP8 family (docs/fp8.md, "Properties").
#include <algorithm>
#include <cmath>

#include "numerics/fp8.hpp"
#include "oracle/fp8.hpp"
#include "oracle/matmul.hpp"
#include "properties/common.hpp"

namespace conform::props {
namespace {

// The oracle sums every product in MPFR at two precisions: keep M N K near
// 2^16 (a quarter of matmul's: six kernels share the budget) by halving M, then N.
constexpr std::int64_t kMaxProducts = std::int64_t{1} << 16;

// Block shapes: DeepSeek-V3's 1 x 128 (activations) and 128 x 128
// (weights), and small ones so that small tensors hold many blocks and tails.
const std::vector<std::pair<int, int>>& block_shapes() {
    static const std::vector<std::pair<int, int>> b{{1, 128}, {128, 128}, {1, 16}, {4, 8}, {3, 5}};
    return b;
}

// A block's amax on a grid: t = m 2^e with m odd (1 one case in four: a
// power of two), so that s = RN_fp32(amax / max) = t exactly and (k + 1/2)
// FP8 ulps times t is exact in the input format: every entry but the
// block's maximum is an FP8 midpoint of x / s.  1 / t is inexact for m > 1,
// so a kernel that multiplies by the reciprocal lands beside the tie.
// Near ties (FP32 inputs, one case in three): m odd of 21 bits, so 448 t is
// still exact (s = t) while a midpoint times t (25-26 bits) rounds into
// FP32: x / s lies within 2^-24 of the midpoint without being on it, the
// FP32 quotient lands on it, and only its residual says which way to round
// (a kernel that converts the quotient, ties to even, rounds twice).
struct Fp8TieGrid {
    double t = 1;
    bool ok = true;
};

Fp8TieGrid fp8_tie_grid(Format in, std::uint64_t seed, int scale_exp) {
    std::mt19937_64 rng(seed ^ 0x2545f4914f6cdd1dull);
    const int mbits = in == Format::bf16 ? 2 : in == Format::fp16 ? 5 : 12;  // 3 bits of max, 5 of a midpoint, m's: <= p
    double m = rng() % 4 == 0 ? 1.0 : static_cast<double>(1 + 2 * (rng() % ((1u << mbits) - 1)));
    if (in == Format::fp32 && rng() % 3 == 0) m = static_cast<double>((1u << 20) + 1 + 2 * (rng() % (1u << 19)));  // near ties
    return {std::ldexp(m, std::clamp(scale_exp, -20, 10)), true};
}

// A midpoint between two neighbouring positive values of f below its max.
double midpoint(Format f, std::mt19937_64& rng) {
    const std::uint64_t code = rng() % encode(f, max_finite(f));
    return 0.5 * (decode(f, code) + decode(f, code + 1));
}

// Each block: its first entry +-448 t (the block's amax), the others FP8
// midpoints times t: an E4M3 kernel's s is t, an E5M2 kernel's t 2^-7
// (57344 = 448 2^7), so half the entries are E4M3 midpoints m t, half
// E5M2 midpoints m t 2^-7: ties for either format's kernel.
void fill_ties(Tensor& x, const Fp8QuantParams& qp, const Fp8TieGrid& g, std::mt19937_64& rng) {
    const std::int64_t rows = x.shape()[0], cols = x.shape()[1];
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
            const double sign = rng() % 2 ? 1 : -1;
            double v = max_finite(Format::fp8_e4m3);
            if (i % qp.br != 0 || j % qp.bc != 0)
                v = rng() % 2 ? midpoint(Format::fp8_e4m3, rng) : std::ldexp(midpoint(Format::fp8_e5m2, rng), -7);
            x.set_value(i * cols + j, sign * v * g.t);
        }
}

}  // namespace

// dims = {R, C}; params: a block shape, the scale kind, saturation, and one
// case in four a static scale 1.5 2^(k - 9) small enough that codes
// overflow (saturated or not).  The around_cap family builds tie blocks
// (FP32 scales, dynamic).  `format` follows the kernel's codes (the suite
// calls the kernel with the case's params; the kernel's q format decides).
rc::Gen<CaseSpec> gen_fp8_quantize_spec(Format fmt, GenOptions opt) {
    std::vector<Family> fams = value_families();
    fams.insert(fams.end(), {Family::around_cap, Family::around_cap, Family::near_overflow});
    return rc::gen::apply(
        [fmt](int rows, int cols, std::size_t blk, int pow2, int sat, int fixed, Family fam, int k, std::uint64_t seed,
              int specials) {
            const auto [br, bc] = block_shapes()[blk];
            const bool ties = fam == Family::around_cap;
            Params p({{"br", double(br)}, {"bc", double(bc)}, {"scale", ties ? 0.0 : double(pow2)},
                      {"saturate", double(sat)}, {"static_scale", fixed && !ties ? std::ldexp(1.5, k - 9) : 0.0}});
            return structured_spec("fp8_quantize", fmt, {rows, cols}, p, fam, k, seed, specials);
        },
        rc::gen::element(1, 2, 3, 5, 8, 130), rc::gen::element(1, 7, 16, 33, 128, 129, 300),
        rc::gen::inRange<std::size_t>(0, block_shapes().size()), rc::gen::inRange(0, 2), rc::gen::inRange(0, 2),
        rc::gen::element(0, 0, 0, 1), rc::gen::elementOf(fams), rc::gen::inRange(-8, 9),
        rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 4) : rc::gen::just(0));
}

Case build_fp8_quantize_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    std::int64_t rows = spec.dims.at(0), cols = spec.dims.at(1);
    while (rows > 1 && rows * cols > 20000) rows = (rows + 1) / 2;
    Tensor x(spec.format, {rows, cols});
    if (spec.families.at(0) == Family::around_cap) {
        fill_ties(x, fp8_quant_params(spec.params, std::nullopt), fp8_tie_grid(spec.format, spec.seed, spec.scale_exp), rng);
    } else {
        fill_values(x, spec.families.at(0), spec, 0, rng);
    }
    // One case in five has an all-zero first block: amax = 0, the floor scale.
    const Fp8QuantParams qp = fp8_quant_params(spec.params, std::nullopt);
    if (spec.seed % 5 == 0)
        for (std::int64_t i = 0; i < std::min(rows, qp.br); ++i)
            for (std::int64_t j = 0; j < std::min(cols, qp.bc); ++j) x.set_value(i * cols + j, 0.0);
    inject_specials(x, spec.specials, rng);
    c.inputs.push_back(std::move(x));
    return c;
}

// dims = {M, K, N}: K odd and even, below, at and past one and many 128-deep
// blocks (4096: DeepSeek-V3's hidden size), N past a 128-column scale
// block.  Codes from a value family in the kernel's FP8 format (values
// drawn in that format's range, rounded to it), scales FP32 2^[-12, 4]
// times [1/2, 1), a power of two one case in three.
rc::Gen<CaseSpec> gen_fp8_gemm_spec(Format fmt, GenOptions opt) {
    static const std::vector<Family> fams{Family::normal,   Family::uniform,       Family::heavy_tail,
                                          Family::outlier,  Family::constant,      Family::near_overflow,
                                          Family::subnormal, Family::bit_patterns, Family::saturated};
    return rc::gen::apply(
        [fmt](std::int64_t m, std::int64_t k, std::int64_t n, Family fa, Family fb, int pow2, std::uint64_t seed,
              int specials) {
            while (m > 1 && m * n * k > kMaxProducts) m = (m + 1) / 2;
            while (n > 1 && m * n * k > kMaxProducts) n = (n + 1) / 2;
            CaseSpec s = structured_spec("fp8_gemm", fmt, {m, k, n, pow2}, Params({{"block", 128.0}}), fa, 0, seed, specials);
            s.families = {fa, fb};
            return s;
        },
        rc::gen::element<std::int64_t>(1, 2, 3, 7, 17), rc::gen::element<std::int64_t>(1, 5, 127, 128, 129, 256, 300, 1000, 4096),
        rc::gen::element<std::int64_t>(1, 3, 16, 127, 129, 200), rc::gen::elementOf(fams), rc::gen::elementOf(fams),
        rc::gen::element(0, 0, 1), rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_fp8_gemm_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t m = spec.dims.at(0), k = spec.dims.at(1), n = spec.dims.at(2), blk = fp8_gemm_block(spec.params);
    const bool pow2 = spec.dims.size() > 3 && spec.dims[3] != 0;
    // A golden vector (a 16- or 32-bit format) stores codes exact in both FP8
    // formats, and the scales, as values of its own format.
    const bool golden = !is_fp8(spec.format);
    const Format codes = golden ? Format::fp8_e4m3 : spec.format, stored = golden ? spec.format : codes;
    auto scales = [&](std::int64_t r, std::int64_t cl) {
        Tensor s(golden ? spec.format : Format::fp32, {r, cl});
        std::uniform_real_distribution<double> U(0.5, 1);
        for (std::int64_t i = 0; i < s.numel(); ++i)
            s.set_value(i, std::ldexp(pow2 ? 1.0 : U(rng), -12 + static_cast<int>(rng() % 17)));
        return s;
    };
    const std::vector<std::vector<std::int64_t>> shapes{{m, k}, {k, n}};
    for (std::size_t o = 0; o < 2; ++o) {
        Tensor t(codes, shapes[o]), s(stored, shapes[o]);
        fill_values(t, spec.families.at(std::min(o, spec.families.size() - 1)), spec, o, rng);
        inject_specials(t, spec.specials, rng);
        for (std::int64_t i = 0; i < t.numel(); ++i) {
            // E5M2's 3 bits, then E4M3's range: a value of both formats
            const double v = golden ? decode(Format::fp8_e5m2, encode(Format::fp8_e5m2, t.value(i), Overflow::saturate)) : 0;
            s.set_value(i, golden ? decode(codes, encode(codes, v, Overflow::saturate)) : t.value(i));
        }
        c.inputs.push_back(std::move(s));
        c.inputs.push_back(o == 0 ? scales(m, ceil_div(k, blk)) : scales(ceil_div(k, blk), ceil_div(n, blk)));
    }
    return c;
}

namespace {

struct Quantized {
    Case c;
    std::vector<Tensor> out;  // q, scale
    Fp8QuantParams qp;
};

Quantized quantize_case(const KernelInfo& k, const CaseSpec& spec) {
    Quantized r{build_case(in_domain(spec)), {}, {}};
    r.out = run_kernel(k, r.c.params, r.c.views());
    r.qp = fp8_quant_params(r.c.params, r.out[0].format());
    return r;
}

std::string at(const char* what, std::int64_t i, std::int64_t j) {
    return std::string(what) + "[" + std::to_string(i) + ", " + std::to_string(j) + "]";
}

// Dequantizing gives x back within half an FP8 ulp of x / s, times s,
// wherever the block has a finite scale and x / s is within range: the
// codes are a rounding to nearest of x / s, whichever scale was chosen.
Testable fp8_round_trip(const KernelInfo& k) {
    return [&k] {
        const Quantized r = quantize_case(k, *gen_fp8_quantize_spec(k.in, GenOptions{}));
        const Tensor& x = r.c.inputs[0];
        const std::int64_t cols = x.shape()[1], sc = ceil_div(cols, r.qp.bc);
        const Format f = r.qp.format;
        for (std::int64_t i = 0; i < x.shape()[0]; ++i)
            for (std::int64_t j = 0; j < cols; ++j) {
                const double s = r.out[1].value(i / r.qp.br * sc + j / r.qp.bc), v = x.value(i * cols + j);
                if (!(s > 0) || !std::isfinite(s) || !std::isfinite(v) || std::fabs(v / s) > max_finite(f)) continue;
                const double back = r.out[0].value(i * cols + j) * s;  // exact: 4 x 24 bits
                const double tol = 0.5 * ulp_at(f, v / s) * s;
                if (!(std::fabs(back - v) <= tol))
                    RC_FAIL(at("q", i, j) + " * s = " + hexfloat(back) + " is " + hexfloat(std::fabs(back - v)) +
                            " from x = " + hexfloat(v) + ", beyond half an FP8 ulp times s (" + hexfloat(tol) + ")");
            }
    };
}

// Power-of-two scales: each is 2^j, the smallest with amax / s <= max (or
// the floor 2^-126), and every dequantized value q s is exact in FP32 (up
// to FLT_MAX: near FP32's top a code may round up past it).
Testable power_of_two_scale(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = *gen_fp8_quantize_spec(k.in, GenOptions{});
        spec.params.set("scale", 1);
        spec.params.set("static_scale", 0);
        if (spec.families.at(0) == Family::around_cap) spec.families = {Family::normal};
        const Quantized r = quantize_case(k, spec);
        const Tensor& x = r.c.inputs[0];
        const std::int64_t rows = x.shape()[0], cols = x.shape()[1], sc = ceil_div(cols, r.qp.bc);
        const double mx = max_finite(r.qp.format);
        std::vector<double> amax(static_cast<std::size_t>(r.out[1].numel()), 0.0);
        for (std::int64_t i = 0; i < rows * cols; ++i) {
            double& a = amax[static_cast<std::size_t>(i / cols / r.qp.br * sc + i % cols / r.qp.bc)];
            a = std::fmax(a, std::fabs(x.value(i)));
        }
        for (std::int64_t b = 0; b < r.out[1].numel(); ++b) {
            const double s = r.out[1].value(b), a = amax[static_cast<std::size_t>(b)];
            int e;
            const bool pow2 = std::frexp(s, &e) == 0.5;
            const bool least = s == kFp8ScaleFloor ? a / mx <= s : a / mx <= s && a / mx > s / 2;
            if (!pow2 || !least)
                RC_FAIL("scale[" + std::to_string(b) + "] = " + hexfloat(s) + " for amax " + hexfloat(a) +
                        " is not the least power of two (>= 2^-126) with amax / s <= " + hexfloat(mx));
        }
        for (std::int64_t i = 0; i < rows * cols; ++i) {
            const double q = r.out[0].value(i), s = r.out[1].value(i / cols / r.qp.br * sc + i % cols / r.qp.bc);
            // (a code rounded up at the top of FP32's range may dequantize past FLT_MAX)
            if (std::isfinite(q) && std::fabs(q * s) <= max_finite(Format::fp32) &&
                decode(Format::fp32, encode(Format::fp32, q * s)) != q * s)
                RC_FAIL(at("q", i / cols, i % cols) + " * s = " + hexfloat(q * s) + " is not exact in FP32");
        }
    };
}

// The exact values of a [R, C] code matrix times its scales (dequantized),
// rounded to FP32 as a dequantizing kernel stores them.
Tensor dequantized(const Tensor& q, const Tensor& s, std::int64_t br, std::int64_t bc) {
    const std::int64_t rows = q.shape()[0], cols = q.shape()[1], sc = s.shape()[1];
    Tensor d(Format::fp32, {rows, cols});
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) d.set_value(i * cols + j, q.value(i * cols + j) * s.value(i / br * sc + j / bc));
    return d;
}

// y of the FP8 GEMM against the FP32 matmul kernel on the dequantized
// operands: both are within their derived budgets of their exact values,
// which differ by the dequantization's two FP32 roundings per product
// (gamma_2 W), so |y_fp8 - y_mm| <= B_fp8 + B_mm + gamma_2 W (+ half an
// output ulp for a narrower y).  Ordinary families: every element judged.
Testable equals_dequantized_matmul(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(in_domain(*gen_fp8_gemm_spec(k.in, GenOptions{})));
        const std::int64_t blk = fp8_gemm_block(c.params);
        const Tensor a = dequantized(c.inputs[0], c.inputs[1], 1, blk), b = dequantized(c.inputs[2], c.inputs[3], blk, blk);
        const auto y = run_kernel(k, c.params, c.views());
        const auto ym = run_kernel(*builtin_registry().find("cpu.simd.matmul.fp32"), Params(), {a.view(), b.view()});
        std::vector<double> approx(static_cast<std::size_t>(ym[0].numel()));
        for (std::int64_t i = 0; i < ym[0].numel(); ++i) approx[static_cast<std::size_t>(i)] = ym[0].value(i);
        const auto bf = oracle::fp8_gemm_bound(c.params, c.views(), {approx}, Format::fp32, {Format::fp32})[0];
        const auto bm = oracle::matmul_bound(Params(), {a.view(), b.view()}, {approx}, Format::fp32, {Format::fp32})[0];
        const double g2 = oracle::gamma_rigorous(2, unit_roundoff(Format::fp32));
        const Format out = y[0].format();
        const std::int64_t kk = a.shape()[1], n = b.shape()[1];
        for (std::int64_t e = 0; e < y[0].numel(); ++e) {
            double w = 0;  // sum |a b| of the exact dequantized values
            for (std::int64_t t = 0; t < kk; ++t)
                w += std::fabs(c.inputs[0].value(e / n * kk + t) * c.inputs[1].value(e / n * ceil_div(kk, blk) + t / blk) *
                               c.inputs[2].value(t * n + e % n) *
                               c.inputs[3].value(t / blk * ceil_div(n, blk) + e % n / blk));
            const double got = y[0].value(e), want = ym[0].value(e);
            const double bfe = bf[static_cast<std::size_t>(e)], bme = bm[static_cast<std::size_t>(e)];
            if (!std::isfinite(want) || !(bfe >= 0) || !(bme >= 0) || !std::isfinite(w)) continue;
            double tol = bfe + bme + g2 * w;
            if (out != Format::fp32) tol += 0.5 * ulp_at(out, std::fabs(want) + tol);
            if (!(std::fabs(got - want) <= tol))
                RC_FAIL("y[" + std::to_string(e) + "] = " + hexfloat(got) + ", matmul of the dequantized operands " +
                        hexfloat(want) + ": differ by " + hexfloat(std::fabs(got - want)) + " > " + hexfloat(tol));
        }
    };
}

}  // namespace

namespace {

// One large first block (products 256 * 256: block sum 2^23), then blocks of
// products 20 * 20 = 400, below half an ulp (512) of 2^23 in a 14-bit
// accumulator: a kernel that promotes every block sums them exactly in any
// accumulator of 14 bits or more (block sums of 51200), one that runs one
// accumulator over all of K loses every one -- at 20 times a declared 14-bit
// budget.  Unit scales: everything is an integer below 2^24, y exact in FP32.
Testable promotion_every_block(const KernelInfo& k) {
    return [&k] {
        const std::int64_t kk = *rc::gen::element<std::int64_t>(1024, 4096), n = *rc::gen::element<std::int64_t>(1, 3);
        Tensor a(k.in, {1, kk}), b(k.in, {kk, n}), sa(Format::fp32, {1, ceil_div(kk, 128)}),
            sb(Format::fp32, {ceil_div(kk, 128), 1});
        for (std::int64_t t = 0; t < kk; ++t) {
            a.set_value(t, t < 128 ? 256 : 20);
            for (std::int64_t j = 0; j < n; ++j) b.set_value(t * n + j, t < 128 ? 256 : 20);
        }
        for (Tensor* s : {&sa, &sb})
            for (std::int64_t i = 0; i < s->numel(); ++i) s->set_value(i, 1);
        const CaseResult r = check_case(k, Params({{"block", 128.0}}), {a.view(), sa.view(), b.view(), sb.view()});
        if (!r.passed()) RC_FAIL("K = " + std::to_string(kk) + ", a large first block then products below half a 14-bit ulp: " + r.message);
    };
}

}  // namespace

void add_fp8_properties(std::vector<PropertyDef>& v) {
    auto quant = [](const OpSpec& op) { return op.name == "fp8_quantize"; };
    auto gemm = [](const OpSpec& op) { return op.name == "fp8_gemm"; };
    v.push_back({"round_trip", "q s is within half an FP8 ulp (of x / s) times s of x wherever x / s is in range", quant,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return fp8_round_trip(k); }, 2});
    v.push_back({"power_of_two_scale", "scale kind 1: each scale the least power of two with amax / s <= max, and q s "
                                       "exact in FP32",
                 quant, [](const KernelInfo& k, const RunConfig&, Stats*) { return power_of_two_scale(k); }, 2});
    v.back().needs = {"scale"};
    v.push_back({"equals_dequantized_matmul", "y within both budgets (and the dequantization's rounding) of the FP32 "
                                              "matmul kernel on the dequantized operands",
                 gemm, [](const KernelInfo& k, const RunConfig&, Stats*) { return equals_dequantized_matmul(k); }, 4});
    v.push_back({"promotion_every_block", "products below half a 14-bit ulp of an earlier block's sum are kept: the "
                                          "accumulator promoted every 128 products",
                 gemm, [](const KernelInfo& k, const RunConfig&, Stats*) { return promotion_every_block(k); }, 8});
}

}  // namespace conform::props
