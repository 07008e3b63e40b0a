// The input and output slots of the int8_block op, in the order of its OpSpec
// (numerics/op.cpp): the oracle's evaluation, its bound and the CPU kernel
// all index the tensor lists with these.
#pragma once
#include <cstdint>
#include <vector>

#include "numerics/op.hpp"
#include "numerics/tensor.hpp"

namespace conform::int8_block_slots {

enum In { h_in, ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w1, w2, n_inputs };
enum Out { out_o, x1_o, q_o, k_o, v_o, s_o, p_o, o_o, u_o, x2_o, a_o, n_outputs };

// The block's dimensions from its inputs (11, or 22 with a candidate's staged
// outputs appended) and the `heads` parameter; std::invalid_argument naming
// the input and dimension that do not fit.
struct Dims {
    std::int64_t t, d, heads, dh, ffn;
};
Dims block_dims(const Params& p, const std::vector<TensorView>& in);

}  // namespace conform::int8_block_slots
