// A-priori error bounds of the row-norm kernels (docs/norm.md derives them):
// for a kernel that accumulates in format `acc` and stores into `out`, the
// per-element bound on |kernel - exact| computed from the exact row.  A
// sound kernel's utilization |err| / bound stays below 1.
#pragma once
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/op.hpp"

namespace conform::oracle {

// gamma_k = k u / (1 - k u), the classical accumulation constant.
double gamma(double k, double u);

struct NormRow {
    std::vector<double> x, w, b;  // exact inputs (w, b empty when the op has none)
    std::vector<double> y;        // exact outputs (the oracle's values)
};

std::vector<double> norm_bound(const OpSpec& op, const Params& p, const NormRow& row, Format acc, Format out);

}  // namespace conform::oracle
