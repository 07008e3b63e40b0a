// compressed_attention (docs/compressed_attention.md): the oracle and the
// budget.  Every stage is an op the suite already has an oracle and a
// derived bound for:
//   * the compressor of entry n, channel x is attention with one query:
//     logits [1, 1] . [z_r, b_r] = z_r + b_r (one FP32 addition, within the
//     dot product of two terms that attention_bound budgets), values c_r,
//     over the entry's 2m (CSA) or m (HCA, CSA's entry 0) rows;
//   * the indexer is lightning_indexer over the stored entries, the
//     selection topk_select's rule (fully observed entries, ties to the
//     lower index), judged by selection_admissible with the indexer's
//     budget as delta;
//   * the core attention is attention over [entries; raw] with a 0/-inf mask
//     built from the selection and the window.
#include "oracle/compressed_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

#include "numerics/shape_check.hpp"
#include "oracle/attention.hpp"
#include "oracle/attention_bound.hpp"
#include "oracle/bound.hpp"
#include "oracle/sparse.hpp"

namespace conform::oracle {
namespace {

constexpr double kCsaNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kCsaInputs = 10;
enum CsaIn { kCsaQ, kCsaRaw, kCsaCa, kCsaZa, kCsaBa, kCsaCb, kCsaZb, kCsaBb, kCsaIq, kCsaIw };

}  // namespace

CsaSetup csa_setup(const Params& p, const std::vector<TensorView>& in) {
    const std::string op = "compressed_attention";
    if (in.size() != kCsaInputs && in.size() != kCsaInputs + 3)
        throw std::invalid_argument(op + ": expects q [H, L, c], raw [L, c], ca, za [L, c], ba [m, c], cb, zb [L, c], "
                                         "bb [m, c], iq [L, Hi, c], iw [L, Hi]");
    CsaSetup s;
    constexpr double kBig = 0x1p40;
    s.mode = integer_param(op, p, "mode", 0, 0, 1);
    s.m = integer_param(op, p, "m", 4, 1, kBig);
    s.k = integer_param(op, p, "k", 4, 1, kBig);
    s.window = integer_param(op, p, "window", 4, 0, kBig);
    require_rank(op, "q", in[kCsaQ], 3);
    s.heads = in[kCsaQ].shape[0], s.tokens = in[kCsaQ].shape[1], s.dim = in[kCsaQ].shape[2];
    const double scale = p.get("scale", 0);
    if (!std::isfinite(scale)) throw std::invalid_argument(op + ": parameter 'scale' must be finite");
    s.scale = scale != 0 ? scale : 1 / std::sqrt(static_cast<double>(s.dim));
    for (int i : {kCsaRaw, kCsaCa, kCsaZa, kCsaCb, kCsaZb}) {
        const char* names[] = {"q", "raw", "ca", "za", "ba", "cb", "zb", "bb", "iq", "iw"};
        require_rank(op, names[i], in[static_cast<std::size_t>(i)], 2);
        require_dim(op, names[i], in[static_cast<std::size_t>(i)], 0, s.tokens, "L of q");
        require_dim(op, names[i], in[static_cast<std::size_t>(i)], 1, s.dim, "c of q");
    }
    for (int i : {kCsaBa, kCsaBb}) {
        const char* name = i == kCsaBa ? "ba" : "bb";
        require_rank(op, name, in[static_cast<std::size_t>(i)], 2);
        require_dim(op, name, in[static_cast<std::size_t>(i)], 0, s.m, "m (one bias row per position in the group)");
        require_dim(op, name, in[static_cast<std::size_t>(i)], 1, s.dim, "c of q");
    }
    require_rank(op, "iq", in[kCsaIq], 3);
    require_dim(op, "iq", in[kCsaIq], 0, s.tokens, "L of q");
    require_dim(op, "iq", in[kCsaIq], 2, s.dim, "c of q (the index keys are the entries)");
    s.index_heads = in[kCsaIq].shape[1];
    require_rank(op, "iw", in[kCsaIw], 2);
    require_dim(op, "iw", in[kCsaIw], 0, s.tokens, "L of q");
    require_dim(op, "iw", in[kCsaIw], 1, s.index_heads, "Hi of iq");
    s.entries = s.tokens / s.m;
    if (s.entries < 1)
        throw std::invalid_argument(op + ": L = " + std::to_string(s.tokens) + " holds no entry of m = " +
                                    std::to_string(s.m) + " tokens (L >= m required)");
    if (s.entries > (std::int64_t{1} << 24)) throw std::invalid_argument(op + ": at most 2^24 entries (ids in FP32)");
    s.slots = s.mode == 0 ? s.k : s.entries;
    s.staged = in.size() == kCsaInputs + 3;
    if (s.staged) {
        const TensorView &o = in[kCsaInputs], &comp = in[kCsaInputs + 1], &ix = in[kCsaInputs + 2];
        require_rank(op, "a candidate's o", o, 3);
        require_rank(op, "a candidate's comp", comp, 2);
        require_dim(op, "a candidate's comp", comp, 0, s.entries, "N = floor(L / m)");
        require_dim(op, "a candidate's comp", comp, 1, s.dim, "c");
        require_rank(op, "a candidate's indices", ix, 2);
        require_dim(op, "a candidate's indices", ix, 0, s.tokens, "L");
        require_dim(op, "a candidate's indices", ix, 1, s.slots, "k (CSA) or N (HCA)");
    }
    return s;
}

namespace {

// The compressor of entry n as attention (docs/compressed_attention.md,
// "The compressor as attention"): head x = channel x, one query [1, 1],
// keys [z_r, b_r], values [c_r] over rows r: grouping a's tokens
// [m n, m (n + 1)), then (CSA, n >= 1) grouping b's [m (n - 1), m n).
struct CsaForm {
    Tensor q, k, v;
    std::vector<TensorView> views() const { return {q.view(), k.view(), v.view()}; }
};

CsaForm csa_compressor_form(const CsaSetup& s, const std::vector<TensorView>& in, std::int64_t n) {
    const bool with_b = s.mode == 0 && n >= 1;
    const std::int64_t rows = with_b ? 2 * s.m : s.m, c = s.dim;
    CsaForm f{Tensor(Format::fp32, {c, 1, 2}), Tensor(Format::fp32, {c, rows, 2}), Tensor(Format::fp32, {c, rows, 1})};
    for (std::int64_t x = 0; x < c; ++x) {
        f.q.set_value(2 * x, 1), f.q.set_value(2 * x + 1, 1);
        for (std::int64_t r = 0; r < rows; ++r) {
            const bool a = r < s.m;
            const std::int64_t j = r % s.m, t = a ? s.m * n + j : s.m * (n - 1) + j;
            const TensorView &cv = in[a ? kCsaCa : kCsaCb], &zv = in[a ? kCsaZa : kCsaZb], &bv = in[a ? kCsaBa : kCsaBb];
            f.k.set_value((x * rows + r) * 2, zv.value(t * c + x));
            f.k.set_value((x * rows + r) * 2 + 1, bv.value(j * c + x));
            f.v.set_value(x * rows + r, cv.value(t * c + x));
        }
    }
    return f;
}

const Params& csa_unit_scale() {
    static const Params p({{"scale", 1}});
    return p;
}

// What the indexer and the attention read, and the selection: the stored
// entries (a candidate's comp, or the exact entries rounded once to the
// inputs' format), per token the chosen entries, whether the row is NaN (a
// NaN score among its eligible entries) or undefined (the indexer may
// overflow there), and what the verdict should count.
struct CsaPlan {
    Tensor keys;                             // [N, c], fp32 holding the stored values
    std::vector<std::vector<double>> rows;   // [L][slots]: the reference's indices
    std::vector<std::vector<double>> attend; // [L][slots]: the entries o attends to (the candidate's, well formed)
    std::vector<char> nan_row, undefined_row;
    std::vector<char> taken;                 // attend holds the candidate's row
    std::map<std::string, std::int64_t> notes;
};

oracle::SelectSetup csa_select_setup(const CsaSetup& s) {
    SelectSetup ss;
    ss.queries = s.tokens, ss.candidates = s.entries, ss.k = s.k, ss.block = s.m, ss.causal = 1, ss.offset = 0;
    ss.force_local = 0, ss.slots = s.k, ss.staged = s.staged;
    return ss;
}

std::vector<double> csa_theirs_row(const CsaSetup& s, const std::vector<TensorView>& in, std::int64_t t) {
    std::vector<double> r(static_cast<std::size_t>(s.slots));
    for (std::int64_t j = 0; j < s.slots; ++j) r[static_cast<std::size_t>(j)] = in[kCsaInputs + 2].value(t * s.slots + j);
    return r;
}

// CSA's rows: the exact scores over the stored entries, each token's exact
// selection, or the candidate's where the indexer's budget admits it.
void csa_select_rows(const CsaSetup& s, const std::vector<TensorView>& in, CsaPlan& pl) {
    const std::vector<TensorView> ix{in[kCsaIq], pl.keys.view(), in[kCsaIw]};
    const OpOutputs sc = eval_lightning_indexer(Params{}, ix);
    std::vector<double> scores(sc.values[0].size());
    for (std::size_t e = 0; e < scores.size(); ++e) scores[e] = to_double(sc.values[0][e]);
    const std::vector<double> delta = lightning_indexer_bound(Params{}, ix, {scores}, Format::fp32, {Format::fp32}).at(0);
    const SelectSetup ss = csa_select_setup(s);
    for (std::int64_t t = 0; t < s.tokens; ++t) {
        const auto ti = static_cast<std::size_t>(t);
        const auto first = scores.begin() + t * s.entries;
        const std::vector<double> row_scores(first, first + s.entries);
        std::vector<double> d(static_cast<std::size_t>(s.entries), 0.0);
        for (std::int64_t n = 0; n < s.entries; ++n) {
            const double b = delta[static_cast<std::size_t>(t * s.entries + n)];
            if (!csa_observed(s, n, t)) continue;
            if (b == kUndefined) pl.undefined_row[ti] = 1;
            d[static_cast<std::size_t>(n)] = std::isfinite(b) ? b : 0;  // NaN: an infinite exact score, exact
        }
        if (pl.undefined_row[ti]) std::fill(d.begin(), d.end(), INFINITY);  // any well-formed selection
        std::vector<double> row = select_row(ss, row_scores, t);
        if (std::isnan(row[0])) {
            pl.nan_row[ti] = 1;
        } else if (s.staged) {
            const std::vector<double> theirs = csa_theirs_row(s, in, t);
            if (theirs != row && selection_admissible(ss, row_scores, d, t, theirs)) {
                row = theirs;
                ++pl.notes["indices: a selection within the indexer's budget other than the exact one (accepted)"];
            }
        }
        pl.rows[ti] = std::move(row);
    }
}

CsaPlan csa_plan(const CsaSetup& s, const std::vector<TensorView>& in, const std::vector<Real>* exact_comp) {
    CsaPlan pl{Tensor(Format::fp32, {s.entries, s.dim}), {}, {}, std::vector<char>(static_cast<std::size_t>(s.tokens), 0),
               std::vector<char>(static_cast<std::size_t>(s.tokens), 0), {}, {}};
    const Format store = in[kCsaCa].format;
    for (std::int64_t e = 0; e < s.entries * s.dim; ++e)
        pl.keys.set_value(e, s.staged ? in[kCsaInputs + 1].value(e)
                                      : decode(store, encode(store, to_double(exact_comp->at(static_cast<std::size_t>(e))))));
    pl.rows.assign(static_cast<std::size_t>(s.tokens), std::vector<double>(static_cast<std::size_t>(s.slots), -1.0));
    if (s.mode == 1) {  // HCA: every fully observed entry, in index order
        for (std::int64_t t = 0; t < s.tokens; ++t)
            for (std::int64_t n = 0, j = 0; n < s.entries; ++n)
                if (csa_observed(s, n, t)) pl.rows[static_cast<std::size_t>(t)][static_cast<std::size_t>(j++)] = static_cast<double>(n);
    } else {
        csa_select_rows(s, in, pl);
    }
    // o is the local error given the candidate's selection, admissible or
    // not (an inadmissible one fails at indices): its ids wherever every
    // slot is -1 or an entry id; the reference's rows elsewhere.
    pl.attend = pl.rows;
    pl.taken.assign(static_cast<std::size_t>(s.tokens), 0);
    for (std::int64_t t = 0; s.staged && t < s.tokens; ++t) {
        const std::vector<double> theirs = csa_theirs_row(s, in, t);
        if (std::all_of(theirs.begin(), theirs.end(), [&](double id) {
                return id == -1 || (id >= 0 && id < static_cast<double>(s.entries) && id == std::floor(id));
            }))
            pl.attend[static_cast<std::size_t>(t)] = theirs, pl.taken[static_cast<std::size_t>(t)] = 1;
    }
    return pl;
}

// The core attention of the plan: q, kv = [entries; raw] [1, N + L, c] and
// the mask [L, N + L] (0 for the chosen entries and the window's raw rows
// (t - window, t], -inf elsewhere).
struct CsaCore {
    Tensor kv, mask;
};

CsaCore csa_core(const CsaSetup& s, const std::vector<TensorView>& in, const CsaPlan& pl) {
    const std::int64_t n = s.entries, l = s.tokens, c = s.dim, lk = n + l;
    CsaCore core{Tensor(Format::fp32, {1, lk, c}), Tensor(Format::fp32, {l, lk})};
    for (std::int64_t e = 0; e < n * c; ++e) core.kv.set_value(e, pl.keys.value(e));
    for (std::int64_t e = 0; e < l * c; ++e) core.kv.set_value(n * c + e, in[kCsaRaw].value(e));
    for (std::int64_t t = 0; t < l; ++t) {
        for (std::int64_t j = 0; j < lk; ++j) core.mask.set_value(t * lk + j, -INFINITY);
        for (double id : pl.attend[static_cast<std::size_t>(t)])
            if (id >= 0) core.mask.set_value(t * lk + static_cast<std::int64_t>(id), 0);
        for (std::int64_t r = std::max<std::int64_t>(0, t - s.window + 1); r <= t && s.window > 0; ++r)
            core.mask.set_value(t * lk + n + r, 0);
    }
    return core;
}

std::vector<TensorView> csa_core_views(const std::vector<TensorView>& in, const CsaCore& core) {
    return {in[kCsaQ], core.kv.view(), core.kv.view(), core.mask.view()};
}

Params csa_core_params(const CsaSetup& s) { return Params({{"scale", s.scale}}); }

}  // namespace

OpOutputs eval_compressed_attention(const Params& params, const std::vector<TensorView>& in) {
    const CsaSetup s = csa_setup(params, in);
    OpOutputs out{{"o", "comp", "indices"}, {{s.heads, s.tokens, s.dim}, {s.entries, s.dim}, {s.tokens, s.slots}}, {{}, {}, {}}, {}};
    for (std::int64_t n = 0; n < s.entries; ++n) {
        const CsaForm f = csa_compressor_form(s, in, n);
        const OpOutputs e = eval_attention(csa_unit_scale(), f.views());
        out.values[1].insert(out.values[1].end(), e.values[0].begin(), e.values[0].end());
    }
    CsaPlan pl = csa_plan(s, in, &out.values[1]);
    out.notes = std::move(pl.notes);
    for (std::int64_t t = 0; t < s.tokens; ++t)
        for (double id : pl.rows[static_cast<std::size_t>(t)]) out.values[2].push_back(from_double(id));
    const CsaCore core = csa_core(s, in, pl);
    out.values[0] = eval_attention(csa_core_params(s), csa_core_views(in, core)).values[0];
    for (std::int64_t t = 0; t < s.tokens; ++t)
        if (pl.nan_row[static_cast<std::size_t>(t)])
            for (std::int64_t h = 0; h < s.heads; ++h)
                for (std::int64_t x = 0; x < s.dim; ++x) out.values[0][static_cast<std::size_t>((h * s.tokens + t) * s.dim + x)] = from_double(kCsaNaN);
    return out;
}

// comp: attention_bound of each entry's compressor form, output in comp's
// format.  indices: 0 (NaN for a NaN row, kUndefined where the indexer may
// overflow).  o: attention_bound over what the reference attends to (the
// plan rebuilt from the same inputs: the candidate's entries, and its
// selection wherever the slots are -1 or entry ids).
std::vector<std::vector<double>> compressed_attention_bound(const Params& params, const std::vector<TensorView>& in,
                                                            const std::vector<std::vector<double>>& exact, Format,
                                                            const std::vector<Format>& out) {
    const CsaSetup s = csa_setup(params, in);
    std::vector<std::vector<double>> b(3);
    // Key tiles a kernel declares (declared.compressor_block for the pooling,
    // declared.key_block for the core attention); undeclared: one key per
    // tile, the weakest assumption.
    FlashErrorModel comp_model;
    comp_model.out = out.at(1);
    comp_model.key_block = static_cast<std::int64_t>(std::max(0.0, params.get("declared.compressor_block", 0)));
    std::vector<Real> comp_exact;
    for (std::int64_t n = 0; n < s.entries; ++n) {
        const CsaForm f = csa_compressor_form(s, in, n);
        const auto first = exact.at(1).begin() + n * s.dim;
        const std::vector<double> o(first, first + s.dim), lse(static_cast<std::size_t>(s.dim), 0.0);
        const std::vector<double> e = attention_bound(csa_unit_scale(), f.views(), attention_outputs(f.views(), o, lse), comp_model);
        b[1].insert(b[1].end(), e.begin(), e.begin() + s.dim);
        for (double v : o) comp_exact.push_back(from_double(v));
    }
    const CsaPlan pl = csa_plan(s, in, &comp_exact);
    for (std::int64_t t = 0; t < s.tokens; ++t) {
        const auto ti = static_cast<std::size_t>(t);
        const double v = pl.nan_row[ti] ? kCsaNaN : pl.undefined_row[ti] ? kUndefined : 0.0;
        b[2].insert(b[2].end(), static_cast<std::size_t>(s.slots), v);
    }
    const CsaCore core = csa_core(s, in, pl);
    const std::vector<TensorView> views = csa_core_views(in, core);
    const FlashErrorModel model =
        declared_flash_model(Params({{"declared.key_block", params.get("declared.key_block", 0)}}), {out.at(0)});
    const std::vector<double> lse(static_cast<std::size_t>(s.heads * s.tokens), 0.0);
    std::vector<double> e = attention_bound(csa_core_params(s), views, attention_outputs(views, exact.at(0), lse), model);
    e.resize(static_cast<std::size_t>(s.heads * s.tokens * s.dim));
    for (std::int64_t t = 0; t < s.tokens; ++t) {
        const auto ti = static_cast<std::size_t>(t);
        // A row whose scores may overflow FP32 has no determined selection: o is
        // judged over the candidate's own (well formed) one, else not at all (its
        // FP32 scores may be NaN where the exact ones are not, a NaN row).
        const bool undefined = pl.undefined_row[ti] && !pl.taken[ti];
        if (pl.nan_row[ti] || undefined)
            for (std::int64_t h = 0; h < s.heads; ++h)
                for (std::int64_t x = 0; x < s.dim; ++x)
                    e[static_cast<std::size_t>((h * s.tokens + t) * s.dim + x)] = pl.nan_row[ti] ? kCsaNaN : kUndefined;
    }
    b[0] = std::move(e);
    return b;
}

}  // namespace conform::oracle
