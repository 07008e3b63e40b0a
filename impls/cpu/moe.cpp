// CPU kernels of Mixture-of-Experts routing (docs/moe.md, "Kernels"): logits
// x w by the matmul kernel (FP32 accumulation), then per token in FP32:
// softmax (max-shifted, expf) or sigmoid, scores p + b, group-limited
// selection (each group's largest score, or its two largest summed in FP32,
// the best topk_groups groups kept), a stable sort for the top k, weights over the
// chosen experts summed in expert order, times the scaling, the capacity in
// token order, and the loss in double.
#include "impls/cpu/moe.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "impls/cpu/matmul.hpp"

namespace conform::cpu {

RouterParams router_params(const KernelCall& c) {
    RouterParams r{c.in.at(0).shape[0], c.in.at(0).shape[1], c.in.at(1).shape[1], static_cast<std::int64_t>(c.params.get("k", 2)),
                   c.params.get("score", 0) != 0, c.params.get("renormalize", 1) != 0, c.params.get("capacity", 0),
                   static_cast<std::int64_t>(c.params.get("groups", 1)), static_cast<std::int64_t>(c.params.get("topk_groups", 0)),
                   static_cast<float>(c.params.get("scaling", 1)), static_cast<std::int64_t>(c.params.get("group_top", 2))};
    if (r.group_top != 1 && r.group_top != 2) throw std::invalid_argument("moe_router kernel: group_top must be 1 or 2");
    if (r.k < 1 || r.k > r.e) throw std::invalid_argument("moe_router kernel: k must be in [1, E]");
    if (r.groups < 1 || r.e % r.groups != 0 || (r.groups > 1 && r.e / r.groups < r.group_top) || r.topk_groups < 0 ||
        r.topk_groups > r.groups)
        throw std::invalid_argument("moe_router kernel: groups must divide E into groups of at least group_top, topk_groups "
                                    "in [0, groups]");
    if (r.topk_groups == 0) r.topk_groups = r.groups;
    // A non-finite bias has no meaning in the op (a NaN score cannot be
    // ranked; +inf - inf group sums): refused, by entry.
    if (c.in.size() > 2 && c.in[2].data != nullptr && c.in[2].numel() != r.e)
        throw std::invalid_argument("moe_router kernel: selection_bias must have E = " + std::to_string(r.e) + " entries");
    if (c.in.size() > 2 && c.in[2].data != nullptr)
        for (std::int64_t i = 0; i < c.in[2].numel(); ++i)
            if (!std::isfinite(c.in[2].value(i)))
                throw std::invalid_argument("moe_router kernel: selection_bias[" + std::to_string(i) + "] is not finite");
    return r;
}

namespace {

using Router = RouterParams;

// Group-limited selection: every expert outside the topk_groups groups of
// largest score (the group's largest score, or its two largest summed in
// FP32: group_top) set to -inf in `score`.
void limit_groups(std::vector<float>& score, const Router& r, const RouterFlaws& f) {
    if (r.groups == 1 || r.topk_groups == r.groups) return;
    const std::int64_t n = r.e / r.groups;
    std::vector<float> gs(static_cast<std::size_t>(r.groups));
    for (std::int64_t g = 0; g < r.groups; ++g) {
        const float* v = score.data() + g * n;
        float a = -INFINITY, b = -INFINITY, all = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            all += v[i];
            if (v[i] > a) b = a, a = v[i];
            else if (v[i] > b) b = v[i];
        }
        const bool top2 = f.group_top_ignored || (r.group_top == 2 && !f.group_max);
        gs[static_cast<std::size_t>(g)] = f.group_sum_all ? all : top2 ? a + b : a;
    }
    std::vector<std::int64_t> order(gs.size());
    std::iota(order.begin(), order.end(), 0);
    if (f.ties_to_higher) std::reverse(order.begin(), order.end());
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        return gs[static_cast<std::size_t>(a)] > gs[static_cast<std::size_t>(b)];
    });
    for (std::size_t j = static_cast<std::size_t>(r.topk_groups); j < order.size(); ++j)
        std::fill_n(score.begin() + order[j] * n, n, -INFINITY);
}

// p of one token from its FP32 logits.
std::vector<float> probabilities(const float* l, std::int64_t e, bool sigmoid) {
    std::vector<float> p(static_cast<std::size_t>(e));
    if (sigmoid) {
        for (std::int64_t i = 0; i < e; ++i) p[static_cast<std::size_t>(i)] = 1.0f / (1.0f + std::exp(-l[i]));
        return p;
    }
    const float m = *std::max_element(l, l + e);
    float sum = 0;
    for (std::int64_t i = 0; i < e; ++i) sum += (p[static_cast<std::size_t>(i)] = std::exp(l[i] - m));
    for (float& v : p) v /= sum;
    return p;
}

// The k chosen experts, by decreasing score; equal scores by index.
std::vector<std::int64_t> top_k(const std::vector<float>& score, std::int64_t k, bool ties_to_higher) {
    std::vector<std::int64_t> order(score.size());
    std::iota(order.begin(), order.end(), 0);
    if (ties_to_higher) std::reverse(order.begin(), order.end());
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)];
    });
    order.resize(static_cast<std::size_t>(k));
    return order;
}

// The weights of the chosen experts (the sum in expert order: the same set
// gives the same bits whatever its order).
std::vector<float> weights_of(const std::vector<std::int64_t>& chosen, const std::vector<float>& p, const float* l,
                              const std::vector<float>& score, const Router& r, const RouterFlaws& f) {
    std::vector<float> v = f.bias_in_weights ? score : p;
    if (f.scaling_before_renormalize)
        for (float& x : v) x *= r.scaling;
    const float scaling = f.scaling_before_renormalize ? 1.0f : r.scaling;
    std::vector<float> w(chosen.size());
    if (f.softmax_after_topk) {
        float m = -INFINITY, sum = 0;
        for (std::int64_t i : chosen) m = std::max(m, l[i]);
        for (std::size_t j = 0; j < chosen.size(); ++j) sum += (w[j] = std::exp(l[chosen[j]] - m));
        for (float& x : w) x = x / sum * scaling;
        return w;
    }
    std::vector<std::int64_t> sorted = chosen;
    std::sort(sorted.begin(), sorted.end());
    float sum = 0;
    if (f.renormalize_all) for (float x : v) sum += x;
    else for (std::int64_t i : sorted) sum += v[static_cast<std::size_t>(i)];
    if (f.renorm_eps) sum += 1e-20f;
    for (std::size_t j = 0; j < chosen.size(); ++j)
        w[j] = (r.renormalize ? v[static_cast<std::size_t>(chosen[j])] / sum : v[static_cast<std::size_t>(chosen[j])]) * scaling;
    return w;
}

}  // namespace

void moe_router_call(const KernelCall& c, bool simd, const RouterFlaws& f) {
    const Router r = router_params(c);
    const TensorView &x = c.in.at(0), &w = c.in.at(1);
    const bool has_bias = c.in.size() > 2 && c.in[2].data != nullptr;
    Tensor logits(Format::fp32, {r.t, r.e});
    matmul_into(x, w, logits.view(), simd ? best_matmul_path(x.format) : MatmulPath::scalar);
    const float* lg = static_cast<const float*>(logits.data());
    const TensorView &idx = c.out.at(0), &wt = c.out.at(1), &kept = c.out.at(2);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<std::vector<std::int64_t>> lists(static_cast<std::size_t>(r.t));
    std::vector<double> p_sum(static_cast<std::size_t>(r.e), 0), counts(static_cast<std::size_t>(r.e), 0);
    bool any_bad = false;
    for (std::int64_t t = 0; t < r.t; ++t) {
        const float* l = lg + t * r.e;
        if (!std::all_of(l, l + r.e, [](float v) { return std::isfinite(v); })) {
            any_bad = true;
            for (std::int64_t j = 0; j < r.k; ++j)
                for (const TensorView* o : {&idx, &wt, &kept}) o->set_bits(t * r.k + j, encode(o->format, nan));
            continue;
        }
        const std::vector<float> p = probabilities(l, r.e, r.sigmoid);
        std::vector<float> score(p);
        for (std::int64_t i = 0; i < r.e; ++i) score[static_cast<std::size_t>(i)] += has_bias ? static_cast<float>(c.in[2].value(i)) : 0.0f;
        std::vector<float> chooser = f.softmax_after_topk ? std::vector<float>(l, l + r.e) : score;
        limit_groups(chooser, r, f);
        auto& list = lists[static_cast<std::size_t>(t)];
        list = top_k(chooser, r.k, f.ties_to_higher);
        if (f.routed_twice && r.k > 1) list.back() = list.front();
        const std::vector<float> g = weights_of(list, p, l, score, r, f);
        for (std::int64_t j = 0; j < r.k; ++j) {
            idx.set_bits(t * r.k + j, encode(idx.format, static_cast<double>(list[static_cast<std::size_t>(j)])));
            wt.set_bits(t * r.k + j, encode(wt.format, g[static_cast<std::size_t>(j)]));
            ++counts[static_cast<std::size_t>(list[static_cast<std::size_t>(j)])];
        }
        double all = 0;
        for (float v : p) all += v;
        for (std::int64_t i = 0; i < r.e; ++i) p_sum[static_cast<std::size_t>(i)] += r.sigmoid ? p[static_cast<std::size_t>(i)] / all : p[static_cast<std::size_t>(i)];
    }
    // Capacity: assignments in token order, then slot order.
    const double cap = r.capacity > 0 ? std::floor(r.capacity * static_cast<double>(r.t * r.k) / static_cast<double>(r.e)) : INFINITY;
    std::vector<double> used(static_cast<std::size_t>(r.e), 0);
    for (std::int64_t n = 0; n < r.t; ++n) {
        const std::int64_t t = f.capacity_reversed ? r.t - 1 - n : n;
        if (lists[static_cast<std::size_t>(t)].empty()) continue;  // a non-finite token
        for (std::int64_t j = 0; j < r.k; ++j) {
            const auto e = static_cast<std::size_t>(lists[static_cast<std::size_t>(t)][static_cast<std::size_t>(j)]);
            const bool keep = used[e] < cap;
            used[e] += keep;
            kept.set_bits(t * r.k + j, encode(kept.format, keep ? 1.0 : 0.0));
            if (!keep) wt.set_bits(t * r.k + j, encode(wt.format, 0.0));
        }
    }
    double loss = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) loss += counts[i] * p_sum[i];
    loss *= static_cast<double>(r.e) / (static_cast<double>(r.t) * static_cast<double>(r.t));
    c.out.at(3).set_bits(0, encode(c.out[3].format, any_bad ? nan : loss));
}

}  // namespace conform::cpu

namespace conform {

void register_cpu_moe(Registry& r) {
    for (Format f : {Format::fp32, Format::bf16})
        for (const bool simd : {true, false}) {
            KernelInfo k;
            k.name = std::string("cpu.") + (simd ? "simd" : "scalar") + ".moe_router." + name(f);
            k.op = "moe_router";
            k.variant = simd ? "simd" : "scalar";
            k.in = f;
            k.out = Format::fp32;
            k.acc = Format::fp32;
            k.description = std::string("logits by ") + (simd ? "cpu.simd.matmul" : "cpu.scalar.matmul") +
                            " into FP32; softmax (max-shifted expf) or sigmoid, scores p + b, grouped: each group's two "
                            "largest scores summed in FP32 and the best topk_groups groups kept (ties to the lower "
                            "group); a stable sort (ties to the lower index), weights over the chosen experts summed "
                            "in expert order, times fl32(scaling), capacity in token order, loss in double";
            k.fn = [simd](const KernelCall& c) { cpu::moe_router_call(c, simd); };
            r.add(std::move(k));
        }
}

}  // namespace conform
