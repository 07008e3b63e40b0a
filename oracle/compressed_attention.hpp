// Oracle of DeepSeek-V4's compressed attention (docs/compressed_attention.md):
// CSA (mode 0: overlapped token-level compressor, lightning indexer, top-k
// selection, core attention) and HCA (mode 1: compressor without overlap,
// dense attention over every visible entry), each with a sliding window of
// raw entries in the same softmax.
//
// Inputs q [H, L, c], raw [L, c], ca, za [L, c], ba [m, c], cb, zb [L, c],
// bb [m, c], iq [L, Hi, c], iw [L, Hi] (HCA reads q, raw, ca, za, ba only;
// the others must still have their shapes).  Outputs o [H, L, c],
// comp [N, c] (N = floor(L / m)), indices [L, k] (CSA) or [L, N] (HCA: the
// visible entries in index order).  Staged: a candidate's comp, indices
// and o follow the inputs; the indexer and the attention then read the
// candidate's stored entries; indices is the candidate's row where the
// indexer's budget admits it, and o attends to the candidate's own
// selection wherever its slots are -1 or entry ids.
#pragma once
#include <cstdint>
#include <vector>

#include "oracle/structured.hpp"

namespace conform::oracle {

struct CsaSetup {
    std::int64_t mode = 0, m = 4, k = 4, window = 4;
    double scale = 0;  // resolved: 1/sqrt(c) for the parameter 0
    std::int64_t heads = 0, tokens = 0, dim = 0, index_heads = 0, entries = 0;
    std::int64_t slots = 0;  // k (CSA) or N (HCA)
    bool staged = false;
};
CsaSetup csa_setup(const Params& p, const std::vector<TensorView>& in);

// Whether entry n is fully observed at token t: m (n + 1) - 1 <= t.
inline bool csa_observed(const CsaSetup& s, std::int64_t n, std::int64_t t) { return s.m * (n + 1) - 1 <= t; }

OpOutputs eval_compressed_attention(const Params& params, const std::vector<TensorView>& in);

// Per output: comp by attention_bound of the compressor in attention form
// (one query per entry and channel, logits [1, 1] . [z, b], values c), the
// indices exact (0; NaN for a NaN row; kUndefined where the indexer may
// overflow), o by attention_bound over the entries and raw rows the
// reference attends to (a 0/-inf mask).  Key tiles: declared.compressor_block
// and declared.key_block where the kernel declares them, else one per key.
std::vector<std::vector<double>> compressed_attention_bound(const Params& params, const std::vector<TensorView>& in,
                                                            const std::vector<std::vector<double>>& exact, Format acc,
                                                            const std::vector<Format>& out);

}  // namespace conform::oracle
