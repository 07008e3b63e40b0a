// Verdicts: a kernel's output against the oracle, element by element.
// Special values are compared as classes first; then elementwise ops are held
// to a ULP budget against the correctly rounded result, and reductions to the
// derived per-element bound (utilization = |err| / bound <= 1).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "impls/registry.hpp"
#include "numerics/tensor.hpp"
#include "oracle/eval.hpp"

namespace conform::props {

struct Budget {
    bool bound_based = false;  // row norms: derived bound; else ULP budget
    std::uint64_t max_ulp = 1;
    std::string text() const;
};

// The documented budget of a kernel (docs/<family>.md).
Budget budget_for(const KernelInfo& k);

// Running error statistics of one kernel (feeds the report histograms).
class Stats {
public:
    void add_ulp(std::uint64_t ulps);
    void add_class_mismatch() { ++class_mismatch_; ++elements_; }
    void add_util(double u);
    void set_worst_ulp(std::string what) { worst_ulp_ = std::move(what); }
    void set_worst_util(std::string what) { worst_util_ = std::move(what); }
    void merge(const Stats& o);

    std::int64_t elements() const { return elements_; }
    std::uint64_t max_ulp() const { return max_ulp_; }
    double max_util() const { return max_util_; }
    const std::string& worst_ulp_case() const { return worst_ulp_; }
    const std::string& worst_util_case() const { return worst_util_; }
    bool has_util() const { return !utils_.empty(); }
    std::vector<std::int64_t> ulp_hist() const;   // 10 buckets, see reports/model.hpp
    std::vector<std::int64_t> util_hist() const;  // 12 buckets
    std::vector<double> util_quantiles() const;   // p50, p90, p99, p99.9, max

private:
    std::int64_t elements_ = 0, class_mismatch_ = 0;
    std::vector<std::int64_t> ulp_buckets_ = std::vector<std::int64_t>(9, 0);
    std::uint64_t max_ulp_ = 0;
    double max_util_ = 0;
    std::vector<double> utils_;
    std::string worst_ulp_, worst_util_;
};

struct CaseResult {
    bool pass = true;
    std::string message;  // the first failing element, with values in hex
    std::vector<Tensor> outputs;
    oracle::Result ref;           // the first output (every output: all_ref)
    std::vector<Tensor> all_ref;  // structured ops: every output, correctly rounded
};

// Runs kernel k on the inputs, the oracle alongside, and judges every element.
CaseResult check_case(const KernelInfo& k, const Params& p, const std::vector<TensorView>& in, Stats* stats = nullptr);

// Inputs as hex floats, for counterexamples.
std::string show_inputs(const OpSpec& op, const Params& p, const std::vector<TensorView>& in, std::size_t max_elems = 64);

}  // namespace conform::props
