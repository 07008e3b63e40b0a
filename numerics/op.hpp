// The ops conform knows: registry name, family (the file stem shared across
// oracle/, impls/, properties/, tests/, docs/), tensor names and parameters.
// Kernels, the oracle, dump files and plug-ins all name things this way.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/tensor.hpp"

namespace conform {

// unary, gated: elementwise (ULP budgets).  row: a map of each row of x (the
// last dimension; further inputs are [n] vectors broadcast over rows) held to
// a derived per-element bound (norms, softmax).
// structured: anything else (RoPE, attention, ...): evaluated whole by
// oracle/structured.hpp, outputs shaped by OpSpec::out_shapes.
enum class OpKind { unary, gated, row, structured };

class Params;

struct ParamSpec {
    std::string name;
    double default_value;
    std::string doc;
};

struct OpSpec {
    std::string name;
    std::string family;
    OpKind kind;
    std::vector<std::string> inputs;   // e.g. {"x", "weight"}
    std::vector<std::string> outputs;  // e.g. {"y"}
    std::vector<ParamSpec> params;
    std::string formula;
    // Output shapes from the input views (structured ops); null: every output
    // has the shape of the first input.
    std::vector<std::vector<std::int64_t>> (*out_shapes)(const std::vector<TensorView>& in) = nullptr;
    // Output shapes that also depend on a parameter (int8_block's [heads, T, T]
    // scores); takes precedence over out_shapes.
    std::vector<std::vector<std::int64_t>> (*out_shapes_params)(const std::vector<TensorView>& in, const Params& p) = nullptr;
    // Staged ops (int8_block): the oracle of each output is the exact stage
    // applied to the candidate's own earlier outputs (the local error of the
    // divergence analysis), so the verdict passes the candidate's outputs to
    // the evaluator and the bound after the op's inputs.  Called with the
    // inputs alone, the evaluator chains its own exact stages.
    bool staged = false;
};

// The shapes of op's outputs for these inputs and parameters (out_shapes_params,
// out_shapes, or every output shaped like the first input).
std::vector<std::vector<std::int64_t>> output_shapes(const OpSpec& op, const std::vector<TensorView>& in, const Params& p);

const std::vector<OpSpec>& op_specs();
// Inputs an op call may leave out: attention's mask, the delta rule's
// initial_state and cu_seqlens, the router's selection_bias, the MoE layers'
// shared experts and norm_weight (docs/ops.md).
bool optional_input(std::string_view input_name);
// attention and gated_attention share q, k, v, the optional mask and every
// attention property; gated_attention's gate logits g come before the mask,
// so the mask is input 3 of attention and input 4 of gated_attention.
bool softmax_attention_op(std::string_view op);
std::size_t attention_mask_input(std::string_view op);
const OpSpec* find_op(std::string_view name);
std::vector<std::string> op_names();

// Op parameters by the formula's symbols ("eps", "beta1", ...).  Missing
// entries read as the op's documented default.
class Params {
public:
    Params() = default;
    explicit Params(std::map<std::string, double> v) : v_(std::move(v)) {}
    static Params defaults(const OpSpec& op);
    double get(const std::string& name, double fallback) const;
    double at(const std::string& name) const;  // throws when absent
    void set(const std::string& name, double value) { v_[name] = value; }
    const std::map<std::string, double>& values() const { return v_; }

private:
    std::map<std::string, double> v_;
};

}  // namespace conform
