// One dump's side of the divergence analysis (docs/diverge.md): its values
// looked up by name (converted once, released after their last use), each
// step's local verdict against the oracle step on the dump's own inputs,
// and the alternative conventions tried at a failing step.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/diverge.hpp"
#include "model/step_bound.hpp"

namespace conform::model {

// The values of one dump by name: points, the model input, weights and
// caches.  Points are converted to doubles on first use and dropped after
// the last step that reads them (a 32-layer width-1024 stack would
// otherwise hold gigabytes of doubles).
class DumpValues {
public:
    DumpValues(const ModelContract& c, const std::vector<Step>& graph, const ModelRun& run);
    bool has(const std::string& name) const;
    bool is_weight(const std::string& name) const { return run_.weights.count(name) > 0; }  // or a cache
    const Values& get(const std::string& name);
    const Tensor* point(const std::string& name) const;  // the stored point, null when absent
    const Named& weights() const { return weights_; }  // those of the graph's layers, converted
    const Values& input() const { return input_; }
    void release_after(std::size_t step);  // drop points no step after `step` reads

private:
    const ModelRun& run_;
    Named weights_;
    Values input_;
    std::map<std::string, Values> points_;
    std::map<std::string, std::size_t> last_use_;
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
};

LocalResult judge_local(const ModelContract& c, const Step& s, DumpValues& dump);

// The conventions of the contract that concern a step kind (contract.hpp).
std::vector<std::string> conventions_of(const ModelContract& c, StepKind k);
// At a failing step: every alternative value of each convention that
// concerns it; fills conventions_tried and convention_match (the lowest
// utilization <= 1).
void try_conventions(const ModelContract& c, const Step& s, DumpValues& dump, const LocalResult& lr, PointReport& r);

// Input validation shared by both modes: the contract, the weights' and
// the points' shapes (std::invalid_argument naming the tensor).
void check_run(const ModelContract& c, const std::vector<Step>& graph, const ModelRun& run);

}  // namespace conform::model
