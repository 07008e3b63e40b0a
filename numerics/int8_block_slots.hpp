// The input and output slots of the int8_block op, in the order of its OpSpec
// (numerics/op.cpp): the oracle's evaluation, its bound and the CPU kernel
// all index the tensor lists with these.
#pragma once

namespace conform::int8_block_slots {

enum In { h_in, ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w1, w2, n_inputs };
enum Out { out_o, x1_o, q_o, k_o, v_o, s_o, p_o, o_o, u_o, x2_o, a_o, n_outputs };

}  // namespace conform::int8_block_slots
