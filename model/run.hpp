// Running the block stack (docs/diverge.md).
//
// Two tiers of one graph (model/graph.hpp):
//  - the oracle on the FP64 tier: the oracle/ templates instantiated on
//    double (matmuls through Eigen), with an a-priori error bound per step;
//    cross-checked against the MPFR tier on sampled rows;
//  - the candidate: the built-in kernels of one format (fp32, bf16, fp16),
//    optionally with one registered mutant substituted at one layer, or with
//    conventions other than the contract's (to make dumps that violate it).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/contract.hpp"
#include "model/graph.hpp"
#include "numerics/tensor.hpp"

namespace conform::model {

// A tensor of doubles (oracle tier values, or a candidate's values read exactly).
struct Values {
    std::vector<std::int64_t> shape;
    std::vector<double> v;  // row-major
    std::int64_t numel() const { return static_cast<std::int64_t>(v.size()); }
};
Values values_of(const TensorView& t);  // exact
// The same into `storage`'s buffer (one of t's size is reused as it is: a
// recycled buffer costs no fresh pages).
Values values_of(const TensorView& t, std::vector<double> storage);

using Named = std::map<std::string, Values>;          // points, weights, caches by name
using NamedTensors = std::map<std::string, Tensor>;   // the same, in a storage format

// One step on the FP64 tier from the values of its inputs and weights
// (looked up by name), under conventions `conv` (default: the contract's).
using Lookup = std::function<const Values&(const std::string&)>;
Values eval_step(const ModelContract& c, const Step& s, const Lookup& get, const Conventions& conv);

// The whole stack on the FP64 tier from the model input: every point, by name.
Named run_oracle(const ModelContract& c, const Named& weights, const Values& input);
// The same-dtype reference (docs/diverge.md, "Drift"): every step exact on
// the previous points as rounded, its result rounded once into its point's
// storage format -- what a correctly rounded implementation of the
// contract's formats computes.
Named run_oracle_rounded(const ModelContract& c, const Named& weights, const Values& input);
Values rounded_into(Values v, Format f);  // each element correctly rounded into f

// The fused add+norm formulation (hidden and residual carried separately,
// seed 003): the same points; must equal run_oracle.
Named run_oracle_fused(const ModelContract& c, const Named& weights, const Values& input);

// The synthetic model: deterministic weights, caches and input from a seed,
// stored in the contract's dtype (scaled so activations stay O(1) at any depth).
struct Synthetic {
    NamedTensors weights;  // weights and caches
    Tensor input;
};
Synthetic synthetic_model(const ModelContract& c, std::uint64_t seed);
// One tensor of it (a weight or cache by name, shape from weight_specs), and
// its input: what synthetic_model holds, drawn one at a time.
Tensor synthetic_weight(const ModelContract& c, std::uint64_t seed, const std::string& name);
Tensor synthetic_input(const ModelContract& c, std::uint64_t seed);

struct CandidateOptions {
    std::string mutant;       // registry name of a mutant kernel to substitute ("" none)
    std::int64_t at = -1;     // the layer it is substituted at
    Conventions conventions;  // overrides of the contract's conventions (what the candidate really does)
    std::function<void(std::int64_t layer)> progress;  // called after each layer (optional)
    // Called with every point as it is computed (optional; run_kernels_streamed
    // drops each point after its last use, so this is the only way to keep it).
    std::function<void(const std::string& point, const Tensor& value)> emit;
};
// The stack run by the built-in kernels in c.dtype: every point, by name.
// std::invalid_argument when the mutant is unknown or its op has no step here.
NamedTensors run_kernels(const ModelContract& c, const NamedTensors& weights, const Tensor& input,
                         const CandidateOptions& opt = {});
// The same in bounded memory, for models larger than memory: each weight
// asked of `weight` when a step first reads it (again if a later step reads
// it after its release), weights and points dropped after their last use;
// the points reach the caller through opt.emit only.
using WeightSource = std::function<Tensor(const std::string& name)>;
void run_kernels_streamed(const ModelContract& c, const WeightSource& weight, const Tensor& input,
                          const CandidateOptions& opt);

}  // namespace conform::model
