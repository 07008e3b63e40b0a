#include "properties/verdict.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "numerics/ulp.hpp"
#include "oracle/bound.hpp"

namespace conform::props {

std::string Budget::text() const {
    return bound_based ? "derived bound, utilization <= 1" : "<= " + std::to_string(max_ulp) + " ulp";
}

Budget budget_for(const KernelInfo& k) {
    const OpSpec* op = find_op(k.op);
    Budget b;
    b.bound_based = op && op->kind == OpKind::row;
    b.max_ulp = 1;  // elementwise ops: one final rounding of a far more accurate value
    return b;
}

void Stats::add_ulp(std::uint64_t u) {
    static const std::uint64_t edges[] = {0, 1, 2, 4, 8, 16, 64, 1024};
    std::size_t k = 0;
    while (k < 8 && u > edges[k]) ++k;
    ++ulp_buckets_[k];
    ++elements_;
    max_ulp_ = std::max(max_ulp_, u);
}

void Stats::add_util(double u) {
    utils_.push_back(u);
    max_util_ = std::max(max_util_, u);
}


void Stats::merge(const Stats& o) {
    if (o.max_ulp_ > max_ulp_ || worst_ulp_.empty()) worst_ulp_ = o.worst_ulp_;
    if (o.max_util_ > max_util_ || worst_util_.empty()) worst_util_ = o.worst_util_;
    elements_ += o.elements_;
    class_mismatch_ += o.class_mismatch_;
    for (std::size_t i = 0; i < ulp_buckets_.size(); ++i) ulp_buckets_[i] += o.ulp_buckets_[i];
    max_ulp_ = std::max(max_ulp_, o.max_ulp_);
    max_util_ = std::max(max_util_, o.max_util_);
    utils_.insert(utils_.end(), o.utils_.begin(), o.utils_.end());
}

std::vector<std::int64_t> Stats::ulp_hist() const {
    std::vector<std::int64_t> h(ulp_buckets_);
    h.push_back(class_mismatch_);
    return h;
}

std::vector<std::int64_t> Stats::util_hist() const {
    std::vector<std::int64_t> h(12, 0);
    for (double u : utils_) {
        std::size_t k = u < 1 ? static_cast<std::size_t>(u * 10) : (u < 2 ? 10 : 11);
        ++h[std::min<std::size_t>(k, 11)];
    }
    return h;
}

std::vector<double> Stats::util_quantiles() const {
    if (utils_.empty()) return {};
    std::vector<double> s(utils_);
    std::sort(s.begin(), s.end());
    auto q = [&](double f) { return s[std::min(s.size() - 1, static_cast<std::size_t>(f * (s.size() - 1) + 0.5))]; };
    return {q(0.5), q(0.9), q(0.99), q(0.999), s.back()};
}

namespace {

std::string describe(const OpSpec& op, const std::vector<TensorView>& in, std::int64_t i, Format out,
                     std::uint64_t got, std::uint64_t want, double exact) {
    std::ostringstream os;
    const std::int64_t n = in[0].cols();
    os << "element " << i << " (row " << i / n << ", col " << i % n << "):";
    for (std::size_t k = 0; k < in.size(); ++k) {
        const bool bcast = op.kind == OpKind::row && k > 0;
        os << " " << op.inputs[k] << "=" << hexfloat(in[k].value(bcast ? i % n : i));
    }
    os << " -> got " << hexfloat(decode(out, got)) << ", want " << hexfloat(decode(out, want)) << " (exact "
       << hexfloat(exact) << ")";
    return os.str();
}

oracle::RowData row_data(const OpSpec& op, const std::vector<TensorView>& in, const oracle::Result& ref,
                         std::int64_t r) {
    const std::int64_t n = in[0].cols();
    oracle::RowData row;
    for (std::int64_t i = 0; i < n; ++i) {
        row.x.push_back(in[0].value(r * n + i));
        row.y.push_back(ref.exact[r * n + i]);
        if (in.size() > 1) row.w.push_back(in[1].value(i));
        if (in.size() > 2) row.b.push_back(in[2].value(i));
    }
    return row;
}

}  // namespace

CaseResult check_case(const KernelInfo& k, const Params& p, const std::vector<TensorView>& in, Stats* stats) {
    const OpSpec& op = *find_op(k.op);
    CaseResult res;
    res.outputs = run_kernel(k, p, in);
    res.ref = oracle::evaluate(op, p, in, k.out);
    const Budget budget = budget_for(k);
    const TensorView got = res.outputs[0].view();
    const std::int64_t n = in[0].cols(), rows = in[0].rows();
    auto fail = [&](std::int64_t i, const std::string& why) {
        if (!res.pass) return;
        res.pass = false;
        res.message = why + ": " + describe(op, in, i, k.out, got.bits(i), res.ref.rounded.bits(i), res.ref.exact[i]);
    };
    for (std::int64_t r = 0; r < rows; ++r) {
        std::vector<double> bound;
        if (budget.bound_based) bound = oracle::row_bound(op, p, row_data(op, in, res.ref, r), k.acc, k.out);
        for (std::int64_t j = 0; j < n; ++j) {
            const std::int64_t i = r * n + j;
            const UlpCompare c = compare_bits(k.out, res.ref.rounded.bits(i), got.bits(i));
            const double exact = res.ref.exact[i], value = got.value(i);
            // Reductions: a finite exact value whose rounding overflows may be
            // met by a finite result within the bound.
            const bool bound_ok_finite = budget.bound_based && std::isfinite(exact) && std::isfinite(value);
            if (!c.class_match && !bound_ok_finite) {
                if (stats) stats->add_class_mismatch();
                fail(i, std::string("special-value class mismatch (want ") + name(c.ref_class) + ", got " +
                            name(c.got_class) + ")");
                continue;
            }
            const std::uint64_t ulps = c.class_match ? c.ulps : ulp_distance(k.out, encode(k.out, exact), got.bits(i));
            auto what = [&] { return describe(op, in, i, k.out, got.bits(i), res.ref.rounded.bits(i), exact); };
            if (stats) {
                const bool worst = ulps > stats->max_ulp() || stats->worst_ulp_case().empty();
                stats->add_ulp(ulps);
                if (worst) stats->set_worst_ulp(what());
            }
            if (budget.bound_based) {
                if (!std::isfinite(exact)) continue;  // matched as a class above
                const double err = std::fabs(value - exact);
                const double util = err / bound[j];
                if (stats) {
                    const bool worst = util > stats->max_util() || stats->worst_util_case().empty();
                    stats->add_util(util);
                    if (worst) stats->set_worst_util(what());
                }
                if (!(util <= 1))
                    fail(i, "error " + hexfloat(err) + " exceeds the derived bound " + hexfloat(bound[j]) +
                                " (utilization " + std::to_string(util) + ")");
            } else if (ulps > budget.max_ulp) {
                fail(i, std::to_string(ulps) + " ulp exceeds the budget of " + std::to_string(budget.max_ulp) + " ulp");
            }
        }
    }
    return res;
}

std::string show_inputs(const OpSpec& op, const Params& p, const std::vector<TensorView>& in, std::size_t max_elems) {
    std::ostringstream os;
    os << op.name << " params {";
    bool first = true;
    for (const auto& [k, v] : p.values()) os << (first ? "" : ", ") << k << "=" << v, first = false;
    os << "}\n";
    for (std::size_t k = 0; k < in.size(); ++k) {
        os << op.inputs[k] << " " << name(in[k].format) << " [" << in[k].rows() << "x" << in[k].cols() << "]: ";
        const std::int64_t total = in[k].numel();
        for (std::int64_t i = 0; i < total && i < static_cast<std::int64_t>(max_elems); ++i)
            os << (i ? " " : "") << hexfloat(in[k].value(i));
        if (total > static_cast<std::int64_t>(max_elems)) os << " ... (" << total << " values)";
        os << "\n";
    }
    return os.str();
}

}  // namespace conform::props
