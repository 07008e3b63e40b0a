#include "impls/registry.hpp"

#include "impls/cpu/attention.hpp"
#include "impls/cpu/fp8.hpp"
#include "impls/cpu/gdn.hpp"
#include "impls/cpu/hc_residual.hpp"
#include "impls/cpu/attn_res.hpp"
#include "impls/cpu/gated_residual.hpp"
#include "impls/cpu/int8_block.hpp"
#include "impls/cpu/int8_gemm.hpp"
#include "impls/cpu/matmul.hpp"
#include "impls/cpu/compressed_attention.hpp"
#include "impls/cpu/dsa.hpp"
#include "impls/cpu/mla.hpp"
#include "impls/cpu/block_sparse.hpp"
#include "impls/cpu/nsa.hpp"
#include "impls/cpu/moe.hpp"
#include "impls/cpu/sparse.hpp"
#include "impls/cpu/rope.hpp"
#include "impls/cpu/sinkhorn.hpp"

#include <stdexcept>

namespace conform {

const char* name(Role r) {
    switch (r) {
        case Role::kernel: return "kernel";
        case Role::baseline: return "baseline";
        default: return "mutant";
    }
}

void Registry::add(KernelInfo k) {
    if (find(k.name)) throw std::logic_error("duplicate kernel name '" + k.name + "'");
    if (!find_op(k.op)) throw std::logic_error("kernel '" + k.name + "' names unknown op '" + k.op + "'");
    kernels_.push_back(std::move(k));
}

const KernelInfo* Registry::find(const std::string& n) const {
    for (const auto& k : kernels_)
        if (k.name == n) return &k;
    return nullptr;
}

std::vector<const KernelInfo*> Registry::select(const std::string& op, Role role) const {
    std::vector<const KernelInfo*> v;
    for (const auto& k : kernels_)
        if ((op.empty() || k.op == op) && k.role == role) v.push_back(&k);
    return v;
}

const Registry& builtin_registry() {
    static const Registry reg = [] {
        Registry r;
        register_cpu_norm(r);
        register_cpu_activation(r);
        register_cpu_gated(r);
        register_cpu_softmax(r);
        register_cpu_lse_merge(r);
        register_cpu_rope(r);
        register_cpu_attention(r);
        register_cpu_gdn(r);
        register_cpu_sinkhorn(r);
        register_cpu_hc_residual(r);
        register_cpu_int8(r);
        register_cpu_int8_quant(r);
        register_cpu_int8_block(r);
        register_cpu_matmul(r);
        register_cpu_moe(r);
        register_cpu_sparse(r);
        register_cpu_mla(r);
        register_cpu_compressed_attention(r);
        register_cpu_dsa(r);
        register_cpu_block_sparse(r);
        register_cpu_nsa(r);
        register_cpu_moe_layer(r);
        register_cpu_fp8(r);
        register_cpu_attn_res(r);
        register_cpu_gated_residual(r);
        register_mutants_norm(r);
        register_mutants_activation(r);
        register_mutants_gated(r);
        register_mutants_softmax(r);
        register_mutants_rope(r);
        register_mutants_attention(r);
        register_mutants_gated_attention(r);
        register_mutants_sink_attention(r);
        register_mutants_gdn(r);
        register_mutants_sinkhorn(r);
        register_mutants_hc_residual(r);
        register_mutants_int8(r);
        register_mutants_matmul(r);
        register_mutants_moe(r);
        register_mutants_sparse(r);
        register_mutants_mla(r);
        register_mutants_compressed_attention(r);
        register_mutants_dsa(r);
        register_mutants_block_sparse(r);
        register_mutants_nsa(r);
        register_mutants_fp8(r);
        register_mutants_attn_res(r);
        register_mutants_gated_residual(r);
        return r;
    }();
    return reg;
}

KernelInfo mutant_info(const std::string& op, const std::string& bug, Format f, Format acc, std::string bug_class,
                       std::string description, KernelFn fn) {
    KernelInfo k = cpu::kernel_info(op, bug, f, acc, Role::mutant, std::move(description), std::move(fn));
    k.name = "mutant." + op + "." + bug + "." + name(f);
    k.bug_class = std::move(bug_class);
    return k;
}

KernelInfo cpu::kernel_info(const std::string& op, const std::string& variant, Format f, Format acc, Role role,
                            std::string description, KernelFn fn) {
    KernelInfo k;
    k.name = "cpu." + variant + "." + op + "." + name(f);
    k.op = op;
    k.variant = variant;
    k.in = k.out = f;
    k.acc = acc;
    k.role = role;
    k.description = std::move(description);
    k.fn = std::move(fn);
    return k;
}

Format output_format(const KernelInfo& k, std::size_t i) {
    return i < k.out_formats.size() ? k.out_formats[i] : k.out;
}

std::vector<Tensor> run_kernel(const KernelInfo& k, const Params& params, const std::vector<TensorView>& in) {
    const OpSpec* op = find_op(k.op);
    const std::vector<std::vector<std::int64_t>> shapes = output_shapes(*op, in, params);
    std::vector<Tensor> outs;
    for (std::size_t i = 0; i < op->outputs.size(); ++i) outs.emplace_back(output_format(k, i), shapes.at(i));
    KernelCall call{params, in, {}};
    for (auto& t : outs) call.out.push_back(t.view());
    k.fn(call);
    return outs;
}

}  // namespace conform
