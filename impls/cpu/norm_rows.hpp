// Row kernels of the norm family, written once over an 8-lane vector type so
// the AVX2 path and the portable scalar path share one algorithm and one
// summation order: they give bit-identical results (NaN payloads aside).
//
// NOT a self-contained header.  impls/cpu/norm.cpp includes it twice, each
// time inside its own namespace that first defines
//   V                    the lane type (ScalarLanes or Avx2Lanes, see norm.cpp)
//   CONFORM_NORM_TARGET  empty, or the AVX2 target attribute
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

// row_sum's 32-element steps with a0|a1 and a2|a3 as two 16-lane
// accumulators (L = V where kWide); returns the elements done.
template <class L, Format F, bool Square, bool Centered>
CONFORM_NORM_TARGET long wide_sums(const St<F>* x, long n, float c, R& a0, R& a1, R& a2, R& a3) {
    const typename L::W cw = L::set16(c);
    typename L::W a01 = L::zero16(), a23 = L::zero16();
    long i = 0;
    for (; i + 32 <= n; i += 32) {
        a01 = accumulate<Square, Centered>(a01, L::template load16<F>(x + i), cw);
        a23 = accumulate<Square, Centered>(a23, L::template load16<F>(x + i + 16), cw);
    }
    a0 = L::lo(a01), a1 = L::hi(a01), a2 = L::lo(a23), a3 = L::hi(a23);
    return i;
}

// fp32 sum over the row of (x - c) or (x - c)^2 (c = 0 unless Centered).
// Four accumulators over 32-element blocks hide the FMA latency; the
// remaining 8-blocks and the tail (padded with c, so padded lanes add exactly
// zero) go to the first.
template <Format F, bool Square, bool Centered>
CONFORM_NORM_TARGET float row_sum(const St<F>* x, long n, float c) {
    const R cv = V::set1(c);
    R a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
    long i = 0;
    if constexpr (WideLanes<V>) i = wide_sums<V, F, Square, Centered>(x, n, c, a0, a1, a2, a3);
    for (; i + 32 <= n; i += 32) {
        a0 = accumulate<Square, Centered>(a0, V::template load<F>(x + i), cv);
        a1 = accumulate<Square, Centered>(a1, V::template load<F>(x + i + 8), cv);
        a2 = accumulate<Square, Centered>(a2, V::template load<F>(x + i + 16), cv);
        a3 = accumulate<Square, Centered>(a3, V::template load<F>(x + i + 24), cv);
    }
    for (; i + 8 <= n; i += 8) a0 = accumulate<Square, Centered>(a0, V::template load<F>(x + i), cv);
    if (i < n) a0 = accumulate<Square, Centered>(a0, load_tail<F>(x + i, n - i, c), cv);
    return hsum(V::add(V::add(a0, a1), V::add(a2, a3)));
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

// The per-row scalars of the scale pass: shift c and factor inv.  rms_scale
// and layer_scale return false where the fp32 statistics overflowed or
// underflowed (or the row holds Inf/NaN): such a row goes through norm_row,
// which rescues it.
struct RowScale {
    float c = 0, inv = 1;
};

// rms_norm (div = n) and l2_norm (div = 1): inv = 1 / sqrt(sum x^2 / div + eps).
template <Format In>
CONFORM_NORM_TARGET bool rms_scale(const St<In>* x, long n, float div, double eps, RowScale& s) {
    const float d = row_sum<In, true, false>(x, n, 0.0f) / div + static_cast<float>(eps);
    s = {0.0f, 1.0f / std::sqrt(d)};
    return !needs_rescue(d);
}

// layer_norm, two passes.  The mean is taken of x - x[0] and shifted back,
// so a constant row has mean exactly x[0] and variance exactly 0.
template <Format In>
CONFORM_NORM_TARGET bool layer_scale(const St<In>* x, long n, double eps, RowScale& s) {
    const float nf = static_cast<float>(n), k = Storage<In>::load(x, 0);
    const float mu = k + row_sum<In, false, true>(x, n, k) / nf;
    const float d = row_sum<In, true, true>(x, n, mu) / nf + static_cast<float>(eps);
    s = {mu, 1.0f / std::sqrt(d)};
    return std::isfinite(mu) && !needs_rescue(d);
}

// One op's statistics and scale pass (Op selects the affine part).
template <NormOp Op, Format In>
CONFORM_NORM_TARGET bool row_scale(const St<In>* x, long n, float div, double eps, RowScale& s) {
    if constexpr (Op == NormOp::layer) return layer_scale<In>(x, n, eps, s);
    else return rms_scale<In>(x, n, div, eps, s);
}
template <NormOp Op>
inline constexpr Affine kAffine =
    Op == NormOp::layer ? Affine::weight_bias : Op == NormOp::l2 ? Affine::none : Affine::weight;

// A whole row on its own: statistics, the rescue where they failed
// (prescale_row, then the same row in fp32), then the scale pass.
template <NormOp Op, Format In, Format Out>
void norm_row(const St<In>* x, const float* w, const float* b, St<Out>* y, long n, float div, double eps,
              bool rescue, bool stream) {
    RowScale s;
    if (!row_scale<Op, In>(x, n, div, eps, s) && rescue) {
        thread_local std::vector<float> scaled;
        double eps_scaled;
        if (prescale_row<In>(x, n, eps, scaled, eps_scaled))
            return norm_row<Op, Format::fp32, Out>(scaled.data(), w, b, y, n, div, eps_scaled, false, stream);
    }
    scale_row<In, Out, kAffine<Op>>(x, w, b, y, n, s.c, s.inv, stream, nullptr);
}

// Rows go in groups of kGroupRows: first each row's statistics, then the
// scale pass block by block of kBlockCols columns across the group's rows,
// each row prefetching the same columns of its row in the next group.  Same
// values as row by row (the scale pass is elementwise); what changes is that
// a block of w and b is read once from L1 for the whole group, and that
// memory sees several read and write streams at once (docs/norm.md,
// "Performance": out of cache layer_norm bf16 went from ~0.6 to ~0.8 of the
// streaming copy).
inline constexpr long kGroupRows = 4, kBlockCols = 256;

// Elements of y before its first 64-byte boundary.
template <class T>
inline long line_lead(const T* y) {
    return static_cast<long>((64 - reinterpret_cast<std::uintptr_t>(y) % 64) % 64 / sizeof(T));
}

// The scale pass of a group (rows r0 .. r0 + g - 1, those with whole[j] done
// already), block by block of columns.  A row's blocks end on 64-byte lines
// of its y, so that each line is written whole within one block: a line
// left half-written while the other rows' blocks go out costs its
// write-combining (out of cache, layer_norm bf16 on rows 16 bytes past a line
// fell from 0.54 to 0.41 of the streaming copy with blocks at fixed columns).
template <NormOp Op, Format F, bool kStream>
CONFORM_NORM_TARGET void scale_group(const NormArgs& a, const float* w, const float* b, std::int64_t r0, long g,
                                     const RowScale* s, const bool* whole, bool prefetch) {
    for (long k = 0; k * kBlockCols < a.n; ++k) {
        for (long j = 0; j < g; ++j) {
            if (whole[j]) continue;
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
    }
}

// Rows r0 .. r0 + g - 1: statistics row by row (a row whose statistics
// failed goes whole through norm_row: statistics again, rescue, scale), then
// the group's scale pass, streamed where every row's y allows it.
template <NormOp Op, Format F>
void run_group(const NormArgs& a, const float* w, const float* b, std::int64_t r0, long g, bool stream) {
    const float div = Op == NormOp::rms ? static_cast<float>(a.n) : 1.0f;
    RowScale s[kGroupRows];
    bool whole[kGroupRows];
    bool aligned = true;
    for (long j = 0; j < g; ++j) {
        const St<F>* x = a.x.row<St<F>>(r0 + j);
        whole[j] = !row_scale<Op, F>(x, a.n, div, a.eps, s[j]);
        if (whole[j]) norm_row<Op, F, F>(x, w, b, a.y.row<St<F>>(r0 + j), a.n, div, a.eps, true, stream);
        aligned = aligned && aligned16(a.y.row<St<F>>(r0 + j));
    }
    if (stream && aligned) scale_group<Op, F, true>(a, w, b, r0, g, s, whole, true);
    else scale_group<Op, F, false>(a, w, b, r0, g, s, whole, stream);
}

// Whole-tensor entry: rows of x (leading dims folded), broadcast w and b.
template <NormOp Op, Format F>
void run(const KernelCall& call) {
    const NormArgs a = norm_args(call, F, Op);
    thread_local std::vector<float> wbuf, bbuf;
    const float* w = widen<F>(a.w, a.n, a.zero_centered && Op == NormOp::rms, wbuf);
    const float* b = widen<F>(a.b, a.n, false, bbuf);
    const bool stream = streaming_output(a.y);
    for (std::int64_t r0 = 0; r0 < a.rows; r0 += kGroupRows)
        run_group<Op, F>(a, w, b, r0, static_cast<long>(std::min<std::int64_t>(kGroupRows, a.rows - r0)), stream);
    if (stream) V::fence();
}
