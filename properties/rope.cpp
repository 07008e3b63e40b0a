// Generators and metamorphic properties of rope (docs/rope.md).
#include <algorithm>
#include <cmath>

#include "numerics/ulp.hpp"
#include "oracle/rope.hpp"
#include "oracle/structured.hpp"
#include "properties/common.hpp"
#include "properties/rope.hpp"

namespace conform::props {

namespace {

// Offsets drawn as a class: fixed ones at the powers of two where tables and
// guard bits change (2^16, 2^20 and 2^24, where positions stop being exact in
// FP32), or kAnyOffset: a position anywhere in [0, 2^24] taken from the
// case's seed, so that every position a long-context model reaches (and
// every relative offset between two of them) comes up.
constexpr double kAnyOffset = -1;
const double kTwoTo24 = std::ldexp(1.0, 24);

double offset_of(double drawn, std::uint64_t seed) {
    return drawn == kAnyOffset ? static_cast<double>((seed >> 16) % (static_cast<std::uint64_t>(kTwoTo24) + 1)) : drawn;
}

// Frequency-scaling presets (docs/rope.md, "Frequency scaling"): none most
// often; linear with a factor that rounds; llama3 as Llama 3.1 ships it and
// with a short L0 so that small heads reach every band; yarn as DeepSeek-V3
// (truncated range, factor 40) and untruncated with Qwen's attention factor.
void add_scaling(Params& p, int preset) {
    switch (preset) {
    case 1: p.set("scaling", 1), p.set("factor", 2.5); break;
    case 2:
        p.set("scaling", 2), p.set("factor", 8), p.set("low_freq_factor", 1), p.set("high_freq_factor", 4);
        p.set("original_max_pos", 8192);
        break;
    case 3:
        p.set("scaling", 2), p.set("factor", 32), p.set("low_freq_factor", 1.5), p.set("high_freq_factor", 6);
        p.set("original_max_pos", 64);
        break;
    case 4:
        p.set("scaling", 3), p.set("factor", 40), p.set("beta_fast", 32), p.set("beta_slow", 1);
        p.set("original_max_pos", 4096);
        break;
    case 5:
        p.set("scaling", 3), p.set("factor", 4), p.set("original_max_pos", 512), p.set("truncate", 0);
        p.set("attention_factor", 0.1 * std::log(4.0) + 1);
        break;
    default: break;
    }
}

}  // namespace

// Shapes [H, L, D] with D even (including D = 2 and D not a multiple of 8),
// both pairings, partial rotary, NTK scaling, and offsets up to 2^24 (where
// the angle m θ needs its guard bits and FP32 angles fail).
rc::Gen<CaseSpec> gen_rope_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](int H, int L, int D, int pairing, double base, double ntk, int rot_div, double drawn_offset,
                   Family fam, int k, std::uint64_t seed, int specials, int scaling) {
            const int r = rot_div == 0 ? 0 : std::max(2, D / rot_div / 2 * 2);
            const double offset = offset_of(drawn_offset, seed);
            Params p({{"pairing", double(pairing)},
                      {"base", base},
                      {"ntk_scale", ntk},
                      {"rotary_dim", double(r)},
                      {"offset", offset}});
            add_scaling(p, scaling);
            return structured_spec("rope", fmt, {H, L, D}, p, fam, k, seed, specials);
        },
        rc::gen::inRange(1, 4), rc::gen::inRange(1, 9), rc::gen::element(2, 4, 6, 8, 16, 18, 64, 128),
        rc::gen::inRange(0, 2), rc::gen::element(10000.0, 500000.0, 1e6, 10.0), rc::gen::element(1.0, 1.0, 4.0, 8.0),
        rc::gen::element(0, 0, 2, 4),
        rc::gen::element(0.0, 7.0, 4096.0, 65535.0, 1048570.0, 1048576.0, kTwoTo24 - 5, kTwoTo24, kAnyOffset,
                         kAnyOffset, kAnyOffset),
        rc::gen::elementOf(value_families()), rc::gen::inRange(-8, 9), rc::gen::arbitrary<std::uint64_t>(),
        opt.specials ? rc::gen::inRange(1, 4) : rc::gen::just(0), rc::gen::element(0, 0, 0, 0, 1, 2, 3, 4, 5));
}

Case build_rope_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    Tensor x(spec.format, spec.dims);
    fill_values(x, spec.families.at(0), spec, 0, rng);
    inject_specials(x, spec.specials, rng);
    c.inputs.push_back(std::move(x));
    return c;
}

namespace {

// A generated case with at least min_l tokens and a head dim of at least min_d.
Case rope_case(const KernelInfo& k, std::int64_t min_l = 1, std::int64_t min_d = 2) {
    CaseSpec spec = in_domain(*gen_rope_spec(k.in, GenOptions{}));
    spec.dims[1] = std::max(spec.dims[1], min_l);
    spec.dims[2] = std::max(spec.dims[2], min_d);
    spec.n = static_cast<int>(spec.dims[2]);
    return build_case(spec);
}

// Tokens 1..L-1 at offset o equal tokens 0..L-2 at offset o + 1, bit for
// bit: a table kernel's angle depends on the absolute position only.
Testable offset_consistency(const KernelInfo& k) {
    return [&k] {
        const Case c = rope_case(k, 2);
        const TensorView x = c.inputs[0].view();
        const std::int64_t H = x.shape[0], L = x.shape[1], D = x.shape[2];
        Tensor tail(x.format, {H, L - 1, D});
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t i = 0; i < (L - 1) * D; ++i) tail.set_bits(h * (L - 1) * D + i, x.bits((h * L + 1) * D + i));
        Params shifted = c.params;
        shifted.set("offset", c.params.get("offset", 0) + 1);
        const auto full = run_kernel(k, c.params, {x}), part = run_kernel(k, shifted, {tail.view()});
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t i = 0; i < (L - 1) * D; ++i) {
                const std::uint64_t a = full[0].bits((h * L + 1) * D + i), b = part[0].bits(h * (L - 1) * D + i);
                if (a != b && !(std::isnan(full[0].value((h * L + 1) * D + i)) && std::isnan(part[0].value(h * (L - 1) * D + i))))
                    RC_FAIL("token " + std::to_string(i / D + 1) + " dim " + std::to_string(i % D) +
                            " differs between offset o and offset o + 1 on the shifted tokens");
            }
    };
}

// Dimensions at or past rotary_dim pass through bit for bit.
Testable pass_through(const KernelInfo& k) {
    return [&k] {
        Case c = rope_case(k, 1, 4);
        const TensorView x = c.inputs[0].view();
        const std::int64_t D = x.shape[2];
        c.params.set("rotary_dim", double(*rc::gen::inRange<int>(1, static_cast<int>(D / 2)) * 2));
        const auto y = run_kernel(k, c.params, {x});
        const auto r = static_cast<std::int64_t>(c.params.at("rotary_dim"));
        for (std::int64_t i = 0; i < x.numel(); ++i)
            if (i % D >= r && y[0].bits(i) != x.bits(i))
                RC_FAIL("pass-through dim " + std::to_string(i % D) + " (rotary_dim " + std::to_string(r) +
                        ") changed: " + hexfloat(x.value(i)) + " -> " + hexfloat(y[0].value(i)));
    };
}

// base and ntk_scale are read: changing either changes the output whenever a
// pair j >= 1 rotates at a position m >= 1 with a nonzero input.
Testable rope_parameter_sensitivity(const KernelInfo& k) {
    return [&k] {
        Case c = rope_case(k, 2, 4);
        const TensorView x = c.inputs[0].view();
        c.params.set("rotary_dim", 0.0);
        // Positions near 1000: tripling a base moves pair 1's angle by radians,
        // far beyond a bf16 ulp (at m = 1 the change can round away).
        c.params.set("offset", 1000);
        for (std::int64_t i = 0; i < x.numel(); ++i)
            c.inputs[0].set_value(i, 1.0 + static_cast<double>(i % 7) / 8);  // finite, nonzero, exact
        const auto y = run_kernel(k, c.params, {c.inputs[0].view()});
        for (const char* p : {"base", "ntk_scale"}) {
            Params q = c.params;
            q.set(p, c.params.get(p, 1) * 3);
            const auto z = run_kernel(k, q, {c.inputs[0].view()});
            std::string where;
            if (identical(y[0], z[0], &where)) RC_FAIL(std::string("tripling '") + p + "' left the output unchanged");
        }
    };
}

// Bit-identical up to the sign of zero (x - (+-0) can flip a -0), NaN = NaN.
bool same_value(const Tensor& a, const Tensor& b, std::int64_t i) {
    const double x = a.value(i), y = b.value(i);
    return (std::isnan(x) && std::isnan(y)) || x == y;  // == treats +0 and -0 as equal
}

// Position 0 is the identity: with offset 0, token 0 comes back unchanged
// (cos 0 = 1 and sin 0 = 0 are exact in every table) for finite inputs, at
// attention_factor 1 (any frequency scaling).
Testable position_zero_identity(const KernelInfo& k) {
    return [&k] {
        Case c = rope_case(k);
        c.params.set("offset", 0);
        c.params.set("attention_factor", 1);
        const TensorView x = c.inputs[0].view();
        const std::int64_t L = x.shape[1], D = x.shape[2];
        const auto y = run_kernel(k, c.params, {x});
        for (std::int64_t h = 0; h < x.shape[0]; ++h)
            for (std::int64_t d = 0; d < D; ++d) {
                const std::int64_t i = h * L * D + d;  // token 0
                if (std::isfinite(x.value(i)) && !same_value(c.inputs[0], y[0], i))
                    RC_FAIL("position 0, head " + std::to_string(h) + " dim " + std::to_string(d) + ": " +
                            hexfloat(x.value(i)) + " -> " + hexfloat(y[0].value(i)));
            }
    };
}

// NTK scaling is a base change: (base, s) and (base * s, 1) give the same
// bits whenever base * s is exact (the kernels form b' = base * s in double).
Testable ntk_identity(const KernelInfo& k) {
    return [&k] {
        Case c = rope_case(k);
        const double base = c.params.get("base", 10000), s = *rc::gen::element(2.0, 4.0, 8.0, 16.0);
        c.params.set("ntk_scale", s);
        Params folded = c.params;
        folded.set("base", base * s);  // exact: s is a power of two
        folded.set("ntk_scale", 1);
        const auto a = run_kernel(k, c.params, c.views()), b = run_kernel(k, folded, c.views());
        std::string where;
        if (!identical(a[0], b[0], &where)) RC_FAIL("(base, s) differs from (base * s, 1) at " + where);
    };
}

// Interleaved RoPE on dims permuted so that pair (j, j + r/2) sits at
// (2j, 2j + 1) equals half-split RoPE after permuting back: the two have the
// same exact values, so each element of one lies within the sum of both
// derived bounds (twice the half-split's) of the other.  Not bit for bit: the
// two code paths may round differently (a compiler contracts each into FMAs
// its own way), and that is no defect; a wrong pairing misses by far more.
Testable pairing_permutation(const KernelInfo& k) {
    return [&k] {
        Case c = rope_case(k);
        c.params.set("rotary_dim", 0);
        const TensorView x = c.inputs[0].view();
        const std::int64_t rows = x.shape[0] * x.shape[1], D = x.shape[2];
        auto to_interleaved = [D](std::int64_t d) { return d < D / 2 ? 2 * d : 2 * (d - D / 2) + 1; };
        Tensor permuted(x.format, {x.shape[0], x.shape[1], D});
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t d = 0; d < D; ++d) permuted.set_bits(r * D + to_interleaved(d), x.bits(r * D + d));
        Params half = c.params, inter = c.params;
        half.set("pairing", 1);
        inter.set("pairing", 0);
        const CaseEval e = evaluate_case(k, half, {x});
        const Tensor& a = e.outputs[0].got;
        const std::vector<double>& bound = e.outputs[0].rigorous;
        const auto b = run_kernel(k, inter, {permuted.view()});
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t d = 0; d < D; ++d) {
                const std::int64_t i = r * D + d, j = r * D + to_interleaved(d);
                const double u = a.value(i), w = b[0].value(j);
                if (a.bits(i) == b[0].bits(j) || (std::isnan(u) && std::isnan(w))) continue;
                const double allowed = bound.empty() ? 0.0 : 2 * bound[static_cast<std::size_t>(i)];
                if (!(std::fabs(u - w) <= allowed))  // NaN against a number, or beyond both bounds
                    RC_FAIL("dim " + std::to_string(d) + " of row " + std::to_string(r) + ": half-split " +
                            hexfloat(u) + ", interleaved on permuted dims " + hexfloat(w) + ", apart by more than " +
                            "both derived bounds (" + hexfloat(allowed) + ")");
            }
    };
}

// One vector rotated by the kernel at position m, with its exact rotation and
// the per-element bounds of docs/rope.md.
struct Rotated {
    std::vector<double> got, exact, bound;
};

Rotated rotate_at(const KernelInfo& k, const Tensor& x, const Params& p, double m) {
    Params at = p;
    at.set("offset", m);
    const std::vector<Format> fmt{k.out};
    const oracle::StructuredResult ref = oracle::evaluate_structured("rope", at, {x.view()}, fmt);
    const auto bound = oracle::rope_bound(at, {x.view()}, ref.exact, k.acc, fmt);
    const auto y = run_kernel(k, at, {x.view()});
    Rotated r{{}, ref.exact[0], bound[0]};
    for (std::int64_t i = 0; i < y[0].numel(); ++i) r.got.push_back(y[0].value(i));
    return r;
}

// Ŝ(m, n) = <q̂_m, k̂_n> taken exactly, and its budget
// B(m, n) = sum_i (β^q_i |k_i| + |q_i| β^k_i + β^q_i β^k_i).
std::pair<oracle::Real, double> score(const Rotated& a, const Rotated& b) {
    oracle::Real s(0);
    double budget = 0;
    for (std::size_t i = 0; i < a.got.size(); ++i) {
        s += oracle::from_double(a.got[i]) * oracle::from_double(b.got[i]);
        budget += a.bound[i] * std::fabs(b.exact[i]) + std::fabs(a.exact[i]) * b.bound[i] + a.bound[i] * b.bound[i];
    }
    return {s, budget};
}

}  // namespace

report::Curve rope_invariance_curve(const KernelInfo& k, std::uint64_t seed) {
    const Params p({{"pairing", 0.0}, {"base", 1e4}, {"ntk_scale", 1.0}, {"rotary_dim", 0.0}, {"offset", 0.0}});
    const Case qc = build_case(structured_spec("rope", k.in, {1, 1, 64}, p, Family::normal, 0, seed, 0));
    const Case kc = build_case(structured_spec("rope", k.in, {1, 1, 64}, p, Family::normal, 0, ~seed, 0));
    oracle::PrecisionScope scope(256);
    const auto [s0, b0] = score(rotate_at(k, qc.inputs[0], p, 5), rotate_at(k, kc.inputs[0], p, 0));
    report::Curve c{"rope_invariance", "position x", "|S(x+5, x) - S(5, 0)| / budget", {}, true, ""};
    for (int e = 0; e <= 20; ++e) {
        const double x = std::ldexp(1.0, e);
        const auto [s, b] = score(rotate_at(k, qc.inputs[0], p, x + 5), rotate_at(k, kc.inputs[0], p, x));
        const double err = oracle::to_double(oracle::abs(s - s0)), budget = b + b0;
        c.points.push_back({x, err, budget});
        c.passed = c.passed && err <= budget;  // NaN error fails
    }
    return c;
}

void add_rope_properties(std::vector<PropertyDef>& v) {
    auto is_rope = [](const OpSpec& op) { return op.name == "rope"; };
    v.push_back({"position_zero_identity", "offset 0: token 0 comes back unchanged (finite inputs)", is_rope,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return position_zero_identity(k); }, 4});
    v.push_back({"ntk_identity", "(base, s) equals (base * s, 1) bit for bit", is_rope,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return ntk_identity(k); }, 4});
    // A kernel that declares rope_pairing implements one pairing only.
    v.push_back({"pairing_permutation", "interleaved RoPE on permuted dims equals half-split within both derived bounds", is_rope,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return pairing_permutation(k); }, 4,
                 [](const KernelInfo& k) { return k.conventions.count("rope_pairing") == 0; }});
    auto rope = [](const OpSpec& op) { return op.name == "rope"; };
    v.push_back({"offset_consistency",
                 "tokens 1..L-1 at offset o are bit-identical to tokens 0..L-2 at offset o + 1", rope,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return offset_consistency(k); }, 2});
    v.push_back({"pass_through", "dims at or past rotary_dim are copied bit for bit", rope,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return pass_through(k); }, 2});
    v.push_back({"parameter_sensitivity", "changing base or ntk_scale changes the output", rope,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return rope_parameter_sensitivity(k); }, 4});
}

}  // namespace conform::props
