// The attention kernels and their host call (attention.cu registers them;
// the GPU mutants of impls/mutants/cuda_attention.cu instantiate them with
// one bug).  docs/attention.md has the formula, the conventions and the
// bound; docs/cuda.md the kernels' design.
//
//   attention_tc   FP16/BF16 on tensor cores (mma.sync m16n8k16, FP32
//                  accumulators): a FlashAttention-2 forward pass, 16 query
//                  rows per warp, K and V tiles through shared memory, the
//                  online softmax in FP32 registers.
//   attention_simt FP32 without tensor cores: one warp per query row, 32
//                  keys per step (a lane per key), FMA dot products.
//   attention_merge  the split-KV partials (o_s, lse_s) merged by lse_merge;
//                  sink_attention's sinks join there as one more state
//                  each, (0, sink_h).
// Both forward kernels take a key range per blockIdx.z (a KV split): with
// one split they write o and lse, with several the FP32 partials the merge
// reads.
#pragma once
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "impls/cuda/cp_async.cuh"
#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/mma.cuh"

namespace conform::CONFORM_CUDA_NS {

// The GPU attention mutants' bugs (impls/mutants/cuda_attention.cu), all off in the kernels.
struct AttnNoBug {
    static constexpr bool kCausalPerTile = false;     // the causal mask decides whole key tiles, not elements
    static constexpr bool kTopLeft = false;           // causal aligned top-left (pos_i = i)
    static constexpr bool kTileMaxOnly = false;       // each tile's weights against its own max, nothing carried
    static constexpr bool kSkipORescale = false;      // the running sum is rescaled when the max grows, o is not
    static constexpr bool kUnguardedMinusInf = false; // exp(s - m) with m = -inf: NaN for a fully hidden tile
    static constexpr bool kFp16Accumulator = false;   // o accumulated in FP16 (rounded after every mma)
    static constexpr bool kGqaModulo = false;         // KV head h mod Hkv instead of h / (Hq / Hkv)
    static constexpr bool kSoftcapAfterMask = false;  // cap(s + mask) instead of cap(s) + mask
    static constexpr bool kEmptySplitLseZero = false; // the merge reads an empty split's -inf lse as 0
    // Not a bug: head dimensions padded to 64 or 256 only (zero padding is
    // exact), half the device code of the four paddings; the mutants use it.
    static constexpr bool kTwoPaddings = false;
};

// Everything about a call but the tensors.
struct AttnArgs {
    int hq, hkv, lq, lk, d, dv;
    float scale, softcap;
    int causal, window, has_mask;
    int splits, split_keys;  // KV splits (blockIdx.z) and the keys of each
    int block;               // keys per tile (tensor cores: at most the kernel's kBk)
    int nan_rows;            // a row that sees no key gives NaN, not (0, -inf) (declared masked_row = nan)
    int sinks;               // sink_attention: the merge adds each head's sink state (0, sink_h)
    int sink_kv_head;        // mutant: the sink of query head h's KV head instead of its own
    int gated;               // gated_attention: the merge multiplies o by sigmoid(g)
    int gate_kv_head;        // mutant: the gate row of query head h's KV head instead of its own
};

// The forward kernels write FP32 partials for the merge: with several
// splits, with sinks (which join in the merge) and with a gate (applied
// there).  One split merges exactly: its weight is expf(0) = 1.
__host__ __device__ __forceinline__ bool merged(const AttnArgs& a) { return a.splits > 1 || a.sinks || a.gated; }

__device__ __forceinline__ float nan_max(float a, float b) { return (a != a || b != b) ? NAN : fmaxf(a, b); }
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

template <class Bug>
__device__ __forceinline__ int kv_head(const AttnArgs& a, int h) {
    return Bug::kGqaModulo ? h % a.hkv : h / (a.hq / a.hkv);
}

// The query's position among the keys: bottom-right alignment.
template <class Bug>
__device__ __forceinline__ int query_pos(const AttnArgs& a, int i) {
    return Bug::kTopLeft ? i : i + a.lk - a.lq;
}

// The structural mask (causal, window) of query i and key j.
template <class Bug>
__device__ __forceinline__ bool structurally_visible(const AttnArgs& a, int i, int j) {
    if (!a.causal && a.window <= 0) return true;
    const int pos = query_pos<Bug>(a, i);
    return j <= pos && (a.window <= 0 || j > pos - a.window);
}

// The keys [lo, hi) that rows [r0, r1] of a block may see within split z.
template <class Bug>
__device__ __forceinline__ void key_range(const AttnArgs& a, int r0, int r1, int z, int* lo, int* hi) {
    *lo = z * a.split_keys;
    *hi = imin(a.lk, *lo + a.split_keys);
    if (a.causal || a.window > 0) {
        *hi = imin(*hi, query_pos<Bug>(a, r1) + 1);
        if (a.window > 0) *lo = imax(*lo, query_pos<Bug>(a, r0) - a.window + 1);
    }
}

// The final logit of a visible key: cap(scale * dot) + mask.
template <class Bug>
__device__ __forceinline__ float logit(const AttnArgs& a, float dot, float mask) {
    float x = dot * a.scale;
    if (Bug::kSoftcapAfterMask) x += mask;
    if (a.softcap > 0) x = a.softcap * tanhf(x / a.softcap);
    return Bug::kSoftcapAfterMask ? x : x + mask;
}

template <class T>
__device__ __forceinline__ float mask_at(const T* mask, const AttnArgs& a, int i, int j) {
    return a.has_mask ? static_cast<float>(load(mask[static_cast<long long>(i) * a.lk + j])) : 0.0f;
}

// acc exp(m_old - m_new): an infinite acc (an infinite v at a visible key)
// stays infinite when the factor underflows to 0, as the exact weights are positive.
__device__ __forceinline__ float rescaled(float acc, float factor) { return isinf(acc) ? acc : acc * factor; }

// The row's result: o = acc / l and lse = m + log l, or the empty row
// (0, -inf) when no key was visible.  With several splits the FP32 partial.
// A split's partial is always the empty state (0, -inf) (another split may
// see keys); the final result of an empty row follows the convention.
template <class S>
__device__ __forceinline__ void store_row_value(S* o, float* part_o, const AttnArgs& a, int z, int h, int i, int col,
                                                float acc, float m, float l) {
    const long long at = (static_cast<long long>(h) * a.lq + i) * a.dv + col;
    if (merged(a)) part_o[static_cast<long long>(z) * a.hq * a.lq * a.dv + at] = m == -INFINITY ? 0.0f : acc / l;
    else o[at] = store<S>(m == -INFINITY ? (a.nan_rows ? NAN : 0.0f) : acc / l);
}

__device__ __forceinline__ void store_row_lse(float* lse, float* part_lse, const AttnArgs& a, int z, int h, int i,
                                              float m, float l) {
    const long long at = static_cast<long long>(h) * a.lq + i;
    if (merged(a)) part_lse[static_cast<long long>(z) * a.hq * a.lq + at] = m == -INFINITY ? -INFINITY : m + logf(l);
    else lse[at] = m == -INFINITY ? (a.nan_rows ? NAN : -INFINITY) : m + logf(l);
}

// ---------------------------------------------------------------------------
// Tensor cores.  P: the head dimensions padded to a multiple of 16 (zeros
// in shared memory and in the Q fragments contribute exact zeros);
// kBk keys per tile.

template <int P>
struct TcTile {
    static constexpr int kBk = P >= 256 ? 32 : 64;  // keys per K and V tile
    static constexpr int kStride = P + 8;           // row pitch in 16-bit elements (bank offset)
    struct alignas(16) Stage {                      // 16-byte aligned rows for the packed copies
        unsigned short k[kBk][kStride], v[kBk][kStride];
    };
    // Dynamic shared memory: two stages, the next tile loading while this one is computed on
    // (P = 128: 68 KiB, opted into past 48 KiB).
    static constexpr std::size_t kBytes = 2 * sizeof(Stage);
};

// Online-softmax state of the two rows a lane holds (group and group + 8).
struct RowState {
    float m[2] = {-INFINITY, -INFINITY};
    float l[2] = {0, 0};  // this lane's part of the row sum (the 4 lanes of a group are added at the end)
};

// Whether K and V move in 16-byte packs: D and Dv multiples of 8.  The load
// and the scrub both ask, so that each thread scrubs what it loaded.
__device__ __forceinline__ bool kv_packed(const AttnArgs& a) { return a.d % 8 == 0 && a.dv % 8 == 0; }

// Starts loading keys [k0, k0 + kBk) of K and V into a stage as raw 16-bit
// values, zero beyond the head dimensions and beyond `hi`: by cp.async in
// 16-byte packs when D and Dv are multiples of 8 (every row of K and V then
// starts 16-byte aligned, and so does every 8-column group of a stage's row,
// the pitch P + 8 being a multiple of 8), else element by element at once.
// Each thread takes the packs (elements) e = threadIdx.x + i blockDim.x.
template <int P>
__device__ __forceinline__ void issue_kv_tile(const unsigned short* kh, const unsigned short* vh, const AttnArgs& a,
                                              int k0, int hi, typename TcTile<P>::Stage& st) {
    constexpr int kBk = TcTile<P>::kBk;
    if (kv_packed(a)) {
        for (int e = threadIdx.x; e < kBk * P / 8; e += blockDim.x) {
            const int r = e / (P / 8), c = e % (P / 8) * 8, j = k0 + r;
            const bool in_k = j < hi && c < a.d, in_v = j < hi && c < a.dv;
            cp_async16(&st.k[r][c], in_k ? kh + static_cast<long long>(j) * a.d + c : kh, in_k);
            cp_async16(&st.v[r][c], in_v ? vh + static_cast<long long>(j) * a.dv + c : vh, in_v);
        }
        return;
    }
    for (int e = threadIdx.x; e < kBk * P; e += blockDim.x) {
        const int r = e / P, c = e % P, j = k0 + r;
        const bool in = j < hi;
        st.k[r][c] = in && c < a.d ? kh[static_cast<long long>(j) * a.d + c] : 0;
        st.v[r][c] = in && c < a.dv ? vh[static_cast<long long>(j) * a.dv + c] : 0;
    }
}

// Once this thread's copies of a stage have landed: a non-finite value of V
// among them is replaced by 0 (the tensor cores would spread it to rows that
// do not see its key: 0 * NaN) and reported, *nonfinite = tile + 1; the rows
// that see the key add it separately.  Each thread looks at the values it
// loaded itself (its copies are visible to it before the block's barrier).
template <int P>
__device__ __forceinline__ void scrub_v_tile(const AttnArgs& a, typename TcTile<P>::Stage& st, bool bf16, int tile,
                                             int* nonfinite) {
    constexpr int kBk = TcTile<P>::kBk;
    // An all-ones exponent: Inf or NaN in either format.
    auto special = [&](unsigned short vb) { return bf16 ? (vb & 0x7f80) == 0x7f80 : (vb & 0x7c00) == 0x7c00; };
    using Pack8 = Pack<unsigned short>;  // 16 bytes
    if (kv_packed(a)) {
        for (int e = threadIdx.x; e < kBk * P / 8; e += blockDim.x) {
            Pack8& vp = *reinterpret_cast<Pack8*>(&st.v[e / (P / 8)][e % (P / 8) * 8]);
            bool any = false;
            CONFORM_UNROLL
            for (int x = 0; x < 8; ++x) any = any || special(vp.v[x]);
            if (!any) continue;
            *nonfinite = tile + 1;
            CONFORM_UNROLL
            for (int x = 0; x < 8; ++x) vp.v[x] = special(vp.v[x]) ? 0 : vp.v[x];
        }
        return;
    }
    for (int e = threadIdx.x; e < kBk * P; e += blockDim.x) {
        unsigned short& vb = st.v[e / P][e % P];
        if (special(vb)) vb = 0, *nonfinite = tile + 1;
    }
}

template <class S, int P, class Bug = AttnNoBug>
__global__ void attention_tc(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                             const unsigned short* __restrict__ v, const S* __restrict__ mask, AttnArgs a,
                             S* __restrict__ o, float* __restrict__ lse, float* __restrict__ part_o,
                             float* __restrict__ part_lse) {
    constexpr int kBk = TcTile<P>::kBk, kStride = TcTile<P>::kStride, kQc = P / 16, kOn = P / 8, kSn = kBk / 8;
    constexpr bool kBf16 = std::is_same_v<S, __nv_bfloat16>;
    using Stage = typename TcTile<P>::Stage;
    Stage* stages = dynamic_shared<Stage>();  // two: TcTile<P>::kBytes
    __shared__ int nonfinite;
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int group = lane / 4, t = lane % 4;
    const int ldm_m = lane / 8, ldm_r = lane % 8;  // the matrix and row this lane addresses in ldmatrix_x4
    const int h = blockIdx.y, z = blockIdx.z, g = kv_head<Bug>(a, h);
    const int block_row0 = blockIdx.x * 16 * warps, row0 = block_row0 + warp * 16;
    const int rows[2] = {row0 + group, row0 + group + 8};
    const int qcs = (a.d + 15) / 16, ons = (a.dv + 7) / 8;  // fragments that are not all padding

    // Q fragments (A operand), straight from global memory, zero outside the tensor.
    auto q_bits = [&](int r, int c) -> unsigned short {
        return r < a.lq && c < a.d ? q[(static_cast<long long>(h) * a.lq + r) * a.d + c] : 0;
    };
    std::uint32_t qf[kQc][4];
    CONFORM_UNROLL
    for (int kc = 0; kc < kQc; ++kc)
        CONFORM_UNROLL
        for (int x = 0; x < 4; ++x) {
            const int r = rows[x & 1], c = kc * 16 + 2 * t + (x >= 2 ? 8 : 0);
            qf[kc][x] = static_cast<std::uint32_t>(q_bits(r, c)) | static_cast<std::uint32_t>(q_bits(r, c + 1)) << 16;
        }
    float of[kOn][4];
    CONFORM_UNROLL
    for (int n = 0; n < kOn; ++n) of[n][0] = of[n][1] = of[n][2] = of[n][3] = 0;
    RowState st;

    int lo, hi;
    key_range<Bug>(a, block_row0, imin(a.lq, block_row0 + 16 * warps) - 1, z, &lo, &hi);
    const unsigned short* kh = k + static_cast<long long>(g) * a.lk * a.d;
    const unsigned short* vh = v + static_cast<long long>(g) * a.lk * a.dv;
    if (threadIdx.x == 0) nonfinite = 0;
    __syncthreads();  // the flag's reset before any thread's scrub
    // The pipeline: tile i + 1's copies are issued before tile i is waited for and computed on,
    // into the other stage, which every warp finished reading at the end of tile i - 1.  One
    // group is committed per tile (empty past the last), so "all but the newest" is tile i's.
    if (lo < hi) issue_kv_tile<P>(kh, vh, a, lo, imin(hi, lo + a.block), stages[0]);
    cp_async_commit();
    int tile = 0;
    for (int k0 = lo; k0 < hi; k0 += a.block, ++tile) {
        const int tile_hi = imin(hi, k0 + a.block), sns = (tile_hi - k0 + 7) / 8;  // keys, 8-key blocks
        Stage& cur = stages[tile & 1];
        if (k0 + a.block < hi) issue_kv_tile<P>(kh, vh, a, k0 + a.block, imin(hi, k0 + 2 * a.block), stages[(tile + 1) & 1]);
        cp_async_commit();
        cp_async_wait<1>();  // this thread's copies of the tile have landed
        scrub_v_tile<P>(a, cur, kBf16, tile, &nonfinite);
        __syncthreads();  // every thread's copies and scrubs are visible, and the flag is final
        auto& ks = cur.k;
        auto& vs = cur.v;

        // S = Q K^T for the tile: kSn blocks of 8 keys, two at a time.  One ldmatrix gives the
        // B fragments of both (lane l addresses row l % 8 of matrix l / 8: key block n + m / 2,
        // dimensions kc 16 + 8 (m % 2)); each block accumulates over kc in order, as one at a time.
        float sf[kSn][4];
        CONFORM_UNROLL
        for (int n = 0; n < kSn; n += 2) {
            sf[n][0] = sf[n][1] = sf[n][2] = sf[n][3] = 0;
            sf[n + 1][0] = sf[n + 1][1] = sf[n + 1][2] = sf[n + 1][3] = 0;
            CONFORM_UNROLL
            for (int kc = 0; kc < kQc; ++kc) {
                if (kc >= qcs || n >= sns) break;  // padding, or keys past the tile: hidden below
                std::uint32_t b[4];
                ldmatrix_x4<false>(b, &ks[(n + ldm_m / 2) * 8 + ldm_r][kc * 16 + ldm_m % 2 * 8]);
                mma16816<S>(sf[n], qf[kc], b, sf[n]);
                if (n + 1 < sns) mma16816<S>(sf[n + 1], qf[kc], b + 2, sf[n + 1]);
            }
        }
        // Logits; hidden keys -inf whatever their dot product (a NaN in q or k there must not reach the row).
        // A tile the warp's 16 rows see whole -- no mask, no row past Lq, a full tile, every key within
        // the causal and window bounds (the two corners decide: both bounds grow with the row) -- skips
        // the per-element visibility; its logits are the same expressions (logit(s, 0), as mask_at gives).
        const bool whole = !a.has_mask && row0 + 15 < a.lq && tile_hi - k0 == kBk &&
                           (Bug::kCausalPerTile || (structurally_visible<Bug>(a, row0, k0 + kBk - 1) &&
                                                    structurally_visible<Bug>(a, row0 + 15, k0)));
        float tmax[2] = {-INFINITY, -INFINITY};
        auto logits = [&](auto seen_whole) {  // one body, compiled for each case
            CONFORM_UNROLL
            for (int n = 0; n < kSn; ++n)
                CONFORM_UNROLL
                for (int x = 0; x < 4; ++x) {
                    bool visible = true;
                    float mk = 0.0f;
                    if constexpr (!decltype(seen_whole)::value) {
                        const int i = rows[x >> 1], j = k0 + n * 8 + 2 * t + (x & 1);
                        visible = i < a.lq && j < tile_hi && (Bug::kCausalPerTile || structurally_visible<Bug>(a, i, j));
                        mk = visible ? mask_at(mask, a, i, j) : 0.0f;
                        visible = visible && mk != -INFINITY;
                    }
                    sf[n][x] = visible ? logit<Bug>(a, sf[n][x], mk) : -INFINITY;
                    tmax[x >> 1] = nan_max(tmax[x >> 1], sf[n][x]);
                }
        };
        if (whole) logits(std::true_type{});
        else logits(std::false_type{});
        float scale_by[2];
        CONFORM_UNROLL
        for (int rr = 0; rr < 2; ++rr) {
            tmax[rr] = nan_max(tmax[rr], __shfl_xor_sync(kFullMask, tmax[rr], 1));
            tmax[rr] = nan_max(tmax[rr], __shfl_xor_sync(kFullMask, tmax[rr], 2));
            const float m_old = st.m[rr];
            const float m_new = Bug::kTileMaxOnly ? tmax[rr] : nan_max(m_old, tmax[rr]);
            // exp(m_old - m_new), 0 while nothing was visible (-inf - x), 1 while nothing is (-inf - (-inf)).
            scale_by[rr] = Bug::kTileMaxOnly ? 1.0f
                           : m_new == -INFINITY ? 1.0f
                           : m_old == -INFINITY ? 0.0f
                                                : expf(m_old - m_new);
            st.m[rr] = m_new;
            st.l[rr] *= scale_by[rr];
        }
        // (A factor of 1 leaves o as it is: the common case once the row's maximum has settled.)
        if (!Bug::kSkipORescale && (scale_by[0] != 1.0f || scale_by[1] != 1.0f)) {
            CONFORM_UNROLL
            for (int n = 0; n < kOn; ++n)
                CONFORM_UNROLL
                for (int x = 0; x < 4; ++x) of[n][x] = rescaled(of[n][x], scale_by[x >> 1]);
        }
        // Weights p = exp(s - m), FP32; a hidden key's is -0 (the marker the non-finite V pass reads).
        CONFORM_UNROLL
        for (int n = 0; n < kSn; ++n)
            CONFORM_UNROLL
            for (int x = 0; x < 4; ++x) {
                const float m = st.m[x >> 1], s = sf[n][x];
                float p;
                if (s == -INFINITY && (m == -INFINITY ? !Bug::kUnguardedMinusInf : true)) p = -0.0f;
                else p = expf(s - m);
                st.l[x >> 1] += p;
                sf[n][x] = p;
            }
        // O += P V: P rounded to S as the A operand (its C layout is the A layout of two key blocks).
        // Blocks of keys past the tile hold only zero weights: skipped, c + 0 being exactly c.
        CONFORM_UNROLL
        for (int kc = 0; kc < kBk / 16; ++kc) {
            if (2 * kc >= sns) break;
            const std::uint32_t pa[4] = {pack2<S>(sf[2 * kc][0], sf[2 * kc][1]), pack2<S>(sf[2 * kc][2], sf[2 * kc][3]),
                                         pack2<S>(sf[2 * kc + 1][0], sf[2 * kc + 1][1]),
                                         pack2<S>(sf[2 * kc + 1][2], sf[2 * kc + 1][3])};
            // V's B fragments for two value blocks at once, transposed (V is stored keys by
            // columns): matrix m holds keys kc 16 + 8 (m % 2) .. + 7 of columns (n + m / 2) 8 .. + 7.
            CONFORM_UNROLL
            for (int n = 0; n < kOn; n += 2) {
                if (n >= ons) break;
                std::uint32_t b[4];
                ldmatrix_x4<true>(b, &vs[kc * 16 + ldm_m % 2 * 8 + ldm_r][(n + ldm_m / 2) * 8]);
                CONFORM_UNROLL
                for (int h = 0; h < 2; ++h) {
                    if (n + h >= ons) break;
                    mma16816<S>(of[n + h], pa, b + 2 * h, of[n + h]);
                    if (Bug::kFp16Accumulator) {
                        CONFORM_UNROLL
                        for (int x = 0; x < 4; ++x) of[n + h][x] = __half2float(__float2half_rn(of[n + h][x]));
                    }
                }
            }
        }
        if (nonfinite == tile + 1) {  // final since the barrier after the scrub
            // The non-finite values of V this tile zeroed, added by the rows that see their key
            // (a hidden key's -0 marker skips it): p v, or v itself where p rounded to 0 -- the
            // exact weight is positive, so an infinite v makes o infinite, never 0 * inf = NaN.
            // A rare path.  The key loop stays rolled (unrolled, it multiplies the kernel's code by
            // the tile's keys: ptxas then runs for tens of minutes), but sf and of are read and
            // written with constant indices only: one runtime index anywhere puts the whole array
            // in local memory, and every mma of the hot loop then stores its accumulators there.
            for (int key = 0; key < kBk; ++key) {
                const int src = group * 4 + (key % 8) / 2, n = key / 8, x = key & 1;
                float own[2] = {0, 0};  // sf[n][x], sf[n][2 + x] of the lane that holds the key's weights
                CONFORM_UNROLL
                for (int nn = 0; nn < kSn; ++nn)
                    if (nn == n) own[0] = x ? sf[nn][1] : sf[nn][0], own[1] = x ? sf[nn][3] : sf[nn][2];
                const float pk[2] = {__shfl_sync(kFullMask, own[0], src), __shfl_sync(kFullMask, own[1], src)};
                const int j = k0 + key;
                if (j >= tile_hi) continue;
                CONFORM_UNROLL
                for (int on = 0; on < kOn; ++on) {
                    if (on >= ons) break;
                    CONFORM_UNROLL
                    for (int e = 0; e < 2; ++e) {
                        const int col = on * 8 + 2 * t + e;
                        if (col >= a.dv) continue;
                        const float vj = value_of<S>(vh[static_cast<long long>(j) * a.dv + col]);
                        if (isfinite(vj)) continue;
                        CONFORM_UNROLL
                        for (int rr = 0; rr < 2; ++rr) {
                            const float p = value_of<S>(bits_of<S>(pk[rr]));
                            if (p == 0 && signbit(p)) continue;
                            of[on][2 * rr + e] += p > 0 ? p * vj : vj;
                        }
                    }
                }
            }
        }
        __syncthreads();  // the tile is consumed: the next iteration's copies may overwrite its stage
    }
    // The row sums: the four lanes of a group hold parts of each.
    CONFORM_UNROLL
    for (int rr = 0; rr < 2; ++rr) {
        st.l[rr] += __shfl_xor_sync(kFullMask, st.l[rr], 1);
        st.l[rr] += __shfl_xor_sync(kFullMask, st.l[rr], 2);
    }
    CONFORM_UNROLL
    for (int rr = 0; rr < 2; ++rr) {
        const int i = rows[rr];
        if (i >= a.lq) continue;
        CONFORM_UNROLL
        for (int n = 0; n < kOn; ++n) {  // constant indices keep of[] in registers
            if (n >= ons) break;
            CONFORM_UNROLL
            for (int e = 0; e < 2; ++e)
                if (n * 8 + 2 * t + e < a.dv)
                    store_row_value(o, part_o, a, z, h, i, n * 8 + 2 * t + e, of[n][2 * rr + e], st.m[rr], st.l[rr]);
        }
        if (t == 0) store_row_lse(lse, part_lse, a, z, h, i, st.m[rr], st.l[rr]);
    }
}

// ---------------------------------------------------------------------------
// FP32 without tensor cores: a warp per query row, a lane per key of each
// 32-key step, lanes over the value columns for the accumulation.

constexpr int kSimtCols = 16;  // value columns per lane: Dv <= 512 (the tensor-core kernels and cuda.attention: 256)

template <class Bug = AttnNoBug>
__global__ void attention_simt(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                               const float* __restrict__ mask, AttnArgs a, float* __restrict__ o,
                               float* __restrict__ lse, float* __restrict__ part_o, float* __restrict__ part_lse) {
    const int warps = blockDim.x / 32, lane = threadIdx.x % 32;
    const int i = blockIdx.x * warps + threadIdx.x / 32, h = blockIdx.y, z = blockIdx.z, g = kv_head<Bug>(a, h);
    if (i >= a.lq) return;  // no block-wide barrier below: a warp past the last row leaves
    const float* qr = q + (static_cast<long long>(h) * a.lq + i) * a.d;
    const float* kh = k + static_cast<long long>(g) * a.lk * a.d;
    const float* vh = v + static_cast<long long>(g) * a.lk * a.dv;
    float acc[kSimtCols] = {};
    float m = -INFINITY, l = 0;
    int lo, hi;
    key_range<Bug>(a, i, i, z, &lo, &hi);
    const int step = a.block > 0 && a.block < 32 ? a.block : 32;  // keys a step: param block, at most a lane each
    for (int k0 = lo; k0 < hi; k0 += step) {
        const int j = k0 + lane;
        bool visible = lane < step && j < hi && structurally_visible<Bug>(a, i, j);
        const float mk = visible ? mask_at(mask, a, i, j) : 0.0f;
        visible = visible && mk != -INFINITY;
        float s = -INFINITY;
        if (visible) {
            float dot = 0;
            for (int c = 0; c < a.d; ++c) dot = fmaf(qr[c], kh[static_cast<long long>(j) * a.d + c], dot);
            s = logit<Bug>(a, dot, mk);
        }
        float smax = s;
        for (int off = 16; off > 0; off /= 2) smax = nan_max(smax, __shfl_xor_sync(kFullMask, smax, off));
        const float m_new = nan_max(m, smax);
        const float scale_by = m_new == -INFINITY ? 1.0f : m == -INFINITY ? 0.0f : expf(m - m_new);
        m = m_new;
        const float p = s == -INFINITY ? 0.0f : expf(s - m);
        float psum = p;
        for (int off = 16; off > 0; off /= 2) psum += __shfl_xor_sync(kFullMask, psum, off);
        l = l * scale_by + psum;
        for (int c = 0; c < kSimtCols; ++c) acc[c] = rescaled(acc[c], scale_by);
        // Each key's weight broadcast in one shuffle, -1 marking a key not to read (weights are >= 0 or
        // NaN): a hidden key, or one whose logit is exactly -inf (a dot product of -inf) -- weight exactly
        // 0, its value never read (an infinite v there must not reach o).  The step's keys only.
        const float pv = visible && s != -INFINITY ? p : -1.0f;
        const int keys = imin(step, hi - k0);  // warp-uniform
        for (int key = 0; key < keys; ++key) {
            const float pk = __shfl_sync(kFullMask, pv, key);
            if (pk < 0.0f) continue;
            const float* vr = vh + static_cast<long long>(k0 + key) * a.dv;
            for (int c = 0; c < kSimtCols; ++c) {
                if (lane + 32 * c >= a.dv) continue;
                const float vj = vr[lane + 32 * c];  // an infinite v counts whole even where p underflowed
                acc[c] = isinf(vj) ? acc[c] + vj : fmaf(pk, vj, acc[c]);
            }
        }
    }
    for (int c = 0; c < kSimtCols; ++c)
        if (lane + 32 * c < a.dv) store_row_value(o, part_o, a, z, h, i, lane + 32 * c, acc[c], m, l);
    if (lane == 0) store_row_lse(lse, part_lse, a, z, h, i, m, l);
}

// ---------------------------------------------------------------------------
// Split-KV merge (lse_merge over the splits): lse = max_s lse_s + log sum_s
// w_s, w_s = exp(lse_s - max), o = sum_s w_s o_s / sum_s w_s.  An empty
// split (lse_s = -inf) weighs 0; all empty: (0, -inf).  A warp per row.
// With sinks, the row's sink is one more state (0, sink_h): it enters the
// max and the denominator, not the numerator; a NaN or +inf sink makes the
// row NaN (max NaN, or exp(inf - inf)).  With a gate, each merged o_d in
// FP32 is multiplied by sigmoid(g_d) (gated_output) before its one rounding.

// sigmoid(g) in FP32 as the CPU kernels form it, (g >= 0 ? 1 : t) / (1 + t),
// t = expf(-|g|) <= 1 (no overflow for any g); o times it, where an
// infinite o under a gate above -inf stays infinite (the exact gate is
// positive even where this one underflows: never inf * 0).
__device__ __forceinline__ float gated_output(float o, float g) {
    const float t = expf(-fabsf(g));
    return isinf(o) && g > -INFINITY ? o : o * ((g >= 0 ? 1.0f : t) / (1.0f + t));
}

template <class S, class Bug = AttnNoBug>
__global__ void attention_merge(const float* __restrict__ part_o, const float* __restrict__ part_lse, AttnArgs a,
                                const S* __restrict__ sinks, const S* __restrict__ gate, S* __restrict__ o,
                                float* __restrict__ lse) {
    const int warps = blockDim.x / 32, lane = threadIdx.x % 32;
    const long long row = static_cast<long long>(blockIdx.x) * warps + threadIdx.x / 32;
    const long long rows = static_cast<long long>(a.hq) * a.lq;
    if (row >= rows) return;
    auto split_lse = [&](int s) {
        const float x = part_lse[s * rows + row];
        return Bug::kEmptySplitLseZero && x == -INFINITY ? 0.0f : x;
    };
    const int h = static_cast<int>(row / a.lq);
    const float sink = a.sinks ? static_cast<float>(load(sinks[a.sink_kv_head ? h / (a.hq / a.hkv) : h])) : -INFINITY;
    float top = nan_max(-INFINITY, sink);
    for (int s = 0; s < a.splits; ++s) top = nan_max(top, split_lse(s));
    float den = sink == -INFINITY ? 0.0f : expf(sink - top);
    for (int s = 0; s < a.splits; ++s) den += split_lse(s) == -INFINITY ? 0.0f : expf(split_lse(s) - top);
    for (int c = lane; c < a.dv; c += 32) {
        float num = 0;
        for (int s = 0; s < a.splits; ++s) {
            const float w = split_lse(s) == -INFINITY ? 0.0f : expf(split_lse(s) - top);
            const float os = part_o[(s * rows + row) * a.dv + c];  // an empty split's o_s is 0
            num += isinf(os) ? os : w * os;  // a split's weight is positive even where w underflowed
        }
        float out = top == -INFINITY ? (a.nan_rows ? NAN : 0.0f) : num / den;
        if (a.gated) {  // the gate row of (h, i); the empty row's 0 too, so that a NaN gate makes it NaN
            const long long g_row = a.gate_kv_head ? static_cast<long long>(h / (a.hq / a.hkv)) * a.lq + row % a.lq : row;
            out = gated_output(out, static_cast<float>(load(gate[g_row * a.dv + c])));
        }
        o[row * a.dv + c] = store<S>(out);
    }
    if (lane == 0) lse[row] = top == -INFINITY ? (a.nan_rows ? NAN : -INFINITY) : top + logf(den);
}

// ---------------------------------------------------------------------------
// Host side.

// A registry entry completed for attention in format f: lse in FP32, and the
// arithmetic the bound must cover declared (attention.cu).
KernelInfo attention_info(KernelInfo k, Format f);

// Launch choices: warps per block (0: 4 for prefill, 1 for Lq <= 16) and KV
// splits (0: the kernel's choice, param `splits` when given); and the
// empty-row convention of the kernel.
struct AttnLaunch {
    int warps = 0;
    int splits = 0;
    bool nan_rows = false;
    bool sinks = false;         // sink_attention: input 3 is sinks [Hq], the mask (if any) input 4
    bool sink_kv_head = false;  // mutant.cuda.sink_attention.sink_by_kv_head
    bool gated = false;         // gated_attention: input 3 is g [Hq, Lq, Dv], the mask (if any) input 4
    bool gate_kv_head = false;  // mutant.cuda.gated_attention.gate_by_kv_head
};

inline constexpr int kMaxSplits = 64;

// The kernel's split count: param `splits`, else the launch's, else for
// decode-like shapes (Lq <= 16) one split per 512 keys, at most 32.
inline int choose_splits(const Params& p, const AttnLaunch& l, int lq, int lk) {
    int s = static_cast<int>(p.get("splits", 0));
    if (s <= 0) s = l.splits;
    if (s <= 0) s = lq <= 16 ? std::clamp(lk / 512, 1, 32) : 1;
    return std::clamp(s, 1, kMaxSplits);
}

// The input index of the mask: after sink_attention's sinks or gated_attention's g.
inline std::size_t mask_input(const AttnArgs& a) { return a.sinks || a.gated ? 4 : 3; }

inline AttnArgs attention_args(const KernelCall& c, const AttnLaunch& l) {
    const TensorView &qv = c.in[0], &kv = c.in[1], &vv = c.in[2];
    AttnArgs a{};
    a.hq = static_cast<int>(qv.shape[0]), a.lq = static_cast<int>(qv.shape[1]), a.d = static_cast<int>(qv.shape[2]);
    a.hkv = static_cast<int>(kv.shape[0]), a.lk = static_cast<int>(kv.shape[1]), a.dv = static_cast<int>(vv.shape[2]);
    const double scale = c.params.get("scale", 0);
    a.scale = static_cast<float>(scale != 0 ? scale : 1 / std::sqrt(static_cast<double>(a.d)));
    a.softcap = static_cast<float>(c.params.get("softcap", 0));
    a.causal = c.params.get("causal", 0) != 0;
    // A window past Lk sees every earlier key: clamped there (an int holds it).
    const double window = c.params.get("window", 0);
    a.window = window > 0 ? static_cast<int>(std::min<double>(window, std::max(a.lk, 1))) : 0;
    a.sinks = l.sinks;
    if (a.sinks && !(c.in.size() > 3 && c.in[3].rank == 1 && c.in[3].shape[0] == a.hq))
        throw std::invalid_argument("sink_attention: input 3 must be sinks [Hq]");
    a.gated = l.gated, a.gate_kv_head = l.gate_kv_head;
    if (a.gated && !(c.in.size() > 3 && c.in[3].rank == 3 && c.in[3].shape[0] == a.hq && c.in[3].shape[1] == a.lq &&
                     c.in[3].shape[2] == a.dv))
        throw std::invalid_argument("gated_attention: input 3 must be g [Hq, Lq, Dv]");
    a.has_mask = c.in.size() > mask_input(a) && c.in[mask_input(a)].numel() > 0;
    a.splits = choose_splits(c.params, l, a.lq, a.lk);
    a.split_keys = std::max(1, (a.lk + a.splits - 1) / a.splits);
    a.block = static_cast<int>(c.params.get("block", 0));  // the tunable key tile; 0: the kernel's
    a.nan_rows = l.nan_rows;
    a.sink_kv_head = l.sink_kv_head;
    return a;
}

// The padded head dimension of the tensor-core kernel.
inline int padded_dim(int d, int dv) {
    const int m = std::max(d, dv);
    for (int p : {32, 64, 128, 256})
        if (m <= p) return p;
    throw std::invalid_argument("head dimension " + std::to_string(m) + " > 256: not supported by the CUDA attention kernels");
}

// The device buffers of one call: q, k, v, the mask (null without one), o,
// lse, and the split partials (used when a.splits > 1).
template <class S>
struct AttnBuffers {
    const S *q, *k, *v, *mask;
    S* o;
    float *lse, *part_o, *part_lse;
    const S* sinks;  // [Hq] (sink_attention), else null
    const S* gate;   // g [Hq, Lq, Dv] (gated_attention), else null
};

template <class S, class Bug, int P>
void launch_attention_tc(AttnArgs a, dim3 grid, dim3 block, const AttnBuffers<S>& b, cudaStream_t s) {
    constexpr int kBk = TcTile<P>::kBk;
    // Param block may cut a tile short of whole 16-key blocks; the bound counts one block FMA more
    // per tile (docs/attention.md, "Accumulation").
    a.block = a.block > 0 && a.block < kBk ? a.block : kBk;
    auto* kernel_fn = attention_tc<S, P, Bug>;
    constexpr std::size_t bytes = TcTile<P>::kBytes;
    if constexpr (bytes > 48 * 1024) {  // once per instantiation (the benchmark's timed launches included)
        static const cudaError_t opted_in =
            cudaFuncSetAttribute(kernel_fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
        check(opted_in, "cudaFuncSetAttribute", "attention launch");
    }
    CONFORM_LAUNCH(kernel_fn, grid, block, bytes, s)(reinterpret_cast<const unsigned short*>(b.q),
                                                reinterpret_cast<const unsigned short*>(b.k),
                                                reinterpret_cast<const unsigned short*>(b.v), b.mask, a, b.o, b.lse,
                                                b.part_o, b.part_lse);
}

// The forward kernel of S (FP32: attention_simt; FP16/BF16: attention_tc of
// the padded head dimension) and, with several splits, the merge; `warps`
// per block, 0 for the kernel's own (the kernel call and the benchmark).
template <class S, class Bug = AttnNoBug>
void launch_attention(const AttnArgs& a, const AttnBuffers<S>& b, int warps, cudaStream_t s) {
    if constexpr (std::is_same_v<S, float>) {
        if (warps <= 0) warps = 4;
        auto* kernel_fn = attention_simt<Bug>;
        CONFORM_LAUNCH(kernel_fn, dim3((a.lq + warps - 1) / warps, a.hq, a.splits), dim3(32 * warps), 0, s)(
            b.q, b.k, b.v, b.mask, a, b.o, b.lse, b.part_o, b.part_lse);
    } else {
        if (warps <= 0) warps = a.lq <= 16 ? 1 : 4;
        const dim3 grid((a.lq + 16 * warps - 1) / (16 * warps), a.hq, a.splits), block(32 * warps);
        if constexpr (Bug::kTwoPaddings) {
            if (padded_dim(a.d, a.dv) <= 64) launch_attention_tc<S, Bug, 64>(a, grid, block, b, s);
            else launch_attention_tc<S, Bug, 256>(a, grid, block, b, s);
        } else {
            switch (padded_dim(a.d, a.dv)) {
                case 32: launch_attention_tc<S, Bug, 32>(a, grid, block, b, s); break;
                case 64: launch_attention_tc<S, Bug, 64>(a, grid, block, b, s); break;
                case 128: launch_attention_tc<S, Bug, 128>(a, grid, block, b, s); break;
                default: launch_attention_tc<S, Bug, 256>(a, grid, block, b, s); break;
            }
        }
    }
    if (merged(a)) {
        const long long rows = static_cast<long long>(a.hq) * a.lq;
        auto* merge_fn = attention_merge<S, Bug>;
        CONFORM_LAUNCH(merge_fn, dim3(static_cast<unsigned>((rows + 3) / 4)), dim3(128), 0, s)(b.part_o, b.part_lse, a,
                                                                                             b.sinks, b.gate, b.o, b.lse);
    }
}

template <class S, class Bug = AttnNoBug>
void run_attention_as(const KernelCall& c, const char* kernel, const AttnLaunch& l) {
    const AttnArgs a = attention_args(c, l);
    padded_dim(a.d, a.dv);  // refuses head dimensions over 256 before any work
    Stream s(kernel);
    DeviceBuffer in[3] = {DeviceBuffer(c.in[0].numel() * sizeof(S), kernel),
                          DeviceBuffer(c.in[1].numel() * sizeof(S), kernel),
                          DeviceBuffer(c.in[2].numel() * sizeof(S), kernel)};
    for (int t = 0; t < 3; ++t) upload(c.in[t], in[t], s.get(), kernel);
    DeviceBuffer mask(a.has_mask ? c.in[mask_input(a)].numel() * sizeof(S) : 0, kernel),
        sinks(a.sinks ? a.hq * sizeof(S) : 0, kernel);
    if (a.has_mask) upload(c.in[mask_input(a)], mask, s.get(), kernel);
    if (a.sinks) upload(c.in[3], sinks, s.get(), kernel);
    DeviceBuffer gate(a.gated ? c.in[3].numel() * sizeof(S) : 0, kernel);
    if (a.gated) upload(c.in[3], gate, s.get(), kernel);
    const long long rows = static_cast<long long>(a.hq) * a.lq;
    DeviceBuffer o(rows * a.dv * sizeof(S), kernel), lse(rows * sizeof(float), kernel);
    const long long parts = merged(a) ? a.splits : 0;
    DeviceBuffer po(parts * rows * a.dv * sizeof(float), kernel), pl(parts * rows * sizeof(float), kernel);
    poison(o, s.get(), kernel), poison(lse, s.get(), kernel), poison(po, s.get(), kernel), poison(pl, s.get(), kernel);
    if (rows > 0) {
        const AttnBuffers<S> b{in[0].as<S>(), in[1].as<S>(), in[2].as<S>(), a.has_mask ? mask.as<S>() : nullptr,
                               o.as<S>(),     lse.as<float>(), po.as<float>(), pl.as<float>(),
                               a.sinks ? sinks.as<S>() : nullptr, a.gated ? gate.as<S>() : nullptr};
        launch_attention<S, Bug>(a, b, l.warps, s.get());
        check_launch(s.get(), kernel);
    }
    download(o, c.out[0], s.get(), kernel);
    download(lse, c.out[1], s.get(), kernel);
}

template <class Bug = AttnNoBug>
void run_attention(const KernelCall& c, Format f, const char* kernel, const AttnLaunch& l = {}) {
    by_storage(f, [&](auto s) { run_attention_as<decltype(s), Bug>(c, kernel, l); });
}

// run_attention of the kernels themselves, instantiated once (attention.cu):
// a mutant that differs only by a launch switch calls it.
void run_attention_kernels(const KernelCall& c, Format f, const char* kernel, const AttnLaunch& l);

}  // namespace conform::CONFORM_CUDA_NS
