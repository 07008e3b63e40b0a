// Deliberately wrong RoPE kernels (DESIGN.md, "Mutation testing";
// docs/rope.md, "Mutants and bug classes"): the plain formula in double
// (angle, cos/sin, rotation; one rounding to the format) with exactly one bug
// each, so a mutant can only be killed by its bug.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "impls/cpu/rope.hpp"

namespace conform {
namespace {

enum class Bug {
    pairing_swapped,   // half-split requested, interleaved applied
    bf16_angles,       // θ_j, the position and m·θ_j each rounded to BF16
    partial_full_dim,  // θ_j = b^(-2j/D): partial rotary frequencies over the head dim
    offset_ignored,    // every chunk rotated as if it started at position 0
    ntk_ignored,       // effective base = base, ntk_scale dropped
    fp32_angles,       // θ_j and m·θ_j in float (the seed's precompute_rope_params)
    llama3_smooth_inverted,    // σ = (λ/L0 − l)/(h − l): wavelength over context instead of context over wavelength
    yarn_ramp_reversed,        // the ramp's weights swapped: high frequencies interpolated, low ones kept
    yarn_untruncated,          // truncate ignored: the correction range's ends not rounded out
    attention_factor_ignored,  // cos and sin not multiplied by attention_factor
};

// θ'_j from θ_j: rope_scaled_theta except where the bug is in the scaling.
double scaled_theta(Bug bug, double theta, std::int64_t j, const cpu::RopeArgs& a, const Params& p) {
    RopeScalingArgs sc = a.scaling;
    const double s = sc.factor, l = sc.low_freq_factor, h = sc.high_freq_factor, L0 = sc.original_max_pos;
    if (bug == Bug::llama3_smooth_inverted && sc.kind == 2) {
        const double wavelen = 2 * M_PI / theta;
        if (wavelen > L0 / l || wavelen < L0 / h) return rope_scaled_theta(theta, static_cast<int>(j), sc);
        const double sigma = (wavelen / L0 - l) / (h - l);
        return (1 - sigma) * theta / s + sigma * theta;
    }
    if (bug == Bug::yarn_ramp_reversed && sc.kind == 3) {
        const double ramp = std::clamp((static_cast<double>(j) - sc.ramp_lo) / (sc.ramp_hi - sc.ramp_lo), 0.0, 1.0);
        return theta / s * (1 - ramp) + theta * ramp;
    }
    if (bug == Bug::yarn_untruncated && sc.kind == 3)
        rope_yarn_ramp_range(sc, static_cast<int>(a.rotary_dim), a.base * a.ntk_scale, p.get("beta_fast", 32),
                             p.get("beta_slow", 1), false);
    return rope_scaled_theta(theta, static_cast<int>(j), sc);
}

double bf16(double v) { return decode(Format::bf16, encode(Format::bf16, v)); }

// The angle m·θ_j of pair j, right except for the angle bugs.
double angle(Bug bug, double m, std::int64_t j, std::int64_t r, std::int64_t D, const cpu::RopeArgs& a, const Params& p) {
    const double b = bug == Bug::ntk_ignored ? a.base : a.base * a.ntk_scale;
    const double dim = bug == Bug::partial_full_dim ? static_cast<double>(D) : static_cast<double>(r);
    const double e = -2.0 * static_cast<double>(j) / dim;
    if (bug == Bug::bf16_angles) return bf16(bf16(m) * bf16(scaled_theta(bug, std::pow(b, e), j, a, p)));
    if (bug == Bug::fp32_angles) {
        const auto theta = static_cast<float>(scaled_theta(bug, std::pow(static_cast<float>(b), static_cast<float>(e)), j, a, p));
        return static_cast<double>(static_cast<float>(m) * theta);
    }
    return m * scaled_theta(bug, std::pow(b, e), j, a, p);
}

void run_mutant(Format f, Bug bug, const KernelCall& call) {
    const TensorView &x = call.in.at(0), &y = call.out.at(0);
    const std::int64_t H = x.shape[0], L = x.shape[1], D = x.shape[2];
    const cpu::RopeArgs a = cpu::rope_args(call.params, D);
    const std::int64_t r = a.rotary_dim, half = r / 2;
    const bool interleaved = a.pairing == 0 || bug == Bug::pairing_swapped;
    for (std::int64_t l = 0; l < L; ++l) {
        const double m = static_cast<double>((bug == Bug::offset_ignored ? 0 : a.offset) + l);
        for (std::int64_t h = 0; h < H; ++h) {
            const std::int64_t row = (h * L + l) * D;
            for (std::int64_t i = r; i < D; ++i) y.set_bits(row + i, x.bits(row + i));
            for (std::int64_t j = 0; j < half; ++j) {
                const double af = bug == Bug::attention_factor_ignored ? 1 : a.scaling.attention_factor;
                const double t = angle(bug, m, j, r, D, a, call.params), c = af * std::cos(t), s = af * std::sin(t);
                const std::int64_t ia = interleaved ? 2 * j : j, ib = interleaved ? 2 * j + 1 : j + half;
                const double xa = x.value(row + ia), xb = x.value(row + ib);
                y.set_bits(row + ia, encode(f, xa * c - xb * s));
                y.set_bits(row + ib, encode(f, xa * s + xb * c));
            }
        }
    }
}

void add(Registry& reg, const char* bug_name, Bug bug, Format f, const char* bug_class, const char* what) {
    reg.add(mutant_info("rope", bug_name, f, Format::fp64, bug_class, what,
                        [f, bug](const KernelCall& c) { run_mutant(f, bug, c); }));
}

}  // namespace

void register_mutants_rope(Registry& r) {
    using F = Format;
    add(r, "pairing_swapped", Bug::pairing_swapped, F::bf16, "5 layout transposition",
        "pairing = 1 (half-split, rotate_half) applied as interleaved pairs (2j, 2j+1)");
    add(r, "bf16_angles", Bug::bf16_angles, F::bf16, "6 low-precision accumulation/storage",
        "positions, theta_j and m*theta_j rounded to bf16 (positions.to(bf16)): 8-bit angles");
    add(r, "partial_full_dim", Bug::partial_full_dim, F::fp16, "12 silently ignored parameter",
        "partial rotary: theta_j = b^(-2j/D) over the head dim instead of rotary_dim");
    // Class 12, not 2: the op's own offset parameter is dropped (the output is
    // a correct rotation at the wrong positions); class 2 is attention-mask
    // alignment, which a rotation has no notion of.
    add(r, "offset_ignored", Bug::offset_ignored, F::fp32, "12 silently ignored parameter",
        "offset (KV-cache start_pos) ignored: every chunk rotated from position 0");
    add(r, "ntk_ignored", Bug::ntk_ignored, F::bf16, "12 silently ignored parameter",
        "ntk_scale ignored: theta_j = base^(-2j/r)");
    add(r, "fp32_angles", Bug::fp32_angles, F::fp32, "6 low-precision accumulation/storage",
        "theta_j and m*theta_j in float (seed precompute_rope_params, HF default): angle off by m*theta*2^-24");
    add(r, "llama3_smooth_inverted", Bug::llama3_smooth_inverted, F::bf16, "11 wrong function variant",
        "llama3 scaling: smooth factor from wavelen / L0 instead of L0 / wavelen (medium band only)");
    add(r, "yarn_ramp_reversed", Bug::yarn_ramp_reversed, F::fp16, "5 layout transposition",
        "yarn scaling: the ramp's weights swapped, interpolating the fast pairs and keeping the slow ones");
    add(r, "yarn_untruncated", Bug::yarn_untruncated, F::fp32, "12 silently ignored parameter",
        "yarn scaling: truncate ignored, the correction range not rounded out to integers");
    add(r, "attention_factor_ignored", Bug::attention_factor_ignored, F::bf16, "9 scale/offset convention",
        "attention_factor (YaRN's mscale) not applied to cos and sin");
}

}  // namespace conform
