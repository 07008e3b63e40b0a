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

TokenSample token_sample(const ModelContract& c, const std::vector<Step>& graph, std::int64_t tokens) {
    const std::int64_t T = c.tokens;
    TokenSample all{true, {}, T};
    if (tokens == 0) tokens = T <= 256 ? T + 1 : 128;  // T + 1: every token by the whole-point path
    if (tokens > T) return all;
    for (const Step& s : graph)  // rows of every point must be tokens
        if (s.shape.size() != 2 || s.shape[0] != T) return all;
    TokenSample t;
    t.all = false;
    if (tokens >= T) {
        for (std::int64_t r = 0; r < T; ++r) t.rows.push_back(r);
        t.prefix = T;
        return t;
    }
    t.prefix = std::max<std::int64_t>(1, tokens / 2);
    for (std::int64_t r = 0; r < t.prefix; ++r) t.rows.push_back(r);
    // One token per stratum of the rest, at a fixed pseudo-random place
    // (splitmix64 of the stratum), the last stratum's last token included.
    const std::int64_t m = tokens - t.prefix, rest = T - t.prefix;
    for (std::int64_t k = 0; k < m; ++k) {
        const std::int64_t lo = t.prefix + rest * k / m, hi = t.prefix + rest * (k + 1) / m;
        std::uint64_t x = static_cast<std::uint64_t>(k) + 0x9e3779b97f4a7c15ULL;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        x ^= x >> 31;
        const std::int64_t r = k + 1 == m ? hi - 1 : lo + static_cast<std::int64_t>(x % static_cast<std::uint64_t>(hi - lo));
        if (hi > lo && r > t.rows.back()) t.rows.push_back(r);
    }
    return t;
}

DumpValues::DumpValues(const std::vector<Step>& graph, const ModelRun& run, int consumers)
    : run_(run), last_use_(last_uses(graph)), feed_(consumers > 1) {}

bool DumpValues::has(const std::string& name) const {
    return name == "input" || run_.points.count(name) || run_.weights.count(name);
}

const Tensor* DumpValues::point(const std::string& name) const {
    const auto it = run_.points.find(name);
    return it == run_.points.end() ? nullptr : &it->second;
}

const Tensor& DumpValues::stored(const std::string& name) const {
    if (name == "input") return run_.input;
    if (const Tensor* t = point(name)) return *t;
    throw std::invalid_argument("no point named '" + name + "' in " + run_.source);
}

const Values& DumpValues::weight(const std::string& name, bool feed) {
    std::lock_guard lock(m_);
    if (const auto w = weights_.find(name); w != weights_.end()) return w->second;
    const auto t = run_.weights.find(name);
    if (t == run_.weights.end()) throw std::invalid_argument("no weight or cache named '" + name + "' in " + run_.source);
    // A weight read after its last use by the graph (a convention tried at
    // the logits reads the embedding) is kept to the end: released as soon
    // as the other thread passes it, it would dangle while this one reads it.
    // (A thread's progress is past every step before the one it is on.)
    const auto last = last_use_.find(name);
    if (last == last_use_.end() || static_cast<std::int64_t>(last->second) <= (feed ? feed_past_ : local_past_))
        pinned_.insert(name);
    // A released weight's buffer of the same size is reused: the layers of a
    // stack repeat their shapes, so only the first layer's weights take fresh
    // pages (the kernel zeroing them was a third of the time at width 4096).
    std::vector<double> buffer;
    if (auto p = pool_.find(static_cast<std::size_t>(t->second.numel())); p != pool_.end() && !p->second.empty()) {
        buffer = std::move(p->second.back());
        p->second.pop_back();
    }
    // std::map: a reference stays valid while other entries come and go.
    return weights_.emplace(name, values_of(t->second.view(), std::move(buffer))).first->second;
}

const Values& DumpValues::get(const std::string& name) {
    if (is_weight(name)) return weight(name);
    if (const auto p = points_.find(name); p != points_.end()) return p->second;
    return points_.emplace(name, values_of(stored(name).view())).first->second;
}

Values DumpValues::rows(const std::string& name, const std::vector<std::int64_t>& rows) const {
    const TensorView v = stored(name).view();
    const std::int64_t width = v.shape[0] > 0 ? v.numel() / v.shape[0] : 0;
    Values out;
    out.shape.assign(v.shape.begin(), v.shape.begin() + v.rank);
    out.shape[0] = static_cast<std::int64_t>(rows.size());
    out.v.reserve(rows.size() * static_cast<std::size_t>(width));
    const auto bytes = static_cast<std::size_t>(info(v.format).bytes);
    for (std::int64_t r : rows) {  // a stored point is dense: each row a dense view, widened by values_of's fast paths
        const Values row = values_of(TensorView::contiguous(static_cast<char*>(v.data) + static_cast<std::size_t>(r * width) * bytes,
                                                            v.format, {width}));
        out.v.insert(out.v.end(), row.v.begin(), row.v.end());
    }
    return out;
}

Values DumpValues::first_rows(const std::string& name, std::int64_t n) const {
    std::vector<std::int64_t> r(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) r[static_cast<std::size_t>(i)] = i;
    return rows(name, r);
}

void DumpValues::release_weights() {
    const std::int64_t past = feed_ ? std::min(local_past_, feed_past_) : local_past_;
    for (auto it = weights_.begin(); it != weights_.end();) {
        const auto last = last_use_.find(it->first);
        if (pinned_.count(it->first) || (last != last_use_.end() && static_cast<std::int64_t>(last->second) > past)) {
            ++it;
            continue;
        }
        run_.weights.at(it->first).release_pages();
        pool_[it->second.v.size()].push_back(std::move(it->second.v));
        it = weights_.erase(it);
    }
}

void DumpValues::release_after(std::size_t step) {
    for (auto it = points_.begin(); it != points_.end();) {
        const auto last = last_use_.find(it->first);
        const bool done = last == last_use_.end() || last->second <= step;
        if (done && it->first != "input") run_.points.at(it->first).release_pages();
        it = done ? points_.erase(it) : std::next(it);
    }
    std::lock_guard lock(m_);
    local_past_ = static_cast<std::int64_t>(step);
    release_weights();
}

void DumpValues::feed_past(std::size_t step) {
    std::lock_guard lock(m_);
    feed_past_ = static_cast<std::int64_t>(step);
    release_weights();
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

// Steps whose row t reads only row t of each input point: judged on the
// sample's rows as a model of that many tokens.
bool row_separable(StepKind k) {
    switch (k) {
        case StepKind::norm: case StepKind::head_norm: case StepKind::l2_head: case StepKind::matmul:
        case StepKind::sigmoid: case StepKind::log_decay: case StepKind::mul: case StepKind::glu:
        case StepKind::gelu: case StepKind::add: case StepKind::embed: case StepKind::router:
        case StepKind::moe: case StepKind::latent_out: case StepKind::bounded_decay: case StepKind::softplus_decay:
        case StepKind::int8_matmul: case StepKind::softcap: return true;
        default: return false;
    }
}

// One local problem: the step restated over some rows of the dump (a
// contract of that many tokens), or the step itself over the whole dump.
struct Piece {
    ModelContract c;
    Step s;
    std::vector<std::int64_t> out;                // the point's rows it computes (empty: whole)
    std::vector<std::vector<std::int64_t>> in;    // rows of each input (per s.inputs)
};

// The pieces of a sampled step: one for a row-separable step; for causal
// attention without cached keys, the prefix as the causal problem of its
// tokens and the later rows as queries at their own positions; for RoPE,
// the prefix and each later row at its own position (the offset P + t);
// none when the step must be judged whole.
std::vector<Piece> pieces(const ModelContract& c, const Step& s, const TokenSample& sample) {
    if (sample.all) return {};
    const auto restated = [&](std::vector<std::int64_t> rows, std::int64_t offset) {
        Piece p{c, s, std::move(rows), {}};
        p.c.tokens = static_cast<std::int64_t>(p.out.size());
        p.c.cache_tokens = offset;
        p.s.shape[0] = p.c.tokens;
        p.in.assign(s.inputs.size(), p.out);
        return p;
    };
    // A product of a cache's rows (MLA's kv_b_cache, [P, ...]) is no row of tokens: judged whole.
    if (s.inputs.empty() || s.inputs[0].find(".cache.") != std::string::npos) return {};
    if (row_separable(s.kind)) return {restated(sample.rows, c.cache_tokens)};
    const bool attention = s.kind == StepKind::attention && c.cache_tokens == 0;
    if (!attention && s.kind != StepKind::rope) return {};
    const auto split = sample.rows.begin() + static_cast<std::ptrdiff_t>(sample.prefix);
    std::vector<Piece> out{restated({sample.rows.begin(), split}, c.cache_tokens)};
    if (split == sample.rows.end()) return out;
    if (!attention) {  // RoPE: each later row at its own position
        for (auto it = split; it != sample.rows.end(); ++it) out.push_back(restated({*it}, c.cache_tokens + *it));
        return out;
    }
    // Attention: the later rows as queries at their own positions over the
    // keys 0 .. the last of them (an explicit mask: what bottom-right
    // alignment and the window show each of them in the whole sequence).
    Piece p = restated({split, sample.rows.end()}, 0);
    p.c.query_positions = p.out;
    std::vector<std::int64_t> keys(static_cast<std::size_t>(p.out.back() + 1));
    for (std::size_t j = 0; j < keys.size(); ++j) keys[j] = static_cast<std::int64_t>(j);
    p.in.assign(s.inputs.size(), keys);  // k, v (MLA: kv_b, k_rope)
    p.in[0] = p.out;                      // q
    if (is_mla_split_attention(c, s)) p.in[1] = p.out;  // MLA: q_rope
    out.push_back(std::move(p));
    return out;
}

// The reference and allowance of one piece (or of the whole step).
struct Evaluated {
    Values ref;
    std::vector<double> allowed;
    double ratio = 0;
    bool inherited = false;  // an input holds NaN or Inf
};

Evaluated evaluate(const ModelContract& c, const Step& s, const Lookup& get, const Conventions& conv, Format f,
                   const Values* cand, RouterCounts* counts) {
    Evaluated e;
    if (s.kind == StepKind::router && cand)  // ambiguity-aware: the candidate's selection where the budget admits it
        e.ref = eval_router_step(op_call(c, s, get, conv), cand, counts);
    else
        e.ref = eval_step(c, s, get, conv);
    const StepBound b = step_bound(c, s, get, e.ref, conv, f);
    e.allowed = allowed_of(b);
    e.ratio = b.ratio();
    e.inherited = std::any_of(s.inputs.begin(), s.inputs.end(), [&](const std::string& n) { return any_special(get(n)); });
    return e;
}

Evaluated evaluate_piece(const Piece& p, DumpValues& dump, const Conventions& conv, Format f, const Values& cand,
                         RouterCounts* counts) {
    std::map<std::string, Values> held;  // the inputs' rows
    for (std::size_t i = 0; i < p.s.inputs.size(); ++i)
        if (!dump.is_weight(p.s.inputs[i])) held.emplace(p.s.inputs[i], dump.rows(p.s.inputs[i], p.in[i]));
    const Lookup get = [&](const std::string& n) -> const Values& {
        const auto it = held.find(n);
        return it != held.end() ? it->second : dump.get(n);
    };
    return evaluate(p.c, p.s, get, conv, f, &cand, counts);
}

// The step on every token (no pieces), or on the sample's rows (the pieces
// concatenated in row order); `cand`: the candidate's values of the same rows.
Evaluated evaluate_sampled(const ModelContract& c, const Step& s, DumpValues& dump, const std::vector<Piece>& ps,
                           const Conventions& conv, Format f, const Values& cand, RouterCounts* counts) {
    if (ps.empty()) {
        const Lookup get = [&dump](const std::string& n) -> const Values& { return dump.get(n); };
        return evaluate(c, s, get, conv, f, &cand, counts);
    }
    Evaluated all;
    all.ref.shape = cand.shape;
    const std::size_t width = cand.shape.empty() || cand.shape[0] == 0 ? 0 : cand.v.size() / static_cast<std::size_t>(cand.shape[0]);
    std::size_t row = 0;
    for (const Piece& p : ps) {
        const std::size_t n = p.out.size() * width;
        Values part;
        part.shape = {static_cast<std::int64_t>(p.out.size()), static_cast<std::int64_t>(width)};
        part.v.assign(cand.v.begin() + static_cast<std::ptrdiff_t>(row * width), cand.v.begin() + static_cast<std::ptrdiff_t>(row * width + n));
        Evaluated e = evaluate_piece(p, dump, conv, f, part, counts);
        all.ref.v.insert(all.ref.v.end(), e.ref.v.begin(), e.ref.v.end());
        all.allowed.insert(all.allowed.end(), e.allowed.begin(), e.allowed.end());
        all.ratio = std::max(all.ratio, e.ratio);
        all.inherited = all.inherited || e.inherited;
        row += p.out.size();
    }
    return all;
}

}  // namespace

LocalResult judge_local(const ModelContract& c, const Step& s, DumpValues& dump, const TokenSample& sample) {
    LocalResult lr;
    for (const std::string& in : s.inputs)
        if (!dump.has(in)) lr.missing.push_back(in);
    const Tensor* t = dump.point(s.point);
    lr.present = t != nullptr;
    if (!lr.present || !lr.missing.empty()) return lr;
    const std::vector<Piece> ps = pieces(c, s, sample);
    lr.sampled = !ps.empty();
    // The candidate's values the verdict compares: the whole point, or the
    // sample's rows when the step is judged on them.
    lr.cand = lr.sampled ? dump.rows(s.point, sample.rows) : dump.get(s.point);
    lr.format = t->format();
    RouterCounts counts;
    Evaluated e = evaluate_sampled(c, s, dump, ps, c.conventions, lr.format, lr.cand, &counts);
    if (s.kind == StepKind::router) lr.note = counts.note();
    lr.ref = std::move(e.ref);
    lr.allowed = std::move(e.allowed);
    lr.local = compare(lr.cand.v, lr.ref.v, lr.allowed, lr.format, e.inherited);
    lr.oracle_ratio = e.ratio;
    if (lr.sampled && lr.local.worst >= 0) {  // back to the whole point's flat index
        const std::int64_t width = t->numel() / t->shape()[0];
        lr.local.worst = sample.rows[static_cast<std::size_t>(lr.local.worst / width)] * width + lr.local.worst % width;
    }
    return lr;
}

// ---- conventions ----------------------------------------------------------------

std::vector<std::string> conventions_of(const ModelContract& c, StepKind k) {
    switch (k) {
        case StepKind::norm:
        case StepKind::head_norm: return {"eps_placement", "norm_cast"};
        // rope_arith, attention_probs, attention_logits, router_arith: the model's own
        // format's arithmetic (all but rope_arith only narrower than fp32).
        case StepKind::rope: return {"rope_pairing", "rope_arith"};
        case StepKind::mla: return {"rope_pairing"};
        case StepKind::router: return c.dtype != Format::fp32 ? std::vector<std::string>{"router_arith"} : std::vector<std::string>{};
        // glu_arith: the experts' SiLU stored in a bf16/fp16 model's format.
        case StepKind::moe: return c.dtype != Format::fp32 ? std::vector<std::string>{"glu_arith"} : std::vector<std::string>{};
        // Only the logits read lm_head.weight, and logits_format concerns only
        // them (try_conventions skips both on the other matmuls).
        case StepKind::matmul: {
            std::vector<std::string> v;
            if (c.logits && !c.tied_embeddings) v.push_back("lm_head");
            if (c.logits && c.dtype != Format::fp32) v.push_back("logits_format");
            return v;
        }
        // glu_arith: SwiGLU's activation stored, then the product rounded.
        case StepKind::glu:
            if (c.mlp == MlpKind::geglu) return {"gate_order", "gelu", "glu_arith"};
            if (c.mlp == MlpKind::swiglu) return {"gate_order", "glu_arith"};
            return {"gate_order"};
        case StepKind::gelu: return {"gelu"};
        case StepKind::short_conv: return {"conv_padding"};
        case StepKind::silu:
        case StepKind::sigmoid: return {"act_arith"};
        case StepKind::softcap: return {"logit_softcap", "softcap_arith"};
        // Without cached keys (Lq = Lk) both alignments are the same mask.
        case StepKind::attention: {
            std::vector<std::string> v;
            if (c.cache_tokens > 0) v.push_back("causal");
            if (c.window > 0) v.push_back("window_keys");
            if (c.kv_cache == "rolling" && c.cache_tokens > c.window) v.push_back("rolling_order");
            if (c.dtype != Format::fp32) v.push_back("attention_probs"), v.push_back("attention_logits");
            return v;
        }
        default: return {};
    }
}

// Conventions of arithmetic that keep the exact reference and only widen
// the step's budget: a wider one passes wherever a narrower one does.
bool widens_only(const std::string& key) {
    static const std::set<std::string> keys{"rope_arith", "attention_probs", "attention_logits", "router_arith",
                                            "act_arith", "glu_arith", "softcap_arith"};
    return keys.count(key) > 0;
}

std::optional<std::string> convention_match(const std::vector<std::pair<std::string, double>>& tried) {
    std::optional<std::string> changes, widening;
    double best = 1, tightest = -1;
    for (const auto& [kv, util] : tried) {
        if (!(util <= 1)) continue;  // fails (or NaN)
        if (!widens_only(kv.substr(0, kv.find('=')))) {
            if (util <= best) best = util, changes = kv;
        } else if (util > tightest) {
            tightest = util, widening = kv;
        }
    }
    return changes ? changes : widening;
}

void try_conventions(const ModelContract& c, const Step& s, DumpValues& dump, const LocalResult& lr, PointReport& r,
                     const TokenSample& sample) {
    const std::vector<Piece> ps = pieces(c, s, sample);
    std::vector<std::pair<std::string, double>> tried;
    for (const std::string& key : conventions_of(c, s.kind)) {
        if ((key == "lm_head" || key == "logits_format") && !is_logits_product(s)) continue;  // the same step elsewhere
        for (const std::string& value : convention_values().at(key)) {
            Conventions conv = step_conventions(c.conventions, s);  // the step's own, scoped keys resolved
            if (value == conv.at(key)) continue;
            conv[key] = value;
            const Evaluated e = evaluate_sampled(c, s, dump, ps, conv, lr.format, lr.cand, nullptr);
            const double util = compare(lr.cand.v, e.ref.v, e.allowed, lr.format).utilization;
            char text[64];
            std::snprintf(text, sizeof text, ": utilization %.3g", util);
            r.conventions_tried.push_back(key + "=" + value + text);
            tried.emplace_back(key + "=" + value, util);
        }
    }
    r.convention_match = convention_match(tried);
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
