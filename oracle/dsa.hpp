// Oracle of DeepSeek Sparse Attention (op `dsa_attention`,
// docs/dsa_attention.md): the lightning indexer scores every earlier token,
// each query keeps the k tokens of largest score (shared by its heads), and
// every head attends over the selected latent entries (MQA: one KV head).
//
// The op is staged (OpSpec::staged): with the candidate's o, lse and indices
// appended to the inputs, a query row takes the candidate's selection where
// it is admissible under the indexer's budget (oracle::selection_admissible),
// and o, lse are the exact attention over that selection.
#pragma once
#include <cstdint>
#include <vector>

#include "oracle/sparse.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

struct DsaSetup {
    std::int64_t lq = 0, lk = 0, hi = 0, c = 0, h = 0, d = 0, dv = 0, k = 0;
    SelectSetup select;  // token selection: Lq rows, Lk candidates, causal 1, offset Lk - Lq
    bool staged = false; // the candidate's o, lse and indices follow the six inputs
};
DsaSetup dsa_setup(const Params& p, const std::vector<TensorView>& in);

// The indexer's scores [Lq, Lk] (exact, to double) and, per score, the
// budget a selection is judged with: the indexer's bound, 0 where the exact
// score is not finite (compared by class), +inf where the bound is undefined
// (an FP32 dot or sum may overflow).  undefined[i]: row i has such a score
// among its eligible tokens.
struct DsaScores {
    std::vector<double> score, delta;
    std::vector<char> undefined;
};
DsaScores dsa_scores(const DsaSetup& s, const std::vector<TensorView>& in);

// Row i's scores and budgets as selection_admissible reads them.
std::vector<double> dsa_row(const DsaSetup& s, const std::vector<double>& v, std::int64_t i);

// The additive mask [Lq, Lk] of a selection (ids per row, -1 empty): 0 on the
// selected tokens, -inf elsewhere, NaN throughout a NaN row.
Tensor dsa_mask(const DsaSetup& s, const std::vector<double>& indices);

// The mask of the oracle's own selection for the op's six inputs (before
// any candidate's): what the probabilistic tier's model check reads.
Tensor dsa_exact_mask(const Params& p, const std::vector<TensorView>& in);

OpOutputs eval_dsa_attention(const Params& params, const std::vector<TensorView>& in);

// Bounds of o, lse (attention_bound over the mask of the selection the
// oracle used, exact[2]) and indices (0, NaN on a NaN row).  A row whose
// eligible scores' budget is undefined: indices kUndefined, and o, lse too
// unless the candidate's own selection was the one judged.
std::vector<std::vector<double>> dsa_attention_bound(const Params& params, const std::vector<TensorView>& in,
                                                     const std::vector<std::vector<double>>& exact, Format acc,
                                                     const std::vector<Format>& out);

}  // namespace conform::oracle
