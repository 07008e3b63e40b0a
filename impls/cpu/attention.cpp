// CPU attention forward kernels (docs/attention.md, "Kernels"): a tiled
// flash kernel — cpu.simd (AVX2, vectorized over the head dimension, exp by
// vf::exp_neg) and cpu.scalar (the same tiling in portable code, also the
// fallback without AVX2) — and the naive baseline cpu.naive, for fp32, fp16
// and bf16 with FP32 accumulators.
//
// Flash form: for each query head, tiles of kAttnQueryTile query rows walk the
// key tiles of B_k keys (aligned at multiples of B_k, so N_b <= ceil(Lk/B_k));
// each row keeps a running max m, running sum l and an unnormalized
// accumulator acc[Dv], rescaled by exp(m_old - m_new) when the max grows.
// The rescale is guarded: while m is still -inf nothing has been accumulated
// and exp(-inf - -inf) would be NaN.  Structural masks (causal bottom-right,
// sliding window) are key ranges per row, so hidden keys are never read.
//
// gated_attention (docs/gated_attention.md) is the same kernel with one more
// step when a row is finished: o_d * sigmoid(g_d) in FP32, rounded once into
// the format.
#include "impls/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/simd_math.hpp"

namespace conform::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

long round8(long n) { return (n + 7) / 8 * 8; }

// What a kernel adds to plain attention: the output gate (gated_attention)
// or the sink logit (sink_attention), right or, for a mutant, wrong.
struct Variant {
    GateForm gate = GateForm::none;
    SinkForm sink = SinkForm::none;
};

// ---- problem geometry ---------------------------------------------------------

struct Geometry {
    long hq = 0, hkv = 0, lq = 0, lk = 0, d = 0, dv = 0;
    long dp = 0, dvp = 0;  // head dims padded with zeros to multiples of 8 (exact: 0 * 0 adds nothing)
    bool causal = false;
    long window = 0;
    float scale = 0, softcap = 0;
    bool has_mask = false;
    long mask_at = 3;          // input index of the mask: 4 for gated_attention (g before it) and sink_attention (sinks)
    GateForm gate = GateForm::none;
    SinkForm sink = SinkForm::none;
    long key_tile = kAttnKeyTile;

    // Visible keys of query i are the contiguous range [lo(i), hi(i)); both
    // are nondecreasing in i (bottom-right alignment: pos = i + Lk - Lq).
    long pos(long i) const { return i + lk - lq; }
    long hi(long i) const { return causal || window > 0 ? std::clamp(pos(i) + 1, 0L, lk) : lk; }
    long lo(long i) const { return window > 0 ? std::clamp(pos(i) - window + 1, 0L, hi(i)) : 0; }
};

bool packed(const TensorView& t) {
    std::int64_t stride = 1;
    for (int a = t.rank - 1; a >= 0; --a) {
        if (t.shape[a] > 1 && t.strides[a] != stride) return false;
        stride *= t.shape[a];
    }
    return true;
}

void require(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("attention kernel: " + what);
}

Geometry read_geometry(const KernelCall& c, Format f, Variant var) {
    const GateForm gate = var.gate;
    const bool sinks = var.sink != SinkForm::none;
    const std::size_t mask_at = gate == GateForm::none && !sinks ? 3 : 4;
    require(c.in.size() == mask_at || c.in.size() == mask_at + 1,
            gate != GateForm::none ? "expects q, k, v, g and an optional mask"
            : sinks                ? "expects q, k, v, sinks and an optional mask"
                                   : "expects q, k, v and an optional mask");
    require(c.out.size() == 2, "expects outputs o and lse");
    const TensorView &q = c.in[0], &k = c.in[1], &v = c.in[2];
    require(q.rank == 3 && k.rank == 3 && v.rank == 3, "q, k, v must have rank 3");
    Geometry g;
    g.hq = q.shape[0], g.lq = q.shape[1], g.d = q.shape[2];
    g.hkv = k.shape[0], g.lk = k.shape[1], g.dv = v.shape[2];
    require(g.d >= 1 && k.shape[2] == g.d, "k must have q's head dim");
    require(g.hkv >= 1 && g.hq % g.hkv == 0, "KV heads must divide query heads");
    require(v.shape[0] == g.hkv && v.shape[1] == g.lk, "v must be [Hkv, Lk, Dv]");
    g.gate = gate, g.sink = var.sink, g.mask_at = static_cast<long>(mask_at);
    if (gate != GateForm::none) {
        const TensorView& gl = c.in[3];
        require(gl.rank == 3 && gl.shape[0] == g.hq && gl.shape[1] == g.lq && gl.shape[2] == g.dv, "g must be [Hq, Lq, Dv]");
    }
    if (sinks) require(c.in[3].rank == 1 && c.in[3].shape[0] == g.hq, "sinks must be [Hq]");
    g.has_mask = c.in.size() == mask_at + 1;
    if (g.has_mask)
        require(c.in[mask_at].rank == 2 && c.in[mask_at].shape[0] == g.lq && c.in[mask_at].shape[1] == g.lk,
                "mask must be [Lq, Lk]");
    const TensorView &o = c.out[0], &lse = c.out[1];
    require(o.rank == 3 && o.shape[0] == g.hq && o.shape[1] == g.lq && o.shape[2] == g.dv, "o must be [Hq, Lq, Dv]");
    require(lse.numel() == g.hq * g.lq, "lse must hold Hq * Lq values");
    for (const TensorView& t : c.in) require(t.format == f && packed(t), "inputs must be packed, in the kernel's format");
    require(o.format == f && packed(o), "o must be packed, in the kernel's format");
    g.dp = round8(g.d), g.dvp = round8(g.dv);
    g.causal = c.params.get("causal", 0) != 0;
    g.window = static_cast<long>(c.params.get("window", 0));
    const double scale = c.params.get("scale", 0);
    // 1/sqrt(D) rounded once to fp32 (the budget counts this rounding).
    g.scale = static_cast<float>(scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(g.d)));
    g.softcap = static_cast<float>(c.params.get("softcap", 0));
    const double block = c.params.get("block", 0);
    if (block > 0) g.key_tile = static_cast<long>(block);
    return g;
}

// rows [r0, r0 + rows) of a packed [.., cols] tensor in format F, as fp32 rows
// of `pad` columns (zeros beyond cols).  Widening is exact.
template <Format F>
void load_rows(const TensorView& t, long r0, long rows, long cols, long pad, float* dst) {
    const storage_t<F>* src = static_cast<const storage_t<F>*>(t.data) + r0 * cols;
    for (long r = 0; r < rows; ++r) {
        for (long c = 0; c < cols; ++c) dst[r * pad + c] = Storage<F>::load(src, r * cols + c);
        std::fill(dst + r * pad + cols, dst + (r + 1) * pad, 0.0f);
    }
}

// lse is fp32 by contract; a caller that allocated another format gets it
// rounded once from the fp32 value.
void store_lse(const TensorView& lse, long flat, float v) {
    if (lse.format == Format::fp32 && packed(lse)) static_cast<float*>(lse.data)[flat] = v;
    else lse.set_bits(flat, encode(lse.format, v));
}

// ---- the output gate (gated_attention) ------------------------------------------------


// Row `row` ([Hq, Lq] flattened) of the gate logits, widened exactly to fp32.
template <Format F>
void load_gate(const Geometry& g, const KernelCall& c, long row, float* dst) {
    if (g.gate == GateForm::none) return;
    load_rows<F>(c.in[3], row, 1, g.dv, g.dv, dst);
}

// ---- per-row online-softmax state -----------------------------------------------

struct RowState {
    float m = -kInf;    // running max of the logits seen
    float l = 0;        // running sum of exp(s_j - m)
    bool bad = false;   // a NaN or +inf logit: the row is NaN (docs/attention.md)
    float* acc = nullptr;  // [dvp] running sum of exp(s_j - m) v_j
};

// The guarded rescale factor of the accumulator when the max moves from m to
// m_new (> -inf): 0 while nothing was accumulated (m = -inf, acc = l = 0).
float rescale_factor(float m, float m_new) { return m == -kInf ? 0.0f : std::exp(m - m_new); }

// An infinite v at a visible key counts whole even where its weight
// underflowed to 0 (the exact weight is positive: w v = +-inf, never
// 0 * inf = NaN), and an infinite accumulator stays infinite when its
// rescale factor underflows.  Scalar; the vector path takes it for a KV head
// whose V holds an infinity (Workspace::v_inf).
inline float weighted(float w, float v) { return std::isinf(v) ? v : w * v; }
inline float rescaled(float acc, float alpha) { return std::isinf(acc) ? acc : acc * alpha; }

// acc[0, dv) = rescaled by alpha, then + the weighted v of the visible keys.
void careful_accumulate(float* acc, long dv, long dvp, float alpha, bool rescale, const float* w, const float* s, long n,
                        const float* v) {
    if (rescale)
        for (long d = 0; d < dv; ++d) acc[d] = rescaled(acc[d], alpha);
    for (long j = 0; j < n; ++j) {
        if (s[j] == -kInf) continue;  // masked: weight 0 and v_j not read (a NaN there must not leak)
        for (long d = 0; d < dv; ++d) acc[d] += weighted(w[j], v[j * dvp + d]);
    }
}

// ---- portable scalar path ---------------------------------------------------------

struct ScalarPath {
    // s[j - jb] for keys [jb, je): scale * q.k, softcap, additive mask.
    static void logits(const Geometry& g, const float* q, const float* k, const float* mask, long jb, long je,
                       float* s) {
        for (long j = jb; j < je; ++j) {
            float dot = 0;
            for (long t = 0; t < g.d; ++t) dot += q[t] * k[j * g.dp + t];
            float x = dot * g.scale;
            if (g.softcap > 0) x = g.softcap * std::tanh(x / g.softcap);
            if (mask) x = mask[j] == -kInf ? -kInf : x + mask[j];  // a -inf entry hides the key, NaN logit or not
            s[j - jb] = x;
        }
    }

    static void update(const Geometry& g, RowState& st, const float* s, long n, const float* v, float* e, bool) {
        float mt = -kInf;
        for (long j = 0; j < n; ++j) {
            if (std::isnan(s[j]) || s[j] == kInf) st.bad = true;
            mt = std::fmax(mt, s[j]);
        }
        if (st.bad) return;
        const float m_new = std::fmax(st.m, mt);
        if (m_new == -kInf) return;  // nothing visible yet: keep the empty state
        const float alpha = m_new != st.m ? rescale_factor(st.m, m_new) : 1.0f;
        st.l *= alpha;
        for (long j = 0; j < n; ++j) {
            e[j] = s[j] == -kInf ? 0.0f : std::exp(s[j] - m_new);
            st.l += e[j];
        }
        careful_accumulate(st.acc, g.dv, g.dvp, alpha, m_new != st.m, e, s, n, v);
        st.m = m_new;
    }
};

// ---- AVX2 path --------------------------------------------------------------------

CONFORM_AVX2 inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return std::fmax(_mm_cvtss_f32(m), _mm_cvtss_f32(_mm_shuffle_ps(m, m, 1)));
}

CONFORM_AVX2 inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

// Lane l of the result = horizontal sum of a[l]: eight dot products in one
// register without eight separate reductions.
CONFORM_AVX2 inline __m256 transpose_sum8(const __m256 (&a)[8]) {
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

struct SimdPath {
    // Eight keys at a time (the last group clamped to key je - 1, its extra
    // lanes set to -inf), so s is written up to round8(je - jb).
    CONFORM_AVX2 static void logits(const Geometry& g, const float* q, const float* k, const float* mask, long jb,
                                    long je, float* s) {
        const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        for (long j = jb; j < je; j += 8) {
            const float* kr[8];
            for (int l = 0; l < 8; ++l) kr[l] = k + std::min(j + l, je - 1) * g.dp;
            __m256 a[8];
            for (__m256& x : a) x = _mm256_setzero_ps();
            for (long t = 0; t < g.dp; t += 8) {
                const __m256 qv = _mm256_loadu_ps(q + t);
                for (int l = 0; l < 8; ++l) a[l] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kr[l] + t), a[l]);
            }
            __m256 x = _mm256_mul_ps(transpose_sum8(a), _mm256_set1_ps(g.scale));
            // vf::softcap clamps NaN to +-cap (its exp clamps the argument); keep a NaN logit NaN.
            if (g.softcap > 0)
                x = _mm256_blendv_ps(vf::softcap(x, g.softcap, 1.0f / g.softcap), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
            if (mask) {  // mask rows are padded by 8; a -inf entry hides the key, NaN logit or not
                const __m256 mk = _mm256_loadu_ps(mask + j), ninf = _mm256_set1_ps(-kInf);
                x = _mm256_blendv_ps(_mm256_add_ps(x, mk), ninf, _mm256_cmp_ps(mk, ninf, _CMP_EQ_OQ));
            }
            const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(je - j)), iota);
            x = _mm256_blendv_ps(_mm256_set1_ps(-kInf), x, _mm256_castsi256_ps(valid));
            _mm256_storeu_ps(s + (j - jb), x);
        }
    }

    // acc[0, dvp) = acc * alpha.
    CONFORM_AVX2 static void scale_acc(float* acc, long dvp, float alpha) {
        const __m256 a = _mm256_set1_ps(alpha);
        for (long d = 0; d < dvp; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), a));
    }

    // acc += sum_j w_j v_j, four registers of acc held across all keys of the
    // tile (the accumulator is read and written once per tile, not per key).
    CONFORM_AVX2 static void accumulate(float* acc, long dvp, const float* w, const float* s, long n, const float* v) {
        long d0 = 0;
        for (; d0 + 32 <= dvp; d0 += 32) {
            __m256 a0 = _mm256_loadu_ps(acc + d0), a1 = _mm256_loadu_ps(acc + d0 + 8);
            __m256 a2 = _mm256_loadu_ps(acc + d0 + 16), a3 = _mm256_loadu_ps(acc + d0 + 24);
            for (long j = 0; j < n; ++j) {
                if (s[j] == -kInf) continue;  // masked key: v_j not read
                const __m256 b = _mm256_set1_ps(w[j]);
                const float* vr = v + j * dvp + d0;
                a0 = _mm256_fmadd_ps(b, _mm256_loadu_ps(vr), a0);
                a1 = _mm256_fmadd_ps(b, _mm256_loadu_ps(vr + 8), a1);
                a2 = _mm256_fmadd_ps(b, _mm256_loadu_ps(vr + 16), a2);
                a3 = _mm256_fmadd_ps(b, _mm256_loadu_ps(vr + 24), a3);
            }
            _mm256_storeu_ps(acc + d0, a0), _mm256_storeu_ps(acc + d0 + 8, a1);
            _mm256_storeu_ps(acc + d0 + 16, a2), _mm256_storeu_ps(acc + d0 + 24, a3);
        }
        for (; d0 < dvp; d0 += 8) {
            __m256 a0 = _mm256_loadu_ps(acc + d0);
            for (long j = 0; j < n; ++j)
                if (s[j] != -kInf) a0 = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_loadu_ps(v + j * dvp + d0), a0);
            _mm256_storeu_ps(acc + d0, a0);
        }
    }

    CONFORM_AVX2 static void update(const Geometry& g, RowState& st, const float* s, long n, const float* v, float* e,
                                    bool v_inf) {
        __m256 vmax = _mm256_set1_ps(-kInf), bad = _mm256_setzero_ps();
        for (long j = 0; j < n; j += 8) {  // lanes past n hold -inf (logits())
            const __m256 x = _mm256_loadu_ps(s + j);
            bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q),
                                                 _mm256_cmp_ps(x, _mm256_set1_ps(kInf), _CMP_EQ_OQ)));
            vmax = _mm256_max_ps(vmax, x);
        }
        if (_mm256_movemask_ps(bad)) st.bad = true;
        if (st.bad) return;
        const float m_new = std::fmax(st.m, hmax8(vmax));
        if (m_new == -kInf) return;  // nothing visible yet: keep the empty state
        const float alpha = m_new != st.m ? rescale_factor(st.m, m_new) : 1.0f;
        st.l *= alpha;
        if (m_new != st.m && !v_inf) scale_acc(st.acc, g.dvp, alpha);
        const __m256 vm = _mm256_set1_ps(m_new), ninf = _mm256_set1_ps(-kInf);
        __m256 sum = _mm256_setzero_ps();
        for (long j = 0; j < n; j += 8) {
            const __m256 x = _mm256_loadu_ps(s + j);
            // exp_neg clamps its argument at -105 (result 0 in fp32); masked lanes are zeroed explicitly.
            const __m256 w = _mm256_andnot_ps(_mm256_cmp_ps(x, ninf, _CMP_EQ_OQ), vf::exp_neg(_mm256_sub_ps(x, vm)));
            _mm256_storeu_ps(e + j, w);
            sum = _mm256_add_ps(sum, w);
        }
        st.l += hsum8(sum);
        if (v_inf) careful_accumulate(st.acc, g.dv, g.dvp, alpha, m_new != st.m, e, s, n, v);
        else accumulate(st.acc, g.dvp, e, s, n, v);
        st.m = m_new;
    }
};

// ---- the tiled driver ---------------------------------------------------------------

struct Workspace {
    std::vector<float> q, k, v, mask;  // fp32 copies: q of one head, k/v of one KV head, mask [Lq, Lk + pad]
    bool v_inf = false;                // v holds an infinity: the careful accumulation (weighted, rescaled)
    std::vector<float> acc, s, e;      // per query tile: accumulators; per (row, key tile): logits, weights
    std::vector<float> gate;           // one row of gate logits (gated_attention)
    std::vector<float> sinks;          // [Hq] sink logits (sink_attention)
    long mask_pitch = 0;
};

// o and lse of query row i of head h from its final state.
// (gated_attention: every element gated, the empty row's 0 too, so that a
// NaN gate logit makes it NaN as in the oracle.)
template <Format F>
void finish_row(const Geometry& g, const KernelCall& c, RowState st, long h, long i, float* gate, float sink) {
    storage_t<F>* o = static_cast<storage_t<F>*>(c.out[0].data) + (h * g.lq + i) * g.dv;
    load_gate<F>(g, c, h * g.lq + i, gate);
    const auto put = [&](long d, float x) { Storage<F>::store(o, d, g.gate == GateForm::none ? x : gate_output(x, gate[d], g.gate)); };
    float lse;
    float keys_l = st.l;  // lse_keys (mutant): the keys' share of l
    if (!st.bad && st.m != -kInf && sink > -kInf) {
        if (g.sink == SinkForm::late) st.l += std::exp(sink - st.m);  // mutant: the sink never entered the max
        if (g.sink == SinkForm::lse_keys) keys_l = st.l - std::exp(sink - st.m);
    }
    if (st.bad) {
        for (long d = 0; d < g.dv; ++d) put(d, kNaN);
        lse = kNaN;
    } else if (st.m == -kInf) {  // fully masked row: the empty state (0, -inf)
        for (long d = 0; d < g.dv; ++d) put(d, 0.0f);
        lse = -kInf;
    } else {
        const float r = 1.0f / st.l;
        for (long d = 0; d < g.dv; ++d) put(d, st.acc[d] * r);
        lse = st.m + std::log(g.sink == SinkForm::lse_keys ? keys_l : st.l);
    }
    store_lse(c.out[1], h * g.lq + i, lse);
}

// One query tile [i0, i1) of head h against every key tile any of its rows
// sees.  A sink logit (sink_attention; -inf: none) is the state every row
// starts from: m = sink, l = e^0 = 1, acc = 0 (its value row is 0); a NaN
// or +inf sink poisons the row like such a logit.
template <class Path>
void query_tile(const Geometry& g, Workspace& w, std::vector<RowState>& st, long i0, long i1, float sink) {
    const long bk = g.key_tile;
    for (long i = i0; i < i1; ++i) {
        RowState& r = st[i - i0];
        r = RowState{};
        r.acc = w.acc.data() + (i - i0) * g.dvp;
        std::fill(r.acc, r.acc + g.dvp, 0.0f);
        if (std::isnan(sink) || sink == kInf) r.bad = true;
        else if (sink > -kInf) r.m = sink, r.l = 1;
    }
    const long jlo = g.lo(i0), jhi = g.hi(i1 - 1);
    for (long t0 = jlo / bk * bk; t0 < jhi; t0 += bk) {
        for (long i = i0; i < i1; ++i) {
            const long jb = std::max(t0, g.lo(i)), je = std::min(t0 + bk, g.hi(i));
            if (jb >= je) continue;
            const float* mask = g.has_mask ? w.mask.data() + i * w.mask_pitch : nullptr;
            Path::logits(g, w.q.data() + i * g.dp, w.k.data(), mask, jb, je, w.s.data());
            Path::update(g, st[i - i0], w.s.data(), je - jb, w.v.data() + jb * g.dvp, w.e.data(), w.v_inf);
        }
    }
}

// Head h's sink logit as the kernel (or a mutant) reads it: -inf for none.
float head_sink(const Geometry& g, const Workspace& w, long h) {
    if (g.sink == SinkForm::none || g.sink == SinkForm::dropped) return -kInf;
    return w.sinks[static_cast<std::size_t>(g.sink == SinkForm::kv_head ? h / (g.hq / g.hkv) : h)];
}

template <Format F, class Path>
void flash_attention(const KernelCall& c, Variant var) {
    const Geometry g = read_geometry(c, F, var);
    require(g.key_tile >= 1, "parameter 'block' must be >= 1");
    Workspace w;
    w.q.resize(static_cast<std::size_t>(g.lq * g.dp));
    w.k.resize(static_cast<std::size_t>(g.lk * g.dp));
    w.v.resize(static_cast<std::size_t>(g.lk * g.dvp));
    w.acc.resize(static_cast<std::size_t>(kAttnQueryTile * g.dvp));
    w.s.resize(static_cast<std::size_t>(round8(g.key_tile)));
    w.e.resize(w.s.size());
    w.gate.resize(static_cast<std::size_t>(g.dv));
    if (g.has_mask) {
        w.mask_pitch = g.lk + 8;  // 8 spare columns: the vector path loads whole groups of 8
        w.mask.resize(static_cast<std::size_t>(g.lq * w.mask_pitch));
        load_rows<F>(c.in[g.mask_at], 0, g.lq, g.lk, w.mask_pitch, w.mask.data());
    }
    if (g.sink != SinkForm::none) {
        w.sinks.resize(static_cast<std::size_t>(g.hq));
        load_rows<F>(c.in[3], 0, 1, g.hq, g.hq, w.sinks.data());
    }
    std::vector<RowState> st(kAttnQueryTile);
    long loaded = -1;
    for (long h = 0; h < g.hq; ++h) {
        const long kvh = h / (g.hq / g.hkv);  // consecutive query heads share a KV head
        if (kvh != loaded) {
            load_rows<F>(c.in[1], kvh * g.lk, g.lk, g.d, g.dp, w.k.data());
            load_rows<F>(c.in[2], kvh * g.lk, g.lk, g.dv, g.dvp, w.v.data());
            w.v_inf = std::any_of(w.v.begin(), w.v.end(), [](float x) { return std::isinf(x); });
            loaded = kvh;
        }
        load_rows<F>(c.in[0], h * g.lq, g.lq, g.d, g.dp, w.q.data());
        const float sink = head_sink(g, w, h);
        const bool late = g.sink == SinkForm::late;  // mutant: the sink joins after the keys
        for (long i0 = 0; i0 < g.lq; i0 += kAttnQueryTile) {
            const long i1 = std::min(g.lq, i0 + kAttnQueryTile);
            query_tile<Path>(g, w, st, i0, i1, late ? -kInf : sink);
            for (long i = i0; i < i1; ++i) finish_row<F>(g, c, st[i - i0], h, i, w.gate.data(), sink);
        }
    }
}

template <Format F>
void simd_kernel(const KernelCall& c, Variant var) {
    if (has_avx2()) flash_attention<F, SimdPath>(c, var);
    else flash_attention<F, ScalarPath>(c, var);
}

// ---- naive baseline: materialized scores, plain softmax, rounding to F everywhere ----

template <Format F>
float rnd(float x) {
    if constexpr (F == Format::fp32) {
        return x;
    } else {
        storage_t<F> t;
        Storage<F>::store(&t, 0, x);
        return Storage<F>::load(&t, 0);
    }
}

template <Format F>
void naive_row(const Geometry& g, const float* q, const float* k, const float* v, const float* mask, float sink, long i,
               std::vector<float>& s, float* o, float& lse) {
    float m = sink;  // -inf without a sink
    bool bad = std::isnan(sink) || sink == kInf;
    for (long j = 0; j < g.lk; ++j) {
        s[j] = -kInf;
        if (j < g.lo(i) || j >= g.hi(i)) continue;
        float dot = 0;
        for (long t = 0; t < g.d; ++t) dot = rnd<F>(dot + rnd<F>(q[t] * k[j * g.dp + t]));
        float x = rnd<F>(dot * rnd<F>(g.scale));
        if (g.softcap > 0) x = rnd<F>(g.softcap * rnd<F>(std::tanh(rnd<F>(x / g.softcap))));
        if (mask) x = mask[j] == -kInf ? -kInf : rnd<F>(x + mask[j]);
        s[j] = x;
        bad |= std::isnan(x) || x == kInf;
        m = std::fmax(m, x);
    }
    if (bad || m == -kInf) {
        for (long d = 0; d < g.dv; ++d) o[d] = bad ? kNaN : 0.0f;
        lse = bad ? kNaN : -kInf;
        return;
    }
    float l = sink > -kInf ? rnd<F>(std::exp(rnd<F>(sink - m))) : 0.0f;  // the sink's term, value row 0
    for (long j = 0; j < g.lk; ++j) l = rnd<F>(l + rnd<F>(std::exp(rnd<F>(s[j] - m))));
    for (long d = 0; d < g.dv; ++d) o[d] = 0;
    for (long j = 0; j < g.lk; ++j) {
        if (s[j] == -kInf) continue;
        const float p = rnd<F>(rnd<F>(std::exp(rnd<F>(s[j] - m))) / l);
        for (long d = 0; d < g.dv; ++d) o[d] = rnd<F>(o[d] + rnd<F>(p * v[j * g.dvp + d]));
    }
    lse = rnd<F>(m + rnd<F>(std::log(l)));
}

// The literal sigmoid 1 / (1 + e^-x), every step rounded to F (e^-x
// overflows F below x ~ -11 in fp16: the baseline's gate is then 0).
template <Format F>
float naive_gated(float o, float g) {
    return rnd<F>(o * rnd<F>(1.0f / rnd<F>(1.0f + rnd<F>(std::exp(-g)))));
}

template <Format F>
void naive_kernel(const KernelCall& c, Variant var) {
    const Geometry g = read_geometry(c, F, var);
    std::vector<float> q(g.lq * g.dp), k(g.lk * g.dp), v(g.lk * g.dvp), mask, s(g.lk), o(g.dv), gl(g.dv), sinks(g.hq, -kInf);
    if (g.sink != SinkForm::none) load_rows<F>(c.in[3], 0, 1, g.hq, g.hq, sinks.data());
    if (g.has_mask) {
        mask.resize(g.lq * g.lk);
        load_rows<F>(c.in[g.mask_at], 0, g.lq, g.lk, g.lk, mask.data());
    }
    for (long h = 0; h < g.hq; ++h) {
        const long kvh = h / (g.hq / g.hkv);
        load_rows<F>(c.in[0], h * g.lq, g.lq, g.d, g.dp, q.data());
        load_rows<F>(c.in[1], kvh * g.lk, g.lk, g.d, g.dp, k.data());
        load_rows<F>(c.in[2], kvh * g.lk, g.lk, g.dv, g.dvp, v.data());
        storage_t<F>* out = static_cast<storage_t<F>*>(c.out[0].data);
        for (long i = 0; i < g.lq; ++i) {
            float lse;
            naive_row<F>(g, q.data() + i * g.dp, k.data(), v.data(), g.has_mask ? mask.data() + i * g.lk : nullptr,
                         sinks[static_cast<std::size_t>(h)], i, s, o.data(), lse);
            load_gate<F>(g, c, h * g.lq + i, gl.data());
            for (long d = 0; d < g.dv; ++d)
                Storage<F>::store(out, (h * g.lq + i) * g.dv + d, g.gate == GateForm::none ? o[d] : naive_gated<F>(o[d], gl[d]));
            store_lse(c.out[1], h * g.lq + i, lse);
        }
    }
}

// op "attention" (plain), "gated_attention" (gate sigmoid) or
// "sink_attention" (sink in_state).
template <Format F>
void add_format(std::vector<KernelInfo>& reg, const std::string& op, Variant var) {
    const bool gated = var.gate != GateForm::none, sinks = var.sink != SinkForm::none;
    const std::string gating = gated ? ", times sigmoid(g) = (g >= 0 ? 1 : t) / (1 + t), t = e^-|g|, in fp32" : "";
    const std::string contract =
        "flash form over tiles of " + std::to_string(kAttnQueryTile) + " queries x " + std::to_string(kAttnKeyTile) +
        " keys (param block overrides the key tile), fp32 logits/max/sum/accumulators, guarded rescale" +
        (sinks ? ", each row's state starting from its head's sink (m = sink, l = 1)" : "") + ", o = acc * (1/l)" +
        gating + " rounded once to the format; lse = m + log(l) in fp32 (lse is fp32 for every format); " +
        (sinks ? "a row without keys (0, sink)" : "fully masked rows (0, -inf)");
    reg.push_back(kernel_info(op, "simd", F, Format::fp32, Role::kernel,
                        "AVX2 8-lane float over the head dim (exp by vf::exp_neg, softcap by vf::softcap), scalar path "
                        "without AVX2; " + contract,
                        [var](const KernelCall& c) { simd_kernel<F>(c, var); }));
    reg.push_back(kernel_info(op, "scalar", F, Format::fp32, Role::kernel, "portable scalar (expf, tanhf); " + contract,
                              [var](const KernelCall& c) { flash_attention<F, ScalarPath>(c, var); }));
    reg.push_back(kernel_info(op, "naive", F, F, Role::baseline,
                        "materialized scores and plain softmax" + std::string(sinks ? " with the sink as one more logit" : "") +
                            std::string(gated ? ", the literal gate o / (1 + e^-g)" : "") +
                            ", every intermediate rounded to the storage format (lse stored as fp32)",
                        [var](const KernelCall& c) { naive_kernel<F>(c, var); }));
}

}  // namespace

// sigmoid(x) in FP32 without overflow: t = e^-|x| <= 1, then 1 / (1 + t) or
// t / (1 + t); relative error (1 + u) / ((1 - e_exp)(1 - u)) - 1 plus the
// absolute error of a subnormal t (docs/gated_attention.md, "Error budget").
float sigmoid32(float x) {
    const float t = std::exp(-std::fabs(x));
    return (x >= 0 ? 1.0f : t) / (1.0f + t);
}

// Element d of a finished row: attention's o, gated per `form`.  An
// infinite o with a gate logit above -inf stays infinite: the exact gate is
// positive even where sigmoid32 underflows to 0 (never inf * 0 = NaN).
float gate_output(float o, float g, GateForm form) {
    switch (form) {
        case GateForm::none: return o;
        case GateForm::sigmoid: return std::isinf(o) && g > -kInf ? o : o * sigmoid32(g);
        case GateForm::one_minus: return o * sigmoid32(-g);  // mutant: 1 - sigmoid(g)
        case GateForm::swapped: return g * sigmoid32(o);     // mutant: the sigmoid of the output, times g
        case GateForm::ignored: return o;                      // mutant: the gate read and dropped
    }
    return o;
}
}  // namespace conform::cpu

namespace conform {

std::vector<KernelInfo> cpu_attention_kernels() {
    std::vector<KernelInfo> r;
    for (const auto& [op, var] : {std::pair{"attention", cpu::Variant{}},
                                  std::pair{"gated_attention", cpu::Variant{GateForm::sigmoid, SinkForm::none}},
                                  std::pair{"sink_attention", cpu::Variant{GateForm::none, SinkForm::in_state}}}) {
        cpu::add_format<Format::fp32>(r, op, var);
        cpu::add_format<Format::fp16>(r, op, var);
        cpu::add_format<Format::bf16>(r, op, var);
    }
    return r;
}

namespace {

void scalar_call(const KernelCall& c, Format f, cpu::Variant var) {
    switch (f) {
        case Format::fp32: return cpu::flash_attention<Format::fp32, cpu::ScalarPath>(c, var);
        case Format::fp16: return cpu::flash_attention<Format::fp16, cpu::ScalarPath>(c, var);
        case Format::bf16: return cpu::flash_attention<Format::bf16, cpu::ScalarPath>(c, var);
        default: throw std::invalid_argument("attention kernel: fp32, fp16 or bf16 only");
    }
}

}  // namespace

void gated_attention_call(const KernelCall& c, Format f, GateForm gate) { scalar_call(c, f, {gate, SinkForm::none}); }

void sink_attention_call(const KernelCall& c, Format f, SinkForm sink) { scalar_call(c, f, {GateForm::none, sink}); }

void add_variant_mutants(Registry& r, const std::string& op, const std::string& bug, const std::string& bug_class,
                         const std::string& what, const std::function<void(const KernelCall&, Format)>& call) {
    for (Format f : {Format::fp32, Format::bf16}) {
        KernelInfo k = mutant_info(op, bug, f, Format::fp32, bug_class, what, [f, call](const KernelCall& c) { call(c, f); });
        k.out_formats = {f, Format::fp32};  // o in the format, lse in fp32 as the kernels store it
        r.add(std::move(k));
    }
}

void register_cpu_attention(Registry& r) {
    for (KernelInfo& k : cpu_attention_kernels()) {
        k.out_formats = {k.out, Format::fp32};  // o in the storage format, lse in fp32
        // Key tiles of kAttnKeyTile (param block overrides): N_b <= ceil(Lk / B_k) rescales.
        if (k.role == Role::kernel) k.declared["key_block"] = cpu::kAttnKeyTile;
        r.add(std::move(k));
    }
}

}  // namespace conform
