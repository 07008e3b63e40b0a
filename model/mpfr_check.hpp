// The FP64 tier checked against the MPFR tier on samples (docs/model.md,
// "FP64 tier"): every step of the graph is recomputed at 128 bits on a few
// rows (norms, elementwise ops, matmul and residual elements) or one head
// (rope, attention, gdn, kda; sinkhorn whole), from the same inputs the FP64
// tier used, and compared with the FP64 tier's values.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "model/run.hpp"

namespace conform::model {

struct CrossCheck {
    // Per step kind (name(StepKind)): max over the sampled elements of
    // |fp64 - mpfr| / max |mpfr| over that step's sample (a normwise
    // relative discrepancy: elements near zero after cancellation do not
    // blow it up).
    std::map<std::string, double> max_rel;
    std::int64_t elements = 0;  // elements compared
    double max() const;
    void add(const CrossCheck& o);  // another sample's (another layer's): maxima and counts combined
    std::string summary() const;  // "max 3.1e-16 over 1234 elements (matmul 2.2e-16, ...)"
};

// `points`: the FP64 tier's points (run_oracle) for `weights`.  n_samples
// rows per row-wise step and elements per matmul; heads are drawn from the
// seed too.  Steps evaluated under the contract's conventions.  `steps`:
// the steps checked (a layer range's); null: the whole graph.
CrossCheck cross_check_mpfr(const ModelContract& c, const Named& weights, const Named& points, int n_samples,
                            std::uint64_t seed, const std::vector<Step>* steps = nullptr);
// The same over `steps`, every point, weight and cache by `get` (a streamed
// run checks each layer while its values are held).
CrossCheck cross_check_mpfr(const ModelContract& c, const Lookup& get, int n_samples, std::uint64_t seed,
                            const std::vector<Step>& steps);

}  // namespace conform::model
