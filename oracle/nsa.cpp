// Oracle of nsa_attention (docs/nsa_attention.md): setup, the branches' key
// sets, the staged evaluator and the importance budget.  The bound is in
// oracle/nsa_bound.cpp.
#include "oracle/nsa.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "numerics/shape_check.hpp"
#include "oracle/activation.hpp"
#include "oracle/bound.hpp"

namespace conform::oracle {

NsaSetup nsa_setup(const Params& p, const std::vector<TensorView>& in) {
    const std::string op = "nsa_attention";
    if (in.size() != 4 && in.size() != 6)
        throw std::invalid_argument(op + ": expects q [Hq, Lq, D], k [Hkv, Lk, D], v [Hkv, Lk, Dv], g [Hq, Lq, 3] "
                                         "(and, staged, the candidate's o and indices)");
    for (std::size_t t = 0; t < 4; ++t) require_rank(op, std::string(1, "qkvg"[t]), in[t], 3);
    NsaSetup s;
    s.hq = in[0].shape[0], s.lq = in[0].shape[1], s.d = in[0].shape[2];
    s.hkv = in[1].shape[0], s.lk = in[1].shape[1], s.dv = in[2].shape[2];
    require_dim(op, "k", in[1], 2, s.d, "D of q");
    require_dim(op, "v", in[2], 0, s.hkv, "Hkv of k");
    require_dim(op, "v", in[2], 1, s.lk, "Lk of k");
    require_dim(op, "g", in[3], 0, s.hq, "Hq");
    require_dim(op, "g", in[3], 1, s.lq, "Lq");
    require_dim(op, "g", in[3], 2, 3, "the three branches (compressed, selected, window)");
    if (s.hkv < 1 || s.hq % s.hkv != 0)
        throw std::invalid_argument(op + ": Hkv = " + std::to_string(s.hkv) + " must divide Hq = " + std::to_string(s.hq));
    if (s.lk < 1 || s.lk < s.lq)
        throw std::invalid_argument(op + ": k needs Lk >= max(Lq, 1) keys (the queries are the last Lq positions), got Lk = " +
                                    std::to_string(s.lk));
    s.group = s.hq / s.hkv;
    constexpr double kBig = 0x1p40;
    s.block = integer_param(op, p, "block", 4, 1, kBig);
    s.n = integer_param(op, p, "n", 4, 1, kBig);
    s.window = integer_param(op, p, "window", 4, 1, kBig);
    s.force_local = integer_param(op, p, "force_local", 1, 0, 1);
    s.offset = s.lk - s.lq;
    s.blocks = s.lk / s.block;
    s.candidates = (s.lk + s.block - 1) / s.block;
    if (s.candidates > (std::int64_t{1} << 24))
        throw std::invalid_argument(op + ": at most 2^24 blocks (ids are stored as exact FP32 values)");
    s.select.queries = s.lq, s.select.candidates = s.candidates, s.select.k = s.n, s.select.block = s.block;
    s.select.causal = 1, s.select.offset = s.offset, s.select.force_local = s.force_local, s.select.slots = s.n;
    s.staged = in.size() == 6;
    if (s.staged) {
        require_rank(op, "a candidate's o", in[4], 3);
        require_rank(op, "a candidate's indices", in[5], 3);
        require_dim(op, "a candidate's indices", in[5], 0, s.hkv, "Hkv");
        require_dim(op, "a candidate's indices", in[5], 1, s.lq, "Lq");
        require_dim(op, "a candidate's indices", in[5], 2, s.n, "n");
    }
    return s;
}

std::vector<std::int64_t> nsa_compressed_keys(const NsaSetup& s, std::int64_t i) {
    std::vector<std::int64_t> keys(static_cast<std::size_t>(s.visible(i)));
    for (std::size_t b = 0; b < keys.size(); ++b) keys[b] = static_cast<std::int64_t>(b);
    return keys;
}

std::vector<std::int64_t> nsa_window_keys(const NsaSetup& s, std::int64_t i) {
    std::vector<std::int64_t> keys;
    for (std::int64_t j = std::max<std::int64_t>(0, s.pos(i) - s.window + 1); j <= s.pos(i); ++j) keys.push_back(j);
    return keys;
}

std::vector<std::int64_t> nsa_selected_keys(const NsaSetup& s, std::int64_t i, const std::vector<double>& row) {
    std::vector<std::int64_t> blocks;
    for (double id : row)
        if (id >= 0) blocks.push_back(static_cast<std::int64_t>(id));
    std::sort(blocks.begin(), blocks.end());
    std::vector<std::int64_t> keys;
    for (std::int64_t b : blocks)
        for (std::int64_t j = b * s.block; j < std::min(s.lk, (b + 1) * s.block) && j <= s.pos(i); ++j) keys.push_back(j);
    return keys;
}

namespace {

constexpr double kNsaU = 0x1p-24;
constexpr double kNsaEta = 0x1p-149;
constexpr double kNsaExp = 4 * kNsaU;  // the kernels' expf (as attention's FlashErrorModel::e_exp)

}  // namespace

// docs/nsa_attention.md, "Budget of the importance".
std::vector<double> nsa_pool_error(const NsaSetup& s, const std::vector<double>& x, const std::vector<double>& pooled,
                                   std::int64_t w, Format store) {
    const double gl = gamma(static_cast<double>(s.block), kNsaU);
    const bool narrow = info(store).precision < info(Format::fp32).precision;
    std::vector<double> err(pooled.size());
    for (std::int64_t g = 0; g < s.hkv; ++g)
        for (std::int64_t b = 0; b < s.blocks; ++b)
            for (std::int64_t c = 0; c < w; ++c) {
                double mabs = 0;
                for (std::int64_t j = b * s.block; j < (b + 1) * s.block; ++j) mabs += std::fabs(x[static_cast<std::size_t>((g * s.lk + j) * w + c)]);
                mabs /= static_cast<double>(s.block);
                const auto at = static_cast<std::size_t>((g * s.blocks + b) * w + c);
                const double m = std::fabs(pooled[at]);
                const double pre =
                    (gl * mabs + 2 * kNsaU * (m + gl * mabs) + static_cast<double>(s.block + 4) * kNsaEta) * (1 + 0x1p-40);
                err[at] = pre + (narrow ? 0.5 * ulp_at(store, m + pre) : 0);
            }
    return err;
}

std::vector<double> nsa_importance_budget(const NsaSetup& s, const Params& p, const std::vector<TensorView>& in, Format store) {
    const std::vector<double> q = decoded_values(in[0]), k = decoded_values(in[1]);
    const double scale = std::fabs(nsa_scale<double>(p, s.d));
    const std::vector<double> kc = nsa_pool<double>(s, k, s.d), ek = nsa_pool_error(s, k, kc, s.d, store);
    const double g_dot = gamma(static_cast<double>(s.d + 2), kNsaU);
    std::vector<double> dp(static_cast<std::size_t>(s.hkv * s.lq * s.candidates), 0.0), mag(dp.size(), 0.0);
    for (std::int64_t h = 0; h < s.hq; ++h)
        for (std::int64_t i = 0; i < s.lq; ++i) {
            const std::int64_t g = kv_head_of(h, s.hq, s.hkv), c = s.visible(i);
            const auto at = static_cast<std::size_t>((g * s.lq + i) * s.candidates);
            if (c == 0) continue;
            std::vector<double> z(static_cast<std::size_t>(c)), eps(z.size());
            bool finite = true;
            for (std::int64_t b = 0; b < c; ++b) {
                double dot = 0, a = 0, pe = 0;
                for (std::int64_t d = 0; d < s.d; ++d) {
                    const double x = q[static_cast<std::size_t>((h * s.lq + i) * s.d + d)];
                    const auto kb = static_cast<std::size_t>((g * s.blocks + b) * s.d + d);
                    dot += x * kc[kb], a += std::fabs(x * kc[kb]), pe += std::fabs(x) * ek[kb];
                }
                z[static_cast<std::size_t>(b)] = scale * dot;
                // the dot on the stored K_cmp (magnitudes within the pooling error), the pooling error itself,
                // the scale's rounding and product, subnormal products
                eps[static_cast<std::size_t>(b)] = g_dot * scale * (a + pe) + scale * pe + (s.d + 2) * kNsaEta * std::max(1.0, scale);
                // an FP32 partial sum or the scaled logit may overflow: not bounded
                finite = finite && std::isfinite(z[static_cast<std::size_t>(b)]) && std::isfinite(eps[static_cast<std::size_t>(b)]) &&
                         (a + pe) * std::max(1.0, scale) * (1 + g_dot) < 0x1p127;
            }
            if (!finite) {  // a poisoned or overflowing row: any selection (the exact row is NaN or not judged)
                for (std::int64_t b = 0; b < c; ++b) dp[at + static_cast<std::size_t>(b)] = INFINITY;
                continue;
            }
            const double m = *std::max_element(z.begin(), z.end()), eps_m = *std::max_element(eps.begin(), eps.end());
            double l = 0;
            for (double x : z) l += std::exp(x - m);
            std::vector<double> big(z.size());
            double big_e = 0;
            for (std::size_t b = 0; b < z.size(); ++b) {
                // the exponent's error: both logits, the subtraction, the exp's relative error as a logit error
                const double e = eps[b] + eps_m + kNsaU * (std::fabs(z[b] - m) + eps[b] + eps_m) + 2 * kNsaExp;
                big[b] = e;
                big_e += std::exp(z[b] - m) / l * std::expm1(e);
            }
            const double g_sum = 2 * gamma(static_cast<double>(c), kNsaU) + 2 * kNsaU;
            for (std::size_t b = 0; b < z.size(); ++b) {
                const double pb = std::exp(z[b] - m) / l;
                const double rel = std::exp(big[b]) * (1 + big_e) * (1 + g_sum) - 1;
                const double d = pb * rel + 0x1p-146;  // the exp's and the division's subnormal parts
                dp[at + b] += d, mag[at + b] += pb + d;
            }
        }
    // the group sum of G FP32 terms
    const double g_group = gamma(static_cast<double>(s.group), kNsaU);
    for (std::size_t e = 0; e < dp.size(); ++e) dp[e] += g_group * mag[e];
    return dp;
}

OpOutputs eval_nsa_attention(const Params& params, const std::vector<TensorView>& in) {
    const NsaSetup s = nsa_setup(params, in);
    const std::vector<Real> q = read_exact(in[0]), k = read_exact(in[1]), v = read_exact(in[2]), gate = read_exact(in[3]);
    const Real scale = nsa_scale<Real>(params, s.d);
    const std::vector<Real> kc = nsa_pool(s, k, s.d), vc = nsa_pool(s, v, s.dv);
    const std::vector<double> imp = nsa_importance(s, q, kc, scale);
    OpOutputs out{{"o", "indices"}, {{s.hq, s.lq, s.dv}, {s.hkv, s.lq, s.n}}, {{}, {}}};
    std::vector<double> sel, delta;
    for (std::int64_t g = 0; g < s.hkv; ++g)
        for (std::int64_t i = 0; i < s.lq; ++i) {
            const auto at = imp.begin() + (g * s.lq + i) * s.candidates;
            const std::vector<double> scores(at, at + s.candidates);
            std::vector<double> row = select_row(s.select, scores, i);
            if (s.staged && !std::isnan(row[0])) {
                std::vector<double> theirs(static_cast<std::size_t>(s.n));
                for (std::int64_t j = 0; j < s.n; ++j) theirs[static_cast<std::size_t>(j)] = in[5].value((g * s.lq + i) * s.n + j);
                if (theirs != row) {
                    if (delta.empty()) delta = nsa_importance_budget(s, params, in, in[1].format);
                    const auto dat = delta.begin() + (g * s.lq + i) * s.candidates;
                    if (selection_admissible(s.select, scores, std::vector<double>(dat, dat + s.candidates), i, theirs)) {
                        row = theirs;
                        ++out.notes["indices: selections other than the oracle's, within the importance budget (accepted)"];
                    }
                }
            }
            sel.insert(sel.end(), row.begin(), row.end());
        }
    const NsaBranches<Real> br = nsa_branches(s, q, k, v, kc, vc, scale, sel);
    for (std::int64_t h = 0; h < s.hq; ++h)
        for (std::int64_t i = 0; i < s.lq; ++i)
            for (std::int64_t d = 0; d < s.dv; ++d) {
                const auto e = static_cast<std::size_t>((h * s.lq + i) * s.dv + d);
                Real o(0);
                for (int b = 0; b < 3; ++b) {
                    // sigmoid(g) > 0 for every g > -inf, even where MPFR's exp underflows: an infinite
                    // branch output stays infinite
                    const Real& gl = gate[static_cast<std::size_t>((h * s.lq + i) * 3 + b)];
                    o += isinf(br.o[b][e]) && gl > Real(-INFINITY) ? br.o[b][e] : sigmoid(gl) * br.o[b][e];
                }
                out.values[0].push_back(o);
            }
    for (double id : sel) out.values[1].push_back(from_double(id));
    return out;
}

}  // namespace conform::oracle
