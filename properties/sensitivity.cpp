#include "properties/sensitivity.hpp"

#include <cmath>
#include <cstdio>



namespace conform::props {
namespace {

bool exact_everywhere(const std::vector<CaseEval>& cases) {
    for (const CaseEval& e : cases)
        for (const OutputEval& o : e.outputs)
            for (std::size_t i = 0; i < o.exact.size(); ++i) {
                const double g = o.got.value(static_cast<std::int64_t>(i));
                if (std::isfinite(g) && g != o.exact[i]) return false;
            }
    return true;
}

bool correctly_rounded(const std::vector<CaseEval>& cases) {
    for (const CaseEval& e : cases)
        for (const OutputEval& o : e.outputs)
            for (std::int64_t i = 0; i < o.got.numel(); ++i)
                if (std::isfinite(o.got.value(i)) && o.got.bits(i) != o.ref.bits(i)) return false;
    return true;
}

}  // namespace

std::vector<CaseEval> sample_cases(const KernelInfo& k, const RunConfig& cfg0) {
    std::vector<CaseEval> cases;
    RunConfig cfg = cfg0;
    cfg.collect = &cases;
    cfg.shrink = false;
    for (const PropertyDef* p : properties_for(*find_op(k.op)))
        if (p->name == "within_budget" || p->name == "special_values") run_property(*p, k, cfg, nullptr);
    return cases;
}

CaseEval amplify(const CaseEval& e, double f) {
    CaseEval a = e;
    for (OutputEval& o : a.outputs)
        for (std::size_t i = 0; i < o.exact.size(); ++i) {
            const auto ii = static_cast<std::int64_t>(i);
            const double g = o.got.value(ii), x = o.exact[i];
            if (!std::isfinite(g) || !std::isfinite(x) || g == x) continue;
            o.got.set_bits(ii, encode(o.format, x + f * (g - x)));
        }
    return a;
}

SampleVerdict judge_sample(const std::vector<CaseEval>& cases, const AccuracyProfile& profile, double factor,
                           const std::vector<SampleCheck>& checks) {
    SampleVerdict v;
    for (const CaseEval& e : cases) {
        Stats* s = e.property == "within_budget" ? &v.stats : nullptr;
        const CaseResult r = judge_case(factor == 1 ? e : amplify(e, factor), profile, s);
        if (!r.pass && !v.rejected) v.rejected = true, v.why = r.message;
    }
    for (const SampleCheck& check : checks) {
        if (v.rejected) break;
        if (std::string why = check(v.stats); !why.empty()) v.rejected = true, v.why = why;
    }
    return v;
}

Sensitivity find_sensitivity(const std::vector<CaseEval>& cases, const AccuracyProfile& profile,
                             const std::vector<SampleCheck>& checks, double max_factor) {
    Sensitivity s;
    s.cases = static_cast<std::int64_t>(cases.size());
    const SampleVerdict base = judge_sample(cases, profile, 1, checks);
    if (base.rejected) {
        s.status = Sensitivity::Status::fails_unamplified, s.detected_by = base.why;
        return s;
    }
    if (exact_everywhere(cases)) {
        s.status = Sensitivity::Status::exact;
        return s;
    }
    s.correctly_rounded = correctly_rounded(cases);
    double lo = 1, hi = 2;
    SampleVerdict at_hi = judge_sample(cases, profile, hi, checks);
    while (!at_hi.rejected && hi < max_factor) {
        lo = hi, hi *= 2;
        at_hi = judge_sample(cases, profile, hi, checks);
    }
    if (!at_hi.rejected) return s;  // not detected up to max_factor
    while (hi / lo > 1.001) {
        const double mid = std::sqrt(lo * hi);
        SampleVerdict v = judge_sample(cases, profile, mid, checks);
        if (v.rejected) hi = mid, at_hi = std::move(v);
        else lo = mid;
    }
    s.status = Sensitivity::Status::detected;
    s.factor = hi;
    s.detected_by = at_hi.why;
    return s;
}

std::string text(const Sensitivity& s) {
    switch (s.status) {
        case Sensitivity::Status::fails_unamplified: return "FAILS unamplified: " + s.detected_by;
        case Sensitivity::Status::exact: return "exact on every case (no error to amplify)";
        case Sensitivity::Status::not_detected: return "not detected up to x2^20";
        case Sensitivity::Status::detected: break;
    }
    char text[32];
    std::snprintf(text, sizeof text, "detects x%.2f", s.factor);
    return text;
}

}  // namespace conform::props
