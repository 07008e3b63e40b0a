// Deliberately wrong gated delta-rule kernels (DESIGN.md "Mutation testing",
// docs/gdn.md "Mutants"): the recurrence or the chunkwise form in double with
// exactly one bug each, so that a mutant can only be killed by its bug
// (double arithmetic is far inside the FP32-state budget).  Outputs: y in the
// mutant's format, the final state in fp32.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "impls/cpu/gdn.hpp"
#include "numerics/delta_varlen.hpp"

namespace conform {
namespace {

enum class Bug {
    // recurrent form
    initial_state_dropped,  // S_0 ignored: every run starts from zero
    state_transposed,       // initial and final state read and written as [H, d_v, d_k]
    beta_twice,             // the delta update scaled by beta^2
    beta_missing,           // the delta update with beta = 1
    decay_after_update,     // S_t = D (S + beta k (v - S^T k)^T): the decay after the update, not before
    l2_eps_outside,         // x / (sqrt(|x|^2) + eps) instead of x / sqrt(|x|^2 + eps)
    bf16_state,             // the state rounded to bf16 after every token
    // chunkwise form (chunk = param chunk)
    clamp_cumulative_decay,   // the seed sample: ratios gamma_r / max(gamma_i, 1e-6) of the chunk's cumulative decay
    split_exp,                // exp(G_r) * exp(-G_i) in fp32 (the scaled Q/K form): overflows past its envelope
    final_state_not_decayed,  // the last chunk's state update without D(end <- start)
    padded_chunk_decay,       // a partial last chunk reads its end-of-chunk log-decay from the zero-padded buffer
    mask_after_exp,           // dense [c, c] products: exp(G_r - G_i) for every pair, then times the causal 0/1 mask
    bf16_block_merge,         // chunks past 64 tokens: the UT inverse's blocks below the diagonal merged and stored in bf16
};

bool chunkwise_bug(Bug b) { return b >= Bug::clamp_cumulative_decay; }

struct Problem {
    std::int64_t tokens, heads, dk, dv, gw;
    std::vector<double> q, k, v, g, beta, s0;  // s0: [H, d_k, d_v] (zeros when absent)
};

void normalize(std::vector<double>& x, std::int64_t dk, double eps, Bug bug) {
    for (std::size_t row = 0; row < x.size(); row += static_cast<std::size_t>(dk)) {
        double s = 0;
        for (std::int64_t i = 0; i < dk; ++i) s += x[row + i] * x[row + i];
        const double d = bug == Bug::l2_eps_outside ? std::sqrt(s) + eps : std::sqrt(s + eps);
        for (std::int64_t i = 0; i < dk; ++i) x[row + i] /= d;
    }
}

Problem read(const KernelCall& c, bool per_channel, Bug bug) {
    const TensorView& q = c.in.at(0);
    Problem p{q.shape[0], q.shape[1], q.shape[2], c.in.at(2).shape[2], per_channel ? q.shape[2] : 1,
              decoded_values(q),        decoded_values(c.in.at(1)), decoded_values(c.in.at(2)),
              decoded_values(c.in.at(3)), decoded_values(c.in.at(4)), {}};
    p.s0.assign(static_cast<std::size_t>(p.heads * p.dk * p.dv), 0.0);
    if (delta_input_given(c.in, kDeltaInitialState) && bug != Bug::initial_state_dropped) {
        const std::vector<double> s = decoded_values(c.in[kDeltaInitialState]);
        for (std::int64_t h = 0; h < p.heads; ++h)
            for (std::int64_t i = 0; i < p.dk; ++i)
                for (std::int64_t m = 0; m < p.dv; ++m)
                    p.s0[(h * p.dk + i) * p.dv + m] =
                        s[bug == Bug::state_transposed ? (h * p.dv + m) * p.dk + i : (h * p.dk + i) * p.dv + m];
    }
    if (c.params.get("l2norm", 0) != 0) {
        normalize(p.q, p.dk, c.params.get("l2_eps", 1e-6), bug);
        normalize(p.k, p.dk, c.params.get("l2_eps", 1e-6), bug);
    }
    const double scale = c.params.get("scale", 1);
    const double s = scale != 0 ? scale : 1 / std::sqrt(static_cast<double>(p.dk));
    for (double& x : p.q) x *= s;
    return p;
}

double bf16(double x) { return decode(Format::bf16, encode(Format::bf16, x)); }

// Head h's state as [d_k][d_v].
using State = std::vector<std::vector<double>>;

State head_state(const Problem& p, std::int64_t h) {
    State s(p.dk, std::vector<double>(p.dv));
    for (std::int64_t i = 0; i < p.dk; ++i)
        for (std::int64_t m = 0; m < p.dv; ++m) s[i][m] = p.s0[(h * p.dk + i) * p.dv + m];
    return s;
}

double gate(const Problem& p, std::int64_t t, std::int64_t h, std::int64_t i) {
    return p.g[(t * p.heads + h) * p.gw + (p.gw == 1 ? 0 : i)];
}

// One token of the recurrence on S (with the recurrent bugs).
void token_step(const Problem& p, Bug bug, std::int64_t t, std::int64_t h, State& s, double* y) {
    const std::int64_t th = t * p.heads + h;
    const double* k = &p.k[th * p.dk];
    const double* v = &p.v[th * p.dv];
    const double beta = bug == Bug::beta_missing ? 1 : bug == Bug::beta_twice ? p.beta[th] * p.beta[th] : p.beta[th];
    auto decay = [&] {
        for (std::int64_t i = 0; i < p.dk; ++i)
            for (double& x : s[i]) x *= std::exp(gate(p, t, h, i));
    };
    if (bug != Bug::decay_after_update) decay();
    for (std::int64_t m = 0; m < p.dv; ++m) {
        double e = v[m];
        for (std::int64_t i = 0; i < p.dk; ++i) e -= s[i][m] * k[i];
        for (std::int64_t i = 0; i < p.dk; ++i) s[i][m] += beta * k[i] * e;
    }
    if (bug == Bug::decay_after_update) decay();
    if (bug == Bug::bf16_state)
        for (auto& row : s)
            for (double& x : row) x = bf16(x);
    for (std::int64_t m = 0; m < p.dv; ++m) {
        y[m] = 0;
        for (std::int64_t i = 0; i < p.dk; ++i) y[m] += s[i][m] * p.q[th * p.dk + i];
    }
}

// Decay factor of channel i from the chunk-local cumulative log-decays G
// (G[0] = 0 before the chunk, G[r + 1] after its token r): the tokens
// (from, to] of the chunk, from = -1 for the chunk start.
double factor(const std::vector<double>& G, std::int64_t to, std::int64_t from, Bug bug) {
    const double hi = G[to + 1], lo = G[from + 1];
    if (bug == Bug::clamp_cumulative_decay) return std::exp(hi) / (from < 0 ? 1.0 : std::max(std::exp(lo), 1e-6));
    if (bug == Bug::split_exp) return static_cast<double>(std::exp(static_cast<float>(hi)) * std::exp(static_cast<float>(-lo)));
    return std::exp(hi - lo);
}

// The native block of a chunk solve: a kernel built around 64-token chunks
// solves blocks of 64 exactly and merges longer chunks from them.
constexpr std::int64_t kSolveBlock = 64;

// (I + N) V~ = b for strictly lower N (entries n(r, j)) through the
// blocked inverse X = (I + N)^-1: diagonal blocks of kSolveBlock tokens by
// forward substitution in double, the blocks below them merged as
// X_IJ = -X_II sum_{J <= K < I} N_IK X_KJ and stored in bf16 (a tensor-core
// kernel keeping its inverse in the inputs' format), then V~ = X b.
template <class Entry>
std::vector<std::vector<double>> blocked_solve(std::int64_t c, std::int64_t dv, Entry n,
                                               const std::vector<std::vector<double>>& b) {
    std::vector<std::vector<double>> X(c, std::vector<double>(c, 0.0));
    auto block_of = [](std::int64_t r) { return r / kSolveBlock; };
    for (std::int64_t col = 0; col < c; ++col)  // diagonal blocks: columns of the block's own inverse
        for (std::int64_t r = col; r < c && block_of(r) == block_of(col); ++r) {
            double x = r == col ? 1.0 : 0.0;
            for (std::int64_t j = col; j < r; ++j) x -= n(r, j) * X[j][col];
            X[r][col] = x;
        }
    for (std::int64_t I = 1; I * kSolveBlock < c; ++I)
        for (std::int64_t J = 0; J < I; ++J) {
            const std::int64_t r0 = I * kSolveBlock, r1 = std::min(c, r0 + kSolveBlock), c0 = J * kSolveBlock,
                               c1 = c0 + kSolveBlock;
            std::vector<std::vector<double>> T(r1 - r0, std::vector<double>(kSolveBlock, 0.0));  // sum_K N_IK X_KJ
            for (std::int64_t r = r0; r < r1; ++r)
                for (std::int64_t k = c0; k < r0; ++k)
                    for (std::int64_t col = c0; col < c1; ++col) T[r - r0][col - c0] += n(r, k) * X[k][col];
            for (std::int64_t r = r0; r < r1; ++r)
                for (std::int64_t col = c0; col < c1; ++col) {
                    double x = 0;
                    for (std::int64_t k = r0; k <= r; ++k) x -= X[r][k] * T[k - r0][col - c0];
                    X[r][col] = bf16(x);
                }
        }
    std::vector<std::vector<double>> v(c, std::vector<double>(dv, 0.0));
    for (std::int64_t r = 0; r < c; ++r)
        for (std::int64_t m = 0; m < dv; ++m)
            for (std::int64_t j = 0; j <= r; ++j) v[r][m] += X[r][j] * b[j][m];
    return v;
}

// One chunk [t0, t0 + c) of head h in the kernels' form (R = V - K_s S,
// forward substitution, O = Q_s S + A V~, S <- d S + K_e^T V~), the decay
// factors by `factor`; `pad` > c marks a partial last chunk of a chunk size pad.
void chunk_step(const Problem& p, Bug bug, std::int64_t h, std::int64_t t0, std::int64_t c, std::int64_t pad,
                bool last, State& s, std::vector<double>& y) {
    const std::int64_t dk = p.dk, dv = p.dv;
    std::vector<std::vector<double>> G(dk, std::vector<double>(static_cast<std::size_t>(pad + 1), 0.0));
    for (std::int64_t i = 0; i < dk; ++i)
        for (std::int64_t r = 0; r < c; ++r) G[i][r + 1] = G[i][r] + gate(p, t0 + r, h, i);
    // The chunk end: token c - 1, or the padded chunk's last slot (G = 0 there).
    const std::int64_t end = bug == Bug::padded_chunk_decay ? pad - 1 : c - 1;
    auto row = [&](const std::vector<double>& x, std::int64_t r, std::int64_t w) { return &x[((t0 + r) * p.heads + h) * w]; };
    // The decay bugs read the chunk's prefix sums G; every other form sums the
    // gates of (from, to] itself, so that a reset (g = -inf) before `from`
    // does not turn exp(G_to - G_from) into exp(-inf + inf) = NaN.
    const bool prefix_decay = bug == Bug::clamp_cumulative_decay || bug == Bug::split_exp ||
                              bug == Bug::padded_chunk_decay || bug == Bug::mask_after_exp;
    auto f = [&](std::int64_t i, std::int64_t to, std::int64_t from) {
        if (prefix_decay) return factor(G[i], to, from, bug);
        double sum = 0;
        for (std::int64_t t = from + 1; t <= to; ++t) sum += gate(p, t0 + t, h, i);
        return std::exp(sum);
    };
    // Pairs (r, j) the products visit: j < r (L) and j <= r (A), or all of
    // them with the mask applied after the exp (0 * inf and 0 * NaN leak).
    const bool dense = bug == Bug::mask_after_exp;
    auto mask = [&](bool visible) { return dense ? (visible ? 1.0 : 0.0) : 1.0; };
    auto decayed_dot = [&](const double* x, std::int64_t r, std::int64_t j) {
        double acc = 0;
        for (std::int64_t i = 0; i < dk; ++i) acc += x[i] * f(i, r, j) * row(p.k, j, dk)[i];
        return acc;
    };
    // L (strictly lower, or dense) and the right-hand side b = B (V - K_s S).
    std::vector<std::vector<double>> L(c, std::vector<double>(c, 0.0)), b(c, std::vector<double>(dv, 0.0));
    for (std::int64_t r = 0; r < c; ++r) {
        const double* kr = row(p.k, r, dk);
        const double beta = p.beta[(t0 + r) * p.heads + h];
        for (std::int64_t j = 0; j < c; ++j) L[r][j] = j < r || dense ? decayed_dot(kr, r, j) * mask(j < r) : 0.0;
        for (std::int64_t m = 0; m < dv; ++m) {
            double x = row(p.v, r, dv)[m];
            for (std::int64_t i = 0; i < dk; ++i) x -= kr[i] * f(i, r, -1) * s[i][m];
            b[r][m] = beta * x;
        }
    }
    auto beta_of = [&](std::int64_t r) { return p.beta[(t0 + r) * p.heads + h]; };
    auto n = [&](std::int64_t r, std::int64_t j) { return beta_of(r) * L[r][j]; };  // B L
    std::vector<std::vector<double>> vt(c, std::vector<double>(dv, 0.0));
    if (bug == Bug::bf16_block_merge && c > kSolveBlock) {
        vt = blocked_solve(c, dv, n, b);
    } else {  // (I + B L) V~ = b by forward substitution
        for (std::int64_t r = 0; r < c; ++r)
            for (std::int64_t m = 0; m < dv; ++m) {
                double x = b[r][m];
                for (std::int64_t j = 0; j < (dense ? c : r); ++j) x -= n(r, j) * vt[j][m];
                vt[r][m] = x;
            }
    }
    for (std::int64_t r = 0; r < c; ++r) {
        const double* qr = row(p.q, r, dk);
        for (std::int64_t m = 0; m < dv; ++m) {
            double o = 0;
            for (std::int64_t i = 0; i < dk; ++i) o += qr[i] * f(i, r, -1) * s[i][m];
            for (std::int64_t j = 0; j < (dense ? c : r + 1); ++j) o += (j <= r || dense ? decayed_dot(qr, r, j) * mask(j <= r) : 0.0) * vt[j][m];
            y[((t0 + r) * p.heads + h) * dv + m] = o;
        }
    }
    const bool skip_decay = bug == Bug::final_state_not_decayed && last;
    State next(dk, std::vector<double>(dv, 0.0));
    for (std::int64_t i = 0; i < dk; ++i)
        for (std::int64_t m = 0; m < dv; ++m) {
            double x = skip_decay ? s[i][m] : f(i, end, -1) * s[i][m];
            for (std::int64_t r = 0; r < c; ++r) x += f(i, end, r) * row(p.k, r, dk)[i] * vt[r][m];
            next[i][m] = x;
        }
    s = std::move(next);
}

void run_mutant(Format f, bool per_channel, Bug bug, const KernelCall& call) {
    const Problem p = read(call, per_channel, bug);
    std::vector<double> y(static_cast<std::size_t>(p.tokens * p.heads * p.dv), 0.0);
    const auto chunk = static_cast<std::int64_t>(call.params.get("chunk", 64));
    for (std::int64_t h = 0; h < p.heads; ++h) {
        State s = head_state(p, h);
        if (chunkwise_bug(bug)) {
            for (std::int64_t t0 = 0; t0 < p.tokens; t0 += chunk) {
                const std::int64_t c = std::min(chunk, p.tokens - t0);
                chunk_step(p, bug, h, t0, c, chunk, t0 + c == p.tokens, s, y);
            }
        } else {
            for (std::int64_t t = 0; t < p.tokens; ++t) token_step(p, bug, t, h, s, &y[(t * p.heads + h) * p.dv]);
        }
        for (std::int64_t i = 0; i < p.dk; ++i)
            for (std::int64_t m = 0; m < p.dv; ++m) {
                const std::int64_t at =
                    bug == Bug::state_transposed ? (h * p.dv + m) * p.dk + i : (h * p.dk + i) * p.dv + m;
                call.out.at(1).set_bits(at, encode(call.out[1].format, s[i][m]));
            }
    }
    for (std::size_t i = 0; i < y.size(); ++i) call.out.at(0).set_bits(static_cast<std::int64_t>(i), encode(f, y[i]));
}

void add(std::vector<KernelInfo>& v, const char* op, const char* bug_name, Bug bug, Format f, const char* bug_class,
         const char* what) {
    const bool per_channel = std::string(op) == "kda";
    KernelInfo k = mutant_info(op, bug_name, f, Format::fp64, bug_class, what,
                               [f, per_channel, bug](const KernelCall& c) {
                                   delta_per_sequence(c, [&](const KernelCall& s) { run_mutant(f, per_channel, bug, s); });
                               });
    k.out_formats = {f, Format::fp32};
    v.push_back(std::move(k));
}

// Packed sequences sharing state: the correct scalar chunkwise kernel, but
// each sequence after the first starts from the previous one's final state
// instead of its own initial state (a varlen kernel that forgets to reset).
void add_shared_state(std::vector<KernelInfo>& v, const std::string& op, Format f) {
    KernelFn base;
    for (const KernelInfo& k : cpu_gdn_kernels())
        if (k.op == op && k.variant == "scalar" && k.in == f) base = k.fn;
    KernelInfo k = mutant_info(op, "varlen_shared_state", f, Format::fp32, "3 state hand-off",
                               "packed sequences (cu_seqlens) share the state: sequence n starts from the final state "
                               "of sequence n - 1 instead of its own initial state",
                               [base](const KernelCall& c) { delta_per_sequence(c, base, true); });
    k.out_formats = {f, Format::fp32};
    v.push_back(std::move(k));
}

}  // namespace

std::vector<KernelInfo> gdn_mutants() {
    using F = Format;
    std::vector<KernelInfo> v;
    const char* exp_range = "1 exp-range overflow";
    const char* hand_off = "3 state hand-off";
    add(v, "gdn", "clamp_cumulative_decay", Bug::clamp_cumulative_decay, F::fp32, exp_range,
        "the seed's chunk sample: decays as gamma_r / max(gamma_i, 1e-6) of the cumulative decay: a different "
        "function once gamma < 1e-6 (alpha = 0.8 over 62 tokens)");
    add(v, "kda", "clamp_cumulative_decay", Bug::clamp_cumulative_decay, F::bf16, exp_range,
        "per-channel gamma_r / max(gamma_i, 1e-6) within the chunk");
    add(v, "gdn", "split_exp", Bug::split_exp, F::fp32, exp_range,
        "exp(G_r) * exp(-G_i) in fp32 instead of exp(G_r - G_i): Inf/NaN once the chunk's cumulative log-decay "
        "passes -88.7 (alpha = 1e-12: 4 tokens)");
    add(v, "kda", "split_exp", Bug::split_exp, F::fp32, exp_range,
        "the scaled (Q e^G)(K e^-G)^T form in fp32: finite only for chunk * |g_min| < 88.7 (17 tokens at g = -5)");
    add(v, "gdn", "initial_state_dropped", Bug::initial_state_dropped, F::bf16, hand_off,
        "the initial state is ignored (every run starts from zero)");
    add(v, "kda", "initial_state_dropped", Bug::initial_state_dropped, F::fp32, hand_off,
        "the initial state is ignored (every run starts from zero)");
    add(v, "gdn", "final_state_not_decayed", Bug::final_state_not_decayed, F::fp32, hand_off,
        "the last chunk's state update omits D(end <- start): S' = S + K_e^T V~");
    add(v, "kda", "final_state_not_decayed", Bug::final_state_not_decayed, F::bf16, hand_off,
        "the last chunk's state update omits the per-channel D(end <- start)");
    add(v, "gdn", "padded_chunk_decay", Bug::padded_chunk_decay, F::bf16, hand_off,
        "a partial last chunk takes its end decay from slot chunk - 1 of a zero-padded cumulative buffer: the state "
        "is not decayed and K_e grows by exp(-G_r)");
    add(v, "kda", "padded_chunk_decay", Bug::padded_chunk_decay, F::fp32, hand_off,
        "the partial last chunk's per-channel end decay read from the zero-padded buffer");
    add(v, "gdn", "mask_after_exp", Bug::mask_after_exp, F::fp32, "7 empty-row semantics",
        "dense chunk products with exp(G_r - G_i) for every pair, masked by multiplying with the causal 0/1 mask: "
        "exp of the positive differences overflows (0 * inf = NaN), and a NaN in a later token reaches earlier rows "
        "(0 * NaN)");
    add(v, "gdn", "state_transposed", Bug::state_transposed, F::bf16, "5 layout transposition",
        "initial and final state as [H, d_v, d_k] instead of [H, d_k, d_v]");
    add(v, "kda", "state_transposed", Bug::state_transposed, F::fp32, "5 layout transposition",
        "initial and final state as [H, d_v, d_k] instead of [H, d_k, d_v]");
    add(v, "gdn", "beta_twice", Bug::beta_twice, F::fp32, "9 scale/offset convention",
        "the delta update scaled by beta^2 (beta applied to k and again to the error)");
    add(v, "kda", "beta_missing", Bug::beta_missing, F::bf16, "12 silently ignored parameter",
        "beta ignored: every token overwrites its key direction (beta = 1)");
    add(v, "gdn", "decay_after_update", Bug::decay_after_update, F::fp32, "3 state hand-off",
        "S_t = alpha_t (S + beta k (v - S^T k)^T): the decay after the delta update (the prediction error reads the "
        "undecayed state)");
    add(v, "kda", "decay_after_update", Bug::decay_after_update, F::bf16, "3 state hand-off",
        "Diag(alpha_t) applied after the delta update instead of before");
    add(v, "gdn", "l2_eps_outside", Bug::l2_eps_outside, F::bf16, "8 epsilon placement",
        "L2 normalization x / (sqrt(|x|^2) + eps) instead of x / sqrt(|x|^2 + eps)");
    add(v, "gdn", "bf16_state", Bug::bf16_state, F::fp32, "6 low-precision accumulation/storage",
        "the recurrent state rounded to bf16 after every token");
    add(v, "kda", "bf16_state", Bug::bf16_state, F::bf16, "6 low-precision accumulation/storage",
        "the recurrent state rounded to bf16 after every token");
    add(v, "gdn", "bf16_block_merge", Bug::bf16_block_merge, F::fp32, "15 ill-conditioned solves",
        "the chunk's UT system solved in blocks of 64 tokens (exact), the inverse's blocks below the diagonal merged "
        "as -X_II N_IJ X_JJ and stored in bf16: exact for chunks of 64, ~2^-9 of the coupled blocks past it");
    add(v, "kda", "bf16_block_merge", Bug::bf16_block_merge, F::bf16, "15 ill-conditioned solves",
        "the per-channel-decayed UT system solved in blocks of 64 tokens, the blocks below the diagonal merged and "
        "stored in bf16");
    add_shared_state(v, "gdn", F::fp32);
    add_shared_state(v, "kda", F::bf16);
    return v;
}

void register_mutants_gdn(Registry& r) {
    for (KernelInfo& k : gdn_mutants()) r.add(std::move(k));
}

}  // namespace conform
