// mla_bound (docs/mla.md, "Error budget"): every stage of the kernels as a
// value with an elementwise error bound (MlaApprox), from the exact inputs.
#include "oracle/mla_bound.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "numerics/mla_dims.hpp"
#include "oracle/bound.hpp"
#include "oracle/rope.hpp"

namespace conform::oracle {
namespace {

using MlaDVec = std::vector<double>;

// A computed vector: |computed_k - v_k| <= e_k.
struct MlaApprox {
    MlaDVec v, e;
};

struct MlaCtx {
    MlaDims d;
    MlaDVec h, w_dkv, w_uk, w_uv, w_q, w_kr, c_cache, kr_cache;
    double scale, base;
    int pairing;
    std::int64_t offset;
    bool causal, cache_rotated;
    double u, eta;  // the arithmetic's unit roundoff and absolute error of an underflowing result
    Format store, out;
    double e_exp = 0;  // relative error of the kernel's expf and logf: 2u per ulp
    RopeTableModel rope;  // its FP32 cos/sin tables, pow within its declared ulps
};

MlaCtx mla_read_ctx(const Params& p, const std::vector<TensorView>& in, Format acc, const std::vector<Format>& out) {
    const bool cache = in.size() >= 8 && in[6].rank == 2 && in[6].data != nullptr;
    MlaCtx c{{in[2].shape[0], in[0].shape[0], cache ? in[6].shape[0] : 0, in[0].shape[1], in[2].shape[2], in[2].shape[1],
           in[5].shape[0], in[3].shape[1]},
          decoded_values(in[0]), decoded_values(in[1]), decoded_values(in[2]), decoded_values(in[3]),
          decoded_values(in[4]), decoded_values(in[5]), cache ? decoded_values(in[6]) : MlaDVec{},
          cache ? decoded_values(in[7]) : MlaDVec{}, 0, p.get("base", 10000.0), static_cast<int>(p.get("pairing", 0)),
          static_cast<std::int64_t>(p.get("offset", 0)), p.get("causal", 1) != 0, p.get("cache_rotated", 1) != 0,
          unit_roundoff(acc), ulp_at(acc, 0), in[0].format, out.at(0), 0, {}};
    const double s = p.get("scale", 0);
    c.scale = s != 0 ? s : 1 / std::sqrt(static_cast<double>(c.d.d_q()));
    // expf within one ulp (glibc's), or the ulps a kernel declares (CUDA's expf: 2).
    c.e_exp = 2 * c.u * std::max(1.0, p.get("declared.exp_ulps", 1));
    c.rope.pow_units = rope_pow_units(p);  // glibc's pow within one ulp, or the ulps declared (CUDA's: 2)
    return c;
}

// Rounding of a value within `pre` of v into format f: nothing when f is
// no narrower than the arithmetic (FP32 into FP32; the naive baseline,
// whose every step is already in f); +inf past f's range (an overflow the
// model does not cover).
double mla_stored(const MlaCtx& c, Format f, double v, double pre) {
    const double z = std::fabs(v) + pre;
    if (!(z <= max_finite(f))) return INFINITY;
    return unit_roundoff(f) <= c.u ? pre : pre + 0.5 * ulp_at(f, z);
}

MlaApprox mla_stored_all(const MlaCtx& c, MlaApprox a, Format f) {
    for (std::size_t k = 0; k < a.v.size(); ++k) a.e[k] = mla_stored(c, f, a.v[k], a.e[k]);
    return a;
}

// y = W x (or W^T x) for a row-major [rows, cols] block of W at w0: an fma
// chain per entry (gamma of its length on the computed magnitudes).
MlaApprox mla_linear(const MlaCtx& c, const MlaDVec& w, std::size_t w0, std::int64_t rows, std::int64_t cols, const MlaApprox& x,
              bool transposed = false) {
    const std::int64_t n_out = transposed ? cols : rows, n_in = transposed ? rows : cols;
    const double g = gamma(static_cast<double>(n_in), c.u);
    MlaApprox y{MlaDVec(static_cast<std::size_t>(n_out)), MlaDVec(static_cast<std::size_t>(n_out))};
    for (std::int64_t r = 0; r < n_out; ++r) {
        double v = 0, prop = 0, mag = 0;
        for (std::int64_t k = 0; k < n_in; ++k) {
            const double a = w[w0 + static_cast<std::size_t>(transposed ? k * cols + r : r * cols + k)];
            const auto kk = static_cast<std::size_t>(k);
            v += a * x.v[kk], prop += std::fabs(a) * x.e[kk], mag += std::fabs(a) * (std::fabs(x.v[kk]) + x.e[kk]);
        }
        y.v[static_cast<std::size_t>(r)] = v;
        const double err = prop + g * mag + static_cast<double>(n_in) * c.eta;
        y.e[static_cast<std::size_t>(r)] = mag + err <= max_finite(Format::fp32) ? err : INFINITY;
    }
    return y;
}

MlaApprox mla_exact_rows(const MlaDVec& v, std::int64_t row, std::int64_t width) {
    const auto b = v.begin() + row * width;
    return {MlaDVec(b, b + width), MlaDVec(static_cast<std::size_t>(width), 0.0)};
}

// x rotated at position m with the kernels' FP32 cos/sin tables
// (rope_table_error) and two FP32 roundings per output, then stored.
MlaApprox mla_rotated(const MlaCtx& c, const MlaApprox& x, double m) {
    const std::int64_t half = c.d.d_r / 2;
    const double g2 = gamma(2, c.u);
    MlaApprox y{MlaDVec(x.v.size()), MlaDVec(x.v.size())};
    for (std::int64_t j = 0; j < half; ++j) {
        const auto ia = static_cast<std::size_t>(c.pairing == 0 ? 2 * j : j);
        const auto ib = static_cast<std::size_t>(c.pairing == 0 ? 2 * j + 1 : j + half);
        const double abs_log_theta = 2.0 * static_cast<double>(j) / static_cast<double>(c.d.d_r) * std::log(c.base);
        const double angle = m * std::exp(-abs_log_theta), cs = std::cos(angle), sn = std::sin(angle);
        const TableError te = rope_table_error(c.rope, angle, abs_log_theta, cs, sn);
        const double xa = x.v[ia], xb = x.v[ib], ea = x.e[ia], eb = x.e[ib], ax = std::fabs(xa), bx = std::fabs(xb);
        const double ca = std::fabs(cs) + te.cos, sa = std::fabs(sn) + te.sin;
        y.v[ia] = xa * cs - xb * sn, y.v[ib] = xa * sn + xb * cs;
        y.e[ia] = ca * ea + sa * eb + ax * te.cos + bx * te.sin + g2 * (ca * (ax + ea) + sa * (bx + eb)) + 3 * c.eta;
        y.e[ib] = sa * ea + ca * eb + ax * te.sin + bx * te.cos + g2 * (sa * (ax + ea) + ca * (bx + eb)) + 3 * c.eta;
    }
    return mla_stored_all(c, y, c.store);
}

MlaApprox mla_concat(MlaApprox a, const MlaApprox& b) {
    a.v.insert(a.v.end(), b.v.begin(), b.v.end());
    a.e.insert(a.e.end(), b.e.begin(), b.e.end());
    return a;
}

// The keys every head reads: latent and rotated rope key per key j.
struct MlaKeyRows {
    std::vector<MlaApprox> c, kr;
};

MlaKeyRows mla_key_rows(const MlaCtx& c) {
    const MlaDims& d = c.d;
    MlaKeyRows k;
    for (std::int64_t j = 0; j < d.cached; ++j) {
        k.c.push_back(mla_exact_rows(c.c_cache, j, d.d_c));
        const MlaApprox raw = mla_exact_rows(c.kr_cache, j, d.d_r);
        k.kr.push_back(c.cache_rotated ? raw : mla_rotated(c, raw, static_cast<double>(c.offset - d.cached + j)));
    }
    for (std::int64_t t = 0; t < d.tokens; ++t) {
        const MlaApprox ht = mla_exact_rows(c.h, t, d.d_model);
        k.c.push_back(mla_stored_all(c, mla_linear(c, c.w_dkv, 0, d.d_c, d.d_model, ht), c.store));
        k.kr.push_back(mla_rotated(c, mla_linear(c, c.w_kr, 0, d.d_r, d.d_model, ht), static_cast<double>(c.offset + t)));
    }
    return k;
}

// One row's attention over its visible keys from the computed query, keys
// and values (docs/mla.md, steps 3-4): the average's values and bounds
// before the output rounding, and the lse bound.
struct MlaRowBound {
    MlaApprox o;
    double lse_err;
};

MlaRowBound mla_attend_bound(const MlaCtx& c, const MlaApprox& q, const std::vector<MlaApprox>& keys, const std::vector<const MlaApprox*>& vals) {
    const std::size_t nk = keys.size(), dv = vals.front()->v.size();
    const double n = static_cast<double>(q.v.size()), sc = std::fabs(c.scale), g_dot = gamma(n + 3, c.u);
    MlaDVec s(nk), delta(nk);
    for (std::size_t j = 0; j < nk; ++j) {
        double dot = 0, prop = 0, mag = 0;
        for (std::size_t r = 0; r < q.v.size(); ++r) {
            const double a = q.v[r], ea = q.e[r], b = keys[j].v[r], eb = keys[j].e[r];
            dot += a * b, prop += std::fabs(a) * eb + ea * std::fabs(b) + ea * eb;
            mag += (std::fabs(a) + ea) * (std::fabs(b) + eb);
        }
        s[j] = c.scale * dot, delta[j] = sc * (prop + g_dot * mag) + (n + 1) * c.eta;
        if (!(mag <= max_finite(Format::fp32))) delta[j] = INFINITY;  // the FP32 chain may overflow
    }
    const double m = *std::max_element(s.begin(), s.end()), dmax = *std::max_element(delta.begin(), delta.end());
    if (m == -INFINITY && std::none_of(s.begin(), s.end(), [](double x) { return std::isnan(x); }))
        return {{MlaDVec(dv, 0.0), MlaDVec(dv, 0.0)}, 0};  // every logit -inf: exactly o = 0 required (lse -inf)
    const double e_exp = c.e_exp;  // expf (and logf) within the kernel's ulps
    double l = 0, big_e = 0;
    for (double x : s) l += std::exp(x - m);
    MlaDVec p(nk), r(nk);
    for (std::size_t j = 0; j < nk; ++j) {
        p[j] = std::exp(s[j] - m) / l;
        r[j] = std::expm1(delta[j] + c.u * (std::fabs(s[j] - m) + 2 * dmax) + e_exp);  // rho_j, completed below
        big_e += p[j] * r[j];
    }
    for (double& x : r) x = (1 + x) * (1 + big_e) - 1;
    const double g_avg = gamma(2 * static_cast<double>(nk) + 1, c.u);
    MlaRowBound b{{MlaDVec(dv), MlaDVec(dv)}, 0};
    for (std::size_t e = 0; e < dv; ++e) {
        double val = 0, weights = 0, mag = 0, vmax = 0;
        for (std::size_t j = 0; j < nk; ++j) {
            const double v = vals[j]->v[e], ev = vals[j]->e[e], av = std::fabs(v) + ev;
            val += p[j] * v, weights += p[j] * (r[j] * av + ev), mag += p[j] * (1 + r[j]) * av, vmax = std::max(vmax, av);
        }
        b.o.v[e] = val;
        b.o.e[e] = weights + g_avg * mag + 2 * static_cast<double>(nk) * c.eta * vmax;
        // The kernels sum exp(s_j - m) v_j over the row's maximum m before
        // they divide by l: that sum, l times the average's magnitude, may
        // overflow FP32 where the average does not (latents near the
        // format's max with equal weights): no bound there.  (A running
        // maximum would need attention's accumulator scan; these kernels
        // form every logit first.)
        if (!(l * mag * (1 + g_avg) < max_finite(Format::fp32))) b.o.e[e] = INFINITY;
    }
    // l >= 1 (the largest weight is exp(0)): underflowing weights move it by at most nk eta.
    const double g_l = gamma(static_cast<double>(nk), c.u),
                 log_err = std::log1p(big_e) + g_l / (1 - g_l) + static_cast<double>(nk) * c.eta;
    const double lse = m + std::log(l);
    const double pre = log_err + e_exp * (std::fabs(std::log(l)) + log_err);
    b.lse_err = pre + c.u * (std::fabs(lse) + pre);
    return b;
}

// Head i's query for token t: q^C and the rotated q^R, both stored.
MlaApprox mla_query(const MlaCtx& c, std::int64_t i, std::int64_t t, MlaApprox* qc) {
    const MlaDims& d = c.d;
    const MlaApprox q = mla_linear(c, c.w_q, static_cast<std::size_t>(i * d.d_q() * d.d_model), d.d_q(), d.d_model,
                            mla_exact_rows(c.h, t, d.d_model));
    *qc = mla_stored_all(c, {MlaDVec(q.v.begin(), q.v.begin() + d.d_nope), MlaDVec(q.e.begin(), q.e.begin() + d.d_nope)}, c.store);
    return mla_rotated(c, {MlaDVec(q.v.begin() + d.d_nope, q.v.end()), MlaDVec(q.e.begin() + d.d_nope, q.e.end())},
                   static_cast<double>(c.offset + t));
}

std::int64_t mla_visible_keys(const MlaCtx& c, std::int64_t t) { return c.causal ? c.d.cached + t + 1 : c.d.keys(); }

// Bounds of head i, both forms: o [L, d_v] then lse [L] for each.
struct MlaHeadBounds {
    MlaDVec o_explicit, lse_explicit, o_absorbed, lse_absorbed;
};

MlaHeadBounds mla_head_bounds(const MlaCtx& c, const MlaKeyRows& k, std::int64_t i, bool want_explicit, bool want_absorbed) {
    const MlaDims& d = c.d;
    const std::size_t uk0 = static_cast<std::size_t>(i * d.d_nope * d.d_c), uv0 = static_cast<std::size_t>(i * d.d_v * d.d_c);
    std::vector<MlaApprox> k_exp, v_exp, k_abs;
    std::vector<const MlaApprox*> v_exp_p, v_abs_p;
    for (std::int64_t j = 0; j < d.keys(); ++j) {
        const MlaApprox& cj = k.c[static_cast<std::size_t>(j)];
        if (want_explicit) {
            k_exp.push_back(mla_concat(mla_stored_all(c, mla_linear(c, c.w_uk, uk0, d.d_nope, d.d_c, cj), c.store), k.kr[static_cast<std::size_t>(j)]));
            v_exp.push_back(mla_stored_all(c, mla_linear(c, c.w_uv, uv0, d.d_v, d.d_c, cj), c.store));
        }
        k_abs.push_back(mla_concat(cj, k.kr[static_cast<std::size_t>(j)]));
    }
    for (std::size_t j = 0; j < v_exp.size(); ++j) v_exp_p.push_back(&v_exp[j]);
    for (const MlaApprox& cj : k.c) v_abs_p.push_back(&cj);
    MlaHeadBounds hb;
    for (std::int64_t t = 0; t < d.tokens; ++t) {
        MlaApprox qc;
        const MlaApprox qr = mla_query(c, i, t, &qc);
        const auto vis = static_cast<std::size_t>(mla_visible_keys(c, t));
        if (want_explicit) {
            const MlaRowBound rb = mla_attend_bound(c, mla_concat(qc, qr), {k_exp.begin(), k_exp.begin() + static_cast<std::ptrdiff_t>(vis)},
                                             {v_exp_p.begin(), v_exp_p.begin() + static_cast<std::ptrdiff_t>(vis)});
            for (std::size_t e = 0; e < rb.o.v.size(); ++e) hb.o_explicit.push_back(mla_stored(c, c.out, rb.o.v[e], rb.o.e[e]));
            hb.lse_explicit.push_back(rb.lse_err);
        }
        if (want_absorbed) {
            const MlaApprox a = mla_stored_all(c, mla_linear(c, c.w_uk, uk0, d.d_nope, d.d_c, qc, true), c.store);
            const MlaRowBound rb = mla_attend_bound(c, mla_concat(a, qr), {k_abs.begin(), k_abs.begin() + static_cast<std::ptrdiff_t>(vis)},
                                             {v_abs_p.begin(), v_abs_p.begin() + static_cast<std::ptrdiff_t>(vis)});
            const MlaApprox o = mla_linear(c, c.w_uv, uv0, d.d_v, d.d_c, mla_stored_all(c, rb.o, c.store));
            for (std::size_t e = 0; e < o.v.size(); ++e) hb.o_absorbed.push_back(mla_stored(c, c.out, o.v[e], o.e[e]));
            hb.lse_absorbed.push_back(rb.lse_err);
        }
    }
    return hb;
}

// The larger of the forms' bounds (one may be absent).
double mla_larger(const MlaDVec& a, const MlaDVec& b, std::size_t k) {
    const double x = a.empty() ? 0.0 : a[k], y = b.empty() ? 0.0 : b[k];
    return std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y);
}

// An element's verdict bound from its bound `b` on the inputs and `b_finite`
// on the inputs with every NaN and infinity replaced by 0: kUndefined where
// the latter is not finite (finite magnitudes past FP32's or the storage
// format's range: the kernel may overflow there, and an overflowed -inf
// logit hides its key, so even a NaN reference is not judged); NaN where
// the exact value is not finite (classes are compared); kUndefined where
// no finite bound can be formed (a non-finite magnitude on the path).
double mla_finish(double exact, double b, double b_finite) {
    if (!std::isfinite(b_finite)) return kUndefined;
    if (!std::isfinite(exact)) return std::numeric_limits<double>::quiet_NaN();
    return std::isfinite(b) ? b : kUndefined;
}

// The non-finite inputs set to 0: what remains can only overflow by size.
MlaCtx mla_finite_part(MlaCtx c) {
    for (MlaDVec* v : {&c.h, &c.w_dkv, &c.w_uk, &c.w_uv, &c.w_q, &c.w_kr, &c.c_cache, &c.kr_cache})
        for (double& x : *v) x = std::isfinite(x) ? x : 0.0;
    return c;
}

}  // namespace

std::vector<std::vector<double>> mla_bound(const Params& params, const std::vector<TensorView>& in,
                                           const std::vector<std::vector<double>>& exact, Format acc,
                                           const std::vector<Format>& out) {
    const MlaCtx c = mla_read_ctx(params, in, acc, out);
    const double form = params.get("declared.form", -1);
    const bool want_explicit = form != 1, want_absorbed = form != 0;
    const MlaCtx cf = mla_finite_part(c);
    const MlaKeyRows k = mla_key_rows(c), kf = mla_key_rows(cf);
    const MlaDims& d = c.d;
    std::vector<std::vector<double>> b{MlaDVec(static_cast<std::size_t>(d.heads * d.tokens * d.d_v)),
                                       MlaDVec(static_cast<std::size_t>(d.heads * d.tokens))};
    for (std::int64_t i = 0; i < d.heads; ++i) {
        const MlaHeadBounds hb = mla_head_bounds(c, k, i, want_explicit, want_absorbed);
        const MlaHeadBounds hf = mla_head_bounds(cf, kf, i, want_explicit, want_absorbed);
        for (std::int64_t e = 0; e < d.tokens * d.d_v; ++e) {
            const auto at = static_cast<std::size_t>(i * d.tokens * d.d_v + e), ee = static_cast<std::size_t>(e);
            b[0][at] = mla_finish(exact.at(0).at(at), mla_larger(hb.o_explicit, hb.o_absorbed, ee),
                                  mla_larger(hf.o_explicit, hf.o_absorbed, ee));
        }
        for (std::int64_t t = 0; t < d.tokens; ++t) {
            const auto at = static_cast<std::size_t>(i * d.tokens + t), tt = static_cast<std::size_t>(t);
            b[1][at] = mla_finish(exact.at(1).at(at), mla_larger(hb.lse_explicit, hb.lse_absorbed, tt),
                                  mla_larger(hf.lse_explicit, hf.lse_absorbed, tt));
        }
    }
    return b;
}

}  // namespace conform::oracle
