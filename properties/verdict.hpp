// Verdicts: a kernel's output against the oracle, element by element
// (docs/numerics.md, "Verdicts").  Special values are compared as classes
// first; then elementwise ops are held to a ULP budget against the correctly
// rounded result, and bound-based outputs to the derived per-element bound in
// two tiers: the rigorous bound (any summation order) and the probabilistic
// one (Higham & Mary), which gates by default where its model holds.  An
// element whose bound is infinite or as large as the result itself is not
// judged, never passed.  The standard is the kernel's accuracy profile
// (numerics/profile.hpp; strict unless the kernel declares another).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "impls/registry.hpp"
#include "numerics/tensor.hpp"
#include "oracle/eval.hpp"
#include "numerics/profile.hpp"

namespace conform::props {

struct Budget {
    bool bound_based = false;  // row norms: derived bound; else ULP budget
    std::uint64_t max_ulp = 1;
    std::string arith;  // a declared act_arith class (elementwise ops): 1 ulp or its bound
    std::string text() const;
};

// The documented budget of a kernel (docs/<family>.md).
Budget budget_for(const KernelInfo& k);

// The profile kernel k is judged by: the one it declares, else strict.
AccuracyProfile profile_for(const KernelInfo& k);

// Where an element's value lies: special (a NaN or infinite input or exact
// value), subnormal (an input or the exact value below the format's normal
// range), tail (the exact value at most 2^-12 of its scale: the decaying
// tails of the activations, tiny softmax weights), normal (the rest).
enum class Region : std::uint8_t { normal, tail, subnormal, special };
inline constexpr std::size_t kRegions = 4;
const char* name(Region r);

// An element is not judged when its bound is infinite (or NaN), or at least
// kVacuousFactor times its scale max(|exact|, RMS of its row) (and at least
// 1 for a log-sum-exp, whose absolute error is the weights' relative error):
// such a bound guarantees not even the leading digit.
inline constexpr double kVacuousFactor = 1;

// Running error statistics of one kernel (feeds the report histograms).
class Stats {
public:
    void add_ulp(std::uint64_t ulps);
    void add_class_mismatch() { ++class_mismatch_; ++elements_; }
    // Utilization in the gating tier and in the rigorous tier.
    void add_util(double gate, double rigorous);
    void add_not_judged(const std::string& reason);
    // Counted facts about judged elements (the router's ambiguous selections accepted).
    void add_note(const std::string& what, std::int64_t n) { notes_[what] += n; }
    const std::map<std::string, std::int64_t>& notes() const { return notes_; }
    // The logarithm of one case's worst gating-tier utilization (NaN when it
    // has no positive one); one entry per judged case, in order
    // (golden::drift pairs them with a recorded profile's).
    void add_case_log_util(double log_worst) { case_log_utils_.push_back(log_worst); }
    const std::vector<double>& case_log_utils() const { return case_log_utils_; }
    // The fraction of one case's judged finite results that are not the
    // correctly rounded ones (NaN when it has none); one entry per case.
    void add_case_misrounded(double fraction) { case_misrounded_.push_back(fraction); }
    const std::vector<double>& case_misrounded() const { return case_misrounded_; }
    // The direction of the results that are not the correctly rounded ones,
    // one vote per independent unit (an element of an elementwise op, a row
    // of any other: a row's elements share its normalizer's error): the sign
    // of the summed got - ref and of |got| - |ref| (+1, -1, 0 for a tie).
    // statistics.hpp tests the votes for symmetry.
    void add_direction_vote(int above, int away);
    // The tightest rung of the accuracy ladder the element meets, plain and
    // with the ftz / ieee / both alternatives, and its region.
    void add_rank(const std::array<std::uint64_t, 4>& ranks, Region region, std::uint64_t ulps);
    void set_worst_ulp(std::string what) { worst_ulp_ = std::move(what); }
    void set_worst_util(std::string what) { worst_util_ = std::move(what); }
    void merge(const Stats& o);

    std::int64_t elements() const { return elements_; }
    std::uint64_t max_ulp() const { return max_ulp_; }
    double max_util() const { return max_util_; }
    double max_util_rigorous() const { return max_util_rig_; }
    const std::string& worst_ulp_case() const { return worst_ulp_; }
    const std::string& worst_util_case() const { return worst_util_; }
    bool has_util() const { return !utils_.empty(); }
    const std::vector<double>& utils() const { return utils_; }
    std::vector<std::int64_t> ulp_hist() const;   // 10 buckets, see reports/model.hpp
    std::vector<std::int64_t> util_hist() const;  // 12 buckets
    std::vector<double> util_quantiles() const;   // p50, p90, p99, p99.9, max (gating tier)
    std::vector<double> util_quantiles_rigorous() const;
    std::int64_t not_judged() const { return not_judged_; }
    const std::map<std::string, std::int64_t>& not_judged_reasons() const { return not_judged_reasons_; }
    // Votes: [0] above vs below, [1] away from zero vs toward it.
    const std::array<std::int64_t, 2>& votes_for() const { return votes_for_; }
    const std::array<std::int64_t, 2>& votes_against() const { return votes_against_; }
    // Tightest rank over all elements, per alternative set (0 plain, 1 ftz,
    // 2 ieee, 3 both); elements per region, and those beyond strict with
    // their largest ulp error.
    const std::array<std::uint64_t, 4>& max_rank() const { return max_rank_; }
    const std::array<std::int64_t, kRegions>& region_elements() const { return region_elements_; }
    const std::array<std::int64_t, kRegions>& region_beyond_strict() const { return region_beyond_; }
    const std::array<std::uint64_t, kRegions>& region_max_ulp() const { return region_max_ulp_; }

private:
    std::int64_t elements_ = 0, class_mismatch_ = 0, not_judged_ = 0;
    std::array<std::int64_t, 2> votes_for_{}, votes_against_{};
    std::vector<std::int64_t> ulp_buckets_ = std::vector<std::int64_t>(9, 0);
    std::uint64_t max_ulp_ = 0;
    double max_util_ = 0, max_util_rig_ = 0;
    std::vector<double> utils_, utils_rig_, case_log_utils_, case_misrounded_;
    std::string worst_ulp_, worst_util_;
    std::map<std::string, std::int64_t> not_judged_reasons_;
    std::map<std::string, std::int64_t> notes_;
    std::array<std::uint64_t, 4> max_rank_{};
    std::array<std::int64_t, kRegions> region_elements_{}, region_beyond_{};
    std::array<std::uint64_t, kRegions> region_max_ulp_{};
};

// The tightest profile every judged element met ("none" when a special-value
// mismatch no profile admits remains): the smallest rank of the four
// alternative sets, fewer modifiers first on a tie.
std::string tightest_profile(const Stats& s);

// One output of a case: the kernel's values beside the oracle's, with both
// tiers of its derived bound when it has one.
struct OutputEval {
    std::string name;
    Format format = Format::fp32;
    Tensor got, ref;                               // kernel, correctly rounded oracle
    std::vector<double> exact;                     // the oracle's values, rounded to double
    std::vector<double> rigorous, probabilistic;   // derived bounds; empty: ULP budget
    std::vector<double> scale;                     // max(|exact|, RMS of its row); bound-based outputs
    // An elementwise op under a declared arithmetic class (act_arith): 1 ulp
    // still passes, the class's bound admits more, and each element is its
    // own scale (no row ties elementwise results together).
    bool ulp_or_bound = false;
    std::vector<Region> region;
    // The references under the ftz and ieee alternatives (profile.hpp);
    // absent when they were not asked for or equal the plain one.
    std::optional<Tensor> ftz, ieee;
    // false for an output the kernel declares it does not write
    // (KernelInfo::unwritten): evaluated, never judged.
    bool judged = true;
    bool bounded() const { return !rigorous.empty(); }
};

// A case evaluated: everything the verdict needs to judge it under any
// profile, and to judge an amplified copy of the kernel (sensitivity.hpp).
struct CaseEval {
    const KernelInfo* kernel = nullptr;
    const OpSpec* op = nullptr;
    std::vector<OutputEval> outputs;
    // Non-empty when the probabilistic tier's assumptions fail for these
    // inputs (docs/numerics.md): its bounds are then the rigorous ones.
    std::string model_breach;
    oracle::Result first;  // the first output as oracle::evaluate returns it
    std::shared_ptr<const std::vector<Tensor>> inputs;  // copies, for descriptions
    std::string property;  // the property that generated it, when collected (RunConfig::collect)
    std::map<std::string, std::int64_t> notes;  // the oracle's (OpOutputs::notes)

    // Element i of output o with the inputs that made it (hex floats).
    std::string describe(std::size_t o, std::int64_t i) const;
};

struct EvalOptions {
    bool alternatives = false;  // also the ftz / ieee references (for ranks)
    // The kernel's outputs and the oracle's only: no bounds (outputs unbounded),
    // no model check.  For properties that compare references, not verdicts.
    bool reference_only = false;
};

// While one is alive on this thread, evaluate_case runs the kernel only and
// takes its outputs as the reference: every case passes.  For `conform
// cases`, which records the inputs of properties whose next case no verdict
// steers (special_values; within_budget where every element is judged, see
// cli/cases.cpp) and judges them later, in `conform validate`: the oracle
// ran twice before.  A scope may be nested with `false` where a real
// verdict is needed inside one.
class OracleSkipScope {
public:
    explicit OracleSkipScope(bool skip = true);
    ~OracleSkipScope();
    OracleSkipScope(const OracleSkipScope&) = delete;
    OracleSkipScope& operator=(const OracleSkipScope&) = delete;

private:
    bool prev_;
};

// Runs kernel k on the inputs, the oracle and the bounds alongside.
CaseEval evaluate_case(const KernelInfo& k, const Params& p, const std::vector<TensorView>& in, EvalOptions opt = {});

struct CaseResult {
    bool pass = true;       // no element failed
    std::int64_t judged = 0, not_judged = 0;
    std::string message;    // the first failing element, with values in hex
    std::size_t failed_output = 0;     // where that element is: output index
    std::int64_t failed_element = -1;  // and flat element index (-1: none failed)
    std::vector<Tensor> outputs;
    oracle::Result ref;           // the first output (every output: all_ref)
    std::vector<Tensor> all_ref;  // structured ops: every output, correctly rounded
    // A pass that judged something: a case whose every element is not
    // judged is no pass (nor a failure).
    bool passed() const { return pass && judged > 0; }
};

// Judges every element of an evaluated case under `profile`.
CaseResult judge_case(const CaseEval& e, const AccuracyProfile& profile, Stats* stats = nullptr);

// The gating tier's bound of element i of output o of an evaluated case (the
// probabilistic one while its model holds, else the rigorous one), or NaN
// where the element is not judged there: not finite, undefined, vacuous, or
// its exact value not finite.  For properties comparing two kernel runs.
double judged_bound(const CaseEval& e, std::size_t o, std::size_t i);

// evaluate_case + judge_case under the kernel's own profile.
CaseResult check_case(const KernelInfo& k, const Params& p, const std::vector<TensorView>& in, Stats* stats = nullptr);

// Inputs as hex floats, for counterexamples.
std::string show_inputs(const OpSpec& op, const Params& p, const std::vector<TensorView>& in, std::size_t max_elems = 64);

// Why the probabilistic tier's model does not hold for these inputs (empty:
// it holds; docs/numerics.md, "Where the model fails"):
//   - repeated values: a row of a data input with fewer distinct values than
//     half its length rounds alike again and again, so its errors add up
//     instead of averaging out (summing a constant drifts linearly);
//   - absorption: the terms of a sum of nonnegative terms (x^2 of the norms,
//     (x - mean)^2, the exponentials of softmax and attention) that are at
//     most u times the total can vanish below half an ulp of the running sum,
//     each an error of the same sign; when they add up to more than one
//     rounding of the total (u A) the errors are no longer mean-zero;
//   - ops without such a rule: a row whose largest magnitude exceeds
//     2^(p/2) times its median (p the accumulation precision).
std::string probabilistic_model_breach(const OpSpec& op, const Params& p, const std::vector<TensorView>& in, Format acc);

}  // namespace conform::props
