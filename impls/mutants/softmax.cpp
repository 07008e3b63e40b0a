// Deliberately wrong softmax kernels (DESIGN.md, "Mutation testing"): the
// plain formula in double with exactly one bug each, so a mutant can only be
// killed by its bug.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "impls/registry.hpp"

namespace conform {
namespace {

enum class Bug {
    no_max_shift,     // exp(x) / sum exp(x): overflows for logits above ~709 (88 in fp32)
    unguarded_empty,  // exp(x - m) with m = -inf on a fully masked row: NaN instead of 0
    low_sum,          // sum of exp accumulated in the storage format
    block_max_only,   // online form: numerators kept against their block's max, never rescaled
};

constexpr std::size_t kBlock = 16;  // the online mutant's block length

double round_to(Format f, double v) { return decode(f, encode(f, v)); }

std::vector<double> online_block_max_only(const std::vector<double>& x) {
    double m = -INFINITY, l = 0;
    std::vector<double> num(x.size());
    for (std::size_t b0 = 0; b0 < x.size(); b0 += kBlock) {
        const std::size_t b1 = std::min(x.size(), b0 + kBlock);
        const double m_new = std::max(m, *std::max_element(x.begin() + b0, x.begin() + b1));
        if (m != -INFINITY) l *= std::exp(m - m_new);  // the running sum is rescaled correctly ...
        for (std::size_t j = b0; j < b1; ++j) l += num[j] = std::exp(x[j] - m_new);
        m = m_new;
    }
    for (double& v : num) v /= l;  // ... but earlier blocks' numerators are not
    return num;
}

std::vector<double> mutant_row(const std::vector<double>& x, Format f, Bug bug) {
    if (bug == Bug::block_max_only) return online_block_max_only(x);
    double m = -INFINITY;
    for (double v : x) m = std::fmax(m, v);
    if (bug == Bug::no_max_shift) m = 0;
    const bool empty = m == -INFINITY;
    if (empty && bug != Bug::unguarded_empty) return std::vector<double>(x.size(), 0.0);
    std::vector<double> e(x.size());
    double s = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        e[i] = std::exp(x[i] - m);
        s = bug == Bug::low_sum ? round_to(f, s + e[i]) : s + e[i];
    }
    for (double& v : e) v /= s;
    return e;
}

void run_mutant(Format f, Bug bug, const KernelCall& call) {
    const TensorView &x = call.in.at(0), &y = call.out.at(0);
    const std::int64_t n = x.cols();
    std::vector<double> row(n);
    for (std::int64_t r = 0; r < x.rows(); ++r) {
        for (std::int64_t i = 0; i < n; ++i) row[i] = x.value(r * n + i);
        const std::vector<double> out = mutant_row(row, f, bug);
        for (std::int64_t i = 0; i < n; ++i) y.set_bits(r * n + i, encode(f, out[i]));
    }
}

void add(Registry& reg, const char* bug_name, Bug bug, Format f, const char* bug_class, const char* what) {
    reg.add(mutant_info("softmax", bug_name, f, Format::fp64, bug_class, what,
                        [f, bug](const KernelCall& c) { run_mutant(f, bug, c); }));
}

// lse_merge mutants, in double: the plain formulas with one bug each.
enum class MergeBug {
    naive_logsumexp,  // lse = log(e^a + e^b): overflows/underflows at |lse| ~ 709
    unguarded_empty,  // no empty-state case: -inf - -inf = NaN when both states are empty
};

void run_merge_mutant(Format f, MergeBug bug, const KernelCall& call) {
    const TensorView &oa = call.in.at(0), &la = call.in.at(1), &ob = call.in.at(2), &lb = call.in.at(3);
    const TensorView &o = call.out.at(0), &lse = call.out.at(1);
    const std::int64_t dv = oa.cols();
    for (std::int64_t r = 0; r < oa.rows(); ++r) {
        const double a = la.value(r), b = lb.value(r);
        double l;
        if (bug == MergeBug::naive_logsumexp) {
            l = std::log(std::exp(a) + std::exp(b));
        } else {
            const double hi = std::max(a, b), lo = std::min(a, b);
            l = hi + std::log1p(std::exp(lo - hi));
        }
        const double wa = std::exp(a - l), wb = std::exp(b - l);
        for (std::int64_t d = 0; d < dv; ++d) {
            const std::int64_t i = r * dv + d;
            o.set_bits(i, encode(f, wa * oa.value(i) + wb * ob.value(i)));
        }
        lse.set_bits(r, encode(Format::fp32, l));
    }
}

void add_merge(Registry& reg, const char* bug_name, MergeBug bug, Format f, const char* bug_class, const char* what) {
    KernelInfo k = mutant_info("lse_merge", bug_name, f, Format::fp64, bug_class, what,
                               [f, bug](const KernelCall& c) { run_merge_mutant(f, bug, c); });
    k.out_formats = {f, Format::fp32};  // lse in fp32, as the kernels store it
    reg.add(std::move(k));
}

}  // namespace

void register_mutants_softmax(Registry& r) {
    add_merge(r, "naive_logsumexp", MergeBug::naive_logsumexp, Format::fp32, "1 exp-range overflow",
              "lse = log(e^lse_a + e^lse_b): Inf or -Inf once |lse| passes ~709, NaN weights");
    add_merge(r, "unguarded_empty", MergeBug::unguarded_empty, Format::bf16, "7 empty-row semantics",
              "no empty-state case: merging two empty states (lse = -inf) gives NaN instead of (0, -inf)");
    using F = Format;
    add(r, "no_max_shift", Bug::no_max_shift, F::fp32, "1 exp-range overflow",
        "exp(x) / sum exp(x) without subtracting the row max: Inf/Inf = NaN once a logit exceeds ~709");
    add(r, "unguarded_empty", Bug::unguarded_empty, F::bf16, "7 empty-row semantics",
        "exp(x - max) with max = -inf on a fully masked row: -inf - -inf = NaN instead of an all-zero row");
    add(r, "low_sum", Bug::low_sum, F::fp16, "6 low-precision accumulation",
        "the sum of exp(x - max) accumulated in fp16: stagnates on long rows");
    add(r, "block_max_only", Bug::block_max_only, F::fp32, "14 reduction axis/granularity",
        "online softmax over blocks of 16: the running sum is rescaled, but each block's numerators stay relative "
        "to that block's max");
}

}  // namespace conform
