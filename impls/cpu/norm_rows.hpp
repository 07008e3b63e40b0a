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
// 1 + w formed) once per call, not once per row, into 64-byte-aligned
// buffers (a 16-lane load of them then never splits a cache line).  Rows whose fp32 sum
// overflowed or underflowed are recomputed after an exact power-of-two
// prescale (prescale_row in norm.cpp).

using R = typename V::R;

template <class L>
concept WideLanes = requires { requires L::kWide; };

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
    buf.resize(static_cast<std::size_t>(n) + 16);
    float* out = buf.data();
    while (reinterpret_cast<std::uintptr_t>(out) % 64) ++out;  // whole-line vector loads
    const R one = V::set1(1.0f);
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        const R v = V::template load<F>(src + i);
        V::storef(out + i, one_plus ? V::add(one, v) : v);
    }
    for (; i < n; ++i) out[i] = one_plus ? 1.0f + Storage<F>::load(src, i) : Storage<F>::load(src, i);
    return out;
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


// The 16-lane type where the lane type has one, else R (then unused).
template <class L, bool = WideLanes<L>>
struct WideOf {
    using T = typename L::R;
};
template <class L>
struct WideOf<L, true> {
    using T = typename L::W;
};

// Fixed pairwise tree over the lanes, identical for both lane types.
CONFORM_NORM_TARGET inline float hsum(R v) {
    float b[8];
    V::storef(b, v);
    return ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

// A running fp32 sum over the row x of (x - c) or (x - c)^2 (c = 0 unless
// Centered).  Four 8-lane accumulators a0..a3 take the four 8-element parts
// of each 32-element block (hiding the FMA latency); where kWide they are the
// halves of two 16-lane ones, which sums the same values in the same order.
// finish() adds the remaining 8-blocks and the tail (padded with c, so
// padded lanes add exactly zero) to a0 and reduces by hsum into `sum`.
template <Format F, bool Square, bool Centered, class L = V>  // L: V, dependent for if constexpr
struct RowSum {
    using W = typename WideOf<L>::T;
    const St<F>* x;
    float c, sum = 0.0f;
    R cv, a0, a1, a2, a3;
    W cw, a01, a23;
    CONFORM_NORM_TARGET RowSum(const St<F>* x_, float c_) : x(x_), c(c_), cv(L::set1(c_)) {
        a0 = a1 = a2 = a3 = L::zero();
        if constexpr (WideLanes<L>) cw = L::set16(c_), a01 = a23 = L::zero16();
    }
    // Elements [i, i + 32).
    CONFORM_NORM_TARGET void step(long i) {
        const St<F>* p = x + i;
        if constexpr (WideLanes<L>) {
            a01 = accumulate<Square, Centered>(a01, L::template load16<F>(p), cw);
            a23 = accumulate<Square, Centered>(a23, L::template load16<F>(p + 16), cw);
        } else {
            a0 = accumulate<Square, Centered>(a0, L::template load<F>(p), cv);
            a1 = accumulate<Square, Centered>(a1, L::template load<F>(p + 8), cv);
            a2 = accumulate<Square, Centered>(a2, L::template load<F>(p + 16), cv);
            a3 = accumulate<Square, Centered>(a3, L::template load<F>(p + 24), cv);
        }
    }
    // Elements [i, n), after steps over [0, i).
    CONFORM_NORM_TARGET void finish(long i, long n) {
        if constexpr (WideLanes<L>) a0 = L::lo(a01), a1 = L::hi(a01), a2 = L::lo(a23), a3 = L::hi(a23);
        for (; i + 8 <= n; i += 8) a0 = accumulate<Square, Centered>(a0, L::template load<F>(x + i), cv);
        if (i < n) a0 = accumulate<Square, Centered>(a0, load_tail<F>(x + i, n - i, c), cv);
        sum = hsum(L::add(L::add(a0, a1), L::add(a2, a3)));
    }
};

// A stage that does nothing (a pass absent from a fused loop).
struct NoPass {
    void step(long) {}
    void finish(long, long) {}
};

// One loop over the columns running several passes (RowSum, RowScale) side
// by side, each over its own row: each pass does exactly what it does alone.
// The passes are copied in and out: a local object's lanes stay in
// registers, while a referenced one would be reloaded after every store to
// y (vector stores may alias anything).
template <class... Pass>
CONFORM_NORM_TARGET std::tuple<Pass...> fused_copy(long n, Pass... pass) {
    long i = 0;
    for (; i + 32 <= n; i += 32) (pass.step(i), ...);
    (pass.finish(i, n), ...);
    return {pass...};
}
template <class... Pass>
CONFORM_NORM_TARGET void fused(long n, Pass&... pass) {
    std::tie(pass...) = fused_copy(n, pass...);
}

template <Format F, bool Square, bool Centered>
CONFORM_NORM_TARGET float row_sum(const St<F>* x, long n, float c) {
    RowSum<F, Square, Centered> sum(x, c);
    fused(n, sum);
    return sum.sum;
}

// One output block: t = (x - c) * inv, then the op's affine part
// (w already holds 1 + w for zero-centred weights).
template <Affine A, class T>
CONFORM_NORM_TARGET inline T affine(T x, T w, T b, T c, T inv) {
    constexpr bool centered = A == Affine::weight_bias;
    const T t = V::mul(center<centered>(x, c), inv);
    if constexpr (A == Affine::none) return t;
    if constexpr (A == Affine::weight) return V::mul(t, w);
    return V::fma(t, w, b);  // weight_bias: one rounding for t * w + b
}

// y = affine((x - c) * inv) over a row; x in format In, y in Out; w, b fp32.
// Element by element, so the block width (8 or 16 lanes) does not change a
// value.  kStream: full blocks go out with streaming stores (y 16-byte
// aligned).
template <Format In, Format Out, Affine A, bool kStream, class L = V>  // L as in RowSum
struct RowScale {
    using W = typename WideOf<L>::T;
    static constexpr bool has_w = A != Affine::none, has_b = A == Affine::weight_bias;
    const St<In>* x;
    const float *w, *b;
    St<Out>* y;
    R cv, iv;
    W cw, ivw;
    CONFORM_NORM_TARGET RowScale(const St<In>* x_, const float* w_, const float* b_, St<Out>* y_, float c, float inv)
        : x(x_), w(w_), b(b_), y(y_), cv(L::set1(c)), iv(L::set1(inv)) {
        if constexpr (WideLanes<L>) cw = L::set16(c), ivw = L::set16(inv);
    }
    CONFORM_NORM_TARGET void step8(long i) {
        const R z = L::zero();
        const R wv = has_w ? L::loadf(w + i) : z, bv = has_b ? L::loadf(b + i) : z;
        const R v = affine<A>(L::template load<In>(x + i), wv, bv, cv, iv);
        if constexpr (kStream) L::template store_stream<Out>(y + i, v);
        else L::template store<Out>(y + i, v);
    }
    CONFORM_NORM_TARGET void step16(long i) {
        const W z = L::zero16();
        const W wv = has_w ? L::loadf16(w + i) : z, bv = has_b ? L::loadf16(b + i) : z;
        const W v = affine<A>(L::template load16<In>(x + i), wv, bv, cw, ivw);
        if constexpr (kStream) L::template store16_stream<Out>(y + i, v);
        else L::template store16<Out>(y + i, v);
    }
    // Elements [i, i + 32).
    CONFORM_NORM_TARGET void step(long i) {
        if constexpr (WideLanes<L>) step16(i), step16(i + 16);
        else step8(i), step8(i + 8), step8(i + 16), step8(i + 24);
    }
    // Elements [i, n).
    CONFORM_NORM_TARGET void finish(long i, long n) {
        if constexpr (WideLanes<L>)
            if (i + 16 <= n) step16(i), i += 16;
        for (; i + 8 <= n; i += 8) step8(i);
        if (i == n) return;
        const long m = n - i;
        const R z = L::zero();
        const R wv = has_w ? load_tail<Format::fp32>(w + i, m, 0) : z;
        const R bv = has_b ? load_tail<Format::fp32>(b + i, m, 0) : z;
        store_tail<Out>(y + i, m, affine<A>(load_tail<In>(x + i, m, 0), wv, bv, cv, iv));
    }
};

// The passes of a row: rms_norm and l2_norm take the sum of squares, then
// scale; layer_norm the mean of x - x[0] (shifted back by x[0], so a
// constant row has mean exactly x[0] and variance exactly 0), then the sum of
// squared deviations from it, then scales.
template <Format F>
using MeanPass = RowSum<F, false, true>;
template <Format F>
using SquarePass = RowSum<F, true, false>;
template <Format F>
using VarPass = RowSum<F, true, true>;

// Runs `body` on `pass` when `on`, else on a NoPass.
template <class P, class Body>
CONFORM_NORM_TARGET void maybe(bool on, P& pass, Body body) {
    NoPass none;
    if (on) body(pass);
    else body(none);
}

// The rows, software-pipelined: the loop that scales row r also takes the
// variance sum of row r + 1 and the mean sum of row r + 2 (layer_norm), or
// the sum of squares of row r + 1 (rms_norm, l2_norm).  One loop per row
// instead of two or three: fewer loop and load overheads and independent
// work side by side (in cache 10-15 % faster; out of cache no change
// measured, docs/norm.md "Performance").  The later row's plain loads take
// the place of the next-row prefetch the scale pass used to issue.  Each
// row's arithmetic is exactly that of its passes run one after the other,
// so a row's bits do not depend on its neighbours (NormKernel.
// WholeTensorEqualsRowByRow).
template <Format F, Affine A, bool Layer>
struct Rows {
    const NormArgs& a;
    const float *w, *b;
    bool stream;
    const St<F>* x(std::int64_t r) const { return a.x.row<St<F>>(r); }
    bool has(std::int64_t r) const { return r < a.rows; }
    float nf() const { return static_cast<float>(a.n); }
    float mean(std::int64_t r, float s) const { return Storage<F>::load(x(r), 0) + s / nf(); }

    // Row r's statistics from its sums: the shift c and inv = 1/sqrt(d);
    // false when the row was written by the exact-prescale rescue instead.
    bool stats(std::int64_t r, float c, float s, float& inv) const {
        const float div = Layer || A != Affine::none ? nf() : 1.0f;
        const float d = s / div + static_cast<float>(a.eps);
        if (std::isfinite(c) && !needs_rescue(d)) return inv = 1.0f / std::sqrt(d), true;
        thread_local std::vector<float> scaled;
        double eps_scaled;
        if (!prescale_row<F>(x(r), a.n, a.eps, scaled, eps_scaled)) return inv = 1.0f / std::sqrt(d), true;
        rescued(scaled.data(), a.y.row<St<F>>(r), eps_scaled);
        return false;
    }

    // The prescaled row xs (fp32), its passes one after the other.
    void rescued(const float* xs, St<F>* y, double eps) const {
        const long n = a.n;
        float c = 0.0f, d;
        if constexpr (Layer) {
            c = xs[0] + row_sum<Format::fp32, false, true>(xs, n, xs[0]) / nf();
            d = row_sum<Format::fp32, true, true>(xs, n, c) / nf() + static_cast<float>(eps);
        } else {
            d = row_sum<Format::fp32, true, false>(xs, n, 0.0f) / (A != Affine::none ? nf() : 1.0f) +
                static_cast<float>(eps);
        }
        const auto run = [&](auto scale) { fused(n, scale); };
        const float inv = 1.0f / std::sqrt(d);
        if (stream && aligned16(y)) run(RowScale<Format::fp32, F, A, true>(xs, w, b, y, c, inv));
        else run(RowScale<Format::fp32, F, A, false>(xs, w, b, y, c, inv));
    }

    // One fused loop: row r scaled (when on), plus the given later passes.
    template <class... Pass>
    void loop(bool on, std::int64_t r, float c, float inv, Pass&... pass) const {
        if (!on) return fused(a.n, pass...);
        St<F>* y = a.y.row<St<F>>(r);
        if (stream && aligned16(y)) {
            RowScale<F, F, A, true> scale(x(r), w, b, y, c, inv);
            fused(a.n, scale, pass...);
        } else {
            RowScale<F, F, A, false> scale(x(r), w, b, y, c, inv);
            fused(a.n, scale, pass...);
        }
    }

    void run() const {
        if (a.rows == 0) return;
        if constexpr (Layer) run_layer();
        else run_square();
    }

    void run_square() const {
        SquarePass<F> s(x(0), 0.0f);
        fused(a.n, s);
        for (std::int64_t r = 0; r < a.rows; ++r) {
            float inv;
            const bool on = stats(r, 0.0f, s.sum, inv);
            SquarePass<F> next(has(r + 1) ? x(r + 1) : nullptr, 0.0f);
            maybe(has(r + 1), next, [&](auto& p1) { loop(on, r, 0.0f, inv, p1); });
            s = next;
        }
    }

    // Entering row r's loop: mu = row r's mean, v = its variance sum, m =
    // row r + 1's mean sum.
    void run_layer() const {
        const auto mean_pass = [&](std::int64_t r) {
            return MeanPass<F>(has(r) ? x(r) : nullptr, has(r) ? Storage<F>::load(x(r), 0) : 0.0f);
        };
        MeanPass<F> m = mean_pass(0);
        fused(a.n, m);
        float mu = mean(0, m.sum);
        VarPass<F> v(x(0), mu);
        m = mean_pass(1);
        maybe(has(1), m, [&](auto& p2) { fused(a.n, v, p2); });
        for (std::int64_t r = 0; r < a.rows; ++r) {
            float inv;
            const bool on = stats(r, mu, v.sum, inv);
            const float mu_next = has(r + 1) ? mean(r + 1, m.sum) : 0.0f;
            VarPass<F> v_next(has(r + 1) ? x(r + 1) : nullptr, mu_next);
            MeanPass<F> m_next = mean_pass(r + 2);
            maybe(has(r + 1), v_next, [&](auto& p1) {
                maybe(has(r + 2), m_next, [&](auto& p2) { loop(on, r, mu, inv, p1, p2); });
            });
            mu = mu_next, v = v_next, m = m_next;
        }
    }
};

// Whole-tensor entry: rows of x (leading dims folded), broadcast w and b.
template <NormOp Op, Format F>
void run(const KernelCall& call) {
    const NormArgs a = norm_args(call, F, Op);
    thread_local std::vector<float> wbuf, bbuf;
    const float* w = widen<F>(a.w, a.n, a.zero_centered && Op == NormOp::rms, wbuf);
    const float* b = widen<F>(a.b, a.n, false, bbuf);
    constexpr Affine A = Op == NormOp::layer ? Affine::weight_bias : Op == NormOp::l2 ? Affine::none : Affine::weight;
    const bool stream = streaming_output(a.y);
    Rows<F, A, Op == NormOp::layer>{a, w, b, stream}.run();
    if (stream) V::fence();
}
