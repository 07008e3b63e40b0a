// Lookup tables for the 16-bit elementwise kernels (fp16, bf16 on AVX2).
//
// A 16-bit input has only 65536 values, so a one-argument function of it can
// be tabulated once and then read instead of evaluated: that turns the
// activation kernels from compute-bound (an exp and a division per element,
// ~2 cycles at best) into memory-bound loops.  The tables are filled by the
// kernels' own 8-lane float path over every bit pattern, so a table kernel is
// bit-identical to the computing kernel it replaces (tests/exhaustive_test
// sweeps every input of both; docs/activation.md has the figures).
//
// - unary ops: the table holds the 16-bit outputs, NaN policy included;
// - gated ops (h = gate_factor(g) * up_factor(u) in float): the table holds
//   the float gate factor, and the up factor when it is more than a clamp.
//   The product, the NaN policy and the double-path fallback for far gate
//   tails stay in the kernel (elementwise.hpp).
//
// Tables depend on the op's parameters (softcap's beta, SiTU-GLU's caps, the
// clamp limit); they are built on first use per (functor, format, params)
// and kept in a small process-wide cache.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <typeindex>
#include <utility>
#include <vector>

#include "numerics/op.hpp"

namespace conform::cpu {

// One table per key; `build` runs at most once per key (under the lock: a
// build takes well under a millisecond).  The cache is bounded: past
// kMaxTables distinct parameter sets it starts over (callers hold shared_ptrs).
template <class T>
std::shared_ptr<const std::vector<T>> cached_table(std::type_index who, const Params& p,
                                                   std::vector<T> (*build)(const Params&)) {
    using Key = std::pair<std::type_index, std::map<std::string, double>>;
    static std::mutex mu;
    static std::map<Key, std::shared_ptr<const std::vector<T>>> cache;
    constexpr std::size_t kMaxTables = 64;
    std::lock_guard<std::mutex> lock(mu);
    Key key{who, p.values()};
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    if (cache.size() >= kMaxTables) cache.clear();
    auto table = std::make_shared<const std::vector<T>>(build(p));
    cache.emplace(std::move(key), table);
    return table;
}

}  // namespace conform::cpu
