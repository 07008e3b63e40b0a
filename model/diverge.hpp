// Divergence by first failing layer (docs/diverge.md).
//
// For every point of a candidate's model dump:
//  - propagated error: candidate vs the oracle run from the model input;
//  - local error: candidate vs the oracle step applied to the candidate's own
//    inputs of that step (points and weights from the dump);
// each as max ULP (in the candidate's format), max relative error, cosine,
// SQNR (dB) and utilization of the step's local budget.  The first failing
// point is the first (in graph order) whose local error exceeds its budget;
// later points that exceed the budget only through their inputs are marked
// "propagated".  At a failing point the alternative conventions of its step
// are tried and the one whose reference fits the budget is named.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "model/contract.hpp"
#include "model/graph.hpp"
#include "model/run.hpp"

namespace conform::model {

struct ErrorMetrics {
    double max_ulp = 0;      // in the candidate's format
    double max_rel = 0;      // max |c - r| / max(|r|, tiny)
    double rel_l2 = 0;       // |c - r|_2 / |r|_2 over the finite pairs (norm-wise: cancellation does not dominate it)
    double cosine = 1;       // <c, r> / (|c| |r|)
    double sqnr_db = 0;      // 10 log10(|r|^2 / |c - r|^2); +inf when equal
    double utilization = 0;  // max |c - r| / (budget + oracle bound) per element
    std::int64_t worst = -1; // flat index of the worst element (utilization)
    bool class_mismatch = false;  // NaN/Inf where the reference has none (or the reverse)
    std::int64_t not_judged = 0;  // elements whose budget is undefined (oracle::kUndefined): skipped, counted
};

// What a porter reads at the logits [T, V] (docs/diverge.md, "Logits"):
// against the reference run, per token, averaged over the tokens whose
// values are all finite.
struct LogitMetrics {
    double top1 = 0;  // share of tokens whose argmax agrees
    double topk = 0;  // mean |top-k(c) ∩ top-k(r)| / k, k = min(5, V)
    double kl = 0;    // mean KL(softmax(r) || softmax(c)), nats
    std::int64_t tokens = 0, k = 0;
};

enum class PointStatus { pass, fail_local, fail_propagated, not_checkable };
const char* name(PointStatus s);

struct PointReport {
    std::string point;
    std::int64_t layer = -1;
    std::string sublayer;
    StepKind kind = StepKind::matmul;
    bool required = false;
    ErrorMetrics local, propagated;
    // |c - x|_2 / |r - x|_2: the candidate's drift from the exact run x
    // relative to the same-dtype reference r's (every step exact, rounded
    // once into its point's format); about 1 for a clean model, NaN when
    // not computed (two dumps, or a missing point) or r equals x.
    double drift = std::numeric_limits<double>::quiet_NaN();
    PointStatus status = PointStatus::pass;
    std::string missing;                       // not_checkable: which inputs the dump lacks
    std::vector<std::string> conventions_tried;  // "rope_pairing=interleaved: util 0.3"
    std::optional<std::string> convention_match;  // "rope_pairing=interleaved"
    std::string note;  // what the local verdict counted (router points: ambiguous and accepted selections)
    std::optional<LogitMetrics> logits;  // the logits point: against the oracle run (or the reference dump)
};

struct DivergeReport {
    ModelContract contract;
    std::string candidate, reference;  // dump sources ("oracle" when none)
    std::vector<PointReport> points;   // graph order
    std::optional<std::size_t> first_failing;  // index into points
    double oracle_bound_ratio = 0;     // max over points of FP64-tier bound / budget
    std::string oracle_bound_worst;    // the point where that maximum is
    std::string mpfr_cross_check;      // summary of the sampled MPFR comparison
    // Against a reference dump: the reference judged locally the same way
    // (its own inputs against the oracle); empty against the oracle.
    std::vector<PointReport> reference_points;
    std::optional<std::size_t> reference_first_failing;
    double seconds = 0;  // wall time of the analysis
    // The layers analysed (all of them unless --layers), and where the
    // propagated comparison starts: the model input, or for a range that
    // starts later the candidate's own points at its start (docs/diverge.md,
    // "Splitting a deep model").
    LayerRange range;
    std::string propagated_from;
    // Tokens the local checks judged (all: c.tokens) and the propagated
    // comparison ran over (the first ones).
    std::int64_t tokens_checked = 0, tokens_propagated = 0;
    // A merged report (merge_reports): the parts' ranges in layer order, and
    // the layers no part covered (the report is then incomplete).
    std::vector<LayerRange> parts, missing;
};

// One implementation's run of the model: what a dump holds.
struct ModelRun {
    NamedTensors weights;  // weights and caches by contract name
    Tensor input;          // [T, C]
    NamedTensors points;   // activations by point name
    std::string source;    // the dump it came from (messages, the report)
};

struct DivergeOptions {
    std::function<void(const std::string&)> progress;  // one line per stage (null: silent)
    int mpfr_samples = 4;  // rows of the MPFR cross-check (0: skip it)
    std::optional<LayerRange> layers;  // analyse these layers only (null: all)
    // Tokens judged (docs/diverge.md, "Scale"): 0 chooses -- every token up
    // to 256, else 128 (the first half of them also the propagated run's
    // prefix); N >= T every token.
    std::int64_t tokens = 0;
};

// The first point that fails locally (graph order), if any.
std::optional<std::size_t> first_local_failure(const std::vector<PointReport>& ps);

// The candidate against the oracle (FP64 tier) run from the candidate's own
// model input and weights.  std::invalid_argument naming the field on a
// contract error, a missing or mis-shaped weight, input or point.
DivergeReport diverge(const ModelContract& c, const NamedTensors& weights, const Tensor& input,
                      const NamedTensors& points, const DivergeOptions& opt = {});
DivergeReport diverge(const ModelContract& c, const ModelRun& candidate, const DivergeOptions& opt = {});
// The candidate against a reference dump of the same contract: propagated =
// candidate vs the reference's point; local = each dump's step against the
// oracle on that dump's own inputs (docs/diverge.md, "Two dumps").
DivergeReport diverge(const ModelContract& c, const ModelRun& candidate, const ModelRun& reference,
                      const DivergeOptions& opt = {});

}  // namespace conform::model
