#include "model/step_bound_structured.hpp"

#include <stdexcept>

namespace conform::model {

StepBound structured_step_bound(const ModelContract&, const Step& s, const Lookup&, const Values&, const Conventions&,
                                Format) {
    throw std::invalid_argument(std::string("no local budget yet for step kind ") + name(s.kind));
}

}  // namespace conform::model
