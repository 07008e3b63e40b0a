// Oracle of sparse-attention selection (docs/sparse.md): ops topk_select and
// lightning_indexer (oracle/sparse_indexer.cpp).
//
// Each query row i (position offset + i) chooses among the candidates n
// (tokens, or blocks of r keys) its causal limit allows, the k of largest
// score in decreasing order (ties: the lower index), with the query's own
// block forced first where the op says so.  The scores are the op's inputs,
// exact: a sound kernel compares them exactly, so the only ambiguity is an
// exact tie, and the verdict accepts either order of tied candidates
// (router_admissible with a zero budget, the rule of docs/moe.md).
#pragma once
#include <cstdint>
#include <vector>

#include "oracle/moe.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {

struct SelectSetup {
    std::int64_t queries = 0, candidates = 0, k = 0, block = 1, causal = 1, offset = 0, force_local = 0;
    std::int64_t slots = 0;  // k, or k + 1 with force_local = 2
    bool staged = false;     // a candidate's indices follow the scores
};
SelectSetup select_setup(const Params& p, const std::vector<TensorView>& in);

// Whether query row i may choose candidate n (its causal limit).
bool select_eligible(const SelectSetup& s, std::int64_t i, std::int64_t n);
// The query's own block floor((offset + i) / r), or -1 when no block is forced.
std::int64_t forced_block(const SelectSetup& s, std::int64_t i);

// Query row i's selection from its scores: the forced block, then the
// eligible candidates by decreasing score (ties: the lower index), -1 in the
// slots no candidate fills; NaN throughout when an eligible score is NaN.
std::vector<double> select_row(const SelectSetup& s, const std::vector<double>& scores, std::int64_t i);

// Whether `chosen` (a row of slots) is a correct selection for query row i
// under scores known within `delta` (per candidate; zeros: the op's exact
// scores): the forced block where it must be, distinct eligible candidates
// otherwise, as many as there are (the rest -1), each admissible by
// router_admissible over the eligible ones.
bool selection_admissible(const SelectSetup& s, const std::vector<double>& scores, const std::vector<double>& delta,
                          std::int64_t i, const std::vector<double>& chosen);

// lightning_indexer (DSA, CSA): I[t, s] = sum_h w[t, h] ReLU(q[t, h] . k[s])
// for q [Lq, H, c], k [N, c] (one key shared by the heads), w [Lq, H]; the
// dot products exact, ReLU(NaN) = NaN.
OpOutputs eval_lightning_indexer(const Params& params, const std::vector<TensorView>& in);
// I's budget for a kernel forming each dot product and the weighted head sum
// in FP32 (docs/sparse.md, "Error budget of the indexer"); NaN where the
// exact score is NaN, kUndefined where an FP32 dot or sum may overflow.
std::vector<std::vector<double>> lightning_indexer_bound(const Params& params, const std::vector<TensorView>& in,
                                                         const std::vector<std::vector<double>>& exact, Format acc,
                                                         const std::vector<Format>& out);

OpOutputs eval_topk_select(const Params& params, const std::vector<TensorView>& in);
// indices are exact: bound 0 (NaN, compared by class, where the exact row is NaN).
std::vector<std::vector<double>> topk_select_bound(const Params& params, const std::vector<TensorView>& in,
                                                   const std::vector<std::vector<double>>& exact, Format acc,
                                                   const std::vector<Format>& out);

}  // namespace conform::oracle
