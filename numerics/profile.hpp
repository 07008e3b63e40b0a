// Accuracy profiles (docs/numerics.md, "Accuracy profiles"): the standard a
// kernel is judged by.  Anchors: OpenCL's conformance ULP tables, CUDA's
// documented math-function errors, XLA's exhaustive-test error specs.
//
// A profile is a rank on one ladder, tightest first, plus two modifiers:
//   cr        every element the correctly rounded result (0 ulp)
//   faithful  every element one of the two values bracketing the exact result
//             (bound-based outputs: and within the derived bound, which may
//             be tighter)
//   strict    the derived budgets (default): 1 ulp of the correctly rounded
//             result for elementwise ops; the derived bound, probabilistic
//             tier where its model holds, for bound-based outputs
//   rigorous  bound-based outputs within the rigorous tier (any summation
//             order); elementwise ops as strict
//   ulp:N     within N ulp of the correctly rounded result (bound-based
//             outputs: or within the rigorous bound), N >= 2
//   +ftz      subnormal inputs may be read as zero and subnormal results
//             returned as zero (same sign or +0)
//   +ieee     IEEE special-value rules instead of the ML conventions: the
//             formula evaluated literally where an input is infinite
//             (silu(-inf) = -inf * 0 = NaN), NaN for an empty (fully masked)
//             row
// An element's rank is the tightest rung it meets; a profile admits the
// element when that rank is at most the profile's.
#pragma once
#include <cstdint>
#include <string>

namespace conform::props {

// Ladder rungs; ranks above kRankRigorous are ulp:N with N = rank - kRankUlpBase.
inline constexpr std::uint64_t kRankCr = 0, kRankFaithful = 1, kRankStrict = 2, kRankRigorous = 3,
                               kRankUlpBase = 3;
// An element no ulp count admits (a special-value class mismatch).
inline constexpr std::uint64_t kRankNone = ~std::uint64_t{0};

struct AccuracyProfile {
    std::uint64_t rank = kRankStrict;
    bool ftz = false, ieee = false;

    std::string text() const;  // "strict", "ulp:4+ftz", ...
    bool operator==(const AccuracyProfile&) const = default;
};

// "strict", "cr", "faithful", "rigorous", "ulp:N" with optional "+ftz" and
// "+ieee" (any order); empty text is strict.  std::invalid_argument naming
// what is wrong.
AccuracyProfile parse_profile(const std::string& text);

// The rank of an element within n ulp of the correctly rounded result that
// meets no tighter rung (n >= 2; n <= 1 is strict).
inline std::uint64_t ulp_rank(std::uint64_t n) { return n <= 1 ? kRankStrict : kRankUlpBase + n; }

// "cr", ..., "ulp:7" for a rank alone.
std::string rank_text(std::uint64_t rank);

// The profile choices a report lists (`conform run --help`).
const char* profile_help();

}  // namespace conform::props
