// Packed variable-length calls of the gated delta rule (ops gdn and kda,
// docs/gdn.md "Variable-length packing"): inputs q, k, v, g, beta hold the
// tokens of N sequences one after another, cu_seqlens = {0, t_1, ..., T}
// says where each starts, initial_state is [N, H, d_k, d_v] (one per
// sequence) and the returned state [N, H, d_k, d_v].  Sequence n is
// tokens [cu[n], cu[n+1]) and never sees another sequence's state.
//
// The oracle, the bound and the kernels all cut a packed call the same way,
// through these functions, so that a packed call is by definition N
// separate calls; the property varlen_packing checks that a kernel agrees.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "numerics/tensor.hpp"

namespace conform {

// Positions of the optional inputs in the op's input list (numerics/op.cpp).
inline constexpr std::size_t kDeltaInitialState = 5, kDeltaCuSeqlens = 6;

// Whether optional input i is given: present and not empty.  An empty view
// (numel 0) stands for an absent initial_state when cu_seqlens follows it.
bool delta_input_given(const std::vector<TensorView>& in, std::size_t i);

// cu_seqlens of a call with `tokens` tokens: {0, T} when not given.  Values
// must be integers, nondecreasing, from 0 to T (std::invalid_argument
// naming the first violation otherwise).
std::vector<std::int64_t> delta_cu_seqlens(const std::vector<TensorView>& in, std::int64_t tokens);

// Whether the call is packed (cu_seqlens given).
inline bool delta_packed(const std::vector<TensorView>& in) { return delta_input_given(in, kDeltaCuSeqlens); }

// The inputs of sequence n alone: q, k, v, g, beta cut to its tokens, then
// initial_state[n] when given (views over the same memory).
std::vector<TensorView> delta_sequence_inputs(const std::vector<TensorView>& in, const std::vector<std::int64_t>& cu,
                                              std::size_t n);

// The outputs y, state of sequence n within the packed outputs.
std::vector<TensorView> delta_sequence_outputs(const std::vector<TensorView>& out, const std::vector<std::int64_t>& cu,
                                               std::size_t n);

}  // namespace conform
