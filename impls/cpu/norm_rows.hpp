// Row kernels of the norm family, written once over an 8-lane vector type so
// the AVX2 path and the portable scalar path share one algorithm and one
// summation order: they give bit-identical results (NaN payloads aside).
//
// NOT a self-contained header.  impls/cpu/norm.cpp includes it three times,
// each time inside its own namespace that first defines
//   V                    the lane type (ScalarLanes, Avx2Lanes or
//                        Avx512Bf16Lanes, see norm.cpp)
//   CONFORM_NORM_TARGET  empty, or the AVX2 (AVX-512) target attribute
// because GCC only inlines AVX2 intrinsics into functions carrying the
// target attribute, and the scalar copy must not carry it (it runs on
// machines without AVX2).  Helpers that do not touch V (St, Affine,
// needs_rescue, prescale_row) live in norm.cpp, outside these namespaces.
//
// Arithmetic contract (docs/norm.md): every value is widened exactly to fp32;
// sums are fp32 (FMA for squares); the per-row scalar is d = s / n + float(eps),
// inv = 1 / sqrtf(d) (one correctly rounded division, no rsqrt estimate); each
// element is (x - shift) * inv, times w (or (1 + w) in fp32, or fma(t, w, b)),
// rounded once to the output format.  Weights and biases are widened (and
// 1 + w formed) once per call, not once per row.  Rows whose fp32 sum
// overflowed or underflowed are recomputed after an exact power-of-two
// prescale (prescale_row in norm.cpp).

using R = typename V::R;

// Elements [0, cnt) of a row tail, padded to 8 lanes with `pad`.
template <Format F>
CONFORM_NORM_TARGET inline R load_tail(const St<F>* p, long cnt, float pad) {
    float buf[8];
    for (long j = 0; j < 8; ++j) buf[j] = j < cnt ? Storage<F>::load(p, j) : pad;
    return V::loadf(buf);
}

template <Format F>
CONFORM_NORM_TARGET inline void store_tail(St<F>* p, long cnt, R v) {
    float buf[8];
    V::storef(buf, v);
    for (long j = 0; j < cnt; ++j) Storage<F>::store(p, j, buf[j]);
}

// The [n] weight or bias widened to fp32 once per call (1 + w formed here, in
// fp32, for zero-centred weights); null stays null.
template <Format F>
CONFORM_NORM_TARGET const float* widen(const void* p, long n, bool one_plus, std::vector<float>& buf) {
    if (!p) return nullptr;
    const auto* src = static_cast<const St<F>*>(p);
    buf.resize(static_cast<std::size_t>(n));
    const R one = V::set1(1.0f);
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        const R v = V::template load<F>(src + i);
        V::storef(buf.data() + i, one_plus ? V::add(one, v) : v);
    }
    for (; i < n; ++i) buf[i] = one_plus ? 1.0f + Storage<F>::load(src, i) : Storage<F>::load(src, i);
    return buf.data();
}

// x - c, skipped when the shift is known to be zero (rms_norm, l2_norm).
// T is R, or V::W where the lane type has a 16-lane form (kWide).
template <bool Centered, class T>
CONFORM_NORM_TARGET inline T center(T x, T c) {
    if constexpr (Centered) return V::sub(x, c);
    return x;
}

// acc + (x - c) or acc + (x - c)^2 (fused), lane-wise.
template <bool Square, bool Centered, class T>
CONFORM_NORM_TARGET inline T accumulate(T acc, T x, T c) {
    const T d = center<Centered>(x, c);
    return Square ? V::fma(d, d, acc) : V::add(acc, d);
}

template <class L>
concept WideLanes = requires { requires L::kWide; };

// Fixed pairwise tree over the lanes, identical for both lane types.
CONFORM_NORM_TARGET inline float hsum(R v) {
    float b[8];
    V::storef(b, v);
    return ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

// A sum in progress is four 8-lane accumulators per row, a[k][0..3], over
// 32-element blocks (element i + 8 q + j of each block into lane j of a[k][q]);
// sum_steps takes the whole blocks of columns [i, hi), sum_rest the
// remaining 8-blocks and the tail (into a[k][0]) and the fixed pairwise
// tree.  row_sums takes whole rows; the scale pass of a group takes the next
// group's first sums block by block (scale_group), in the same order.
// Several rows go through one loop (K rows, each with its own accumulators):
// more independent work per step for the out-of-order core (two rows: rms_norm
// +5 %, layer_norm +0-2 %, measured before the statistics were taken ahead;
// in git history: git show dec8d3e^:docs/norm.md.  docs/norm.md, "Why the
// kernels are built this way", says why more chains do not help further).
template <int K>
using Acc = R[K][4];

// sum_steps's blocks with a[k][0]|a[k][1] and a[k][2]|a[k][3] as two 16-lane
// accumulators (L = V where kWide); returns the first column not done.
template <class L, Format F, bool Square, bool Centered, int K>
CONFORM_NORM_TARGET long wide_steps(const St<F>* const (&x)[K], long i, long hi, const float (&c)[K], Acc<K>& a) {
    using W = typename L::W;
    W cw[K], a01[K], a23[K];
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) cw[k] = L::set16(c[k]), a01[k] = L::join(a[k][0], a[k][1]), a23[k] = L::join(a[k][2], a[k][3]);
    for (; i + 32 <= hi; i += 32)
#pragma GCC unroll 4
        for (int k = 0; k < K; ++k) {
            a01[k] = accumulate<Square, Centered>(a01[k], L::template load16<F>(x[k] + i), cw[k]);
            a23[k] = accumulate<Square, Centered>(a23[k], L::template load16<F>(x[k] + i + 16), cw[k]);
        }
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) a[k][0] = L::lo(a01[k]), a[k][1] = L::hi(a01[k]), a[k][2] = L::lo(a23[k]), a[k][3] = L::hi(a23[k]);
    return i;
}

// Sums of (x - c) or (x - c)^2 (c = 0 unless Centered) over the whole
// 32-element blocks of columns [i, hi), i a multiple of 32.
template <Format F, bool Square, bool Centered, int K>
CONFORM_NORM_TARGET long sum_steps(const St<F>* const (&x)[K], long i, long hi, const float (&c)[K], Acc<K>& a) {
    if constexpr (WideLanes<V>) return wide_steps<V, F, Square, Centered, K>(x, i, hi, c, a);
    R cv[K];
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) cv[k] = V::set1(c[k]);
    for (; i + 32 <= hi; i += 32)
#pragma GCC unroll 4
        for (int k = 0; k < K; ++k)
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q) a[k][q] = accumulate<Square, Centered>(a[k][q], V::template load<F>(x[k] + i + 8 * q), cv[k]);
    return i;
}

// From column i (past the last whole block) to n: the 8-blocks and the tail
// (padded with c, so padded lanes add exactly zero), then the lane tree.
template <Format F, bool Square, bool Centered, int K>
CONFORM_NORM_TARGET void sum_rest(const St<F>* const (&x)[K], long i, long n, const float (&c)[K], Acc<K>& a,
                                  float* sum) {
    R cv[K];
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) cv[k] = V::set1(c[k]);
    for (; i + 8 <= n; i += 8)
#pragma GCC unroll 4
        for (int k = 0; k < K; ++k) a[k][0] = accumulate<Square, Centered>(a[k][0], V::template load<F>(x[k] + i), cv[k]);
    for (int k = 0; k < K; ++k) {
        if (i < n) a[k][0] = accumulate<Square, Centered>(a[k][0], load_tail<F>(x[k] + i, n - i, c[k]), cv[k]);
        sum[k] = hsum(V::add(V::add(a[k][0], a[k][1]), V::add(a[k][2], a[k][3])));
    }
}

template <int K>
CONFORM_NORM_TARGET inline void zero_acc(Acc<K>& a) {
    for (auto& row : a)
        for (R& q : row) q = V::zero();
}

// fp32 sums over each of K whole rows (the four accumulators hide the add
// and FMA latency).
template <Format F, bool Square, bool Centered, int K>
CONFORM_NORM_TARGET void row_sums(const St<F>* const (&x)[K], long n, const float (&c)[K], float* sum) {
    Acc<K> a;
    zero_acc<K>(a);
    const long i = sum_steps<F, Square, Centered, K>(x, 0, n, c, a);
    sum_rest<F, Square, Centered, K>(x, i, n, c, a, sum);
}

// One 8-lane output block: t = (x - c) * inv, then the op's affine part
// (w already holds 1 + w for zero-centred weights).
template <Affine A, class T>
CONFORM_NORM_TARGET inline T affine(T x, T w, T b, T c, T inv) {
    constexpr bool centered = A == Affine::weight_bias;
    const T t = V::mul(center<centered>(x, c), inv);
    if constexpr (A == Affine::none) return t;
    if constexpr (A == Affine::weight) return V::mul(t, w);
    return V::fma(t, w, b);  // weight_bias: one rounding for t * w + b
}

// scale_row_as's 16-element steps (L = V where kWide); returns the elements done.
template <class L, Format In, Format Out, Affine A, bool kStream>
[[gnu::always_inline]] CONFORM_NORM_TARGET inline long wide_scale(const St<In>* x, const float* w, const float* b,
                                                                  St<Out>* y, long n, float c, float inv,
                                                                  const St<In>* next) {
    using W = typename L::W;
    constexpr bool has_w = A != Affine::none, has_b = A == Affine::weight_bias;
    const W cw = L::set16(c), ivw = L::set16(inv), zw = L::zero16();
    long i = 0;
    // Streamed 16-bit rows on a 64-byte line: 32 values per step, rounded
    // by one instruction and written as one whole line.
    if constexpr (kStream && !std::is_same_v<St<Out>, float>) {
        if (reinterpret_cast<std::uintptr_t>(y) % 64 == 0) {
            for (; i + 32 <= n; i += 32) {
                if (next) __builtin_prefetch(next + i);
                const W w0 = has_w ? L::loadf16(w + i) : zw, b0 = has_b ? L::loadf16(b + i) : zw;
                const W w1 = has_w ? L::loadf16(w + i + 16) : zw, b1 = has_b ? L::loadf16(b + i + 16) : zw;
                const W v0 = affine<A>(L::template load16<In>(x + i), w0, b0, cw, ivw);
                const W v1 = affine<A>(L::template load16<In>(x + i + 16), w1, b1, cw, ivw);
                L::template store32_stream<Out>(y + i, v0, v1);
            }
        }
    }
    for (; i + 16 <= n; i += 16) {
        if (next && i % 32 == 0) __builtin_prefetch(next + i);
        const W wv = has_w ? L::loadf16(w + i) : zw, bv = has_b ? L::loadf16(b + i) : zw;
        const W v = affine<A>(L::template load16<In>(x + i), wv, bv, cw, ivw);
        if constexpr (kStream) L::template store16_stream<Out>(y + i, v);
        else L::template store16<Out>(y + i, v);
    }
    return i;
}

// y = affine((x - c) * inv) over the row; x in format In, y in Out; w, b fp32.
// kStream: the 8-blocks go out with streaming stores (y 16-byte aligned).
// Always inlined: scale_group calls it once per block of a row.
template <Format In, Format Out, Affine A, bool kStream>
[[gnu::always_inline]] CONFORM_NORM_TARGET inline void scale_row_as(const St<In>* x, const float* w, const float* b,
                                                                    St<Out>* y, long n, float c, float inv,
                                                                    const St<In>* next) {
    const R cv = V::set1(c), iv = V::set1(inv), z = V::zero();
    constexpr bool has_w = A != Affine::none, has_b = A == Affine::weight_bias;
    long i = 0;
    if constexpr (WideLanes<V>) i = wide_scale<V, In, Out, A, kStream>(x, w, b, y, n, c, inv, next);
    for (; i + 8 <= n; i += 8) {
        if (next) __builtin_prefetch(next + i);
        const R wv = has_w ? V::loadf(w + i) : z, bv = has_b ? V::loadf(b + i) : z;
        const R v = affine<A>(V::template load<In>(x + i), wv, bv, cv, iv);
        if constexpr (kStream) V::template store_stream<Out>(y + i, v);
        else V::template store<Out>(y + i, v);
    }
    if (i == n) return;
    const long m = n - i;
    const R wv = has_w ? load_tail<Format::fp32>(w + i, m, 0) : z;
    const R bv = has_b ? load_tail<Format::fp32>(b + i, m, 0) : z;
    store_tail<Out>(y + i, m, affine<A>(load_tail<In>(x + i, m, c), wv, bv, cv, iv));
}

// Streaming stores for outputs much larger than the caches (streaming.hpp):
// same values, only how they are written differs.
template <Format In, Format Out, Affine A>
CONFORM_NORM_TARGET void scale_row(const St<In>* x, const float* w, const float* b, St<Out>* y, long n, float c,
                                   float inv, bool stream, const St<In>* next) {
    if (stream && aligned16(y)) scale_row_as<In, Out, A, true>(x, w, b, y, n, c, inv, next);
    else scale_row_as<In, Out, A, false>(x, w, b, y, n, c, inv, next);
}

// The per-row scalars of the scale pass: shift c and factor inv.  Where the
// fp32 statistics overflowed or underflowed (or the row holds Inf/NaN) the
// row goes through norm_row, which rescues it.
struct RowScale {
    float c = 0, inv = 1;
};

// The statistics' first pass, the one a group's scale pass takes ahead for
// the next group: layer_norm's sum of x - x[0], rms/l2_norm's sum of x^2.
template <NormOp Op>
inline constexpr bool kSquareFirst = Op != NormOp::layer;
template <NormOp Op, Format In>
CONFORM_NORM_TARGET inline float first_shift(const St<In>* x) {
    return Op == NormOp::layer ? Storage<In>::load(x, 0) : 0.0f;
}
template <NormOp Op, Format In, int K>
CONFORM_NORM_TARGET void first_sums(const St<In>* const (&x)[K], long n, float* sum) {
    float c[K];
    for (int k = 0; k < K; ++k) c[k] = first_shift<Op, In>(x[k]);
    row_sums<In, kSquareFirst<Op>, Op == NormOp::layer, K>(x, n, c, sum);
}

// The scalars of K rows from their first sums; ok[k] is false where row k's
// statistics failed.
//   rms_norm (div = n), l2_norm (div = 1): inv = 1 / sqrt(sum x^2 / div + eps).
//   layer_norm (div = n): the mean is x[0] + sum (x - x[0]) / n, so a
//   constant row has mean exactly x[0] and variance exactly 0; a second pass
//   sums (x - mean)^2, and inv = 1 / sqrt(that / n + eps).
template <NormOp Op, Format In, int K>
CONFORM_NORM_TARGET void row_scales(const St<In>* const (&x)[K], long n, double eps, const float* first,
                                    RowScale* s, bool* ok) {
    const float div = Op == NormOp::l2 ? 1.0f : static_cast<float>(n);
    float mu[K] = {}, sq[K];
    if constexpr (Op == NormOp::layer) {
        for (int k = 0; k < K; ++k) mu[k] = first_shift<Op, In>(x[k]) + first[k] / div;
        row_sums<In, true, true, K>(x, n, mu, sq);
    } else {
        for (int k = 0; k < K; ++k) sq[k] = first[k];
    }
    for (int k = 0; k < K; ++k) {
        const float d = sq[k] / div + static_cast<float>(eps);
        s[k] = {mu[k], 1.0f / std::sqrt(d)};
        ok[k] = std::isfinite(mu[k]) && !needs_rescue(d);
    }
}
// The statistics of K rows: their first sums, unless `have_first` (taken
// ahead), then the scalars.
template <NormOp Op, Format In, int K>
CONFORM_NORM_TARGET void row_stats(const St<In>* const (&x)[K], long n, double eps, bool have_first, float* first,
                                   RowScale* s, bool* ok) {
    if (!have_first) first_sums<Op, In, K>(x, n, first);
    row_scales<Op, In, K>(x, n, eps, first, s, ok);
}

template <NormOp Op>
inline constexpr Affine kAffine =
    Op == NormOp::layer ? Affine::weight_bias : Op == NormOp::l2 ? Affine::none : Affine::weight;

// A whole row on its own: statistics, the rescue where they failed
// (prescale_row, then the same row in fp32), then the scale pass.
template <NormOp Op, Format In, Format Out>
void norm_row(const St<In>* x, const float* w, const float* b, St<Out>* y, long n, double eps, bool rescue,
              bool stream) {
    RowScale s[1];
    bool ok[1];
    float first[1];
    row_stats<Op, In, 1>({x}, n, eps, false, first, s, ok);
    if (!ok[0] && rescue) {
        thread_local std::vector<float> scaled;
        double eps_scaled;
        if (prescale_row<In>(x, n, eps, scaled, eps_scaled))
            return norm_row<Op, Format::fp32, Out>(scaled.data(), w, b, y, n, eps_scaled, false, stream);
    }
    scale_row<In, Out, kAffine<Op>>(x, w, b, y, n, s[0].c, s[0].inv, stream, nullptr);
}

// Rows go in groups of kGroupRows: first each row's statistics, then the
// scale pass block by block of kBlockCols columns across the group's rows,
// each row prefetching the same columns of its row in the next group.  Same
// values as row by row (the scale pass is elementwise); what changes is that
// a block of w and b is read once from L1 for the whole group, and that
// memory sees several read and write streams at once (docs/norm.md, "Why the
// kernels are built this way": out of cache layer_norm bf16 went from ~0.6 to
// ~0.8 of the streaming copy).
inline constexpr long kGroupRows = 4, kBlockCols = 256;

// Elements of y before its first 64-byte boundary.
template <class T>
inline long line_lead(const T* y) {
    return static_cast<long>((64 - reinterpret_cast<std::uintptr_t>(y) % 64) % 64 / sizeof(T));
}

// The first sums of a group's rows, taken ahead by the previous group's
// scale pass.
struct Ahead {
    bool ready = false;
    float sum[kGroupRows];
};

// The scale pass of a group (rows r0 .. r0 + g - 1, but those with ok[j]
// false, done whole already), block by block of columns.  A row's blocks end on 64-byte lines
// of its y, so that each line is written whole within one block: a line
// left half-written while the other rows' blocks go out costs its
// write-combining (out of cache, layer_norm bf16 on rows 16 bytes past a line
// fell from 0.54 to 0.41 of the streaming copy with blocks at fixed columns).
// Unless `ahead` is null, each block also takes the next group's first sums
// over the same columns (whole 32-blocks at fixed columns, the rest after
// the last block): arithmetic that fills the time the scale pass waits on
// memory (docs/norm.md, "Why the kernels are built this way": layer_norm fp16
// at 1024x8192 went from 0.59 to 0.69 of the streaming copy).
template <NormOp Op, Format F, bool kStream>
CONFORM_NORM_TARGET void scale_group(const NormArgs& a, const float* w, const float* b, std::int64_t r0, long g,
                                     const RowScale* s, const bool* ok, bool prefetch, Ahead* ahead) {
    constexpr bool sq = kSquareFirst<Op>, centered = Op == NormOp::layer;
    const St<F>* nx[kGroupRows];
    float nc[kGroupRows];
    Acc<kGroupRows> acc;
    const long steps_end = a.n / 32 * 32;
    if (ahead) {
        for (long j = 0; j < kGroupRows; ++j)
            nx[j] = a.x.row<St<F>>(r0 + kGroupRows + j), nc[j] = first_shift<Op, F>(nx[j]);
        zero_acc<kGroupRows>(acc);
    }
    for (long k = 0; k * kBlockCols < a.n; ++k) {
        for (long j = 0; j < g; ++j) {
            if (!ok[j]) continue;
            St<F>* y = a.y.row<St<F>>(r0 + j);
            const long lead = line_lead(y);  // block k: [lead + k B, lead + (k + 1) B), the first from 0
            const long lo = k == 0 ? 0 : std::min<long>(a.n, lead + k * kBlockCols);
            const long hi = std::min<long>(a.n, lead + (k + 1) * kBlockCols);
            if (lo >= hi) continue;
            const std::int64_t nr = r0 + kGroupRows + j;
            const St<F>* next = prefetch && nr < a.rows ? a.x.row<St<F>>(nr) + lo : nullptr;
            scale_row_as<F, F, kAffine<Op>, kStream>(a.x.row<St<F>>(r0 + j) + lo, w ? w + lo : nullptr,
                                                      b ? b + lo : nullptr, y + lo, hi - lo, s[j].c, s[j].inv, next);
        }
        if (ahead)
            sum_steps<F, sq, centered, kGroupRows>(nx, std::min(k * kBlockCols, steps_end),
                                                   std::min((k + 1) * kBlockCols, steps_end), nc, acc);
    }
    if (ahead) sum_rest<F, sq, centered, kGroupRows>(nx, steps_end, a.n, nc, acc, ahead->sum);
}

// Rows r0 .. r0 + g - 1: the statistics two rows at a time (the first sums
// taken ahead where the previous group did); a row whose statistics failed
// then goes whole through norm_row (statistics again, rescue, scale); then
// the group's scale pass, streamed where every row's y allows it, which
// takes the next group's first sums when that group is whole.
template <NormOp Op, Format F>
void run_group(const NormArgs& a, const float* w, const float* b, std::int64_t r0, long g, bool stream,
               Ahead& ahead) {
    RowScale s[kGroupRows];
    bool ok[kGroupRows];
    float first[kGroupRows];
    auto x = [&](long j) { return a.x.row<St<F>>(r0 + j); };
    if (ahead.ready) std::copy(ahead.sum, ahead.sum + g, first);
    long j = 0;
    for (; j + 2 <= g; j += 2) row_stats<Op, F, 2>({x(j), x(j + 1)}, a.n, a.eps, ahead.ready, first + j, s + j, ok + j);
    if (j < g) row_stats<Op, F, 1>({x(j)}, a.n, a.eps, ahead.ready, first + j, s + j, ok + j);
    bool aligned = true;
    for (j = 0; j < g; ++j) {
        St<F>* y = a.y.row<St<F>>(r0 + j);
        if (!ok[j]) norm_row<Op, F, F>(x(j), w, b, y, a.n, a.eps, true, stream);
        aligned = aligned && aligned16(y);
    }
    ahead.ready = r0 + 2 * kGroupRows <= a.rows;
    Ahead* next = ahead.ready ? &ahead : nullptr;
    if (stream && aligned) scale_group<Op, F, true>(a, w, b, r0, g, s, ok, true, next);
    else scale_group<Op, F, false>(a, w, b, r0, g, s, ok, stream, next);
}

// Whole-tensor entry: rows of x (leading dims folded), broadcast w and b.
template <NormOp Op, Format F>
void run(const KernelCall& call) {
    const NormArgs a = norm_args(call, F, Op);
    thread_local std::vector<float> wbuf, bbuf;
    const float* w = widen<F>(a.w, a.n, a.zero_centered && Op == NormOp::rms, wbuf);
    const float* b = widen<F>(a.b, a.n, false, bbuf);
    const bool stream = streaming_output(a.y);
    Ahead ahead;
    for (std::int64_t r0 = 0; r0 < a.rows; r0 += kGroupRows)
        run_group<Op, F>(a, w, b, r0, static_cast<long>(std::min<std::int64_t>(kGroupRows, a.rows - r0)), stream,
                         ahead);
    if (stream) V::fence();
}
