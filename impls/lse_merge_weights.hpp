// The merge of two partial attention states (lse_merge, docs/softmax.md),
// per row, in FP32: lse = hi + log1pf(expf(lo - hi)), w_x = expf(lse_x -
// lse).  Shared by the CPU kernel (impls/cpu/softmax.cpp) and the CUDA one
// (impls/cuda/softmax.cuh): host and device, the same arithmetic.
#pragma once
#include <cmath>

#include "impls/host_device.hpp"

namespace conform::lse_merge {

struct Row {
    float lse;
    float wa, wb;  // weights of o_a and o_b (NaN: the row is NaN)
    bool copy_a, copy_b;  // the other state is empty: this one, bit for bit
};

// Empty states (lse = -inf) are the identity; two empty states give the
// empty state (0, -inf); a NaN or +inf lse gives NaN.
CONFORM_HOST_DEVICE Row weights(float la, float lb) {
    const float inf = INFINITY, nan = NAN;
    if (la != la || lb != lb || la == inf || lb == inf) return {nan, nan, nan, false, false};
    if (la == -inf && lb == -inf) return {-inf, 0, 0, false, false};
    if (lb == -inf) return {la, 1, 0, true, false};
    if (la == -inf) return {lb, 0, 1, false, true};
    const float hi = la > lb ? la : lb, lo = la > lb ? lb : la;
    const float lse = hi + log1pf(expf(lo - hi));
    return {lse, expf(la - lse), expf(lb - lse), false, false};
}

// Element o of a row that is neither copied nor empty: two products and
// one sum.  A weight e^(lse_x - lse) is positive even where it underflows
// FP32, so an infinite o_x stays infinite (0 * inf would make it NaN).
CONFORM_HOST_DEVICE float element(const Row& m, float va, float vb) {
    if (m.lse != m.lse) return m.lse;
    const float a = va == INFINITY || va == -INFINITY ? va : m.wa * va;
    const float b = vb == INFINITY || vb == -INFINITY ? vb : m.wb * vb;
    return a + b;
}

}  // namespace conform::lse_merge
