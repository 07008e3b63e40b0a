#include "model/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "numerics/ulp.hpp"

namespace conform::model {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Running sums of the finite pairs.
struct Sums {
    double cr = 0, cc = 0, rr = 0, ee = 0;
};

void finish(ErrorMetrics& m, const Sums& s) {
    const double norm = std::sqrt(s.cc) * std::sqrt(s.rr);
    // Two zero vectors are identical: cosine 1.  One zero vector against a
    // nonzero one has no direction to compare: cosine 0.
    m.cosine = norm > 0 ? s.cr / norm : (s.cc == 0 && s.rr == 0 ? 1.0 : 0.0);
    m.sqnr_db = s.ee == 0 ? kInf : 10 * std::log10(s.rr / s.ee);
    m.rel_l2 = s.ee == 0 ? 0.0 : s.rr > 0 ? std::sqrt(s.ee / s.rr) : kInf;
}

// A class mismatch at element i: the point fails whatever its numbers say.
void mismatch(ErrorMetrics& m, std::int64_t i) {
    if (!m.class_mismatch) m.worst = i;
    m.class_mismatch = true;
    m.utilization = kInf;
}

}  // namespace

ErrorMetrics compare(const std::vector<double>& cand, const std::vector<double>& ref,
                     const std::vector<double>& allowed, Format f, bool inherited_nan) {
    if (cand.size() != ref.size() || allowed.size() != ref.size())
        throw std::invalid_argument("compare: candidate, reference and budget sizes differ");
    ErrorMetrics m;
    Sums s;
    const double tiny = std::ldexp(1.0, info(f).emin);  // smallest normal: relative error floor
    for (std::size_t k = 0; k < ref.size(); ++k) {
        const auto i = static_cast<std::int64_t>(k);
        if (allowed[k] == -kInf) {  // oracle::kUndefined: the budget cannot say (an FP32 stage may overflow)
            ++m.not_judged;
            continue;
        }
        const std::uint64_t rb = encode(f, ref[k]), cb = encode(f, cand[k]);
        const UlpCompare c = compare_bits(f, rb, cb);
        if ((std::isnan(ref[k]) && !inherited_nan) || !c.class_match) {
            mismatch(m, i);
            continue;
        }
        if (c.ref_class != ValueClass::finite) continue;  // the same infinity on both sides
        const double err = std::fabs(cand[k] - ref[k]);
        m.max_ulp = std::max(m.max_ulp, static_cast<double>(c.ulps));
        m.max_rel = std::max(m.max_rel, err / std::max(std::fabs(ref[k]), tiny));
        const double util = err == 0 ? 0.0 : (allowed[k] > 0 ? err / allowed[k] : kInf);
        if (!m.class_mismatch && (util > m.utilization || m.worst < 0)) m.utilization = util, m.worst = i;
        s.cr += cand[k] * ref[k], s.cc += cand[k] * cand[k], s.rr += ref[k] * ref[k], s.ee += err * err;
    }
    finish(m, s);
    return m;
}

namespace {

std::vector<std::int64_t> top_k(const double* row, std::int64_t v, std::int64_t k) {
    std::vector<std::int64_t> idx(static_cast<std::size_t>(v));
    for (std::int64_t i = 0; i < v; ++i) idx[static_cast<std::size_t>(i)] = i;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](std::int64_t a, std::int64_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    idx.resize(static_cast<std::size_t>(k));
    return idx;
}

// KL(softmax(r) || softmax(c)) of one row, max-shifted in double.
double kl_row(const double* r, const double* c, std::int64_t v) {
    const double mr = *std::max_element(r, r + v), mc = *std::max_element(c, c + v);
    double zr = 0, zc = 0;
    for (std::int64_t i = 0; i < v; ++i) zr += std::exp(r[i] - mr), zc += std::exp(c[i] - mc);
    double kl = 0;
    for (std::int64_t i = 0; i < v; ++i) {
        const double p = std::exp(r[i] - mr) / zr;
        if (p > 0) kl += p * ((r[i] - mr - std::log(zr)) - (c[i] - mc - std::log(zc)));
    }
    return std::max(kl, 0.0);
}

}  // namespace

LogitMetrics logit_metrics(const std::vector<double>& cand, const std::vector<double>& ref, std::int64_t vocab) {
    LogitMetrics m;
    m.k = std::min<std::int64_t>(5, vocab);
    const std::int64_t T = static_cast<std::int64_t>(ref.size()) / vocab;
    for (std::int64_t t = 0; t < T; ++t) {
        const double *c = cand.data() + t * vocab, *r = ref.data() + t * vocab;
        if (!std::all_of(c, c + vocab, [](double x) { return std::isfinite(x); }) ||
            !std::all_of(r, r + vocab, [](double x) { return std::isfinite(x); }))
            continue;
        // Ties in the candidate (BF16 logits tie often) are read in the
        // reference's favour: the candidate's format cannot order them, and
        // its argmax among equal values is an index convention.  Top-1
        // agrees when the reference's argmax holds the candidate's largest
        // value; the overlap counts the reference's top k that some order of
        // the candidate's ties puts in its top k.
        const auto tc = top_k(c, vocab, m.k), tr = top_k(r, vocab, m.k);
        const double kth = c[tc.back()];
        const auto above = std::count_if(c, c + vocab, [&](double x) { return x > kth; });
        std::int64_t over = 0, tied = 0;
        for (std::int64_t a : tr) over += c[a] > kth, tied += c[a] == kth;
        m.top1 += c[tr[0]] == c[tc[0]];
        m.topk += static_cast<double>(over + std::min<std::int64_t>(tied, m.k - above)) / static_cast<double>(m.k);
        m.kl += kl_row(r, c, vocab);
        ++m.tokens;
    }
    if (m.tokens) m.top1 /= static_cast<double>(m.tokens), m.topk /= static_cast<double>(m.tokens), m.kl /= static_cast<double>(m.tokens);
    return m;
}

double drift_ratio(const std::vector<double>& cand, const std::vector<double>& exact, const std::vector<double>& same_dtype) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
        if (!std::isfinite(cand[i]) || !std::isfinite(exact[i]) || !std::isfinite(same_dtype[i])) continue;
        num += (cand[i] - exact[i]) * (cand[i] - exact[i]);
        den += (same_dtype[i] - exact[i]) * (same_dtype[i] - exact[i]);
    }
    return den > 0 ? std::sqrt(num / den) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace conform::model
