// Generators and properties of the int8 family (docs/int8.md, "Properties").
#include <algorithm>
#include <cmath>
#include <tuple>

#include "oracle/structured.hpp"
#include "properties/common.hpp"
#include "properties/fixed.hpp"

namespace conform::props {
namespace {

// A grid of quantization ties: the scale s = m 2^e with m odd, and entries
// (k + 1/2) s = n m 2^(e - 1) for odd n, |n| <= max_n.  m = 1 is a power of
// two, where x * (1/s) is exact; m >= 3 makes 1/s inexact, so a kernel that
// multiplies by a reciprocal lands beside the tie.  Dynamic scales (s =
// amax / 127) need +-127 s exact in the input format, static ones only the
// ties: bits(127 m) <= p and bits(max_n m) <= p for a p-bit significand.
struct TieGrid {
    double m = 1;
    int e = 0, max_n = 253;
    bool static_scale = false;
    double scale() const { return std::ldexp(m, e); }
};

int bits_of(double v) { return std::ilogb(v) + 1; }

// The grid of a tie case, from its seed: a power of two one case in four;
// else m odd, 3 .. 2^16 - 1 for fp32 (so 253 m fits 24 bits) or 3 .. 31 for
// the 16-bit formats (fewer ties n then fit: |n| <= 65 in fp16, <= 7 in
// bf16 at m = 31); static scales one case in three, and whenever 127 m does
// not fit the format (fp16 past m = 15, every such bf16 grid).
TieGrid tie_grid(Format f, std::uint64_t seed, int scale_exp) {
    std::mt19937_64 rng(seed ^ 0x7f4a7c159e3779b9ull);
    TieGrid g;
    g.e = std::clamp(scale_exp, -8, 8);
    g.static_scale = rng() % 3 == 0;
    const bool power_of_two = rng() % 4 == 0;
    const double m = static_cast<double>(3 + 2 * (rng() % (f == Format::fp32 ? 32767 : 15)));
    if (power_of_two) return g;
    g.m = m;
    const int p = info(f).precision;
    if (bits_of(127 * g.m) > p) g.static_scale = true;
    while (g.max_n > 1 && bits_of(g.max_n * g.m) > p) g.max_n -= 2;
    while (127 * g.scale() > max_finite(f)) --g.e;  // fp16: 127 * 15 * 2^8 would overflow
    return g;
}

// x [rows, cols] on grid g: with a dynamic scale every group's maximum is
// 127 s exactly (column 0 and row 0 hold +-127 s, so every group, whatever
// the axis, has scale s); every other entry is a tie (k + 1/2) s.
void fill_ties(Tensor& x, const TieGrid& g, std::mt19937_64& rng) {
    const std::int64_t rows = x.shape()[0], cols = x.shape()[1];
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
            const double sign = rng() % 2 ? 1 : -1;
            const bool maximum = !g.static_scale && (i == 0 || j == 0);
            const double n = static_cast<double>(2 * static_cast<int>(rng() % static_cast<std::uint64_t>(g.max_n + 1)) - g.max_n);
            x.set_value(i * cols + j, maximum ? sign * 127 * g.scale() : n * g.m * std::ldexp(1.0, g.e - 1));
        }
}

// A quantize spec turned into a tie case: its grid's static scale set (or
// dynamic scales).
CaseSpec with_ties(CaseSpec spec) {
    spec.families = {Family::around_cap};
    const TieGrid g = tie_grid(spec.format, spec.seed, spec.scale_exp);
    spec.params.set("scale", g.static_scale ? g.scale() : 0.0);
    return spec;
}

}  // namespace

// dims = {rows, cols}; params axis (0/1/2) and, one case in four, a static
// scale 1.5 * 2^-e small enough to saturate.  The around_cap family builds
// tie vectors (fill_ties) on a grid of its own (tie_grid: scales that are
// powers of two or not, static or dynamic).
rc::Gen<CaseSpec> gen_quantize_spec(Format fmt, GenOptions opt) {
    std::vector<Family> fams = value_families();
    fams.push_back(Family::around_cap);
    fams.push_back(Family::around_cap);
    return rc::gen::apply(
        [fmt](int rows, int cols, int axis, int fixed, Family fam, int k, std::uint64_t seed, int specials) {
            Params p({{"axis", double(axis)}, {"scale", fixed ? std::ldexp(1.5, k - 9) : 0.0}});
            const CaseSpec spec = structured_spec("quantize", fmt, {rows, cols}, p, fam, k, seed, specials);
            return fam == Family::around_cap ? with_ties(spec) : spec;
        },
        rc::gen::element(1, 2, 3, 7, 8, 16), rc::gen::element(1, 3, 8, 16, 33, 64, 256), rc::gen::inRange(0, 3),
        rc::gen::element(0, 0, 0, 1), rc::gen::elementOf(fams), rc::gen::inRange(-8, 9),
        rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 4) : rc::gen::just(0));
}

Case build_quantize_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    Tensor x(spec.format, {spec.dims.at(0), spec.dims.at(1)});
    if (spec.families.at(0) == Family::around_cap) fill_ties(x, tie_grid(spec.format, spec.seed, spec.scale_exp), rng);
    else fill_values(x, spec.families.at(0), spec, 0, rng);
    inject_specials(x, spec.specials, rng);
    c.inputs.push_back(std::move(x));
    return c;
}

// dims = {M, K, N, per-token scale_a (0/1), per-channel scale_b (0/1)}.
// Codes: uniform over all 256 (normal), the extremes -128, -127, 127
// (saturated), all -128 (constant).  In a float format (golden vectors) the
// codes are stored as exact floats and the scales in that format.
rc::Gen<CaseSpec> gen_int8_gemm_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](int m, int k, int n, int per_token, int per_channel, Family fam, std::uint64_t seed, int specials) {
            return structured_spec("int8_gemm", fmt, {m, k, n, per_token, per_channel}, Params(), fam, 0, seed, specials);
        },
        rc::gen::element(1, 2, 3, 4, 5, 8, 17), rc::gen::element(1, 2, 3, 16, 31, 64, 257, 1024),
        rc::gen::element(1, 3, 8, 15, 16, 17, 33), rc::gen::inRange(0, 2), rc::gen::inRange(0, 2),
        rc::gen::element(Family::normal, Family::normal, Family::saturated, Family::constant),
        rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_int8_gemm_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t m = spec.dims.at(0), k = spec.dims.at(1), n = spec.dims.at(2);
    const Format codes = is_float(spec.format) ? spec.format : Format::int8;
    const Format scales = is_float(spec.format) ? spec.format : Format::fp32;
    auto code = [&]() -> double {
        static const double extremes[] = {-128, -127, 127};
        switch (spec.families.at(0)) {
            case Family::saturated: return extremes[rng() % 3];
            case Family::constant: return -128;
            default: return static_cast<double>(static_cast<int>(rng() % 256) - 128);
        }
    };
    for (const auto& shape : {std::vector<std::int64_t>{m, k}, std::vector<std::int64_t>{k, n}}) {
        Tensor t(codes, shape);
        for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, code());
        c.inputs.push_back(std::move(t));
    }
    std::uniform_real_distribution<double> U(0.5, 1);
    for (const std::int64_t len : {spec.dims.at(3) ? m : 1, spec.dims.at(4) ? n : 1}) {
        Tensor s(scales, {len});
        for (std::int64_t i = 0; i < len; ++i) s.set_value(i, std::ldexp(U(rng), -4 - static_cast<int>(rng() % 9)));
        inject_specials(s, spec.specials, rng);
        c.inputs.push_back(std::move(s));
    }
    return c;
}

namespace {

// Tie vectors (k + 1/2) s: every code is the even neighbour.  s is the
// group's scale as the op defines it (the oracle's scale output: fl32(amax /
// 127) or the static scale), x / s is exact in double for the ties, and
// entries that are no tie (the +-127 s maxima) are skipped.
Testable ties_to_even(const KernelInfo& k) {
    return [&k] {
        const CaseSpec spec = with_ties(in_domain(*gen_quantize_spec(k.in, GenOptions{})));
        const Case c = build_case(spec);
        const auto out = run_kernel(k, c.params, c.views());
        const Tensor scale =
            oracle::evaluate_structured("quantize", c.params, c.views(), {Format::int8, Format::fp32}).rounded.at(1);
        for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i) {
            const double t = c.inputs[0].value(i) / scale.value(i), lo = std::floor(t);
            if (t - lo != 0.5) continue;
            const double want = std::fmod(lo, 2) == 0 ? lo : lo + 1;
            if (out[0].value(i) != want)
                RC_FAIL("x = " + hexfloat(c.inputs[0].value(i)) + " = " + std::to_string(t) + " s (s = " +
                        hexfloat(scale.value(i)) + "): code " + std::to_string(out[0].value(i)) +
                        ", want the even neighbour " + std::to_string(want));
        }
    };
}

// Per-token scales: a 1000x outlier in one token leaves the other tokens'
// codes unchanged.
Testable outlier_token_isolation(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = in_domain(*gen_quantize_spec(k.in, GenOptions{}));
        spec.params = Params({{"axis", 1}, {"scale", 0}});
        spec.dims[0] = std::max<std::int64_t>(spec.dims[0], 2);
        if (spec.families[0] == Family::near_overflow || spec.families[0] == Family::bit_patterns) spec.families = {Family::normal};
        const Case c = build_case(spec);
        Tensor y = c.inputs[0];
        const std::int64_t cols = spec.dims[1], row = static_cast<std::int64_t>(spec.seed % static_cast<std::uint64_t>(spec.dims[0]));
        double amax = 0;
        for (std::int64_t i = 0; i < y.numel(); ++i) amax = std::max(amax, std::fabs(y.value(i)));
        y.set_value(row * cols, std::min(1000 * std::max(amax, 1.0), max_finite(y.format())));
        const auto a = run_kernel(k, c.params, c.views()), b = run_kernel(k, c.params, {y.view()});
        for (std::int64_t i = 0; i < y.numel(); ++i)
            if (i / cols != row && a[0].bits(i) != b[0].bits(i))
                RC_FAIL("an outlier in token " + std::to_string(row) + " changed code " + std::to_string(i) + " of token " +
                        std::to_string(i / cols));
    };
}

// Sorted inputs, one scale: the codes never decrease.
Testable monotone(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = in_domain(*gen_quantize_spec(k.in, GenOptions{}));
        spec.params.set("axis", 0);
        const std::string f = quantize_monotone_check(k, build_case(spec));
        if (!f.empty()) RC_FAIL(f);
    };
}

// Constant extreme operands (-128, -127, 127) with K up to 65536: acc =
// K a b exactly (2^30 at the INT32 limit's edge for -128 x -128).
Testable extreme_operands(const KernelInfo& k) {
    return [&k] {
        static const double values[] = {-128, -127, 127};
        const double va = *rc::gen::elementOf(std::vector<double>(std::begin(values), std::end(values)));
        const double vb = *rc::gen::elementOf(std::vector<double>(std::begin(values), std::end(values)));
        const std::int64_t K = *rc::gen::element(std::int64_t{2}, std::int64_t{255}, std::int64_t{16384}, std::int64_t{65535}, std::int64_t{65536}), m = *rc::gen::inRange(1, 4),
                           n = *rc::gen::inRange(1, 18);
        Tensor a(Format::int8, {m, K}), b(Format::int8, {K, n}), sa(Format::fp32, {1}), sb(Format::fp32, {1});
        for (std::int64_t i = 0; i < a.numel(); ++i) a.set_value(i, va);
        for (std::int64_t i = 0; i < b.numel(); ++i) b.set_value(i, vb);
        sa.set_value(0, 1), sb.set_value(0, 1);
        const auto out = run_kernel(k, Params(), {a.view(), b.view(), sa.view(), sb.view()});
        const double want = static_cast<double>(K) * va * vb;
        for (std::int64_t i = 0; i < m * n; ++i)
            if (out[0].value(i) != want)
                RC_FAIL("K = " + std::to_string(K) + ", a = " + std::to_string(va) + ", b = " + std::to_string(vb) +
                        ": acc " + std::to_string(out[0].value(i)) + ", want " + std::to_string(want));
    };
}

}  // namespace

// The scale group of element (r, j) of an x [rows, cols] under `axis`.
std::int64_t quantize_group(std::int64_t r, std::int64_t j, int axis) { return axis == 1 ? r : axis == 2 ? j : 0; }

std::string quantize_monotone_check(const KernelInfo& k, const Case& c) {
    const Tensor& x = c.inputs[0];
    const std::int64_t cols = x.shape().back();
    const int axis = static_cast<int>(c.params.get("axis", 0));
    std::vector<std::tuple<std::int64_t, double, std::int64_t>> order;  // (group, x, flat index)
    for (std::int64_t i = 0; i < x.numel(); ++i)
        if (!std::isnan(x.value(i))) order.emplace_back(quantize_group(i / cols, i % cols, axis), x.value(i), i);
    std::sort(order.begin(), order.end());
    const auto out = run_kernel(k, c.params, c.views());
    for (std::size_t i = 1; i < order.size(); ++i) {
        const auto& [g0, x0, i0] = order[i - 1];
        const auto& [g1, x1, i1] = order[i];
        if (g0 == g1 && out[0].value(i1) < out[0].value(i0))
            return "x = " + hexfloat(x0) + " < " + hexfloat(x1) + " (scale group " + std::to_string(g0) +
                   ") but codes " + std::to_string(out[0].value(i0)) + " > " + std::to_string(out[0].value(i1));
    }
    return "";
}

std::string quantize_range_check(const KernelInfo& k, const Case& c) {
    const auto out = run_kernel(k, c.params, c.views());
    for (std::int64_t i = 0; i < out[0].numel(); ++i) {
        const double q = out[0].value(i);
        if (!(q >= -127 && q <= 127 && q == std::nearbyint(q)))
            return "element " + std::to_string(i) + ": code " + hexfloat(q) + " outside the integers of [-127, 127]";
    }
    for (std::int64_t g = 0; g < out[1].numel(); ++g)
        if (out[1].value(g) < 0) return "scale " + std::to_string(g) + " = " + hexfloat(out[1].value(g)) + " is negative";
    return "";
}

void add_int8_properties(std::vector<PropertyDef>& v) {
    auto quantize = [](const OpSpec& op) { return op.name == "quantize"; };
    v.push_back({"ties_to_even", "tie vectors (k + 1/2) s, s a power of two or not, quantize to the even neighbour", quantize,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return ties_to_even(k); }, 2});
    v.push_back({"outlier_token_isolation", "per-token scales: an outlier token leaves the other tokens' codes unchanged",
                 quantize, [](const KernelInfo& k, const RunConfig&, Stats*) { return outlier_token_isolation(k); }, 2});
    v.push_back({"monotone", "one scale: sorted inputs give nondecreasing codes", quantize,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return monotone(k); }, 2});
    v.push_back({"extreme_operands", "constant -128/-127/127 operands, K up to 65536: acc = K a b exactly",
                 [](const OpSpec& op) { return op.name == "int8_gemm"; },
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return extreme_operands(k); }, 4});
    v.back().needs = {"acc"};
}

}  // namespace conform::props
