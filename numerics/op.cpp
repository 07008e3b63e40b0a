#include "numerics/op.hpp"

#include "numerics/delta_varlen.hpp"
#include "numerics/fp8.hpp"

#include <stdexcept>

namespace conform {
namespace {

// o [Hq, Lq, Dv] and lse [Hq, Lq] from q [Hq, Lq, D] and v [Hkv, Lk, Dv].
std::vector<std::vector<std::int64_t>> attention_shapes(const std::vector<TensorView>& in) {
    if (in.size() < 3 || in[0].rank != 3 || in[2].rank != 3)
        throw std::invalid_argument("attention: inputs q, k, v must be rank-3 tensors");
    return {{in[0].shape[0], in[0].shape[1], in[2].shape[2]}, {in[0].shape[0], in[0].shape[1]}};
}

// mla: o [H, L, d_v] and lse [H, L] from h [L, d_model], W_uk [H, d_nope, d_c], W_uv [H, d_v, d_c].
std::vector<std::vector<std::int64_t>> mla_shapes(const std::vector<TensorView>& in) {
    if (in.size() < 6 || in[0].rank != 2 || in[2].rank != 3 || in[3].rank != 3)
        throw std::invalid_argument("mla: expects h [L, d_model], W_dkv, W_uk [H, d_nope, d_c], W_uv [H, d_v, d_c], W_q, W_kr");
    return {{in[2].shape[0], in[0].shape[0], in[3].shape[1]}, {in[2].shape[0], in[0].shape[0]}};
}

// o [..., Dv] and lse [...] of lse_merge: the shapes of o_a and lse_a.
std::vector<std::vector<std::int64_t>> lse_merge_shapes(const std::vector<TensorView>& in) {
    if (in.size() != 4) throw std::invalid_argument("lse_merge: expects inputs o_a, lse_a, o_b, lse_b");
    return {{in[0].shape.begin(), in[0].shape.begin() + in[0].rank}, {in[1].shape.begin(), in[1].shape.begin() + in[1].rank}};
}

// y [T, H, d_v] and state [H, d_k, d_v] of the gated delta rule (gdn, kda);
// a packed call (cu_seqlens) returns [N, H, d_k, d_v], one per sequence.
std::vector<std::vector<std::int64_t>> delta_rule_shapes(const std::vector<TensorView>& in) {
    if (in.size() < 3 || in[0].rank != 3 || in[2].rank != 3)
        throw std::invalid_argument("gdn/kda: inputs q, k, v must be rank-3 tensors [T, H, d]");
    std::vector<std::int64_t> state{in[0].shape[1], in[0].shape[2], in[2].shape[2]};
    if (delta_packed(in)) state.insert(state.begin(), in[kDeltaCuSeqlens].numel() - 1);  // one per sequence
    return {{in[0].shape[0], in[0].shape[1], in[2].shape[2]}, state};
}

// The parameters of attention and gated_attention.
std::vector<ParamSpec> attention_params() {
    return {{"scale", 0, "softmax scale; 0 = 1/sqrt(D)"},
            {"causal", 0, "1: query i sees keys j <= i + Lk - Lq (bottom-right aligned)"},
            {"window", 0, "W > 0: exactly the W keys (pos - W, pos] (implies causal)"},
            {"softcap", 0, "c > 0: logits -> c tanh(s / c)"}};
}

// The gated delta rule's parameters (docs/gdn.md); `chunk` is the kernels'
// chunk size, which the oracle (the recurrence) does not depend on.
std::vector<ParamSpec> delta_rule_params() {
    return {{"l2norm", 0, "1: q, k <- x / sqrt(|x|^2 + l2_eps) per token and head first"},
            {"l2_eps", 1e-6, "epsilon of the L2 normalization, inside the square root"},
            {"scale", 1, "readout scale on q; 0 = 1/sqrt(d_k)"},
            {"chunk", 64, "tokens per chunk of a chunkwise kernel (the value does not depend on it)"}};
}

// quantize: q of x's shape, one scale per group (axis 0: 1, 1: rows, 2: columns of x [rows, cols]).
std::vector<std::vector<std::int64_t>> quantize_shapes(const std::vector<TensorView>& in) {
    if (in.size() != 1 || in[0].rank != 2) throw std::invalid_argument("quantize: expects x [rows, cols]");
    return {{in[0].shape[0], in[0].shape[1]}, {in[0].shape[0], in[0].shape[1]}};
}

// int8_gemm: acc and y [M, N] from a [M, K] and b [K, N].
std::vector<std::vector<std::int64_t>> int8_gemm_shapes(const std::vector<TensorView>& in) {
    if (in.size() != 4 || in[0].rank != 2 || in[1].rank != 2)
        throw std::invalid_argument("int8_gemm: expects a [M, K], b [K, N], scale_a, scale_b");
    return {{in[0].shape[0], in[1].shape[1]}, {in[0].shape[0], in[1].shape[1]}};
}

// matmul: y [M, N] from a [M, K] and b [K, N].
std::vector<std::vector<std::int64_t>> matmul_shapes(const std::vector<TensorView>& in) {
    if (in.size() != 2 || in[0].rank != 2 || in[1].rank != 2 || in[0].shape[1] != in[1].shape[0])
        throw std::invalid_argument("matmul: expects a [M, K] and b [K, N] (a's columns = b's rows)");
    return {{in[0].shape[0], in[1].shape[1]}};
}

// moe_router: indices, weights, kept [T, k] and loss [1] from x [T, C].
std::vector<std::vector<std::int64_t>> moe_router_shapes(const std::vector<TensorView>& in, const Params& p) {
    if (in.size() < 2 || in[0].rank != 2 || in[1].rank != 2)
        throw std::invalid_argument("moe_router: expects x [T, C] and w [C, E] (and optionally selection_bias [E])");
    const std::int64_t t = in[0].shape[0], k = static_cast<std::int64_t>(p.get("k", 2));
    return {{t, k}, {t, k}, {t, k}, {1}};
}

// moe, latent_moe: y [T, C], indices and weights [T, k].
std::vector<std::vector<std::int64_t>> moe_layer_shapes(const std::vector<TensorView>& in, const Params& p) {
    if (in.empty() || in[0].rank != 2) throw std::invalid_argument("moe: expects x [T, C] first");
    const std::int64_t t = in[0].shape[0], k = static_cast<std::int64_t>(p.get("k", 2));
    return {{t, in[0].shape[1]}, {t, k}, {t, k}};
}

// dequantize: y of q's shape.
std::vector<std::vector<std::int64_t>> dequantize_shapes(const std::vector<TensorView>& in) {
    if (in.size() != 2 || in[0].rank != 2) throw std::invalid_argument("dequantize: expects q [rows, cols] and scale");
    return {{in[0].shape[0], in[0].shape[1]}};
}

// smooth_quant: xs [T, C], ws [C, N] and s [C] from x [T, C] and w [C, N].
std::vector<std::vector<std::int64_t>> smooth_quant_shapes(const std::vector<TensorView>& in) {
    if (in.size() != 2 || in[0].rank != 2 || in[1].rank != 2)
        throw std::invalid_argument("smooth_quant: expects x [T, C] and w [C, N]");
    return {{in[0].shape[0], in[0].shape[1]}, {in[1].shape[0], in[1].shape[1]}, {in[0].shape[1]}};
}

// h [T, d] and x_next [T, n, d] of hc_residual from x [T, n, d]; mhc_residual
// adds b [T, n, n] (the projection it mixed with).
std::vector<std::vector<std::int64_t>> hc_residual_shapes(const std::vector<TensorView>& in) {
    if (in.empty() || in[0].rank != 3) throw std::invalid_argument("hc_residual: input x must be [T, n, d]");
    const std::int64_t t = in[0].shape[0], n = in[0].shape[1], d = in[0].shape[2];
    return {{t, d}, {t, n, d}};
}
std::vector<std::vector<std::int64_t>> mhc_residual_shapes(const std::vector<TensorView>& in) {
    auto s = hc_residual_shapes(in);
    s.push_back({in[0].shape[0], in[0].shape[1], in[0].shape[1]});
    return s;
}

// int8_block: out, x1, q, k, v, o, u, x2 [T, d]; s, p [heads, T, T]; a [T, ffn]
// from h [T, d] and w1 [d, ffn] (input 9).
std::vector<std::vector<std::int64_t>> int8_block_shapes(const std::vector<TensorView>& in, const Params& p) {
    if (in.size() < 11 || in[0].rank != 2 || in[9].rank != 2)
        throw std::invalid_argument("int8_block: expects h [T, d], ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w1 [d, ffn], w2");
    const std::int64_t t = in[0].shape[0], d = in[0].shape[1], heads = static_cast<std::int64_t>(p.get("heads", 1));
    if (d < 1 || heads < 1 || d % heads != 0 || in[9].shape[1] < 1)
        throw std::invalid_argument("int8_block: needs d >= 1, heads >= 1 dividing d, and ffn >= 1 columns of w1");
    const std::vector<std::int64_t> td{t, d}, scores{heads, t, t};
    return {td, td, td, td, td, scores, scores, td, td, td, {t, in[9].shape[1]}};
}

// The router's parameters, shared by moe_router and the layers.
std::vector<ParamSpec> router_params() {
    return {{"k", 2, "experts chosen per token (1 <= k <= E)"},
            {"score", 0, "0: p = softmax(x w) over the experts; 1: p = sigmoid(x w) per expert"},
            {"renormalize", 1, "1: weights p_i / sum of the chosen p; 0: weights p_i"},
            {"capacity", 0, "c > 0: each expert takes at most floor(c T k / E) assignments, in token order "
                            "(then slot order); the rest are dropped (kept 0, weight 0); 0: no limit"},
            {"groups", 1, "group-limited selection (DeepSeek-V3's n_group): the experts in this many groups of E / groups "
                          "consecutive ids (at least group_top each when > 1); a group's score is the sum of its "
                          "group_top largest p_i + b_i; 1: no groups"},
            {"group_top", 2, "scores summed per group: 2 (DeepSeek-V3's top-2 sum) or 1 (DeepSeek-V2's largest score)"},
            {"topk_groups", 0, "groups kept per token (DeepSeek-V3's topk_group): only the experts of the topk_groups "
                               "groups of largest score may be chosen (ties: the lower group); 0: all groups"},
            {"scaling", 1, "routed scaling factor (> 0): every weight times it, after renormalization"}};
}

void add_moe_layers(std::vector<OpSpec>& s) {
    const char* expert = "expert i: SwiGLU (silu(v G_i) * (v U_i)) D_i with gate_up_i = [G_i | U_i] (F columns each) "
                         "and down_i = D_i";
    OpSpec moe{"moe", "moe", OpKind::structured,
               {"x", "router", "gate_up", "down", "shared_gate_up", "shared_down", "selection_bias"},
               {"y", "indices", "weights"}, router_params(),
               std::string("x [T, C], router [C, E], gate_up [E, C, 2F], down [E, F, C], optional shared experts "
                           "shared_gate_up [S, C, 2G] and shared_down [S, G, C], optional selection_bias [E]: eq 4.6, "
                           "y_t = sum_s shared_s(x_t) + sum_j g_tj routed_{i_tj}(x_t) with the router of moe_router "
                           "(indices, weights: outputs); ") +
                   expert + ".  A token whose computation meets a NaN or an infinity has y NaN throughout.  Judged "
                            "ambiguity-aware: y is the exact layer for the candidate's selection where the scores' "
                            "budget admits it"};
    moe.out_shapes_params = moe_layer_shapes;
    moe.staged = true;
    s.push_back(moe);
    std::vector<ParamSpec> lp = router_params();
    lp.push_back({"normalized", 1, "1: y = shared(x) + RMSNorm(u) latent_up (Normalized LatentMoE); 0: + u latent_up"});
    lp.push_back({"eps", 1e-6, "RMSNorm epsilon, inside the square root"});
    OpSpec lat{"latent_moe", "moe", OpKind::structured,
               {"x", "router", "latent_down", "latent_up", "gate_up", "down", "shared_gate_up", "shared_down",
                "norm_weight", "selection_bias"},
               {"y", "indices", "weights"}, lp,
               std::string("x [T, C], router [C, E], latent_down [C, L], latent_up [L, C], gate_up [E, L, 2F], "
                           "down [E, F, L], optional shared experts (full width, as moe), norm_weight [L] (default 1) "
                           "and selection_bias [E]: eq 4.7, z = x latent_down, u = sum_j g_tj routed_{i_tj}(z), y = "
                           "sum_s shared_s(x) + RMSNorm(u) latent_up (normalized) or u latent_up; the router reads x; ") +
                   expert + ".  Non-finite values and the ambiguity-aware verdict as moe"};
    lat.out_shapes_params = moe_layer_shapes;
    lat.staged = true;
    s.push_back(std::move(lat));
}

// topk_select: indices [Lq, k] (k + 1 with force_local = 2) from scores [Lq, N].
std::vector<std::vector<std::int64_t>> topk_select_shapes(const std::vector<TensorView>& in, const Params& p) {
    if (in.empty() || in[0].rank != 2) throw std::invalid_argument("topk_select: expects scores [Lq, N]");
    const auto k = static_cast<std::int64_t>(p.get("k", 4));
    return {{in[0].shape[0], k + (p.get("force_local", 0) == 2 ? 1 : 0)}};
}

// lightning_indexer: scores [Lq, N] from q [Lq, H, c] and k [N, c].
std::vector<std::vector<std::int64_t>> lightning_indexer_shapes(const std::vector<TensorView>& in) {
    if (in.size() < 2 || in[0].rank != 3 || in[1].rank != 2)
        throw std::invalid_argument("lightning_indexer: expects q [Lq, H, c], k [N, c], w [Lq, H]");
    return {{in[0].shape[0], in[1].shape[0]}};
}

// docs/sparse.md.  topk_select is staged: a candidate breaking exact ties
// another way is judged against its own (equally correct) selection.
void add_sparse_specs(std::vector<OpSpec>& s) {
    OpSpec sel{"topk_select", "sparse", OpKind::structured, {"scores"}, {"indices"},
               {{"k", 4, "entries chosen per query (>= 1)"},
                {"block", 1, "r: candidate n stands for keys [n r, n r + r - 1] (1: tokens)"},
                {"causal", 1, "0: every candidate; 1: the fully observed ones, n r + r - 1 <= offset + i (NSA and "
                              "DSA tokens, CSA and QSA blocks); 2: every started one, n r <= offset + i"},
                {"offset", 0, "position of query row 0 (decode: the number of earlier keys)"},
                {"force_local", 0, "0: none; 1: the query's own block floor((offset + i) / r) takes the first of "
                                   "the k slots (MSA's local block); 2: it comes first, in addition to the k (QSA's "
                                   "partial block)"}},
               "scores [Lq, N]: per query row i (position offset + i), the forced block (if any), then the eligible "
               "candidates of largest score in decreasing order (ties: the lower index): indices [Lq, k] (k + 1 with "
               "force_local = 2), ids stored as exact values, -1 in slots no eligible candidate fills.  A NaN "
               "score among a row's eligible candidates (the forced block's aside) makes the row NaN; -inf and +inf are ordinary scores.  "
               "Judged ambiguity-aware: exactly tied candidates may come in either order"};
    sel.out_shapes_params = topk_select_shapes;
    sel.staged = true;
    s.push_back(std::move(sel));
    s.push_back({"lightning_indexer", "sparse", OpKind::structured, {"q", "k", "w"}, {"scores"}, {},
                 "q [Lq, H, c], k [N, c] (one index key shared by the heads), w [Lq, H]: scores[t, s] = sum_h w[t, h] "
                 "ReLU(q[t, h] . k[s]) (DSA's and CSA's lightning indexer, seed 001 eqs 13-16), unmasked (the causal "
                 "limit is topk_select's); ReLU(NaN) = NaN, IEEE products and sums otherwise",
                 lightning_indexer_shapes});
}

// compressed_attention (docs/compressed_attention.md): o [H, L, c], comp
// [floor(L / m), c], indices [L, k] (CSA) or [L, N] (HCA).  Staged: the
// candidate's entries and selection feed the later stages' references.
std::vector<std::vector<std::int64_t>> compressed_attention_shapes(const std::vector<TensorView>& in, const Params& p) {
    if (in.size() < 3 || in[0].rank != 3)
        throw std::invalid_argument("compressed_attention: expects q [H, L, c], raw [L, c], ca, za [L, c], ba [m, c], ...");
    const auto m = static_cast<std::int64_t>(p.get("m", 4));
    if (m < 1) throw std::invalid_argument("compressed_attention: parameter 'm' must be >= 1");
    const std::int64_t h = in[0].shape[0], l = in[0].shape[1], c = in[0].shape[2], n = l / m;
    const std::int64_t slots = p.get("mode", 0) == 1 ? n : static_cast<std::int64_t>(p.get("k", 4));
    return {{h, l, c}, {n, c}, {l, slots}};
}

void add_compressed_attention_spec(std::vector<OpSpec>& s) {
    OpSpec csa{"compressed_attention", "sparse", OpKind::structured,
               {"q", "raw", "ca", "za", "ba", "cb", "zb", "bb", "iq", "iw"}, {"o", "comp", "indices"},
               {{"mode", 0, "0: CSA (overlapped compressor, lightning indexer, top-k); 1: HCA (compressor of group a "
                            "only, dense attention over every fully observed entry)"},
                {"m", 4, "tokens per compressed entry (CSA's m, 4 in V4; HCA's m', 128 in V4)"},
                {"k", 4, "CSA: entries selected per query (>= 1); HCA: not read"},
                {"window", 4, "raw entries of the sliding branch: s in (t - window, t] (0: none)"},
                {"scale", 0, "logit scale of the core attention (0: 1/sqrt(c))"}},
               "DeepSeek-V4 CSA / HCA (seed 001 1.5.3).  Compressor: entry i = sum_r S_r (.) C_r with ONE softmax per "
               "channel S = softmax_rows(Z_r + B_r) over grouping a's tokens [m i, m (i + 1)) and, in CSA for i >= 1, "
               "grouping b's [m (i - 1), m i) (the overlap; entry 0 pools a alone); N = floor(L / m), a shorter tail "
               "is not compressed.  CSA: scores I[t, i] = sum_h iw[t, h] ReLU(iq[t, h] . comp_i) over the stored "
               "entries, top k of the fully observed ones (m (i + 1) - 1 <= t; ties: the lower index; -1 empty).  HCA: "
               "indices [L, N] list the fully observed entries in index order (-1 after).  o: shared-KV MQA, each "
               "stored entry both key and value, one softmax over the selected (CSA) or visible (HCA) entries and "
               "the raw rows (t - window, t]; q and the entries RMS-normed by the caller.  A NaN score among a "
               "row's eligible entries makes its indices and o NaN.  Judged staged and ambiguity-aware: indices "
               "within the indexer's budget, o over the candidate's own entries and selection"};
    csa.out_shapes_params = compressed_attention_shapes;
    csa.staged = true;
    s.push_back(std::move(csa));
}

// dsa_attention: o [H, Lq, Dv], lse [H, Lq] and indices [Lq, k] from iq [Lq, Hi, c], q [H, Lq, D], v [1, Lk, Dv].
std::vector<std::vector<std::int64_t>> dsa_attention_shapes(const std::vector<TensorView>& in, const Params& p) {
    if (in.size() < 6 || in[0].rank != 3 || in[3].rank != 3 || in[5].rank != 3)
        throw std::invalid_argument("dsa_attention: expects iq [Lq, Hi, c], ik [Lk, c], iw [Lq, Hi], q [H, Lq, D], "
                                    "kv [1, Lk, D], v [1, Lk, Dv]");
    const std::int64_t h = in[3].shape[0], lq = in[3].shape[1];
    return {{h, lq, in[5].shape[2]}, {h, lq}, {lq, static_cast<std::int64_t>(p.get("k", 4))}};
}

// DeepSeek Sparse Attention (docs/dsa_attention.md): lightning indexer, top-k
// tokens per query shared by the heads, MQA over the selected latent entries.
// Staged: o and lse are judged over the candidate's own admissible selection.
void add_dsa_spec(std::vector<OpSpec>& s) {
    OpSpec dsa{"dsa_attention", "sparse", OpKind::structured, {"iq", "ik", "iw", "q", "kv", "v"}, {"o", "lse", "indices"},
               {{"k", 4, "tokens selected per query (>= 1)"},
                {"scale", 0, "softmax scale; 0 = 1/sqrt(D) (MLA's absorbed form wants 1/sqrt(d_nope + d_r): pass it)"}},
               "iq [Lq, Hi, c], ik [Lk, c], iw [Lq, Hi] (lightning_indexer's inputs), q [H, Lq, D] (the absorbed "
               "queries), kv [1, Lk, D] (the latent entries: the keys), v [1, Lk, Dv] (the values: in MLA the first "
               "d_c columns of kv); query row i at position p = Lk - Lq + i (bottom-right, decode).  I[i, s] = "
               "sum_h iw[i, h] ReLU(iq[i, h] . ik[s]); indices[i] = the k tokens s <= p of largest I[i, s] in "
               "decreasing order (ties: the lower index), -1 in slots no token fills, shared by every head; o[h, i] = "
               "sum_{s in indices[i]} softmax_s(scale q[h, i] . kv[s]) v[s], lse[h, i] the log-sum-exp.  A NaN "
               "eligible score makes the row's indices, o and lse NaN.  Judged ambiguity-aware: any selection within "
               "the indexer's budget passes, and o, lse are judged over the candidate's own selection"};
    dsa.out_shapes_params = dsa_attention_shapes;
    dsa.staged = true;
    s.push_back(std::move(dsa));
}

// docs/fp8.md.  fp8_quantize is staged: its codes are judged given the
// candidate's own scale, in the FP8 format of the candidate's q tensor.
void add_fp8_specs(std::vector<OpSpec>& s) {
    OpSpec quant{"fp8_quantize", "fp8", OpKind::structured, {"x"}, {"q", "scale"},
                 {{"br", 1, "block rows (1 x 128: activations, 128 x 128: weights)"},
                  {"bc", 128, "block columns"},
                  {"scale", 0, "0: s = RN_fp32(amax / fp8_max); 1: s = 2^ceil(log2(amax / fp8_max)) (both at least "
                               "2^-126)"},
                  {"saturate", 1, "1: codes past fp8_max (and +-Inf) become +-fp8_max; 0: they overflow (E5M2 "
                                  "+-Inf, E4M3 NaN)"},
                  {"static_scale", 0, "> 0: this FP32 scale for every block instead of amax (delayed scaling)"},
                  {"format", 0, "0: fp8_e4m3, 1: fp8_e5m2, when the oracle runs on x alone; a kernel's q tensor "
                                "carries its own format"}},
                 "x [R, C] (fp32 or bf16) in blocks of br x bc (tail blocks hold what is left): per block s = "
                 "RN_fp32(max(amax / fp8_max, 2^-126)) (or the power of two, or static_scale), q = RN_fp8(x / s) "
                 "with the candidate's own s (ties to even, saturating or not); a block holding NaN or +-Inf has s = "
                 "NaN and NaN codes (dynamic scales); scale [ceil(R/br), ceil(C/bc)] in FP32"};
    quant.out_shapes_params = fp8_quantize_shapes;
    quant.staged = true;
    s.push_back(std::move(quant));
    s.push_back({"fp8_gemm", "fp8", OpKind::structured, {"a", "scale_a", "b", "scale_b"}, {"y"},
                 {{"block", 128, "K block of both scales and of the promotion; B's scales are block x block"}},
                 "a [M, K] and b [K, N] FP8 codes (one format), scale_a [M, ceil(K/block)] (1 x block), scale_b "
                 "[ceil(K/block), ceil(N/block)] (block x block), FP32: y_ij = sum over K blocks kb of "
                 "scale_a[i, kb] scale_b[kb, j/block] sum_{k in kb} a_ik b_kj, the exact value rounded once into y "
                 "(BF16 or FP32: the kernel's output option); IEEE products for special values",
                 fp8_gemm_shapes});
}

// block_sparse_attention (docs/block_sparse_attention.md): o [Hq, L, Dv] and
// indices [G, L, k] (MSA) or [1, L, k + 1] (QSA).  Staged: o is judged over
// the candidate's own selection where the block scores' budget admits it.
std::vector<std::vector<std::int64_t>> block_sparse_attention_shapes(const std::vector<TensorView>& in, const Params& p) {
    if (in.size() < 3 || in[0].rank != 3 || in[1].rank != 3 || in[2].rank != 3)
        throw std::invalid_argument("block_sparse_attention: expects q [Hq, L, D], k [G, L, D], v [G, L, Dv], iq, ik, nq, nk");
    const auto k = static_cast<std::int64_t>(p.get("k", 2));
    const bool qsa = p.get("mode", 0) == 1;
    return {{in[0].shape[0], in[0].shape[1], in[2].shape[2]}, {qsa ? 1 : in[1].shape[0], in[0].shape[1], qsa ? k + 1 : k}};
}

void add_block_sparse_spec(std::vector<OpSpec>& s) {
    OpSpec b{"block_sparse_attention", "sparse", OpKind::structured, {"q", "k", "v", "iq", "ik", "nq", "nk"},
             {"o", "indices"},
             {{"mode", 0, "0: MSA (seed 001 §1.5.5), 1: QSA (§1.5.4)"},
              {"block", 4, "B_k (MSA) or r (QSA): block b holds tokens [b block, b block + block - 1]"},
              {"k", 2, "blocks selected per query: MSA's k slots include the forced own block; QSA's own block "
                       "comes on top of them"},
              {"scale", 0, "softmax scale of the main attention; 0 = 1/sqrt(D)"},
              {"rope_dim", 0, "QSA: the first rope_dim index dims rotate (half-split pairs); 0 = Di/2 rounded down "
                              "to even"},
              {"rope_base", 10000, "QSA: RoPE theta of the index branch"},
              {"eps", 1e-6, "QSA: the zero-centred RMSNorms' epsilon, inside the root"}},
             "q [Hq, L, D], k [G, L, D], v [G, L, Dv] (query head h reads group floor(h / (Hq/G))), iq [Gi, L, Di], "
             "ik [L, Di], nq [Di], nk [Di] (QSA's zero-centred norm weights).  MSA: Gi = G, token scores iq[g,t] . "
             "ik[j] / sqrt(Di) for j <= t, block score = max over the block's visible tokens, the own block "
             "floor(t / block) in slot 0, then the top k - 1 earlier blocks per group: indices [G, L, k].  QSA: "
             "K_b = RoPE(ZC-RMSNorm(mean of ik over block b; nk), p = b block), q~[h,t] = RoPE(ZC-RMSNorm(iq[h,t]; "
             "nq), p = t), score[t, b] = sum_h ReLU(q~ . K_b) over fully observed blocks (b block + block - 1 <= t), "
             "the own block first then the top k: indices [1, L, k + 1] shared by all heads (topk_select's rule: "
             "ties to the lower index, -1 in unfilled slots).  o [Hq, L, Dv]: exact softmax attention over the "
             "selected blocks' tokens j <= t.  Judged ambiguity-aware: a selection within the block scores' "
             "budget passes, and o is judged over the candidate's own selection"};
    b.out_shapes_params = block_sparse_attention_shapes;
    b.staged = true;
    s.push_back(std::move(b));
}

// nsa_attention (docs/nsa_attention.md): outputs o [Hq, Lq, Dv] and indices [Hkv, Lq, n].
std::vector<std::vector<std::int64_t>> nsa_attention_shapes(const std::vector<TensorView>& in, const Params& p) {
    if (in.size() < 4 || in[0].rank != 3 || in[1].rank != 3 || in[2].rank != 3)
        throw std::invalid_argument("nsa_attention: expects q [Hq, Lq, D], k [Hkv, Lk, D], v [Hkv, Lk, Dv], g [Hq, Lq, 3]");
    return {{in[0].shape[0], in[0].shape[1], in[2].shape[2]},
            {in[1].shape[0], in[0].shape[1], static_cast<std::int64_t>(p.get("n", 4))}};
}

// Native sparse attention (NSA, seed 001 §1.5.1, docs/nsa_attention.md).  Staged: o is
// judged given the candidate's own (admissible) selection.
void add_nsa_attention_spec(std::vector<OpSpec>& s) {
    OpSpec nsa{"nsa_attention", "sparse", OpKind::structured, {"q", "k", "v", "g"}, {"o", "indices"},
               {{"scale", 0, "softmax scale of every branch; 0 = 1/sqrt(D)"},
                {"block", 4, "l: compression and selection block (keys [b l, b l + l - 1]); a tail shorter than l is "
                             "not compressed"},
                {"n", 4, "selected blocks per query, the forced own block included (>= 1)"},
                {"window", 4, "w: the window branch sees keys (t - w, t] (>= 1)"},
                {"force_local", 1, "1: the query's own block floor(t / l) always selected, in slot 0; 0: none"}},
               "q [Hq, Lq, D], k [Hkv, Lk, D], v [Hkv, Lk, Dv], g [Hq, Lq, 3] gate logits (compressed, selected, "
               "window); query row i at position t = Lk - Lq + i (bottom-right); GQA head h -> floor(h Hkv / Hq).  "
               "o = sigmoid(g_c) o_c + sigmoid(g_s) o_s + sigmoid(g_w) o_w: o_c = softmax attention over the "
               "complete blocks b with b l + l - 1 <= t of K_cmp[b] = mean k, V_cmp[b] = mean v over the block "
               "(mean pooling for NSA's learned phi; 0 when none); indices [Hkv, Lq, n]: the own block, then the "
               "blocks of largest importance sum over the group's heads of softmax(scale q K_cmp) among the "
               "visible ones (ties: lower index), -1 in empty slots, ids as exact values; o_s = attention over the "
               "tokens s <= t of the selected blocks; o_w = attention over s in (t - w, t].  Judged "
               "ambiguity-aware: indices within the importance budget, o exact given the candidate's selection"};
    nsa.out_shapes_params = nsa_attention_shapes;
    nsa.staged = true;
    s.push_back(std::move(nsa));
}

// The residual reads (docs/residual.md): block_attn_res h [T, d] from v
// [N, T, d]; gated_residual h [T, d] and its gate [T, n d] from H [n, T, d].
std::vector<std::vector<std::int64_t>> block_attn_res_shapes(const std::vector<TensorView>& in) {
    if (in.empty() || in[0].rank != 3) throw std::invalid_argument("block_attn_res: input v must be [N, T, d]");
    return {{in[0].shape[1], in[0].shape[2]}};
}
std::vector<std::vector<std::int64_t>> gated_residual_shapes(const std::vector<TensorView>& in) {
    if (in.empty() || in[0].rank != 3) throw std::invalid_argument("gated_residual: input streams must be [n, T, d]");
    return {{in[0].shape[1], in[0].shape[2]}, {in[0].shape[1], in[0].shape[0] * in[0].shape[2]}};
}

void add_residual_specs(std::vector<OpSpec>& s) {
    s.push_back({"block_attn_res", "residual", OpKind::structured, {"v", "w", "norm_weight"}, {"h"},
                 {{"eps", 1e-6, "RMSNorm epsilon of the keys, inside the root: sqrt(mean(v^2) + eps)"}},
                 "Block Attention Residuals (Kimi, eqs 6.6-6.7): sources v [N, T, d] (the embedding, the completed "
                 "block sums, the current partial sum), pseudo-query w [d], optional key norm weight norm_weight [d] "
                 "(default 1); per token t: k_i = norm_weight * v_i / sqrt(mean(v_i^2) + eps), a_i = w . k_i, "
                 "alpha = softmax_i(a), h = sum_i alpha_i v_i [T, d] (keys normalized, values raw).  A token with a "
                 "non-finite logit (a NaN or infinite v, w or norm_weight) has h NaN",
                 block_attn_res_shapes});
    s.push_back({"gated_residual", "residual", OpKind::structured, {"streams", "g", "A", "B"}, {"h", "gate"},
                 {{"eps", 1e-6, "RMSNorm epsilon of every stream, inside the root"}},
                 "Gated Residual read (Qwen, eq 6.8): streams H [n, T, d], per-stream RMSNorm weights g [n, d], "
                 "low-rank map A [n d, r], B [r, n d]; per token z_i = g_i * H_i / sqrt(mean(H_i^2) + eps), z = "
                 "concat(z_1..z_n) [n d], gate = sigmoid((z A) B) [T, n d], h = sum_i gate_i * z_i [T, d].  IEEE "
                 "arithmetic for special values (a NaN or infinite stream value makes its token NaN)",
                 gated_residual_shapes});
}

// Multi-head latent attention (docs/mla.md), the parameters of oracle::eval_mla.
void add_mla_spec(std::vector<OpSpec>& s) {
    s.push_back({"mla", "mla", OpKind::structured,
                 {"h", "W_dkv", "W_uk", "W_uv", "W_q", "W_kr", "c_kv_cache", "k_r_cache"}, {"o", "lse"},
                 {{"form", 0, "0 explicit, 1 absorbed: the same value (the oracle's form)"},
                  {"causal", 1, "1: new token t sees keys j <= Lc + t (bottom-right over cache and new tokens)"},
                  {"scale", 0, "softmax scale; 0 = 1/sqrt(d_nope + d_r)"},
                  {"base", 10000, "RoPE theta of the rope parts (rotary dim d_r)"},
                  {"pairing", 0, "0 interleaved (2j, 2j+1), 1 half-split (j, j + d_r/2)"},
                  {"offset", 0, "position of the first new token (integer >= 0)"},
                  {"cache_rotated", 1, "1: k_r_cache holds RoPE(W_kr h_j) at its own position; 0: raw W_kr h_j, "
                                       "cached token j rotated at offset - Lc + j"}},
                 "h [L, d_model], W_dkv [d_c, d_model], W_uk [H, d_nope, d_c], W_uv [H, d_v, d_c], W_q [H, d_nope + "
                 "d_r, d_model], W_kr [d_r, d_model], optional c_kv_cache [Lc, d_c] and k_r_cache [Lc, d_r]: per new "
                 "token c_t = W_dkv h_t, k^R_t = RoPE(W_kr h_t) shared by all heads, [q^C; q^R] = W_q[i] h_t (q^R "
                 "rotated); over keys j < Lc + L (cache first) s_j = scale (q^C . W_uk[i] c_j + q^R . k^R_j), "
                 "o = sum_j softmax(s)_j W_uv[i] c_j [H, L, d_v] (before W_o), lse [H, L]",
                 mla_shapes});
}

std::vector<OpSpec> make_specs() {
    const std::vector<std::string> x{"x"}, y{"y"}, gu{"gate", "up"}, h{"h"};
    std::vector<OpSpec> s;
    s.push_back({"rms_norm", "norm", OpKind::row, {"x", "weight"}, y,
                 {{"eps", 1e-6, "added to the mean square, inside the square root"},
                  {"zero_centered", 0, "1: the weight is stored as w and applied as (1 + w)"}},
                 "y = w * x / sqrt(mean(x^2) + eps)"});
    s.push_back({"layer_norm", "norm", OpKind::row, {"x", "weight", "bias"}, y,
                 {{"eps", 1e-5, "added to the variance, inside the square root"}},
                 "y = w * (x - mean(x)) / sqrt(var(x) + eps) + b"});
    s.push_back({"l2_norm", "norm", OpKind::row, x, y,
                 {{"eps", 1e-6, "added to sum(x^2), inside the square root"}},
                 "y = x / sqrt(sum(x^2) + eps)"});
    s.push_back({"sigmoid", "activation", OpKind::unary, x, y, {}, "y = 1 / (1 + exp(-x))"});
    s.push_back({"silu", "activation", OpKind::unary, x, y, {}, "y = x * sigmoid(x)"});
    s.push_back({"gelu_erf", "activation", OpKind::unary, x, y, {}, "y = x/2 * (1 + erf(x / sqrt(2)))"});
    s.push_back({"gelu_tanh", "activation", OpKind::unary, x, y, {},
                 "y = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))"});
    s.push_back({"softplus", "activation", OpKind::unary, x, y, {}, "y = log(1 + exp(x))"});
    s.push_back({"softcap", "activation", OpKind::unary, x, y, {{"beta", 30, "cap, > 0"}},
                 "y = beta * tanh(x / beta)"});
    s.push_back({"swiglu", "gated", OpKind::gated, gu, h, {}, "h = silu(gate) * up"});
    s.push_back({"geglu", "gated", OpKind::gated, gu, h, {}, "h = gelu_erf(gate) * up"});
    s.push_back({"situ_glu", "gated", OpKind::gated, gu, h,
                 {{"beta1", 4, "cap of the gate's linear factor"}, {"beta2", 25, "cap of the up branch"}},
                 "h = [beta1 tanh(gate/beta1) sigmoid(gate)] * [beta2 tanh(up/beta2)]"});
    s.push_back({"swiglu_clamp", "gated", OpKind::gated, gu, h,
                 {{"limit", 10, "gate capped above at limit; up clamped to [-limit, limit]"}},
                 "h = silu(min(gate, limit)) * clamp(up, -limit, limit)"});
    s.push_back({"softmax", "softmax", OpKind::row, x, y, {},
                 "y = exp(x - max x) / sum exp(x - max x) over the last dimension; a NaN or +inf makes the row "
                 "NaN, an all -inf row is all 0"});
    s.push_back({"lse_merge", "softmax", OpKind::structured, {"o_a", "lse_a", "o_b", "lse_b"}, {"o", "lse"}, {},
                 "lse = log(e^lse_a + e^lse_b), o = e^(lse_a - lse) o_a + e^(lse_b - lse) o_b per row; the empty "
                 "state (0, -inf) is the identity",
                 lse_merge_shapes});
    s.push_back({"rope", "rope", OpKind::structured, x, y,
                 {{"pairing", 0, "0: interleaved pairs (2j, 2j+1); 1: half-split pairs (j, j + r/2)"},
                  {"base", 10000, "theta base b"},
                  {"ntk_scale", 1, "NTK-aware scaling s: theta_j = (b s)^(-2j/r)"},
                  {"rotary_dim", 0, "r: dims rotated (0 = the head dim D); the rest pass through"},
                  {"offset", 0, "position of the first token (KV cache)"},
                  {"scaling", 0, "frequency scaling: 0 none, 1 linear, 2 llama3, 3 yarn (docs/rope.md)"},
                  {"factor", 1, "the scaling's factor: theta'_j = theta_j (w_j + (1 - w_j) / factor)"},
                  {"low_freq_factor", 1, "llama3: pairs of wavelength above original_max_pos / low_freq_factor divided"},
                  {"high_freq_factor", 4, "llama3: pairs of wavelength below original_max_pos / high_freq_factor kept"},
                  {"original_max_pos", 8192, "llama3, yarn: the trained context length L0"},
                  {"beta_fast", 32, "yarn: rotations at the correction range's low end"},
                  {"beta_slow", 1, "yarn: rotations at the correction range's high end"},
                  {"truncate", 1, "yarn: 1 rounds the correction range out to integers"},
                  {"attention_factor", 1, "multiplies cos and sin (YaRN's mscale)"}},
                 "x [H, L, D]: pair j of token l rotated by (offset + l) * theta'_j, theta_j = (b s)^(-2j/r) "
                 "scaled by the frequency scaling; cos and sin times attention_factor"});
    s.push_back({"attention", "attention", OpKind::structured, {"q", "k", "v", "mask"}, {"o", "lse"}, attention_params(),
                 "q [Hq, Lq, D], k [Hkv, Lk, D], v [Hkv, Lk, Dv], optional additive mask [Lq, Lk]: o = softmax(scale "
                 "q k^T + mask) v per head, KV head floor(h / (Hq / Hkv)); lse [Hq, Lq]; fully masked rows o = 0, "
                 "lse = -inf",
                 attention_shapes});
    s.push_back({"gated_attention", "attention", OpKind::structured, {"q", "k", "v", "g", "mask"}, {"o", "lse"},
                 attention_params(),
                 "G1 gated attention (eq 1.27): attention's q, k, v and optional mask with gate logits g [Hq, Lq, Dv] "
                 "(the gate projection x W_theta per head): o = softmax(scale q k^T + mask) v * sigmoid(g) "
                 "elementwise; lse [Hq, Lq] is attention's, ungated; fully masked rows o = 0 * sigmoid(g) = 0, lse = "
                 "-inf; the output projection W_O is matmul's",
                 attention_shapes});
    s.push_back({"sink_attention", "attention", OpKind::structured, {"q", "k", "v", "sinks", "mask"}, {"o", "lse"},
                 attention_params(),
                 "attention with a learned sink logit per query head (GPT-OSS): sinks [Hq] joins every row's softmax "
                 "as one more logit whose value row is 0, o = sum_j e^(s_j) v_j / (e^(sink_h) + sum_j e^(s_j)), "
                 "lse = log(e^(sink_h) + sum_j e^(s_j)); a row that sees no key is (0, sink_h); sink_h = -inf is "
                 "attention",
                 attention_shapes});
    const std::vector<std::string> delta_in{"q", "k", "v", "g", "beta", "initial_state", "cu_seqlens"}, delta_out{"y", "state"};
    s.push_back({"gdn", "gdn", OpKind::structured, delta_in, delta_out, delta_rule_params(),
                 "Gated DeltaNet: q, k [T, H, d_k], v [T, H, d_v], log-decay g [T, H], beta [T, H], optional "
                 "initial_state S_0 [H, d_k, d_v]; per head S_t = e^{g_t} (I - beta_t k_t k_t^T) S_{t-1} + beta_t "
                 "k_t v_t^T, y_t = S_t^T q_t [T, H, d_v]; state = S_T. Optional cu_seqlens {0, t_1, ..., T}: N "
                 "packed sequences, each from its own initial_state [N, H, d_k, d_v] (empty: zero), state [N, H, d_k, "
                 "d_v]",
                 delta_rule_shapes});
    s.push_back({"kda", "gdn", OpKind::structured, delta_in, delta_out, delta_rule_params(),
                 "Kimi Delta Attention: as gdn with a log-decay per key channel g [T, H, d_k]: S_t = (I - beta_t k_t "
                 "k_t^T) Diag(e^{g_t}) S_{t-1} + beta_t k_t v_t^T (the decay scales the rows of S, before the "
                 "delta update), y_t = S_t^T q_t; state = S_T; cu_seqlens as gdn",
                 delta_rule_shapes});
    s.push_back({"sinkhorn", "sinkhorn", OpKind::structured, {"logits"}, {"b"},
                 {{"iters", 20, "Sinkhorn-Knopp iterations, each a row then a column normalization"},
                  {"eps", 0, "guard added to every line sum before dividing, v / (sum + eps) (0: none); relative to "
                             "the row-shifted start exp(logits - row max)"}},
                 "logits [n, n] or [batch, n, n]: b = `iters` row/column normalizations of exp(logits) (mHC's "
                 "projection onto the doubly stochastic matrices); a NaN or +inf logit makes its matrix NaN, -inf "
                 "is a structural zero, a line summing to 0 is left unchanged"});
    s.push_back({"hc_residual", "hc_residual", OpKind::structured, {"x", "f", "a_logits", "b", "c_logits"},
                 {"h", "x_next"}, {},
                 "Hyper-Connections mixings around a layer F, per token t: streams x [T, n, d], layer output f = "
                 "F(h) [T, d], logits a_logits [T, n] and c_logits [T, n], free mixing matrix b [T, n, n]: h = "
                 "sum_i sigmoid(a_i) x_i [T, d] (the layer input), x_next = b x + 2 sigmoid(c) f [T, n, d]; "
                 "IEEE arithmetic for special values (0 * inf = NaN)",
                 hc_residual_shapes});
    s.push_back({"mhc_residual", "hc_residual", OpKind::structured, {"x", "f", "a_logits", "b_logits", "c_logits"},
                 {"h", "x_next", "b"},
                 {{"iters", 20, "Sinkhorn-Knopp iterations of the projection, each a row then a column normalization"},
                  {"eps", 0, "the projection's guard, as sinkhorn's: v / (sum + eps) (0: none)"}},
                 "mHC: hc_residual with b = sinkhorn(b_logits) (the doubly stochastic projection, as op sinkhorn), "
                 "also returned as b [T, n, n]",
                 mhc_residual_shapes});
    s.push_back({"quantize", "int8", OpKind::structured, x, {"q", "scale"},
                 {{"axis", 0, "scale groups: 0 per tensor, 1 per token (row), 2 per channel (column)"},
                  {"scale", 0, "> 0: a static FP32 scale for every group (calibration); 0: amax / 127 per group"}},
                 "x [rows, cols]: scale = fl32(amax / 127) per group, q = clamp(round_half_even(x / scale), -127, "
                 "127) with x / scale exact; amax 0: scale 0, q 0; a non-finite group: scale NaN, q 0; scale is "
                 "stored [rows, cols] with each element's group scale",
                 quantize_shapes});
    s.push_back({"int8_gemm", "int8", OpKind::structured, {"a", "b", "scale_a", "scale_b"}, {"acc", "y"}, {},
                 "a [M, K], b [K, N] int8 codes (-128 allowed); scale_a [M] or [1], scale_b [N] or [1]: acc = a b "
                 "exactly (INT32: |acc| <= K 2^14), y = acc * scale_a[i] * scale_b[j]",
                 int8_gemm_shapes});
    s.push_back({"dequantize", "int8", OpKind::structured, {"q", "scale"}, y,
                 {{"axis", 0, "scale groups: 0 per tensor (scale [1]), 1 per token (scale [rows]), 2 per channel "
                              "(scale [cols])"}},
                 "q [rows, cols] int8 codes (-128 allowed): y = q * scale[group], the exact product rounded once "
                 "into y's format; IEEE products for special scales (a NaN scale, or 0 * inf, gives NaN)",
                 dequantize_shapes});
    s.push_back({"smooth_quant", "int8", OpKind::structured, {"x", "w"}, {"xs", "ws", "s"},
                 {{"alpha", 0.5, "migration strength in [0, 1]: s_j = max|x_j|^alpha / max|w_j|^(1 - alpha)"}},
                 "x [T, C] activations, w [C, N] weights: s_j = max_t |x_tj|^alpha / max_k |w_jk|^(1 - alpha) "
                 "(the exact real), xs = x diag(s)^-1, ws = diag(s) w, so xs ws = x w; a channel whose activation "
                 "or weight maximum is 0 has s_j = 1; a NaN or infinity in column j of x or row j of w makes s_j "
                 "NaN; s is stored [C]",
                 smooth_quant_shapes});
    OpSpec block{"int8_block", "int8", OpKind::structured,
                 {"h", "ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w1", "w2"},
                 {"out", "x1", "q", "k", "v", "s", "p", "o", "u", "x2", "a"},
                 {{"heads", 1, "attention heads (d divisible by heads)"},
                  {"eps", 1e-5, "LayerNorm epsilon, inside the square root"}},
                 "seed 000's SmoothQuant precision flow of a pre-norm block, h [T, d]: x1 = LN1(h); q, k, v = x1 "
                 "W_q, W_k, W_v; per head s = q k^T / sqrt(d/heads) (causal: -inf for j > i), p = softmax(s), o = p "
                 "v; u = h + o W_o; x2 = LN2(u); a = ReLU(x2 W_1); out = u + a W_2.  Every product an INT8 GEMM "
                 "(left operand per token, right per output channel, dynamic amax scales), every other stage FP16.  "
                 "Staged: each output is judged against the exact stage applied to the candidate's own earlier "
                 "outputs; with the inputs alone the oracle is the all-real block"};
    block.out_shapes_params = int8_block_shapes;
    block.staged = true;
    s.push_back(std::move(block));
    s.push_back({"matmul", "matmul", OpKind::structured, {"a", "b"}, y, {},
                 "a [M, K], b [K, N] row-major: y_ij = sum_k a_ik b_kj, the exact sum rounded once into y's format "
                 "(FP32, or a 16-bit format: the kernel's output option); IEEE products and sums for special "
                 "values (0 * inf = NaN, inf - inf = NaN)",
                 matmul_shapes});
    OpSpec router{"moe_router", "moe", OpKind::structured, {"x", "w", "selection_bias"}, {"indices", "weights", "kept", "loss"},
                  router_params(),
                  "x [T, C], w [C, E], optional selection_bias b [E]: logits l = x w (exact), p = softmax(l) or "
                  "sigmoid(l); each token chooses the k experts of largest p_i + b_i (ties: the lower index), in "
                  "decreasing order, among the experts of its topk_groups best groups (group score: the sum of the "
                  "group's group_top largest p_i + b_i) when groups > 1: indices [T, k]; weights scaling * p_i "
                  "(renormalized over the k chosen, or not): the bias never enters a weight; kept [T, k] 1 or 0 (capacity); loss [1] = E sum_i f_i P_i with f_i the "
                  "share of tokens choosing expert i and P_i the mean over tokens of p_i (sigmoid: p_i / sum_j p_j). "
                  "A token with a non-finite logit has NaN indices, weights and kept, and makes the loss NaN.  "
                  "Judged ambiguity-aware: any selection within the scores' budget of the oracle's passes"};
    router.out_shapes_params = moe_router_shapes;
    router.staged = true;
    s.push_back(std::move(router));
    add_moe_layers(s);
    add_fp8_specs(s);
    add_sparse_specs(s);
    add_compressed_attention_spec(s);
    add_block_sparse_spec(s);
    add_mla_spec(s);
    add_dsa_spec(s);
    add_nsa_attention_spec(s);
    add_residual_specs(s);
    return s;
}

}  // namespace

const std::vector<OpSpec>& op_specs() {
    static const std::vector<OpSpec> specs = make_specs();
    return specs;
}

bool optional_input(std::string_view input_name) {
    return input_name == "mask" || input_name == "initial_state" || input_name == "cu_seqlens" ||
           input_name == "selection_bias" || input_name == "shared_gate_up" || input_name == "shared_down" ||
           input_name == "norm_weight" || input_name == "c_kv_cache" || input_name == "k_r_cache";
}

bool softmax_attention_op(std::string_view op) {
    return op == "attention" || op == "gated_attention" || op == "sink_attention";
}

std::size_t attention_mask_input(std::string_view op) { return op == "gated_attention" || op == "sink_attention" ? 4 : 3; }

std::vector<std::vector<std::int64_t>> output_shapes(const OpSpec& op, const std::vector<TensorView>& in, const Params& p) {
    if (op.out_shapes_params) return op.out_shapes_params(in, p);
    if (op.out_shapes) return op.out_shapes(in);
    return std::vector<std::vector<std::int64_t>>(op.outputs.size(), {in.at(0).shape.begin(), in.at(0).shape.begin() + in.at(0).rank});
}

const OpSpec* find_op(std::string_view name) {
    for (const auto& s : op_specs())
        if (s.name == name) return &s;
    return nullptr;
}

std::vector<std::string> op_names() {
    std::vector<std::string> n;
    for (const auto& s : op_specs()) n.push_back(s.name);
    return n;
}

Params Params::defaults(const OpSpec& op) {
    Params p;
    for (const auto& ps : op.params) p.set(ps.name, ps.default_value);
    return p;
}

double Params::get(const std::string& name, double fallback) const {
    auto it = v_.find(name);
    return it == v_.end() ? fallback : it->second;
}

double Params::at(const std::string& name) const {
    auto it = v_.find(name);
    if (it == v_.end()) throw std::out_of_range("missing op parameter '" + name + "'");
    return it->second;
}

}  // namespace conform
