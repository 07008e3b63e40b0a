// A-priori error bounds of the row kernels (docs/norm.md and docs/softmax.md
// derive them):
// for a kernel that accumulates in format `acc` and stores into `out`, the
// per-element bound on |kernel - exact| computed from the exact row.  A
// sound kernel's utilization |err| / bound stays below 1.
#pragma once
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::oracle {

// The smallest FP32 subnormal: the absolute error of an FP32 product that underflows.
inline constexpr double kEta = 0x1p-149;

// gamma_k = k u / (1 - k u), the classical accumulation constant.
double gamma(double k, double u);

struct RowData {
    std::vector<double> x, w, b;  // exact inputs (w, b empty when the op has none)
    std::vector<double> y;        // exact outputs (the oracle's values)
};

std::vector<double> row_bound(const OpSpec& op, const Params& p, const RowData& row, Format acc, Format out);

// Structured ops: one bound vector per output, from the exact inputs and the
// oracle's values (exact[o][i]), for a kernel accumulating in `acc` and
// storing output o in out[o].  An empty vector for an output means "no
// derived bound": that output is held to 1 ulp.
using StructuredBoundFn = std::vector<std::vector<double>> (*)(const Params&, const std::vector<TensorView>& in,
                                                                const std::vector<std::vector<double>>& exact,
                                                                Format acc, const std::vector<Format>& out);
StructuredBoundFn find_structured_bound(const std::string& op);

}  // namespace conform::oracle
