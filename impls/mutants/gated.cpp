// Mutants of the gated family: simple scalar kernels, each with exactly one
// realistic bug (DESIGN.md "Mutation testing"), run through the same
// elementwise driver as the real kernels.
#include <algorithm>
#include <cmath>

#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/simd_math.hpp"

namespace conform {
namespace {

using namespace cpu;

// A "fast path" that drops both caps when either beta is large (on the
// theory that the cap is then inactive) and computes plain swiglu.  Exact for
// the default (4, 25); wrong whenever beta1 or beta2 > 64.
struct SituCapsOffLargeBeta {
    double beta1, beta2;
    explicit SituCapsOffLargeBeta(const Params& p) : beta1(p.get("beta1", 4)), beta2(p.get("beta2", 25)) {}
    double scalar(double g, double u) const {
        if (beta1 > 64 || beta2 > 64) return SiluFn::scalar(g) * u;
        return beta1 * std::tanh(g / beta1) * SigmoidFn::scalar(g) * (beta2 * std::tanh(u / beta2));
    }
};

// gate and up swapped: silu(up) * gate.
struct SwigluSwapped {
    explicit SwigluSwapped(const Params&) {}
    static double scalar(double g, double u) { return SiluFn::scalar(u) * g; }
};

// geglu with gate and up swapped: gelu_erf(up) * gate.
struct GegluSwapped {
    explicit GegluSwapped(const Params&) {}
    static double scalar(double g, double u) { return GeluErfFn::scalar(u) * g; }
};

// swiglu_clamp with the gate clamped on both sides: silu(clamp(g, -L, L))
// instead of silu(min(g, L)); differs for gate < -limit.
struct SwigluClampBothSides {
    double limit;
    explicit SwigluClampBothSides(const Params& p) : limit(p.get("limit", 10)) {}
    double scalar(double g, double u) const {
        return SiluFn::scalar(std::clamp(g, -limit, limit)) * std::clamp(u, -limit, limit);
    }
};

// swiglu_clamp with the limit hard-coded to the default 10.
struct SwigluClampLimitIgnored {
    explicit SwigluClampLimitIgnored(const Params&) {}
    static double scalar(double g, double u) { return SiluFn::scalar(std::min(g, 10.0)) * std::clamp(u, -10.0, 10.0); }
};

}  // namespace

void register_mutants_gated(Registry& r) {
    const char* situ = "both caps dropped (plain swiglu) when beta1 or beta2 > 64";
    register_mutant<Format::fp32, 2, SituCapsOffLargeBeta>(r, "situ_glu", "caps_off_large_beta",
                                                           "12 silently ignored parameter", situ);
    register_mutant<Format::bf16, 2, SituCapsOffLargeBeta>(r, "situ_glu", "caps_off_large_beta",
                                                           "12 silently ignored parameter", situ);
    register_mutant<Format::fp16, 2, SwigluSwapped>(r, "swiglu", "gate_up_swapped", "5 layout transposition",
                                                    "gate and up swapped: silu(up) * gate");
    register_mutant<Format::bf16, 2, GegluSwapped>(r, "geglu", "gate_up_swapped", "5 layout transposition",
                                                   "gate and up swapped: gelu_erf(up) * gate");
    register_mutant<Format::bf16, 2, SwigluClampBothSides>(r, "swiglu_clamp", "gate_clamped_both",
                                                           "11 wrong function variant",
                                                           "gate clamped to [-limit, limit] instead of capped above");
    register_mutant<Format::fp32, 2, SwigluClampLimitIgnored>(r, "swiglu_clamp", "limit_ignored",
                                                              "12 silently ignored parameter",
                                                              "limit parameter ignored, always 10");
}

}  // namespace conform
