// One dump's side of the divergence analysis (docs/diverge.md): its values
// looked up by name (converted once, released after their last use), each
// step's local verdict against the oracle step on the dump's own inputs,
// and the alternative conventions tried at a failing step.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/diverge.hpp"
#include "model/step_bound.hpp"

namespace conform::model {

// The tokens a large model's steps are judged on (docs/diverge.md,
// "Scale"): every token, or the first `prefix` tokens (where the propagated
// comparison runs) and tokens spread over the rest of the sequence, the last
// one included.  Rows sorted; the first `prefix` of them are 0..prefix-1.
struct TokenSample {
    bool all = true;                  // every token, by the whole-point path
    std::vector<std::int64_t> rows;   // the sampled rows (empty when all)
    std::int64_t prefix = 0;          // tokens of the propagated run (all: T)
};
// `tokens`: 0 chooses (every token up to 256, else 128); N >= T takes every
// token through the sampled path (the tests compare it with the whole-point
// path).  Sampling needs every point [T, features] (no mHC or residual-read
// streams); otherwise every token.
TokenSample token_sample(const ModelContract& c, const std::vector<Step>& graph, std::int64_t tokens);

// The values of one dump by name: points, the model input, weights and
// caches.  Points are converted to doubles on first use and dropped after
// the last step that reads them; weights likewise once every consumer (the
// local checks, and the oracle run beside them when `consumers` is 2) has
// passed their last use, and the mapped file's pages of what is dropped are
// handed back -- a 32-layer width-4096 stack would otherwise hold tens of
// gigabytes.  weight(), rows() and has() may be called from the oracle
// thread; get() and release_after() from the local thread only.
class DumpValues {
public:
    DumpValues(const std::vector<Step>& graph, const ModelRun& run, int consumers = 1);
    bool has(const std::string& name) const;
    bool is_weight(const std::string& name) const { return run_.weights.count(name) > 0; }  // or a cache
    const Values& get(const std::string& name);     // a point, the input or a weight, whole
    // A weight or cache, converted once while in use; `feed`: asked by the
    // oracle thread (whose progress says which reads are past a last use).
    const Values& weight(const std::string& name, bool feed = false);
    // Rows of a point or the model input (first dimension), read from the dump.
    Values rows(const std::string& name, const std::vector<std::int64_t>& rows) const;
    Values first_rows(const std::string& name, std::int64_t n) const;
    const Tensor* point(const std::string& name) const;  // the stored point, null when absent
    void release_after(std::size_t step);  // the local checks are past `step`
    void feed_past(std::size_t step);      // the oracle run is past `step`

private:
    const Tensor& stored(const std::string& name) const;
    void release_weights();  // under m_
    const ModelRun& run_;
    std::map<std::string, Values> points_;
    std::map<std::string, std::size_t> last_use_;
    std::mutex m_;  // weights_ and the consumers' progress
    std::map<std::string, Values> weights_;
    std::set<std::string> pinned_;  // read after their last use: held to the end
    std::map<std::size_t, std::vector<std::vector<double>>> pool_;  // released weights' buffers, by size
    std::int64_t local_past_ = -1, feed_past_ = -1;
    bool feed_ = false;
};

// The local result of one step of one dump.
struct LocalResult {
    std::vector<std::string> missing;  // inputs the dump lacks (then nothing else is set)
    bool present = false;              // the dump holds the point itself
    Values cand;                       // the dump's values at the point
    Format format = Format::fp32;      // the point's storage format
    Values ref;                        // the oracle step on the dump's inputs
    std::vector<double> allowed;       // budget + FP64-tier bound, per element
    ErrorMetrics local;
    double oracle_ratio = 0;           // max FP64-tier bound / budget of the step
    std::string note;                  // what the verdict counted (PointReport::note)
    bool sampled = false;              // judged on the sample's rows (cand, ref, allowed hold those)
};

// On every token, or (sampled) on the sample's rows: cand, ref and allowed
// then hold those rows only, in order, and local.worst is still a flat index
// of the whole point.
LocalResult judge_local(const ModelContract& c, const Step& s, DumpValues& dump, const TokenSample& sample = {});

// The convention a failing point matches, of those tried ("key=value",
// utilization under it): of the passing ones (utilization <= 1) that change
// the step's reference, the lowest utilization; else, of those that only
// widen its budget (rope_arith, attention_probs, attention_logits,
// router_arith, act_arith, glu_arith, softcap_arith), the tightest that
// passes — the highest utilization — so that a much wider declaration
// (attention_logits) does not shadow the one the step needs
// (attention_probs).  None when nothing passes.
std::optional<std::string> convention_match(const std::vector<std::pair<std::string, double>>& tried);

// The conventions of the contract that concern a step kind (contract.hpp).
std::vector<std::string> conventions_of(const ModelContract& c, StepKind k);
// At a failing step: every alternative value of each convention that
// concerns it; fills conventions_tried and convention_match (above).
void try_conventions(const ModelContract& c, const Step& s, DumpValues& dump, const LocalResult& lr, PointReport& r,
                     const TokenSample& sample = {});

// Input validation shared by both modes: the contract, the weights' and
// the points' shapes (std::invalid_argument naming the tensor).
void check_run(const ModelContract& c, const std::vector<Step>& graph, const ModelRun& run);

}  // namespace conform::model
