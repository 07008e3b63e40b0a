// Built without oneDNN (not found, or CONFORM_WITH_ONEDNN=OFF): every wanted
// entry is "not provided", so a report still lists what was not checked.
#include "impls/onednn/onednn.hpp"

namespace conform::onednn {

std::string library_text() { return "oneDNN not built in (CONFORM_WITH_ONEDNN off or libdnnl-dev not found)"; }

void provide(const Wanted& w, BackendRegistry& r) {
    r.not_provided.push_back({kernel_name(w.op, w.format), w.op, name(w.format),
                              w.absent.empty() ? library_text() : w.absent});
}

}  // namespace conform::onednn
