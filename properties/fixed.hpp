// Properties that judge one case as it stands -- its inputs, parameters and
// the outputs kernel k gives for exactly those inputs -- so they apply to
// fixed data as well as to generated cases: `conform validate` runs them on
// stored outputs (docs/dumps.md), and the property suite runs the same checks
// on generated cases (the Testables of the family files call them).
// Invariances (two runs on related inputs) cannot apply to fixed data and are
// not here.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "impls/registry.hpp"
#include "properties/generators.hpp"

namespace conform::props {

struct FixedProperty {
    std::string name, doc;
    std::function<bool(const OpSpec&)> applies;
    // "" when the case satisfies the property, else the first violation.
    std::function<std::string(const KernelInfo& k, const Case& c)> check;
};

const std::vector<FixedProperty>& fixed_properties();
std::vector<const FixedProperty*> fixed_properties_for(const OpSpec& op);

// The largest |output| of format f a kernel within 1 ulp of RN(y) may give
// for an exact |y| < cap: RN(|y|) <= RN(cap), so the value above RN(cap)
// (FP16's 25008 for a cap of 25000, which rounds to 24992); +inf where
// RN(cap) is past the format's range (the cap then says nothing there).
inline double cap_in_format(Format f, double cap) { return next_up(f, decode(f, encode(f, cap))); }

// The checks, one per family file.
std::string softcap_bound_check(const KernelInfo& k, const Case& c);       // properties/activation.cpp
std::string situ_bound_check(const KernelInfo& k, const Case& c);          // properties/gated.cpp
std::string column_marginals_check(const KernelInfo& k, const Case& c);    // properties/sinkhorn.cpp
std::string quantize_monotone_check(const KernelInfo& k, const Case& c);   // properties/int8.cpp
std::string quantize_range_check(const KernelInfo& k, const Case& c);      // properties/int8.cpp

}  // namespace conform::props
