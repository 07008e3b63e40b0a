// RoPE frequency scaling as the kernels compute it (docs/rope.md, "Frequency
// scaling"): θ'_j from the unscaled θ_j in double, in the reference order
// whose rounding oracle::rope_theta_error_units bounds.  Host and device code
// (impls/cpu/rope.cpp, impls/cuda/rope.cuh) share it; the oracle has its own.
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define CONFORM_ROPE_HD __host__ __device__
#else
#define CONFORM_ROPE_HD
#endif

namespace conform {

struct RopeScalingArgs {
    int kind = 0;                  // 0 none, 1 linear, 2 llama3, 3 yarn
    double factor = 1;             // s
    double low_freq_factor = 1, high_freq_factor = 4, original_max_pos = 8192;  // llama3
    double ramp_lo = 0, ramp_hi = 1;  // yarn's correction range (rope_yarn_ramp_range)
    double attention_factor = 1;   // multiplies cos and sin
};

// YaRN's correction range in double: r ln(L0 / (2π β)) / (2 ln b) for
// beta_fast (lo) and beta_slow (hi), floored/ceiled when truncate, clipped to
// [0, r − 1], hi nudged by 0.001 when they meet (Hugging Face's rule).
inline void rope_yarn_ramp_range(RopeScalingArgs& a, int r, double b, double beta_fast, double beta_slow, bool truncate) {
    const double two_pi = 6.283185307179586476925;
    double lo = r * std::log(a.original_max_pos / (two_pi * beta_fast)) / (2 * std::log(b));
    double hi = r * std::log(a.original_max_pos / (two_pi * beta_slow)) / (2 * std::log(b));
    if (truncate) lo = std::floor(lo), hi = std::ceil(hi);
    lo = lo < 0 ? 0 : lo;
    hi = hi > r - 1 ? r - 1 : hi;
    if (lo == hi) hi += 0.001;
    a.ramp_lo = lo, a.ramp_hi = hi;
}

// θ'_j of pair j from θ_j.
CONFORM_ROPE_HD inline double rope_scaled_theta(double theta, int j, const RopeScalingArgs& a) {
    switch (a.kind) {
    case 1: return theta / a.factor;
    case 2: {
        const double wavelen = (1 / theta) * 6.283185307179586476925;
        if (wavelen > a.original_max_pos / a.low_freq_factor) return theta / a.factor;
        if (wavelen < a.original_max_pos / a.high_freq_factor) return theta;
        const double sigma = ((1 / wavelen) * a.original_max_pos - a.low_freq_factor) / (a.high_freq_factor - a.low_freq_factor);
        return ((1 - sigma) * theta) / a.factor + sigma * theta;
    }
    case 3: {
        double ramp = (j - a.ramp_lo) / (a.ramp_hi - a.ramp_lo);
        ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
        const double keep = 1 - ramp;
        return (theta / a.factor) * (1 - keep) + theta * keep;
    }
    default: return theta;
    }
}

}  // namespace conform
