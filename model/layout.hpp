// Layouts between a model point and the registry ops (docs/model.md,
// "Layouts").  Every point is stored [T, H * D] (token-major, heads side by
// side); the registry ops take other layouts:
//   rope, attention   [H, L, D]  (heads-major)
//   gdn, kda          [T, H, d]  (the same memory as [T, H * d]: a reshape)
//   head_norm/l2_head rows of d: [T * H, d] (a reshape)
// and op_call() gives, for one step, the registry op, its Params (from the
// contract and the conventions) and its inputs in op order and op layout, so
// the kernel executor, the oracle and the budgets (oracle/bound.hpp
// row_bound, find_structured_bound) all see exactly the same views.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/run.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::model {

// [T, H * D] -> [H, T, D] and back (exact copies; Tensors keep their format).
Values heads_major(const Values& x, std::int64_t heads);
Values tokens_major(const Values& x);  // [H, T, D] -> [T, H * D]
Tensor heads_major(const TensorView& x, std::int64_t heads);
Tensor tokens_major(const TensorView& x);
// Concatenation along the first dimension (the cached keys before the new ones).
Values concat_first(const Values& a, const Values& b);
Tensor concat_first(const TensorView& a, const TensorView& b);
// The same elements under another shape (same numel).
Values reshaped(Values x, std::vector<std::int64_t> shape);
Tensor reshaped(const TensorView& x, const std::vector<std::int64_t>& shape);

// Input 0 of step s as the step reads it: its columns [in_offset, in_offset
// + w) of each of the step's `heads` groups, w = the point's features / heads
// (Step::in_offset: DeepSeek MLA's rope parts and latent); x itself when the
// widths agree.  Exact copies.
Values step_input0(const Values& x, const Step& s);

// Exact conversions between Values and fp64 tensors (and any tensor).
Tensor to_tensor(const Values& v);                 // Format::fp64
Tensor to_tensor(const Values& v, Format f);       // each value correctly rounded into f
Tensor copy_tensor(const TensorView& t);           // a dense copy in t's format
std::vector<std::int64_t> shape_of(const TensorView& t);

// One step as a registry op call.  `op` is empty for the steps that are not
// registry ops (matmul, add, mul, hc_mix, hc_update): those are computed by
// the model code itself and budgeted by the divergence analysis.
struct OpCall {
    std::string op;          // "rms_norm", "rope", "attention", "gdn", "swiglu", ...
    Params params;           // the op's parameters (every one set)
    std::vector<Tensor> in;  // inputs in op order and op layout
    // How the op's first output becomes the point:
    std::int64_t out_heads = 0;  // > 0: the output is [H, T, D] (rope, attention): tokens_major it
    bool negate = false;         // log_decay: the point is -softplus(x) (a sign flip, exact)
    // Conventions of the step that no registry parameter expresses (eps
    // outside the square root, norm cast before the weight): the op above is
    // the declared formula, and the step differs from it by these.
    std::vector<std::string> unexpressed;
};

// The weight matrix a matmul step multiplies by under conventions conv: its
// own, or the embedding for the logits under lm_head = embed.
std::string matmul_weight(const Step& s, const Conventions& conv);

// The value of a convention (its default when conv lacks the key).
const std::string& convention_value(const Conventions& conv, const std::string& key);

// The registry op of step s under conventions conv ("" for matmul, mul, add,
// hc_mix, hc_update).
std::string step_op(const ModelContract& c, const Step& s, const Conventions& conv);

// Tensors of the step's inputs and weights by name (points, weights, caches).
using TensorLookup = std::function<const Tensor&(const std::string&)>;

// The op call of step s with its inputs in their stored formats.
OpCall op_call(const ModelContract& c, const Step& s, const TensorLookup& get, const Conventions& conv);
// The same with Values: inputs are fp64 tensors holding the values exactly.
OpCall op_call(const ModelContract& c, const Step& s, const Lookup& get, const Conventions& conv);
// The point of step s from the op's first output (layout, shape and sign).
Values point_from_op(const OpCall& call, const Step& s, const Values& out0);
Tensor point_from_op(const OpCall& call, const Step& s, const TensorView& out0);

}  // namespace conform::model
