// attention_bound (docs/attention.md): one pass over each row's visible keys
// with magnitudes recomputed in double.
#include "oracle/attention_bound.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "oracle/attention.hpp"
#include "oracle/bound.hpp"
#include "oracle/tensor_core.hpp"

namespace conform::oracle {
namespace {

constexpr double kU = 0x1p-24;     // FP32 unit roundoff (the accumulators)

struct Shape {
    std::int64_t hq, hkv, lq, lk, d, dv;
};

// One row's logits and the magnitudes the budget needs; s_j = -inf for
// hidden keys.
struct RowLogits {
    // final logit, scaled logit before the softcap, after it (before the mask), sum |q_d k_jd|,
    // and that sum over the finite products only
    std::vector<double> s, raw, capped, a, a_finite;
};

RowLogits row_logits(const Shape& sh, const Params& p, double scale, const std::vector<double>& q,
                     const std::vector<double>& k, const std::vector<double>& mask, std::int64_t h, std::int64_t i) {
    const std::int64_t g = kv_head_of(h, sh.hq, sh.hkv);
    const bool causal = p.get("causal", 0) != 0;
    const auto window = static_cast<std::int64_t>(p.get("window", 0));
    const bool top_left = p.get("convention.causal", 0) != 0;
    const double cap = p.get("softcap", 0);
    RowLogits r{std::vector<double>(sh.lk, -INFINITY), std::vector<double>(sh.lk, 0), std::vector<double>(sh.lk, 0),
                std::vector<double>(sh.lk, 0), std::vector<double>(sh.lk, 0)};
    const double* qr = &q[(h * sh.lq + i) * sh.d];
    for (std::int64_t j = 0; j < sh.lk; ++j) {
        if (!key_visible(i, j, sh.lq, sh.lk, causal, window, top_left)) continue;
        if (!mask.empty() && mask[i * sh.lk + j] == -INFINITY) continue;  // hidden like a structural mask
        const double* kr = &k[(g * sh.lk + j) * sh.d];
        double dot = 0, a = 0, af = 0;
        for (std::int64_t t = 0; t < sh.d; ++t) {
            const double p = qr[t] * kr[t];
            dot += p, a += std::fabs(p), af += std::isfinite(p) ? std::fabs(p) : 0;
        }
        r.a_finite[j] = af;
        double x = scale * dot;
        r.raw[j] = x;
        if (cap > 0) x = cap * std::tanh(x / cap);
        r.capped[j] = x, r.a[j] = a;
        r.s[j] = mask.empty() ? x : x + mask[i * sh.lk + j];
    }
    return r;
}

double half_ulp(Format f, double y) { return 0.5 * ulp_at(f, std::fabs(y)); }

// Whether an FP32 logit of the row may overflow: the dot product's partial
// sums of its finite products are at most max(1, |scale|) F_j (1 + g_dot) +
// abs_err in magnitude (F_j = sum of the finite |q_d k_jd|; q scaled before the
// dot or the dot after), the mask add's sum at most |capped_j| (1 + g_dot)
// + abs_err + |mask_ij|.  Past FP32's overflow threshold the kernel's logit is
// +-inf or NaN where the exact one is finite (a key hidden, or the row
// NaN), or NaN where an infinite product makes it infinite (inf - inf): an
// FP32 kernel does not define that row's o and lse (docs/attention.md,
// "Special values").  Only FP32 inputs reach it: 256 products of FP16
// values stay below 2^41.
bool logits_may_overflow(const RowLogits& r, const std::vector<double>& mask, std::int64_t i, double scale,
                         double g_dot, double abs_err) {
    const double threshold = overflow_threshold(Format::fp32);
    const std::int64_t lk = static_cast<std::int64_t>(r.s.size());
    for (std::int64_t j = 0; j < lk; ++j) {  // a hidden key: F_j = 0, its mask -inf or beside logit 0
        const double partial = std::max(1.0, std::fabs(scale)) * r.a_finite[j] * (1 + g_dot) + abs_err;
        const double sum = mask.empty() ? 0 : std::fabs(r.capped[j]) * (1 + g_dot) + abs_err + std::fabs(mask[i * lk + j]);
        if (!(partial < threshold)) return true;
        if (!(sum < threshold) && std::isfinite(sum)) return true;  // an infinite logit or mask: exact
    }
    return false;
}

// The logit's extra error when every stage rounds it to a format of unit u
// (docs/attention.md, "Logits in a narrower format"): the dot product and the
// scale (and the softcap's divide) are relative roundings of the scaled
// logit, which carries the FP32 error e32: gamma_k(u) (|x| + e32) =: e_pre;
// the cap c tanh(y / c) is 1-Lipschitz in y, so that error passes through it,
// and tanh's result and the multiply by c round twice more, at most
// 2u(1 + u)(|cap(x)| + e_pre); the mask add once, u(|s| + the error so far).
// A stage whose result is subnormal errs by up to eta absolute, carried into
// the logit by what follows: the dot product's by |scale|, the divide's and
// tanh's by c.
double narrow_logit_error(const FlashErrorModel& m, double scale, double cap, double raw, double e32, double capped,
                          double s, bool mask) {
    if (m.s_unit == 0) return 0;
    const double u = m.s_unit;
    const double e_pre = gamma(2 + (cap > 0 ? 1 : 0), u) * (std::fabs(raw) + e32);
    const double e_cap = cap > 0 ? 2 * u * (1 + u) * (std::fabs(capped) + e_pre) : 0;
    const double e_mask = mask ? u * (std::fabs(s) + e32 + e_pre + e_cap) : 0;
    const double etas = std::max(1.0, std::fabs(scale)) + 1 + (cap > 0 ? 2 * cap + 1 : 0) + (mask ? 1 : 0);
    return e_pre + e_cap + e_mask + etas * m.s_eta * (1 + 4 * u);
}

// The rounding groups of a row's visible keys (hidden keys: -1): keys whose
// weights lie in one interval [k s, (k + 1) s) of the grid of a format with
// unit roundoff u (s = 2^e 2u in the binade [2^e, 2^(e+1))) share a group.
std::vector<int> rounding_groups(const std::vector<double>& p, const std::vector<double>& s, double u) {
    std::map<std::pair<int, double>, int> ids;
    std::vector<int> group(p.size(), -1);
    for (std::size_t j = 0; j < p.size(); ++j) {
        if (s[j] == -INFINITY) continue;
        const int e = p[j] > 0 ? std::ilogb(p[j]) : std::numeric_limits<int>::min();
        const double cell = p[j] > 0 ? std::floor(p[j] / std::ldexp(2 * u, e)) : 0;
        group[j] = ids.emplace(std::make_pair(e, cell), static_cast<int>(ids.size())).first->second;
    }
    return group;
}

// p (e^r - 1) for p = e^lw, in the log domain: a key far below the row's
// maximum (a finite mask of -3e38, as transformers' eager masks) has a
// weight that underflows in double and a logit error r beyond exp's range,
// yet e^(lw + r) is still 0; only where lw + r itself passes ~709 is the
// kernel's weight unbounded, and so is the bound (inf, never NaN).
double weighted(double lw, double r) {
    if (r <= 700) return std::exp(lw) * std::expm1(r);
    const double hi = lw + r;
    return hi >= 709 ? INFINITY : std::exp(hi);
}

// How large a flash kernel's unnormalized accumulator sum exp(s_j - m_t) v_j
// can grow, whatever its key order, tiling or splits: each running maximum
// m_t is some visible logit s_k, and the accumulator then holds at most the
// keys with s_j <= s_k, each scaled by exp(s_j - s_k) <= 1.  The scan takes
// the visible keys by ascending logit (ties together); peak_accumulator
// gives max_k sum_{s_j <= s_k} exp(s_j - s_k) (1 + rho_j) a_j for one value
// column a (NaN when a term is).  A key whose weight error rho_j exceeds 1
// (a logit of -3e38 from a finite mask) counts instead as a_j (1 + 2u) at
// every threshold: the kernel's weight exp(s^_j - m^_t) is at most 1, since
// its running maximum is the largest logit it has computed.
struct AccumulatorScan {
    std::vector<std::size_t> order;  // visible keys (finite logit, rho_j <= 1), ascending logit
    std::vector<double> decay;       // exp(s_previous - s_this) along the order (0 first)
    std::vector<double> grow;        // 1 + rho_j along the order
    std::vector<std::size_t> loose;  // visible keys with rho_j > 1
};
AccumulatorScan accumulator_scan(const std::vector<double>& s, const std::vector<double>& log1p_rho) {
    AccumulatorScan sc;
    for (std::size_t j = 0; j < s.size(); ++j)  // -inf: hidden (a NaN or +inf row has no bound)
        if (std::isfinite(s[j])) (log1p_rho[j] <= std::log(2.0) ? sc.order : sc.loose).push_back(j);
    std::stable_sort(sc.order.begin(), sc.order.end(), [&](std::size_t a, std::size_t b) { return s[a] < s[b]; });
    for (std::size_t i = 0; i < sc.order.size(); ++i) {
        sc.decay.push_back(i == 0 ? 0.0 : std::exp(s[sc.order[i - 1]] - s[sc.order[i]]));
        sc.grow.push_back(std::exp(log1p_rho[sc.order[i]]));
    }
    return sc;
}

template <class Value>
double peak_accumulator(const AccumulatorScan& sc, Value&& a) {
    double acc = 0, peak = 0, loose = 0;
    for (std::size_t i = 0; i < sc.order.size(); ++i) {
        acc = acc * sc.decay[i] + sc.grow[i] * a(sc.order[i]);
        if (!(acc <= peak)) peak = acc;  // NaN sticks
    }
    for (std::size_t j : sc.loose) loose += a(j);
    return peak + loose * (1 + 0x1p-23);
}

}  // namespace

std::vector<double> attention_bound(const Params& p, const std::vector<TensorView>& in, const OpOutputs& exact,
                                    const FlashErrorModel& model) {
    const Shape sh{in[0].shape[0], in[1].shape[0], in[0].shape[1], in[1].shape[1], in[0].shape[2], in[2].shape[2]};
    const std::vector<double> q = decoded_values(in[0]), k = decoded_values(in[1]), v = decoded_values(in[2]);
    const std::vector<double> mask = in.size() > 3 ? decoded_values(in[3]) : std::vector<double>{};
    const double scale_param = p.get("scale", 0);
    const double scale = scale_param != 0 ? scale_param : 1 / std::sqrt(static_cast<double>(sh.d));
    const double cap = p.get("softcap", 0);
    const bool softcap = cap > 0;
    const double nb = model.key_block > 0 ? std::ceil(static_cast<double>(sh.lk) / model.key_block)
                                          : static_cast<double>(sh.lk);
    const double kk = sh.lk + nb;  // terms of each accumulation: products and rescales
    const double splits = static_cast<double>(std::max<std::int64_t>(1, model.splits));
    // The denominator l (FP32 sums, the division, and with splits their
    // merge: S products w_s o_s and S-term sums); the numerator the same, or
    // with tensor cores a chain of block FMAs over the keys in blocks of
    // mma_k (at most ceil(Lk / mma_k) + S blocks) and the rescales.
    const double merge_terms = splits > 1 ? splits + 1 : 0;
    const double g_den = gamma(kk + 2 + merge_terms, kU), gk = gamma(kk, kU);
    // The block FMAs' operands: P (in V's format, at most 1) and V; Q and K.
    const int pv_emin = block_fma_emin(in[2].format), qk_emin = std::max(block_fma_emin(in[0].format), block_fma_emin(in[1].format));
    ChainError pv{0, 0, 0};
    double g_num = g_den;
    if (model.mma_k > 0) {
        // Tiles of model.key_tile keys (param block; else whole blocks of mma_k), each starting at
        // most one partial block: ceil(Lk / mma_k) + tiles + S blocks, tiles <= ceil(Lk / tile) + S.
        const double tile = model.key_tile > 0 ? static_cast<double>(model.key_tile) : model.mma_k;
        const double tiles = std::ceil(static_cast<double>(sh.lk) / tile) + splits;
        pv = block_fma_chain(model.mma_k, static_cast<double>(sh.lk),
                             std::ceil(static_cast<double>(sh.lk) / model.mma_k) + tiles + splits, pv_emin);
        g_num = (1 + pv.rel) * (1 + gamma(nb + 2 + merge_terms, kU)) - 1;
    }
    // The logits: an FP32 dot product of D terms and the scale (2 roundings),
    // or ceil(D / mma_k) block FMAs and the scale.
    double g_dot = gamma(sh.d + 2.0, kU), dot_abs = 0;
    if (model.mma_k > 0) {
        const ChainError qk = block_fma_chain(model.mma_k, static_cast<double>(sh.d),
                                              std::ceil(static_cast<double>(sh.d) / model.mma_k), qk_emin);
        double qk_max = 0;  // M of every logit's chain: the largest |q|, |k|
        for (double x : q) qk_max = std::max(qk_max, std::isfinite(x) ? std::fabs(x) : 0.0);
        for (double x : k) qk_max = std::max(qk_max, std::isfinite(x) ? std::fabs(x) : 0.0);
        g_dot = (1 + qk.rel) * (1 + gamma(2, kU)) - 1, dot_abs = qk.abs + qk.sub * chain_operand_bound(qk_max, qk_emin);
    }
    const std::int64_t n_o = sh.hq * sh.lq * sh.dv;
    std::vector<double> bound(static_cast<std::size_t>(n_o + sh.hq * sh.lq), 0.0);
    // p_j, log p_j, and log(1 + rho_j) (first the logit error delta_j)
    std::vector<double> pr(sh.lk), lw(sh.lk), lr(sh.lk);
    for (std::int64_t h = 0; h < sh.hq; ++h) {
        const double* vh = &v[kv_head_of(h, sh.hq, sh.hkv) * sh.lk * sh.dv];
        for (std::int64_t i = 0; i < sh.lq; ++i) {
            const std::int64_t row = h * sh.lq + i;
            double* ob = &bound[row * sh.dv];
            double& lb = bound[n_o + row];
            const RowLogits r = row_logits(sh, p, scale, q, k, mask, h, i);
            if (std::any_of(r.s.begin(), r.s.end(), [](double s) { return std::isnan(s) || s == INFINITY; })) {
                std::fill(ob, ob + sh.dv, NAN), lb = NAN;
                continue;
            }
            if (logits_may_overflow(r, mask, i, scale, g_dot, dot_abs * std::max(1.0, std::fabs(scale)))) {
                std::fill(ob, ob + sh.dv, kUndefined), lb = kUndefined;
                continue;
            }
            const double m = *std::max_element(r.s.begin(), r.s.end());
            if (m == -INFINITY) continue;  // empty row: exact (0, -inf) required
            double l = 0;  // sum exp(s_j - m) over visible keys
            for (double s : r.s)
                if (s != -INFINITY) l += std::exp(s - m);
            const double log_l = std::log(l);
            // Split-KV: each split's lse_s = m_s + log l_s (l_s in [1, Lk], its sum off by gamma_K) and
            // the merge's w_s = exp(lse_s - max) act on every key of the split like a logit error.
            const double log_lk = std::log(static_cast<double>(std::max<std::int64_t>(sh.lk, 1)));
            // Every running (or split) maximum that key j's weight passes through lies in
            // [s_j, m], so its exponent errors scale with M_j = max(|s_j|, |m|) <= M: a key
            // far below the row (a finite mask of -3e38) does not widen the others' bounds.
            const auto d_merge = [&](double mj) {
                return splits > 1 ? gk / (1 - gk) + model.e_log * log_lk + 3 * kU * (mj + log_lk) + model.e_exp : 0;
            };
            // 1. logit perturbation delta_j; 2. weights: rho_j with E = sum p_k (e^delta_k - 1)
            double big_e = 0;
            for (std::int64_t j = 0; j < sh.lk; ++j) {
                pr[j] = 0;
                if (r.s[j] == -INFINITY) continue;
                lw[j] = r.s[j] - m - log_l, pr[j] = std::exp(lw[j]);
                const double e32 = g_dot * std::fabs(scale) * r.a[j] + dot_abs * std::fabs(scale);
                const double mj = std::max(std::fabs(r.s[j]), std::fabs(m));
                const double delta = e32 + d_merge(mj) +
                                     narrow_logit_error(model, scale, cap, r.raw[j], e32, r.capped[j], r.s[j],
                                                        !mask.empty()) +
                                     (softcap ? (model.e_tanh + 3 * kU) * std::fabs(r.capped[j]) : 0) +
                                     (mask.empty() ? 0 : kU * std::fabs(r.s[j])) +  // the mask add rounds once
                                     4 * kU * (std::fabs(r.s[j]) + std::fabs(m)) +
                                     (nb + 1) * (model.e_exp + 2 * kU * mj);
                lr[j] = delta;  // log(1 + rho_j) = delta_j + log(1 + E), completed below
                big_e += weighted(lw[j], delta);
            }
            for (std::int64_t j = 0; j < sh.lk; ++j)
                if (r.s[j] != -INFINITY) lr[j] += std::log1p(big_e);
            // Weights that round together: the keys whose weights share one interval of the P
            // format's grid (equal logits above all) get the same rounding error, so the
            // probabilistic tier takes each such group as one term.
            const std::vector<int> group = model.p_unit > 0 ? rounding_groups(pr, r.s, model.p_unit) : std::vector<int>{};
            std::vector<double> gsum(group.empty() ? 0 : *std::max_element(group.begin(), group.end()) + 1);
            // 3. accumulation and output rounding, per output column d
            AccumulatorScan scan;  // formed for the first column whose values may overflow the accumulator
            const double fp32_max = max_finite(Format::fp32);  // past it an FP32 accumulator overflows
            for (std::int64_t d = 0; d < sh.dv; ++d) {
                double vd = 0, td = 0, vmax = 0;
                std::fill(gsum.begin(), gsum.end(), 0.0);
                for (std::int64_t j = 0; j < sh.lk; ++j) {
                    if (r.s[j] == -INFINITY) continue;
                    const double av = std::fabs(vh[j * sh.dv + d]);
                    const double pr_rho = weighted(lw[j], lr[j]);  // p_j rho_j
                    vd += pr[j] * av, td += pr_rho * av, vmax = std::max(vmax, av);
                    if (!group.empty()) gsum[group[j]] += (pr[j] + pr_rho) * av;
                }
                double sq = 0;  // the groups' terms p_j (1 + rho_j) |v_jd|, squared
                for (double g : gsum) sq += g * g;
                const double od = std::fabs(to_double(exact.values[0][row * sh.dv + d]));
                // bound before the output rounding: the weights' error, their rounding to the P format,
                // the numerator's and the denominator's arithmetic, and the subnormal absolute parts
                const double w = vd + td;
                const double pre = td + rounding_sum(model.p_unit, w, std::sqrt(sq)) +
                                   (g_num + g_den) * (1 + model.p_unit) * w + pv.abs +
                                   pv.sub * chain_operand_bound(std::max(1.0, vmax), pv_emin) +
                                   (model.p_eta > 0 ? (1 + g_num + g_den) * sh.lk * model.p_eta * vmax : 0);
                // eta: weights (and with splits the merge's weights and products) below FP32's normal range,
                // and every product (or FMA) and rescale of the accumulator, and the final product
                // acc * (1/l), rounding in the subnormal range: eta/2 each, however small v is (the sums
                // of subnormals are exact, and l >= 1 does not enlarge the accumulator's error).
                // (With tensor cores the products are exact and each block's truncation is pv.abs.)
                ob[d] = pre + half_ulp(model.out, od + pre) + (sh.lk + 3 * merge_terms) * kEta * vmax +
                        ((model.mma_k > 0 ? 0 : sh.lk) + nb + 1 + merge_terms) * kEta / 2;
                // A flash kernel's unnormalized sum exp(s_j - m_t) v_jd may overflow FP32
                // where o does not (values near the format's max): no bound there.
                if (!(2 * vmax * static_cast<double>(sh.lk) * (1 + g_num) < fp32_max)) {  // each term <= 2 |v_jd|
                    if (scan.order.empty()) scan = accumulator_scan(r.s, lr);
                    const double peak = peak_accumulator(scan, [&](std::size_t j) { return std::fabs(vh[j * sh.dv + d]); });
                    if (!(peak * (1 + g_num) < fp32_max)) ob[d] = INFINITY;
                }
            }
            const double lse = std::fabs(to_double(exact.values[1][row]));
            const double g_merge = splits > 1 ? gamma(splits, kU) + model.e_log * std::log(splits) : 0;
            const double pre = std::log1p(big_e) + gk / (1 - gk) + g_merge + model.e_log * std::fabs(std::log(l)) +
                               kU * lse;
            lb = pre + half_ulp(model.lse_out, lse + pre);
        }
    }
    return bound;
}

FlashErrorModel declared_flash_model(const Params& p, const std::vector<Format>& out) {
    FlashErrorModel model;
    // A kernel that declares its key tile (declared.key_block) honours param
    // block when given; any other may tile as finely as one key per tile.
    if (p.get("declared.key_block", 0) > 0)
        model.key_block = static_cast<std::int64_t>(p.get("block", 0) > 0 ? p.get("block", 0) : p.get("declared.key_block", 0));
    // Tensor cores, weights rounded before P V, KV splits (param splits, else the most the kernel declares).
    model.mma_k = static_cast<int>(p.get("declared.mma_k", 0));
    model.key_tile = static_cast<std::int64_t>(p.get("block", 0));
    model.p_unit = p.get("declared.p_unit", 0), model.p_eta = p.get("declared.p_eta", 0);
    model.s_unit = p.get("declared.s_unit", 0), model.s_eta = p.get("declared.s_eta", 0);
    const double max_splits = p.get("declared.max_splits", 1), splits = p.get("splits", 0);
    model.splits = static_cast<std::int64_t>(std::max(1.0, splits > 0 ? std::min(splits, max_splits) : max_splits));
    model.out = out.at(0);
    model.lse_out = out.size() > 1 ? out[1] : Format::fp32;
    return model;
}

OpOutputs attention_outputs(const std::vector<TensorView>& in, const std::vector<double>& o, const std::vector<double>& lse) {
    OpOutputs ex;
    ex.names = {"o", "lse"};
    ex.shapes = {{in[0].shape[0], in[0].shape[1], in[2].shape[2]}, {in[0].shape[0], in[0].shape[1]}};
    PrecisionScope scope(kDefaultBits);
    for (const auto* v : {&o, &lse}) {
        ex.values.emplace_back();
        for (double d : *v) ex.values.back().push_back(from_double(d));
    }
    return ex;
}

std::vector<std::vector<double>> attention_weights(const Params& p, const std::vector<TensorView>& in) {
    const Shape sh{in[0].shape[0], in[1].shape[0], in[0].shape[1], in[1].shape[1], in[0].shape[2], in[2].shape[2]};
    const std::vector<double> q = decoded_values(in[0]), k = decoded_values(in[1]);
    const std::vector<double> mask = in.size() > 3 ? decoded_values(in[3]) : std::vector<double>{};
    const double scale_param = p.get("scale", 0);
    const double scale = scale_param != 0 ? scale_param : 1 / std::sqrt(static_cast<double>(sh.d));
    std::vector<std::vector<double>> weights;
    for (std::int64_t h = 0; h < sh.hq; ++h)
        for (std::int64_t i = 0; i < sh.lq; ++i) {
            const RowLogits r = row_logits(sh, p, scale, q, k, mask, h, i);
            std::vector<double>& w = weights.emplace_back();
            const double m = *std::max_element(r.s.begin(), r.s.end());
            if (!std::isfinite(m)) continue;
            for (double s : r.s)
                if (s != -INFINITY) w.push_back(std::exp(s - m));
        }
    return weights;
}

}  // namespace conform::oracle
