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
bool fill_local(const ModelContract& c, const Step& s, DumpValues& dump, const LocalResult& lr, PointReport& r) {
    if (!lr.present) r.missing = s.point;
    else if (!lr.missing.empty()) r.missing = joined(lr.missing);
    if (!r.missing.empty()) return false;
    r.local = lr.local;
    r.note = lr.note;
    if (exceeds(lr.local)) try_conventions(c, s, dump, lr, r);
    return true;
}

void progress_layer(const DivergeOptions& opt, const Step& s, std::int64_t& shown, const LayerRange& range) {
    if (s.layer == shown) return;
    shown = s.layer;
    if (s.layer < 0) return;
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

// What a range reads from earlier layers, from the candidate's dump: the
// oracle run and the same-dtype reference start there.  Empty for a range
// that starts at the model input.
Named range_seeds(const std::vector<Step>& graph, DumpValues& dump) {
    Named seeds;
    const auto weight = [&](const std::string& n) { return dump.is_weight(n); };
    for (const std::string& n : outside_inputs(graph, weight)) {
        if (n == "input") continue;
        if (!dump.has(n))
            throw std::invalid_argument("point '" + n + "': missing; a layer range starts from the dump's own " + n);
        seeds.emplace(n, dump.get(n));
    }
    return seeds;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

namespace {

// The FP64 tier run from the model input on a second thread (then the MPFR
// cross-check of it), while the first judges the steps locally: the local
// checks are two thirds of the work and need only the dump, and the
// propagated comparison of step i waits for the oracle's step i.  Points are
// inserted under the lock and never erased while the thread runs, so a
// reference to one stays valid.
class OracleFeed {
public:
    // `seeds`: the points a layer range reads from earlier layers, the
    // candidate's own (both runs start from them).
    OracleFeed(const ModelContract& c, const std::vector<Step>& graph, const DumpValues& dump, Named seeds,
               const DivergeOptions& opt)
        : seeds_(std::move(seeds)), worker_([this, &c, &graph, &dump, &opt] { run(c, graph, dump, opt); }) {}
    ~OracleFeed() { worker_.join(); }

    // The oracle's value of a point (or the model input, a weight), once computed.
    const Values& get(const std::string& name) { return wait_for(points_, name); }
    // The same-dtype reference's value of a point (run_oracle_rounded).
    const Values& get_rounded(const std::string& name) { return wait_for(rounded_, name); }
    // Waits for the end of the run: the MPFR summary (or its exception).
    std::string finish() {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return finished_; });
        if (error_) std::rethrow_exception(error_);
        return mpfr_;
    }

private:
    void run(const ModelContract& c, const std::vector<Step>& graph, const DumpValues& dump, const DivergeOptions& opt) {
        try {
            publish("input", dump.input(), dump.input());
            for (auto& [name, v] : seeds_) publish(name, v, v);
            const auto lookup_in = [&](const Named& pts) -> Lookup {
                return [&](const std::string& n) -> const Values& {
                    const auto w = dump.weights().find(n);
                    if (w != dump.weights().end()) return w->second;
                    std::lock_guard lock(m_);
                    return pts.at(n);
                };
            };
            const Lookup get = lookup_in(points_), rget = lookup_in(rounded_);
            for (const Step& s : graph)
                publish(s.point, eval_step(c, s, get, c.conventions),
                        rounded_into(eval_step(c, s, rget, c.conventions), s.format));
            std::string summary;
            if (opt.mpfr_samples > 0)
                summary = cross_check_mpfr(c, dump.weights(), points_, opt.mpfr_samples, 1, &graph).summary();
            std::lock_guard lock(m_);
            mpfr_ = summary, finished_ = true;
        } catch (...) {
            std::lock_guard lock(m_);
            error_ = std::current_exception(), finished_ = true;
        }
        cv_.notify_all();
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

    std::mutex m_;
    std::condition_variable cv_;
    Named seeds_;
    Named points_, rounded_;  // the FP64 tier's run, and the same-dtype reference
    std::string mpfr_;
    bool finished_ = false;
    std::exception_ptr error_;
    std::thread worker_;  // last: starts once everything above exists
};

// The allowance of the propagated comparison: the step's budget on the
// dump's inputs, or on the oracle's own inputs when the dump lacks them (the
// magnitudes a sound kernel fed exact inputs would see).
std::vector<double> propagated_allowance(const ModelContract& c, const Step& s, DumpValues& dump, OracleFeed& feed,
                                         const LocalResult& lr, bool checkable, const Values& ref) {
    if (checkable) return lr.allowed;
    const Lookup og = [&](const std::string& n) -> const Values& {
        const auto w = dump.weights().find(n);
        return w != dump.weights().end() ? w->second : feed.get(n);
    };
    const StepBound b = step_bound(c, s, og, ref, c.conventions, dump.point(s.point)->format());
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
    DumpValues dump(c, graph, cand);
    const Named seeds = range_seeds(graph, dump);
    rep.propagated_from = "the model input";
    if (!seeds.empty()) {
        rep.propagated_from = "the candidate's";
        for (const auto& [name, v] : seeds) rep.propagated_from += " " + name;
    }
    say(opt, "diverge: FP64-tier oracle run and the same-dtype reference from " + rep.propagated_from + " (" +
                 std::to_string(rep.range.end - rep.range.first) +
                 " layers) beside the local checks; then the MPFR cross-check of it on sampled rows");
    OracleFeed feed(c, graph, dump, seeds, opt);
    Statuses st;
    std::int64_t shown = -2;
    for (std::size_t i = 0; i < graph.size(); ++i) {
        const Step& s = graph[i];
        progress_layer(opt, s, shown, rep.range);
        PointReport r = point_report(s);
        const LocalResult lr = judge_local(c, s, dump);
        const bool checkable = fill_local(c, s, dump, lr, r);
        if (lr.present) {
            const Values& ref = feed.get(s.point);
            const Tensor& t = *dump.point(s.point);
            r.propagated = compare(dump.get(s.point).v, ref.v, propagated_allowance(c, s, dump, feed, lr, checkable, ref),
                                   t.format());
            r.drift = drift_ratio(dump.get(s.point).v, ref.v, feed.get_rounded(s.point).v);
            if (s.point == "logits") r.logits = logit_metrics(dump.get(s.point).v, ref.v, c.vocab);
        }
        if (lr.oracle_ratio > rep.oracle_bound_ratio) rep.oracle_bound_ratio = lr.oracle_ratio, rep.oracle_bound_worst = s.point;
        st.set(s, r, checkable);
        rep.points.push_back(std::move(r));
        dump.release_after(i);
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
    DumpValues cd(c, graph, cand), rd(c, graph, refr);
    rep.mpfr_cross_check = "not run (two dumps: no FP64-tier run from the model input)";
    Statuses st, rst;
    std::int64_t shown = -2;
    for (std::size_t i = 0; i < graph.size(); ++i) {
        const Step& s = graph[i];
        progress_layer(opt, s, shown, rep.range);
        PointReport r = point_report(s), rr = point_report(s);
        const LocalResult cl = judge_local(c, s, cd), rl = judge_local(c, s, rd);
        const bool checkable = fill_local(c, s, cd, cl, r);
        const bool ref_checkable = fill_local(c, s, rd, rl, rr);
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
