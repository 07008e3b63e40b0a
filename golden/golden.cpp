#include "golden/golden.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "impls/cpu/isa.hpp"
#include "numerics/domain.hpp"
#include "properties/domain.hpp"
#include "io/files.hpp"
#include "io/format_error.hpp"
#include "io/json_text.hpp"
#include "io/stored_tensor.hpp"
#include "oracle/eval.hpp"
#include "oracle/structured.hpp"
#include "properties/gdn.hpp"
#include "properties/generators.hpp"
#include "properties/statistics.hpp"
#include "properties/suite.hpp"
#include "properties/verdict.hpp"
#include "reports/atomic_file.hpp"

namespace conform::golden {
namespace {

using nlohmann::json;

// A fixed spread of families and shapes per op: the vectors never change
// unless this list does.
const props::Family kVectorFamilies[] = {props::Family::normal, props::Family::outlier, props::Family::near_eps,
                                         props::Family::bit_patterns, props::Family::around_cap,
                                         props::Family::subnormal};

// The families of op's vectors: kVectorFamilies with these substitutions.
// Attention and the delta rule take `constant` (ties in every max and sum)
// for `bit_patterns`: with values up to 3.4e38 their logits and k k^T
// products overflow FP32, and every FP32 kernel returns NaN or an infinity
// of either sign where the exact result is finite or +inf -- outside the
// domain their generators draw from (docs/attention.md, docs/gdn.md).
// Matmul and the lightning indexer take `constant` too: bit patterns'
// products overflow an FP32 accumulator, elements their bounds leave
// undefined (docs/matmul.md, docs/sparse.md); so does dsa_attention's
// indexer (its attention half draws normal values, docs/dsa_attention.md).  The
// router takes its generators' families (docs/moe.md): normal, uniform and
// heavy tails for bit patterns, near_eps and around_cap; the MoE layers,
// whose three chained products overflow on outliers and heavy tails, take
// normal, uniform, tiny values and constants (every expert tied).  MLA takes
// its generators' families (docs/mla.md): normal, uniform (twice), tiny
// values and constants (every token alike: tied logits) for bit patterns,
// near_eps, around_cap, subnormals and outliers (an outlier of 2^20 in h
// makes logits whose storage error saturates the softmax, and heavy tails
// leave an output that cancels below its BF16 bound: not judged, where a
// vector must judge every element); the family is h's, the weights normal.
// Compressed attention takes constant, uniform, heavy tails and tiny values
// for bit patterns, near_eps, around_cap and subnormals (q, raw and the
// values C; the gate logits, biases and indexer normal): bit patterns
// overflow its logits as attention's do.
// block_sparse_attention takes `constant` for bit patterns (index scores
// whose FP32 dots overflow leave rows undefined); the family is the index
// inputs', q, k and v normal or uniform (the attention op's moderate logits).
// NSA takes `constant` for `bit_patterns` as attention does, uniform values for
// outliers (an outlier's logit error saturates a branch's softmax: bounds at the
// output's magnitude, and BF16 logits past FP32's range) and tiny values for
// `around_cap` (its cancelling outputs sit below their bounds; docs/nsa_attention.md).
// Softmax takes fully masked rows for `near_eps` (no epsilon in it) and
// logits up to 2^15 (exp overflows without the max shift) for `around_cap`.
// The residual reads take `constant` for `bit_patterns`: the sums of squares
// of values up to 3.4e38 overflow FP32, tokens their bounds leave undefined
// (docs/residual.md).
struct Substitution {
    const char* op;
    props::Family from, to;
};
const Substitution kSubstitutions[] = {
    {"attention", props::Family::bit_patterns, props::Family::constant},
    {"gated_attention", props::Family::bit_patterns, props::Family::constant},
    {"sink_attention", props::Family::bit_patterns, props::Family::constant},
    {"gdn", props::Family::bit_patterns, props::Family::constant},
    {"kda", props::Family::bit_patterns, props::Family::constant},
    {"matmul", props::Family::bit_patterns, props::Family::constant},
    {"lightning_indexer", props::Family::bit_patterns, props::Family::constant},
    {"dsa_attention", props::Family::bit_patterns, props::Family::constant},
    {"block_sparse_attention", props::Family::bit_patterns, props::Family::constant},
    {"moe_router", props::Family::bit_patterns, props::Family::normal},
    {"moe_router", props::Family::near_eps, props::Family::uniform},
    {"moe_router", props::Family::around_cap, props::Family::heavy_tail},
    {"moe", props::Family::bit_patterns, props::Family::normal},
    {"moe", props::Family::near_eps, props::Family::uniform},
    {"moe", props::Family::around_cap, props::Family::tiny},
    {"moe", props::Family::outlier, props::Family::constant},
    {"latent_moe", props::Family::bit_patterns, props::Family::normal},
    {"latent_moe", props::Family::near_eps, props::Family::uniform},
    {"latent_moe", props::Family::around_cap, props::Family::tiny},
    {"latent_moe", props::Family::outlier, props::Family::constant},
    {"mla", props::Family::bit_patterns, props::Family::normal},
    {"mla", props::Family::near_eps, props::Family::uniform},
    {"mla", props::Family::around_cap, props::Family::uniform},
    {"mla", props::Family::subnormal, props::Family::tiny},
    {"mla", props::Family::outlier, props::Family::constant},
    {"compressed_attention", props::Family::bit_patterns, props::Family::constant},
    {"compressed_attention", props::Family::near_eps, props::Family::uniform},
    {"compressed_attention", props::Family::around_cap, props::Family::heavy_tail},
    {"compressed_attention", props::Family::subnormal, props::Family::tiny},
    {"nsa_attention", props::Family::bit_patterns, props::Family::constant},
    {"nsa_attention", props::Family::outlier, props::Family::uniform},
    {"nsa_attention", props::Family::around_cap, props::Family::tiny},
    {"softmax", props::Family::near_eps, props::Family::masked},
    {"softmax", props::Family::around_cap, props::Family::saturated},
    {"block_attn_res", props::Family::bit_patterns, props::Family::constant},
    {"gated_residual", props::Family::bit_patterns, props::Family::constant},
};

std::vector<props::Family> vector_families(const std::string& op) {
    std::vector<props::Family> fams(std::begin(kVectorFamilies), std::end(kVectorFamilies));
    for (const Substitution& sub : kSubstitutions)
        if (op == sub.op) std::replace(fams.begin(), fams.end(), sub.from, sub.to);
    return fams;
}

// Parameters away from their defaults on some vectors, so that a kernel
// that ignores or misapplies one fails there: {op, vector, parameter, value}.
struct Setting {
    const char* op;
    int vector;
    const char* param;
    double value;
};
const Setting kSettings[] = {
    // The plain LatentMoE on vector 3 (u W_up; its draw has a token whose u
    // cancels to within its budget, where RMSNorm(u) is not determined).
    {"latent_moe", 3, "normalized", 0},
    // blocks of 2 fully observed with MSA's local block; started blocks of 3
    // with QSA's partial block on top; no limit; decode rows at offset 13
    {"topk_select", 1, "block", 2}, {"topk_select", 1, "force_local", 1}, {"topk_select", 2, "block", 3},
    {"topk_select", 2, "causal", 2}, {"topk_select", 2, "force_local", 2}, {"topk_select", 3, "causal", 0},
    {"topk_select", 4, "offset", 13},
    // mla: the absorbed form's oracle, a raw rope-key cache (rotated at offset - Lc + j), half-split pairs,
    // no causal mask.
    {"mla", 2, "form", 1}, {"mla", 3, "cache_rotated", 0}, {"mla", 3, "offset", 5}, {"mla", 4, "pairing", 1},
    {"mla", 5, "causal", 0},
    // compressed_attention: HCA (m 2, then m' 3 with a tail of 2), no sliding window (empty first rows).
    {"compressed_attention", 1, "mode", 1}, {"compressed_attention", 4, "window", 0},
    {"compressed_attention", 5, "mode", 1}, {"compressed_attention", 5, "m", 3},
    // nsa_attention: no forced block, one slot, a window of one key.
    {"nsa_attention", 2, "force_local", 0}, {"nsa_attention", 4, "n", 1}, {"nsa_attention", 5, "window", 1},
    {"rms_norm", 1, "zero_centered", 1}, {"rms_norm", 3, "zero_centered", 1},
    {"softcap", 4, "beta", 5},       // the around_cap vector straddles a cap of 5, not the default 30
    {"situ_glu", 4, "beta1", 100},   // caps above 64 (still applied)
    {"swiglu_clamp", 4, "limit", 3},
    {"rope", 1, "pairing", 1}, {"rope", 2, "rotary_dim", 4}, {"rope", 3, "ntk_scale", 8},
    {"attention", 2, "window", 2}, {"attention", 4, "softcap", 5},
    {"gated_attention", 2, "window", 2}, {"gated_attention", 4, "softcap", 5},
    {"sink_attention", 2, "window", 2}, {"sink_attention", 4, "softcap", 5},
    {"gdn", 2, "l2norm", 1}, {"kda", 2, "l2norm", 1},
    {"sinkhorn", 1, "eps", 0.01},
    {"quantize", 1, "axis", 1}, {"quantize", 2, "axis", 2}, {"quantize", 3, "scale", 0.01},  // static: codes saturate
    {"dequantize", 1, "axis", 1}, {"dequantize", 2, "axis", 2},
    // blocks of 2 x 8 (tails in both directions), power-of-two scales, a static
    // scale where codes saturate, blocks of 1 x 8 on the subnormal vector
    {"fp8_quantize", 1, "br", 2}, {"fp8_quantize", 1, "bc", 8}, {"fp8_quantize", 2, "scale", 1},
    {"fp8_quantize", 3, "static_scale", 0.01}, {"fp8_quantize", 5, "bc", 8},
};

// The delta rule's vectors (properties/gdn.hpp's layout {T, H, d_k, d_v,
// has_state, gates, betas, sequences}): five tokens from an initial state;
// vector 3 32 tokens of saturated decay in one chunk (cumulative log-decays
// down to 31 g_min: GDN -856, KDA -155, where exp(G_r) exp(-G_i) overflows
// FP32 and exp(G_i - G_r) double); vector 5 three packed sequences
// (cu_seqlens), each from its own initial state.
std::vector<std::int64_t> delta_dims(int i) {
    if (i == 3) return {32, 2, 3, 2, 1, props::saturated_gates, props::mixed_betas};
    if (i == 5) return {8, 2, 3, 2, 1, props::mixed_gates, props::mixed_betas, 3};
    return {5, 2, 3, 2, 1, props::mixed_gates, props::mixed_betas};
}

// Vector i of op: its shape (small, with the structure each op's kernels
// branch on), family, parameters and a fixed seed.
props::CaseSpec vector_spec(const OpSpec& op, Format f, props::Family fam, int i) {
    props::CaseSpec s;
    const std::string& name = op.name;
    s.op = name;
    s.format = f;
    s.params = Params::defaults(op);
    s.rows = 1;
    s.n = op.kind == OpKind::row ? 7 : 16;
    if (name == "rope") {  // [H, L, D]: both halves of a pair, two heads, three positions
        s.dims = {2, 3, 8};
        s.params.set("offset", 1000);
    }
    if (name == "lse_merge") s.dims = {4, 3};
    if (name == "sinkhorn") s.dims = {3, 4};  // three 4x4 matrices (n_hc = 4), 20 iterations
    if (name == "hc_residual" || name == "mhc_residual") s.dims = {2, 4, 9};  // n_hc = 4, a SIMD tail
    if (name == "block_attn_res") s.dims = {3, 2, 9};     // 3 sources, 2 tokens, d 9
    if (name == "gated_residual") s.dims = {4, 2, 8, 4};  // n 4, 2 tokens, d 8, rank 4
    if (name == "quantize") s.dims = {3, 5};
    if (name == "int8_gemm") s.dims = {3, 5, 4, 1, 1};  // codes and scales stored in the vector's format
    if (name == "matmul") s.dims = {3, 5, 17};          // K odd (vdpbf16ps pairs), N past a 16-lane vector
    if (name == "topk_select") s.dims = {5, 9, i % 2};  // 5 queries, 9 candidates (ties on odd vectors)
    if (name == "lightning_indexer") s.dims = {3, 5, 2, 17};  // 2 heads, c past a 16-lane vector
    if (name == "moe_router") {                         // 5 tokens, 8 experts (two duplicated: a tie), top 2, capacity
        s.dims = {5, 4, 8, 1, 1};
        s.params.set("capacity", 1);
        if (i % 2 == 1) {  // DeepSeek-V3's router: sigmoid, 4 groups of 2 with 2 kept, weights scaled by 2.5; no
                           // duplicates (a group's top-2 sum would be twice its largest); the outliers' logits
                           // reach the sigmoid's undefined range (|l| >= 87): softmax there
            s.dims[4] = 0;
            s.params.set("score", fam == props::Family::outlier ? 0 : 1), s.params.set("groups", 4), s.params.set("topk_groups", 2);
            s.params.set("scaling", 2.5);
        }
    }
    if (name == "moe" || name == "latent_moe") {  // 5 tokens, 4 experts of F 4, top 2, one shared expert, a bias
        s.dims = {5, 4, 4, 4, 1, name == "moe" ? 0 : 4, 1, name == "moe" ? 0 : 1};
        s.params.set("capacity", 1);
    }
    if (name == "dequantize") s.dims = {3, 5};          // codes stored as floats
    if (name == "mla") {  // 2 heads, 3 new tokens after 2 cached, d_model 8, d_c 4, d_nope 4 (square W_uk), d_r 2, d_v 3
        s.dims = {2, 3, 2, 8, 4, 4, 2, 3};
        s.params.set("offset", 1000);
    }
    if (name == "compressed_attention") {  // H 2, L 11 (N 5, a tail of 1), c 4, Hi 2; k 2, window 3; vector 3 periodic (ties)
        s.dims = {2, 11, 4, 2, i == 3 ? 1 : 0};
        s.params.set("m", 2), s.params.set("k", 2), s.params.set("window", 3);
    }
    // dsa_attention: 4 queries after 0, 1 or 2 earlier keys (the first query's slots not all filled), 2 index
    // heads with c past a 16-lane vector, 2 heads, D 8, Dv 3 (the first 3 columns of kv), top 3; exact ties
    // (duplicated index keys) on odd vectors
    if (name == "dsa_attention") {
        s.dims = {4, 4 + i % 3, 2, 17, 2, 8, 3, i % 2, 1};
        s.params.set("k", 3);
    }
    if (name == "nsa_attention") {  // GQA 2 x 2, 6 queries after 5 earlier keys, blocks of 3 (a tail of 2); ties on odd
        s.dims = {4, 2, 6, 11, 4, 4, i % 2, i == 3 ? 1 : 0};  // vectors, closed gates on vector 3
        s.params.set("block", 3), s.params.set("n", 3), s.params.set("window", 3);
    }
    if (name == "fp8_quantize") s.dims = {3, 20};
    if (name == "fp8_gemm") s.dims = {2, 200, 130, 0};  // two K blocks (a tail of 72), two column blocks of B's scales
    if (name == "smooth_quant") s.dims = {3, 4, 5};     // x [3, 4], w [4, 5], alpha 0.5
    if (name == "int8_block") {  // T 3, d 8, 2 heads, ffn 8: the all-real block
        s.dims = {3, 8, 2, 8};
        s.params.set("heads", 2);
    }
    if (name == "gdn" || name == "kda") s.dims = delta_dims(i);
    if (name == "softmax") s.rows = 4, s.n = 40;  // online kernels: three blocks of 16, the max moving between them
    if (softmax_attention_op(name)) {  // two KV heads of two query heads each, Lq < Lk (bottom-right causal), two key tiles
        s.dims = {4, 2, 3, 70, 4, 4, 1};  // with the additive mask (every op input present)
        s.params.set("causal", 1);
    }
    for (const Setting& set : kSettings)
        if (name == set.op && i == set.vector) s.params.set(set.param, set.value);
    s.families = {fam, name == "mla" || name == "compressed_attention" ? props::Family::normal : fam};
    if (name == "block_sparse_attention") {  // 4 heads in 2 groups, 9 tokens (a partial last block of 2), D 2, Di 8
        s.dims = {4, 2, 9, 2, 2, 8, 0};
        s.params.set("mode", i % 2), s.params.set("block", 2), s.params.set("k", 2);
        s.families = {i % 2 ? props::Family::uniform : props::Family::normal, fam};
    }
    s.seed = 1000 + static_cast<std::uint64_t>(i);
    return s;
}

// ---- writing ---------------------------------------------------------------

std::string hex_bits(std::uint64_t b) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(b));
    return buf;
}

// One tensor in three lines: format and shape, then the bit patterns, then
// the same values as hex floats (element i of both arrays is element i of
// the tensor in row-major order).
std::string tensor_text(const Tensor& t, const std::string& indent) {
    json bits = json::array(), hex = json::array();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        bits.push_back(hex_bits(t.bits(i)));
        hex.push_back(hexfloat(t.value(i)));
    }
    return "{\"format\": " + json(name(t.format())).dump() + ", \"shape\": " + json(t.shape()).dump() + ",\n" +
           indent + " \"bits\": " + bits.dump() + ",\n" + indent + " \"hex\": " + hex.dump() + "}";
}

// {"name": tensor, ...} with one tensor per entry, at `indent`.
std::string tensors_text(const std::vector<std::string>& names, const std::vector<Tensor>& ts, const std::string& indent) {
    std::string s = "{";
    for (std::size_t k = 0; k < ts.size(); ++k)
        s += (k ? ",\n" : "\n") + indent + " " + json(names[k]).dump() + ": " + tensor_text(ts[k], indent + " ");
    return s + "\n" + indent + "}";
}

std::string vector_text(const Vector& v) {
    const OpSpec& op = *find_op(v.op);
    const std::string in = "   ";
    return "  {\n" + in + "\"family\": " + json(v.family).dump() + ",\n" + in + "\"params\": " +
           json(v.params.values()).dump() + ",\n" + in + "\"inputs\": " + tensors_text(op.inputs, v.inputs, in) +
           ",\n" + in + "\"outputs\": " + tensors_text(op.outputs, v.outputs, in) + "\n  }";
}

// ---- reading (untrusted) ---------------------------------------------------

std::vector<TensorView> views_of(const std::vector<Tensor>& ts) {
    std::vector<TensorView> v;
    for (const Tensor& t : ts) v.push_back(t.view());
    return v;
}

// A golden file is a few MB at most; anything far larger is not one.
constexpr std::uint64_t kMaxVectorFileBytes = 64 << 20;

// Where in which file: every reader error names both.
struct Where {
    const std::filesystem::path& file;
    std::string field;
    Where operator/(const std::string& key) const { return {file, field.empty() ? key : field + "." + key}; }
    Where operator[](std::size_t i) const { return {file, field + "[" + std::to_string(i) + "]"}; }
    [[noreturn]] void fail(const std::string& why) const { throw io::FormatError(file.string(), field, why); }
};

const json& member(const json& obj, const std::string& key, const Where& at) {
    if (!obj.contains(key)) (at / key).fail("missing");
    return obj.at(key);
}

// Refuses keys a reader would silently ignore (a misspelt output name must not vanish).
void only_keys(const json& obj, const std::vector<std::string>& allowed, const Where& at) {
    for (const auto& [key, value] : obj.items())
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
            at.fail("unexpected key " + io::quote(key));
}

void require_kind(const json& j, bool ok, const std::string& expected, const Where& at) {
    if (!ok) at.fail("expected " + expected + ", found " + io::json_kind(j));
}

Format read_format(const json& j, const Where& at) {
    require_kind(j, j.is_string(), "a format name", at);
    const auto f = parse_format(j.get<std::string>());
    if (!f) at.fail("unknown format " + io::quote(j.get<std::string>()));
    return *f;
}

std::vector<std::int64_t> read_shape(const json& j, Format f, const Where& at) {
    require_kind(j, j.is_array(), "an array of dimensions", at);
    if (j.size() > static_cast<std::size_t>(kMaxRank)) at.fail("rank " + std::to_string(j.size()) + " above " + std::to_string(kMaxRank));
    std::vector<std::int64_t> shape;
    for (std::size_t d = 0; d < j.size(); ++d) {
        require_kind(j[d], j[d].is_number_integer(), "an integer dimension", at[d]);
        shape.push_back(j[d].get<std::int64_t>());
    }
    if (!io::byte_count(io::dtype_of(f), shape)) at.fail("shape " + shape_string(shape) + " is negative or too large");
    return shape;
}

// "0x" and 1 to 16 hex digits, within the format's width.
std::uint64_t read_bits(const json& j, Format f, const Where& at) {
    const std::string text = j.is_string() ? j.get<std::string>() : "";
    const bool shaped = text.size() > 2 && text.size() <= 18 && text.compare(0, 2, "0x") == 0 &&
                        text.find_first_not_of("0123456789abcdef", 2) == std::string::npos;
    if (!shaped) at.fail("expected a bit pattern \"0x...\" (lower-case hex), found " + (j.is_string() ? io::quote(text) : io::json_kind(j)));
    const std::uint64_t b = std::stoull(text.substr(2), nullptr, 16);
    const int width = 8 * info(f).bytes;
    if (width < 64 && b >> width) at.fail(text + " is wider than " + name(f) + "'s " + std::to_string(width) + " bits");
    return b;
}

Tensor read_tensor(const json& j, const Where& at) {
    require_kind(j, j.is_object(), "a tensor {format, shape, bits, hex}", at);
    only_keys(j, {"format", "shape", "bits", "hex"}, at);
    const Format f = read_format(member(j, "format", at), at / "format");
    const std::vector<std::int64_t> shape = read_shape(member(j, "shape", at), f, at / "shape");
    const json &bits = member(j, "bits", at), &hex = member(j, "hex", at);
    const std::int64_t numel = *io::byte_count(io::dtype_of(f), shape) / info(f).bytes;
    for (const auto& [key, arr] : {std::pair{"bits", &bits}, std::pair{"hex", &hex}})
        if (!arr->is_array() || static_cast<std::int64_t>(arr->size()) != numel)
            (at / key).fail("expected an array of " + std::to_string(numel) + " strings (shape " + shape_string(shape) + ")");
    Tensor t(f, shape);  // allocated only now: its size is bounded by the file's
    for (std::int64_t i = 0; i < numel; ++i) {
        const std::size_t e = ix(i);
        t.set_bits(i, read_bits(bits[e], f, (at / "bits")[e]));
        const std::string want = hexfloat(t.value(i));
        if (!hex[e].is_string() || hex[e].get<std::string>() != want)
            (at / "hex")[e].fail("expected " + io::quote(want) + " (the value of bits[" + std::to_string(i) + "])");
    }
    return t;
}

// A value family's name (it is printed with every verdict on the vector).
std::string read_family(const json& j, const Where& at) {
    require_kind(j, j.is_string(), "a value family's name", at);
    for (int k = 0; k <= static_cast<int>(props::Family::masked); ++k)
        if (j.get<std::string>() == props::name(static_cast<props::Family>(k))) return j.get<std::string>();
    at.fail("unknown value family " + io::quote(j.get<std::string>()));
}

Params read_params(const json& j, const OpSpec& op, const Where& at) {
    require_kind(j, j.is_object(), "an object of parameters", at);
    Params p;
    for (const auto& [key, value] : j.items()) {
        const bool known = std::any_of(op.params.begin(), op.params.end(), [&](const ParamSpec& s) { return s.name == key; });
        if (!known) at.fail(io::quote(key) + " is not a parameter of " + op.name);
        require_kind(value, value.is_number(), "a number", at / key);
        p.set(key, value.get<double>());
    }
    return p;
}

// Inputs are passed by position: the stored ones are a prefix of op.inputs,
// and only optional inputs may be left out.
std::vector<Tensor> read_inputs(const json& j, const OpSpec& op, const Where& at) {
    require_kind(j, j.is_object(), "an object of tensors", at);
    only_keys(j, op.inputs, at);
    std::vector<Tensor> inputs;
    for (const std::string& in : op.inputs) {
        if (!j.contains(in)) {
            if (!optional_input(in)) (at / in).fail("missing");
            if (j.size() != inputs.size()) (at / in).fail("missing while a later input is present (inputs are positional)");
            break;
        }
        inputs.push_back(read_tensor(j.at(in), at / in));
    }
    return inputs;
}

// The output shapes the inputs give (the op's own shape checks).
std::vector<std::vector<std::int64_t>> shapes_from(const OpSpec& op, const Params& p, const std::vector<Tensor>& inputs,
                                                   const Where& at) {
    const std::vector<TensorView> views = views_of(inputs);
    try {
        if (op.kind != OpKind::structured) oracle::check_shapes(op, views);
        return output_shapes(op, views, p);
    } catch (const std::invalid_argument& e) {
        at.fail(std::string("the shapes do not fit ") + op.name + ": " + e.what());
    }
}

// Every output of the op, each shaped as the inputs say.
std::vector<Tensor> read_outputs(const json& j, const OpSpec& op, const std::vector<std::vector<std::int64_t>>& shapes,
                                 const Where& at) {
    require_kind(j, j.is_object(), "an object of tensors", at);
    only_keys(j, op.outputs, at);
    std::vector<Tensor> outputs;
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
        const Where out = at / op.outputs[o];
        outputs.push_back(read_tensor(member(j, op.outputs[o], at), out));
        if (outputs.back().shape() != shapes.at(o))
            (out / "shape").fail(shape_string(outputs.back().shape()) + ", but the inputs give " + shape_string(shapes[o]));
    }
    return outputs;
}

Vector read_vector(const json& j, const OpSpec& op, Format f, const Where& at) {
    require_kind(j, j.is_object(), "a vector {family, params, inputs, outputs}", at);
    only_keys(j, {"family", "params", "inputs", "outputs"}, at);
    Vector v{op.name, f, read_family(member(j, "family", at), at / "family"),
             read_params(member(j, "params", at), op, at / "params"), {}, {}};
    v.inputs = read_inputs(member(j, "inputs", at), op, at / "inputs");
    const auto shapes = shapes_from(op, v.params, v.inputs, at / "inputs");
    v.outputs = read_outputs(member(j, "outputs", at), op, shapes, at / "outputs");
    return v;
}

// ---- the oracle and kernels on a vector ------------------------------------

// Every output of the op, correctly rounded into `formats` (one per output).
std::vector<Tensor> oracle_outputs(const OpSpec& op, const Params& p, const std::vector<Tensor>& inputs,
                                   const std::vector<Format>& formats) {
    if (op.kind == OpKind::structured) return oracle::evaluate_structured(op.name, p, views_of(inputs), formats).rounded;
    return {oracle::evaluate(op, p, views_of(inputs), formats.at(0)).rounded};
}

// The kernels of int8_gemm and dequantize read int8 codes, those of
// fp8_gemm FP8 codes; the golden files store the codes as exact values of
// the vector's format (fp8_gemm's: values of both FP8 formats).
bool is_code_input(const std::string& op, const std::string& input) {
    return ((op == "int8_gemm" || op == "fp8_gemm") && (input == "a" || input == "b")) || (op == "dequantize" && input == "q");
}

// t in format f; the values must be exact there (a golden input that is
// not is a malformed file, never silently rounded).
Tensor converted(const Tensor& t, Format f, const std::string& what) {
    Tensor c(f, t.shape());
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        c.set_value(i, t.value(i));
        const bool same = c.value(i) == t.value(i) || (std::isnan(c.value(i)) && std::isnan(t.value(i)));
        if (!same) throw std::invalid_argument(what + " element " + std::to_string(i) + " = " + hexfloat(t.value(i)) +
                                               " is not exact in " + name(f));
    }
    return c;
}

// Whether vector stats s hold a worse element than every earlier vector's:
// by utilization once any output is bounded, else by ulps.
bool worse_than(const props::Stats& s, const props::Stats& total) {
    if (s.elements() == 0) return false;
    if (s.has_util()) return !total.has_util() || s.max_util() > total.max_util();
    return !total.has_util() && (total.elements() == 0 || s.max_ulp() > total.max_ulp());
}

std::string vector_name(const Vector& v, std::size_t i) {
    return "vector " + std::to_string(i) + " (" + v.family + ")";
}

}  // namespace

std::filesystem::path default_dir() { return std::filesystem::path(CONFORM_SOURCE_DIR) / "golden"; }

std::filesystem::path vector_file(const std::filesystem::path& dir, const std::string& op, Format f) {
    return dir / "vectors" / (op + "." + name(f) + ".json");
}

std::filesystem::path profile_path(const std::filesystem::path& profiles_dir, const std::string& kernel) {
    return profiles_dir / (kernel + ".json");
}

std::filesystem::path profile_file(const std::filesystem::path& dir, const std::string& kernel) {
    return profile_path(dir / "profiles", kernel);
}

// The widths the kernels store these outputs at whatever their input format
// (impls/cpu/*.cpp): attention's and lse_merge's log-sum-exp and the delta
// rule's state in fp32 (they feed later steps), dsa_attention's lse and
// indices (ids as exact FP32 values) in fp32, quantize's codes in int8
// and its scale in fp32, int8_gemm's exact INT32 accumulator in fp64 (which
// holds it exactly), smooth_quant's factors in fp32.
std::vector<Format> output_formats(const OpSpec& op, Format f) {
    static const std::map<std::string, std::map<std::string, Format>> fixed = {
        {"attention", {{"lse", Format::fp32}}},
        {"gated_attention", {{"lse", Format::fp32}}},
        {"sink_attention", {{"lse", Format::fp32}}},
        {"dsa_attention", {{"lse", Format::fp32}, {"indices", Format::fp32}}},
        {"lse_merge", {{"lse", Format::fp32}}},
        {"gdn", {{"state", Format::fp32}}},
        {"kda", {{"state", Format::fp32}}},
        {"quantize", {{"q", Format::int8}, {"scale", Format::fp32}}},
        {"fp8_quantize", {{"q", Format::fp8_e4m3}, {"scale", Format::fp32}}},
        {"int8_gemm", {{"acc", Format::fp64}}},
        {"smooth_quant", {{"s", Format::fp32}}},
    };
    std::vector<Format> formats;
    const auto op_fixed = fixed.find(op.name);
    for (const std::string& out : op.outputs) {
        const bool is_fixed = op_fixed != fixed.end() && op_fixed->second.count(out);
        formats.push_back(is_fixed ? op_fixed->second.at(out) : f);
    }
    return formats;
}

std::vector<Vector> make_vectors(const std::string& op_name, Format f) {
    const OpSpec& op = *find_op(op_name);
    std::vector<Vector> out;
    const std::vector<props::Family> families = vector_families(op_name);
    for (std::size_t i = 0; i < families.size(); ++i) {
        const props::Case c = props::build_case(vector_spec(op, f, families[i], static_cast<int>(i)));
        Vector v{op_name, f, props::name(families[i]), c.params, c.inputs, {}};
        // A staged op called with its inputs alone chains its own exact stages.
        v.outputs = oracle_outputs(op, v.params, v.inputs, output_formats(op, f));
        out.push_back(std::move(v));
    }
    return out;
}

// {"version", "op", "format", "vectors": [{family, params, inputs, outputs}]};
// every tensor {format, shape, bits, hex} (docs/numerics.md, "Golden data").
void write_vectors(const std::filesystem::path& file, const std::vector<Vector>& vs) {
    if (vs.empty()) throw std::invalid_argument(file.string() + ": no vectors to write");
    std::string s = "{\n \"version\": " + std::to_string(kVectorsVersion) + ",\n \"op\": " + json(vs[0].op).dump() +
                    ",\n \"format\": " + json(name(vs[0].format)).dump() + ",\n \"vectors\": [";
    for (std::size_t i = 0; i < vs.size(); ++i) s += (i ? ",\n" : "\n") + vector_text(vs[i]);
    std::filesystem::create_directories(file.parent_path());
    report::write_file_atomic(file, s + "\n ]\n}\n");
}

std::vector<Vector> read_vectors(const std::filesystem::path& file) {
    const std::vector<std::byte> bytes = io::read_file_bytes(file, kMaxVectorFileBytes);
    const json root = io::parse_json({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, file.string(), "");
    const Where at{file, ""};
    require_kind(root, root.is_object(), "an object {version, op, format, vectors}", at);
    only_keys(root, {"version", "op", "format", "vectors"}, at);
    const json& version = member(root, "version", at);
    if (!version.is_number_integer() || version.get<std::int64_t>() != kVectorsVersion)
        (at / "version").fail("this build reads version " + std::to_string(kVectorsVersion) + ", found " + version.dump());
    const json& op_name = member(root, "op", at);
    const OpSpec* op = op_name.is_string() ? find_op(op_name.get<std::string>()) : nullptr;
    if (!op) (at / "op").fail("expected an op name (see conform ops), found " + io::printable(op_name.dump(), 64));
    const Format f = read_format(member(root, "format", at), at / "format");
    const json& arr = member(root, "vectors", at);
    require_kind(arr, arr.is_array(), "an array of vectors", at / "vectors");
    std::vector<Vector> out;
    for (std::size_t i = 0; i < arr.size(); ++i) out.push_back(read_vector(arr[i], *op, f, (at / "vectors")[i]));
    return out;
}

std::string oracle_difference(const Vector& v) {
    const OpSpec& op = *find_op(v.op);
    std::vector<Format> formats;
    for (const Tensor& t : v.outputs) formats.push_back(t.format());
    std::vector<Tensor> want;
    try {
        want = oracle_outputs(op, v.params, v.inputs, formats);
    } catch (const std::invalid_argument& e) {
        return std::string("the oracle rejects the inputs: ") + e.what();
    }
    for (std::size_t o = 0; o < v.outputs.size(); ++o) {
        const Tensor &stored = v.outputs[o], &oracle = want.at(o);
        if (stored.shape() != oracle.shape())
            return op.outputs[o] + ": stored shape " + shape_string(stored.shape()) + ", oracle " + shape_string(oracle.shape());
        for (std::int64_t i = 0; i < stored.numel(); ++i)
            if (stored.bits(i) != oracle.bits(i))
                return op.outputs[o] + " element " + std::to_string(i) + ": stored " + hex_bits(stored.bits(i)) + " (" +
                       hexfloat(stored.value(i)) + "), oracle " + hex_bits(oracle.bits(i)) + " (" +
                       hexfloat(oracle.value(i)) + ")";
    }
    return "";
}

// Kernels over codes (int8, FP8) are checked on the vectors of their output format.
bool reads_codes(const KernelInfo& k) { return !is_float(k.in) || is_fp8(k.in); }
Format vector_format(const KernelInfo& k) { return reads_codes(k) ? k.out : k.in; }

// A kernel of a float format reads the inputs as stored: the generators
// built them for that format.  One over codes reads them in its own code
// format (int8, or its FP8 format) and the scales as fp32, as the
// generators build them for it.
std::vector<Tensor> kernel_inputs(const KernelInfo& k, const Vector& v) {
    if (!reads_codes(k)) return v.inputs;
    const OpSpec& op = *find_op(v.op);
    std::vector<Tensor> in;
    for (std::size_t i = 0; i < v.inputs.size(); ++i) {
        const Format codes = is_fp8(k.in) ? k.in : Format::int8;
        const Format f = is_code_input(op.name, op.inputs[i]) ? codes : Format::fp32;
        in.push_back(converted(v.inputs[i], f, "input " + op.inputs[i]));
    }
    return in;
}

KernelCheck check_kernel(const KernelInfo& k, const std::vector<Vector>& vectors) {
    KernelCheck r;
    r.kernel = k.name;
    props::Stats total;
    for (std::size_t i = 0; i < vectors.size(); ++i) {
        const Vector& v = vectors[i];
        props::Stats s;
        std::string failure;
        try {
            const std::vector<Tensor> in = kernel_inputs(k, v);
            const props::CaseResult c = props::check_case(k, v.params, views_of(in), &s);
            if (!c.pass) failure = c.message;
        } catch (const std::exception& e) {
            failure = std::string("not judged: ") + e.what();  // a kernel, oracle or conversion error
        }
        if (!failure.empty() && r.failure.empty()) r.failure = vector_name(v, i) + ": " + failure;
        if (worse_than(s, total))
            r.worst = vector_name(v, i) + ": " + (s.has_util() ? s.worst_util_case() : s.worst_ulp_case());
        total.merge(s);
        ++r.vectors;
    }
    r.elements = total.elements();
    r.max_ulp = total.max_ulp();
    if (total.has_util()) r.max_util = total.max_util();
    if (r.failure.empty() && r.vectors == 0) r.failure = "no golden vectors to judge it on";
    if (r.failure.empty() && r.elements == 0) r.failure = "no element judged";
    r.passed = r.failure.empty();
    return r;
}

namespace {

// within_budget alone, inside the kernel's declared domain as in run_suite
// (a plug-in is never called outside it).
props::Stats within_budget_stats(const KernelInfo& k, int cases, std::uint64_t seed) {
    const Domain domain = parse_domain(k.domain, k.op);
    const props::DomainScope scope(domain);
    props::RunConfig cfg;
    cfg.seed = seed;
    cfg.cases = cases;
    props::Stats st;
    for (const props::PropertyDef* d : props::properties_for(*find_op(k.op)))
        if (d->name == "within_budget") props::run_property(*d, k, cfg, &st);
    return st;
}

// NaN (a case without the statistic) as JSON null and back.
json per_case_json(const std::vector<double>& v) {
    json a = json::array();
    for (double x : v) a.push_back(std::isnan(x) ? json(nullptr) : json(x));
    return a;
}

}  // namespace

Profile record_profile(const KernelInfo& k, int cases, std::uint64_t seed) {
    const props::Stats st = within_budget_stats(k, cases, seed);
    Profile p;
    p.kernel = k.name;
    p.seed = seed;
    p.cases = cases;
    p.isa = cpu::isa_name();
    p.max_ulp = st.max_ulp();
    p.case_log_util = st.case_log_utils();
    p.case_misrounded = st.case_misrounded();
    return p;
}

void write_profile(const std::filesystem::path& file, const Profile& p) {
    json j{{"version", kProfileVersion},
           {"kernel", p.kernel},
           {"seed", p.seed},
           {"cases", p.cases},
           {"isa", p.isa},
           {"max_ulp", p.max_ulp},
           {"case_log_util", per_case_json(p.case_log_util)},
           {"case_misrounded", per_case_json(p.case_misrounded)}};
    std::filesystem::create_directories(file.parent_path());
    report::write_file_atomic(file, j.dump() + "\n");
}

std::optional<Profile> read_profile(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) return std::nullopt;
    std::string field = "(json)";
    try {
        const json j = json::parse(in);
        auto at = [&](const char* key) -> const json& {
            field = key;
            return j.at(key);
        };
        if (at("version").get<int>() != kProfileVersion)
            throw std::runtime_error("version " + j.at("version").dump() + ", expected " + std::to_string(kProfileVersion) +
                                     " (re-record with conform golden --record-profiles)");
        Profile p;
        p.kernel = at("kernel").get<std::string>();
        p.seed = at("seed").get<std::uint64_t>();
        p.cases = at("cases").get<int>();
        p.isa = at("isa").get<std::string>();
        p.max_ulp = at("max_ulp").get<std::uint64_t>();
        auto per_case = [&](const char* key, double hi) {
            std::vector<double> v;
            const json& a = at(key);
            if (!a.is_array()) throw std::runtime_error("must be an array");
            for (std::size_t i = 0; i < a.size(); ++i) {
                field = std::string(key) + "[" + std::to_string(i) + "]";
                const double x = a[i].is_null() ? std::nan("") : a[i].get<double>();
                if (!std::isnan(x) && !(x <= hi && std::isfinite(x)))
                    throw std::runtime_error(fmt::format("{} must be null or finite and at most {}", x, hi));
                v.push_back(x);
            }
            return v;
        };
        p.case_log_util = per_case("case_log_util", 0);  // a passing kernel's utilization is at most 1
        p.case_misrounded = per_case("case_misrounded", 1);
        return p;
    } catch (const json::exception& e) {
        throw std::runtime_error(file.string() + ": malformed profile, field " + field + ": " + e.what());
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(file.string() + ": malformed profile, field " + field + ": " + e.what());
    }
}

namespace {

// The mean over the cases both have of g(recorded, now); n the cases paired.
template <class G>
double paired_mean(const std::vector<double>& rec, const std::vector<double>& now, G g, std::int64_t* n) {
    double sum = 0;
    *n = 0;
    for (std::size_t i = 0; i < std::min(rec.size(), now.size()); ++i)
        if (!std::isnan(rec[i]) && !std::isnan(now[i])) sum += g(rec[i], now[i]), ++*n;
    return *n ? sum / static_cast<double>(*n) : 0;
}

}  // namespace

std::string drift(const Profile& rec, const KernelInfo& k, const props::Stats& now) {
    std::string why;
    const std::string where = fmt::format("the {} cases of seed {}, recorded on {}", rec.cases, rec.seed, rec.isa);
    if (!props::budget_for(k).bound_based && now.max_ulp() > rec.max_ulp)
        why += fmt::format("max ulp {} above the recorded {} on {}: {}; ", now.max_ulp(), rec.max_ulp, where,
                           now.worst_ulp_case());
    std::int64_t n = 0;
    const double more = paired_mean(rec.case_misrounded, now.case_misrounded(), [](double r, double x) { return x - r; }, &n);
    if (n > 0 && more > kMisroundedDrift)
        why += fmt::format("{:.4f} more of the results per case not correctly rounded than recorded (mean over {} "
                           "paired cases of {}), above the tolerance {}; ",
                           more, n, where, kMisroundedDrift);
    const double floor = std::log(kUtilFloor);
    const double log_ratio = paired_mean(
        rec.case_log_util, now.case_log_utils(), [floor](double r, double x) { return std::max(x, floor) - std::max(r, floor); },
        &n);
    if (n > 0 && log_ratio > std::log(kUtilDriftRatio))
        why += fmt::format("worst utilization per case {:.3f}x the recorded (geometric mean over {} paired cases of "
                           "{}), above the tolerance {}x; ",
                           std::exp(log_ratio), n, where, kUtilDriftRatio);
    if (!why.empty()) why.resize(why.size() - 2);
    return why;
}

std::function<std::string(const KernelInfo&, const props::RunConfig&, const props::Stats&)> profile_checker(
    const std::filesystem::path& dir) {
    return profiles_checker(dir / "profiles");
}

std::function<std::string(const KernelInfo&, const props::RunConfig&, const props::Stats&)> profiles_checker(
    const std::filesystem::path& profiles_dir) {
    return [profiles_dir](const KernelInfo& k, const props::RunConfig& cfg, const props::Stats& s) -> std::string {
        const auto rec = read_profile(profile_path(profiles_dir, k.name));
        if (!rec) return "";
        if (cfg.seed == rec->seed && cfg.cases == rec->cases && cfg.max_n == props::RunConfig{}.max_n)
            return drift(*rec, k, s);
        return drift(*rec, k, within_budget_stats(k, rec->cases, rec->seed));
    };
}

}  // namespace conform::golden
