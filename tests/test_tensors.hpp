// Small tensors for the oracle tests, shared by the family test files.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/registry.hpp"
#include "numerics/tensor.hpp"

namespace conform::testing {

// A tensor of the given shape holding v (row-major), stored in f.
inline Tensor tensor(std::vector<std::int64_t> shape, const std::vector<double>& v, Format f = Format::fp64) {
    Tensor t(f, std::move(shape));
    if (static_cast<std::int64_t>(v.size()) > t.numel())
        throw std::invalid_argument("testing::tensor: " + std::to_string(v.size()) + " values for " +
                                    std::to_string(t.numel()) + " elements");
    for (std::size_t i = 0; i < v.size(); ++i) t.set_value(static_cast<std::int64_t>(i), v[i]);
    return t;
}

// n multiples of 1/8 in [-2, 2]: exact in every format here, so small matrix
// products stay exact in double, and varied enough to separate heads.
inline std::vector<double> dyadic(std::mt19937_64& g, std::size_t n) {
    std::uniform_int_distribution<int> d(-16, 16);
    std::vector<double> v(n);
    for (double& x : v) x = d(g) / 8.0;
    return v;
}

// base * sin(1 + i) at element i, in f: smooth, signed, no two alike.
inline Tensor filled(Format f, std::vector<std::int64_t> shape, double base) {
    Tensor t(f, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, base * std::sin(1.0 + static_cast<double>(i)));
    return t;
}

// A built-in kernel by name; an unknown name is an error, not a crash.
inline const KernelInfo& builtin_kernel(const std::string& name) {
    const KernelInfo* k = builtin_registry().find(name);
    if (!k) throw std::invalid_argument("no kernel " + name);
    return *k;
}

}  // namespace conform::testing
