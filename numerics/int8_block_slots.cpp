#include "numerics/int8_block_slots.hpp"

#include <stdexcept>
#include <string>

#include "numerics/shape_check.hpp"

namespace conform::int8_block_slots {

Dims block_dims(const Params& p, const std::vector<TensorView>& in) {
    const std::string op = "int8_block";
    if (in.size() != n_inputs && in.size() != std::size_t{n_inputs} + n_outputs)
        throw std::invalid_argument(op + ": expects 11 inputs (h, ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w1, w2)");
    require_rank(op, "h", in[h_in], 2);
    const std::int64_t t = in[h_in].shape[0], d = in[h_in].shape[1], heads = static_cast<std::int64_t>(p.get("heads", 1));
    if (d < 1) throw std::invalid_argument(op + ": h must have d >= 1 channels");
    if (heads < 1 || d % heads != 0) throw std::invalid_argument(op + ": parameter 'heads' must divide d");
    for (int i : {ln1_g, ln1_b, ln2_g, ln2_b}) {
        require_rank(op, "ln", in[i], 1);
        require_dim(op, "ln", in[i], 0, d, "d of h");
    }
    for (int i : {wq, wk, wv, wo}) {
        require_rank(op, "w", in[i], 2);
        require_dim(op, "w", in[i], 0, d, "d of h");
        require_dim(op, "w", in[i], 1, d, "d of h");
    }
    require_rank(op, "w1", in[w1], 2);
    require_dim(op, "w1", in[w1], 0, d, "d of h");
    const std::int64_t ffn = in[w1].shape[1];
    if (ffn < 1) throw std::invalid_argument(op + ": w1 must have ffn >= 1 columns");
    require_rank(op, "w2", in[w2], 2);
    require_dim(op, "w2", in[w2], 0, ffn, "columns of w1");
    require_dim(op, "w2", in[w2], 1, d, "d of h");
    return {t, d, heads, d / heads, ffn};
}

}  // namespace conform::int8_block_slots
