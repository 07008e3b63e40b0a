// Statistics over many elements (docs/numerics.md, "Statistics"): what no
// per-element budget can see.  A kernel that truncates instead of rounding to
// nearest is within 1 ulp everywhere, but its results that are not the
// correctly rounded ones all lie toward zero.
#pragma once
#include <cstdint>
#include <string>

#include "properties/verdict.hpp"

namespace conform::props {

// Significance of each symmetry test.  A suite run makes at most a few
// hundred of them (two per kernel), so a kernel that rounds to nearest fails
// one with probability below 1e-9 per run.
inline constexpr double kBiasAlpha = 1e-12;

// Hoeffding's bound on the two-sided tail of a fair sign test: with m
// votes, the probability that |for - m/2| >= |observed - m/2|.
double sign_test_tail(std::int64_t votes_for, std::int64_t votes_against);

// The rounding-direction votes of a kernel (Stats::add_direction_vote):
// empty when both (above/below, away from/toward zero) are symmetric at
// kBiasAlpha, else what is biased, e.g. "results not correctly rounded lie
// toward zero in 412 of 415 cases (p < 1e-170)".
// `unit` names the votes: "elements" or "cases" (vote_unit()).
std::string rounding_bias(const Stats& s, const char* unit);

// The independent unit of op's direction votes (verdict.cpp, judge_case).
const char* vote_unit(const OpSpec& op);

}  // namespace conform::props
