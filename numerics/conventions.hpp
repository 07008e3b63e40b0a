// Declared conventions: the documented alternatives to the oracle's choices
// where real libraries differ, by op (docs/ops.md lists them; `conform ops`
// prints them).  A kernel, a plug-in descriptor, a case file or a Python
// check declares them as {"key": "value"}; the verdict then holds the kernel
// to the reference those values imply, and nothing else.
//
//   key            values (first: the oracle's)   ops
//   masked_row     zero | nan                      softmax, attention, gated_attention, sink_attention
//   eps_placement  inside | outside                rms_norm, layer_norm, l2_norm
//   l2_form        sqrt | max                      l2_norm
//   special_values ml | ieee                       activations, gated ops
//   gelu           erf | tanh                      geglu
//   act_arith      ulp | quotient | one_plus_tanh  sigmoid, silu, swiglu (quotient); gelu_tanh,
//                  | one_plus_erf | log1p_exp      gelu_erf, geglu (by its gelu); softplus (log1p_exp);
//                  | scaled_tanh                   softcap (scaled_tanh): the budget only, the textbook
//                                                  form in FP32 with a library exp/tanh/erf/log1p
//   causal         bottom_right | top_left         attention, gated_attention, sink_attention
//   attention_arith fp32 | input                   attention, sink_attention (the budget only: logits, weights and lse
//                                                  rounded to the input format, as eager attention)
//   rope_pairing   interleaved | half              rope (pins its `pairing` parameter to 0 | 1)
//   mla_form       explicit | absorbed             mla (pins its `form` parameter to 0 | 1)
//
// This header is shared by the oracle (which evaluates the alternatives) and
// the kernel side (plug-in loader, case files), so it holds no arithmetic.
// Unknown keys or values, a key the op does not have, or a combination that
// means nothing are errors: a declaration the verdict ignored would silently
// judge the kernel against the wrong reference.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "numerics/op.hpp"

namespace conform {

using Conventions = std::map<std::string, std::string>;

struct ConventionSpec {
    std::string key;
    std::vector<std::string> values;  // values.front() is the oracle's default
    std::vector<std::string> ops;
    std::string doc;
};

const std::vector<ConventionSpec>& convention_specs();

// The conventions op `op` accepts, as "key = default (default) | alternative ...".
std::vector<std::string> conventions_for(const std::string& op);

// The specs that apply to op `op`.
std::vector<const ConventionSpec*> convention_specs_for(const std::string& op);

// Throws std::invalid_argument naming the key and the accepted values.  With
// an op, also a key that op does not have and meaningless combinations.
void check_conventions(const Conventions& c, const std::string& op = "");

// The value of `key` under c (the default when c does not declare it).
std::string convention(const Conventions& c, const std::string& key);

// The hidden oracle parameters that carry formula conventions
// ("convention.<key>" = index of the value, 0 for the default), added to p.
// Only keys whose value is not the default are set.
Params with_convention_params(const Params& p, const Conventions& c);

// A parameter a convention pins: rope_pairing = half pins rope's `pairing`
// to 1 (interleaved: 0); mla_form = absorbed pins mla's `form` to 1.  nullopt when c pins nothing for op.
std::optional<std::pair<std::string, double>> pinned_param(const std::string& op, const Conventions& c);

// Every single-key alternative to c for op `op` (each differs from c in one
// key), as the key=value text and the resulting conventions: what a failing
// kernel is re-judged under to say which convention would explain it.
std::vector<std::pair<std::string, Conventions>> convention_alternatives(const std::string& op, const Conventions& c);

// Every two-key alternative to c for op `op` that means something (two keys
// each set to a value other than c's; geglu's gelu = tanh with act_arith =
// one_plus_tanh, though neither alone fits c = {}), as the text
// "act_arith=one_plus_erf, special_values=ieee" and the conventions: tried
// when no single key explains a failure (a library's GELU is both its
// arithmetic class and IEEE's specials).
std::vector<std::pair<std::string, Conventions>> convention_pairs(const std::string& op, const Conventions& c);

// "eps_placement=outside, masked_row=nan" (sorted by key); "" when empty.
std::string conventions_text(const Conventions& c);

}  // namespace conform
