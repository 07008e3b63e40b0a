// The chunkwise gated delta-rule kernel and host call (gdn.cu registers
// cuda.gdn and cuda.kda; the GPU mutants of impls/mutants/cuda_gdn.cu
// instantiate it with one bug).  docs/gdn.md holds the formula, the
// algorithm and the bound ("Error bound of the chunkwise kernels"), which
// is the CPU kernels' (impls/cpu/gdn.cpp): this kernel runs the same
// chunk step with the same FP32 roundings, so the same proof covers it.
//
// One block per (sequence, head): packed sequences (cu_seqlens) are the
// grid's own work items, each from its own initial state (or zero), chunks
// restarting at the sequence's first token.  The block keeps the FP32 state
// and the chunk's buffers in dynamic shared memory when they fit (else in its
// slice of a global workspace, L1/L2 resident: launch_delta) and runs the
// chunk step as phases separated by barriers, every
// element of every phase computed by one thread in a fixed order (so any
// block size gives the same bits):
//   load      q, k (l2norm: a warp per row, eps inside the root; q * scale), v, g, beta
//   decay     GDN: column i's running sums g_{i+1} + ... + g_r, exp of each (i < r only: no 1/Gamma);
//             KDA: per channel, forward from the chunk start (Q_s, K_s, d) and backward to its end (K_e)
//   Gram      A = q_r . D(r<-i) k_i (i <= r), L = k_r . D(r<-i) k_i (i < r); KDA by sub-chunks of
//             cpu::kKdaSubChunk (pairs across sub-chunks split into two factors <= 1 at the later start)
//   R         V - K_s S                     (thread per element)
//   solve     v~_r = beta_r (R_r - sum_{i<r} L_ri v~_i): the UT system by forward substitution, a
//             thread per column of V (a column depends on its own earlier rows only: no barrier)
//   output    y = Q_s S + A V~, rounded once into y's format
//   state     S <- d (.) S + K_e^T V~       (thread per element)
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "impls/cpu/gdn.hpp"  // kKdaSubChunk, delta_call: the call's checks, shared
#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/mma.cuh"
#include "numerics/delta_varlen.hpp"

namespace conform::CONFORM_CUDA_NS {

// The GPU mutants' bugs, all off in the kernel.
struct DeltaNoBug {
    static constexpr bool kDecayCarriedOver = false;  // a chunk's sums from its start begin with the previous chunk's last gate
    static constexpr bool kBf16Solve = false;         // each v~_r rounded to bf16
    static constexpr bool kBf16State = false;         // the state rounded to bf16 after every chunk
    static constexpr bool kGridIgnoresSequences = false;  // a block per head runs every sequence on one state
    static constexpr bool kFirstStateOnly = false;    // initial_state[0] for the first sequence, zero for the others
};

constexpr int kDeltaSub = static_cast<int>(cpu::kKdaSubChunk);

// Offsets (in floats) of a block's buffers in the workspace.
struct DeltaLayout {
    long long q, k, v, g, beta, gprev, a, l, fac, qs, ks, ke, kdec, qsub, ksub, decay, s, total;
};

inline DeltaLayout delta_layout(long long C, long long dk, long long dv, bool per_channel) {
    DeltaLayout o{};
    long long at = 0;
    auto take = [&at](long long n) { const long long here = at; at += n; return here; };
    const long long gw = per_channel ? dk : 1;
    o.q = take(C * dk), o.k = take(C * dk), o.v = take(C * dv), o.g = take(C * gw), o.beta = take(C);
    o.gprev = take(gw);
    o.a = take(C * C), o.l = take(C * C);
    o.fac = per_channel ? 0 : take(C * (C + 1));
    if (per_channel) {
        o.qs = take(C * dk), o.ks = take(C * dk), o.ke = take(C * dk), o.kdec = take(C * dk);
        o.qsub = take(kDeltaSub * dk), o.ksub = take(kDeltaSub * dk), o.decay = take(dk);
    }
    o.s = take(dk * dv);
    o.total = at;
    return o;
}

struct DeltaArgs {
    int heads, dk, dv, chunk, sequences;
    int has_state, l2norm;
    float l2_eps, scale;
};

// The grid's work items: a (sequence, head) each, or with the
// kGridIgnoresSequences bug a head running every sequence.
template <class Bug>
__host__ __device__ inline int delta_items(const DeltaArgs& a) {
    return Bug::kGridIgnoresSequences ? a.heads : a.heads * a.sequences;
}

template <class S>
struct DeltaIo {
    const S *q, *k, *v, *g, *beta;
    const float* s0;           // [N, H, d_k, d_v] or null
    const long long* cu;       // N + 1 sequence starts
    S* y;                      // [T, H, d_v]
    float* state;              // [N, H, d_k, d_v]
    float* ws;                 // DeltaLayout::total floats per block
};

// A block's buffers: pointers into its workspace slice.
struct DeltaBufs {
    float *q, *k, *v, *g, *beta, *gprev, *a, *l, *fac, *qs, *ks, *ke, *kdec, *qsub, *ksub, *decay, *s;
};

__device__ __forceinline__ DeltaBufs delta_bufs(float* w, const DeltaLayout& o) {
    return {w + o.q,  w + o.k,  w + o.v,  w + o.g,  w + o.beta,  w + o.gprev, w + o.a,     w + o.l,    w + o.fac,
            w + o.qs, w + o.ks, w + o.ke, w + o.kdec, w + o.qsub, w + o.ksub, w + o.decay, w + o.s};
}

__device__ __forceinline__ float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// ---- load -------------------------------------------------------------------------

// x / sqrt(|x|^2 + eps) over a row of n by one warp (lanes over channels,
// butterfly sum), then * scale for q: the CPU kernels' prepare_row.
__device__ __forceinline__ void delta_prepare_row(float* x, int n, const DeltaArgs& a, bool is_q, int lane) {
    if (a.l2norm) {
        float part = 0;
        for (int p = lane; p < n; p += 32) part = part + x[p] * x[p];
        for (int m = 16; m > 0; m /= 2) part = part + __shfl_xor_sync(0xffffffffu, part, m);
        const float inv = 1.0f / sqrtf(part + a.l2_eps);
        for (int p = lane; p < n; p += 32) x[p] = x[p] * inv;
    }
    if (is_q && a.scale != 1.0f)
        for (int p = lane; p < n; p += 32) x[p] = x[p] * a.scale;
}

template <class S, bool PerChannel>
__device__ void delta_load(const DeltaIo<S>& io, const DeltaArgs& a, const DeltaBufs& b, int h, long long t0, int c) {
    const int dk = a.dk, dv = a.dv, gw = PerChannel ? dk : 1;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int r = warp; r < c; r += warps) {
        const long long th = (t0 + r) * a.heads + h;
        for (int p = lane; p < dk; p += 32) {
            b.q[r * dk + p] = static_cast<float>(load(io.q[th * dk + p]));
            b.k[r * dk + p] = static_cast<float>(load(io.k[th * dk + p]));
        }
        for (int m = lane; m < dv; m += 32) b.v[r * dv + m] = static_cast<float>(load(io.v[th * dv + m]));
        for (int p = lane; p < gw; p += 32) b.g[r * gw + p] = static_cast<float>(load(io.g[th * gw + p]));
        if (lane == 0) b.beta[r] = static_cast<float>(load(io.beta[th]));
        __syncwarp();
        delta_prepare_row(b.q + r * dk, dk, a, true, lane);
        delta_prepare_row(b.k + r * dk, dk, a, false, lane);
    }
}

// ---- decay factors and Gram matrices --------------------------------------------

// GDN: fac row r (pitch C + 1) holds in column i + 1 the factor
// exp(g_{i+1} + ... + g_r), i in [-1, r): thread j sums its column down the
// rows, left to right as the CPU kernels' rows do.  Then A and L, a thread
// per pair.  Q_s, K_s and K_e are q, k times a row's factor: formed where
// they are used, the same products the CPU kernels store.
template <class Bug>
__device__ void gdn_terms(const DeltaArgs& a, const DeltaBufs& b, int C, int c, bool carried) {
    const int w = C + 1, dk = a.dk;
    for (int j = threadIdx.x; j < c; j += blockDim.x) {
        float s = b.g[j];
        if (Bug::kDecayCarriedOver && j == 0 && carried) s = b.gprev[0] + s;
        b.fac[j * w + j] = expf(s);
        for (int r = j + 1; r < c; ++r) {
            s = s + b.g[r];
            b.fac[r * w + j] = expf(s);
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < c * c; e += blockDim.x) {
        const int r = e / c, i = e % c;
        if (i > r) continue;
        float qk = 0, kk = 0;
        for (int p = 0; p < dk; ++p) {
            qk = qk + b.q[r * dk + p] * b.k[i * dk + p];
            kk = kk + b.k[r * dk + p] * b.k[i * dk + p];
        }
        if (i < r) qk = qk * b.fac[r * w + i + 1], kk = kk * b.fac[r * w + i + 1];
        b.a[r * C + i] = qk;
        b.l[r * C + i] = kk;
    }
}

// KDA, per channel p (a thread each): from the chunk start
// run = g_0 + ... + g_r (Q_s, K_s rows, d), to its end
// run = g_{r+1} + ... + g_{c-1} summed backwards (K_e rows).
template <class Bug>
__device__ void kda_decays(const DeltaArgs& a, const DeltaBufs& b, int c, bool carried) {
    const int dk = a.dk;
    for (int p = threadIdx.x; p < dk; p += blockDim.x) {
        float run = b.g[p];
        if (Bug::kDecayCarriedOver && carried) run = b.gprev[p] + run;
        for (int r = 0; r < c; ++r) {
            if (r > 0) run = run + b.g[r * dk + p];
            const float f = expf(run);
            b.qs[r * dk + p] = b.q[r * dk + p] * f;
            b.ks[r * dk + p] = b.k[r * dk + p] * f;
            if (r == c - 1) b.decay[p] = f;
        }
        b.ke[(c - 1) * dk + p] = b.k[(c - 1) * dk + p];
        run = 0;
        for (int r = c - 2; r >= 0; --r) {
            run = run + b.g[(r + 1) * dk + p];
            b.ke[r * dk + p] = b.k[r * dk + p] * expf(run);
        }
    }
}

// KDA's pairs inside a sub-chunk, a thread per pair: each channel's own
// running sum g_{i+1} + ... + g_r (the diagonal of A undecayed).
__device__ inline void kda_pairs_within(const DeltaArgs& a, const DeltaBufs& b, int C, int c) {
    const int dk = a.dk;
    for (int e = threadIdx.x; e < c * kDeltaSub; e += blockDim.x) {
        const int r = e / kDeltaSub, i = r / kDeltaSub * kDeltaSub + e % kDeltaSub;
        if (i > r) continue;
        float qk = 0, kk = 0;
        for (int p = 0; p < dk; ++p) {
            float t = b.k[i * dk + p];
            if (i < r) {
                float run = b.g[(i + 1) * dk + p];
                for (int j = i + 2; j <= r; ++j) run = run + b.g[j * dk + p];
                t = t * expf(run);
            }
            qk = qk + b.q[r * dk + p] * t;
            kk = kk + b.k[r * dk + p] * t;
        }
        b.a[r * C + i] = qk;
        if (i < r) b.l[r * C + i] = kk;
    }
}

// KDA's pairs across sub-chunks: for the sub-chunk starting at a0, its rows
// decayed to a0 (run = g_{a0} + ... + g_r) and every earlier key decayed to
// the same point (run = g_{i+1} + ... + g_{a0-1}, backwards), a thread per
// channel; then a thread per pair.  Two factors <= 1 for any gate.
__device__ inline void kda_pairs_across(const DeltaArgs& a, const DeltaBufs& b, int C, int c) {
    const int dk = a.dk;
    for (int a0 = kDeltaSub; a0 < c; a0 += kDeltaSub) {
        const int a1 = c < a0 + kDeltaSub ? c : a0 + kDeltaSub;
        for (int p = threadIdx.x; p < dk; p += blockDim.x) {
            float run = 0;
            for (int r = a0; r < a1; ++r) {
                run = r == a0 ? b.g[a0 * dk + p] : run + b.g[r * dk + p];
                const float f = expf(run);
                b.qsub[(r - a0) * dk + p] = b.q[r * dk + p] * f;
                b.ksub[(r - a0) * dk + p] = b.k[r * dk + p] * f;
            }
            run = 0;
            for (int i = a0 - 1; i >= 0; --i) {
                if (i < a0 - 1) run = run + b.g[(i + 1) * dk + p];
                b.kdec[i * dk + p] = b.k[i * dk + p] * expf(run);
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < (a1 - a0) * a0; e += blockDim.x) {
            const int r = a0 + e / a0, i = e % a0;
            float qk = 0, kk = 0;
            for (int p = 0; p < dk; ++p) {
                qk = qk + b.qsub[(r - a0) * dk + p] * b.kdec[i * dk + p];
                kk = kk + b.ksub[(r - a0) * dk + p] * b.kdec[i * dk + p];
            }
            b.a[r * C + i] = qk;
            b.l[r * C + i] = kk;
        }
        __syncthreads();  // qsub, ksub, kdec are the next sub-chunk's after this
    }
}

// ---- the state-dependent phases --------------------------------------------------

// Row r of Q_s, K_s (as the decay phase left them) and K_e, element p.
template <bool PerChannel>
struct DeltaRows {
    const DeltaBufs& b;
    int C, c, dk;
    __device__ float qs(int r, int p) const { return PerChannel ? b.qs[r * dk + p] : b.q[r * dk + p] * b.fac[r * (C + 1)]; }
    __device__ float ks(int r, int p) const { return PerChannel ? b.ks[r * dk + p] : b.k[r * dk + p] * b.fac[r * (C + 1)]; }
    __device__ float ke(int r, int p) const {
        if (PerChannel) return b.ke[r * dk + p];
        return r == c - 1 ? b.k[r * dk + p] : b.k[r * dk + p] * b.fac[(c - 1) * (C + 1) + r + 1];
    }
    __device__ float decay(int p) const { return PerChannel ? b.decay[p] : b.fac[(c - 1) * (C + 1)]; }
};

// The BF16 kernels' state update on tensor cores: S (16 x 8 tiles, a warp
// per tile) = d (.) S (one FP32 rounding, the accumulator) + K_e^T V~ by
// ceil(c / 16) mma.m16n8k16 with K_e^T and V~ rounded to BF16 in the
// fragments (declared: update_unit 2^-8, update_eta 2^-134, mma_k 16; the
// bound's tensor-core state update).  Rows, columns and tokens past the
// edges are zero operands (exact) and their results are not stored.
template <bool PerChannel, class Bug>
__device__ void delta_update_tc(const DeltaArgs& a, const DeltaBufs& b, const DeltaRows<PerChannel>& rows) {
    using B16 = __nv_bfloat16;
    const int dk = a.dk, dv = a.dv, c = rows.c;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int group = lane / 4, t = lane % 4, tiles_m = (dv + 7) / 8, tiles = (dk + 15) / 16 * tiles_m;
    const auto ke = [&](int r, int p) { return r < c && p < dk ? rows.ke(r, p) : 0.0f; };
    const auto vt = [&](int r, int m) { return r < c && m < dv ? b.v[r * dv + m] : 0.0f; };
    for (int tile = warp; tile < tiles; tile += warps) {
        const int p0 = tile / tiles_m * 16, m0 = tile % tiles_m * 8;
        float acc[4];
        for (int i = 0; i < 4; ++i) {
            const int p = p0 + group + (i >= 2 ? 8 : 0), m = m0 + 2 * t + (i & 1);
            acc[i] = p < dk && m < dv ? b.s[p * dv + m] * rows.decay(p) : 0.0f;
        }
        const int pa = p0 + group, pb = pa + 8, mb = m0 + group;
        for (int r0 = 0; r0 < c; r0 += 16) {
            const int ra = r0 + 2 * t, rb = ra + 8;
            // A = K_e^T [16 channels x 16 tokens], B = V~ [16 tokens x 8 columns].
            const std::uint32_t af[4] = {pack2<B16>(ke(ra, pa), ke(ra + 1, pa)), pack2<B16>(ke(ra, pb), ke(ra + 1, pb)),
                                         pack2<B16>(ke(rb, pa), ke(rb + 1, pa)), pack2<B16>(ke(rb, pb), ke(rb + 1, pb))};
            const std::uint32_t bf[2] = {pack2<B16>(vt(ra, mb), vt(ra + 1, mb)), pack2<B16>(vt(rb, mb), vt(rb + 1, mb))};
            mma16816<B16>(acc, af, bf, acc);
        }
        for (int i = 0; i < 4; ++i) {
            const int p = p0 + group + (i >= 2 ? 8 : 0), m = m0 + 2 * t + (i & 1);
            if (p < dk && m < dv) b.s[p * dv + m] = Bug::kBf16State ? bf16_round(acc[i]) : acc[i];
        }
    }
}

template <class S, bool PerChannel, class Bug>
__device__ void delta_state_phases(const DeltaIo<S>& io, const DeltaArgs& a, const DeltaBufs& b,
                                   const DeltaRows<PerChannel>& rows, int h, long long t0) {
    const int dk = a.dk, dv = a.dv, C = rows.C, c = rows.c;
    // R = V - K_s S, in place of V.
    for (int e = threadIdx.x; e < c * dv; e += blockDim.x) {
        const int r = e / dv, m = e % dv;
        float x = b.v[e];
        for (int p = 0; p < dk; ++p) x = x - rows.ks(r, p) * b.s[p * dv + m];
        b.v[e] = x;
    }
    __syncthreads();
    // The UT solve by forward substitution, a thread per column.
    for (int m = threadIdx.x; m < dv; m += blockDim.x)
        for (int r = 0; r < c; ++r) {
            float x = b.v[r * dv + m];
            for (int i = 0; i < r; ++i) x = x - b.l[r * C + i] * b.v[i * dv + m];
            x = x * b.beta[r];
            b.v[r * dv + m] = Bug::kBf16Solve ? bf16_round(x) : x;
        }
    __syncthreads();
    // y = Q_s S + A V~ (A's diagonal included), one rounding into y's format.
    for (int e = threadIdx.x; e < c * dv; e += blockDim.x) {
        const int r = e / dv, m = e % dv;
        float x = 0;
        for (int p = 0; p < dk; ++p) x = x + rows.qs(r, p) * b.s[p * dv + m];
        for (int i = 0; i <= r; ++i) x = x + b.a[r * C + i] * b.v[i * dv + m];
        io.y[((t0 + r) * a.heads + h) * dv + m] = store<S>(static_cast<double>(x));
    }
    __syncthreads();  // every read of S is done
    // S <- d (.) S + K_e^T V~; the chunk's last gates kept (a mutant reads them).
    if constexpr (std::is_same_v<S, __nv_bfloat16>) {
        delta_update_tc<PerChannel, Bug>(a, b, rows);
    } else {
        for (int e = threadIdx.x; e < dk * dv; e += blockDim.x) {
            const int p = e / dv, m = e % dv;
            float x = b.s[e] * rows.decay(p);
            for (int r = 0; r < c; ++r) x = x + rows.ke(r, p) * b.v[r * dv + m];
            b.s[e] = Bug::kBf16State ? bf16_round(x) : x;
        }
    }
    const int gw = PerChannel ? dk : 1;
    for (int p = threadIdx.x; p < gw; p += blockDim.x) b.gprev[p] = b.g[(c - 1) * gw + p];
    __syncthreads();
}

// ---- the kernel -------------------------------------------------------------------

template <class S, bool PerChannel, class Bug>
__device__ void delta_chunk(const DeltaIo<S>& io, const DeltaArgs& a, const DeltaBufs& b, int h, long long t0, int c,
                            bool carried) {
    const int C = a.chunk;
    delta_load<S, PerChannel>(io, a, b, h, t0, c);
    __syncthreads();
    if constexpr (PerChannel) {
        kda_decays<Bug>(a, b, c, carried);
        kda_pairs_within(a, b, C, c);
        __syncthreads();
        kda_pairs_across(a, b, C, c);
    } else {
        gdn_terms<Bug>(a, b, C, c, carried);
        __syncthreads();
    }
    delta_state_phases<S, PerChannel, Bug>(io, a, b, DeltaRows<PerChannel>{b, C, c, a.dk}, h, t0);
}

// One (sequence, head) per work item, grid-stride; with the
// kGridIgnoresSequences bug a work item is a head and runs every sequence
// on one state.
template <class S, bool PerChannel, class Bug>
__global__ void delta_chunkwise(DeltaIo<S> io, DeltaArgs a, DeltaLayout lay, bool on_chip) {
    const DeltaBufs b = delta_bufs(on_chip ? dynamic_shared<float>() : io.ws + blockIdx.x * lay.total, lay);
    const int per_item = Bug::kGridIgnoresSequences ? a.sequences : 1, items = delta_items<Bug>(a);
    const long long hs = static_cast<long long>(a.dk) * a.dv;
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
        const int h = item % a.heads, n0 = item / a.heads * per_item;
        for (int n = n0; n < n0 + per_item; ++n) {
            const long long at = (static_cast<long long>(n) * a.heads + h) * hs;
            if (n == n0) {
                const bool given = a.has_state && !(Bug::kFirstStateOnly && n > 0);
                for (long long e = threadIdx.x; e < hs; e += blockDim.x) b.s[e] = given ? io.s0[at + e] : 0.0f;
                __syncthreads();
            }
            for (long long t0 = io.cu[n]; t0 < io.cu[n + 1]; t0 += a.chunk) {
                const long long left = io.cu[n + 1] - t0;
                const int c = static_cast<int>(left < a.chunk ? left : a.chunk);
                delta_chunk<S, PerChannel, Bug>(io, a, b, h, t0, c, t0 > io.cu[n]);
            }
            for (long long e = threadIdx.x; e < hs; e += blockDim.x) io.state[at + e] = b.s[e];
            __syncthreads();
        }
    }
}

// ---- host ---------------------------------------------------------------------------

// What a kernel (or a mutant) of storage f declares: FP32 arithmetic, y in
// f, the state in FP32; the BF16 kernels' tensor-core state update.
inline void delta_declare(KernelInfo& k, Format f) {
    k.acc = Format::fp32;
    k.out_formats = {f, Format::fp32};
    if (f == Format::bf16) k.declared = {{"update_unit", 0x1p-8}, {"update_eta", 0x1p-134}, {"mma_k", 16}};
}

// Blocks of a launch: one per work item, capped (the grid strides beyond).
template <class Bug = DeltaNoBug>
unsigned delta_blocks(const DeltaArgs& a, const Launch& lc) {
    return static_cast<unsigned>(std::min<long long>(delta_items<Bug>(a), lc.max_blocks));
}

// The chunk on chip: a block's buffers fit the device's opt-in limit of
// dynamic shared memory (227 KiB on H100/H200: GDN at d_k = d_v = 128 and
// chunk 64 takes ~210 KiB).
inline bool delta_on_chip(const DeltaLayout& lay) {
    int limit = 0;
    check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), "cudaDeviceGetAttribute",
          "gdn/kda launch");
    return lay.total * 4 <= limit;
}

// Floats of global workspace io.ws must hold: none when the chunk is on
// chip, else lay.total for each block.
template <class Bug = DeltaNoBug>
long long delta_workspace(const DeltaArgs& a, const DeltaLayout& lay, const Launch& lc) {
    return delta_on_chip(lay) ? 0 : lay.total * delta_blocks<Bug>(a, lc);
}

// The launch on device memory (the host call below, and the benchmarks):
// the block's buffers in dynamic shared memory when they fit, else in io.ws
// (L1/L2).
template <class S, bool PerChannel, class Bug = DeltaNoBug>
void launch_delta(const DeltaIo<S>& io, const DeltaArgs& a, const DeltaLayout& lay, const Launch& lc, cudaStream_t s) {
    auto* kernel_fn = delta_chunkwise<S, PerChannel, Bug>;
    const long long bytes = lay.total * 4;
    const bool on_chip = delta_on_chip(lay);
    if (on_chip)
        check(cudaFuncSetAttribute(kernel_fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
              "cudaFuncSetAttribute", "gdn/kda launch");
    CONFORM_LAUNCH(kernel_fn, dim3(delta_blocks<Bug>(a, lc)), dim3(lc.threads), on_chip ? bytes : 0, s)(io, a, lay, on_chip);
}

// The call's geometry: sequence 0 checked as the CPU kernels check a call,
// then what packing adds (cu_seqlens, [N, H, d_k, d_v] states).
inline cpu::DeltaCall delta_geometry(const KernelCall& c, Format f, bool per_channel, std::vector<long long>& cu,
                                     const char* kernel) {
    const std::string who = kernel;
    if (c.in.size() < 5 || c.in.size() > 7 || c.out.size() != 2 || c.in[0].rank != 3)
        throw std::invalid_argument(who + ": expects q [T, H, d_k], k, v, g, beta, optional initial_state and "
                                          "cu_seqlens -> y, state");
    const std::vector<std::int64_t> starts = delta_cu_seqlens(c.in, c.in[0].shape[0]);
    cu.assign(starts.begin(), starts.end());
    const auto sequences = static_cast<std::int64_t>(starts.size()) - 1;
    if (delta_packed(c.in) && (c.out[1].rank != 4 || c.out[1].shape[0] != sequences))
        throw std::invalid_argument(who + ": a packed call's state must be [N, H, d_k, d_v]");
    const std::vector<TensorView> in = delta_packed(c.in) ? delta_sequence_inputs(c.in, starts, 0) : c.in;
    const std::vector<TensorView> out = delta_packed(c.in) ? delta_sequence_outputs(c.out, starts, 0) : c.out;
    cpu::DeltaCall d = cpu::delta_call(KernelCall{c.params, in, out}, f, per_channel);
    d.tokens = c.in[0].shape[0];
    return d;
}

template <class S, bool PerChannel, class Bug = DeltaNoBug>
void run_delta_as(const KernelCall& c, Format f, const char* kernel, const Launch& lc) {
    std::vector<long long> cu;
    const cpu::DeltaCall d = delta_geometry(c, f, PerChannel, cu, kernel);
    const int sequences = static_cast<int>(cu.size()) - 1;
    const DeltaArgs a{static_cast<int>(d.heads), static_cast<int>(d.dk), static_cast<int>(d.dv),
                      static_cast<int>(d.chunk), sequences, d.has_state, d.l2norm, d.l2_eps, d.scale};
    const DeltaLayout lay = delta_layout(d.chunk, d.dk, d.dv, PerChannel);
    Stream s(kernel);
    std::vector<DeviceBuffer> in;
    for (int i = 0; i < 5; ++i) {
        in.emplace_back(static_cast<std::size_t>(c.in[i].numel()) * sizeof(S), kernel);
        upload(c.in[i], in.back(), s.get(), kernel);
    }
    // initial_state in any format, as FP32 (the kernel's state).
    const long long states = static_cast<long long>(sequences) * d.heads * d.dk * d.dv;
    std::vector<float> host(static_cast<std::size_t>(states));
    if (d.has_state)
        for (long long e = 0; e < states; ++e) host[static_cast<std::size_t>(e)] = static_cast<float>(c.in[5].value(e));
    DeviceBuffer s0(host.size() * 4, kernel), cu_d(cu.size() * 8, kernel), state(host.size() * 4, kernel);
    check(cudaMemcpyAsync(s0.as<void>(), host.data(), host.size() * 4, cudaMemcpyHostToDevice, s.get()), "cudaMemcpyAsync", kernel);
    check(cudaMemcpyAsync(cu_d.as<void>(), cu.data(), cu.size() * 8, cudaMemcpyHostToDevice, s.get()), "cudaMemcpyAsync", kernel);
    DeviceBuffer y(static_cast<std::size_t>(c.out[0].numel()) * sizeof(S), kernel);
    poison(y, s.get(), kernel), poison(state, s.get(), kernel);
    DeviceBuffer ws(static_cast<std::size_t>(delta_workspace<Bug>(a, lay, lc)) * 4, kernel);
    const DeltaIo<S> io{in[0].as<S>(), in[1].as<S>(), in[2].as<S>(), in[3].as<S>(), in[4].as<S>(), s0.as<float>(),
                        cu_d.as<long long>(), y.as<S>(), state.as<float>(), ws.as<float>()};
    launch_delta<S, PerChannel, Bug>(io, a, lay, lc, s.get());
    check_launch(s.get(), kernel);
    download(y, c.out[0], s.get(), kernel);
    check(cudaMemcpyAsync(host.data(), state.as<void>(), host.size() * 4, cudaMemcpyDeviceToHost, s.get()), "cudaMemcpyAsync", kernel);
    check(cudaStreamSynchronize(s.get()), "cudaStreamSynchronize", kernel);
    for (long long e = 0; e < states; ++e)
        c.out[1].set_bits(e, encode(c.out[1].format, static_cast<double>(host[static_cast<std::size_t>(e)])));
}

template <bool PerChannel, class Bug = DeltaNoBug>
void run_delta(const KernelCall& c, Format f, const char* kernel, const Launch& lc = {}) {
    if (f == Format::fp32) run_delta_as<float, PerChannel, Bug>(c, f, kernel, lc);
    else run_delta_as<__nv_bfloat16, PerChannel, Bug>(c, f, kernel, lc);
}

}  // namespace conform::CONFORM_CUDA_NS
