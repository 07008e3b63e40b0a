// Oracle of block_sparse_attention (docs/block_sparse_attention.md): block
// selection by an index branch, then exact softmax attention over the tokens
// of the selected blocks.  Two modes of seed 001 §1.5:
//   MSA (mode 0, §1.5.5): one index query head per GQA group, token scores
//     iq[g,t] . ik[j] / sqrt(Di), block score = the max over the block's
//     visible tokens, the query's own block forced into slot 0, top k per group;
//   QSA (mode 1, §1.5.4): H_idx index query heads shared by all query heads,
//     block keys ZC-RMSNorm(mean of the block's index keys) rotated at p_b = b r,
//     score[t, b] = sum_h ReLU(q~_h . K_b) over fully observed blocks, the
//     query's own (partial) block first in addition to the k.
// The op is staged: a candidate's selection is accepted where the block
// scores' budget admits it (oracle::selection_admissible), and its o is
// judged against exact attention over its own selection.
#pragma once
#include <cstdint>
#include <vector>

#include "oracle/sparse.hpp"

namespace conform::oracle {

struct BlockSparseSetup {
    std::int64_t mode = 0;  // 0 MSA, 1 QSA
    std::int64_t hq = 0, groups = 0, len = 0, d = 0, dv = 0, gi = 0, di = 0;
    std::int64_t block = 1, k = 1, rope_dim = 0;
    double scale = 0, rope_base = 10000, eps = 1e-6;
    double pow_units = 2;         // QSA's RoPE: pow within the kernel's declared ulps (oracle::rope_pow_units)
    std::int64_t sel_groups = 1;  // selections: G (MSA) or 1 (QSA)
    std::int64_t blocks = 0;      // ceil(L / block)
    SelectSetup select;           // the topk_select view of one selection group
    bool staged = false;          // the candidate's o and indices follow the 7 inputs
};
BlockSparseSetup block_sparse_setup(const Params& p, const std::vector<TensorView>& in);

// The block scores the selection ranks, [sel_groups, L, blocks] (exact values
// rounded to double; only the eligible entries of each row are computed, the
// rest 0), their budgets delta (same layout) and, per [sel_groups, L] row,
// whether the row's budget is undefined (a non-finite score or magnitude, a
// stage that may overflow, RMSNorm's root not determined).
struct BlockSparseScores {
    std::vector<double> score, delta;
    std::vector<char> undefined;
};
BlockSparseScores block_sparse_scores(const BlockSparseSetup& s, const std::vector<TensorView>& in);

// The tokens j <= t of the blocks ids[0 .. slots) (an id below 0 or NaN:
// none), in increasing order, each once: what query t attends (the oracle's
// and the kernels' gather).
std::vector<std::int64_t> block_sparse_tokens(const double* ids, std::int64_t slots, std::int64_t block, std::int64_t len,
                                              std::int64_t t);
// Rows `rows` of heads [h0, h0 + nh) of a [H, L, w] tensor, as [nh, rows, w]
// in its format (bits copied).
Tensor gather_head_rows(const TensorView& t, std::int64_t h0, std::int64_t nh, const std::vector<std::int64_t>& rows);

// Registry evaluator: inputs q [Hq, L, D], k [G, L, D], v [G, L, Dv],
// iq [Gi, L, Di], ik [L, Di], nq [Di], nk [Di] (QSA's norm weights; read by
// MSA's shape check only), then, staged, the candidate's o and indices.
// Outputs o [Hq, L, Dv], indices [G, L, k] (MSA) or [1, L, k + 1] (QSA).
OpOutputs eval_block_sparse_attention(const Params& params, const std::vector<TensorView>& in);

// Bounds: o by attention_bound over the selection's 0/-inf mask; indices 0
// (exact, ambiguity-aware), kUndefined on rows whose score budget is
// undefined; o kUndefined on rows without a selection to judge it over.
std::vector<std::vector<double>> block_sparse_attention_bound(const Params& params, const std::vector<TensorView>& in,
                                                              const std::vector<std::vector<double>>& exact, Format acc,
                                                              const std::vector<Format>& out);

}  // namespace conform::oracle
