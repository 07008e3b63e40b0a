// The oracle interface of the structured ops (RoPE, softmax, attention, ...):
// ops whose outputs are not an elementwise or row-wise map of one input.
//
// An op family provides, for each registry op, an evaluator
//     OpOutputs eval_<op>(const Params& params, const std::vector<TensorView>& in);
// that reads its inputs exactly (from_double of every element), validates
// their shapes against the op's documented layout (std::invalid_argument
// naming the op, the input and the offending dimension), and returns the
// exact-arithmetic value of every output element at the thread's current
// working precision (PrecisionScope).  Correct rounding (Ziv: evaluate at P
// and 2P, accept what both round the same way) is done once, generically, by
// the caller; an evaluator never rounds to a storage format.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/op.hpp"
#include "numerics/shape_check.hpp"
#include "numerics/tensor.hpp"
#include "oracle/real.hpp"

namespace conform::oracle {

struct OpOutputs {
    std::vector<std::string> names;                  // the op's output names, in order
    std::vector<std::vector<std::int64_t>> shapes;   // one shape per output
    std::vector<std::vector<Real>> values;           // row-major, numel(shape) each
    // What the verdict should count about this case beyond the values (the
    // router's ambiguous selections it accepted): reason -> count.
    std::map<std::string, std::int64_t> notes = {};
};

// An integer-valued parameter of an evaluator in [lo, hi] (enums and sizes
// are stored as doubles): std::invalid_argument naming the op, the
// parameter and its value otherwise.
std::int64_t integer_param(const std::string& op, const Params& p, const std::string& name, double fallback, double lo,
                           double hi);

using StructuredEval = OpOutputs (*)(const Params&, const std::vector<TensorView>&);

// The evaluator of a structured op by registry name (rope, sincos_pe,
// softmax, online_softmax, lse_merge, attention, qk_norm_attention,
// gated_attention, mla, gdn, kda, and the forms gdn_recurrent, gdn_chunkwise,
// kda_recurrent, kda_chunkwise); nullptr for any other name.
StructuredEval find_structured(std::string_view op);
std::vector<std::string> structured_ops();

// Correctly rounded outputs of a structured op (Ziv over the whole op: the
// evaluator runs at P and 2P bits, P = 128 first; every element is accepted
// when both round the same way with margin (oracle::ziv_accept), else the op
// is re-run at twice the precision, up to kMaxBits).
struct StructuredResult {
    std::vector<std::string> names;
    std::vector<Tensor> rounded;              // one per output, in the requested format
    std::vector<std::vector<double>> exact;   // the oracle values, rounded to double
    unsigned max_bits = 0;                    // highest precision any element needed
    std::int64_t recomputed = 0;              // elements that needed more than 2P
    std::map<std::string, std::int64_t> notes = {};  // OpOutputs::notes of the last evaluation
};

// `out` gives one format per output; a single format applies to every output.
// Throws std::invalid_argument for an unknown op or bad inputs.
StructuredResult evaluate_structured(const std::string& op, const Params& params, const std::vector<TensorView>& in,
                                     const std::vector<Format>& out);

// Every element of t, exactly, in row-major order.
inline std::vector<Real> read_exact(const TensorView& t) {
    const std::int64_t n = t.numel();
    std::vector<Real> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) set_exact(v[static_cast<std::size_t>(i)], t.value(i));
    return v;
}

// Shape checks (numerics/shape_check.hpp), by their oracle names too.
using conform::require_dim;
using conform::require_rank;

}  // namespace conform::oracle
