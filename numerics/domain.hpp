// A kernel's declared domain (plug-in ABI v2, docs/plugins.md "Domains"): the
// inputs it supports, by dimension name and by parameter, e.g.
//   {"head_dim": [64, 128], "rows": {"multiple_of": 8}, "causal": [1]}
// and the tunable parameters the suite may vary ({"block": [16, 64]}).
// The property suite projects generated cases into it
// (properties/domain.hpp), so a kernel is only ever called inside what it
// declares, and shrinking stays inside too.
//
// Projection of a value v (a generated dimension or parameter):
//   list [a, b, ...]      v itself when listed, else the entry at index
//                         v mod size (dimensions; shrinking toward small v
//                         reaches the first entries) or the nearest entry
//                         (parameters)
//   {"min", "max", "multiple_of"}  clamped, then rounded up to a multiple
//                         (down when that passes max)
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace conform {

struct DomainRule {
    std::vector<double> values;  // allowed values (empty: the range below)
    std::optional<double> min, max, multiple_of;
};

struct Domain {
    std::map<std::string, DomainRule> rules;  // dimension or parameter name -> rule
    bool empty() const { return rules.empty(); }
    std::string text() const;  // JSON, for reports ("" when empty)
};

// The dimension names of op `op` a domain may constrain, in the order of the
// generators' dims: "rows", "cols" for elementwise and row ops; e.g.
// "heads", "kv_heads", "q_len", "kv_len", "head_dim", "v_head_dim", "mask" (1: an
// additive mask input, 0: none) for attention.
std::vector<std::string> domain_dims(const std::string& op);

// The tunable parameters of op `op`: they choose how, not what, a kernel
// computes (attention's key tile "block"); not in the op's parameter list,
// passed to a kernel that declares them.
std::vector<std::string> tunable_params(const std::string& op);

// Parses a domain (JSON text; "" is none) for op `op`: keys are its
// dimensions or its parameters, or (`tunables`) only its tunable
// parameters.  std::invalid_argument naming the key and what is wrong.
Domain parse_domain(const std::string& json, const std::string& op, bool tunables = false);

// v projected into rule r (see above); `dimension` selects the list rule.
double project(const DomainRule& r, double v, bool dimension);

}  // namespace conform
