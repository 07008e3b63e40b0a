// Row independence of row-wise kernels, shared by the norm and streaming
// tests: a row's output bits must not depend on the rows around it, on
// where the row sits in memory, or on how the whole tensor is written.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "impls/registry.hpp"
#include "numerics/tensor.hpp"

namespace conform::testing {

// k on the rows x, in[1..] broadcast to every row, into out.
inline void run_rows(const KernelInfo& k, const TensorView& x, const std::vector<Tensor>& in, const Params& p,
                     Tensor& out) {
    KernelCall c{p, {x}, {out.view()}};
    for (std::size_t i = 1; i < in.size(); ++i) c.in.push_back(in[i].view());
    k.fn(c);
}

// Rows of k's output on the whole of in[0] (in[1..] broadcast to every row)
// whose bits differ from the same row run alone into a [1, cols] tensor of
// its own (line-aligned, wherever the row sat in the whole).  Compares
// cols elements per row, not Tensor::bytes() (padded).
inline std::vector<std::int64_t> rows_unlike_alone(const KernelInfo& k, const std::vector<Tensor>& in,
                                                   const Params& p) {
    const TensorView x = in.at(0).view();
    Tensor whole(k.out, {x.rows(), x.cols()});
    run_rows(k, x, in, p, whole);
    const std::size_t row_bytes = static_cast<std::size_t>(x.cols() * info(k.out).bytes);
    std::vector<std::int64_t> differ;
    for (std::int64_t r = 0; r < x.rows(); ++r) {
        Tensor one(k.out, {1, x.cols()});
        run_rows(k, x.slice_first(r, r + 1), in, p, one);
        if (std::memcmp(whole.view().slice_first(r, r + 1).data, one.data(), row_bytes) != 0) differ.push_back(r);
    }
    return differ;
}

}  // namespace conform::testing
