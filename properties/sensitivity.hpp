// Sensitivity (docs/numerics.md, "Sensitivity"): how much less accurate than
// itself a kernel can get before the suite rejects it.  The kernel's own
// cases are evaluated once; its error is then amplified k-fold (exact + k
// (kernel - exact), rounded to the output format) and judged again, without
// running anything, while k is searched for the smallest factor rejected.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "properties/suite.hpp"
#include "properties/verdict.hpp"

namespace conform::props {

// The cases of the suite's oracle comparisons, evaluated: within_budget and
// special_values run as in the suite (RapidCheck, cfg's seed and cases),
// without shrinking, every case kept.
std::vector<CaseEval> sample_cases(const KernelInfo& k, const RunConfig& cfg);

// e with every finite kernel result moved to exact + f (got - exact),
// rounded to its format (special values and exact results unchanged).
CaseEval amplify(const CaseEval& e, double f);

// A check over the whole sample's statistics (rounding bias, drift from a
// recorded profile): empty when it passes, else why not.
using SampleCheck = std::function<std::string(const Stats&)>;

struct SampleVerdict {
    bool rejected = false;
    std::string why;  // the first failing element or check
    Stats stats;      // of the within_budget cases (what the checks see, as in run_suite)
};
SampleVerdict judge_sample(const std::vector<CaseEval>& cases, const AccuracyProfile& profile, double factor,
                           const std::vector<SampleCheck>& checks);

struct Sensitivity {
    enum class Status { detected, exact, not_detected, fails_unamplified } status = Status::not_detected;
    double factor = 0;         // smallest factor found rejected (within 0.1 %)
    std::string detected_by;   // what rejects it at that factor
    bool correctly_rounded = false;  // every result the correctly rounded one: no factor <= 2 changes a bit
    std::int64_t cases = 0;
};

// Doubling from 2 up to max_factor, then bisection to 0.1 %.
Sensitivity find_sensitivity(const std::vector<CaseEval>& cases, const AccuracyProfile& profile,
                             const std::vector<SampleCheck>& checks, double max_factor = 1 << 20);

std::string text(const Sensitivity& s);  // "detects x1.87 (...)" / "exact on every case" / ...

}  // namespace conform::props
