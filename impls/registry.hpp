// The registry of kernels: every implementation conform can check, built-in
// (cpu), naive baselines, mutants, and later plug-ins and dumps, described the
// same way and called through tensor views.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform {

struct KernelCall {
    const Params& params;
    std::vector<TensorView> in;   // in op.inputs order
    std::vector<TensorView> out;  // in op.outputs order, preallocated
};
using KernelFn = std::function<void(const KernelCall&)>;

enum class Role {
    kernel,    // a real implementation: gated by the suite
    baseline,  // naive same-precision arithmetic: reported beside kernels, never gated
    mutant,    // deliberately wrong: the suite must reject it
};
const char* name(Role r);

struct KernelInfo {
    std::string name;     // unique, e.g. "cpu.simd.rms_norm.fp16"
    std::string op;       // registry op name
    std::string variant;  // "simd", "scalar", "naive", or the mutant's bug
    Format in = Format::fp32, out = Format::fp32, acc = Format::fp32;
    std::string backend = "cpu";
    Role role = Role::kernel;
    std::string bug_class;  // mutants: which DESIGN.md bug class it represents
    std::string description;
    KernelFn fn;
    std::vector<Format> out_formats;  // per output when they differ (attention's lse); empty: all `out`
    // Declared deviations from the oracle's conventions (oracle/conventions.hpp),
    // e.g. {"masked_row", "nan"}: the verdict holds the kernel to them.
    std::map<std::string, std::string> conventions;
    // The accuracy profile it is judged by (numerics/profile.hpp: strict,
    // cr, faithful, rigorous, ulp:N, +ftz, +ieee); empty: strict.
    std::string profile;
    // What it declares about its own arithmetic, beyond formats (the family
    // page's "Declared model" lists the keys), e.g. {"key_block", 64}: key
    // tiles of at most 64 keys (attention).  Bounds may use a declaration to
    // be sharper; a kernel that breaks its declaration fails.  Bound
    // functions read them as parameters "declared.<key>".
    std::map<std::string, double> declared;
    // The inputs it supports (plug-in ABI v2), as a JSON object of rules by
    // dimension or parameter name (properties/domain.hpp); generated cases
    // are projected into it.  Empty: every input the generators draw.
    std::string domain;
    // Inputs (by name) declared in another floating format than `in`, which
    // the cases are generated in (plug-in ABI v2: an F16 mask beside F32 q,
    // k, v): a property that derives such an input keeps it exact there.
    std::map<std::string, Format> input_formats;
    // Outputs (by name) the kernel does not write (plug-in ABI v2, e.g. an
    // attention kernel that returns o but not lse): not judged, and the
    // properties that need them are not run.
    std::vector<std::string> unwritten;
    // The same kernel under other launch configurations (GPU kernels: one
    // block, one warp), each named: the determinism property checks them.
    std::vector<std::pair<std::string, KernelFn>> launches;
};

// A mutant's entry: named mutant.<op>.<bug>.<fmt>, input and output in f,
// role mutant, on the cpu backend.
KernelInfo mutant_info(const std::string& op, const std::string& bug, Format f, Format acc, std::string bug_class,
                       std::string description, KernelFn fn);

namespace cpu {
// A CPU kernel's entry: named cpu.<variant>.<op>.<fmt>, input and output in f.
KernelInfo kernel_info(const std::string& op, const std::string& variant, Format f, Format acc, Role role,
                       std::string description, KernelFn fn);
}  // namespace cpu

// The storage format of output `i` of kernel k.
Format output_format(const KernelInfo& k, std::size_t i);

class Registry {
public:
    void add(KernelInfo k);
    const std::vector<KernelInfo>& all() const { return kernels_; }
    const KernelInfo* find(const std::string& name) const;
    std::vector<const KernelInfo*> select(const std::string& op, Role role) const;

private:
    std::vector<KernelInfo> kernels_;
};

// Every built-in kernel: cpu kernels, baselines and mutants.
const Registry& builtin_registry();

// Registration hooks, one per file (defined in impls/cpu/*.cpp, impls/mutants/*.cpp).
void register_cpu_norm(Registry& r);
void register_cpu_activation(Registry& r);
void register_cpu_gated(Registry& r);
void register_cpu_softmax(Registry& r);
void register_cpu_lse_merge(Registry& r);  // impls/cpu/softmax.cpp
void register_mutants_norm(Registry& r);
void register_mutants_activation(Registry& r);
void register_mutants_gated(Registry& r);
void register_mutants_softmax(Registry& r);

// Allocate outputs shaped like the op's first input and call the kernel.
std::vector<Tensor> run_kernel(const KernelInfo& k, const Params& params, const std::vector<TensorView>& in);

}  // namespace conform
