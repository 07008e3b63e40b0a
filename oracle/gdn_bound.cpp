// delta_rule_bound (docs/gdn.md, "Error bound of the chunkwise kernels"): one
// pass over the chunks of every head, in double, carrying the exact state S
// and a bound E_m on the 2-norm of the kernel's state error in value column m
// (columns evolve independently under the delta rule).
#include "oracle/gdn_bound.hpp"
#include "oracle/tensor_core.hpp"

#include "numerics/delta_varlen.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "oracle/bound.hpp"

namespace conform::oracle {
namespace {

// Dense row-major [rows, cols] matrix of doubles.
struct DMat {
    std::int64_t rows = 0, cols = 0;
    std::vector<double> a;
    DMat(std::int64_t r, std::int64_t c) : rows(r), cols(c), a(ix(r * c), 0.0) {}
    double& operator()(std::int64_t i, std::int64_t j) { return a[ix(i * cols + j)]; }
    double operator()(std::int64_t i, std::int64_t j) const { return a[ix(i * cols + j)]; }
};

// The problem in double as the oracle reads it (q, k normalized and scaled
// exactly), and the relative errors of the kernel's own q and k.
struct GdnProblem {
    std::int64_t tokens = 0, heads = 0, dk = 0, dv = 0, gw = 1;
    std::vector<double> q, k, v, g, beta, s0;
    double eta_q = 0, eta_k = 0;
};

void l2_normalize(std::vector<double>& x, std::int64_t dk, double eps) {
    for (std::size_t row = 0; row < x.size(); row += ix(dk)) {
        double s = 0;
        for (std::int64_t i = 0; i < dk; ++i) s += x[row + ix(i)] * x[row + ix(i)];
        for (std::int64_t i = 0; i < dk; ++i) x[row + ix(i)] /= std::sqrt(s + eps);
    }
}

// The kernel normalizes in FP32: the sum of d_k squares, + fl(eps), sqrt,
// reciprocal and product, as rms_bound (oracle/bound.cpp): with
// t = |x|^2 + eps computed to gamma_{d_k+2}, each element is off by
// a + b + ab, a = eta_t / (2 (1 - eta_t)), b = gamma_3.  The readout scale,
// rounded to fp32 and multiplied in, adds two roundings.
GdnProblem read_problem(const Params& p, const std::vector<TensorView>& in, const DeltaErrorModel& m) {
    if (in.size() < 5 || in.size() > 7 || delta_packed(in))
        throw std::invalid_argument("gdn/kda bound: expects q, k, v, g, beta and an optional initial_state of one sequence");
    GdnProblem pr;
    pr.tokens = in[0].shape[0], pr.heads = in[0].shape[1], pr.dk = in[0].shape[2], pr.dv = in[2].shape[2];
    pr.gw = m.per_channel ? pr.dk : 1;
    pr.q = decoded_values(in[0]), pr.k = decoded_values(in[1]), pr.v = decoded_values(in[2]), pr.g = decoded_values(in[3]), pr.beta = decoded_values(in[4]);
    pr.s0 = delta_input_given(in, kDeltaInitialState) ? decoded_values(in[kDeltaInitialState])
                                                       : std::vector<double>(ix(pr.heads * pr.dk * pr.dv), 0.0);
    const double u = m.u;
    if (p.get("l2norm", 0) != 0) {
        const double eps = p.get("l2_eps", 1e-6);
        l2_normalize(pr.q, pr.dk, eps);
        l2_normalize(pr.k, pr.dk, eps);
        const double eta_t = gamma(pr.dk + 2.0, u), a = eta_t / (2 * (1 - eta_t)), b = gamma(3, u);
        pr.eta_q = pr.eta_k = a + b + a * b;
    }
    const double scale = p.get("scale", 1.0);
    const double s = scale != 0 ? scale : 1 / std::sqrt(static_cast<double>(pr.dk));
    if (s != 1) {
        for (double& x : pr.q) x *= s;
        pr.eta_q = (1 + pr.eta_q) * (1 + u) * (1 + u) - 1;
    }
    return pr;
}

// One chunk [t0, t0 + c) of head h: the exact decay factors and magnitudes.
// A gate g = -inf (alpha = 0, a reset) makes every factor over a range that
// contains it exactly 0, also in the kernels (their exponents are running
// sums, never differences, so -inf - -inf cannot occur): the cumulative sums
// count such gates instead of adding them.
struct ChunkData {
    std::int64_t c = 0, dk = 0, dv = 0;
    DMat q, k, v;        // [c, d_k], [c, d_k], [c, d_v]
    DMat G, SG, NI;      // [c + 1, d_k] from the chunk start: sum of the finite gates, of their |g|, count of -inf
    std::vector<double> beta, rho;  // [c]: beta, and the token's transition norm bound

    ChunkData(const GdnProblem& p, std::int64_t h, std::int64_t t0, std::int64_t n)
        : c(n), dk(p.dk), dv(p.dv), q(n, p.dk), k(n, p.dk), v(n, p.dv), G(n + 1, p.dk), SG(n + 1, p.dk),
          NI(n + 1, p.dk) {
        for (std::int64_t r = 0; r < c; ++r) {
            const std::int64_t th = (t0 + r) * p.heads + h;
            double kk = 0, amax = 0;
            for (std::int64_t i = 0; i < dk; ++i) {
                q(r, i) = p.q[ix(th * dk + i)], k(r, i) = p.k[ix(th * dk + i)];
                kk += k(r, i) * k(r, i);
                const double g = p.g[ix(th * p.gw + (p.gw == 1 ? 0 : i))];
                const bool reset = g == -INFINITY;
                G(r + 1, i) = G(r, i) + (reset ? 0 : g), SG(r + 1, i) = SG(r, i) + (reset ? 0 : std::fabs(g));
                NI(r + 1, i) = NI(r, i) + (reset ? 1 : 0);
                amax = std::isnan(g) ? g : std::max(amax, std::exp(g));
            }
            for (std::int64_t m = 0; m < dv; ++m) v(r, m) = p.v[ix(th * dv + m)];
            beta.push_back(p.beta[ix(th)]);
            rho.push_back(std::max(1.0, std::fabs(1 - beta.back() * kk)) * amax);
        }
    }
    // Decay of channel i over the tokens (from, to] (from = -1: the chunk start).
    double f(std::int64_t to, std::int64_t from, std::int64_t i) const {
        if (NI(to + 1, i) > NI(from + 1, i)) return 0;
        return std::exp(G(to + 1, i) - G(from + 1, i));
    }
};

// Relative error bound of a kernel's decay factor over (from, to] times one
// or two products: its exponent is a running sum of at most to - from terms
// whose partial sums are at most sum |g| (the largest channel's), so it is off
// by u (to - from) sum |g|; exp adds e_exp; KDA's split form has two exps.
double factor_error(const ChunkData& d, std::int64_t to, std::int64_t from, const DeltaErrorModel& m) {
    double sg = 0;
    for (std::int64_t i = 0; i < d.dk; ++i) sg = std::max(sg, d.SG(to + 1, i) - d.SG(from + 1, i));
    const double arg = m.u * static_cast<double>(to - from) * sg;
    return std::exp(arg) * (1 + m.e_exp) * (1 + m.e_exp) * (1 + m.u) * (1 + m.u) - 1;
}

// X = (I + Diag(beta) L)^-1 by forward substitution, L strictly lower; rows
// read only entries at or below their own index.
DMat unit_lower_inverse(const DMat& l, const std::vector<double>& beta) {
    const std::int64_t c = l.rows;
    DMat x(c, c);
    for (std::int64_t r = 0; r < c; ++r) {
        x(r, r) = 1;
        for (std::int64_t j = 0; j < r; ++j) {
            double acc = 0;
            for (std::int64_t i = j; i < r; ++i) acc += l(r, i) * x(i, j);
            x(r, j) = -beta[ix(r)] * acc;
        }
    }
    return x;
}

// max(a, b) that keeps a NaN of either (a NaN bound marks a NaN exact value).
double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

// The per-chunk bound.  State: S exact (double), E[m] >= |S_hat - S| column
// norms.  Writes the y bounds of the chunk's rows and, for the last chunk,
// the state bounds; advances S and E.
struct ChunkBound {
    const GdnProblem& p;
    const DeltaErrorModel& m;

    void run(const ChunkData& d, DMat& S, std::vector<double>& E, double* ybound, std::int64_t ypitch,
             double* sbound) const {
        const std::int64_t c = d.c, dk = d.dk, dv = d.dv;
        const double u = m.u;
        auto gam = [u](double n) { return gamma(n, u); };
        // Exact magnitudes and signed L, K_s, K_e, decay.
        DMat aabs(c, c), labs(c, c), lsig(c, c), ta(c, c), tl(c, c), ea(c, c), el(c, c);
        DMat ks(c, dk), ksig(c, dk), qs(c, dk), ke(c, dk), kesig(c, dk);
        std::vector<double> tqs(ix(c)), tks(ix(c)), tke(ix(c)), decay(ix(dk));
        // Underflow of decayed entries.  A factor f_hat = exp(...) may itself be
        // subnormal or 0 (absolute error <= eta), and the kernel multiplies it
        // by the entry: |x_hat f_hat - x f| gains |x_hat| eta + eta (the
        // product's own rounding), so the absolute part scales with |x|, not
        // with the factor.  wq, wk carry the kernel's |q_hat| <= |q| wq.
        const double wq = (1 + p.eta_q) * (1 + u), wk = (1 + p.eta_k) * (1 + u);
        DMat uq(c, dk), uk(c, dk);  // eta (1 + |q_hat|), eta (1 + |k_hat|)
        for (std::int64_t r = 0; r < c; ++r) {
            for (std::int64_t i = 0; i <= r; ++i) {
                double a = 0, l = 0, ls = 0, ha = 0, hl = 0;
                for (std::int64_t ch = 0; ch < dk; ++ch) {
                    const double f = i == r ? 1.0 : d.f(r, i, ch);
                    const double qa = std::fabs(d.q(r, ch)), kr = std::fabs(d.k(r, ch)), ki = std::fabs(d.k(i, ch));
                    a += qa * f * ki, l += kr * f * ki, ls += d.k(r, ch) * f * d.k(i, ch);
                    // A pair across KDA sub-chunks is a product of two decayed
                    // entries, (q e^a)(k e^b), each off by eta (1 + |x|):
                    // eta (1 + |q| + |k| + 2 |q| |k|), plus the product's rounding.
                    ha += 2 + qa * wq + ki * wk + 2 * qa * wq * ki * wk;
                    hl += 2 + (kr + ki) * wk + 2 * kr * ki * wk * wk;
                }
                const double tf = (1 + factor_error(d, r, i, m)) * (1 + gam(dk));
                aabs(r, i) = a, ta(r, i) = tf * (1 + p.eta_q) * (1 + p.eta_k) - 1, ea(r, i) = kEta * ha;
                if (i < r) labs(r, i) = l, lsig(r, i) = ls, tl(r, i) = tf * (1 + p.eta_k) * (1 + p.eta_k) - 1, el(r, i) = kEta * hl;
            }
            const double ts = factor_error(d, r, -1, m), te = factor_error(d, c - 1, r, m);
            tqs[ix(r)] = (1 + ts) * (1 + p.eta_q) - 1, tks[ix(r)] = (1 + ts) * (1 + p.eta_k) - 1;
            tke[ix(r)] = (1 + te) * (1 + p.eta_k) - 1;
            for (std::int64_t ch = 0; ch < dk; ++ch) {
                uq(r, ch) = kEta * (1 + std::fabs(d.q(r, ch)) * wq), uk(r, ch) = kEta * (1 + std::fabs(d.k(r, ch)) * wk);
                const double fs = d.f(r, -1, ch), fe = r == c - 1 ? 1.0 : d.f(c - 1, r, ch);
                ks(r, ch) = std::fabs(d.k(r, ch)) * fs, ksig(r, ch) = d.k(r, ch) * fs;
                qs(r, ch) = std::fabs(d.q(r, ch)) * fs;
                ke(r, ch) = std::fabs(d.k(r, ch)) * fe, kesig(r, ch) = d.k(r, ch) * fe;
            }
        }
        for (std::int64_t ch = 0; ch < dk; ++ch) decay[ix(ch)] = d.f(c - 1, -1, ch);
        const double td = factor_error(d, c - 1, -1, m), ev = 2 * kEta;  // ev: underflow of the decay d_hat and of d_hat S

        // Exact R = V - K_s S and V~ = X Diag(beta) R; X and |X| Diag(|beta|).
        const DMat x = unit_lower_inverse(lsig, d.beta);
        DMat xb(c, c), vt(c, dv), r_exact(c, dv);
        for (std::int64_t r = 0; r < c; ++r) {
            for (std::int64_t j = 0; j <= r; ++j) xb(r, j) = std::fabs(x(r, j)) * std::fabs(d.beta[ix(j)]);
            for (std::int64_t mm = 0; mm < dv; ++mm) {
                double acc = d.v(r, mm);
                for (std::int64_t ch = 0; ch < dk; ++ch) acc -= ksig(r, ch) * S(ch, mm);
                r_exact(r, mm) = acc;
            }
        }
        for (std::int64_t r = 0; r < c; ++r)
            for (std::int64_t mm = 0; mm < dv; ++mm) {
                double acc = 0;
                for (std::int64_t j = 0; j <= r; ++j) acc += x(r, j) * d.beta[ix(j)] * r_exact(j, mm);
                vt(r, mm) = acc;
            }

        // |S_hat| <= |S| + E (elementwise: |dS_cm| <= ||dS_:m||_2).
        DMat sabs(dk, dv);
        for (std::int64_t ch = 0; ch < dk; ++ch)
            for (std::int64_t mm = 0; mm < dv; ++mm) sabs(ch, mm) = std::fabs(S(ch, mm)) + E[ix(mm)];
        auto row_times_sabs = [&](const DMat& w, std::int64_t r, std::int64_t mm) {
            double s = 0;
            for (std::int64_t ch = 0; ch < dk; ++ch) s += w(r, ch) * sabs(ch, mm);
            return s;
        };

        // R_hat = fl(V - K_s_hat S_hat): dR against the local exact V - K_s S_hat.
        DMat dr(c, dv), rabs(c, dv), vt_abs(c, dv);
        const double gr = gam(dk + 1.0);
        for (std::int64_t r = 0; r < c; ++r) {
            for (std::int64_t mm = 0; mm < dv; ++mm) {
                const double kss = row_times_sabs(ks, r, mm), va = std::fabs(d.v(r, mm));
                dr(r, mm) = (gr * (1 + tks[ix(r)]) + tks[ix(r)]) * kss + gr * va + row_times_sabs(uk, r, mm) * (1 + gr) +
                            (dk + 1) * kEta;
                rabs(r, mm) = va + kss + dr(r, mm);
            }
        }
        // |V~_loc| <= |V~| + |X| |B| |K_s| |dS|.
        std::vector<double> ksum(ix(c), 0.0);
        for (std::int64_t j = 0; j < c; ++j)
            for (std::int64_t ch = 0; ch < dk; ++ch) ksum[ix(j)] += ks(j, ch);
        for (std::int64_t r = 0; r < c; ++r) {
            double xk = 0;
            for (std::int64_t j = 0; j <= r; ++j) xk += xb(r, j) * ksum[ix(j)];
            for (std::int64_t mm = 0; mm < dv; ++mm) vt_abs(r, mm) = std::fabs(vt(r, mm)) + xk * E[ix(mm)];
        }

        // Forward substitution: (I + B L_hat) V~_hat = B R_hat + Z,
        // |Z_r| <= gamma_{r+2} |beta_r| (|R_hat_r| + |L_hat_r| |V~_hat|) + (|beta_r| r + 1) eta, so
        // dV~ <= |X|(|B| dR + Z + |B| |dL| |V~_hat|) = y0 + G (|V~_loc| + dV~),
        // G = |X| |B| ((gamma(1 + tau_L) + tau_L) |L| + eta_L): strictly lower.
        DMat lerr(c, c), gm(c, c), dvt(c, dv);
        for (std::int64_t r = 0; r < c; ++r)
            for (std::int64_t i = 0; i < r; ++i)
                lerr(r, i) = (gam(r + 2.0) * (1 + tl(r, i)) + tl(r, i)) * labs(r, i) + el(r, i) * (1 + gam(r + 2.0));
        std::vector<double> rowsum(ix(c), 0.0);
        for (std::int64_t r = 0; r < c; ++r)
            for (std::int64_t i = 0; i < r; ++i) {
                double s = 0;
                for (std::int64_t j = i + 1; j <= r; ++j) s += xb(r, j) * lerr(j, i);
                gm(r, i) = s;
                rowsum[ix(r)] += s;
            }
        for (std::int64_t mm = 0; mm < dv; ++mm) {
            double ymax = 0, gmax = 0;
            for (std::int64_t r = 0; r < c; ++r) {
                double y = 0;
                for (std::int64_t j = 0; j <= r; ++j) {
                    const double bj = std::fabs(d.beta[ix(j)]);
                    y += xb(r, j) * (dr(j, mm) + gam(j + 2.0) * rabs(j, mm)) +
                         std::fabs(x(r, j)) * (bj * j + 1) * kEta;
                }
                for (std::int64_t i = 0; i < r; ++i) y += gm(r, i) * vt_abs(i, mm);
                // z = y + G z, G strictly lower: ||z_{<=r}|| <= ||y_{<=r}|| / (1 - g_r),
                // z_r <= y_r + rowsum_r ||z_{<r}||.
                ymax = nan_max(ymax, y), gmax = nan_max(gmax, rowsum[ix(r)]);
                const double amp = gmax < 1 ? rowsum[ix(r)] / (1 - gmax) : (rowsum[ix(r)] > 0 ? INFINITY : 0.0);
                dvt(r, mm) = y + amp * ymax;
            }
        }

        // Outputs: O_hat = fl(Q_s_hat S_hat + A_hat V~_hat), d_k + r + 1 terms each.
        for (std::int64_t r = 0; r < c; ++r) {
            const double go = gam(static_cast<double>(dk + r + 1));
            double prop = 0, qn = 0;
            for (std::int64_t ch = 0; ch < dk; ++ch) qn += d.q(r, ch) * d.q(r, ch);
            prop = std::sqrt(qn);
            for (std::int64_t j = 0; j <= r; ++j) prop *= d.rho[ix(j)];
            for (std::int64_t mm = 0; mm < dv; ++mm) {
                double e = (go * (1 + tqs[ix(r)]) + tqs[ix(r)]) * row_times_sabs(qs, r, mm) + row_times_sabs(uq, r, mm) * (1 + go) +
                           (dk + r + 1) * kEta;
                for (std::int64_t i = 0; i <= r; ++i) {
                    const double vh = vt_abs(i, mm) + dvt(i, mm);
                    e += ((go * (1 + ta(r, i)) + ta(r, i)) * aabs(r, i) + ea(r, i) * (1 + go)) * vh + aabs(r, i) * dvt(i, mm);
                }
                ybound[r * ypitch + mm] = e + prop * E[ix(mm)];
            }
        }

        // State: S_hat' = fl(d_hat S_hat + K_e_hat^T V~_hat), c + 1 terms each:
        // FP32 sums (gamma_{c+1} on every term), or the declared tensor-core
        // update -- d_hat S_hat rounded once (u) into the accumulator, then
        // ceil(c / mma_k) block FMAs over the products -- with K_e and V~
        // rounded into the operand format first.  An operand k' =
        // fl_b(K_e_hat) is K_e (1 + tke') plus an absolute part ue' (the
        // factor's underflow, eta (1 + |k_hat|), and the rounding's, update_eta),
        // v' = fl_b(V~_hat) is within dvt' = dvt + u_b vh + eta_b of V~ and at
        // most vh' = (1 + u_b) vh + eta_b; then per product
        // |k' v' (1 + theta) - K_e V~| <= K_e dvt' + ((g (1 + tke') + tke') K_e + ue' (1 + g)) vh'.
        double pchunk = 1;
        for (double rho : d.rho) pchunk *= rho;
        // The operands' format from the declared rounding unit and underflow
        // (eta = 2^(emin - p), unit = 2^-p); undeclared: FP16's, the larger.
        const int emin = m.update_eta > 0 && m.update_unit > 0
                             ? static_cast<int>(std::lround(std::log2(m.update_eta) - std::log2(m.update_unit)))
                             : -14;
        const ChainError tc = m.mma_k > 0 ? block_fma_chain(m.mma_k, static_cast<double>(c), std::ceil(static_cast<double>(c) / m.mma_k), emin)
                                          : ChainError{0, 0, 0};
        const double gs = m.mma_k > 0 ? tc.rel : gam(c + 1.0);                      // the products' sum
        const double gd = m.mma_k > 0 ? (1 + u) * (1 + tc.rel) - 1 : gam(c + 1.0);  // d S, then the sum
        const double ub = m.update_unit, eb = m.update_eta;
        DMat ds(dk, dv);
        for (std::int64_t ch = 0; ch < dk; ++ch)
            for (std::int64_t mm = 0; mm < dv; ++mm) {
                double e = (gd * (1 + td) + td) * decay[ix(ch)] * sabs(ch, mm) + ev * sabs(ch, mm) * (1 + gd) +
                           (c + 1) * kEta + tc.abs;
                double operands = 0;  // M of this element's chain: its largest |k'|, |v'|
                for (std::int64_t r = 0; r < c; ++r) {
                    const double vh = vt_abs(r, mm) + dvt(r, mm);
                    const double vh_b = (1 + ub) * vh + eb, dvt_b = dvt(r, mm) + ub * vh + eb;
                    const double tke_b = (1 + tke[ix(r)]) * (1 + ub) - 1, ue_b = uk(r, ch) * (1 + ub) + eb;
                    e += ((gs * (1 + tke_b) + tke_b) * ke(r, ch) + ue_b * (1 + gs)) * vh_b + ke(r, ch) * dvt_b;
                    operands = std::max({operands, vh_b, (1 + tke_b) * ke(r, ch) + ue_b});
                }
                if (m.mma_k > 0) e += tc.sub * chain_operand_bound(operands, emin);
                ds(ch, mm) = e;
            }
        for (std::int64_t mm = 0; mm < dv; ++mm) {
            double n2 = 0;
            for (std::int64_t ch = 0; ch < dk; ++ch) n2 += ds(ch, mm) * ds(ch, mm);
            if (sbound)
                for (std::int64_t ch = 0; ch < dk; ++ch) sbound[ch * dv + mm] = ds(ch, mm) + pchunk * E[ix(mm)];
            E[ix(mm)] = pchunk * E[ix(mm)] + std::sqrt(n2);
        }
        // The exact state moves on: S' = D S + K_e^T V~.
        DMat next(dk, dv);
        for (std::int64_t ch = 0; ch < dk; ++ch)
            for (std::int64_t mm = 0; mm < dv; ++mm) {
                double acc = decay[ix(ch)] * S(ch, mm);
                for (std::int64_t r = 0; r < c; ++r) acc += kesig(r, ch) * vt(r, mm);
                next(ch, mm) = acc;
            }
        S = std::move(next);
    }
};

// A NaN magnitude (a NaN input) reaches exactly the elements whose exact
// value is NaN, which the verdict judges by class before any bound; the
// bound there becomes +inf so that no NaN bound is ever returned.
void nan_to_vacuous(std::vector<double>& b) {
    for (double& x : b)
        if (std::isnan(x)) x = INFINITY;
}

}  // namespace

std::vector<std::int64_t> regular_chunk_starts(std::int64_t tokens, std::int64_t chunk) {
    std::vector<std::int64_t> s;
    for (std::int64_t t = 0; t < tokens; t += chunk) s.push_back(t);
    return s;
}

std::int64_t scaled_form_max_chunk(Format f, double g_min) {
    const double range = std::log(max_finite(f));
    std::int64_t c = 0;
    while ((c + 1) * std::fabs(g_min) < range) ++c;
    return c;
}

DeltaBound delta_rule_bound(const Params& params, const std::vector<TensorView>& in, const std::vector<double>& exact_y,
                            const DeltaErrorModel& model) {
    const GdnProblem p = read_problem(params, in, model);
    std::vector<std::int64_t> starts = model.chunk_starts;
    if (starts.empty()) starts = regular_chunk_starts(p.tokens, static_cast<std::int64_t>(params.get("chunk", 64)));
    starts.push_back(p.tokens);
    DeltaBound b{std::vector<double>(ix(p.tokens * p.heads * p.dv), 0.0),
                 std::vector<double>(ix(p.heads * p.dk * p.dv), 0.0)};
    const ChunkBound chunk{p, model};
    std::vector<double> exact_state(b.state.size());  // |S_T| in double, for the state's output rounding
    for (std::int64_t h = 0; h < p.heads; ++h) {
        DMat S(p.dk, p.dv);
        std::copy_n(p.s0.begin() + h * p.dk * p.dv, p.dk * p.dv, S.a.begin());
        std::vector<double> E(ix(p.dv), 0.0);
        for (std::size_t n = 0; n + 1 < starts.size(); ++n) {
            const std::int64_t t0 = starts[n], c = starts[n + 1] - t0;
            if (c <= 0) continue;
            const bool last = starts[n + 1] == p.tokens;
            chunk.run(ChunkData(p, h, t0, c), S, E, &b.y[ix((t0 * p.heads + h) * p.dv)], p.heads * p.dv,
                      last ? &b.state[ix(h * p.dk * p.dv)] : nullptr);
        }
        for (std::int64_t e = 0; e < p.dk * p.dv; ++e) exact_state[ix(h * p.dk * p.dv + e)] = std::fabs(S.a[ix(e)]);
    }
    // The rounding of an output into a storage format narrower than the
    // arithmetic (an FP32 kernel's fp32 state and y are its results as computed).
    const int arith = std::max(info(model.acc).precision, info(Format::fp32).precision);
    if (info(model.out).precision < arith)
        for (std::size_t i = 0; i < b.y.size(); ++i) b.y[i] += 0.5 * ulp_at(model.out, std::fabs(exact_y[i]) + b.y[i]);
    if (info(model.state_out).precision < arith)
        for (std::size_t i = 0; i < b.state.size(); ++i) b.state[i] += 0.5 * ulp_at(model.state_out, exact_state[i] + b.state[i]);
    nan_to_vacuous(b.y);
    nan_to_vacuous(b.state);
    return b;
}

namespace {

std::vector<std::vector<double>> registry_bound(bool per_channel, const Params& params,
                                                const std::vector<TensorView>& in,
                                                const std::vector<std::vector<double>>& exact, Format acc,
                                                const std::vector<Format>& out) {
    DeltaErrorModel m;
    m.per_channel = per_channel;
    m.out = out.at(0);
    m.state_out = out.size() > 1 ? out[1] : Format::fp32;
    m.acc = acc;
    read_declared_update(m, params.get("declared.update_unit", 0), params.get("declared.update_eta", 0),
                         params.get("declared.mma_k", 0));
    if (!delta_packed(in)) {
        DeltaBound b = delta_rule_bound(params, in, exact.at(0), m);
        return {std::move(b.y), std::move(b.state)};
    }
    // A packed call is N separate calls (numerics/delta_varlen.hpp): the
    // bound of each sequence, its chunks starting at the sequence's start.
    const std::vector<std::int64_t> cu = delta_cu_seqlens(in, in[0].shape[0]);
    const std::int64_t per_token = in[0].shape[1] * in[2].shape[2];
    std::vector<std::vector<double>> b(2);
    for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
        const std::vector<double> y(exact.at(0).begin() + cu[n] * per_token, exact.at(0).begin() + cu[n + 1] * per_token);
        DeltaBound s = delta_rule_bound(params, delta_sequence_inputs(in, cu, n), y, m);
        b[0].insert(b[0].end(), s.y.begin(), s.y.end());
        b[1].insert(b[1].end(), s.state.begin(), s.state.end());
    }
    return b;
}

}  // namespace

void read_declared_update(DeltaErrorModel& m, double update_unit, double update_eta, double mma_k) {
    m.update_unit = update_unit, m.update_eta = update_eta;
    m.mma_k = static_cast<int>(mma_k);
}

void read_declared_update(DeltaErrorModel& m, const std::map<std::string, double>& declared) {
    const auto get = [&declared](const char* key) {
        const auto it = declared.find(key);
        return it == declared.end() ? 0.0 : it->second;
    };
    read_declared_update(m, get("update_unit"), get("update_eta"), get("mma_k"));
}

std::vector<std::vector<double>> gdn_bound(const Params& params, const std::vector<TensorView>& in,
                                           const std::vector<std::vector<double>>& exact, Format acc,
                                           const std::vector<Format>& out) {
    return registry_bound(false, params, in, exact, acc, out);
}

std::vector<std::vector<double>> kda_bound(const Params& params, const std::vector<TensorView>& in,
                                           const std::vector<std::vector<double>>& exact, Format acc,
                                           const std::vector<Format>& out) {
    return registry_bound(true, params, in, exact, acc, out);
}

}  // namespace conform::oracle
