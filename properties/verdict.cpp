#include "properties/verdict.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "numerics/ulp.hpp"
#include "oracle/bound.hpp"
#include "oracle/conventions.hpp"
#include "oracle/structured.hpp"

namespace conform::props {

std::string Budget::text() const {
    return bound_based ? "derived bound, utilization <= 1" : "<= " + std::to_string(max_ulp) + " ulp";
}

Budget budget_for(const KernelInfo& k) {
    const OpSpec* op = find_op(k.op);
    Budget b;
    b.bound_based = op && (op->kind == OpKind::row || oracle::find_structured_bound(op->name));
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

// One element against the oracle: special-value classes first, then the
// ULP budget or the derived bound (bound == nullptr: ULP budget).  Returns
// the failure reason, empty when the element passes; feeds the statistics.
std::string judge(Format f, std::uint64_t want, std::uint64_t got, double exact, const double* bound,
                  std::uint64_t max_ulp, Stats* stats, const std::function<std::string()>& what) {
    const UlpCompare c = compare_bits(f, want, got);
    const double value = decode(f, got);
    // Reductions: a finite exact value whose rounding overflows may be met by
    // a finite result within the bound.
    const bool bound_ok_finite = bound && std::isfinite(exact) && std::isfinite(value);
    if (!c.class_match && !bound_ok_finite) {
        if (stats) stats->add_class_mismatch();
        return std::string("special-value class mismatch (want ") + name(c.ref_class) + ", got " + name(c.got_class) +
               ")";
    }
    const std::uint64_t ulps = c.class_match ? c.ulps : ulp_distance(f, encode(f, exact), got);
    if (stats) {
        const bool worst = ulps > stats->max_ulp() || stats->worst_ulp_case().empty();
        stats->add_ulp(ulps);
        if (worst) stats->set_worst_ulp(what());
    }
    if (!bound) return ulps > max_ulp ? std::to_string(ulps) + " ulp exceeds the budget of " + std::to_string(max_ulp) + " ulp" : "";
    // Matched as a class above: a special exact value, or a finite one whose
    // correct rounding overflows to the same infinity the kernel returned.
    if (!std::isfinite(exact) || !std::isfinite(value)) return "";
    const double err = std::fabs(value - exact);
    const double util = err == 0 ? 0.0 : err / *bound;  // a zero bound demands an exact result
    if (stats) {
        const bool worst = util > stats->max_util() || stats->worst_util_case().empty();
        stats->add_util(util);
        if (worst) stats->set_worst_util(what());
    }
    if (util <= 1) return "";
    return "error " + hexfloat(err) + " exceeds the derived bound " + hexfloat(*bound) + " (utilization " +
           std::to_string(util) + ")";
}

// "o[1, 2, 0]" for flat index i of a tensor of the given shape.
std::string element_name(const std::string& tensor, const std::vector<std::int64_t>& shape, std::int64_t i) {
    std::vector<std::int64_t> idx(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
        idx[d] = shape[d] ? i % shape[d] : 0;
        i = shape[d] ? i / shape[d] : 0;
    }
    std::string s = tensor + "[";
    for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
    return s + "]";
}

CaseResult check_structured(const KernelInfo& k, const OpSpec& op, const Params& p, const std::vector<TensorView>& in,
                            Stats* stats) {
    CaseResult res;
    res.outputs = run_kernel(k, p, in);
    std::vector<Format> formats;
    for (std::size_t o = 0; o < op.outputs.size(); ++o) formats.push_back(output_format(k, o));
    // A staged op's references are its exact stages applied to the kernel's
    // own earlier outputs (OpSpec::staged): those follow the inputs.
    std::vector<TensorView> oracle_in = in;
    if (op.staged)
        for (const Tensor& t : res.outputs) oracle_in.push_back(t.view());
    oracle::StructuredResult ref = oracle::evaluate_structured(op.name, p, oracle_in, formats);
    const oracle::StructuredBoundFn bound_fn = oracle::find_structured_bound(op.name);
    const std::vector<std::vector<double>> bounds = bound_fn ? bound_fn(p, oracle_in, ref.exact, k.acc, formats)
                                                             : std::vector<std::vector<double>>{};
    // A declared convention changes only special rows (NaN there, judged as
    // a class); the bounds above come from the oracle's own values.
    if (!k.conventions.empty()) oracle::apply_conventions(op.name, k.conventions, in, ref.rounded, ref.exact);
    res.ref.rounded = ref.rounded.at(0);
    res.ref.exact = ref.exact.at(0);
    res.ref.max_bits = ref.max_bits;
    res.ref.recomputed = ref.recomputed;
    res.all_ref = ref.rounded;
    for (std::size_t o = 0; o < formats.size(); ++o) {
        const Tensor& got = res.outputs[o];
        const bool bounded = o < bounds.size() && !bounds[o].empty();
        for (std::int64_t i = 0; i < got.numel(); ++i) {
            const double exact = ref.exact[o][static_cast<std::size_t>(i)];
            auto what = [&] {
                return element_name(ref.names[o], got.shape(), i) + ": got " + hexfloat(got.value(i)) + ", want " +
                       hexfloat(ref.rounded[o].value(i)) + " (exact " + hexfloat(exact) + ")";
            };
            const std::string why = judge(formats[o], ref.rounded[o].bits(i), got.bits(i), exact,
                                          bounded ? &bounds[o][static_cast<std::size_t>(i)] : nullptr, 1, stats, what);
            if (!why.empty() && res.pass) {
                res.pass = false;
                res.message = why + ": " + what();
            }
        }
    }
    return res;
}

CaseResult check_case(const KernelInfo& k, const Params& p, const std::vector<TensorView>& in, Stats* stats) {
    const OpSpec& op = *find_op(k.op);
    if (op.kind == OpKind::structured) return check_structured(k, op, p, in, stats);
    CaseResult res;
    res.outputs = run_kernel(k, p, in);
    res.ref = oracle::evaluate(op, p, in, k.out);
    if (!k.conventions.empty()) {
        std::vector<Tensor> rounded{res.ref.rounded};
        std::vector<std::vector<double>> exact{res.ref.exact};
        oracle::apply_conventions(op.name, k.conventions, in, rounded, exact);
        res.ref.rounded = std::move(rounded[0]);
        res.ref.exact = std::move(exact[0]);
    }
    const Budget budget = budget_for(k);
    const TensorView got = res.outputs[0].view();
    const std::int64_t n = in[0].cols(), rows = in[0].rows();
    for (std::int64_t r = 0; r < rows; ++r) {
        std::vector<double> bound;
        if (budget.bound_based) bound = oracle::row_bound(op, p, row_data(op, in, res.ref, r), k.acc, k.out);
        for (std::int64_t j = 0; j < n; ++j) {
            const std::int64_t i = r * n + j;
            auto what = [&] { return describe(op, in, i, k.out, got.bits(i), res.ref.rounded.bits(i), res.ref.exact[i]); };
            const std::string why = judge(k.out, res.ref.rounded.bits(i), got.bits(i), res.ref.exact[i],
                                          budget.bound_based ? &bound[j] : nullptr, budget.max_ulp, stats, what);
            if (!why.empty() && res.pass) {
                res.pass = false;
                res.message = why + ": " + what();
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
