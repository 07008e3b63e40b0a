#include "oracle/structured.hpp"

#include <cmath>
#include <optional>
#include <utility>

#include "numerics/round.hpp"

#include "oracle/attention.hpp"
#include "oracle/eval.hpp"
#include "oracle/gdn.hpp"
#include "oracle/hc_residual.hpp"
#include "oracle/attn_res.hpp"
#include "oracle/gated_residual.hpp"
#include "oracle/kda.hpp"
#include "oracle/fp8.hpp"
#include "oracle/matmul.hpp"
#include "oracle/moe.hpp"
#include "oracle/moe_layer.hpp"
#include "oracle/sparse.hpp"
#include "oracle/int8.hpp"
#include "oracle/int8_block.hpp"
#include "oracle/compressed_attention.hpp"
#include "oracle/dsa.hpp"
#include "oracle/mla.hpp"
#include "oracle/block_sparse.hpp"
#include "oracle/nsa.hpp"
#include "oracle/rope.hpp"
#include "oracle/sinkhorn.hpp"
#include "oracle/softmax.hpp"

namespace conform::oracle {

namespace {

// A parameter value as text: integers without a decimal point.
std::string param_number(double v) {
    std::string s = std::to_string(v);
    if (s.find('.') != std::string::npos) s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
}

}  // namespace

std::int64_t integer_param(const std::string& op, const Params& p, const std::string& name, double fallback, double lo,
                           double hi) {
    const double v = p.get(name, fallback);
    if (!std::isfinite(v) || v != std::floor(v) || v < lo || v > hi)
        throw std::invalid_argument(op + ": parameter '" + name + "' is " + param_number(v) + ", must be an integer in [" +
                                    param_number(lo) + ", " + param_number(hi) + "]");
    return static_cast<std::int64_t>(v);
}
namespace {

const std::vector<std::pair<std::string, StructuredEval>>& table() {
    static const std::vector<std::pair<std::string, StructuredEval>> t = {
        {"rope", eval_rope},
        {"sincos_pe", eval_sincos_pe},
        {"softmax", eval_softmax},
        {"online_softmax", eval_online_softmax},
        {"lse_merge", eval_lse_merge},
        {"attention", eval_attention},
        {"qk_norm_attention", eval_qk_norm_attention},
        {"gated_attention", eval_gated_attention},
        {"sink_attention", eval_sink_attention},
        {"mla", eval_mla},
        {"nsa_attention", eval_nsa_attention},
        // The registry ops gdn and kda are the recurrences; the chunkwise
        // forms stay available by name (docs/gdn.md).
        {"gdn", eval_gdn_recurrent},
        {"kda", eval_kda_recurrent},
        {"gdn_recurrent", eval_gdn_recurrent},
        {"gdn_chunkwise", eval_gdn_chunkwise},
        {"kda_recurrent", eval_kda_recurrent},
        {"kda_chunkwise", eval_kda_chunkwise},
        {"sinkhorn", eval_sinkhorn},
        {"hc_residual", eval_hc_residual},
        {"mhc_residual", eval_mhc_residual},
        {"quantize", eval_quantize},
        {"int8_gemm", eval_int8_gemm},
        {"matmul", eval_matmul},
        {"moe_router", eval_moe_router},
        {"topk_select", eval_topk_select},
        {"lightning_indexer", eval_lightning_indexer},
        {"compressed_attention", eval_compressed_attention},
        {"dsa_attention", eval_dsa_attention},
        {"block_sparse_attention", eval_block_sparse_attention},
        {"moe", eval_moe},
        {"latent_moe", eval_latent_moe},
        {"fp8_quantize", eval_fp8_quantize},
        {"fp8_gemm", eval_fp8_gemm},
        {"dequantize", eval_dequantize},
        {"smooth_quant", eval_smooth_quant},
        {"int8_block", eval_int8_block},
        {"block_attn_res", eval_block_attn_res},
        {"gated_residual", eval_gated_residual},
    };
    return t;
}

OpOutputs run_at(StructuredEval f, const Params& p, const std::vector<TensorView>& in, unsigned bits) {
    PrecisionScope scope(bits);
    return f(p, in);
}

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
}

}  // namespace

StructuredEval find_structured(std::string_view op) {
    for (const auto& [name, f] : table())
        if (name == op) return f;
    return nullptr;
}

std::vector<std::string> structured_ops() {
    std::vector<std::string> v;
    for (const auto& e : table()) v.push_back(e.first);
    return v;
}

StructuredResult evaluate_structured(const std::string& op, const Params& p, const std::vector<TensorView>& in,
                                     const std::vector<Format>& out) {
    const StructuredEval f = find_structured(op);
    if (!f) throw std::invalid_argument("oracle: '" + op + "' is not a structured op");
    unsigned bits = kDefaultBits;
    OpOutputs lo = run_at(f, p, in, bits), hi = run_at(f, p, in, 2 * bits);
    const std::size_t n_out = lo.values.size();
    if (out.empty() || (out.size() != 1 && out.size() != n_out))
        throw std::invalid_argument(op + ": " + std::to_string(out.size()) + " output formats given for " +
                                    std::to_string(n_out) + " outputs");
    StructuredResult res;
    res.names = lo.names;
    // Elements still undecided, as (output, flat index).
    std::vector<std::pair<std::size_t, std::int64_t>> pending;
    for (std::size_t o = 0; o < n_out; ++o) {
        const Format fmt = out.size() == 1 ? out[0] : out[o];
        res.rounded.emplace_back(fmt, lo.shapes[o]);
        res.exact.emplace_back(static_cast<std::size_t>(numel_of(lo.shapes[o])), 0.0);
        for (std::int64_t i = 0; i < numel_of(lo.shapes[o]); ++i) pending.emplace_back(o, i);
    }
    while (true) {
        PrecisionScope scope(4 * bits);
        std::vector<std::pair<std::size_t, std::int64_t>> still;
        const bool last = 2 * bits >= kMaxBits;
        for (const auto& [o, i] : pending) {
            const Real& a = lo.values[o][static_cast<std::size_t>(i)];
            const Real& b = hi.values[o][static_cast<std::size_t>(i)];
            const Format fmt = res.rounded[o].format();
            std::optional<std::uint64_t> pattern = ziv_accept(a, b, bits, fmt);
            // At the precision cap a still-straddling value is a midpoint for every
            // practical purpose: round it as computed.
            if (!pattern && last) pattern = round_to_format(b.backend().data(), fmt);
            if (!pattern) {
                still.emplace_back(o, i);
                continue;
            }
            res.rounded[o].set_bits(i, *pattern);
            res.exact[o][static_cast<std::size_t>(i)] = to_double(b);
        }
        res.max_bits = std::max(res.max_bits, 2 * bits);
        res.notes = hi.notes;
        if (still.empty()) break;
        res.recomputed += static_cast<std::int64_t>(still.size());
        pending = std::move(still);
        bits *= 2;
        lo = std::move(hi);
        hi = run_at(f, p, in, 2 * bits);
    }
    return res;
}

}  // namespace conform::oracle
