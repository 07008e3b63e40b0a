// One property of the suite, by name, over a kernel the test builds (a
// flawed copy of a registered kernel): seed 1, 100 cases, no shrinking -- a
// verdict, not a minimal counterexample.
#pragma once
#include <stdexcept>
#include <string>

#include "properties/suite.hpp"

namespace conform::testing {

inline report::PropertyOutcome run_named_property(const std::string& property, const KernelInfo& k) {
    for (const auto& p : props::property_defs())
        if (p.name == property) {
            props::RunConfig cfg;
            cfg.shrink = false;
            return props::run_property(p, k, cfg, nullptr);
        }
    throw std::logic_error("no property " + property);
}

}  // namespace conform::testing
