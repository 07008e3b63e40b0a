// Case generation.  A generated case is a small spec (shape, value family,
// scale, seed, injected specials, parameters) that RapidCheck generates and
// shrinks; the tensors are built from it deterministically, so a failing
// spec is a complete reproduction.  Floats come from distribution families
// and bit patterns, never from arbitrary<double>: heavy tails, outliers,
// constant rows, mean squares near eps, values near the format's overflow,
// subnormals, values around a cap, saturated gates.
#pragma once
#include <rapidcheck.h>

#include <cstdint>
#include <iosfwd>
#include <random>
#include <string>
#include <vector>

#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::props {

enum class Family {
    normal, uniform, heavy_tail, outlier, constant, near_eps, near_overflow,
    bit_patterns, subnormal, around_cap, saturated, tiny,
    masked,  // softmax: -inf at random entries, whole rows -inf (fully masked) at times
    large_mean,  // norms: each row a mean far above its spread (|mean| / spread from 1e2 to 1e6)
};
const char* name(Family f);

struct CaseSpec {
    std::string op;
    Format format = Format::fp32;
    Params params;
    int rows = 1, n = 1;
    std::vector<Family> families;  // one per input
    int scale_exp = 0;             // values scaled by 2^scale_exp
    std::uint64_t seed = 0;
    int specials = 0;              // NaN/Inf/0/max values injected into each data input
    std::vector<std::int64_t> dims;  // structured ops: the op's dimensions (e.g. rope: H, L, D)
    int weight_specials = 0;       // row ops: NaN/+-Inf put into the weight (and bias) at this many columns
};

void showValue(const CaseSpec& spec, std::ostream& os);

struct Case {
    const OpSpec* op = nullptr;
    Params params;
    std::vector<Tensor> inputs;
    std::vector<TensorView> views() const;
};

// Builds the tensors of a spec, first projected into the active domain
// (properties/domain.hpp): a kernel is never called outside what it declares.
Case build_case(const CaseSpec& spec);

// The spec projected into the active domain (properties/domain.hpp); the
// properties take every generated spec through it, so what they read from
// the spec is what build_case builds.
CaseSpec in_domain(const CaseSpec& spec);

struct GenOptions {
    bool specials = false;      // inject special values
    int max_n = 4096;
};

rc::Gen<CaseSpec> gen_spec(const OpSpec& op, Format fmt, GenOptions opt = {});
rc::Gen<Params> gen_params(const OpSpec& op);

// Building blocks for the structured ops' own generators (properties/<family>.cpp).
CaseSpec structured_spec(const std::string& op, Format fmt, std::vector<std::int64_t> dims, Params params, Family fam,
                         int scale_exp, std::uint64_t seed, int specials);
Case start_case(const CaseSpec& spec);  // op and params set, no tensors yet
const std::vector<Family>& value_families();
void fill_values(Tensor& t, Family fam, const CaseSpec& spec, std::size_t input, std::mt19937_64& rng);
void inject_specials(Tensor& t, int count, std::mt19937_64& rng);

// Per structured op (properties/rope.cpp, ...): dims and parameters, and the
// tensors built from a spec.
rc::Gen<CaseSpec> gen_rope_spec(Format fmt, GenOptions opt);
Case build_rope_case(const CaseSpec& spec);
// attention and gated_attention (op): the same shapes; gated_attention's
// gate logits g [Hq, Lq, Dv] come after v (properties/attention_gated.cpp).
rc::Gen<CaseSpec> gen_attention_spec(Format fmt, GenOptions opt, const std::string& op = "attention");
Case build_attention_case(const CaseSpec& spec);
Tensor gate_logits(const CaseSpec& spec, std::mt19937_64& rng);
rc::Gen<CaseSpec> gen_lse_merge_spec(Format fmt, GenOptions opt);
Case build_lse_merge_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_gdn_spec(Format fmt, GenOptions opt);  // properties/gdn.cpp
Case build_gdn_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_kda_spec(Format fmt, GenOptions opt);
Case build_kda_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_sinkhorn_spec(Format fmt, GenOptions opt);  // properties/sinkhorn.cpp
Case build_sinkhorn_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_hc_residual_spec(const std::string& op, Format fmt, GenOptions opt);  // properties/hc_residual.cpp
Case build_hc_residual_case(const CaseSpec& spec);  // hc_residual and mhc_residual
rc::Gen<CaseSpec> gen_quantize_spec(Format fmt, GenOptions opt);  // properties/int8.cpp
Case build_quantize_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_int8_gemm_spec(Format fmt, GenOptions opt);
Case build_int8_gemm_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_dequantize_spec(Format fmt, GenOptions opt);  // properties/int8_quant.cpp
Case build_dequantize_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_smooth_quant_spec(Format fmt, GenOptions opt);
Case build_smooth_quant_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_int8_block_spec(Format fmt, GenOptions opt);  // properties/int8_block.cpp
Case build_int8_block_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_matmul_spec(Format fmt, GenOptions opt);  // properties/matmul.cpp
Case build_matmul_case(const CaseSpec& spec);
// The MoE ops' value families (properties/moe.cpp): ordinary magnitudes, constants (every expert tied).
const std::vector<Family>& moe_families();
Tensor selection_bias(std::int64_t experts, std::mt19937_64& rng);  // the router's bias [E]
rc::Gen<CaseSpec> gen_topk_select_spec(Format fmt, GenOptions opt);  // properties/sparse.cpp
Case build_topk_select_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_lightning_indexer_spec(Format fmt, GenOptions opt);  // properties/sparse_indexer.cpp
Case build_lightning_indexer_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_moe_router_spec(Format fmt, GenOptions opt);  // properties/moe.cpp
Case build_moe_router_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_mla_spec(Format fmt, GenOptions opt);  // properties/mla.cpp
Case build_mla_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_compressed_attention_spec(Format fmt, GenOptions opt);  // properties/compressed_attention.cpp
Case build_compressed_attention_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_dsa_attention_spec(Format fmt, GenOptions opt);  // properties/dsa.cpp
Case build_dsa_attention_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_block_sparse_spec(Format fmt, GenOptions opt);  // properties/block_sparse.cpp
// The attention op's value families (moderate logits; properties/attention.cpp).
const std::vector<Family>& attention_families();
Case build_block_sparse_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_nsa_attention_spec(Format fmt, GenOptions opt);  // properties/nsa.cpp
Case build_nsa_attention_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_moe_layer_spec(const std::string& op, Format fmt, GenOptions opt);  // properties/moe_layer.cpp
Case build_moe_layer_case(const CaseSpec& spec);  // moe and latent_moe
rc::Gen<CaseSpec> gen_fp8_quantize_spec(Format fmt, GenOptions opt);  // properties/fp8.cpp
Case build_fp8_quantize_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_fp8_gemm_spec(Format fmt, GenOptions opt);
Case build_fp8_gemm_case(const CaseSpec& spec);
// The residual reads' stream values (the families whose sums of squares
// stay in FP32's range) and their injected specials (NaN, +-inf, +-0).
const std::vector<Family>& residual_families();
void residual_inject(Tensor& t, int count, std::mt19937_64& rng);
rc::Gen<CaseSpec> gen_block_attn_res_spec(Format fmt, GenOptions opt);  // properties/attn_res.cpp
Case build_block_attn_res_case(const CaseSpec& spec);
rc::Gen<CaseSpec> gen_gated_residual_spec(Format fmt, GenOptions opt);  // properties/gated_residual.cpp
Case build_gated_residual_case(const CaseSpec& spec);

}  // namespace conform::props
