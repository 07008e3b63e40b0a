// Generators and properties of dequantize and smooth_quant (docs/int8.md,
// "Properties"); quantize and int8_gemm are in properties/int8.cpp.
#include <algorithm>
#include <cmath>

#include "oracle/bound.hpp"
#include "oracle/int8.hpp"
#include "oracle/structured.hpp"
#include "properties/common.hpp"

namespace conform::props {
namespace {

// A scale 2^e times a significand of `bits` bits (the top one set, the
// lowest set too, so products with power-of-two codes are midpoints of a
// format of bits - 1 bits: fp16 ties at 12 bits, fp32 ties at 25 with code 3).
double scale_value(int e, int bits, std::mt19937_64& rng) {
    const std::uint64_t top = std::uint64_t{1} << (bits - 1);
    const std::uint64_t m = top | (rng() & (top - 1)) | 1;
    return std::ldexp(static_cast<double>(m), e - (bits - 1));
}

std::int64_t groups_of(int axis, std::int64_t rows, std::int64_t cols) { return axis == 0 ? 1 : axis == 1 ? rows : cols; }

// The codes of a dequantize case: uniform over all 256 (normal), the
// extremes -128, -127, 127 (saturated), small powers of two and +-3 (around_cap:
// with the 9-, 12- and 24-bit scales, exact midpoints of bf16, fp16 and fp32),
// 0 (constant).
constexpr int kScaleBits[] = {9, 12, 24};
double draw_code(Family fam, std::mt19937_64& rng) {
    static const double extremes[] = {-128, -127, 127};
    static const double ties[] = {1, -1, 2, -2, 3, -3, 4, -8, 16, -64};
    switch (fam) {
        case Family::saturated: return extremes[rng() % 3];
        case Family::around_cap: return ties[rng() % 10];
        case Family::constant: return 0;
        default: return static_cast<double>(static_cast<int>(rng() % 256) - 128);
    }
}

const std::vector<Family>& dequantize_families() {
    static const std::vector<Family> f = {Family::normal, Family::normal, Family::saturated, Family::around_cap,
                                          Family::around_cap, Family::constant};
    return f;
}

}  // namespace

// dims = {rows, cols}; params axis; scale_exp: the scales' binade, from FP32
// subnormals to 2^120 (products past FP32's and FP16's range included).
rc::Gen<CaseSpec> gen_dequantize_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](int rows, int cols, int axis, Family fam, int e, std::uint64_t seed, int specials) {
            return structured_spec("dequantize", fmt, {rows, cols}, Params({{"axis", double(axis)}}), fam, e, seed, specials);
        },
        rc::gen::element(1, 2, 3, 7, 16), rc::gen::element(1, 3, 8, 9, 16, 33, 64), rc::gen::inRange(0, 3),
        rc::gen::elementOf(dequantize_families()),
        rc::gen::element(-140, -126, -40, -24, -20, -14, -8, -4, -2, 0, 0, 3, 8, 12, 15, 40, 120),
        rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_dequantize_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t rows = spec.dims.at(0), cols = spec.dims.at(1);
    const int axis = static_cast<int>(spec.params.get("axis", 0));
    Tensor q(is_float(spec.format) ? spec.format : Format::int8, {rows, cols});
    for (std::int64_t i = 0; i < q.numel(); ++i) q.set_value(i, draw_code(spec.families.at(0), rng));
    Tensor s(is_float(spec.format) ? spec.format : Format::fp32, {groups_of(axis, rows, cols)});
    for (std::int64_t g = 0; g < s.numel(); ++g)
        s.set_value(g, scale_value(spec.scale_exp + static_cast<int>(rng() % 5) - 2, kScaleBits[rng() % 3], rng));
    inject_specials(s, spec.specials, rng);
    c.inputs.push_back(std::move(q));
    c.inputs.push_back(std::move(s));
    return c;
}

namespace {

// Outlier channels: 1 to 3 columns of x scaled by 2^5 .. 2^10 (SmoothQuant's
// case), and one case in four a zero channel (a column of x or a row of w).
void shape_channels(Tensor& x, Tensor& w, const CaseSpec& spec, std::mt19937_64& rng) {
    const std::int64_t t = spec.dims[0], c = spec.dims[1], n = spec.dims[2];
    const double mx = max_finite(x.format());
    if (spec.families[0] == Family::outlier)
        for (std::uint64_t k = 0, count = 1 + rng() % 3; k < count; ++k) {
            const std::int64_t j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c));
            const int e = 5 + static_cast<int>(rng() % 6);
            for (std::int64_t i = 0; i < t; ++i) x.set_value(i * c + j, std::clamp(std::ldexp(x.value(i * c + j), e), -mx, mx));
        }
    if (rng() % 4 != 0) return;
    const std::int64_t j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c));
    if (rng() % 2)
        for (std::int64_t i = 0; i < t; ++i) x.set_value(i * c + j, 0);
    else
        for (std::int64_t k = 0; k < n; ++k) w.set_value(j * n + k, 0);
}

}  // namespace

// dims = {T, C, N}; alpha from 0 to 1 (0.5 and SmoothQuant's 0.85 most often);
// x from every value family (outlier: outlier channels), w N(0, 1) / 16.
rc::Gen<CaseSpec> gen_smooth_quant_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](int t, int c, int n, double alpha, Family fam, int k, std::uint64_t seed, int specials) {
            return structured_spec("smooth_quant", fmt, {t, c, n}, Params({{"alpha", alpha}}), fam, k, seed, specials);
        },
        rc::gen::element(1, 2, 3, 7, 16, 33), rc::gen::element(1, 3, 8, 9, 16, 17, 64),
        rc::gen::element(1, 5, 8, 16, 33), rc::gen::element(0.5, 0.5, 0.85, 0.0, 0.25, 0.75, 1.0),
        rc::gen::elementOf(value_families()), rc::gen::inRange(-8, 9), rc::gen::arbitrary<std::uint64_t>(),
        opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_smooth_quant_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t t = spec.dims.at(0), ch = spec.dims.at(1), n = spec.dims.at(2);
    Tensor x(spec.format, {t, ch}), w(spec.format, {ch, n});
    fill_values(x, spec.families.at(0), spec, 0, rng);
    CaseSpec ws = spec;
    ws.scale_exp = -4;
    fill_values(w, Family::normal, ws, 1, rng);
    shape_channels(x, w, spec, rng);
    inject_specials(x, spec.specials, rng);
    inject_specials(w, spec.specials, rng);
    c.inputs.push_back(std::move(x));
    c.inputs.push_back(std::move(w));
    return c;
}

namespace {

// ---- dequantize ------------------------------------------------------------------

// Every element the correctly rounded product (ties to even included: the
// derived bound of 1/2 ulp admits either neighbour of a midpoint).
Testable correctly_rounded(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(in_domain(*gen_dequantize_spec(k.in, GenOptions{})));
        const CaseResult r = check_case(k, c.params, c.views(), nullptr);
        std::string where;
        if (!identical(r.outputs[0], r.all_ref[0], &where)) RC_FAIL("y is not the correctly rounded q * scale: " + where);
    };
}

// x in y's format, quantized by the oracle (dynamic scales), dequantized by
// the kernel: |y - x| <= s/2 + 1/2 ulp_out(q s) for every in-range element
// (|x| <= 127.5 s; all of them for dynamic scales unless s underflows).
Testable round_trip(const KernelInfo& k) {
    return [&k] {
        const CaseSpec spec = in_domain(*gen_quantize_spec(k.out, GenOptions{}));
        Params p({{"axis", spec.params.get("axis", 0)}});
        const Case qc = build_case(spec);
        const std::int64_t rows = spec.dims[0], cols = spec.dims[1];
        const oracle::QuantAxis axis = oracle::quant_axis(p);
        std::vector<double> x(static_cast<std::size_t>(rows * cols));
        for (std::int64_t i = 0; i < rows * cols; ++i) x[static_cast<std::size_t>(i)] = qc.inputs[0].value(i);
        const std::vector<double> scales = oracle::quant_scales(x, rows, cols, axis);
        const std::vector<std::int8_t> codes = oracle::quantize(x, rows, cols, axis, scales);
        Tensor q(Format::int8, {rows, cols}), s(Format::fp32, {static_cast<std::int64_t>(scales.size())});
        for (std::int64_t i = 0; i < q.numel(); ++i) q.set_value(i, codes[static_cast<std::size_t>(i)]);
        for (std::int64_t g = 0; g < s.numel(); ++g) s.set_value(g, scales[static_cast<std::size_t>(g)]);
        const auto y = run_kernel(k, p, {q.view(), s.view()});
        for (std::int64_t i = 0; i < q.numel(); ++i) {
            const double sc = scales[static_cast<std::size_t>(oracle::scale_index(axis, i / cols, i % cols))];
            const double xi = x[static_cast<std::size_t>(i)], qs = q.value(i) * sc;
            if (!(std::fabs(xi) <= 127.5 * sc)) continue;  // saturated, non-finite or an underflowed scale
            const double budget = sc / 2 + 0.5 * ulp_at(k.out, qs);
            if (!(std::fabs(y[0].value(i) - xi) <= budget))
                RC_FAIL("x = " + hexfloat(xi) + ", scale " + hexfloat(sc) + ", code " + std::to_string(q.value(i)) +
                        ": y = " + hexfloat(y[0].value(i)) + " is further than s/2 + 1/2 ulp = " + hexfloat(budget));
        }
    };
}

// Changing the scale of one group changes no element of any other group.
Testable scale_locality(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = in_domain(*gen_dequantize_spec(k.in, GenOptions{}));
        spec.params.set("axis", 1 + static_cast<double>(spec.seed % 2));
        spec.dims[0] = std::max<std::int64_t>(spec.dims[0], 2);
        spec.dims[1] = std::max<std::int64_t>(spec.dims[1], 3);
        if (spec.families[0] == Family::constant) spec.families = {Family::normal};
        const Case c = build_case(spec);
        Tensor s2 = c.inputs[1];
        const std::int64_t g = static_cast<std::int64_t>((spec.seed >> 1) % static_cast<std::uint64_t>(s2.numel()));
        s2.set_value(g, s2.value(g) * 3);
        const auto a = run_kernel(k, c.params, c.views()), b = run_kernel(k, c.params, {c.inputs[0].view(), s2.view()});
        const bool token = spec.params.get("axis", 0) == 1;
        const std::int64_t cols = spec.dims[1];
        for (std::int64_t i = 0; i < a[0].numel(); ++i)
            if ((token ? i / cols : i % cols) != g && a[0].bits(i) != b[0].bits(i))
                RC_FAIL("tripling the scale of " + std::string(token ? "token " : "channel ") + std::to_string(g) +
                        " changed y[" + std::to_string(i / cols) + ", " + std::to_string(i % cols) + "]");
    };
}

// ---- smooth_quant ----------------------------------------------------------------

struct SmoothRun {
    Case c;
    std::vector<Tensor> got;
    oracle::StructuredResult ref;
    std::vector<std::vector<double>> bound;  // xs, ws, s
};

SmoothRun run_smooth(const KernelInfo& k, CaseSpec spec) {
    SmoothRun r{build_case(spec), {}, {}, {}};
    r.got = run_kernel(k, r.c.params, r.c.views());
    std::vector<Format> formats;
    for (std::size_t o = 0; o < 3; ++o) formats.push_back(output_format(k, o));
    r.ref = oracle::evaluate_structured("smooth_quant", r.c.params, r.c.views(), formats);
    r.bound = oracle::smooth_quant_bound(r.c.params, r.c.views(), r.ref.exact, k.acc, formats);
    return r;
}

// xs ws = x w (the identity holds for any s): every element of the kernel's
// xs ws within sum_j |xs| B_w + B_x |ws| + B_x B_w of x w, B the derived
// per-element bounds, plus the FP64 evaluation of both sums (products of
// 24-bit values exact, gamma_C on the sums of magnitudes).
Testable product_preserved(const KernelInfo& k) {
    return [&k] {
        const SmoothRun r = run_smooth(k, in_domain(*gen_smooth_quant_spec(k.in, GenOptions{})));
        const std::int64_t t = r.c.inputs[0].shape()[0], c = r.c.inputs[0].shape()[1], n = r.c.inputs[1].shape()[1];
        const double g = oracle::gamma(static_cast<double>(c), unit_roundoff(Format::fp64)), slack = 1 + 4 * unit_roundoff(Format::fp64);
        for (std::int64_t i = 0; i < t; ++i)
            for (std::int64_t o = 0; o < n; ++o) {
                double got = 0, want = 0, mag = 0, budget = 0;
                for (std::int64_t j = 0; j < c; ++j) {
                    const auto ix = static_cast<std::size_t>(i * c + j), iw = static_cast<std::size_t>(j * n + o);
                    const double xs = r.got[0].value(i * c + j), ws = r.got[1].value(j * n + o);
                    const double x = r.c.inputs[0].value(i * c + j), w = r.c.inputs[1].value(j * n + o);
                    got += xs * ws, want += x * w, mag += std::fabs(xs * ws) + std::fabs(x * w);
                    budget += (std::fabs(r.ref.exact[0][ix]) * r.bound[1][iw] + r.bound[0][ix] * std::fabs(r.ref.exact[1][iw]) +
                               r.bound[0][ix] * r.bound[1][iw]) * slack;
                }
                if (!std::isfinite(got) || !std::isfinite(want)) continue;  // an overflowed element: judged by within_budget
                budget += g * mag;
                if (!(std::fabs(got - want) <= budget))
                    RC_FAIL("(xs ws)[" + std::to_string(i) + ", " + std::to_string(o) + "] = " + hexfloat(got) + ", x w = " +
                            hexfloat(want) + ": off by " + hexfloat(std::fabs(got - want)) + " > " + hexfloat(budget));
            }
    };
}

// alpha = 1/2: max_t |xs_tj| = sqrt(max|x_j| max|w_j|) = max_k |ws_jk| for every
// channel with both maxima nonzero; the kernel's maxima within the largest
// element bounds of the column of xs and the row of ws.
Testable alpha_half_balances(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = in_domain(*gen_smooth_quant_spec(k.in, GenOptions{}));
        spec.params.set("alpha", 0.5);
        const SmoothRun r = run_smooth(k, spec);
        const std::int64_t t = spec.dims[0], c = spec.dims[1], n = spec.dims[2];
        for (std::int64_t j = 0; j < c; ++j) {
            double mx = 0, mw = 0, bx = 0, bw = 0, ex = 0, ew = 0;
            for (std::int64_t i = 0; i < t; ++i) {
                mx = std::max(mx, std::fabs(r.got[0].value(i * c + j)));
                ex = std::max(ex, std::fabs(r.c.inputs[0].value(i * c + j)));
                bx = std::max(bx, r.bound[0][static_cast<std::size_t>(i * c + j)]);
            }
            for (std::int64_t o = 0; o < n; ++o) {
                mw = std::max(mw, std::fabs(r.got[1].value(j * n + o)));
                ew = std::max(ew, std::fabs(r.c.inputs[1].value(j * n + o)));
                bw = std::max(bw, r.bound[1][static_cast<std::size_t>(j * n + o)]);
            }
            if (ex == 0 || ew == 0 || !std::isfinite(mx) || !std::isfinite(mw)) continue;
            if (!(std::fabs(mx - mw) <= bx + bw))
                RC_FAIL("channel " + std::to_string(j) + " (max|x| " + hexfloat(ex) + ", max|w| " + hexfloat(ew) +
                        "): max|xs| " + hexfloat(mx) + " vs max|ws| " + hexfloat(mw) + ", allowed " + hexfloat(bx + bw));
        }
    };
}

}  // namespace

void add_int8_quant_properties(std::vector<PropertyDef>& v) {
    auto dequantize = [](const OpSpec& op) { return op.name == "dequantize"; };
    auto smooth = [](const OpSpec& op) { return op.name == "smooth_quant"; };
    v.push_back({"correctly_rounded", "every y the correctly rounded q * scale (ties to even)", dequantize,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return correctly_rounded(k); }, 2});
    v.push_back({"round_trip", "quantize (oracle) then dequantize: |y - x| <= s/2 + 1/2 ulp_out for in-range x",
                 dequantize, [](const KernelInfo& k, const RunConfig&, Stats*) { return round_trip(k); }, 2});
    v.push_back({"scale_locality", "changing one group's scale changes no other group's outputs", dequantize,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return scale_locality(k); }, 2});
    v.push_back({"product_preserved", "xs ws = x w within the derived budget of the kernel's xs and ws", smooth,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return product_preserved(k); }, 2});
    v.back().needs = {"ws"};
    v.push_back({"alpha_half_balances", "alpha = 1/2: max|xs_j| = max|ws_j| per channel within the element bounds",
                 smooth, [](const KernelInfo& k, const RunConfig&, Stats*) { return alpha_half_balances(k); }, 2});
    v.back().needs = {"ws"};
}

}  // namespace conform::props
