#include "reports/model.hpp"

namespace conform::report {

int RunReport::failed_kernels() const {
    int n = 0;
    for (const auto& k : kernels)
        if (k.role == "kernel" && !k.passed) ++n;
    return n;
}

bool RunReport::passed() const {
    if (failed_kernels()) return false;
    for (const auto& e : exhaustive)
        if (!e.passed) return false;
    for (const auto& m : mutants)
        if (!m.killed) return false;
    return complete;
}

}  // namespace conform::report
