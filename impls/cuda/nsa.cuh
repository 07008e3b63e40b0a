// Native sparse attention on the GPU (nsa.cu registers the kernels;
// impls/mutants/cuda_nsa.cu instantiates them with one bug).
// docs/nsa_attention.md holds the formula, the verdict and the bound.
//
// The CPU kernels' stages in FP32, on the device with no host round-trip:
// the inputs widened to FP32; K_cmp, V_cmp by a thread per element (the
// sum of x / l in token order, stored in the input format); the compressed
// branch by a warp per (head, query): the visible blocks' logits a lane
// each, a warp max and a warp sum, the weighted values in block order a
// lane per column, and the weights e_b / L written for the importance,
// which a thread per (KV head, query, block) sums over the group's heads in
// order; sparse.cuh's top-k selection per KV head; the selected branch by
// the FP32 attention kernel under the selection's mask per KV head, the
// window branch by it with window w (sparse_attention.cuh); and a thread
// per element for o = fl(fl(s_c o_c + s_s o_s) + s_w o_w) with the
// overflow-free sigmoid, rounded once into the format.
#pragma once
#include <string>
#include <vector>

#include "impls/cpu/nsa.hpp"
#include "impls/cuda/sparse_attention.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernels.
struct NsaNoBug {
    static constexpr bool kCompressedUncausal = false;  // every complete block visible to the compressed branch
    static constexpr bool kFirstHeadImportance = false; // the importance of the group's first head, not the group's sum
    static constexpr bool kGatesTransposed = false;     // g read as [3, Hq, Lq], not [Hq, Lq, 3]
};

using NsaArgs = cpu::NsaShape;

// out [Hkv, blocks, w] = the FP32 sums of x / l over each block's tokens in
// order, rounded into S and read back: the stored compressed keys/values.
template <class S>
__global__ void nsa_pool(const float* __restrict__ x, float* __restrict__ out, NsaArgs a, long long w) {
    const long long n = static_cast<long long>(a.hkv) * a.blocks * w;
    for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < n;
         e += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long c = e % w, b = e / w % a.blocks, g = e / w / a.blocks;
        float sum = 0.0f;
        for (long long j = b * a.l; j < (b + 1) * a.l; ++j) sum += x[(g * a.lk + j) * w + c] / static_cast<float>(a.l);
        out[e] = static_cast<float>(load(store<S>(sum)));
    }
}

// The compressed branch, a warp per (head, query) row: oc [Hq, Lq, Dv] and
// the weights p [Hq, Lq, cand] (0 past the visible blocks; p is the logits'
// and the exponentials' scratch on the way).
template <class Bug>
__global__ void nsa_compressed(const float* __restrict__ q, const float* __restrict__ kc, const float* __restrict__ vc,
                               float* __restrict__ oc, float* __restrict__ p, NsaArgs a) {
    const int lane = threadIdx.x % 32;
    const long long warps = static_cast<long long>(gridDim.x) * blockDim.x / 32;
    for (long long row = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32; row < a.hq * a.lq;
         row += warps) {
        const long long h = row / a.lq, i = row % a.lq, kv = h / a.group;
        const long long vis = Bug::kCompressedUncausal ? a.blocks : (a.offset + i + 1) / a.l;  // b l + l - 1 <= position
        const float* qr = q + row * a.d;
        const float* kh = kc + kv * a.blocks * a.d;
        const float* vh = vc + kv * a.blocks * a.dv;
        float* pr = p + row * a.cand;
        float* orow = oc + row * a.dv;
        bool bad = false;
        float mx = -INFINITY;
        for (long long b = lane; b < vis; b += 32) {
            float dot = 0.0f;
            for (long long t = 0; t < a.d; ++t) dot += qr[t] * kh[b * a.d + t];
            const float z = dot * a.scale;
            pr[b] = z;
            bad = bad || isnan(z) || z == INFINITY;
            mx = fmaxf(mx, z);
        }
        bad = __any_sync(kFullMask, bad);
        mx = warp_reduce(mx, MaxOf{});
        if (bad || mx == -INFINITY) {  // a NaN or +inf logit: all NaN; no visible block or all -inf: all 0
            const float fill = bad ? NAN : 0.0f;
            for (long long c = lane; c < a.dv; c += 32) orow[c] = fill;
            for (long long b = lane; b < a.cand; b += 32) pr[b] = b < vis ? fill : 0.0f;
            continue;  // warp-uniform
        }
        float part = 0.0f;
        for (long long b = lane; b < vis; b += 32) {
            const float e = expf(pr[b] - mx);
            pr[b] = pr[b] == -INFINITY ? -0.0f : e;  // -0: the marker of an exact zero weight (the logit -inf)
            part += e;
        }
        const float r = 1.0f / warp_reduce(part, Add{});
        __syncwarp();  // every lane's exponentials are in pr
        for (long long c = lane; c < a.dv; c += 32) {
            float acc = 0.0f;
            for (long long b = 0; b < vis; ++b) {  // an infinite v counts whole even where its weight underflows
                if (pr[b] == 0.0f && signbit(pr[b])) continue;  // a -inf logit: no weight, the value not read
                const float x = vh[b * a.dv + c];
                acc += isinf(x) ? x : pr[b] * x;
            }
            orow[c] = acc * r;
        }
        __syncwarp();  // every lane has read pr
        for (long long b = lane; b < a.cand; b += 32) pr[b] = b < vis ? pr[b] * r : 0.0f;
    }
}

// imp [Hkv, Lq, cand] = sum over the group's heads, in order, of p.
template <class Bug>
__global__ void nsa_importance(const float* __restrict__ p, float* __restrict__ imp, NsaArgs a) {
    const long long n = static_cast<long long>(a.hkv) * a.lq * a.cand;
    for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < n;
         e += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long b = e % a.cand, i = e / a.cand % a.lq, kv = e / a.cand / a.lq;
        float sum = 0.0f;
        for (long long h = kv * a.group; h < (kv + 1) * a.group && (!Bug::kFirstHeadImportance || h == kv * a.group); ++h)
            sum += p[(h * a.lq + i) * a.cand + b];
        imp[e] = sum;
    }
}

// o = fl(fl(s_c o_c + s_s o_s) + s_w o_w) rounded once into S.
template <class S, class Bug>
__global__ void nsa_combine(const float* __restrict__ oc, const float* __restrict__ os, const float* __restrict__ ow,
                            const S* __restrict__ g, S* __restrict__ o, NsaArgs a) {
    const long long n = static_cast<long long>(a.hq) * a.lq * a.dv, rows = static_cast<long long>(a.hq) * a.lq;
    for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < n;
         e += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long row = e / a.dv;
        const auto gate = [&](long long b) {
            return static_cast<float>(load(Bug::kGatesTransposed ? g[b * rows + row] : g[row * 3 + b]));
        };
        const float y = gated_output(oc[e], gate(0)) + gated_output(os[e], gate(1)) + gated_output(ow[e], gate(2));
        o[e] = store<S>(y);
    }
}

inline SelectArgs nsa_select_args(const NsaArgs& a) {
    SelectArgs sa;
    sa.lq = a.lq, sa.n = a.cand, sa.k = a.n, sa.r = a.l, sa.offset = a.offset;
    sa.causal = 1, sa.force = static_cast<int>(a.force), sa.slots = static_cast<int>(a.n);
    return sa;
}

// The registry entry of cuda.nsa_attention.<fmt> or of a mutant built on it (nsa.cu).
KernelInfo nsa_info(KernelInfo k, Format f);

template <class S, class Bug = NsaNoBug>
void run_nsa_as(const KernelCall& c, const char* kernel, const Launch& lc) {
    const NsaArgs a = cpu::nsa_dims(c);
    check_fp32_dv(a.dv, kernel);
    Stream s(kernel);
    const auto z = [](long long n) { return static_cast<std::size_t>(n); };
    std::vector<DeviceBuffer> in, wide;
    in.reserve(4), wide.reserve(3);
    for (int t = 0; t < 4; ++t) {
        in.emplace_back(z(c.in[t].numel()) * sizeof(S), kernel);
        upload(c.in[t], in.back(), s.get(), kernel);
        if (t < 3) wide.emplace_back(z(c.in[t].numel()) * 4, kernel);
    }
    const long long rows = a.hq * a.lq, n_o = rows * a.dv;
    DeviceBuffer kc(z(a.hkv * a.blocks * a.d) * 4, kernel), vc(z(a.hkv * a.blocks * a.dv) * 4, kernel),
        p(z(rows * a.cand) * 4, kernel), imp(z(a.hkv * a.lq * a.cand) * 4, kernel), ids(z(a.hkv * a.lq * a.n) * 4, kernel),
        mask(z(a.lq * a.lk) * 4, kernel), oc(z(n_o) * 4, kernel), os(z(n_o) * 4, kernel), ow(z(n_o) * 4, kernel),
        lse(z(rows) * 4, kernel), o(z(n_o) * sizeof(S), kernel);
    poison(ids, s.get(), kernel), poison(o, s.get(), kernel);
    if (rows > 0) {
        for (int t = 0; t < 3; ++t) launch_convert(in[t].as<S>(), wide[t].as<float>(), c.in[t].numel(), lc, s.get());
        const float *q = wide[0].as<float>(), *k = wide[1].as<float>(), *v = wide[2].as<float>();
        auto* pool_fn = nsa_pool<S>;
        CONFORM_LAUNCH(pool_fn, dim3(blocks_for(a.hkv * a.blocks * a.d, lc)), dim3(lc.threads), 0, s.get())(
            k, kc.as<float>(), a, static_cast<long long>(a.d));
        CONFORM_LAUNCH(pool_fn, dim3(blocks_for(a.hkv * a.blocks * a.dv, lc)), dim3(lc.threads), 0, s.get())(
            v, vc.as<float>(), a, static_cast<long long>(a.dv));
        auto* comp_fn = nsa_compressed<Bug>;
        CONFORM_LAUNCH(comp_fn, dim3(blocks_for(rows * 32, lc)), dim3(lc.threads), 0, s.get())(
            q, kc.as<float>(), vc.as<float>(), oc.as<float>(), p.as<float>(), a);
        auto* imp_fn = nsa_importance<Bug>;
        CONFORM_LAUNCH(imp_fn, dim3(blocks_for(a.hkv * a.lq * a.cand, lc)), dim3(lc.threads), 0, s.get())(
            p.as<float>(), imp.as<float>(), a);
        const SelectArgs sa = nsa_select_args(a);
        SelectionMask m;
        m.rows = a.lq, m.cols = m.keys = a.lk, m.r = a.l, m.offset = a.offset, m.slots = sa.slots, m.causal = true;
        Fp32Attention f;
        f.hq = static_cast<int>(a.group), f.hkv = 1, f.lq = static_cast<int>(a.lq), f.lk = static_cast<int>(a.lk);
        f.d = static_cast<int>(a.d), f.dv = static_cast<int>(a.dv), f.scale = a.scale;
        for (long long kv = 0; kv < a.hkv; ++kv) {  // the selected branch: a selection and a mask per KV head
            float* kid = ids.as<float>() + kv * a.lq * a.n;
            launch_topk_select<float>(imp.as<float>() + kv * a.lq * a.cand, kid, sa, lc, s.get());
            launch_selection_mask<float>(kid, mask.as<float>(), m, lc, s.get());
            const long long h0 = kv * a.group;
            launch_fp32_attention(f, q + h0 * a.lq * a.d, k + kv * a.lk * a.d, v + kv * a.lk * a.dv, mask.as<float>(),
                                  os.as<float>() + h0 * a.lq * a.dv, lse.as<float>() + h0 * a.lq, s.get());
        }
        f.hq = static_cast<int>(a.hq), f.hkv = static_cast<int>(a.hkv);
        f.window = static_cast<int>(std::min<long long>(a.w, a.lk));  // w up to 2^40: a window past Lk is all of it
        launch_fp32_attention(f, q, k, v, nullptr, ow.as<float>(), lse.as<float>(), s.get());
        auto* combine_fn = nsa_combine<S, Bug>;
        CONFORM_LAUNCH(combine_fn, dim3(blocks_for(n_o, lc)), dim3(lc.threads), 0, s.get())(
            oc.as<float>(), os.as<float>(), ow.as<float>(), in[3].as<S>(), o.as<S>(), a);
        check_launch(s.get(), kernel);
    }
    download(o, c.out[0], s.get(), kernel);
    download(ids, c.out[1], s.get(), kernel);
}

template <class Bug = NsaNoBug>
void run_nsa(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    by_storage(f, [&](auto s) { run_nsa_as<decltype(s), Bug>(c, kernel, lc); });
}

}  // namespace conform::CONFORM_CUDA_NS
