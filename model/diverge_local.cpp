#include "model/diverge_local.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>

#include "model/metrics.hpp"
#include "model/moe_steps.hpp"

namespace conform::model {

// ---- DumpValues -----------------------------------------------------------------


namespace {

// Whether a weight or cache serves one of the layers of `graph`: a layer
// range converts only its own layers' weights (and the model-level ones).
bool weight_serves(const std::string& weight, const std::set<std::int64_t>& layers) {
    if (weight.rfind("layers.", 0) != 0) return true;
    const std::size_t dot = weight.find('.', 7);
    try {
        return layers.count(std::stoll(weight.substr(7, dot - 7))) > 0;
    } catch (const std::exception&) {
        return true;
    }
}

}  // namespace

DumpValues::DumpValues(const ModelContract& c, const std::vector<Step>& graph, const ModelRun& run) : run_(run) {
    std::set<std::int64_t> layers;
    for (const Step& s : graph) layers.insert(s.layer);
    for (const auto& [name, t] : run.weights)
        if (weight_serves(name, layers)) weights_.emplace(name, values_of(t.view()));
    input_ = values_of(run.input.view());
    for (std::size_t i = 0; i < graph.size(); ++i) {
        last_use_[graph[i].point] = i;
        for (const std::string& in : graph[i].inputs) last_use_[in] = i;
    }
}

bool DumpValues::has(const std::string& name) const {
    return name == "input" || run_.points.count(name) || run_.weights.count(name);
}

const Tensor* DumpValues::point(const std::string& name) const {
    const auto it = run_.points.find(name);
    return it == run_.points.end() ? nullptr : &it->second;
}

const Values& DumpValues::get(const std::string& name) {
    if (name == "input") return input_;
    if (const auto w = weights_.find(name); w != weights_.end()) return w->second;
    if (const auto p = points_.find(name); p != points_.end()) return p->second;
    const Tensor* t = point(name);
    if (!t) throw std::invalid_argument("no tensor named '" + name + "' in " + run_.source);
    return points_.emplace(name, values_of(t->view())).first->second;
}

void DumpValues::release_after(std::size_t step) {
    for (auto it = points_.begin(); it != points_.end();) {
        const auto last = last_use_.find(it->first);
        it = (last == last_use_.end() || last->second <= step) ? points_.erase(it) : std::next(it);
    }
}

// ---- one step -----------------------------------------------------------------

namespace {

std::vector<double> allowed_of(const StepBound& b) {
    std::vector<double> a(b.budget.size());
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = b.budget[i] + b.oracle[i];
    return a;
}

bool any_special(const Values& v) {
    return std::any_of(v.v.begin(), v.v.end(), [](double x) { return !std::isfinite(x); });
}

Lookup lookup(DumpValues& dump) {
    return [&dump](const std::string& n) -> const Values& { return dump.get(n); };
}

}  // namespace

LocalResult judge_local(const ModelContract& c, const Step& s, DumpValues& dump) {
    LocalResult lr;
    for (const std::string& in : s.inputs)
        if (!dump.has(in)) lr.missing.push_back(in);
    const Tensor* t = dump.point(s.point);
    lr.present = t != nullptr;
    if (!lr.present || !lr.missing.empty()) return lr;
    lr.cand = dump.get(s.point);
    lr.format = t->format();
    const Lookup get = lookup(dump);
    if (s.kind == StepKind::router) {  // ambiguity-aware: the candidate's selection where the budget admits it
        RouterCounts counts;
        lr.ref = eval_router_step(op_call(c, s, get, c.conventions), &lr.cand, &counts);
        lr.note = counts.note();
    } else {
        lr.ref = eval_step(c, s, get, c.conventions);
    }
    const StepBound b = step_bound(c, s, get, lr.ref, c.conventions, lr.format);
    lr.allowed = allowed_of(b);
    const bool inherited = std::any_of(s.inputs.begin(), s.inputs.end(), [&](const std::string& n) { return any_special(dump.get(n)); });
    lr.local = compare(lr.cand.v, lr.ref.v, lr.allowed, lr.format, inherited);
    lr.oracle_ratio = b.ratio();
    return lr;
}

// ---- conventions ----------------------------------------------------------------

std::vector<std::string> conventions_of(const ModelContract& c, StepKind k) {
    switch (k) {
        case StepKind::norm:
        case StepKind::head_norm: return {"eps_placement", "norm_cast"};
        // rope_arith, attention_probs, router_arith: the model's own format's
        // arithmetic (attention_probs and router_arith only narrower than fp32).
        case StepKind::rope: return {"rope_pairing", "rope_arith"};
        case StepKind::mla: return {"rope_pairing"};
        case StepKind::router: return c.dtype != Format::fp32 ? std::vector<std::string>{"router_arith"} : std::vector<std::string>{};
        // Only the logits read lm_head.weight; on any other matmul the alternative is the same step.
        case StepKind::matmul:
            return c.logits && !c.tied_embeddings ? std::vector<std::string>{"lm_head"} : std::vector<std::string>{};
        case StepKind::glu:
            return c.mlp == MlpKind::geglu ? std::vector<std::string>{"gate_order", "gelu"} : std::vector<std::string>{"gate_order"};
        case StepKind::gelu: return {"gelu"};
        case StepKind::short_conv: return {"conv_padding"};
        case StepKind::softcap: return {"logit_softcap"};
        // Without cached keys (Lq = Lk) both alignments are the same mask.
        case StepKind::attention: {
            std::vector<std::string> v;
            if (c.cache_tokens > 0) v.push_back("causal");
            if (c.window > 0) v.push_back("window_keys");
            if (c.dtype != Format::fp32) v.push_back("attention_probs");
            return v;
        }
        default: return {};
    }
}

void try_conventions(const ModelContract& c, const Step& s, DumpValues& dump, const LocalResult& lr, PointReport& r) {
    const Lookup get = lookup(dump);
    double best = 1;
    for (const std::string& key : conventions_of(c, s.kind)) {
        for (const std::string& value : convention_values().at(key)) {
            if (value == c.conventions.at(key)) continue;
            Conventions conv = c.conventions;
            conv[key] = value;
            const Values ref = eval_step(c, s, get, conv);
            const StepBound b = step_bound(c, s, get, ref, conv, lr.format);
            const double util = compare(lr.cand.v, ref.v, allowed_of(b), lr.format).utilization;
            char text[64];
            std::snprintf(text, sizeof text, ": utilization %.3g", util);
            r.conventions_tried.push_back(key + "=" + value + text);
            if (util <= best) best = util, r.convention_match = key + "=" + value;
        }
    }
}

// ---- input checks -------------------------------------------------------------

namespace {

void check_shape(const std::string& what, const std::vector<std::int64_t>& got, const std::vector<std::int64_t>& want) {
    if (got != want)
        throw std::invalid_argument(what + ": shape " + shape_string(got) + ", the contract expects " + shape_string(want));
}

}  // namespace

void check_run(const ModelContract& c, const std::vector<Step>& graph, const ModelRun& run) {
    validate(c);
    for (const WeightSpec& w : weight_specs(c)) {
        const auto it = run.weights.find(w.name);
        if (it == run.weights.end()) throw std::invalid_argument("weight '" + w.name + "': missing");
        check_shape("weight '" + w.name + "'", it->second.shape(), w.shape);
    }
    if (!c.logits) {
        check_shape("input", run.input.shape(), {c.tokens, c.width});
    } else {
        check_shape("input (token ids)", run.input.shape(), {c.tokens});
        for (std::int64_t t = 0; t < c.tokens; ++t)
            if (const double id = run.input.value(t); !(id >= 0 && id < static_cast<double>(c.vocab) && id == std::floor(id)))
                throw std::invalid_argument("input: token id " + std::to_string(id) + " at position " + std::to_string(t) +
                                            " is not an integer in [0, vocab = " + std::to_string(c.vocab) + ")");
    }
    for (const Step& s : graph)
        if (const auto it = run.points.find(s.point); it != run.points.end())
            check_shape("point '" + s.point + "'", it->second.shape(), point_shape(c, s));
}

}  // namespace conform::model
