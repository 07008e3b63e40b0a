#include "model/metrics.hpp"

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
