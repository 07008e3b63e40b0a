#include "numerics/delta_varlen.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace conform {

bool delta_input_given(const std::vector<TensorView>& in, std::size_t i) {
    return in.size() > i && in[i].numel() > 0;
}

std::vector<std::int64_t> delta_cu_seqlens(const std::vector<TensorView>& in, std::int64_t tokens) {
    if (!delta_input_given(in, kDeltaCuSeqlens)) return {0, tokens};
    const TensorView& t = in[kDeltaCuSeqlens];
    const auto fail = [](const std::string& why) { throw std::invalid_argument("cu_seqlens: " + why); };
    if (t.rank != 1 || t.shape[0] < 2) fail("must be a vector {0, t_1, ..., T} of at least 2 entries");
    std::vector<std::int64_t> cu;
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        const double x = t.value(i);
        if (!(x == std::floor(x)) || x < 0 || x > static_cast<double>(tokens))
            fail("entry " + std::to_string(i) + " = " + std::to_string(x) + " is not an integer in [0, T = " +
                 std::to_string(tokens) + "]");
        cu.push_back(static_cast<std::int64_t>(x));
        if (i > 0 && cu[i] < cu[i - 1]) fail("entry " + std::to_string(i) + " is smaller than the one before");
    }
    if (cu.front() != 0 || cu.back() != tokens)
        fail("must start at 0 and end at T = " + std::to_string(tokens) + " (the packed tokens)");
    return cu;
}

std::vector<TensorView> delta_sequence_inputs(const std::vector<TensorView>& in, const std::vector<std::int64_t>& cu,
                                              std::size_t n) {
    std::vector<TensorView> seq;
    for (std::size_t i = 0; i < kDeltaInitialState && i < in.size(); ++i)
        seq.push_back(in[i].slice_first(cu[n], cu[n + 1]));
    if (delta_input_given(in, kDeltaInitialState)) {
        const TensorView& s0 = in[kDeltaInitialState];
        if (s0.rank != 4 || s0.shape[0] != static_cast<std::int64_t>(cu.size()) - 1)
            throw std::invalid_argument("initial_state: a packed call needs one state per sequence, [N, H, d_k, d_v]");
        seq.push_back(s0.at_first(static_cast<std::int64_t>(n)));
    }
    return seq;
}

std::vector<TensorView> delta_sequence_outputs(const std::vector<TensorView>& out, const std::vector<std::int64_t>& cu,
                                               std::size_t n) {
    return {out.at(0).slice_first(cu[n], cu[n + 1]), out.at(1).at_first(static_cast<std::int64_t>(n))};
}

}  // namespace conform
