// Deliberately wrong attention kernels (DESIGN.md, "Mutation testing"): the
// flash form in double over key tiles of 16 with exactly one bug each, so a
// mutant can only be killed by its bug (double arithmetic is far inside the
// FP32 budget).  Outputs: o in the mutant's format, lse as fp32.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "impls/cpu/attention.hpp"

namespace conform {
namespace {

enum class Bug {
    top_left_causal,    // pos_i = i: the queries are the first Lq positions, not the last
    window_minus_one,   // W - 1 keys: j > pos - W + 1
    window_plus_one,    // W + 1 keys: j >= pos - W
    gqa_modulo,         // KV head h mod Hkv instead of floor(h / G)
    block_max_only,     // acc not rescaled when the max grows (the running sum is)
    finite_sentinel,    // hidden keys and -inf mask entries become -5e4
    unguarded_rescale,  // exp(m_old - m_new) and tile exps even while m = -inf
    softcap_ignored,    // the softcap parameter is not applied
    scale_dropped,      // logits = q.k, no softmax scale
};

constexpr std::size_t kBlock = 16;  // key tile of every mutant
constexpr double kSentinel = -5e4;

struct Problem {
    std::int64_t hq, hkv, lq, lk, d, dv;
    bool causal;
    std::int64_t window;
    double scale, softcap;
    std::vector<double> q, k, v, mask;
};

Problem read(const KernelCall& c) {
    const TensorView &q = c.in.at(0), &k = c.in.at(1), &v = c.in.at(2);
    Problem p{q.shape[0], k.shape[0], q.shape[1], k.shape[1], q.shape[2], v.shape[2], c.params.get("causal", 0) != 0,
              static_cast<std::int64_t>(c.params.get("window", 0)), c.params.get("scale", 0),
              c.params.get("softcap", 0), decoded_values(q), decoded_values(k), decoded_values(v), {}};
    if (p.scale == 0) p.scale = 1 / std::sqrt(static_cast<double>(p.d));
    if (c.in.size() > 3) p.mask = decoded_values(c.in[3]);
    return p;
}

bool visible(const Problem& p, std::int64_t i, std::int64_t j, Bug bug) {
    const std::int64_t pos = bug == Bug::top_left_causal ? i : i + p.lk - p.lq;
    if ((p.causal || p.window > 0) && j > pos) return false;
    if (p.window > 0) {
        const std::int64_t w = p.window + (bug == Bug::window_minus_one ? -1 : bug == Bug::window_plus_one ? 1 : 0);
        if (j <= pos - w) return false;
    }
    return true;
}

std::vector<double> row_logits(const Problem& p, std::int64_t h, std::int64_t i, std::int64_t g, Bug bug) {
    const double hidden = bug == Bug::finite_sentinel ? kSentinel : -INFINITY;
    std::vector<double> s(p.lk, hidden);
    for (std::int64_t j = 0; j < p.lk; ++j) {
        if (!visible(p, i, j, bug)) continue;
        double dot = 0;
        for (std::int64_t t = 0; t < p.d; ++t) dot += p.q[(h * p.lq + i) * p.d + t] * p.k[(g * p.lk + j) * p.d + t];
        double x = bug == Bug::scale_dropped ? dot : p.scale * dot;
        if (p.softcap > 0 && bug != Bug::softcap_ignored) x = p.softcap * std::tanh(x / p.softcap);
        if (!p.mask.empty()) {
            const double mk = p.mask[i * p.lk + j];
            if (mk == -INFINITY && bug != Bug::finite_sentinel) x = -INFINITY;  // hidden, NaN logit or not
            else x += mk == -INFINITY ? kSentinel : mk;
        }
        s[j] = x;
    }
    return s;
}

// The flash recurrence over tiles of kBlock keys, correct except for the
// two online-softmax bugs.  Returns o (dv values) followed by lse.
std::vector<double> flash_row(const std::vector<double>& s, const double* v, std::int64_t dv, Bug bug) {
    const bool guarded = bug != Bug::unguarded_rescale;
    double m = -INFINITY, l = 0;
    std::vector<double> acc(dv + 1, 0.0);
    for (std::size_t b0 = 0; b0 < s.size(); b0 += kBlock) {
        const std::size_t b1 = std::min(s.size(), b0 + kBlock);
        // The tile max propagates a NaN logit (std::max would drop it and
        // empty the row): each mutant has its one bug and no other.
        double m_new = m;
        for (std::size_t j = b0; j < b1; ++j) m_new = std::isnan(m_new) || std::isnan(s[j]) ? NAN : std::max(m_new, s[j]);
        if (guarded && m_new == -INFINITY) continue;
        const double alpha = guarded && m == -INFINITY ? 0.0 : std::exp(m - m_new);  // NaN unguarded: -inf - -inf
        l *= alpha;
        if (bug != Bug::block_max_only)
            for (std::int64_t d = 0; d < dv; ++d) acc[d] *= alpha;
        for (std::size_t j = b0; j < b1; ++j) {
            if (guarded && s[j] == -INFINITY) continue;
            const double e = std::exp(s[j] - m_new);
            l += e;
            for (std::int64_t d = 0; d < dv; ++d) acc[d] += e * v[j * dv + d];
        }
        m = m_new;
    }
    if (guarded && m == -INFINITY) {
        acc[dv] = -INFINITY;
        return acc;
    }
    for (std::int64_t d = 0; d < dv; ++d) acc[d] /= l;
    acc[dv] = m + std::log(l);
    return acc;
}

void run_mutant(Format f, Bug bug, const KernelCall& c) {
    const Problem p = read(c);
    for (std::int64_t h = 0; h < p.hq; ++h) {
        const std::int64_t g = bug == Bug::gqa_modulo ? h % p.hkv : h / (p.hq / p.hkv);
        for (std::int64_t i = 0; i < p.lq; ++i) {
            const std::vector<double> r = flash_row(row_logits(p, h, i, g, bug), &p.v[g * p.lk * p.dv], p.dv, bug);
            const std::int64_t row = h * p.lq + i;
            for (std::int64_t d = 0; d < p.dv; ++d) c.out[0].set_bits(row * p.dv + d, encode(f, r[d]));
            c.out[1].set_bits(row, encode(c.out[1].format, static_cast<float>(r[p.dv])));
        }
    }
}

void add(std::vector<KernelInfo>& reg, const char* bug_name, Bug bug, const char* bug_class, const char* what) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        reg.push_back(mutant_info("attention", bug_name, f, Format::fp64, bug_class, what,
                                  [f, bug](const KernelCall& c) { run_mutant(f, bug, c); }));
    }
}

}  // namespace

std::vector<KernelInfo> attention_mutants() {
    std::vector<KernelInfo> r;
    add(r, "top_left_causal", Bug::top_left_causal, "2 mask geometry",
        "causal mask aligned top-left (j <= i): with Lq < Lk query i sees i + 1 keys instead of i + Lk - Lq + 1");
    add(r, "window_minus_one", Bug::window_minus_one, "2 mask geometry",
        "sliding window of W - 1 keys (j > pos - W + 1): the oldest key of every full window dropped");
    add(r, "window_plus_one", Bug::window_plus_one, "2 mask geometry",
        "sliding window of W + 1 keys (j >= pos - W): one key too many");
    add(r, "gqa_modulo", Bug::gqa_modulo, "5 layout transposition",
        "query head h reads KV head h mod Hkv instead of floor(h / (Hq / Hkv))");
    add(r, "block_max_only", Bug::block_max_only, "14 reduction axis/granularity",
        "online softmax: the running sum is rescaled when the max grows, the output accumulator is not");
    add(r, "finite_sentinel", Bug::finite_sentinel, "7 empty-row semantics",
        "hidden keys and -inf mask entries set to -5e4: fully masked rows become uniform averages");
    add(r, "unguarded_rescale", Bug::unguarded_rescale, "7 empty-row semantics",
        "exp(m_old - m_new) and the tile's exps computed while the running max is -inf: NaN for rows whose first "
        "key tile is fully masked");
    add(r, "softcap_ignored", Bug::softcap_ignored, "12 silently ignored parameter",
        "the softcap parameter is read but never applied");
    add(r, "scale_dropped", Bug::scale_dropped, "9 scale/offset convention",
        "logits are q.k without the softmax scale (1/sqrt(D) by default)");
    return r;
}

void register_mutants_attention(Registry& r) {
    for (KernelInfo& k : attention_mutants()) {
        k.out_formats = {k.out, Format::fp32};
        r.add(std::move(k));
    }
}

}  // namespace conform
