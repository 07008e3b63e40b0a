// CPU kernels of lightning_indexer (docs/sparse.md, "Kernels"): the dot
// products q[t, h] . k[s] in FP32 (by the matmul kernel on q [Lq H, c] and
// k^T, or a plain loop), then per score the head sum of w ReLU(dot) in FP32.
#include <cmath>
#include <cstring>
#include <string>

#include "impls/cpu/matmul.hpp"
#include "impls/cpu/sparse.hpp"

namespace conform::cpu {
namespace {

// D [Lq H, N] in FP32: the dot products of every query head with every key.
Tensor index_dots(const TensorView& q, const TensorView& k, IndexerDots dots) {
    const std::int64_t rows = q.shape[0] * q.shape[1], c = q.shape[2], n = k.shape[0];
    Tensor d(Format::fp32, {rows, n});
    if (dots == IndexerDots::naive) {
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t s = 0; s < n; ++s) {
                float acc = 0;
                for (std::int64_t i = 0; i < c; ++i)
                    acc += static_cast<float>(q.value(r * c + i)) * static_cast<float>(k.value(s * c + i));
                d.set_value(r * n + s, acc);
            }
        return d;
    }
    Tensor qm(q.format, {rows, c}), kt(k.format, {c, n});
    for (std::int64_t i = 0; i < rows * c; ++i) qm.set_bits(i, q.bits(i));
    for (std::int64_t s = 0; s < n; ++s)
        for (std::int64_t i = 0; i < c; ++i) kt.set_bits(i * n + s, k.bits(s * c + i));
    matmul_into(qm.view(), kt.view(), d.view(), dots == IndexerDots::simd ? best_matmul_path(q.format) : MatmulPath::scalar);
    return d;
}

float relu(float v, const IndexerFlaws& f) { return f.relu_dropped || !(v < 0) ? v : 0.0f; }  // NaN stays NaN

}  // namespace

void lightning_indexer_call(const KernelCall& c, IndexerDots dots, const IndexerFlaws& f) {
    const TensorView &q = c.in[0], &k = c.in[1], &w = c.in[2];
    const std::int64_t lq = q.shape[0], h = q.shape[1], n = k.shape[0];
    const Tensor d = index_dots(q, k, dots);
    const auto* dv = static_cast<const float*>(d.data());
    for (std::int64_t t = 0; t < lq; ++t)
        for (std::int64_t s = 0; s < n; ++s) {
            float sum = 0;
            for (std::int64_t j = 0; j < h; ++j) {
                const float wj = static_cast<float>(w.value(t * h + j)), dot = dv[(t * h + j) * n + s];
                sum += f.weight_in_relu ? relu(wj * dot, f) : wj * relu(dot, f);
                if (f.bf16_head_sum) sum = static_cast<float>(decode(Format::bf16, encode(Format::bf16, sum)));
            }
            c.out[0].set_bits(t * n + s, encode(c.out[0].format, sum));
        }
}

void register_cpu_sparse_indexer(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16})
        for (const IndexerDots dots : {IndexerDots::simd, IndexerDots::scalar, IndexerDots::naive}) {
            KernelInfo k;
            k.op = "lightning_indexer";
            k.variant = dots == IndexerDots::simd ? "simd" : dots == IndexerDots::scalar ? "scalar" : "naive";
            k.name = "cpu." + k.variant + ".lightning_indexer." + name(f);
            k.in = f, k.out = Format::fp32, k.acc = Format::fp32;
            if (dots == IndexerDots::naive) k.role = Role::baseline;
            k.description = dots == IndexerDots::naive
                                ? "naive baseline: every dot product a plain FP32 loop, then the head sum"
                                : "dot products by cpu." + k.variant + ".matmul on q [Lq H, c] and k^T into FP32, then "
                                  "per score sum_h w ReLU(dot) in FP32, heads in order; scores stored in FP32";
            k.fn = [dots](const KernelCall& c) { lightning_indexer_call(c, dots); };
            r.add(std::move(k));
        }
}

}  // namespace conform::cpu
