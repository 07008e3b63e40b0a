// The property suite split at the kernel call (docs/cases.md): `conform
// cases` runs every property of an op against a recording kernel and keeps
// each call's inputs (the "make inputs" half), grouped by the generated case
// that made them; `conform validate` runs the same properties again, with
// the same seed, against a replaying kernel that answers each call with the
// outputs a third party stored for those inputs (the "judge outputs" half).
// Generators, special values, edge shapes and the relations of metamorphic
// properties are the suite's own code, run unchanged.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "properties/suite.hpp"

namespace conform::props {

// One kernel call a property made: the op's parameters, every one at its
// effective value, and its inputs in op order.
struct CallCase {
    Params params;
    std::vector<Tensor> inputs;  // by op.inputs; an absent optional input is empty
    std::vector<bool> present;   // whether inputs[i] was given
    std::vector<Format> out_formats;
    std::vector<std::vector<std::int64_t>> out_shapes;
    std::string property;  // the first property that asked for it
};

inline constexpr const char* kNotAmongTheCases = "inputs that are not among the generated cases";

// The calls one generated case of a property made, in order (a call may
// repeat: the same inputs twice).
struct CaseGroup {
    std::string property;
    std::vector<std::size_t> members;  // indices into CaseBook::cases()
};

class CaseBook {
public:
    enum class Mode {
        record,  // a new call is added as a case
        verify,  // a call must be one of the cases; a miss is counted
        replay,  // a call must be one of the cases; a miss throws
    };
    explicit CaseBook(const OpSpec& op) : op_(&op) {}

    void set_mode(Mode m) { mode_ = m; }
    Mode mode() const { return mode_; }
    // A new group (one generated case of `property`); groups with no call are
    // dropped when the next one begins.  A `single_call` group keeps its
    // first call only: within_budget's and special_values' later calls are
    // the smallest failing slice of a failure, which a replay need not answer
    // (failing_slice_report takes a refused slice as no slice).
    void begin_group(const std::string& property, bool single_call = false);
    // The case of this call (recorded in record mode); nullopt for a miss in
    // verify mode.  In replay mode a miss throws std::runtime_error whose
    // message holds kNotAmongTheCases.
    std::optional<std::size_t> on_call(const Params& p, const std::vector<TensorView>& in,
                                       const std::vector<TensorView>& out);
    // A case read back (validate): indexed for lookup.
    std::size_t add(CallCase c);
    std::optional<std::size_t> find(const Params& p, const std::vector<TensorView>& in) const;

    const OpSpec& op() const { return *op_; }
    const std::vector<CallCase>& cases() const { return cases_; }
    // The groups since the last call, without the empty ones; forgets them.
    std::vector<CaseGroup> take_groups();
    std::int64_t misses() const { return misses_; }
    void clear_misses() { misses_ = 0; }
    // The members of the group in progress (the failing one when a property
    // stopped at a failure).
    const CaseGroup* last_group() const { return groups_.empty() ? nullptr : &groups_.back(); }

private:
    const OpSpec* op_;
    Mode mode_ = Mode::record;
    std::vector<CallCase> cases_;
    std::multimap<std::uint64_t, std::size_t> index_;
    std::vector<CaseGroup> groups_;
    bool single_call_ = false;
    std::int64_t misses_ = 0;
};

// The op's own parameters of a call, each at its effective value (absent
// ones at their defaults): what a case file stores and a lookup compares.
Params op_params(const OpSpec& op, const Params& p);

// Kernel k whose calls go through the book: `base` computes the outputs (a
// built-in kernel while recording).  Where `base` declares conventions its
// own kernel does not follow, outputs that fail base's verdict are replaced
// by the oracle's, so that no property takes the failure path (its smallest
// failing slice would add calls no kernel that passes makes).  `perturb`
// flips the last bit of every finite output so that a property whose later
// inputs depend on earlier outputs asks for other inputs
// (CaseBook::Mode::verify finds it).
KernelInfo recording_kernel(const KernelInfo& base, std::shared_ptr<CaseBook> book, bool perturb = false);

// Kernel k answering each call with the outputs `answer` gives for the
// book's case (replay mode: a call that is not a case throws).
using Answer = std::function<void(std::size_t case_index, const KernelCall& call)>;
KernelInfo replaying_kernel(const KernelInfo& description, std::shared_ptr<CaseBook> book, Answer answer);

// Property p, each generated case of it a group of the book.  With
// `keep_going`, a failing case counts as passed (while recording, the
// built-in kernel's verdict does not matter: the sequence of generated cases
// must be the one a passing kernel sees).
PropertyDef grouped_property(const PropertyDef& p, std::shared_ptr<CaseBook> book, bool keep_going);

// The properties of `op` that a recording of kernel k covers, and why each
// other one is not (a property that does not run for a black-box kernel,
// the measured curves).
struct Coverage {
    std::vector<const PropertyDef*> run;
    std::vector<std::pair<std::string, std::string>> not_covered;  // name, reason
};
Coverage coverage_for(const KernelInfo& k);

}  // namespace conform::props
