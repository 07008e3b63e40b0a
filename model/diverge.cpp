// The divergence analysis (docs/diverge.md): every step of the graph judged
// locally (the oracle step on the dump's own inputs, against the step's
// budget) and as propagated (against the oracle run from the model input, or
// a reference dump's point), statuses, the first failing point and the
// conventions tried there.
#include "model/diverge.hpp"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <set>
#include <stdexcept>

#include "model/diverge_local.hpp"
#include "model/metrics.hpp"
#include "model/mpfr_check.hpp"

namespace conform::model {

std::optional<std::size_t> first_local_failure(const std::vector<PointReport>& ps) {
    for (std::size_t i = 0; i < ps.size(); ++i)
        if (ps[i].status == PointStatus::fail_local) return i;
    return std::nullopt;
}

const char* name(PointStatus s) {
    switch (s) {
        case PointStatus::pass: return "pass";
        case PointStatus::fail_local: return "fail_local";
        case PointStatus::fail_propagated: return "fail_propagated";
        case PointStatus::not_checkable: return "not_checkable";
    }
    return "?";
}

namespace {

void say(const DivergeOptions& opt, const std::string& line) {
    if (opt.progress) opt.progress(line);
}

PointReport point_report(const Step& s) {
    PointReport r;
    r.point = s.point;
    r.layer = s.layer;
    r.sublayer = s.sublayer;
    r.kind = s.kind;
    r.required = s.required;
    return r;
}

std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

// Statuses from the local and propagated metrics.  A point is "tainted" when
// one of its inputs failed locally or is tainted: only there can an excess
// of the propagated error be blamed on an earlier failure.  Without one, a
// propagated utilization above 1 is the compounding of in-budget steps (no
// a-priori budget exists for it), so the point passes with that figure shown.
class Statuses {
public:
    void set(const Step& s, PointReport& r, bool checkable) {
        bool tainted = false;
        for (const std::string& in : s.inputs) tainted = tainted || bad_.count(in);
        if (!checkable) r.status = PointStatus::not_checkable;
        else if (exceeds(r.local)) r.status = PointStatus::fail_local;
        else if (tainted && exceeds(r.propagated)) r.status = PointStatus::fail_propagated;
        if (tainted || r.status == PointStatus::fail_local) bad_.insert(s.point);
    }

private:
    std::set<std::string> bad_;
};

// Fills r from a local result; false when the step cannot be checked locally.
bool fill_local(const ModelContract& c, const Step& s, DumpValues& dump, const LocalResult& lr, PointReport& r,
                const TokenSample& sample) {
    if (!lr.present) r.missing = s.point;
    else if (!lr.missing.empty()) r.missing = joined(lr.missing);
    if (!r.missing.empty()) return false;
    r.local = lr.local;
    r.note = lr.note;
    if (exceeds(lr.local)) try_conventions(c, s, dump, lr, r, sample);
    return true;
}

void progress_layer(const DivergeOptions& opt, const Step& s, std::int64_t& shown, const LayerRange& range) {
    if (s.layer == shown) return;
    shown = s.layer;
    if (s.layer < 0) return;
    // The ends' head (final norm, logits) is counted as layer L, past the range.
    if (s.layer >= range.end) return say(opt, "diverge: final norm and logits");
    std::string line = "diverge: layer " + std::to_string(s.layer - range.first + 1) + "/" + std::to_string(range.end - range.first);
    if (range.first > 0) line += " (layer " + std::to_string(s.layer) + ")";
    say(opt, line);
}

// The report's header fields; the contract and the candidate's tensors
// checked, the layer range resolved.
DivergeReport report_of(const ModelContract& c, const ModelRun& cand, const DivergeOptions& opt) {
    check_run(c, build_graph(c), cand);
    DivergeReport rep;
    rep.contract = c;
    rep.candidate = cand.source;
    rep.range = opt.layers.value_or(LayerRange{0, c.layers});
    if (rep.range.first < 0 || rep.range.end > c.layers || rep.range.first >= rep.range.end)
        throw std::invalid_argument("layers " + std::to_string(rep.range.first) + ":" + std::to_string(rep.range.end) +
                                    ": outside the model's " + std::to_string(c.layers) + " layers");
    return rep;
}

// What a range reads from earlier layers, from the candidate's dump (its
// first `rows` tokens): the oracle run and the same-dtype reference start
// there.  Empty for a range that starts at the model input.
Named range_seeds(const std::vector<Step>& graph, DumpValues& dump, std::int64_t rows) {
    Named seeds;
    const auto weight = [&](const std::string& n) { return dump.is_weight(n); };
    for (const std::string& n : outside_inputs(graph, weight)) {
        if (n == "input") continue;
        if (!dump.has(n))
            throw std::invalid_argument("point '" + n + "': missing; a layer range starts from the dump's own " + n);
        seeds.emplace(n, dump.first_rows(n, rows));
    }
    return seeds;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The FP64 tier run from the model input on a second thread (with the MPFR
// cross-check of each layer once it is computed), while the first judges
// the steps locally: the local checks are most of the work and need only
// the dump, and the propagated comparison of step i waits for the oracle's
// step i.  The run keeps at most one layer ahead of the local checks and
// drops each point once both are past its last use, so memory is bounded
// by a layer or two whatever the depth.  Points are inserted under the lock
// and erased only when no one holds them, so a reference to one stays valid
// while it is in use.
class OracleFeed {
public:
    // `c`, `graph`: the propagated run's contract and steps (a prefix of
    // the tokens when sampled; index-aligned with the local loop's);
    // `input`, `seeds`: its model input and, for a layer range, the points
    // it reads from earlier layers (the candidate's own).
    OracleFeed(const ModelContract& c, const std::vector<Step>& graph, DumpValues& dump, Values input, Named seeds,
               const DivergeOptions& opt)
        : input_(std::move(input)), seeds_(std::move(seeds)), last_use_(last_uses(graph)),
          worker_([this, &c, &graph, &dump, &opt] { run(c, graph, dump, opt); }) {}
    ~OracleFeed() {
        {
            std::lock_guard lock(m_);
            stop_ = true;
        }
        cv_.notify_all();
        worker_.join();
    }

    // The oracle's value of a point (or the model input), once computed.
    const Values& get(const std::string& name) { return wait_for(points_, name); }
    // The same-dtype reference's value of a point (run_oracle_rounded).
    const Values& get_rounded(const std::string& name) { return wait_for(rounded_, name); }
    // The local checks have reached `layer`: the run may start layer + 1.
    void local_at(std::int64_t layer) {
        {
            std::lock_guard lock(m_);
            local_layer_ = std::max(local_layer_, layer);
        }
        cv_.notify_all();
    }
    // The local checks are done with step i's values.
    void consumed(std::size_t i) {
        std::lock_guard lock(m_);
        local_past_ = static_cast<std::int64_t>(i);
        release();
    }
    // Waits for the end of the run: the MPFR summary (or its exception).
    std::string finish() {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return finished_; });
        if (error_) std::rethrow_exception(error_);
        return mpfr_;
    }

private:
    void run(const ModelContract& c, const std::vector<Step>& graph, DumpValues& dump, const DivergeOptions& opt) {
        try {
            publish("input", input_, input_);
            for (auto& [name, v] : seeds_) publish(name, v, v);
            const auto lookup_in = [&](const Named& pts) -> Lookup {
                return [&](const std::string& n) -> const Values& {
                    if (dump.is_weight(n)) return dump.weight(n, true);
                    std::lock_guard lock(m_);
                    return pts.at(n);
                };
            };
            const Lookup get = lookup_in(points_), rget = lookup_in(rounded_);
            CrossCheck cc;
            std::size_t layer_start = 0;
            for (std::size_t i = 0; i < graph.size(); ++i) {
                const Step& s = graph[i];
                if (!wait_for_local(s.layer)) return;
                publish(s.point, eval_step(c, s, get, c.conventions), rounded_into(eval_step(c, s, rget, c.conventions), s.format));
                if (i + 1 < graph.size() && graph[i + 1].layer == s.layer) continue;
                if (opt.mpfr_samples > 0) {  // the layer's steps while their values are held
                    const std::vector<Step> layer(graph.begin() + static_cast<std::ptrdiff_t>(layer_start),
                                                  graph.begin() + static_cast<std::ptrdiff_t>(i + 1));
                    cc.add(cross_check_mpfr(c, get, opt.mpfr_samples, 1 + static_cast<std::uint64_t>(s.layer + 1), layer));
                }
                layer_start = i + 1;
                dump.feed_past(i);
                std::lock_guard lock(m_);
                feed_past_ = static_cast<std::int64_t>(i);
                release();
            }
            std::lock_guard lock(m_);
            mpfr_ = opt.mpfr_samples > 0 ? cc.summary() : "";
            finished_ = true;
        } catch (...) {
            std::lock_guard lock(m_);
            error_ = std::current_exception(), finished_ = true;
        }
        cv_.notify_all();
    }
    // At most one layer ahead of the local checks; false when stopped.
    bool wait_for_local(std::int64_t layer) {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stop_ || local_layer_ >= layer - 1; });
        if (stop_) finished_ = true;
        return !stop_;
    }
    void publish(const std::string& name, Values exact, Values rounded) {
        {
            std::lock_guard lock(m_);
            points_.emplace(name, std::move(exact));
            rounded_.emplace(name, std::move(rounded));
        }
        cv_.notify_all();
    }
    const Values& wait_for(const Named& m, const std::string& name) {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return error_ || m.count(name); });
        if (error_) std::rethrow_exception(error_);
        return m.at(name);
    }
    // Under m_: drop the points both sides are past.
    void release() {
        const std::int64_t past = std::min(local_past_, feed_past_);
        for (Named* m : {&points_, &rounded_})
            for (auto it = m->begin(); it != m->end();) {
                const auto last = last_use_.find(it->first);
                const bool done = last != last_use_.end() && static_cast<std::int64_t>(last->second) <= past;
                it = done ? m->erase(it) : std::next(it);
            }
    }

    std::mutex m_;
    std::condition_variable cv_;
    Values input_;
    Named seeds_;
    const std::map<std::string, std::size_t> last_use_;
    Named points_, rounded_;  // the FP64 tier's run, and the same-dtype reference
    std::string mpfr_;
    bool finished_ = false, stop_ = false;
    std::int64_t local_layer_ = -1, local_past_ = -1, feed_past_ = -1;
    std::exception_ptr error_;
    std::thread worker_;  // last: starts once everything above exists
};

// The allowance of the propagated comparison over the run's tokens: the
// step's budget on the dump's inputs (the first `n` entries of the local
// allowance: the sample's rows start with the run's prefix), or on the
// oracle's own inputs when the dump lacks them (the magnitudes a sound
// kernel fed exact inputs would see).
std::vector<double> propagated_allowance(const ModelContract& cp, const Step& sp, DumpValues& dump, OracleFeed& feed,
                                         const LocalResult& lr, bool checkable, const Values& ref) {
    if (checkable) return {lr.allowed.begin(), lr.allowed.begin() + static_cast<std::ptrdiff_t>(ref.v.size())};
    const Lookup og = [&](const std::string& n) -> const Values& { return dump.is_weight(n) ? dump.weight(n) : feed.get(n); };
    const StepBound b = step_bound(cp, sp, og, ref, cp.conventions, dump.point(sp.point)->format());
    std::vector<double> a(b.budget.size());
    for (std::size_t k = 0; k < a.size(); ++k) a[k] = b.budget[k] + b.oracle[k];
    return a;
}

}  // namespace

DivergeReport diverge(const ModelContract& c, const ModelRun& cand, const DivergeOptions& opt) {
    const auto t0 = std::chrono::steady_clock::now();
    DivergeReport rep = report_of(c, cand, opt);
    rep.reference = "oracle";
    const std::vector<Step> graph = steps_in_range(build_graph(c), rep.range, c.layers);
    const TokenSample sample = token_sample(c, graph, opt.tokens);
    ModelContract cp = c;  // the propagated run's contract: the sample's prefix of the tokens
    cp.tokens = sample.prefix;
    const std::vector<Step> graph_p = steps_in_range(build_graph(cp), rep.range, c.layers);
    DumpValues dump(graph, cand, 2);
    Named seeds = range_seeds(graph, dump, sample.prefix);
    rep.propagated_from = "the model input";
    if (!seeds.empty()) {
        rep.propagated_from = "the candidate's";
        for (const auto& [name, v] : seeds) rep.propagated_from += " " + name;
    }
    rep.tokens_checked = sample.all ? c.tokens : static_cast<std::int64_t>(sample.rows.size());
    rep.tokens_propagated = sample.prefix;
    say(opt, "diverge: FP64-tier oracle run and the same-dtype reference from " + rep.propagated_from + " (" +
                 std::to_string(rep.range.end - rep.range.first) + " layers" +
                 (sample.all ? std::string() : ", the first " + std::to_string(sample.prefix) + " tokens") +
                 ") beside the local checks" + (sample.all ? std::string() : " (on " + std::to_string(sample.rows.size()) +
                 " of " + std::to_string(c.tokens) + " tokens)") + "; the MPFR cross-check of each layer on sampled rows");
    OracleFeed feed(cp, graph_p, dump, dump.first_rows("input", sample.prefix), std::move(seeds), opt);
    Statuses st;
    std::int64_t shown = -2;
    for (std::size_t i = 0; i < graph.size(); ++i) {
        const Step& s = graph[i];
        progress_layer(opt, s, shown, rep.range);
        feed.local_at(s.layer);
        PointReport r = point_report(s);
        const LocalResult lr = judge_local(c, s, dump, sample);
        const bool checkable = fill_local(c, s, dump, lr, r, sample);
        if (lr.present) {
            const Values& ref = feed.get(s.point);
            const Tensor& t = *dump.point(s.point);
            const Values cand_p = sample.all ? dump.get(s.point) : dump.first_rows(s.point, sample.prefix);
            r.propagated = compare(cand_p.v, ref.v, propagated_allowance(cp, graph_p[i], dump, feed, lr, checkable, ref), t.format());
            r.drift = drift_ratio(cand_p.v, ref.v, feed.get_rounded(s.point).v);
            if (s.point == "logits") r.logits = logit_metrics(cand_p.v, ref.v, c.vocab);
        }
        if (lr.oracle_ratio > rep.oracle_bound_ratio) rep.oracle_bound_ratio = lr.oracle_ratio, rep.oracle_bound_worst = s.point;
        st.set(s, r, checkable);
        rep.points.push_back(std::move(r));
        dump.release_after(i);
        feed.consumed(i);
    }
    rep.mpfr_cross_check = feed.finish();
    rep.first_failing = first_local_failure(rep.points);
    rep.seconds = seconds_since(t0);
    return rep;
}

DivergeReport diverge(const ModelContract& c, const NamedTensors& weights, const Tensor& input,
                      const NamedTensors& points, const DivergeOptions& opt) {
    return diverge(c, ModelRun{weights, input, points, "candidate"}, opt);
}

DivergeReport diverge(const ModelContract& c, const ModelRun& cand, const ModelRun& refr, const DivergeOptions& opt) {
    const auto t0 = std::chrono::steady_clock::now();
    DivergeReport rep = report_of(c, cand, opt);
    rep.reference = refr.source;
    rep.propagated_from = "each dump's own point (two dumps)";
    const std::vector<Step> graph = steps_in_range(build_graph(c), rep.range, c.layers);
    check_run(c, build_graph(c), refr);
    const TokenSample sample = token_sample(c, graph, opt.tokens);
    rep.tokens_checked = sample.all ? c.tokens : static_cast<std::int64_t>(sample.rows.size());
    rep.tokens_propagated = rep.tokens_checked;  // each dump's own points: the same rows
    DumpValues cd(graph, cand), rd(graph, refr);
    rep.mpfr_cross_check = "not run (two dumps: no FP64-tier run from the model input)";
    Statuses st, rst;
    std::int64_t shown = -2;
    for (std::size_t i = 0; i < graph.size(); ++i) {
        const Step& s = graph[i];
        progress_layer(opt, s, shown, rep.range);
        PointReport r = point_report(s), rr = point_report(s);
        const LocalResult cl = judge_local(c, s, cd, sample), rl = judge_local(c, s, rd, sample);
        const bool checkable = fill_local(c, s, cd, cl, r, sample);
        const bool ref_checkable = fill_local(c, s, rd, rl, rr, sample);
        if (checkable && ref_checkable) {
            // Both implementations may sit anywhere within their own budgets
            // around the exact step: the allowance is the sum.
            std::vector<double> allowed(cl.allowed);
            for (std::size_t k = 0; k < allowed.size(); ++k) allowed[k] += rl.allowed[k];
            r.propagated = compare(cl.cand.v, rl.cand.v, allowed, cl.format);
            if (s.point == "logits") r.logits = logit_metrics(cl.cand.v, rl.cand.v, c.vocab);
        }
        if (std::max(cl.oracle_ratio, rl.oracle_ratio) > rep.oracle_bound_ratio)
            rep.oracle_bound_ratio = std::max(cl.oracle_ratio, rl.oracle_ratio), rep.oracle_bound_worst = s.point;
        st.set(s, r, checkable);
        rst.set(s, rr, ref_checkable);
        rep.points.push_back(std::move(r));
        rep.reference_points.push_back(std::move(rr));
        cd.release_after(i);
        rd.release_after(i);
    }
    rep.first_failing = first_local_failure(rep.points);
    rep.reference_first_failing = first_local_failure(rep.reference_points);
    rep.seconds = seconds_since(t0);
    return rep;
}

}  // namespace conform::model
