// The dimensions of one mla call (docs/mla.md, "Layout"): H heads, L new
// tokens, Lc cached, and the widths.  The CPU and CUDA kernels
// (cpu::mla_setup) and the oracle's bound (oracle/mla_bound.cpp) read them
// alike (kernels do not include oracle/).
#pragma once
#include <cstdint>

namespace conform {

struct MlaDims {
    std::int64_t heads, tokens, cached, d_model, d_c, d_nope, d_r, d_v;
    std::int64_t keys() const { return cached + tokens; }
    std::int64_t d_q() const { return d_nope + d_r; }
};

}  // namespace conform
