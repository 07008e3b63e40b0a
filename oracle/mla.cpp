// MLA oracle: layout checks, parameters, the shared projections (latent,
// decoupled rope key, queries) and the explicit and absorbed row forms.
#include "oracle/mla.hpp"

#include <cmath>
#include <string>

#include "oracle/attention.hpp"

namespace conform::oracle {
namespace {

const std::string kOp = "mla";

using RVec = std::vector<Real>;

// y = M x for a row-major [rows, cols] block of m starting at `m0`.
RVec matvec(const RVec& m, std::size_t m0, std::int64_t rows, std::int64_t cols, const Real* x) {
    RVec y(static_cast<std::size_t>(rows), Real(0));
    for (std::int64_t r = 0; r < rows; ++r) {
        Real acc(0);
        const Real* row = &m[m0 + static_cast<std::size_t>(r * cols)];
        for (std::int64_t k = 0; k < cols; ++k) acc += row[k] * x[k];
        y[static_cast<std::size_t>(r)] = std::move(acc);
    }
    return y;
}

// y = M^T x for a row-major [rows, cols] block (y has `cols` entries).
RVec matvec_t(const RVec& m, std::size_t m0, std::int64_t rows, std::int64_t cols, const Real* x) {
    RVec y(static_cast<std::size_t>(cols), Real(0));
    for (std::int64_t r = 0; r < rows; ++r) {
        const Real* row = &m[m0 + static_cast<std::size_t>(r * cols)];
        for (std::int64_t k = 0; k < cols; ++k) y[static_cast<std::size_t>(k)] += row[k] * x[r];
    }
    return y;
}

RVec concat(const Real* a, std::int64_t na, const Real* b, std::int64_t nb) {
    RVec v(a, a + na);
    v.insert(v.end(), b, b + nb);
    return v;
}

Real position(std::int64_t m) { return from_double(static_cast<double>(m)); }

RVec rope_at(RVec x, std::int64_t pos, const RopeConfig& rc) {
    if (x.empty()) return x;
    return rope_vector(x, position(pos), rc);
}


// All keys' latents [Lk, d_c] and rotated rope keys [Lk, d_r]: cache rows first.
struct Keys {
    std::int64_t n = 0;
    RVec c, kr;
};

Keys all_keys(const MlaProblem& p, const MlaConfig& cfg) {
    Keys k;
    k.n = p.cached + p.tokens;
    k.c = p.c_cache;
    if (cfg.cache_rotated || p.d_r == 0) {
        k.kr = p.kr_cache;
    } else {
        for (std::int64_t j = 0; j < p.cached; ++j) {
            const Real* raw = &p.kr_cache[static_cast<std::size_t>(j * p.d_r)];
            const RVec r = rope_at(RVec(raw, raw + p.d_r), cfg.offset - p.cached + j, cfg.rope);
            k.kr.insert(k.kr.end(), r.begin(), r.end());
        }
    }
    const MlaCacheEntries e = mla_cache_entries(p, cfg);
    k.c.insert(k.c.end(), e.c_kv.begin(), e.c_kv.end());
    k.kr.insert(k.kr.end(), e.k_r.begin(), e.k_r.end());
    return k;
}

}  // namespace

MlaCacheEntries mla_cache_entries(const MlaProblem& p, const MlaConfig& cfg) {
    MlaCacheEntries e;
    for (std::int64_t t = 0; t < p.tokens; ++t) {
        const Real* ht = &p.h[static_cast<std::size_t>(t * p.d_model)];
        const RVec c = matvec(p.w_dkv, 0, p.d_c, p.d_model, ht);
        e.c_kv.insert(e.c_kv.end(), c.begin(), c.end());
        const RVec kr = rope_at(matvec(p.w_kr, 0, p.d_r, p.d_model, ht), cfg.offset + t, cfg.rope);
        e.k_r.insert(e.k_r.end(), kr.begin(), kr.end());
    }
    return e;
}

OpOutputs mla_solve(const MlaProblem& p, const MlaConfig& cfg) {
    const Keys keys = all_keys(p, cfg);
    const std::int64_t H = p.heads, L = p.tokens, lk = keys.n, dq = p.d_nope + p.d_r;
    OpOutputs out{{"o", "lse"}, {{H, L, p.d_v}, {H, L}}, {{}, {}}};
    out.values[0].reserve(static_cast<std::size_t>(H * L * p.d_v));
    out.values[1].reserve(static_cast<std::size_t>(H * L));
    for (std::int64_t i = 0; i < H; ++i) {
        const std::size_t uk0 = static_cast<std::size_t>(i * p.d_nope * p.d_c);
        const std::size_t uv0 = static_cast<std::size_t>(i * p.d_v * p.d_c);
        // Explicit form: this head's content keys and values for every key.
        RVec kc, v;
        if (cfg.form == MlaForm::explicit_kv) {
            for (std::int64_t j = 0; j < lk; ++j) {
                const Real* cj = &keys.c[static_cast<std::size_t>(j * p.d_c)];
                const RVec a = matvec(p.w_uk, uk0, p.d_nope, p.d_c, cj);
                const RVec b = matvec(p.w_uv, uv0, p.d_v, p.d_c, cj);
                kc.insert(kc.end(), a.begin(), a.end());
                v.insert(v.end(), b.begin(), b.end());
            }
        }
        for (std::int64_t t = 0; t < L; ++t) {
            const Real* ht = &p.h[static_cast<std::size_t>(t * p.d_model)];
            const RVec q = matvec(p.w_q, static_cast<std::size_t>(i * dq * p.d_model), dq, p.d_model, ht);
            const RVec qr = rope_at(RVec(q.begin() + p.d_nope, q.end()), cfg.offset + t, cfg.rope);
            // The query against which key rows are dotted: [q^C ; q^R] (explicit)
            // or [W_uk^T q^C ; q^R] (absorbed, against [c_j ; k^R_j]).
            const RVec qrow = cfg.form == MlaForm::explicit_kv
                                 ? concat(q.data(), p.d_nope, qr.data(), p.d_r)
                                 : [&] {
                                       const RVec a = matvec_t(p.w_uk, uk0, p.d_nope, p.d_c, q.data());
                                       return concat(a.data(), p.d_c, qr.data(), p.d_r);
                                   }();
            std::vector<Real> s(static_cast<std::size_t>(lk));
            for (std::int64_t j = 0; j < lk; ++j) {
                if (!key_visible(t, j, L, lk, cfg.causal, 0)) {
                    s[static_cast<std::size_t>(j)] = neg_inf<Real>();
                    continue;
                }
                const Real* kr = p.d_r ? &keys.kr[static_cast<std::size_t>(j * p.d_r)] : nullptr;
                const RVec krow = cfg.form == MlaForm::explicit_kv
                                     ? concat(&kc[static_cast<std::size_t>(j * p.d_nope)], p.d_nope, kr, p.d_r)
                                     : concat(&keys.c[static_cast<std::size_t>(j * p.d_c)], p.d_c, kr, p.d_r);
                s[static_cast<std::size_t>(j)] =
                    capped_logit(qrow.data(), krow.data(), static_cast<std::int64_t>(qrow.size()), cfg.scale, 0.0);
            }
            if (cfg.form == MlaForm::explicit_kv) {
                AttnState<Real> r = attend_direct(s, v, p.d_v);
                out.values[0].insert(out.values[0].end(), r.o.begin(), r.o.end());
                out.values[1].push_back(std::move(r.lse));
            } else {
                // Average the latents, then up-project once: o = W_uv (sum_j p_j c_j).
                AttnState<Real> r = attend_direct(s, keys.c, p.d_c);
                const RVec o = matvec(p.w_uv, uv0, p.d_v, p.d_c, r.o.data());
                out.values[0].insert(out.values[0].end(), o.begin(), o.end());
                out.values[1].push_back(std::move(r.lse));
            }
        }
    }
    return out;
}

MlaProblem read_mla_problem(const std::vector<TensorView>& in) {
    if (in.size() != 6 && in.size() != 8)
        throw std::invalid_argument(kOp + ": expects 6 inputs (h, W_dkv, W_uk, W_uv, W_q, W_kr) or 8 (with "
                                          "c_kv_cache, k_r_cache), got " +
                                    std::to_string(in.size()));
    const TensorView &h = in[0], &wdkv = in[1], &wuk = in[2], &wuv = in[3], &wq = in[4], &wkr = in[5];
    require_rank(kOp, "h", h, 2);
    require_rank(kOp, "W_dkv", wdkv, 2);
    require_rank(kOp, "W_uk", wuk, 3);
    require_rank(kOp, "W_uv", wuv, 3);
    require_rank(kOp, "W_q", wq, 3);
    require_rank(kOp, "W_kr", wkr, 2);
    MlaProblem p;
    p.tokens = h.shape[0], p.d_model = h.shape[1];
    p.d_c = wdkv.shape[0];
    p.heads = wuk.shape[0], p.d_nope = wuk.shape[1];
    p.d_v = wuv.shape[1];
    p.d_r = wkr.shape[0];
    if (p.d_model < 1) throw std::invalid_argument(kOp + ": input 'h' dimension 1 (d_model) must be >= 1");
    if (p.heads < 1) throw std::invalid_argument(kOp + ": input 'W_uk' dimension 0 (heads H) must be >= 1");
    if (p.d_c < 1) throw std::invalid_argument(kOp + ": input 'W_dkv' dimension 0 (latent d_c) must be >= 1");
    if (p.d_r % 2 != 0)
        throw std::invalid_argument(kOp + ": input 'W_kr' dimension 0 (rope dim d_r) is " + std::to_string(p.d_r) +
                                    ", expected an even number");
    if (p.d_nope + p.d_r < 1)
        throw std::invalid_argument(kOp + ": input 'W_q' dimension 1 (d_nope + d_r) must be >= 1");
    require_dim(kOp, "W_dkv", wdkv, 1, p.d_model, "d_model of h");
    require_dim(kOp, "W_uk", wuk, 2, p.d_c, "latent d_c of W_dkv");
    require_dim(kOp, "W_uv", wuv, 0, p.heads, "heads H of W_uk");
    require_dim(kOp, "W_uv", wuv, 2, p.d_c, "latent d_c of W_dkv");
    require_dim(kOp, "W_q", wq, 0, p.heads, "heads H of W_uk");
    require_dim(kOp, "W_q", wq, 1, p.d_nope + p.d_r, "d_nope of W_uk + d_r of W_kr");
    require_dim(kOp, "W_q", wq, 2, p.d_model, "d_model of h");
    require_dim(kOp, "W_kr", wkr, 1, p.d_model, "d_model of h");
    if (in.size() == 8) {
        const TensorView &cc = in[6], &kc = in[7];
        require_rank(kOp, "c_kv_cache", cc, 2);
        require_rank(kOp, "k_r_cache", kc, 2);
        p.cached = cc.shape[0];
        require_dim(kOp, "c_kv_cache", cc, 1, p.d_c, "latent d_c of W_dkv");
        require_dim(kOp, "k_r_cache", kc, 0, p.cached, "cached tokens Lc of c_kv_cache");
        require_dim(kOp, "k_r_cache", kc, 1, p.d_r, "rope dim d_r of W_kr");
        p.c_cache = read_exact(cc), p.kr_cache = read_exact(kc);
    }
    p.h = read_exact(h), p.w_dkv = read_exact(wdkv), p.w_uk = read_exact(wuk), p.w_uv = read_exact(wuv);
    p.w_q = read_exact(wq), p.w_kr = read_exact(wkr);
    return p;
}

MlaConfig read_mla_config(const Params& params, const MlaProblem& p) {
    MlaConfig c;
    c.form = static_cast<MlaForm>(static_cast<int>(integer_param(kOp, params, "form", 0, 0, 1)));
    c.causal = integer_param(kOp, params, "causal", 1, 0, 1) != 0;
    c.cache_rotated = integer_param(kOp, params, "cache_rotated", 1, 0, 1) != 0;
    c.offset = static_cast<std::int64_t>(integer_param(kOp, params, "offset", 0, 0, 0x1p52));
    if (!c.cache_rotated && c.offset < p.cached)
        throw std::invalid_argument(kOp + ": parameter 'offset' is " + std::to_string(c.offset) +
                                    ", expected >= Lc = " + std::to_string(p.cached) +
                                    " when cache_rotated = 0 (cached token j sits at offset - Lc + j)");
    const double scale = params.get("scale", 0.0);
    if (!std::isfinite(scale)) throw std::invalid_argument(kOp + ": parameter 'scale' must be finite");
    c.scale = scale != 0 ? from_double(scale) : Real(1) / sqrt(Real(static_cast<double>(p.d_nope + p.d_r)));
    c.rope.pairing = static_cast<RopePairing>(static_cast<int>(integer_param(kOp, params, "pairing", 0, 0, 1)));
    c.rope.rotary_dim = p.d_r;
    c.rope.base = params.get("base", 10000.0);
    if (!(c.rope.base > 0) || std::isinf(c.rope.base))
        throw std::invalid_argument(kOp + ": parameter 'base' must be finite and > 0");
    c.rope.ntk_scale = 1.0;
    return c;
}

OpOutputs eval_mla(const Params& params, const std::vector<TensorView>& in) {
    const MlaProblem p = read_mla_problem(in);
    return mla_solve(p, read_mla_config(params, p));
}

}  // namespace conform::oracle
