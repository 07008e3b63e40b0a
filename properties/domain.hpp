// The property suite's side of a kernel's declared domain
// (numerics/domain.hpp): generated specs projected into it.
#pragma once
#include "numerics/domain.hpp"
#include "properties/generators.hpp"

namespace conform::props {

// The spec with every constrained dimension and parameter projected (and the
// op's shape invariants restored: attention's heads a multiple of kv_heads).
CaseSpec project(const CaseSpec& spec, const Domain& d);

// Parameter `name` = v projected into the active domain (v when the domain
// has no rule for it): for values a property sets after generation.
double in_domain_param(const std::string& name, double v);

// The domain build_case and in_domain project into on this thread (empty:
// none): set for the duration of one kernel's suite by a DomainScope.
const Domain& active_domain();
class DomainScope {
public:
    explicit DomainScope(const Domain& d);
    ~DomainScope();
    DomainScope(const DomainScope&) = delete;
    DomainScope& operator=(const DomainScope&) = delete;

private:
    const Domain* saved_;
};

}  // namespace conform::props
