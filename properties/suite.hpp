// The property suite as a library: the properties of every op family, run
// with RapidCheck against any registered kernel (built-in, plug-in or dump),
// collecting error statistics for the report.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "impls/registry.hpp"
#include "properties/verdict.hpp"
#include "reports/model.hpp"

namespace conform::props {

struct RunConfig {
    std::uint64_t seed = 1;
    int cases = 100;          // successful cases per property
    std::string reproduce;    // a reproduction string from an earlier failure
    int max_n = 4096;         // largest row length generated
    bool shrink = true;       // false: a failure is reported as generated (enough to kill a mutant, and faster)
    // Called before every generated, replayed or shrunk case runs, with the
    // property id and the string that replays exactly that case.  check-plugin
    // streams it to its parent so that a case that crashes or hangs the
    // process can still be named and replayed.
    std::function<void(const std::string& property, const std::string& reproduce)> on_case;
    // When set, within_budget and special_values keep every evaluated case
    // here (sensitivity.hpp re-judges them amplified).
    std::vector<CaseEval>* collect = nullptr;
    // within_budget and special_values judge every case without stopping at
    // the first failure (the statistics of a failing kernel: its tightest
    // profile, where its errors lie).
    bool characterize = false;
    // A check of the kernel against its recorded error profile
    // (golden::profile_checker; empty result: no drift), given this run's
    // configuration and within_budget statistics; run_suite reports it as
    // the property "error_profile".  Unset: no such property.
    std::function<std::string(const KernelInfo&, const RunConfig&, const Stats&)> profile_check;
    // A failing kernel (not a mutant) is re-judged under each single-key
    // alternative of its op's declarable conventions; the report names the
    // one under which the whole suite passes (KernelReport::convention_match).
    bool infer_conventions = true;
    // Stop a kernel's suite at its first failing property: nothing after it
    // runs (no further properties, statistics re-run, curves or inference).
    bool fail_fast = false;
};

// A testable: one generated case per call; fails with RC_FAIL / RC_ASSERT.
using Testable = std::function<void()>;

using PropertyMaker = std::function<Testable(const KernelInfo&, const RunConfig&, Stats*)>;

struct PropertyDef {
    std::string name;
    std::string doc;
    std::function<bool(const OpSpec&)> applies;
    PropertyMaker make;
    int case_divisor = 1;  // expensive properties run cases / divisor
    // Unset: every kernel of an op it applies to; set: only kernels it accepts.
    std::function<bool(const KernelInfo&)> for_kernel = {};
    // Outputs other than the first whose values it interprets: not run for a
    // kernel that does not write one of them (KernelInfo::unwritten).
    std::vector<std::string> needs = {};
};

// The maker of a property that reads only the kernel (no run settings, no statistics).
inline PropertyMaker of_kernel(Testable (*f)(const KernelInfo&)) {
    return [f](const KernelInfo& k, const RunConfig&, Stats*) { return f(k); };
}

// Whether property p runs for kernel k (its for_kernel, and every output it
// needs written).
bool runs_for(const PropertyDef& p, const KernelInfo& k);

const std::vector<PropertyDef>& property_defs();
std::vector<const PropertyDef*> properties_for(const OpSpec& op);

// Family registration (properties/<family>.cpp).
void add_common_properties(std::vector<PropertyDef>& v);
void add_norm_properties(std::vector<PropertyDef>& v);
void add_activation_properties(std::vector<PropertyDef>& v);
void add_gated_properties(std::vector<PropertyDef>& v);
void add_softmax_properties(std::vector<PropertyDef>& v);
void add_rope_properties(std::vector<PropertyDef>& v);
void add_attention_properties(std::vector<PropertyDef>& v);
void add_gated_attention_properties(std::vector<PropertyDef>& v);  // properties/attention_gated.cpp
void add_gdn_properties(std::vector<PropertyDef>& v);
void add_sinkhorn_properties(std::vector<PropertyDef>& v);
void add_hc_residual_properties(std::vector<PropertyDef>& v);  // hc_residual, mhc_residual
void add_attn_res_properties(std::vector<PropertyDef>& v);        // block_attn_res (properties/attn_res.cpp)
void add_gated_residual_properties(std::vector<PropertyDef>& v);  // gated_residual
void add_int8_properties(std::vector<PropertyDef>& v);
void add_int8_quant_properties(std::vector<PropertyDef>& v);  // properties/int8_quant.cpp
void add_int8_block_properties(std::vector<PropertyDef>& v);  // properties/int8_block.cpp
void add_matmul_properties(std::vector<PropertyDef>& v);      // properties/matmul.cpp
void add_fp8_properties(std::vector<PropertyDef>& v);         // properties/fp8.cpp
void add_moe_properties(std::vector<PropertyDef>& v);         // properties/moe.cpp
void add_sparse_properties(std::vector<PropertyDef>& v);      // properties/sparse.cpp
void add_sparse_indexer_properties(std::vector<PropertyDef>& v);  // properties/sparse_indexer.cpp
void add_mla_properties(std::vector<PropertyDef>& v);         // properties/mla.cpp
void add_compressed_attention_properties(std::vector<PropertyDef>& v);  // properties/compressed_attention.cpp
void add_dsa_properties(std::vector<PropertyDef>& v);         // properties/dsa.cpp
void add_block_sparse_properties(std::vector<PropertyDef>& v);  // properties/block_sparse.cpp
void add_nsa_attention_properties(std::vector<PropertyDef>& v);  // properties/nsa.cpp
void add_moe_layer_properties(std::vector<PropertyDef>& v);   // properties/moe_layer.cpp

report::PropertyOutcome run_property(const PropertyDef& p, const KernelInfo& k, const RunConfig& cfg, Stats* stats);

// All applicable properties; `on_property` is called after each one (progress).
report::KernelReport run_suite(const KernelInfo& k, const RunConfig& cfg,
                               const std::function<void(const report::PropertyOutcome&)>& on_property = {});

// Kernel fields of the report (no properties run).
report::KernelReport describe_kernel(const KernelInfo& k);
void fill_stats(report::ErrorStats& out, const Stats& s);

}  // namespace conform::props
