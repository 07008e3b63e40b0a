// CPU kernels of the gated delta rule (docs/gdn.md, "Kernels").
//
// Chunkwise form with an FP32 state, for GDN (scalar decay per head) and KDA
// (decay per key channel).  Per head and chunk of c tokens, entering state S:
//   decay factors  f(r<-i) = exp(sum_{j=i+1..r} g_j), i < r, and from the
//                  chunk start / to the chunk end likewise: every exponent is a
//                  running sum of the gates it covers (so its rounding error is
//                  relative to that sum, not to the chunk's whole decay), <= 0
//                  for g <= 0, and formed only for i < r: nothing above the
//                  diagonal is exponentiated, no 1/Gamma is ever formed
//   A_ri = q_r^T D(r<-i) k_i (i <= r),  L_ri = k_r^T D(r<-i) k_i (i < r)
//   Q_s, K_s rows D(r<-start) q_r, k_r;  K_e rows D(end<-r) k_r;  d = D(end<-start)
//   R = V - K_s S                               (state-dependent right-hand side)
//   V~: v~_r = beta_r (R_r - sum_{i<r} L_ri v~_i)   (forward substitution, the UT solve)
//   O = Q_s S + A V~,   S <- d (.) S + K_e^T V~
// The CPU runs chunks one after another, so the state enters the chunk
// through R directly: the state-independent W = T K_s, U = T V of the GPU
// formulation would cost one more solve and one more product.  Rows are only
// ever combined with earlier rows (lower triangles, running sums forward in
// time), so a token never influences an earlier output, bit for bit, and a
// NaN reaches exactly the outputs the recurrence gives it.
//
// KDA's factor is per channel and sits inside the Gram sums; with sub-chunks
// of kKdaSubChunk tokens, a pair (r, i) in the same sub-chunk uses its own
// running sum, a pair across sub-chunks splits it at the start a0 of r's
// sub-chunk: exp(sum_{a0..r} g) * exp(sum_{i+1..a0-1} g), two factors <= 1
// (no overflow for any gate, unlike the scaled Q e^G, K e^-G form whose range
// ends at chunk * |g_min| = 88.7 in FP32; docs/gdn.md "finite-range envelope").
#include "impls/cpu/gdn.hpp"

#include "numerics/delta_varlen.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/elementwise.hpp"

namespace conform::cpu {
namespace {

long round8(long n) { return (n + 7) / 8 * 8; }

void require(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("gdn/kda kernel: " + what);
}

// ---- problem geometry -------------------------------------------------------------

bool packed(const TensorView& t) {
    std::int64_t stride = 1;
    for (int a = t.rank - 1; a >= 0; --a) {
        if (t.shape[a] > 1 && t.strides[a] != stride) return false;
        stride *= t.shape[a];
    }
    return true;
}

struct Geometry : DeltaCall {
    long dkp = 0, dvp = 0;  // head dims padded with zeros to multiples of 8 (exact: zeros add nothing)
    long gw = 1;            // gates per token and head: 1 (GDN) or dk (KDA)
    bool per_channel = false;
    long cp = 64;  // round8(chunk), the pitch of the [C, C] matrices
};

Geometry read_geometry(const KernelCall& c, Format f, bool per_channel) {
    Geometry geo;
    static_cast<DeltaCall&>(geo) = delta_call(c, f, per_channel);
    geo.per_channel = per_channel;
    geo.gw = per_channel ? geo.dk : 1;
    geo.dkp = round8(geo.dk), geo.dvp = round8(geo.dv), geo.cp = round8(geo.chunk);
    return geo;
}

// ---- per-chunk buffers --------------------------------------------------------------

struct Buffers {
    std::vector<float> q, k, v, g, beta;  // the chunk's tokens: [C, dkp], [C, dkp], [C, dvp], [C, gwp], [C]
    std::vector<float> qs, ks, ke;        // [C, dkp]: rows decayed to the chunk start / end
    std::vector<float> kt, ket;           // [dkp, cp]: K (or a decayed K) and K_e transposed
    std::vector<float> decay;             // [dkp]: D(end <- start)
    std::vector<float> a, l;              // [C, cp]: lower triangles
    std::vector<float> fac;               // GDN: [C, cp + 8] exponents, then factors; KDA: scratch
    std::vector<float> vt, o;             // [C, dvp]: R, then V~; outputs
    std::vector<float> s;                 // [dkp, dvp]: the naive baseline's state, rows = key channels
    std::vector<float> run, t1, t2;       // [dkp] scratch
    std::vector<float> qsub, ksub;        // KDA: [kKdaSubChunk, dkp] a sub-chunk's rows decayed to its start
    long gwp = 8;

    explicit Buffers(const Geometry& g) {
        const auto n = [](long a, long b) { return static_cast<std::size_t>(a * b); };
        gwp = g.per_channel ? g.dkp : 1;
        q.assign(n(g.chunk, g.dkp), 0), k = q, qs = q, ks = q, ke = q;
        v.assign(n(g.chunk, g.dvp), 0), vt = v, o = v;
        this->g.assign(n(g.chunk, gwp), 0), beta.assign(n(g.chunk, 1), 0);
        kt.assign(n(g.dkp, g.cp), 0), ket = kt;
        decay.assign(n(g.dkp, 1), 0), run = decay, t1 = decay, t2 = decay;
        a.assign(n(g.chunk, g.cp), 0), l = a;
        fac.assign(n(g.chunk, g.cp + 8), 0);
        s.assign(n(g.dkp, g.dvp), 0);
        qsub.assign(n(kKdaSubChunk, g.dkp), 0), ksub = qsub;
    }
};

// ---- portable scalar path -------------------------------------------------------------

struct ScalarPath {
    // out[r, j] -/+= sum_{p < inner} x[r, p] y[p, j] for r < rows, j < cols.
    template <bool Sub>
    static void gemm(float* out, long ldo, const float* x, long ldx, const float* y, long ldy, long rows, long inner,
                     long cols) {
        for (long r = 0; r < rows; ++r)
            for (long p = 0; p < inner; ++p) {
                const float xv = x[r * ldx + p];
                for (long j = 0; j < cols; ++j) {
                    const float t = xv * y[p * ldy + j];
                    out[r * ldo + j] = Sub ? out[r * ldo + j] - t : out[r * ldo + j] + t;
                }
            }
    }
    static float dot(const float* a, const float* b, long n) {
        float s = 0;
        for (long i = 0; i < n; ++i) s += a[i] * b[i];
        return s;
    }
    static void mul(const float* a, const float* b, float* out, long n) {
        for (long i = 0; i < n; ++i) out[i] = a[i] * b[i];
    }
    static void scale(const float* a, float s, float* out, long n) {
        for (long i = 0; i < n; ++i) out[i] = a[i] * s;
    }
    static void add(const float* a, const float* b, float* out, long n) {
        for (long i = 0; i < n; ++i) out[i] = a[i] + b[i];
    }
    static void add_scalar(const float* a, float s, float* out, long n) {
        for (long i = 0; i < n; ++i) out[i] = a[i] + s;
    }
    static void exp(float* x, long n) {
        for (long i = 0; i < n; ++i) x[i] = std::exp(x[i]);
    }
};

// ---- AVX2 path ---------------------------------------------------------------------

// e^x for every x: NaN stays NaN, e^x > FLT_MAX is +inf, underflow rounds
// once into the subnormals (0 below ~-103.97, -inf gives 0).  Cephes expf
// polynomial on x - k ln2 (Cody-Waite), then the scale 2^k applied as
// 2^(k - k/2) 2^(k/2), two normal powers for k in [-150, 128], so only the
// last product can round (relative error ~2^-23, <= 2 ulp as the budget
// assumes; tested against double exp).
CONFORM_AVX2 inline __m256 exp8(__m256 x) {
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(0x1.715476p+0f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500E-4f), r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i ki = _mm256_cvtps_epi32(k);
    const __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

CONFORM_AVX2 inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

struct SimdPath {
    // An R x (8 V) tile of out, accumulated over `inner` in registers.
    // The loops over R and V are unrolled explicitly: -O2 does not peel
    // them, and acc would then live in memory instead of 16 registers.
    template <int R, int V, bool Sub>
    CONFORM_AVX2 static void tile(float* out, long ldo, const float* x, long ldx, const float* y, long ldy,
                                  long inner) {
        __m256 acc[R][V];
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) acc[i][v] = _mm256_loadu_ps(out + i * ldo + 8 * v);
        for (long p = 0; p < inner; ++p) {
            __m256 yv[V];
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) yv[v] = _mm256_loadu_ps(y + p * ldy + 8 * v);
#pragma GCC unroll 4
            for (int i = 0; i < R; ++i) {
                const __m256 xb = _mm256_set1_ps(x[i * ldx + p]);
#pragma GCC unroll 4
                for (int v = 0; v < V; ++v)
                    acc[i][v] = Sub ? _mm256_fnmadd_ps(xb, yv[v], acc[i][v]) : _mm256_fmadd_ps(xb, yv[v], acc[i][v]);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + i * ldo + 8 * v, acc[i][v]);
    }

    // All rows of one column stripe of 8 V columns: the stripe of y
    // (inner x 32 floats, 16 KB at inner = 128) stays in L1 across the row blocks.
    template <int V, bool Sub>
    CONFORM_AVX2 static void stripe(float* out, long ldo, const float* x, long ldx, const float* y, long ldy, long rows,
                                    long inner) {
        long r = 0;
        for (; r + 4 <= rows; r += 4) tile<4, V, Sub>(out + r * ldo, ldo, x + r * ldx, ldx, y, ldy, inner);
        for (; r < rows; ++r) tile<1, V, Sub>(out + r * ldo, ldo, x + r * ldx, ldx, y, ldy, inner);
    }

    // As ScalarPath::gemm; cols a multiple of 8.
    template <bool Sub>
    CONFORM_AVX2 static void gemm(float* out, long ldo, const float* x, long ldx, const float* y, long ldy, long rows,
                                  long inner, long cols) {
        long j = 0;
        for (; j + 32 <= cols; j += 32) stripe<4, Sub>(out + j, ldo, x, ldx, y + j, ldy, rows, inner);
        for (; j < cols; j += 8) stripe<1, Sub>(out + j, ldo, x, ldx, y + j, ldy, rows, inner);
    }
    CONFORM_AVX2 static float dot(const float* a, const float* b, long n) {
        __m256 s = _mm256_setzero_ps();
        for (long i = 0; i < n; i += 8) s = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s);
        return hsum8(s);
    }
    CONFORM_AVX2 static void mul(const float* a, const float* b, float* out, long n) {
        for (long i = 0; i < n; i += 8)
            _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    }
    CONFORM_AVX2 static void scale(const float* a, float s, float* out, long n) {
        for (long i = 0; i < n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_set1_ps(s)));
    }
    CONFORM_AVX2 static void add(const float* a, const float* b, float* out, long n) {
        for (long i = 0; i < n; i += 8)
            _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    }
    CONFORM_AVX2 static void add_scalar(const float* a, float s, float* out, long n) {
        for (long i = 0; i < n; i += 8) _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_set1_ps(s)));
    }
    // n need not be a multiple of 8: the lanes past n are masked to -inf
    // before the exp (their results are never stored).
    CONFORM_AVX2 static void exp(float* x, long n) {
        long i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_loadu_ps(x + i)));
        if (i < n) {
            alignas(32) float t[8];
            for (int j = 0; j < 8; ++j) t[j] = i + j < n ? x[i + j] : -std::numeric_limits<float>::infinity();
            _mm256_store_ps(t, exp8(_mm256_load_ps(t)));
            std::copy_n(t, n - i, x + i);
        }
    }
};

// ---- loading a chunk ------------------------------------------------------------------

// Row `row` of n elements into dst, zeros up to `pad`: the padding is reset
// every time, as a NaN scaled into it (0 * NaN, the l2norm of a NaN row)
// would otherwise reach the next head's full-width sums.
template <Format F>
void load_row(const TensorView& t, long row, long n, long pad, float* dst) {
    const storage_t<F>* src = static_cast<const storage_t<F>*>(t.data) + row * n;
    for (long i = 0; i < n; ++i) dst[i] = Storage<F>::load(src, i);
    std::fill(dst + n, dst + pad, 0.0f);
}

// q and k as the recurrence reads them: x / sqrt(|x|^2 + eps) when l2norm
// (eps inside the square root, FP32 sum), then q * scale.
template <class Path>
void prepare_row(const Geometry& g, float* x, bool is_q) {
    if (g.l2norm) Path::scale(x, 1.0f / std::sqrt(Path::dot(x, x, g.dkp) + g.l2_eps), x, g.dkp);
    if (is_q && g.scale != 1) Path::scale(x, g.scale, x, g.dkp);
}

// Requests token t of head h into the cache: one head's rows are H d
// elements apart ([T, H, d]), a stride the hardware prefetchers do not
// follow across pages (measured: a quarter of the kernel's time went to
// these loads without it).
template <Format F>
void prefetch_token(const KernelCall& call, const Geometry& g, long h, long t) {
    const long width[] = {g.dk, g.dk, g.dv, g.gw};
    for (int i = 0; i < 4; ++i) {
        const long bytes = width[i] * static_cast<long>(sizeof(storage_t<F>));
        const char* row = static_cast<const char*>(call.in[i].data) + (t * g.heads + h) * bytes;
        for (long off = 0; off < bytes; off += 64) __builtin_prefetch(row + off);
    }
}

// Tokens [t0, t0 + c) of head h into the buffers (padding stays zero),
// prefetching kPrefetchTokens ahead.
constexpr long kPrefetchTokens = 8;
template <Format F, class Path>
void load_chunk(const KernelCall& call, const Geometry& g, Buffers& b, long h, long t0, long c) {
    for (long t = t0; t < std::min(t0 + kPrefetchTokens, t0 + c); ++t) prefetch_token<F>(call, g, h, t);
    for (long r = 0; r < c; ++r) {
        if (r + kPrefetchTokens < c) prefetch_token<F>(call, g, h, t0 + r + kPrefetchTokens);
        const long th = (t0 + r) * g.heads + h;
        load_row<F>(call.in[0], th, g.dk, g.dkp, &b.q[r * g.dkp]);
        load_row<F>(call.in[1], th, g.dk, g.dkp, &b.k[r * g.dkp]);
        load_row<F>(call.in[2], th, g.dv, g.dvp, &b.v[r * g.dvp]);
        load_row<F>(call.in[3], th, g.gw, b.gwp, &b.g[r * b.gwp]);
        load_row<F>(call.in[4], th, 1, 1, &b.beta[r]);
        prepare_row<Path>(g, &b.q[r * g.dkp], true);
        prepare_row<Path>(g, &b.k[r * g.dkp], false);
    }
}

// ---- the decay-dependent terms of one chunk -----------------------------------------

// kt[p, i] = src[i, p] for i < c (a [c, dkp] block transposed into [dkp, cp]).
void transpose_into(const Geometry& g, const float* src, long c, float* dst) {
    for (long i = 0; i < c; ++i)
        for (long p = 0; p < g.dkp; ++p) dst[p * g.cp + i] = src[i * g.dkp + p];
}

// GDN.  One scalar exponent per pair: row r of fac holds, in column i + 1,
// D(r<-i) = g_{i+1} + ... + g_r for i in [-1, r) — each row is the previous
// one plus g_r (a running sum from every i at once), column r is g_r.  Then
// A = (Q K^T) .* f and L = (K K^T) .* f below the diagonal.
template <class Path>
void gdn_terms(const Geometry& g, Buffers& b, long c) {
    const long w = g.cp + 8;
    for (long r = 0; r < c; ++r) {
        float* row = &b.fac[r * w];
        if (r > 0) Path::add_scalar(&b.fac[(r - 1) * w], b.g[r], row, round8(r));
        row[r] = b.g[r];
    }
    for (long r = 0; r < c; ++r) Path::exp(&b.fac[r * w], r + 1);
    transpose_into(g, b.k.data(), c, b.kt.data());
    for (long r0 = 0; r0 < c; r0 += 4) {  // lower triangles only: 4-row blocks up to their last column
        const long rows = std::min(4L, c - r0), cols = round8(r0 + rows);
        std::fill_n(&b.a[r0 * g.cp], rows * g.cp, 0.0f);
        std::fill_n(&b.l[r0 * g.cp], rows * g.cp, 0.0f);
        Path::template gemm<false>(&b.a[r0 * g.cp], g.cp, &b.q[r0 * g.dkp], g.dkp, b.kt.data(), g.cp, rows, g.dk, cols);
        Path::template gemm<false>(&b.l[r0 * g.cp], g.cp, &b.k[r0 * g.dkp], g.dkp, b.kt.data(), g.cp, rows, g.dk, cols);
    }
    for (long r = 0; r < c; ++r) {
        const float* f = &b.fac[r * w];
        for (long i = 0; i < r; ++i) b.a[r * g.cp + i] *= f[i + 1], b.l[r * g.cp + i] *= f[i + 1];
        Path::scale(&b.q[r * g.dkp], f[0], &b.qs[r * g.dkp], g.dkp);
        Path::scale(&b.k[r * g.dkp], f[0], &b.ks[r * g.dkp], g.dkp);
        if (r + 1 < c) Path::scale(&b.k[r * g.dkp], b.fac[(c - 1) * w + r + 1], &b.ke[r * g.dkp], g.dkp);
    }
    std::copy_n(&b.k[(c - 1) * g.dkp], g.dkp, &b.ke[(c - 1) * g.dkp]);
    std::fill(b.decay.begin(), b.decay.end(), b.fac[(c - 1) * w]);
}

// KDA, per channel.  From the chunk start (Q_s, K_s, d) and to its end (K_e)
// as running sums forward and backward in time; the Gram matrices by
// sub-chunks (see the file comment).
template <class Path>
void kda_terms(const Geometry& g, Buffers& b, long c) {
    const long n = g.dkp;
    float *run = b.run.data(), *f = b.t1.data(), *t = b.t2.data();
    auto gate = [&](long r) { return &b.g[r * n]; };
    for (long r = 0; r < c; ++r) {  // from the start: run = g_0 + ... + g_r
        if (r == 0) std::copy_n(gate(0), n, run);
        else Path::add(run, gate(r), run, n);
        std::copy_n(run, n, f);
        Path::exp(f, g.dk);
        Path::mul(&b.q[r * n], f, &b.qs[r * n], n);
        Path::mul(&b.k[r * n], f, &b.ks[r * n], n);
        if (r == c - 1) std::copy_n(f, n, b.decay.data());
    }
    std::copy_n(&b.k[(c - 1) * n], n, &b.ke[(c - 1) * n]);
    std::fill_n(run, n, 0.0f);
    for (long r = c - 2; r >= 0; --r) {  // to the end: run = g_{r+1} + ... + g_{c-1}, summed backwards
        Path::add(run, gate(r + 1), run, n);
        std::copy_n(run, n, f);
        Path::exp(f, g.dk);
        Path::mul(&b.k[r * n], f, &b.ke[r * n], n);
    }
    float *qsub = b.qsub.data(), *ksub = b.ksub.data();
    for (long a0 = 0; a0 < c; a0 += kKdaSubChunk) {
        const long a1 = std::min(c, a0 + kKdaSubChunk), rows = a1 - a0;
        if (a0 > 0) {
            // Rows of the sub-chunk decayed to its start: run = g_{a0} + ... + g_r.
            for (long r = a0; r < a1; ++r) {
                if (r == a0) std::copy_n(gate(a0), n, run);
                else Path::add(run, gate(r), run, n);
                std::copy_n(run, n, f);
                Path::exp(f, g.dk);
                Path::mul(&b.q[r * n], f, &qsub[(r - a0) * n], n);
                Path::mul(&b.k[r * n], f, &ksub[(r - a0) * n], n);
            }
            // Earlier keys decayed to the same point: run = g_{i+1} + ... + g_{a0-1}.
            std::fill_n(run, n, 0.0f);
            for (long i = a0 - 1; i >= 0; --i) {
                if (i < a0 - 1) Path::add(run, gate(i + 1), run, n);
                std::copy_n(run, n, f);
                Path::exp(f, g.dk);
                Path::mul(&b.k[i * n], f, t, n);
                for (long p = 0; p < n; ++p) b.kt[p * g.cp + i] = t[p];
            }
            const long cols = round8(a0);
            std::fill_n(&b.a[a0 * g.cp], rows * g.cp, 0.0f);
            std::fill_n(&b.l[a0 * g.cp], rows * g.cp, 0.0f);
            Path::template gemm<false>(&b.a[a0 * g.cp], g.cp, qsub, n, b.kt.data(), g.cp, rows, g.dk, cols);
            Path::template gemm<false>(&b.l[a0 * g.cp], g.cp, ksub, n, b.kt.data(), g.cp, rows, g.dk, cols);
        }
        // Pairs inside the sub-chunk: their own running sum g_{i+1} + ... + g_r.
        for (long i = a0; i < a1; ++i) {
            b.a[i * g.cp + i] = Path::dot(&b.q[i * n], &b.k[i * n], n);
            for (long r = i + 1; r < a1; ++r) {
                if (r == i + 1) std::copy_n(gate(r), n, run);
                else Path::add(run, gate(r), run, n);
                std::copy_n(run, n, f);
                Path::exp(f, g.dk);
                Path::mul(&b.k[i * n], f, t, n);
                b.a[r * g.cp + i] = Path::dot(&b.q[r * n], t, n);
                b.l[r * g.cp + i] = Path::dot(&b.k[r * n], t, n);
            }
        }
    }
}

// ---- one chunk ------------------------------------------------------------------------

template <class Path>
void chunk_step(const Geometry& g, Buffers& b, long c, float* s) {
    if (g.per_channel) kda_terms<Path>(g, b, c);
    else gdn_terms<Path>(g, b, c);
    const long dv = g.dvp;
    // R = V - K_s S
    std::copy_n(b.v.data(), c * dv, b.vt.data());
    Path::template gemm<true>(b.vt.data(), dv, b.ks.data(), g.dkp, s, dv, c, g.dk, dv);
    // v~_r = beta_r (R_r - sum_{i<r} L_ri v~_i)
    for (long r = 0; r < c; ++r) {
        float* row = &b.vt[r * dv];
        Path::template gemm<true>(row, dv, &b.l[r * g.cp], g.cp, b.vt.data(), dv, 1, r, dv);
        Path::scale(row, b.beta[r], row, dv);
    }
    // O = Q_s S + A V~ (A's diagonal included)
    std::fill_n(b.o.data(), c * dv, 0.0f);
    Path::template gemm<false>(b.o.data(), dv, b.qs.data(), g.dkp, s, dv, c, g.dk, dv);
    for (long r = 0; r < c; ++r)
        Path::template gemm<false>(&b.o[r * dv], dv, &b.a[r * g.cp], g.cp, b.vt.data(), dv, 1, r + 1, dv);
    // S <- d (.) S + K_e^T V~
    for (long p = 0; p < g.dk; ++p) Path::scale(s + p * dv, b.decay[p], s + p * dv, dv);
    transpose_into(g, b.ke.data(), c, b.ket.data());
    Path::template gemm<false>(s, dv, b.ket.data(), g.cp, b.vt.data(), dv, g.dk, c, dv);
}

// ---- state in and out ---------------------------------------------------------------

// Head h's initial state into s [dkp, dvp] (zero padding and absent state: 0).
void load_state(const KernelCall& call, const Geometry& g, long h, float* s) {
    std::fill_n(s, g.dkp * g.dvp, 0.0f);
    if (!g.has_state) return;
    const TensorView& s0 = call.in[5];
    for (long p = 0; p < g.dk; ++p)
        for (long m = 0; m < g.dv; ++m) s[p * g.dvp + m] = static_cast<float>(s0.value((h * g.dk + p) * g.dv + m));
}

void store_state(const KernelCall& call, const Geometry& g, long h, const float* s, long pitch) {
    const TensorView& out = call.out[1];
    const bool fp32 = out.format == Format::fp32 && packed(out);
    for (long p = 0; p < g.dk; ++p)
        for (long m = 0; m < g.dv; ++m) {
            const long flat = (h * g.dk + p) * g.dv + m;
            if (fp32) static_cast<float*>(out.data)[flat] = s[p * pitch + m];
            else out.set_bits(flat, encode(out.format, s[p * pitch + m]));
        }
}

template <Format F>
void store_y(const KernelCall& call, const Geometry& g, long h, long t0, long c, const float* o, long pitch) {
    storage_t<F>* y = static_cast<storage_t<F>*>(call.out[0].data);
    for (long r = 0; r < c; ++r)
        for (long m = 0; m < g.dv; ++m) Storage<F>::store(y, ((t0 + r) * g.heads + h) * g.dv + m, o[r * pitch + m]);
}

template <Format F, class Path>
void chunkwise(const KernelCall& call, bool per_channel) {
    const Geometry g = read_geometry(call, F, per_channel);
    Buffers b(g);
    // Heads inside the chunk loop, each with its own state: a token's rows of
    // all heads are adjacent in [T, H, d], so the chunk's input pages and
    // cache lines are shared by consecutive heads instead of being fetched
    // again (and missing the TLB again) for every head.
    const long per_head = g.dkp * g.dvp;
    std::vector<float> states(static_cast<std::size_t>(g.heads * per_head));
    for (long h = 0; h < g.heads; ++h) load_state(call, g, h, &states[h * per_head]);
    for (long t0 = 0; t0 < g.tokens; t0 += g.chunk) {
        const long c = std::min(g.chunk, g.tokens - t0);
        for (long h = 0; h < g.heads; ++h) {
            load_chunk<F, Path>(call, g, b, h, t0, c);
            chunk_step<Path>(g, b, c, &states[h * per_head]);
            store_y<F>(call, g, h, t0, c, b.o.data(), g.dvp);
        }
    }
    for (long h = 0; h < g.heads; ++h) store_state(call, g, h, &states[h * per_head], g.dvp);
}

template <Format F>
void simd_kernel(const KernelCall& c, bool per_channel) {
    if (has_avx2()) chunkwise<F, SimdPath>(c, per_channel);
    else chunkwise<F, ScalarPath>(c, per_channel);
}

// ---- naive baseline: the recurrence token by token, FP32 state ------------------------

template <Format F>
void recurrent(const KernelCall& call, bool per_channel) {
    const Geometry g = read_geometry(call, F, per_channel);
    Buffers b(g);
    std::vector<float> e(static_cast<std::size_t>(g.dvp)), y(e);
    for (long h = 0; h < g.heads; ++h) {
        load_state(call, g, h, b.s.data());
        for (long t = 0; t < g.tokens; ++t) {
            load_chunk<F, ScalarPath>(call, g, b, h, t, 1);
            // S <- Diag(alpha) S, then e = v - S^T k, S <- S + beta k e^T, y = S^T q.
            for (long p = 0; p < g.dk; ++p) {
                const float alpha = std::exp(b.g[per_channel ? p : 0]);
                for (long m = 0; m < g.dv; ++m) b.s[p * g.dvp + m] *= alpha;
            }
            for (long m = 0; m < g.dv; ++m) e[m] = b.v[m];
            for (long p = 0; p < g.dk; ++p)
                for (long m = 0; m < g.dv; ++m) e[m] -= b.s[p * g.dvp + m] * b.k[p];
            for (long p = 0; p < g.dk; ++p) {
                const float w = b.beta[0] * b.k[p];
                for (long m = 0; m < g.dv; ++m) b.s[p * g.dvp + m] += w * e[m];
            }
            std::fill(y.begin(), y.end(), 0.0f);
            for (long p = 0; p < g.dk; ++p)
                for (long m = 0; m < g.dv; ++m) y[m] += b.s[p * g.dvp + m] * b.q[p];
            store_y<F>(call, g, h, t, 1, y.data(), g.dvp);
        }
        store_state(call, g, h, b.s.data(), g.dvp);
    }
}

template <Format F>
void add_format(std::vector<KernelInfo>& reg, const std::string& op, bool per_channel) {
    const std::string contract =
        "chunkwise (param chunk, default 64), FP32 state and arithmetic; decay factors exp of running log-decay "
        "sums over i < r only (no 1/Gamma, finite for every gate)" +
        std::string(per_channel ? ", pairs across sub-chunks of " + std::to_string(kKdaSubChunk) +
                                      " split into two factors <= 1"
                                : "") +
        "; forward substitution for the UT solve; y rounded once to the format, state in fp32";
    reg.push_back(kernel_info(op, "simd", F, Format::fp32, Role::kernel,
                              "AVX2 8-lane float (register-tiled products, exp by a Cephes polynomial), scalar path "
                              "without AVX2; " + contract,
                              [per_channel](const KernelCall& c) { delta_per_sequence(c, [&](const KernelCall& s) { simd_kernel<F>(s, per_channel); }); }));
    reg.push_back(kernel_info(op, "scalar", F, Format::fp32, Role::kernel, "portable scalar (expf); " + contract,
                              [per_channel](const KernelCall& c) {
                                  delta_per_sequence(c, [&](const KernelCall& s) { chunkwise<F, ScalarPath>(s, per_channel); });
                              }));
    reg.push_back(kernel_info(op, "naive", F, Format::fp32, Role::baseline,
                              "the recurrence token by token (decay, delta update, readout), FP32 state and "
                              "arithmetic, expf per decay",
                              [per_channel](const KernelCall& c) { delta_per_sequence(c, [&](const KernelCall& s) { recurrent<F>(s, per_channel); }); }));
}

}  // namespace

void delta_exp_avx2(float* x, long n) { SimdPath::exp(x, n); }

DeltaCall delta_call(const KernelCall& c, Format f, bool per_channel) {
    require(c.in.size() >= 5 && c.in.size() <= 7 && !delta_packed(c.in),
            "expects q, k, v, g, beta and an optional initial_state of one sequence");
    require(c.out.size() == 2, "expects outputs y and state");
    const TensorView &q = c.in[0], &k = c.in[1], &v = c.in[2], &g = c.in[3], &beta = c.in[4];
    require(q.rank == 3 && k.rank == 3 && v.rank == 3, "q, k, v must have rank 3");
    DeltaCall d;
    d.tokens = q.shape[0], d.heads = q.shape[1], d.dk = q.shape[2], d.dv = v.shape[2];
    const long gw = per_channel ? d.dk : 1;
    require(d.heads >= 1 && d.dk >= 1 && d.dv >= 1, "needs H, d_k, d_v >= 1");
    require(k.shape[0] == d.tokens && k.shape[1] == d.heads && k.shape[2] == d.dk, "k must be shaped as q");
    require(v.shape[0] == d.tokens && v.shape[1] == d.heads, "v must be [T, H, d_v]");
    require(g.numel() == d.tokens * d.heads * gw, per_channel ? "g must be [T, H, d_k]" : "g must be [T, H]");
    require(beta.numel() == d.tokens * d.heads, "beta must be [T, H]");
    for (int i = 0; i < 5; ++i) require(c.in[i].format == f && packed(c.in[i]), "inputs must be packed, in the kernel's format");
    d.has_state = delta_input_given(c.in, kDeltaInitialState);
    if (d.has_state) require(c.in[5].numel() == d.heads * d.dk * d.dv, "initial_state must be [H, d_k, d_v]");
    require(c.out[0].numel() == d.tokens * d.heads * d.dv && c.out[0].format == f && packed(c.out[0]),
            "y must be [T, H, d_v], packed, in the kernel's format");
    require(c.out[1].numel() == d.heads * d.dk * d.dv, "state must be [H, d_k, d_v]");
    d.l2norm = c.params.get("l2norm", 0) != 0;
    d.l2_eps = static_cast<float>(c.params.get("l2_eps", 1e-6));
    const double scale = c.params.get("scale", 1);
    // 1/sqrt(d_k) rounded once to fp32 (the budget counts this rounding).
    d.scale = static_cast<float>(scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(d.dk)));
    const double chunk = c.params.get("chunk", 64);
    require(chunk >= 1 && chunk <= kDeltaMaxChunk && chunk == std::floor(chunk),
            "parameter 'chunk' must be an integer in [1, " + std::to_string(kDeltaMaxChunk) + "]");
    d.chunk = static_cast<long>(chunk);
    return d;
}

}  // namespace conform::cpu

namespace conform {

void delta_per_sequence(const KernelCall& call, const KernelFn& run, bool carry_state) {
    if (!delta_packed(call.in)) return run(call);
    cpu::require(call.in.size() >= 5 && call.out.size() == 2, "expects q, k, v, g, beta and outputs y, state");
    const std::vector<std::int64_t> cu = delta_cu_seqlens(call.in, call.in[0].shape[0]);
    const auto sequences = static_cast<std::int64_t>(cu.size()) - 1;
    cpu::require(call.out[1].rank == 4 && call.out[1].shape[0] == sequences, "a packed call's state must be [N, H, d_k, d_v]");
    for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
        std::vector<TensorView> in = delta_sequence_inputs(call.in, cu, n);
        if (carry_state && n > 0) {
            in.resize(kDeltaInitialState);
            in.push_back(call.out[1].at_first(static_cast<std::int64_t>(n) - 1));
        }
        run(KernelCall{call.params, std::move(in), delta_sequence_outputs(call.out, cu, n)});
    }
}

std::vector<KernelInfo> cpu_gdn_kernels() {
    std::vector<KernelInfo> r;
    for (const auto& [op, per_channel] : {std::pair{"gdn", false}, std::pair{"kda", true}}) {
        cpu::add_format<Format::fp32>(r, op, per_channel);
        cpu::add_format<Format::bf16>(r, op, per_channel);
    }
    return r;
}

void register_cpu_gdn(Registry& r) {
    for (KernelInfo& k : cpu_gdn_kernels()) {
        k.out_formats = {k.out, Format::fp32};  // y in the storage format, state in fp32
        r.add(std::move(k));
    }
}

}  // namespace conform
