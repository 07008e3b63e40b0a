// CPU kernels of topk_select (docs/sparse.md, "Kernels"): per query row the
// candidates its causal limit allows, ranked by score (read exactly from the
// stored format), ties to the lower index; the forced block first.
#include "impls/cpu/sparse.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

namespace conform::cpu {
namespace {

struct SelectShape {
    std::int64_t lq, n, k, r, causal, offset, force, slots;
};

SelectShape shape_of(const KernelCall& c) {
    SelectShape s{c.in[0].shape[0], c.in[0].shape[1], static_cast<std::int64_t>(c.params.get("k", 4)),
                  static_cast<std::int64_t>(c.params.get("block", 1)), static_cast<std::int64_t>(c.params.get("causal", 1)),
                  static_cast<std::int64_t>(c.params.get("offset", 0)), static_cast<std::int64_t>(c.params.get("force_local", 0)), 0};
    s.slots = c.out[0].shape[1];
    return s;
}

bool allowed(const SelectShape& s, std::int64_t pos, std::int64_t n, const SelectFlaws& f) {
    const std::int64_t causal = f.future_block && s.causal == 1 ? 2 : s.causal;
    if (causal == 1) return n * s.r + s.r - 1 <= pos;
    if (causal == 2) return n * s.r <= pos;
    return true;
}

// One row's slots (ids as doubles, -1 where empty, NaN for a NaN score).
std::vector<double> select(const SelectShape& s, const TensorView& scores, std::int64_t i, bool full_sort,
                           const SelectFlaws& f) {
    const std::int64_t pos = s.offset + i;
    const std::int64_t forced = s.force == 0 || f.local_missing || pos / s.r >= s.n ? -1 : pos / s.r;
    std::vector<double> row(static_cast<std::size_t>(s.slots), -1.0);
    std::vector<std::int64_t> c;
    std::vector<float> v(static_cast<std::size_t>(s.n));
    for (std::int64_t n = 0; n < s.n; ++n) {
        v[static_cast<std::size_t>(n)] = static_cast<float>(scores.value(i * s.n + n));
        const bool ok = allowed(s, pos, n, f);
        if (f.masked_topk && !ok) v[static_cast<std::size_t>(n)] = -std::numeric_limits<float>::infinity();
        if (n != forced && (ok || f.masked_topk)) c.push_back(n);
        if (ok && std::isnan(v[static_cast<std::size_t>(n)]) && n != forced)
            return std::vector<double>(row.size(), std::numeric_limits<double>::quiet_NaN());
    }
    const auto before = [&](std::int64_t a, std::int64_t b) {
        const float x = v[static_cast<std::size_t>(a)], y = v[static_cast<std::size_t>(b)];
        return x > y || (x == y && (f.ties_to_higher ? a > b : a < b));
    };
    std::size_t at = 0;
    if (forced >= 0) row[at++] = static_cast<double>(forced);
    // The forced block takes one of the k slots (force_local 1) or comes on
    // top of them (2); without one the k slots are the pool's.
    const auto free = static_cast<std::size_t>(forced >= 0 && s.force == 1 ? s.k - 1 : s.k);
    const std::size_t take = std::min(c.size(), free);
    if (full_sort) std::stable_sort(c.begin(), c.end(), before);
    else std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(take), c.end(), before);
    for (std::size_t j = 0; j < take; ++j) row[at++] = static_cast<double>(c[j]);
    return row;
}

}  // namespace

void topk_select_call(const KernelCall& c, bool full_sort, const SelectFlaws& f) {
    const SelectShape s = shape_of(c);
    for (std::int64_t i = 0; i < s.lq; ++i) {
        const std::vector<double> row = select(s, c.in[0], i, full_sort, f);
        for (std::int64_t j = 0; j < s.slots; ++j) c.out[0].set_bits(i * s.slots + j, encode(c.out[0].format, row[static_cast<std::size_t>(j)]));
    }
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_sparse(Registry& r) {
    cpu::register_cpu_sparse_indexer(r);
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const bool full : {false, true}) {
            KernelInfo k;
            k.op = "topk_select";
            k.variant = full ? "naive" : "scalar";
            k.name = "cpu." + k.variant + ".topk_select." + name(f);
            k.in = f, k.out = Format::fp32, k.acc = Format::fp32;
            if (full) k.role = Role::baseline;
            k.description = full ? "naive baseline: every eligible candidate stable-sorted by score"
                                 : "partial_sort of the eligible candidates for the first k (scores compared exactly "
                                   "as FP32 values; ties to the lower index); forced block first; ids stored in FP32";
            k.fn = [full](const KernelCall& c) { cpu::topk_select_call(c, full); };
            r.add(std::move(k));
        }
}

}  // namespace conform
