#include "properties/verdict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "numerics/ulp.hpp"
#include "oracle/activation_bound.hpp"
#include "oracle/bound.hpp"
#include "oracle/conventions.hpp"
#include "oracle/structured.hpp"

namespace conform::props {

std::string Budget::text() const {
    if (!arith.empty()) return "<= " + std::to_string(max_ulp) + " ulp, or the act_arith = " + arith + " bound";
    return bound_based ? "derived bound, utilization <= 1" : "<= " + std::to_string(max_ulp) + " ulp";
}

Budget budget_for(const KernelInfo& k) {
    const OpSpec* op = find_op(k.op);
    Budget b;
    b.bound_based = op && (op->kind == OpKind::row || oracle::find_structured_bound(op->name));
    b.max_ulp = 1;  // elementwise ops: one final rounding of a far more accurate value
    if (const std::string a = convention(k.conventions, "act_arith"); op && a != "ulp") b.arith = a;
    return b;
}

AccuracyProfile profile_for(const KernelInfo& k) { return parse_profile(k.profile); }

const char* name(Region r) {
    static const char* names[] = {"normal", "tail", "subnormal", "special"};
    return names[static_cast<int>(r)];
}

// ---- statistics ----------------------------------------------------------------

void Stats::add_ulp(std::uint64_t u) {
    static const std::uint64_t edges[] = {0, 1, 2, 4, 8, 16, 64, 1024};
    std::size_t k = 0;
    while (k < 8 && u > edges[k]) ++k;
    ++ulp_buckets_[k];
    ++elements_;
    max_ulp_ = std::max(max_ulp_, u);
}

void Stats::add_util(double gate, double rigorous) {
    utils_.push_back(gate);
    utils_rig_.push_back(rigorous);
    max_util_ = std::max(max_util_, gate);
    max_util_rig_ = std::max(max_util_rig_, rigorous);
}

void Stats::add_not_judged(const std::string& reason) {
    ++not_judged_;
    ++not_judged_reasons_[reason];
}

void Stats::add_direction_vote(int above, int away) {
    const int v[2] = {above, away};
    for (std::size_t i = 0; i < 2; ++i) {
        if (v[i] > 0) ++votes_for_[i];
        if (v[i] < 0) ++votes_against_[i];
    }
}

void Stats::add_rank(const std::array<std::uint64_t, 4>& ranks, Region region, std::uint64_t ulps) {
    for (std::size_t a = 0; a < ranks.size(); ++a) max_rank_[a] = std::max(max_rank_[a], ranks[a]);
    const auto r = static_cast<std::size_t>(region);
    ++region_elements_[r];
    if (ranks[0] > kRankStrict) {
        ++region_beyond_[r];
        region_max_ulp_[r] = std::max(region_max_ulp_[r], ulps);
    }
}

void Stats::merge(const Stats& o) {
    if (o.max_ulp_ > max_ulp_ || worst_ulp_.empty()) worst_ulp_ = o.worst_ulp_;
    if (o.max_util_ > max_util_ || worst_util_.empty()) worst_util_ = o.worst_util_;
    elements_ += o.elements_;
    class_mismatch_ += o.class_mismatch_;
    not_judged_ += o.not_judged_;
    for (std::size_t i = 0; i < 2; ++i) votes_for_[i] += o.votes_for_[i], votes_against_[i] += o.votes_against_[i];
    for (const auto& [why, n] : o.not_judged_reasons_) not_judged_reasons_[why] += n;
    for (const auto& [what, n] : o.notes_) notes_[what] += n;
    for (std::size_t i = 0; i < ulp_buckets_.size(); ++i) ulp_buckets_[i] += o.ulp_buckets_[i];
    max_ulp_ = std::max(max_ulp_, o.max_ulp_);
    max_util_ = std::max(max_util_, o.max_util_);
    max_util_rig_ = std::max(max_util_rig_, o.max_util_rig_);
    utils_.insert(utils_.end(), o.utils_.begin(), o.utils_.end());
    utils_rig_.insert(utils_rig_.end(), o.utils_rig_.begin(), o.utils_rig_.end());
    case_log_utils_.insert(case_log_utils_.end(), o.case_log_utils_.begin(), o.case_log_utils_.end());
    case_misrounded_.insert(case_misrounded_.end(), o.case_misrounded_.begin(), o.case_misrounded_.end());
    for (std::size_t a = 0; a < max_rank_.size(); ++a) max_rank_[a] = std::max(max_rank_[a], o.max_rank_[a]);
    for (std::size_t r = 0; r < kRegions; ++r) {
        region_elements_[r] += o.region_elements_[r];
        region_beyond_[r] += o.region_beyond_[r];
        region_max_ulp_[r] = std::max(region_max_ulp_[r], o.region_max_ulp_[r]);
    }
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

namespace {

std::vector<double> quantiles(std::vector<double> s) {
    if (s.empty()) return {};
    std::sort(s.begin(), s.end());
    auto q = [&](double f) { return s[std::min(s.size() - 1, static_cast<std::size_t>(f * (s.size() - 1) + 0.5))]; };
    return {q(0.5), q(0.9), q(0.99), q(0.999), s.back()};
}

}  // namespace

std::vector<double> Stats::util_quantiles() const { return quantiles(utils_); }
std::vector<double> Stats::util_quantiles_rigorous() const { return quantiles(utils_rig_); }

std::string tightest_profile(const Stats& s) {
    if (s.elements() == 0) return "";
    std::size_t best = 0;
    for (std::size_t a = 1; a < 4; ++a)
        if (s.max_rank()[a] < s.max_rank()[best]) best = a;
    AccuracyProfile p;
    p.rank = s.max_rank()[best];
    p.ftz = best & 1, p.ieee = best & 2;
    return p.text();
}

// ---- evaluation ----------------------------------------------------------------

namespace {

// RMS of the finite values of each last-axis row of `v` (rows of `cols`).
std::vector<double> row_rms(const std::vector<double>& v, std::int64_t cols) {
    std::vector<double> rms(v.size(), 0.0);
    if (cols <= 0) return rms;
    for (std::size_t r0 = 0; r0 < v.size(); r0 += static_cast<std::size_t>(cols)) {
        const std::size_t r1 = std::min(v.size(), r0 + static_cast<std::size_t>(cols));
        double s = 0, big = 0;
        std::size_t n = 0;
        for (std::size_t i = r0; i < r1; ++i)
            if (std::isfinite(v[i])) big = std::max(big, std::fabs(v[i])), ++n;
        for (std::size_t i = r0; i < r1; ++i)
            if (std::isfinite(v[i]) && big > 0) s += (v[i] / big) * (v[i] / big);  // scaled: no overflow
        const double value = n && big > 0 ? big * std::sqrt(s / static_cast<double>(n)) : 0.0;
        std::fill(rms.begin() + static_cast<std::ptrdiff_t>(r0), rms.begin() + static_cast<std::ptrdiff_t>(r1), value);
    }
    return rms;
}

// Inputs of element i of an elementwise op, or of its row (row ops: x's row
// and the weight/bias columns): special / subnormal / their largest magnitude.
struct InputLook {
    bool special = false, subnormal = false;
    double largest = 0;
    void see(Format f, double v) {
        if (!std::isfinite(v)) special = true;
        else largest = std::max(largest, std::fabs(v));
        subnormal = subnormal || is_subnormal(f, v);
    }
};

InputLook look_at_inputs(const OpSpec& op, const std::vector<TensorView>& in, std::int64_t i) {
    InputLook look;
    if (op.kind == OpKind::structured) return look;  // no element-to-input map: judged by the output alone
    if (op.kind == OpKind::row) {
        const std::int64_t n = in[0].cols(), c = i % n;
        look.see(in[0].format, in[0].value(i));
        for (std::size_t k = 1; k < in.size(); ++k) look.see(in[k].format, in[k].value(c));
        return look;
    }
    for (const TensorView& t : in) look.see(t.format, t.value(i));
    return look;
}

Region region_of(const InputLook& look, Format out, double exact, double scale) {
    if (look.special || !std::isfinite(exact)) return Region::special;
    if (look.subnormal || is_subnormal(out, exact)) return Region::subnormal;
    if (exact != 0 && std::fabs(exact) <= 0x1p-12 * scale) return Region::tail;
    return Region::normal;
}

void fill_regions(OutputEval& o, const OpSpec& op, const std::vector<TensorView>& in) {
    const std::int64_t cols = o.got.view().cols();
    const std::vector<double> rms = row_rms(o.exact, cols);
    const bool per_input = op.kind != OpKind::structured;
    o.region.resize(o.exact.size());
    if (o.bounded()) o.scale.resize(o.exact.size());
    for (std::size_t i = 0; i < o.exact.size(); ++i) {
        const InputLook look = per_input ? look_at_inputs(op, in, static_cast<std::int64_t>(i)) : InputLook{};
        const double mag = std::isfinite(o.exact[i]) ? std::fabs(o.exact[i]) : 0.0;
        const double scale = op.kind == OpKind::row || !per_input ? std::max(mag, rms[i]) : std::max(mag, look.largest);
        o.region[i] = region_of(look, o.format, o.exact[i], scale);
        // A log-sum-exp is judged in absolute terms: an error d in it is a
        // relative error e^d - 1 of every weight, so its scale is at least 1.
        if (o.bounded()) o.scale[i] = o.ulp_or_bound ? mag : std::max({mag, rms[i], o.name == "lse" ? 1.0 : 0.0});
    }
}

// Both tiers of a bound: the probabilistic pass notes whether any constant
// was sharpened; when none was, the rigorous bound is the same numbers.
template <class T, class F>
void both_tiers(F&& bound, bool model_holds, T& rigorous, T& probabilistic) {
    if (model_holds) {
        oracle::TierScope scope(oracle::Tier::probabilistic);
        probabilistic = bound();
        if (!scope.sharpened()) {
            rigorous = probabilistic;
            return;
        }
    }
    oracle::TierScope scope(oracle::Tier::rigorous);
    rigorous = bound();
    if (!model_holds) probabilistic = rigorous;
}

// The parameters the oracle evaluates under: the case's (a parameter a
// convention pins already set by evaluate_case), with the kernel's declared
// formula conventions as hidden "convention.<key>" entries.
Params oracle_params(const KernelInfo& k, const Params& p) { return with_convention_params(p, k.conventions); }

// The oracle's parameters and the kernel's declared model ("declared.<key>").
Params bound_params(const KernelInfo& k, const Params& p) {
    Params b = oracle_params(k, p);
    for (const auto& [key, value] : k.declared) b.set("declared." + key, value);
    return b;
}

oracle::RowData row_data(const std::vector<TensorView>& in, const std::vector<double>& exact, std::int64_t r) {
    const std::int64_t n = in[0].cols();
    oracle::RowData row;
    for (std::int64_t i = 0; i < n; ++i) {
        row.x.push_back(in[0].value(r * n + i));
        row.y.push_back(exact[static_cast<std::size_t>(r * n + i)]);
        if (in.size() > 1) row.w.push_back(in[1].value(i));
        if (in.size() > 2) row.b.push_back(in[2].value(i));
    }
    return row;
}

std::string describe_row_element(const OpSpec& op, const std::vector<TensorView>& in, std::int64_t i, Format out,
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

// Subnormal inputs flushed to zero of the same sign; false when none was.
bool flush_inputs(const std::vector<TensorView>& in, std::vector<Tensor>& owned, std::vector<TensorView>& flushed) {
    bool any = false;
    owned.clear();
    owned.reserve(in.size());
    flushed = in;
    for (std::size_t k = 0; k < in.size(); ++k) {
        bool here = false;
        for (std::int64_t i = 0; i < in[k].numel() && !here; ++i) here = is_subnormal(in[k].format, in[k].value(i));
        if (!here) continue;
        std::vector<std::int64_t> shape(in[k].shape.begin(), in[k].shape.begin() + in[k].rank);
        owned.emplace_back(in[k].format, shape);
        for (std::int64_t i = 0; i < in[k].numel(); ++i) {
            const double v = in[k].value(i);
            owned.back().set_value(i, is_subnormal(in[k].format, v) ? std::copysign(0.0, v) : v);
        }
        flushed[k] = owned.back().view();
        any = true;
    }
    return any;
}

// The oracle's correctly rounded outputs (every output, with conventions).
struct References {
    std::vector<Tensor> rounded;
    std::vector<std::vector<double>> exact;
    // exact before the row and element conventions (masked_row, special_values):
    // the oracle's values under the formula conventions, which the bounds read
    std::vector<std::vector<double>> formula_exact;
    unsigned max_bits = 0;
    std::int64_t recomputed = 0;
    std::map<std::string, std::int64_t> notes;
};

References reference(const KernelInfo& k, const OpSpec& op, const Params& case_params, const std::vector<TensorView>& oracle_in,
                     const std::vector<TensorView>& in, const std::vector<Format>& formats) {
    // A staged op's reference takes the kernel's own earlier stages where they
    // are admissible within its budgets, so it reads the kernel's declared
    // model as the bound does (block_sparse's pow_ulps, moe's logit_unit).
    const Params p = op.staged ? bound_params(k, case_params) : oracle_params(k, case_params);
    References r;
    if (op.kind == OpKind::structured) {
        oracle::StructuredResult s = oracle::evaluate_structured(op.name, p, oracle_in, formats);
        r.rounded = std::move(s.rounded), r.exact = std::move(s.exact);
        r.max_bits = s.max_bits, r.recomputed = s.recomputed;
        r.notes = std::move(s.notes);
    } else {
        oracle::Result s = oracle::evaluate(op, p, oracle_in, k.out);
        r.rounded.push_back(std::move(s.rounded));
        r.exact.push_back(std::move(s.exact));
        r.max_bits = s.max_bits, r.recomputed = s.recomputed;
    }
    r.formula_exact = r.exact;
    if (!k.conventions.empty()) oracle::apply_conventions(op.name, k.conventions, p, in, r.rounded, r.exact);
    return r;
}

// The ieee alternative (profile +ieee): the reference under IEEE's
// conventions -- elementwise ops evaluated literally where an input is
// infinite (special_values = ieee), empty rows NaN (masked_row = nan) --
// through oracle::apply_conventions.  Empty when nothing differs (also when
// the kernel declares that convention: the plain reference is it already).
std::vector<Tensor> ieee_references(const OpSpec& op, const Params& p, const std::vector<TensorView>& in,
                                    const References& plain) {
    const bool elementwise = op.kind == OpKind::unary || op.kind == OpKind::gated;
    const std::string key = elementwise ? "special_values" : "masked_row";
    const auto& applies = convention_specs_for(op.name);
    if (std::none_of(applies.begin(), applies.end(), [&](const ConventionSpec* s) { return s->key == key; })) return {};
    References r = plain;
    oracle::apply_conventions(op.name, {{key, elementwise ? "ieee" : "nan"}}, p, in, r.rounded, r.exact);
    for (std::size_t o = 0; o < r.rounded.size(); ++o)
        for (std::int64_t i = 0; i < r.rounded[o].numel(); ++i)
            if (r.rounded[o].bits(i) != plain.rounded[o].bits(i)) return r.rounded;
    return {};
}

void add_alternatives(CaseEval& e, const KernelInfo& k, const OpSpec& op, const Params& p,
                      const std::vector<TensorView>& in, const std::vector<Format>& formats, const References& plain) {
    std::vector<Tensor> owned;
    std::vector<TensorView> flushed;
    if (flush_inputs(in, owned, flushed) && !op.staged) {
        References f = reference(k, op, p, flushed, flushed, formats);
        for (std::size_t o = 0; o < e.outputs.size(); ++o) e.outputs[o].ftz = std::move(f.rounded[o]);
    }
    std::vector<Tensor> ieee = ieee_references(op, oracle_params(k, p), in, plain);
    for (std::size_t o = 0; o < ieee.size() && o < e.outputs.size(); ++o) e.outputs[o].ieee = std::move(ieee[o]);
}

}  // namespace

std::string CaseEval::describe(std::size_t o, std::int64_t i) const {
    const OutputEval& out = outputs[o];
    const auto ix = static_cast<std::size_t>(i);
    if (op->kind == OpKind::structured || o > 0 || !inputs)
        return element_name(out.name, out.got.shape(), i) + ": got " + hexfloat(out.got.value(i)) + ", want " +
               hexfloat(out.ref.value(i)) + " (exact " + hexfloat(out.exact[ix]) + ")";
    std::vector<TensorView> views;
    for (const Tensor& t : *inputs) views.push_back(t.view());
    return describe_row_element(*op, views, i, out.format, out.got.bits(i), out.ref.bits(i), out.exact[ix]);
}

double judged_bound(const CaseEval& e, std::size_t o, std::size_t i) {
    const OutputEval& out = e.outputs.at(o);
    const double b = e.model_breach.empty() ? out.probabilistic.at(i) : out.rigorous.at(i);
    if (!std::isfinite(b) || b < 0 || !std::isfinite(out.exact.at(i)) || b >= out.scale.at(i)) return NAN;
    return b;
}

namespace {
thread_local bool t_skip_oracle = false;

std::string output_name(const OpSpec& op, std::size_t o) {
    return o < op.outputs.size() ? op.outputs[o] : "out" + std::to_string(o);
}

// The kernel's outputs as their own reference (OracleSkipScope).
CaseEval unjudged_case(const KernelInfo& k, const OpSpec& op, std::vector<Tensor> got) {
    CaseEval e;
    e.kernel = &k;
    e.op = &op;
    for (std::size_t o = 0; o < got.size(); ++o) {
        OutputEval out;
        out.name = output_name(op, o);
        out.format = output_format(k, o);
        out.ref = got[o];
        for (std::int64_t i = 0; i < got[o].numel(); ++i) out.exact.push_back(got[o].value(i));
        out.region.assign(out.exact.size(), Region::normal);
        out.got = std::move(got[o]);
        e.outputs.push_back(std::move(out));
    }
    e.first.rounded = e.outputs.at(0).ref;
    e.first.exact = e.outputs.at(0).exact;
    return e;
}
}  // namespace

OracleSkipScope::OracleSkipScope(bool skip) : prev_(t_skip_oracle) { t_skip_oracle = skip; }
OracleSkipScope::~OracleSkipScope() { t_skip_oracle = prev_; }

CaseEval evaluate_case(const KernelInfo& k, const Params& case_params, const std::vector<TensorView>& in, EvalOptions opt) {
    const OpSpec& op = *find_op(k.op);
    // A parameter the kernel's convention pins (rope_pairing) is the declared
    // value for the kernel and the oracle alike.
    Params p = case_params;
    if (const auto pin = pinned_param(k.op, k.conventions)) p.set(pin->first, pin->second);
    CaseEval e;
    e.kernel = &k;
    e.op = &op;
    std::vector<Tensor> got = run_kernel(k, p, in);
    if (t_skip_oracle) return unjudged_case(k, op, std::move(got));
    std::vector<Format> formats;
    for (std::size_t o = 0; o < got.size(); ++o) formats.push_back(output_format(k, o));
    // A staged op's references are its exact stages applied to the kernel's
    // own earlier outputs (OpSpec::staged): those follow the inputs.
    std::vector<TensorView> oracle_in = in;
    if (op.staged)
        for (const Tensor& t : got) oracle_in.push_back(t.view());
    References ref = reference(k, op, p, oracle_in, in, formats);
    const bool bounds = !opt.reference_only;
    // The model reads the weights under the kernel's formula conventions (top-left causal), as the bound does.
    if (bounds) e.model_breach = probabilistic_model_breach(op, oracle_params(k, p), in, k.acc);
    const bool model_holds = e.model_breach.empty();
    const Budget budget = budget_for(k);
    std::vector<std::vector<double>> rig, prob;
    if (bounds && op.kind == OpKind::structured) {
        // Bounds from the oracle's values under the declared formula
        // conventions (causal = top_left), before the row conventions
        // (masked_row = nan): those change only special rows, judged as classes.
        if (const oracle::StructuredBoundFn fn = oracle::find_structured_bound(op.name)) {
            both_tiers([&] { return fn(bound_params(k, p), oracle_in, ref.formula_exact, k.acc, formats); }, model_holds,
                       rig, prob);
        }
    } else if (bounds && !budget.arith.empty()) {
        rig.push_back(oracle::act_arith_bound(op.name, k.conventions, p, in, ref.exact[0], k.out));
        prob = rig;  // no accumulation: one tier
    } else if (bounds && budget.bound_based) {
        rig.emplace_back(), prob.emplace_back();
        for (std::int64_t r = 0; r < in[0].rows(); ++r) {
            std::vector<double> br, bp;
            const oracle::RowData row = row_data(in, ref.exact[0], r);
            both_tiers([&] { return oracle::row_bound(op, bound_params(k, p), row, k.acc, k.out); }, model_holds, br, bp);
            rig[0].insert(rig[0].end(), br.begin(), br.end());
            prob[0].insert(prob[0].end(), bp.begin(), bp.end());
        }
    }
    for (std::size_t o = 0; o < got.size(); ++o) {
        OutputEval out;
        out.name = output_name(op, o);
        out.format = formats[o];
        out.got = std::move(got[o]);
        out.ref = ref.rounded.at(o);
        out.exact = ref.exact.at(o);
        if (o < rig.size() && !rig[o].empty()) out.rigorous = rig[o], out.probabilistic = prob[o];
        out.ulp_or_bound = !budget.arith.empty();
        fill_regions(out, op, in);
        out.judged = std::find(k.unwritten.begin(), k.unwritten.end(), out.name) == k.unwritten.end();
        e.outputs.push_back(std::move(out));
    }
    e.first.rounded = ref.rounded.at(0);
    e.first.exact = ref.exact.at(0);
    e.first.max_bits = ref.max_bits;
    e.first.recomputed = ref.recomputed;
    e.notes = ref.notes;
    if (opt.alternatives) add_alternatives(e, k, op, p, in, formats, ref);
    // Descriptions read the inputs: keep copies, the caller's views may go.
    auto inputs = std::make_shared<std::vector<Tensor>>();
    for (const TensorView& v : in) {
        std::vector<std::int64_t> shape(v.shape.begin(), v.shape.begin() + v.rank);
        inputs->emplace_back(v.format, shape);
        for (std::int64_t i = 0; i < v.numel(); ++i) inputs->back().set_bits(i, v.bits(i));
    }
    e.inputs = std::move(inputs);
    return e;
}

}  // namespace conform::props

// ---- judging ---------------------------------------------------------------------

namespace conform::props {
namespace {

// The ulp distance of a finite result from the reference pattern; a
// reference that overflowed to an infinity counts from the largest finite
// value (one ulp beyond it).
std::uint64_t ulps_from(Format f, std::uint64_t ref, std::uint64_t got) {
    const ValueClass rc = classify(f, ref);
    if (rc == ValueClass::finite) return ulp_distance(f, ref, got);
    const std::uint64_t edge = encode(f, rc == ValueClass::pos_inf ? max_finite(f) : -max_finite(f));
    return ulp_distance(f, edge, got) + 1;
}

// Bound-free rank of a finite result against reference `ref` of exact value
// `exact`: cr, faithful (the other neighbour of exact), strict (elementwise:
// within 1 ulp), else ulp:N.
std::uint64_t free_rank(Format f, std::uint64_t ref, std::uint64_t got, double exact, std::uint64_t ulps, bool bounded) {
    if (ulps == 0) return kRankCr;
    if (ulps == 1 && std::isfinite(exact)) {
        const double r = decode(f, ref), g = decode(f, got);
        if ((r - exact) * (g - exact) < 0) return kRankFaithful;
    }
    if (!bounded) return ulp_rank(ulps);
    return kRankUlpBase + std::max<std::uint64_t>(ulps, 2);
}

// The rank of a result against an alternative reference (ftz, ieee): classes,
// then ulps; within 1 ulp counts as strict.
std::uint64_t alternative_rank(Format f, std::uint64_t alt, std::uint64_t got, bool flush_output) {
    if (flush_output && decode(f, got) == 0) return kRankCr;
    const UlpCompare c = compare_bits(f, alt, got);
    if (!c.class_match) return kRankNone;
    if (c.ref_class != ValueClass::finite) return kRankCr;
    return c.ulps == 0 ? kRankCr : ulp_rank(c.ulps);
}

int sign_of(double v) { return (v > 0) - (v < 0); }

// Attention's rows past FP32 (oracle/attention_bound.cpp, logits_may_overflow).
constexpr const char* kLogitOverflow = "an FP32 logit may overflow (sum |q k| scaled, or with the mask, past FP32's range)";

// Why an op's bound leaves an element undefined (oracle::kUndefined).

std::string undefined_reason(const OpSpec& op) {
    if (op.name == "matmul") return "sum |a b| reaches the accumulator's overflow threshold";
    if (op.name == "moe_router") return "FP32 logits may overflow, or the sigmoid leave FP32's normal range";
    if (op.name == "lightning_indexer")
        return "an FP32 dot product or head sum may overflow, or an infinite weight meets a dot of uncertain sign";
    if (op.name == "moe" || op.name == "latent_moe")
        return "a stage may overflow, RMSNorm(u)'s root is not determined, or the router is undefined";
    if (op.name == "attention" || op.name == "gated_attention" || op.name == "sink_attention")
        return kLogitOverflow;
    if (op.name == "dsa_attention")
        return std::string("the indexer's FP32 dot products or head sums may overflow: the row's selection is not "
                           "determined; or ") + kLogitOverflow;
    if (op.name == "block_sparse_attention")
        return "a block score's budget is undefined (a non-finite score, a stage that may overflow, RMSNorm's root not "
               "determined); o also needs the candidate's selection to be a valid one (not a NaN row); or " +
               std::string(kLogitOverflow);
    if (op.name == "mla") return "a stage may overflow, or a magnitude on the element's path is not finite";
    if (op.name == "compressed_attention")
        return std::string("the indexer's FP32 dot products or head sums may overflow: the selection is not determined; "
                           "or ") + kLogitOverflow;
    if (op.name == "nsa_attention") return "an FP32 logit, accumulator or the gated sum may overflow, or a branch's logits are too large to bound: the selection or a branch is not bounded";
    if (op.name == "block_attn_res") return "a stage may overflow, or a key's RMSNorm root is not determined";
    if (op.name == "gated_residual")
        return "a stage may overflow, a stream's RMSNorm root is not determined, or a non-finite weight meets the token";
    if (op.name == "swiglu" || op.name == "geglu")
        return "act_arith: the class lets the activation round to 0 against an infinite up (0 * inf)";
    return "0/0: eps = 0 on a constant row";
}

bool vacuous(double bound, double scale) { return !std::isfinite(bound) || (bound > 0 && bound >= kVacuousFactor * scale); }

std::string vacuous_reason(double bound) {
    return std::isfinite(bound) ? "bound at least the result's magnitude" : "infinite bound";
}

struct Element {
    std::uint64_t rank = kRankNone;  // tightest rung met (bounds included where not vacuous)
    std::uint64_t ulps = 0;
    bool finite = false;             // a finite exact value and result (utilization applies)
    bool bounded = false;
    double util_gate = 0, util_rig = 0;
    bool gate_vacuous = false, rig_vacuous = false;
    double gate_bound = 0, rig_bound = 0;
    std::string class_text;          // the mismatch, when classes differ
    bool undefined = false;          // the formula has no value here (oracle::kUndefined)
};

Element rank_element(const OutputEval& o, std::size_t i, bool model_holds) {
    Element el;
    const std::int64_t ii = static_cast<std::int64_t>(i);
    const std::uint64_t ref = o.ref.bits(ii), got = o.got.bits(ii);
    const double exact = o.exact[i], value = o.got.value(ii);
    const UlpCompare c = compare_bits(o.format, ref, got);
    el.bounded = o.bounded();
    el.finite = std::isfinite(exact) && std::isfinite(value);
    if (el.bounded && o.rigorous[i] == oracle::kUndefined) {
        el.undefined = true;
        return el;
    }
    if (el.bounded) {
        el.rig_bound = o.rigorous[i];
        el.gate_bound = model_holds ? o.probabilistic[i] : el.rig_bound;
        el.rig_vacuous = vacuous(el.rig_bound, o.scale[i]);
        el.gate_vacuous = vacuous(el.gate_bound, o.scale[i]);
    }
    // An infinity where the exact value is finite is the rounding of a value
    // past the overflow threshold (max + half an ulp: RNE's tie goes to Inf):
    // within the bound when the bound reaches that threshold on the same side,
    // judged by the least error it implies, threshold - |exact| (the mirror of
    // a finite result for a reference that overflowed).
    const double threshold = max_finite(o.format) + 0.5 * ulp_at(o.format, max_finite(o.format));
    const bool overflowed = el.bounded && std::isfinite(exact) && std::isinf(value) && (value > 0) == (exact > 0) &&
                            !el.rig_vacuous && std::fabs(exact) + el.rig_bound >= threshold;
    if (overflowed) el.finite = true;
    if (!c.class_match && !(el.bounded && el.finite)) {
        el.class_text = std::string("special-value class mismatch (want ") + name(c.ref_class) + ", got " +
                        name(c.got_class) + ")";
        return el;
    }
    if (c.class_match && c.ref_class != ValueClass::finite) {
        el.rank = kRankCr;
        return el;
    }
    el.ulps = c.class_match ? c.ulps : ulps_from(o.format, ref, got);
    el.rank = free_rank(o.format, ref, got, exact, el.ulps, el.bounded && !o.ulp_or_bound);
    if (!el.bounded || !el.finite) return el;
    const double err = overflowed ? threshold - std::fabs(exact) : std::fabs(value - exact);
    // A zero bound demands an exact result; an infinite one judges nothing.
    auto util = [err](double b) { return err == 0 ? 0.0 : err / b; };
    el.util_gate = util(el.gate_bound), el.util_rig = util(el.rig_bound);
    const bool within_gate = !el.gate_vacuous && el.util_gate <= 1;
    // A bound can be tighter than faithful rounding (a 16-bit output's is
    // half an ulp and a little more): faithful means within the bound too,
    // so that cr, faithful, strict, rigorous and ulp:N stay nested.
    if (el.rank == kRankFaithful && !within_gate && !o.ulp_or_bound) el.rank = kRankUlpBase + std::max<std::uint64_t>(el.ulps, 2);
    if (within_gate) el.rank = std::min(el.rank, kRankStrict);
    if (!el.rig_vacuous && el.util_rig <= 1) el.rank = std::min(el.rank, kRankRigorous);
    return el;
}

// The ranks with the alternatives: [plain, ftz, ieee, both].
std::array<std::uint64_t, 4> alternative_ranks(const OutputEval& o, std::size_t i, std::uint64_t plain) {
    std::array<std::uint64_t, 4> r{plain, plain, plain, plain};
    if (plain <= kRankStrict) return r;
    const auto ii = static_cast<std::int64_t>(i);
    const std::uint64_t got = o.got.bits(ii);
    const bool sub_ref = is_subnormal(o.format, o.ref.value(ii));
    std::uint64_t ftz = alternative_rank(o.format, o.ref.bits(ii), got, sub_ref);
    if (o.ftz) ftz = std::min(ftz, alternative_rank(o.format, o.ftz->bits(ii), got, is_subnormal(o.format, o.ftz->value(ii))));
    const std::uint64_t ieee = o.ieee ? alternative_rank(o.format, o.ieee->bits(ii), got, false) : kRankNone;
    r[1] = std::min(plain, ftz);
    r[2] = std::min(plain, ieee);
    r[3] = std::min(r[1], r[2]);
    return r;
}

std::uint64_t modified_rank(const std::array<std::uint64_t, 4>& r, const AccuracyProfile& p) {
    return r[(p.ftz ? 1 : 0) + (p.ieee ? 2 : 0)];
}

void record(Stats& s, const Element& el, const OutputEval& o, std::size_t i, const std::array<std::uint64_t, 4>& ranks,
            const std::function<std::string()>& what) {
    if (el.rank == kRankNone && el.class_text.size()) s.add_class_mismatch();
    else {
        const bool worst = el.ulps > s.max_ulp() || s.worst_ulp_case().empty();
        s.add_ulp(el.ulps);
        if (worst) s.set_worst_ulp(what());
    }
    s.add_rank(ranks, o.region[i], el.ulps);
    if (el.bounded && el.finite && !el.gate_vacuous) {
        const bool worst = el.util_gate > s.max_util() || s.worst_util_case().empty();
        s.add_util(el.util_gate, el.rig_vacuous ? el.util_gate : el.util_rig);
        if (worst) s.set_worst_util(what());
    }
}

// A result one ulp from the correctly rounded one whose exact value lies
// within 1/16 ulp of the midpoint between them: a kernel that evaluates in
// higher precision misrounds only there, and the direction is then decided
// by the sign of its internal error, which a deterministic formula may keep
// (1 + e^-x rounding to 1 for large x makes every such miss lie away from
// zero).  Such misses say nothing about the rounding mode and cast no vote;
// a truncating kernel's misses lie anywhere in the upper half of the
// interval and 7 in 8 of them still vote.
// 4 significant digits: "0.9375", "1.531", "3.444e+41".
std::string short_number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
}

bool misrounded_at_a_tie(const OutputEval& out, std::int64_t i) {
    if (ulp_distance(out.format, out.got.bits(i), out.ref.bits(i)) != 1) return false;
    const double got = out.got.value(i), ref = out.ref.value(i);
    constexpr double kTieZone = 1.0 / 16;  // of the ulp between them
    return std::fabs(out.exact[static_cast<std::size_t>(i)] - (got + ref) / 2) < kTieZone * std::fabs(got - ref);
}

}  // namespace

CaseResult judge_case(const CaseEval& e, const AccuracyProfile& profile, Stats* stats) {
    CaseResult res;
    if (stats)
        for (const auto& [why, n] : e.notes) stats->add_note(why, n);
    const bool model_holds = e.model_breach.empty();
    // Independent units of the direction votes: elements of an elementwise
    // op, the whole case otherwise: a recurrent state or a shared normalizer
    // carries one error into many rows, and so do a row op's rows when they
    // repeat or their normalizer is the same number (eps dominating tiny
    // rows: every row's 1 / sqrt(eps) rounds alike) — row votes made a
    // correct FP32 l2_norm fail at seed 1388740742 (docs/numerics.md).
    const bool elementwise = e.op->kind == OpKind::unary || e.op->kind == OpKind::gated;
    double above = 0, away = 0;  // the current unit's summed directions
    double case_util = 0;        // the case's worst gating utilization
    double finite_judged = 0, misrounded = 0;  // finite results judged, and those not correctly rounded
    auto vote = [&] {
        if (stats) stats->add_direction_vote(sign_of(above), sign_of(away));
        above = away = 0;
    };
    for (std::size_t o = 0; o < e.outputs.size(); ++o) {
        const OutputEval& out = e.outputs[o];
        if (!out.judged) continue;
        for (std::size_t i = 0; i < out.exact.size(); ++i) {
            if (elementwise && i > 0) vote();
            const Element el = rank_element(out, i, model_holds);
            if (el.undefined) {
                ++res.not_judged;
                if (stats) stats->add_not_judged(out.name + ": undefined (" + undefined_reason(*e.op) + ")");
                continue;
            }
            const std::array<std::uint64_t, 4> ranks = alternative_ranks(out, i, el.rank);
            const std::uint64_t rank = modified_rank(ranks, profile);
            std::string why;
            bool judged = true;
            if (rank > profile.rank) {
                // Bound-based outputs: the profile's bound decides, unless vacuous.
                const bool gate = profile.rank == kRankStrict;
                const bool uses_bound = el.bounded && profile.rank >= kRankStrict && (el.finite || el.class_text.empty());
                const bool vac = gate ? el.gate_vacuous : el.rig_vacuous;
                const double bound = gate ? el.gate_bound : el.rig_bound;
                if (el.bounded && !std::isfinite(bound) && std::isfinite(out.exact[i]) && profile.rank >= kRankStrict) {
                    judged = false, why = "infinite bound";
                } else if (uses_bound && vac &&
                           !(out.ulp_or_bound && el.finite && (gate ? el.util_gate : el.util_rig) > 1)) {
                    // A class's bound that reaches |y| cannot show a result
                    // accurate, but still shows one outside the class.
                    judged = false, why = vacuous_reason(bound);
                } else if (!el.class_text.empty() && rank == kRankNone) {
                    why = el.class_text;
                } else if (el.bounded && el.finite && profile.rank >= kRankStrict) {
                    const double util = gate ? el.util_gate : el.util_rig;
                    why = "error " + hexfloat(std::fabs(out.got.value(static_cast<std::int64_t>(i)) - out.exact[i])) +
                          " exceeds the " + (out.ulp_or_bound ? "class" : gate && model_holds ? "probabilistic" : "rigorous") + " bound " +
                          hexfloat(bound) + " (utilization " + short_number(util) + ")";
                } else {
                    why = std::to_string(el.ulps) + " ulp exceeds the budget of " + rank_text(profile.rank) +
                          " (element meets " + rank_text(rank) + ")";
                }
            }
            if (!judged) {
                ++res.not_judged;
                if (stats) stats->add_not_judged(out.name + ": " + why);
                continue;
            }
            ++res.judged;
            if (el.bounded && el.finite && !el.gate_vacuous) case_util = std::max(case_util, el.util_gate);
            if (el.finite) ++finite_judged, misrounded += el.ulps > 0;
            if (stats) {
                record(*stats, el, out, i, ranks, [&] { return e.describe(o, static_cast<std::int64_t>(i)); });
                const auto ii = static_cast<std::int64_t>(i);
                const bool random_position = out.region[i] == Region::normal || out.region[i] == Region::tail;
                // By value: -0 for +0 is no misrounding (the two compare equal) and votes nothing.
                if (model_holds && el.finite && random_position && out.got.value(ii) != out.ref.value(ii) &&
                    !misrounded_at_a_tie(out, ii)) {
                    above += out.got.value(ii) > out.ref.value(ii) ? 1 : -1;
                    away += std::fabs(out.got.value(ii)) > std::fabs(out.ref.value(ii)) ? 1 : -1;
                }
            }
            if (!why.empty() && res.pass) {
                res.pass = false;
                res.message = why + ": " + e.describe(o, static_cast<std::int64_t>(i));
                res.failed_output = o;
                res.failed_element = static_cast<std::int64_t>(i);
            }
        }
        if (elementwise) vote();
    }
    if (above != 0 || away != 0) vote();
    // One entry per case, NaN when it has none: error profiles pair cases by position.
    if (stats) {
        stats->add_case_log_util(case_util > 0 ? std::log(case_util) : std::nan(""));
        stats->add_case_misrounded(finite_judged > 0 ? misrounded / finite_judged : std::nan(""));
    }
    if (res.judged == 0 && res.pass && res.not_judged > 0)
        res.message = "not judged: every element's bound is vacuous (" + std::to_string(res.not_judged) + " elements)";
    res.ref = e.first;
    for (const OutputEval& out : e.outputs) {
        res.outputs.push_back(out.got);
        res.all_ref.push_back(out.ref);
    }
    return res;
}

CaseResult check_case(const KernelInfo& k, const Params& p, const std::vector<TensorView>& in, Stats* stats) {
    const AccuracyProfile profile = profile_for(k);
    EvalOptions opt;
    opt.alternatives = stats != nullptr || profile.ftz || profile.ieee;
    return judge_case(evaluate_case(k, p, in, opt), profile, stats);
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
