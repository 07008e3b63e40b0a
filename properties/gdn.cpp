// Generators and metamorphic properties of the gated delta rule, ops gdn and
// kda (docs/gdn.md, "Properties").
#include <algorithm>
#include <cmath>

#include "numerics/delta_varlen.hpp"
#include "numerics/ulp.hpp"
#include "oracle/gdn_bound.hpp"
#include "oracle/structured.hpp"
#include "properties/common.hpp"
#include "properties/gdn.hpp"

namespace conform::props {
namespace {

// Lower bounds of the log-decay the models allow: KDA's g_min (eq. 1.22)
// and GDN's alpha = 1e-12 (negative softplus is unbounded; 1e-12 is the
// issue's floor, where 1/Gamma would overflow every format).
constexpr double kKdaGateMin = -5;
const double kGdnGateMin = std::log(1e-12);


// Values that keep the state moderate: the bound is a magnitude times u,
// and a case whose values overflow tells nothing about a kernel.
const std::vector<Family>& delta_families() {
    static const std::vector<Family> v = {Family::normal, Family::uniform, Family::constant, Family::tiny,
                                          Family::outlier};
    return v;
}

bool per_channel(const std::string& op) { return op == "kda"; }

double gate_min(const std::string& op) { return per_channel(op) ? kKdaGateMin : kGdnGateMin; }

// A log-decay of the op's parameterization: KDA's lower-bounded sigmoid
// g_min sigma(e^A z) (eq. 1.22), GDN's negative softplus -e^A softplus(z)
// (eq. 5.6) floored at ln 1e-12.
double model_gate(const std::string& op, std::mt19937_64& rng) {
    std::normal_distribution<double> z(0, 2);
    std::uniform_real_distribution<double> a(-1, 1);
    const double zz = z(rng), aa = a(rng);
    if (per_channel(op)) return kKdaGateMin / (1 + std::exp(-std::exp(aa) * zz));
    const double softplus = zz > 0 ? zz + std::log1p(std::exp(-zz)) : std::log1p(std::exp(zz));
    return std::max(kGdnGateMin, -std::exp(2 * aa) * softplus);
}

double draw_gate(const std::string& op, int mode, std::int64_t t, std::mt19937_64& rng) {
    switch (mode) {
        case saturated_gates: return gate_min(op);
        case unit_gates: return 0;
        case burst_gates: {  // runs of saturated and unit gates between ordinary ones, now and then a reset (alpha = 0)
            if (rng() % 16 == 0) return -INFINITY;
            const std::int64_t phase = (t / 5) % 3;
            return phase == 0 ? gate_min(op) : phase == 1 ? 0.0 : model_gate(op, rng);
        }
        case near_one_gates: return -std::ldexp(1.0, -3 - static_cast<int>(rng() % 12));  // alpha 1 - 2^-3 .. 1 - 2^-14
        default: return rng() % 8 == 0 ? 0.0 : model_gate(op, rng);
    }
}

double draw_beta(int mode, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> U(0, 1);
    switch (mode) {
        case zero_betas: return 0;
        case one_betas: return 1;
        case mixed_betas: return rng() % 3 == 0 ? 0.0 : rng() % 2 ? 1.0 : U(rng);
        case near_one_betas: return rng() % 8 == 0 ? 1.0 : 1 - std::ldexp(1.0, -2 - static_cast<int>(rng() % 11));
        default: return U(rng);
    }
}

// Keys of (about) unit norm when the op does not normalize them, scaled down
// now and then: beta |k|^2 in [0, 1] keeps every transition a contraction
// (the models' domain; the bound holds outside it too, but grows).
void unit_rows(Tensor& t, std::int64_t dk, std::mt19937_64& rng) {
    std::normal_distribution<double> N;
    const double shrink = std::ldexp(1.0, -static_cast<int>(rng() % 4 == 0 ? rng() % 4 : 0));
    for (std::int64_t row = 0; row * dk < t.numel(); ++row) {
        std::vector<double> x(static_cast<std::size_t>(dk));
        double s = 0;
        for (double& e : x) e = N(rng), s += e * e;
        for (std::int64_t i = 0; i < dk; ++i) t.set_value(row * dk + i, shrink * x[i] / std::sqrt(s));
    }
}

// Keys of one direction per head with a little noise, |k_t - u| ~ 10^-e
// (e = 1 .. 4 per case, spread over the d_k components), of unit norm
// unless the op normalizes them: every pair in a chunk has k_r . k_i ~ 1, so
// with beta ~ 1 and alpha ~ 1 the strictly lower B L of the chunk's UT
// system (I + B L) is all ~1 and its condition number ~2C, the largest the
// models' domain allows (the transitions are contractions, so the inverse
// stays bounded).
void near_parallel_rows(Tensor& t, std::int64_t heads, std::int64_t dk, bool normalize, std::mt19937_64& rng) {
    std::normal_distribution<double> N;
    const double noise = std::pow(10.0, -1 - static_cast<int>(rng() % 4)) / std::sqrt(static_cast<double>(dk));
    std::vector<std::vector<double>> dir(static_cast<std::size_t>(heads), std::vector<double>(static_cast<std::size_t>(dk)));
    for (auto& u : dir) {
        double s = 0;
        for (double& e : u) e = N(rng), s += e * e;
        for (double& e : u) e /= std::sqrt(s);
    }
    for (std::int64_t row = 0; row * dk < t.numel(); ++row) {
        std::vector<double> x = dir[static_cast<std::size_t>(row % heads)];
        double s = 0;
        for (double& e : x) e += noise * N(rng), s += e * e;
        for (std::int64_t i = 0; i < dk; ++i) t.set_value(row * dk + i, normalize ? x[i] / std::sqrt(s) : x[i]);
    }
}

// NaN at `count` random elements of random inputs among the first
// `eligible`: the oracle's NaN pattern is causal and by column (docs/gdn.md);
// a kernel must reproduce it.
void inject_nans(std::vector<Tensor>& in, std::size_t eligible, int count, std::mt19937_64& rng) {
    for (int s = 0; s < count; ++s) {
        Tensor& t = in[rng() % eligible];
        if (t.numel()) t.set_value(static_cast<std::int64_t>(rng() % t.numel()), NAN);
    }
}

// The shape of a case: T tokens, H heads, d_k, d_v, 1 in 25 long, and
// 1 in 5 with a demanding chunk solve.
struct DeltaShape {
    int T, H, dk, dv;
    bool long_seq, demanding_solve;
};

rc::Gen<DeltaShape> delta_shape() {
    return rc::gen::apply(
        [](int T, int H, int dk, int dv, bool long_seq, bool demanding) { return DeltaShape{T, H, dk, dv, long_seq, demanding}; },
        rc::gen::element(1, 2, 3, 5, 8, 15, 16, 17, 31, 33, 47, 63, 64, 65, 100, 130), rc::gen::inRange(1, 3),
        rc::gen::element(1, 2, 3, 4, 4, 5, 8, 8, 16), rc::gen::element(1, 2, 3, 3, 4, 7, 8, 8, 16),
        // 1 in 25 long (and small); element and weightedElement draw independently of RapidCheck's size
        // (inRange does not) and shrink toward their first entry.
        rc::gen::weightedElement<bool>({{24, false}, {1, true}}), rc::gen::weightedElement<bool>({{4, false}, {1, true}}));
}

// The knobs of a case's chunk solves: gates, betas, chunk and key geometry.
struct SolveSetting {
    int gates, betas;
    double chunk;
    int keys = unit_keys;
};

// A demanding chunk solve, from the seed: one or two whole chunks of 128 or
// 256 tokens -- past the 64 of every other case, where a kernel built around
// 64-token solves must merge blocks -- with the models' gates and spread
// keys (2 in 3), or (1 in 3) near-parallel keys with beta ~ 1 and alpha ~ 1
// (unit or near-one gates) in chunks of 64 to 256: the UT system's condition
// number is then ~2C, the largest the models' domain gives a chunk of C
// tokens.  One head, d_k >= 4, d_v <= 4: the recurrence oracle costs
// T d_k d_v per head.
SolveSetting demanding_solve(DeltaShape& s, std::uint64_t seed) {
    static const double long_chunks[] = {128.0, 256.0}, any_chunks[] = {64.0, 128.0, 256.0};
    SolveSetting h{mixed_gates, seed % 2 ? uniform_betas : mixed_betas, long_chunks[(seed >> 1) % 2]};
    if ((seed >> 2) % 3 == 0)
        h = SolveSetting{seed % 2 ? near_one_gates : unit_gates, near_one_betas, any_chunks[(seed >> 1) % 3],
                         near_parallel_keys};
    s.T = static_cast<int>(h.chunk) * (1 + static_cast<int>((seed >> 5) % 2)) + 1;
    s.H = 1, s.dk = std::max(s.dk, 4), s.dv = std::min(s.dv, 4);
    return h;
}

rc::Gen<CaseSpec> gen_delta_spec(const std::string& op, Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [op, fmt](DeltaShape sh, int state, int gates, int betas, double chunk, int l2norm, double scale, Family fam,
                  int k, std::uint64_t seed, int specials, int sequences) {
            SolveSetting solve{gates, betas, chunk};
            if (sh.long_seq) sh.T = 4096 + sh.T, sh.H = 1, sh.dk = std::min(sh.dk, 3), sh.dv = std::min(sh.dv, 3);
            else if (sh.demanding_solve) solve = demanding_solve(sh, seed);
            Params p({{"chunk", solve.chunk}, {"l2norm", double(l2norm)}, {"scale", scale}});
            return structured_spec(op, fmt, {sh.T, sh.H, sh.dk, sh.dv, state, solve.gates, solve.betas, sequences, solve.keys},
                                   p, fam, k, seed, specials);
        },
        delta_shape(), rc::gen::element(1, 1, 0),
        rc::gen::element<int>(mixed_gates, saturated_gates, unit_gates, burst_gates, near_one_gates),
        rc::gen::element<int>(uniform_betas, zero_betas, one_betas, mixed_betas), rc::gen::element(64.0, 16.0, 32.0, 64.0, 16.0, 32.0, 5.0),
        rc::gen::element(0, 0, 1), rc::gen::element(1.0, 0.0, 0.5), rc::gen::elementOf(delta_families()),
        rc::gen::inRange(-3, 4), rc::gen::arbitrary<std::uint64_t>(),
        opt.specials ? rc::gen::inRange(1, 4) : rc::gen::just(0),
        // 1 in 6 a packed call of 2 .. 4 sequences (cu_seqlens).
        rc::gen::weightedElement<int>({{15, 1}, {1, 2}, {1, 3}, {1, 4}}));
}

// Packs the case's T tokens as `sequences` sequences at random cut points
// (empty sequences included): initial_state [N, H, d_k, d_v] (or an empty
// placeholder when the case has none) and cu_seqlens, stored in fp32
// (integers < 2^24 are exact).
void pack_sequences(Case& c, std::int64_t sequences, bool state, const CaseSpec& s, std::mt19937_64& rng) {
    const std::int64_t T = c.inputs[0].shape()[0], H = c.inputs[0].shape()[1], dk = c.inputs[0].shape()[2],
                       dv = c.inputs[2].shape()[2];
    std::vector<std::int64_t> cu{0, T};
    for (std::int64_t n = 1; n < sequences; ++n) cu.push_back(static_cast<std::int64_t>(rng() % (T + 1)));
    std::sort(cu.begin(), cu.end());
    if (c.inputs.size() > kDeltaInitialState) c.inputs.resize(kDeltaInitialState);
    Tensor s0(s.format, state ? std::vector<std::int64_t>{sequences, H, dk, dv} : std::vector<std::int64_t>{0});
    fill_values(s0, s.families.at(0), s, 5, rng);
    Tensor seqlens(Format::fp32, {static_cast<std::int64_t>(cu.size())});
    for (std::size_t i = 0; i < cu.size(); ++i) seqlens.set_value(static_cast<std::int64_t>(i), static_cast<double>(cu[i]));
    c.inputs.push_back(std::move(s0));
    c.inputs.push_back(std::move(seqlens));
}

Case build_delta_case(const CaseSpec& s) {
    Case c = start_case(s);
    std::mt19937_64 rng(s.seed);
    // Golden vectors and other callers without dims: a small case with every input.
    const std::vector<std::int64_t> d =
        s.dims.size() >= 7 ? s.dims : std::vector<std::int64_t>{5, 2, 3, 2, 1, mixed_gates, mixed_betas};
    const std::int64_t T = d[0], H = d[1], dk = d[2], dv = d[3];
    const bool l2norm = s.params.get("l2norm", 0) != 0;
    const Family fam = s.families.at(0);
    Tensor q(s.format, {T, H, dk}), k(s.format, {T, H, dk}), v(s.format, {T, H, dv});
    fill_values(q, fam, s, 0, rng);
    // Normalized by the op: raw keys from the family, now and then of a norm
    // near sqrt(eps) (where the placement of eps decides); else unit keys.
    if (d.size() > 8 && d[8] == near_parallel_keys) near_parallel_rows(k, H, dk, !l2norm, rng);
    else if (l2norm) fill_values(k, rng() % 3 == 0 ? Family::near_eps : fam, s, 1, rng);
    else unit_rows(k, dk, rng);
    if (l2norm && rng() % 3 == 0) fill_values(q, Family::near_eps, s, 0, rng);
    fill_values(v, fam, s, 2, rng);
    const std::int64_t gw = per_channel(s.op) ? dk : 1;
    Tensor g(s.format, per_channel(s.op) ? std::vector<std::int64_t>{T, H, dk} : std::vector<std::int64_t>{T, H});
    for (std::int64_t i = 0; i < g.numel(); ++i) g.set_value(i, draw_gate(s.op, static_cast<int>(d[5]), i / (H * gw), rng));
    Tensor beta(s.format, {T, H});
    for (std::int64_t i = 0; i < beta.numel(); ++i) beta.set_value(i, draw_beta(static_cast<int>(d[6]), rng));
    c.inputs = {std::move(q), std::move(k), std::move(v), std::move(g), std::move(beta)};
    if (d[4]) {
        Tensor s0(s.format, {H, dk, dv});
        fill_values(s0, fam, s, 5, rng);
        c.inputs.push_back(std::move(s0));
    }
    if (d.size() > 7 && d[7] > 1) pack_sequences(c, d[7], d[4] != 0, s, rng);
    // Not into cu_seqlens: a NaN there is a malformed call, not a value.
    inject_nans(c.inputs, std::min<std::size_t>(c.inputs.size(), kDeltaCuSeqlens), s.specials, rng);
    return c;
}

}  // namespace

rc::Gen<CaseSpec> gen_gdn_spec(Format fmt, GenOptions opt) { return gen_delta_spec("gdn", fmt, opt); }
rc::Gen<CaseSpec> gen_kda_spec(Format fmt, GenOptions opt) { return gen_delta_spec("kda", fmt, opt); }
Case build_gdn_case(const CaseSpec& spec) { return build_delta_case(spec); }
Case build_kda_case(const CaseSpec& spec) { return build_delta_case(spec); }

namespace {

bool is_delta_op(const OpSpec& op) { return op.family == "gdn"; }

// A generated case of kernel k's op, with at most max_t tokens (0: any).
CaseSpec delta_spec(const KernelInfo& k, std::int64_t max_t = 0) {
    CaseSpec spec = in_domain(*gen_delta_spec(k.op, k.in, GenOptions{}));
    spec.dims[7] = 1;  // one sequence: the metamorphic properties cut and carry tokens themselves
    if (max_t > 0) spec.dims[0] = std::min(spec.dims[0], max_t), spec.dims[1] = std::min<std::int64_t>(spec.dims[1], 2);
    return spec;
}

oracle::DeltaErrorModel error_model(const KernelInfo& k, std::vector<std::int64_t> starts = {}) {
    oracle::DeltaErrorModel m;
    m.per_channel = per_channel(k.op);
    m.out = k.out;
    m.state_out = output_format(k, 1);
    m.acc = k.acc;
    m.chunk_starts = std::move(starts);
    oracle::read_declared_update(m, k.declared);
    return m;
}

// got within `bound` of the exact values (NaN exactly where they are NaN);
// the first failure described, or "".
template <class T>  // Tensor or TensorView
std::string within(const T& got, const std::vector<double>& exact, const std::vector<double>& bound,
                   const std::string& what) {
    for (std::int64_t i = 0; i < got.numel(); ++i) {
        const double x = got.value(i), e = exact[static_cast<std::size_t>(i)];
        const bool ok = std::isnan(e) ? std::isnan(x) : std::fabs(x - e) <= bound[static_cast<std::size_t>(i)];
        if (!ok)
            return what + "[" + std::to_string(i) + "] = " + hexfloat(x) + ", exact " + hexfloat(e) + ", bound " +
                   hexfloat(bound[static_cast<std::size_t>(i)]);
    }
    return "";
}

oracle::StructuredResult exact_of(const KernelInfo& k, const Case& c) {
    return oracle::evaluate_structured(k.op, c.params, c.views(), {k.out, Format::fp32});
}

// Chunk-size invariance: the kernel with chunk 16, 32 and 64 on the same case
// is within its derived bound for each (one oracle evaluation; the oracle
// does not depend on the chunk).  That any two differ by at most the sum of
// their bounds follows from it (triangle inequality) and is not checked.
Testable chunk_invariance(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(delta_spec(k, 200));
        const oracle::StructuredResult ex = exact_of(k, c);
        for (double chunk : {16.0, 32.0, 64.0}) {
            Params p = c.params;
            p.set("chunk", chunk);
            const std::vector<Tensor> out = run_kernel(k, p, c.views());
            const oracle::DeltaBound b = oracle::delta_rule_bound(p, c.views(), ex.exact[0], error_model(k));
            const std::string tag = "chunk " + std::to_string(static_cast<int>(chunk)) + ": ";
            for (const std::string& why : {within(out[0], ex.exact[0], b.y, tag + "y"),
                                           within(out[1], ex.exact[1], b.state, tag + "state")})
                if (!why.empty()) RC_FAIL(why);
        }
    };
}

// Tokens [t0, t1) of a case as a case of its own (no initial state).
std::vector<Tensor> token_slice(const Case& c, std::int64_t t0, std::int64_t t1) {
    std::vector<Tensor> out;
    for (std::size_t i = 0; i < 5; ++i) {
        const Tensor& x = c.inputs[i];
        std::vector<std::int64_t> shape = x.shape();
        const std::int64_t per = x.numel() / shape[0];
        shape[0] = t1 - t0;
        Tensor y(x.format(), shape);
        for (std::int64_t e = 0; e < y.numel(); ++e) y.set_bits(e, x.bits(t0 * per + e));
        out.push_back(std::move(y));
    }
    return out;
}

std::vector<TensorView> views_of(const std::vector<Tensor>& ts) {
    std::vector<TensorView> v;
    for (const Tensor& t : ts) v.push_back(t.view());
    return v;
}

// Split invariance: for every t, [0, t) and then [t, T) from the carried
// fp32 state give y and the final state within the bound of a kernel whose
// chunks restart at t (the same arithmetic as one run with that chunking),
// against the oracle of the whole sequence.
Testable split_invariance(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(delta_spec(k, 40));
        const std::int64_t T = c.inputs[0].shape()[0];
        RC_PRE(T >= 2);
        const oracle::StructuredResult ex = exact_of(k, c);
        const auto chunk = static_cast<std::int64_t>(c.params.get("chunk", 64));
        for (std::int64_t t = 1; t < T; ++t) {
            std::vector<Tensor> head = token_slice(c, 0, t), tail = token_slice(c, t, T);
            if (c.inputs.size() == 6) head.push_back(c.inputs[5]);
            const auto first = run_kernel(k, c.params, views_of(head));
            tail.push_back(first[1]);  // the carried state, fp32
            const auto second = run_kernel(k, c.params, views_of(tail));
            Tensor y(k.out, {T, c.inputs[0].shape()[1], c.inputs[2].shape()[2]});
            const std::int64_t split = first[0].numel();
            for (std::int64_t i = 0; i < y.numel(); ++i)
                y.set_bits(i, i < split ? first[0].bits(i) : second[0].bits(i - split));
            std::vector<std::int64_t> starts = oracle::regular_chunk_starts(t, chunk);
            for (std::int64_t s : oracle::regular_chunk_starts(T - t, chunk)) starts.push_back(t + s);
            const oracle::DeltaBound b = oracle::delta_rule_bound(c.params, c.views(), ex.exact[0], error_model(k, starts));
            const std::string tag = "split at " + std::to_string(t) + " of " + std::to_string(T) + ": ";
            for (const std::string& why : {within(y, ex.exact[0], b.y, tag + "y"),
                                           within(second[1], ex.exact[1], b.state, tag + "state")})
                if (!why.empty()) RC_FAIL(why);
        }
    };
}

// Causality: changing every input of the tokens from t on (to other
// values, NaN included) leaves y of the tokens before t bit-identical.
Testable gdn_causality(const KernelInfo& k) {
    return [&k] {
        Case c = build_case(delta_spec(k, 130));
        const std::int64_t T = c.inputs[0].shape()[0];
        RC_PRE(T >= 2);
        const auto t = *rc::gen::inRange<std::int64_t>(1, T);
        const auto before = run_kernel(k, c.params, c.views());
        std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
        std::normal_distribution<double> N;
        for (std::size_t i = 0; i < 5; ++i) {
            Tensor& x = c.inputs[i];
            const std::int64_t per = x.numel() / T;
            for (std::int64_t e = t * per; e < x.numel(); ++e) x.set_value(e, rng() % 7 == 0 ? NAN : N(rng));
        }
        const auto after = run_kernel(k, c.params, c.views());
        const std::int64_t prefix = t * before[0].numel() / T;
        for (std::int64_t i = 0; i < prefix; ++i)
            if (before[0].bits(i) != after[0].bits(i))
                RC_FAIL("y[" + std::to_string(i) + "] (token " + std::to_string(i * T / before[0].numel()) +
                        ") changed when tokens " + std::to_string(t) + ".. changed: " + hexfloat(before[0].value(i)) +
                        " -> " + hexfloat(after[0].value(i)));
    };
}

// Varlen packing: 2 to 4 sequences (empty ones included, each from its own
// initial state or from zero) packed into one call give, for every
// sequence, y and the final state within the bound of that sequence run
// alone, whose chunks start at its first token (docs/gdn.md "Variable-length
// packing").  The sequence run alone through the kernel must pass too, so
// that a failure names packing only when packing is what breaks.
Testable varlen_packing(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = delta_spec(k, 100);
        spec.dims[7] = *rc::gen::inRange(2, 5);
        spec.specials = 0;
        const Case c = build_case(spec);
        const std::vector<TensorView> in = c.views();
        const std::vector<std::int64_t> cu = delta_cu_seqlens(in, in[0].shape[0]);
        const std::vector<Tensor> packed = run_kernel(k, c.params, in);
        const std::vector<TensorView> packed_views{packed[0].view(), packed[1].view()};
        for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
            const std::vector<TensorView> seq = delta_sequence_inputs(in, cu, n);
            const oracle::StructuredResult ex = oracle::evaluate_structured(k.op, c.params, seq, {k.out, Format::fp32});
            const oracle::DeltaBound b = oracle::delta_rule_bound(c.params, seq, ex.exact[0], error_model(k));
            const std::vector<Tensor> alone = run_kernel(k, c.params, seq);
            const std::vector<TensorView> got = delta_sequence_outputs(packed_views, cu, n);
            const std::string tag = "sequence " + std::to_string(n) + " (tokens " + std::to_string(cu[n]) + ".." +
                                    std::to_string(cu[n + 1]) + ")";
            for (const std::string& why : {within(alone[0], ex.exact[0], b.y, tag + " alone: y"),
                                           within(alone[1], ex.exact[1], b.state, tag + " alone: state"),
                                           within(got[0], ex.exact[0], b.y, tag + " packed: y"),
                                           within(got[1], ex.exact[1], b.state, tag + " packed: state")})
                if (!why.empty()) RC_FAIL(why);
        }
    };
}

// Finiteness for every gate the parameterization allows: g = g_min on every
// token (and channel), alpha = 1, and runs of both, with beta in {0, 1},
// chunks 64 and more tokens than a chunk: every output finite and within the
// bound.  (The scaled Q e^G / K e^-G form fails here: e^(64 |g_min|) is far
// past FP32's range.)
Testable finite_gates(const KernelInfo& k) {
    return [&k] {
        CaseSpec spec = delta_spec(k, 200);
        spec.dims[5] = *rc::gen::element<std::int64_t>(saturated_gates, saturated_gates, burst_gates, unit_gates);
        spec.dims[6] = *rc::gen::element<std::int64_t>(mixed_betas, one_betas, zero_betas, uniform_betas);
        spec.dims[0] = std::max<std::int64_t>(spec.dims[0], *rc::gen::element<std::int64_t>(65, 100, 130));
        spec.families = {Family::normal};
        spec.specials = 0;
        spec.params.set("chunk", 64);
        const Case c = build_case(spec);
        const CaseResult r = check_case(k, c.params, c.views());
        for (const Tensor& out : r.outputs)
            for (std::int64_t i = 0; i < out.numel(); ++i)
                if (!std::isfinite(out.value(i))) RC_FAIL("non-finite output " + hexfloat(out.value(i)) + " at " + std::to_string(i));
        if (!r.pass) RC_FAIL(r.message);
    };
}

}  // namespace

void add_gdn_properties(std::vector<PropertyDef>& v) {
    v.push_back({"chunk_invariance",
                 "chunks 16, 32 and 64 on the same case, each within the derived bound",
                 is_delta_op, [](const KernelInfo& k, const RunConfig&, Stats*) { return chunk_invariance(k); }, 4});
    v.back().needs = {"state"};
    v.push_back({"split_invariance",
                 "running [0, t) and then [t, T) from the carried fp32 state stays within the bound, for every t",
                 is_delta_op, [](const KernelInfo& k, const RunConfig&, Stats*) { return split_invariance(k); }, 5});
    v.push_back({"varlen_packing",
                 "2 to 4 sequences packed with cu_seqlens (empty ones included): each sequence's y and final state "
                 "within the bound of the sequence run alone",
                 is_delta_op, [](const KernelInfo& k, const RunConfig&, Stats*) { return varlen_packing(k); }, 4});
    v.back().needs = {"state"};
    v.push_back({"causality", "changing the tokens from t on leaves y of the earlier tokens bit-identical",
                 is_delta_op, [](const KernelInfo& k, const RunConfig&, Stats*) { return gdn_causality(k); }, 4});
    v.push_back({"finite_gates",
                 "saturated gates (g_min every token), alpha = 1 and runs of both, beta in {0, 1}, chunk 64: finite and "
                 "within the bound",
                 is_delta_op, [](const KernelInfo& k, const RunConfig&, Stats*) { return finite_gates(k); }, 4});
}

}  // namespace conform::props
