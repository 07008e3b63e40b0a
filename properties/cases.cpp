#include "properties/cases.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include <rapidcheck.h>

#include "numerics/ulp.hpp"
#include "properties/verdict.hpp"

namespace conform::props {
namespace {

// Whether input i of the call is given: an optional input may be left out
// or passed as an empty view (attention's mask, the delta rule's state).
bool given(const OpSpec& op, const std::vector<TensorView>& in, std::size_t i) {
    return i < in.size() && !(optional_input(op.inputs[i]) && in[i].numel() == 0);
}

void mix(std::uint64_t& h, std::uint64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
}

std::uint64_t double_bits(double d) {
    std::uint64_t u;
    std::memcpy(&u, &d, sizeof u);
    return u;
}

std::uint64_t call_hash(const OpSpec& op, const Params& p, const std::vector<TensorView>& in) {
    std::uint64_t h = 1469598103934665603ull;
    for (const auto& [name, value] : p.values()) mix(h, double_bits(value));
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        if (!given(op, in, i)) {
            mix(h, ~0ull);
            continue;
        }
        mix(h, static_cast<std::uint64_t>(in[i].format));
        for (int d = 0; d < in[i].rank; ++d) mix(h, static_cast<std::uint64_t>(in[i].shape[d]));
        for (std::int64_t e = 0; e < in[i].numel(); ++e) mix(h, in[i].bits(e));
    }
    return h;
}

bool same_call(const OpSpec& op, const CallCase& c, const Params& p, const std::vector<TensorView>& in) {
    if (c.params.values() != p.values()) return false;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        if (given(op, in, i) != c.present[i]) return false;
        if (!c.present[i]) continue;
        const TensorView a = c.inputs[i].view(), &b = in[i];
        if (a.format != b.format || a.rank != b.rank) return false;
        for (int d = 0; d < a.rank; ++d)
            if (a.shape[d] != b.shape[d]) return false;
        for (std::int64_t e = 0; e < a.numel(); ++e)
            if (a.bits(e) != b.bits(e)) return false;
    }
    return true;
}

Tensor copy_of(const TensorView& v) {
    Tensor t(v.format, std::vector<std::int64_t>(v.shape.begin(), v.shape.begin() + v.rank));
    for (std::int64_t e = 0; e < v.numel(); ++e) t.set_bits(e, v.bits(e));
    return t;
}

}  // namespace

Params op_params(const OpSpec& op, const Params& p) {
    Params out;
    for (const ParamSpec& s : op.params) out.set(s.name, p.get(s.name, s.default_value));
    return out;
}

void CaseBook::begin_group(const std::string& property, bool single_call) {
    if (!groups_.empty() && groups_.back().members.empty()) groups_.pop_back();
    groups_.push_back({property, {}});
    single_call_ = single_call;
}

std::vector<CaseGroup> CaseBook::take_groups() {
    std::vector<CaseGroup> out;
    for (CaseGroup& g : groups_)
        if (!g.members.empty()) out.push_back(std::move(g));
    groups_.clear();
    return out;
}

std::optional<std::size_t> CaseBook::find(const Params& p0, const std::vector<TensorView>& in) const {
    const Params p = op_params(*op_, p0);
    const auto [lo, hi] = index_.equal_range(call_hash(*op_, p, in));
    for (auto it = lo; it != hi; ++it)
        if (same_call(*op_, cases_[it->second], p, in)) return it->second;
    return std::nullopt;
}

std::size_t CaseBook::add(CallCase c) {
    std::vector<TensorView> views;
    for (std::size_t i = 0; i < c.inputs.size(); ++i)
        views.push_back(c.present[i] ? c.inputs[i].view() : TensorView::contiguous(nullptr, Format::fp32, {0}));
    index_.emplace(call_hash(*op_, c.params, views), cases_.size());
    cases_.push_back(std::move(c));
    return cases_.size() - 1;
}

std::optional<std::size_t> CaseBook::on_call(const Params& p, const std::vector<TensorView>& in,
                                             const std::vector<TensorView>& out) {
    if (single_call_ && !groups_.empty() && !groups_.back().members.empty()) {
        if (mode_ == Mode::replay)
            throw std::runtime_error(std::string("a smallest failing slice: ") + kNotAmongTheCases);
        return std::nullopt;  // not recorded, not a miss
    }
    std::optional<std::size_t> at = find(p, in);
    if (!at && mode_ == Mode::record) {
        CallCase c;
        c.params = op_params(*op_, p);
        for (std::size_t i = 0; i < op_->inputs.size(); ++i) {
            c.present.push_back(given(*op_, in, i));
            c.inputs.push_back(c.present.back() ? copy_of(in[i]) : Tensor(Format::fp32, {0}));
        }
        for (const TensorView& o : out) {
            c.out_formats.push_back(o.format);
            c.out_shapes.emplace_back(o.shape.begin(), o.shape.begin() + o.rank);
        }
        c.property = groups_.empty() ? "" : groups_.back().property;
        at = add(std::move(c));
    }
    if (!at) {
        ++misses_;
        if (mode_ == Mode::replay)
            throw std::runtime_error(std::string("the property asked for ") + kNotAmongTheCases +
                                     " (the sequence of cases diverged from the one conform cases recorded)");
        return std::nullopt;
    }
    if (!groups_.empty()) groups_.back().members.push_back(*at);
    return at;
}

KernelInfo recording_kernel(const KernelInfo& base, std::shared_ptr<CaseBook> book, bool perturb) {
    KernelInfo k = base;
    k.launches.clear();
    k.fn = [fn = base.fn, book, perturb, declared = base](const KernelCall& call) {
        fn(call);
        if (!declared.conventions.empty()) {
            const OracleSkipScope judged(false);  // the declared reference, really
            const CaseResult r = check_case(declared, call.params, call.in);
            if (!r.pass)
                for (std::size_t o = 0; o < call.out.size(); ++o) {
                    const Tensor& ref = r.all_ref.empty() ? r.ref.rounded : r.all_ref.at(o);
                    for (std::int64_t e = 0; e < ref.numel(); ++e) call.out[o].set_bits(e, ref.bits(e));
                }
        }
        book->on_call(call.params, call.in, call.out);
        if (!perturb) return;
        for (const TensorView& o : call.out)
            for (std::int64_t e = 0; e < o.numel(); ++e)
                if (std::isfinite(o.value(e)) && o.value(e) != 0) o.set_bits(e, o.bits(e) ^ 1u);
    };
    return k;
}

KernelInfo replaying_kernel(const KernelInfo& description, std::shared_ptr<CaseBook> book, Answer answer) {
    KernelInfo k = description;
    k.launches.clear();
    k.fn = [book, answer = std::move(answer)](const KernelCall& call) {
        const std::optional<std::size_t> at = book->on_call(call.params, call.in, call.out);
        answer(*at, call);
    };
    return k;
}

PropertyDef grouped_property(const PropertyDef& p, std::shared_ptr<CaseBook> book, bool keep_going) {
    PropertyDef g = p;
    g.make = [make = p.make, name = p.name, book, keep_going](const KernelInfo& k, const RunConfig& cfg,
                                                                Stats* stats) -> Testable {
        Testable t = make(k, cfg, stats);
        const bool single_call = name == "within_budget" || name == "special_values";
        return [t, name, book, keep_going, single_call] {
            book->begin_group(name, single_call);
            if (!keep_going) return t();
            try {
                t();
            } catch (const rc::detail::CaseResult& r) {
                if (r.type != rc::detail::CaseResult::Type::Failure) throw;  // discards stay discards
            } catch (const rc::GenerationFailure&) {
                throw;
            } catch (const std::exception&) {
                // the built-in kernel refused or failed: the case counts as passed
            }
        };
    };
    return g;
}

Coverage coverage_for(const KernelInfo& k) {
    Coverage c;
    const OpSpec& op = *find_op(k.op);
    for (const PropertyDef* p : properties_for(op)) {
        if (runs_for(*p, k)) c.run.push_back(p);
        else c.not_covered.emplace_back(p->name, "its own predicate leaves this kernel out (" + p->doc + ")");
    }
    if (op.name == "rope") c.not_covered.emplace_back("rope_invariance_curve", "a measured curve, not a property of cases");
    if (op.name == "sinkhorn")
        c.not_covered.emplace_back("depth_amplification_curve", "a measured curve, not a property of cases");
    return c;
}

}  // namespace conform::props
