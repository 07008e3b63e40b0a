// block_sparse_attention (docs/block_sparse_attention.md): the block scores
// and their budgets, the selection (own or the candidate's admissible one),
// exact attention over it and the bound.
#include "oracle/block_sparse.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "numerics/shape_check.hpp"
#include "oracle/attention.hpp"
#include "oracle/attention_bound.hpp"
#include "oracle/bound.hpp"
#include "oracle/exact_dot.hpp"
#include "oracle/matmul.hpp"
#include "oracle/norm.hpp"
#include "oracle/rope.hpp"

namespace conform::oracle {
namespace {

const std::string kBsaOp = "block_sparse_attention";
constexpr double kBsaU = 0x1p-24;  // FP32: the kernels' arithmetic
constexpr double kBsaNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kBsaSlack = 0x1p-50;  // the bound's own doubles (relative)

std::size_t bsa_at(std::int64_t i) { return static_cast<std::size_t>(i); }

RopeConfig bsa_rope(const BlockSparseSetup& s) {
    RopeConfig c;
    c.pairing = RopePairing::half_split;
    c.rotary_dim = s.rope_dim;
    c.base = s.rope_base;
    return c;
}

}  // namespace

BlockSparseSetup block_sparse_setup(const Params& p, const std::vector<TensorView>& in) {
    const std::string& op = kBsaOp;
    if (in.size() != 7 && in.size() != 9)
        throw std::invalid_argument(op + ": expects q [Hq, L, D], k [G, L, D], v [G, L, Dv], iq [Gi, L, Di], ik [L, Di], "
                                         "nq [Di], nk [Di]");
    require_rank(op, "q", in[0], 3);
    require_rank(op, "k", in[1], 3);
    require_rank(op, "v", in[2], 3);
    require_rank(op, "iq", in[3], 3);
    require_rank(op, "ik", in[4], 2);
    require_rank(op, "nq", in[5], 1);
    require_rank(op, "nk", in[6], 1);
    BlockSparseSetup s;
    s.hq = in[0].shape[0], s.len = in[0].shape[1], s.d = in[0].shape[2];
    s.groups = in[1].shape[0], s.dv = in[2].shape[2];
    s.gi = in[3].shape[0], s.di = in[3].shape[2];
    require_dim(op, "k", in[1], 1, s.len, "L of q");
    require_dim(op, "k", in[1], 2, s.d, "D of q");
    require_dim(op, "v", in[2], 0, s.groups, "G of k");
    require_dim(op, "v", in[2], 1, s.len, "L of q");
    require_dim(op, "iq", in[3], 1, s.len, "L of q");
    require_dim(op, "ik", in[4], 0, s.len, "L of q");
    require_dim(op, "ik", in[4], 1, s.di, "Di of iq");
    require_dim(op, "nq", in[5], 0, s.di, "Di of iq");
    require_dim(op, "nk", in[6], 0, s.di, "Di of iq");
    if (s.groups < 1 || s.hq % s.groups != 0)
        throw std::invalid_argument(op + ": Hq = " + std::to_string(s.hq) + " is not a multiple of G = " +
                                    std::to_string(s.groups));
    constexpr double kBig = 0x1p40;
    s.mode = integer_param(op, p, "mode", 0, 0, 1);
    s.block = integer_param(op, p, "block", 4, 1, kBig);
    s.k = integer_param(op, p, "k", 2, 1, kBig);
    s.scale = p.get("scale", 0);
    if (!std::isfinite(s.scale) || s.scale < 0) throw std::invalid_argument(op + ": parameter 'scale' must be >= 0 (0: 1/sqrt(D))");
    s.eps = p.get("eps", 1e-6);
    if (!(s.eps >= 0) || !std::isfinite(s.eps)) throw std::invalid_argument(op + ": parameter 'eps' must be finite and >= 0");
    s.rope_base = p.get("rope_base", 10000);
    s.pow_units = rope_pow_units(p);
    if (!(s.rope_base > 0) || !std::isfinite(s.rope_base))
        throw std::invalid_argument(op + ": parameter 'rope_base' must be finite and > 0");
    s.rope_dim = integer_param(op, p, "rope_dim", 0, 0, kBig);
    if (s.rope_dim == 0) s.rope_dim = s.di / 2 - (s.di / 2) % 2;
    if (s.rope_dim % 2 != 0 || s.rope_dim > s.di)
        throw std::invalid_argument(op + ": parameter 'rope_dim' must be even and at most Di = " + std::to_string(s.di));
    if (s.mode == 0 && s.gi != s.groups)
        throw std::invalid_argument(op + ": MSA (mode 0) takes one index query head per group: Gi = " +
                                    std::to_string(s.gi) + ", G = " + std::to_string(s.groups));
    if (s.gi < 1) throw std::invalid_argument(op + ": iq needs at least one index head");
    s.blocks = (s.len + s.block - 1) / s.block;
    s.sel_groups = s.mode == 0 ? s.groups : 1;
    SelectSetup& sel = s.select;
    sel.queries = s.len, sel.candidates = s.blocks, sel.k = s.k, sel.block = s.block;
    sel.causal = s.mode == 0 ? 2 : 1;  // MSA: a block with a visible token; QSA: fully observed
    sel.offset = 0;
    sel.force_local = s.mode == 0 ? 1 : 2;
    sel.slots = s.k + (sel.force_local == 2 ? 1 : 0);
    s.staged = in.size() == 9;
    if (s.staged) {
        require_rank(op, "a candidate's o", in[7], 3);
        require_rank(op, "a candidate's indices", in[8], 3);
        require_dim(op, "a candidate's indices", in[8], 0, s.sel_groups, "selection groups");
        require_dim(op, "a candidate's indices", in[8], 1, s.len, "L");
        require_dim(op, "a candidate's indices", in[8], 2, sel.slots, "slots");
    }
    return s;
}

namespace {

// ---- MSA: token dots, max pooling -------------------------------------------

// One token score iq[g, t] . ik[j] / sqrt(Di): the exact value (double) and
// its budget for an FP32 dot product times an FP32 1/sqrt(Di), rounded once.
struct BsaToken {
    double score = 0, delta = 0;
    bool undefined = false;
};

BsaToken msa_token(const BlockSparseSetup& s, const std::vector<TensorView>& in, ExactDot& dot, std::int64_t g,
                   std::int64_t t, std::int64_t j) {
    BsaToken r;
    double a = 0;
    bool finite = true;
    for (std::int64_t i = 0; i < s.di; ++i) {
        const double x = in[3].value((g * s.len + t) * s.di + i), y = in[4].value(j * s.di + i);
        dot.set(bsa_at(i), x, y);
        const double p = x * y;
        finite = finite && std::isfinite(p);
        a += std::fabs(p);
    }
    const Real c = Real(1) / sqrt(Real(static_cast<double>(s.di)));
    r.score = to_double(dot.sum() * c);
    const DotBudget db = dot_budget(a, s.di, Format::fp32);
    if (!finite || !std::isfinite(r.score) || db.may_overflow) {
        r.undefined = true;
        return r;
    }
    const double cd = 1 / std::sqrt(static_cast<double>(s.di)), e_dot = db.err + static_cast<double>(s.di) * 0x1p-52 * a;
    // The scale's own error (the FP32 root and reciprocal) and the product's
    // rounding: within 4u relative; eta for a subnormal product.
    r.delta = (cd * e_dot + 4 * kBsaU * (std::fabs(r.score) + cd * e_dot) + kEta) * (1 + kBsaSlack);
    return r;
}

void msa_scores(const BlockSparseSetup& s, const std::vector<TensorView>& in, BlockSparseScores& out) {
    ExactDot dot(s.di);
    const std::int64_t n = s.blocks;
    for (std::int64_t g = 0; g < s.groups; ++g)
        for (std::int64_t t = 0; t < s.len; ++t) {
            const std::size_t row = bsa_at(g * s.len + t);
            for (std::int64_t b = 0; b < n; ++b) {
                if (b == t / s.block || !select_eligible(s.select, t, b)) continue;  // the forced block's score is never read
                double best = -INFINITY, delta = 0;
                for (std::int64_t j = b * s.block; j < std::min(s.len, b * s.block + s.block) && j <= t; ++j) {
                    const BsaToken tok = msa_token(s, in, dot, g, t, j);
                    if (tok.undefined) out.undefined[row] = 1;
                    best = std::max(best, tok.score);
                    delta = std::max(delta, tok.delta);  // max pooling is 1-Lipschitz in the max norm
                }
                out.score[row * bsa_at(n) + bsa_at(b)] = best;
                out.delta[row * bsa_at(n) + bsa_at(b)] = delta;
            }
        }
}

// ---- QSA: mean pooling, ZC-RMSNorm, partial RoPE, ReLU head sum ------------

// A normalized, rotated index vector: exact values (double) and per-element
// error bounds of an FP32 kernel.
struct BsaVec {
    std::vector<double> y, err;
    bool undefined = false;
};

// y = RoPE(ZC-RMSNorm(m) with weight w, position pos), m known exactly (mr)
// and its kernel value within dm elementwise (docs, "QSA score budget").
BsaVec qsa_vector(const BlockSparseSetup& s, const std::vector<Real>& mr, const std::vector<double>& dm,
                  const std::vector<Real>& w, std::int64_t pos) {
    const RopeConfig rc = bsa_rope(s);
    const std::vector<Real> normed = rms_norm(mr, w, s.eps, true);
    const std::vector<Real> yr = s.rope_dim > 0 ? rope_vector(normed, from_double(static_cast<double>(pos)), rc) : normed;
    BsaVec v;
    const auto n = bsa_at(s.di);
    v.y.resize(n), v.err.assign(n, 0);
    double ms = 0, e2 = 0;
    std::vector<double> m(n), z(n), w1(n);
    for (std::size_t i = 0; i < n; ++i) {
        m[i] = to_double(mr[i]);
        w1[i] = to_double(Real(1) + w[i]);
        v.y[i] = to_double(yr[i]);
        ms += m[i] * m[i];
        e2 += dm[i] * dm[i];
        if (!std::isfinite(m[i]) || !std::isfinite(w1[i]) || !std::isfinite(v.y[i]) || !std::isfinite(dm[i])) v.undefined = true;
    }
    if (v.undefined) return v;
    const double nd = static_cast<double>(n);
    const double rho = std::sqrt(ms / nd + s.eps) * (1 - kBsaSlack), e = std::sqrt(e2) * (1 + kBsaSlack);
    const double denom = rho - e / std::sqrt(nd);
    // The root must be determined: away from underflow, the FP32 sum of
    // squares away from overflow, and the input error at most half of the
    // root (else the perturbed root is not bounded below).
    const double ss_max = (std::sqrt(ms) + e) * (std::sqrt(ms) + e) * (1 + 2 * nd * kBsaU);
    if (!(rho * rho >= 0x1p-100) || !(denom >= rho / 2) || !(ss_max < 0x1p127)) {
        v.undefined = true;
        return v;
    }
    const double dz = e / denom;  // ||Δ(m/rho(m))||_2: the Jacobian's norm is at most 1/rho
    // The FP32 RMSNorm's own rounding (docs): relative, plus the squares'
    // subnormal rounding (n eta / 2 in the sum, eta / 2 in the mean) relative to rho^2.
    const double theta = (nd / 2 + 8) * kBsaU * 1.01 + kEta / (rho * rho);
    std::vector<double> ny(n), dny(n);
    for (std::size_t i = 0; i < n; ++i) {
        z[i] = m[i] / rho;
        ny[i] = z[i] * w1[i];
        dny[i] = std::fabs(w1[i]) * (dz + (std::fabs(z[i]) + dz) * theta) + 4 * kEta;
    }
    v.err = dny;
    if (s.rope_dim == 0) return v;
    RopeTableModel model;
    model.pow_units = s.pow_units;
    const double ln_b = std::log(s.rope_base);
    for (std::int64_t j = 0; j < s.rope_dim / 2; ++j) {
        const auto [a, b] = rope_pair_dims(RopePairing::half_split, j, s.rope_dim);
        const double theta_j = rope_inv_freq(j, s.rope_dim, s.rope_base), angle = static_cast<double>(pos) * theta_j;
        const double c = std::cos(angle), sn = std::sin(angle);
        const TableError te = rope_table_error(model, angle, 2.0 * static_cast<double>(j) / static_cast<double>(s.rope_dim) * ln_b, c, sn);
        const double xa = std::fabs(ny[bsa_at(a)]) + dny[bsa_at(a)], xb = std::fabs(ny[bsa_at(b)]) + dny[bsa_at(b)];
        const auto [ra, rb] = rope_pair_bound(model, te, xa, xb, c, sn, v.y[bsa_at(a)], v.y[bsa_at(b)]);
        const double ca = std::fabs(c) + te.cos, sa = std::fabs(sn) + te.sin;
        v.err[bsa_at(a)] = ca * dny[bsa_at(a)] + sa * dny[bsa_at(b)] + ra;
        v.err[bsa_at(b)] = sa * dny[bsa_at(a)] + ca * dny[bsa_at(b)] + rb;
    }
    return v;
}

void qsa_scores(const BlockSparseSetup& s, const std::vector<TensorView>& in, BlockSparseScores& out) {
    const std::int64_t r = s.block, n = s.blocks, di = s.di;
    const std::vector<Real> wq = read_exact(in[5]), wk = read_exact(in[6]);
    // Block keys of the complete blocks.
    std::vector<BsaVec> keys;
    for (std::int64_t b = 0; b * r + r <= s.len; ++b) {
        std::vector<Real> m(bsa_at(di), Real(0));
        std::vector<double> dm(bsa_at(di));
        for (std::int64_t i = 0; i < di; ++i) {
            double a = 0;
            for (std::int64_t j = b * r; j < b * r + r; ++j) {
                const double x = in[4].value(j * di + i);
                m[bsa_at(i)] += from_double(x);
                a += std::fabs(x);
            }
            m[bsa_at(i)] /= Real(static_cast<double>(r));
            if (!(a * (1 + 2 * static_cast<double>(r) * kBsaU) < 0x1p127)) a = INFINITY;  // the FP32 sum may overflow: undefined
            const double mi = std::fabs(to_double(m[bsa_at(i)])), rd = static_cast<double>(r);
            // FP32 sum of r terms, then one division by r.
            const double es = gamma(rd, kBsaU) * a + rd * kEta / 2;
            dm[bsa_at(i)] = es / rd + kBsaU * (mi + es / rd) + kEta;
        }
        keys.push_back(qsa_vector(s, m, dm, wk, b * r));
    }
    const std::vector<double> zero(bsa_at(di), 0.0);
    for (std::int64_t t = 0; t < s.len; ++t) {
        std::vector<BsaVec> qs;
        for (std::int64_t h = 0; h < s.gi; ++h) {
            std::vector<Real> x(bsa_at(di));
            for (std::int64_t i = 0; i < di; ++i) x[bsa_at(i)] = from_double(in[3].value((h * s.len + t) * di + i));
            qs.push_back(qsa_vector(s, x, zero, wq, t));
        }
        const std::size_t row = bsa_at(t);
        for (std::int64_t b = 0; b < n; ++b) {
            if (!select_eligible(s.select, t, b) || b == t / r) continue;
            const BsaVec& kb = keys[bsa_at(b)];
            double score = 0, delta = 0, mag = 0;
            bool undefined = kb.undefined;
            for (const BsaVec& q : qs) {
                undefined = undefined || q.undefined;
                if (undefined) break;
                double d = 0, a = 0, prop = 0;
                for (std::size_t i = 0; i < bsa_at(di); ++i) {
                    d += q.y[i] * kb.y[i];
                    a += (std::fabs(q.y[i]) + q.err[i]) * (std::fabs(kb.y[i]) + kb.err[i]);
                    prop += std::fabs(q.y[i]) * kb.err[i] + std::fabs(kb.y[i]) * q.err[i] + q.err[i] * kb.err[i];
                }
                const DotBudget db = dot_budget(a, di, Format::fp32);
                undefined = undefined || db.may_overflow;
                const double eps_h = prop + db.err + static_cast<double>(di) * 0x1p-50 * a;
                score += std::max(d, 0.0);
                delta += eps_h;                   // ReLU is 1-Lipschitz
                mag += std::max(d, 0.0) + eps_h;  // >= the kernel's and the exact ReLU
            }
            const DotBudget sum = dot_budget(mag, s.gi, Format::fp32);
            if (undefined || sum.may_overflow || !std::isfinite(mag)) {
                out.undefined[row] = 1;
                continue;
            }
            out.score[row * bsa_at(n) + bsa_at(b)] = score;
            out.delta[row * bsa_at(n) + bsa_at(b)] = (delta + sum.err + mag * 0x1p-50) * (1 + kBsaSlack);
        }
    }
}

}  // namespace

BlockSparseScores block_sparse_scores(const BlockSparseSetup& s, const std::vector<TensorView>& in) {
    BlockSparseScores out;
    const std::size_t rows = bsa_at(s.sel_groups * s.len);
    out.score.assign(rows * bsa_at(s.blocks), 0.0);
    out.delta.assign(rows * bsa_at(s.blocks), 0.0);
    out.undefined.assign(rows, 0);
    if (s.mode == 0) msa_scores(s, in, out);
    else qsa_scores(s, in, out);
    return out;
}

std::vector<std::int64_t> block_sparse_tokens(const double* ids, std::int64_t slots, std::int64_t block, std::int64_t len,
                                              std::int64_t t) {
    std::vector<std::int64_t> tok;
    for (std::int64_t slot = 0; slot < slots; ++slot) {
        if (!(ids[slot] >= 0)) continue;
        const auto b = static_cast<std::int64_t>(ids[slot]);
        for (std::int64_t j = b * block; j < std::min(len, b * block + block) && j <= t; ++j) tok.push_back(j);
    }
    std::sort(tok.begin(), tok.end());
    tok.erase(std::unique(tok.begin(), tok.end()), tok.end());
    return tok;
}

Tensor gather_head_rows(const TensorView& t, std::int64_t h0, std::int64_t nh, const std::vector<std::int64_t>& rows) {
    const std::int64_t len = t.shape[1], w = t.shape[2], n = static_cast<std::int64_t>(rows.size());
    Tensor out(t.format, {nh, n, w});
    for (std::int64_t h = 0; h < nh; ++h)
        for (std::int64_t r = 0; r < n; ++r)
            for (std::int64_t x = 0; x < w; ++x)
                out.set_bits((h * n + r) * w + x, t.bits(((h0 + h) * len + rows[bsa_at(r)]) * w + x));
    return out;
}

namespace {

// The selection each row's o is judged over, and which rows are judged.
struct BsaPlan {
    BlockSparseSetup s;
    std::vector<double> sel;        // [sel_groups, L, slots]: the indices' reference
    std::vector<char> idx_judged;   // per [sel_groups, L] row: the score budget is defined
    std::vector<char> o_judged;     // per row: a selection to judge o over
    std::map<std::string, std::int64_t> notes;
};

BsaPlan bsa_plan(const Params& p, const std::vector<TensorView>& in) {
    BsaPlan plan;
    plan.s = block_sparse_setup(p, in);
    const BlockSparseSetup& s = plan.s;
    const BlockSparseScores sc = block_sparse_scores(s, in);
    const auto n = bsa_at(s.blocks), slots = bsa_at(s.select.slots);
    const std::vector<double> zeros(n, 0.0), any(n, INFINITY);
    for (std::int64_t g = 0; g < s.sel_groups; ++g)
        for (std::int64_t t = 0; t < s.len; ++t) {
            const std::size_t row = bsa_at(g * s.len + t);
            const std::vector<double> score(sc.score.begin() + static_cast<std::ptrdiff_t>(row * n),
                                            sc.score.begin() + static_cast<std::ptrdiff_t>(row * n + n));
            const std::vector<double> delta(sc.delta.begin() + static_cast<std::ptrdiff_t>(row * n),
                                            sc.delta.begin() + static_cast<std::ptrdiff_t>(row * n + n));
            const bool defined = !sc.undefined[row];
            std::vector<double> chosen = defined ? select_row(s.select, score, t) : std::vector<double>(slots, kBsaNaN);
            bool o_ok = defined;
            if (s.staged) {
                std::vector<double> theirs(slots);
                for (std::size_t j = 0; j < slots; ++j) theirs[j] = in[8].value(static_cast<std::int64_t>(row * slots + j));
                if (defined && theirs != chosen && selection_admissible(s.select, score, delta, t, theirs)) {
                    chosen = theirs;
                    ++plan.notes["indices: selections other than the oracle's, within the block scores' budget (accepted)"];
                } else if (!defined && selection_admissible(s.select, zeros, any, t, theirs)) {
                    chosen = theirs, o_ok = true;  // any valid selection: o judged over it, the indices not judged
                }
            }
            plan.sel.insert(plan.sel.end(), chosen.begin(), chosen.end());
            plan.idx_judged.push_back(defined ? 1 : 0);
            plan.o_judged.push_back(o_ok ? 1 : 0);
        }
    return plan;
}

// One query row's attention problem: q [nh, 1, D] of the group's heads,
// k [nkv, n, D] and v [nkv, n, Dv] of the gathered tokens.
struct BsaRow {
    std::int64_t h0 = 0, nh = 0;
    Tensor q, k, v;
    std::vector<TensorView> views() const { return {q.view(), k.view(), v.view()}; }
};

BsaRow bsa_row(const BsaPlan& plan, const std::vector<TensorView>& in, std::int64_t g, std::int64_t t) {
    const BlockSparseSetup& s = plan.s;
    BsaRow row;
    const std::int64_t per = s.hq / s.groups, kv0 = s.mode == 0 ? g : 0, nkv = s.mode == 0 ? 1 : s.groups;
    row.h0 = s.mode == 0 ? g * per : 0;
    row.nh = s.mode == 0 ? per : s.hq;
    const std::int64_t slots = s.select.slots;
    const std::vector<std::int64_t> tok = block_sparse_tokens(&plan.sel[bsa_at((g * s.len + t) * slots)], slots, s.block, s.len, t);
    row.q = gather_head_rows(in[0], row.h0, row.nh, {t});
    row.k = gather_head_rows(in[1], kv0, nkv, tok);
    row.v = gather_head_rows(in[2], kv0, nkv, tok);
    return row;
}

Params bsa_attention_params(const BlockSparseSetup& s) {
    Params a;
    a.set("scale", s.scale);  // 0: the exact 1/sqrt(D) of the gathered q
    return a;
}

}  // namespace

OpOutputs eval_block_sparse_attention(const Params& params, const std::vector<TensorView>& in) {
    const BsaPlan plan = bsa_plan(params, in);
    const BlockSparseSetup& s = plan.s;
    OpOutputs out{{"o", "indices"}, {{s.hq, s.len, s.dv}, {s.sel_groups, s.len, s.select.slots}}, {{}, {}}};
    out.values[0].assign(bsa_at(s.hq * s.len * s.dv), from_double(kBsaNaN));
    for (std::int64_t g = 0; g < s.sel_groups; ++g)
        for (std::int64_t t = 0; t < s.len; ++t) {
            if (!plan.o_judged[bsa_at(g * s.len + t)]) continue;  // no selection: NaN
            const BsaRow row = bsa_row(plan, in, g, t);
            const OpOutputs a = eval_attention(bsa_attention_params(s), row.views());
            for (std::int64_t h = 0; h < row.nh; ++h)
                for (std::int64_t d = 0; d < s.dv; ++d)
                    out.values[0][bsa_at(((row.h0 + h) * s.len + t) * s.dv + d)] = a.values[0][bsa_at(h * s.dv + d)];
        }
    for (double id : plan.sel) out.values[1].push_back(from_double(id));
    out.notes = plan.notes;
    return out;
}

std::vector<std::vector<double>> block_sparse_attention_bound(const Params& params, const std::vector<TensorView>& in,
                                                              const std::vector<std::vector<double>>&, Format,
                                                              const std::vector<Format>& out) {
    const BsaPlan plan = bsa_plan(params, in);
    const BlockSparseSetup& s = plan.s;
    std::vector<double> bo(bsa_at(s.hq * s.len * s.dv), kUndefined), bi;
    const FlashErrorModel model = declared_flash_model(Params{}, {out.at(0), Format::fp32});
    const Params ap = bsa_attention_params(s);
    for (std::int64_t g = 0; g < s.sel_groups; ++g)
        for (std::int64_t t = 0; t < s.len; ++t) {
            if (!plan.o_judged[bsa_at(g * s.len + t)]) continue;
            const BsaRow row = bsa_row(plan, in, g, t);
            const std::vector<TensorView> views = row.views();
            const std::vector<double> b = attention_bound(ap, views, eval_attention(ap, views), model);
            for (std::int64_t h = 0; h < row.nh; ++h)
                for (std::int64_t d = 0; d < s.dv; ++d) bo[bsa_at(((row.h0 + h) * s.len + t) * s.dv + d)] = b[bsa_at(h * s.dv + d)];
        }
    const auto slots = bsa_at(s.select.slots);
    for (std::size_t row = 0; row < plan.idx_judged.size(); ++row)
        for (std::size_t j = 0; j < slots; ++j) bi.push_back(plan.idx_judged[row] ? 0.0 : kUndefined);
    return {bo, bi};
}

}  // namespace conform::oracle
