// The FP64 tier of the block-stack oracle (docs/model.md, "FP64 tier"): the
// oracle/ templates instantiated on double, matmuls through Eigen in double
// (model/dense_gemm.hpp).

#include <cmath>
#include <stdexcept>

#include "model/dense_gemm.hpp"
#include "model/int8_steps.hpp"
#include "model/linear_block.hpp"
#include "model/layout.hpp"
#include "model/moe_steps.hpp"
#include "model/run.hpp"
#include "oracle/activation.hpp"
#include "oracle/attention.hpp"
#include "oracle/gated.hpp"
#include "oracle/gdn.hpp"
#include "oracle/kda.hpp"
#include "oracle/mla.hpp"
#include "oracle/norm.hpp"
#include "oracle/rope.hpp"
#include "oracle/sinkhorn.hpp"

namespace conform::model {
namespace {

using std::size_t;

Values sized(std::vector<std::int64_t> shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return {std::move(shape), std::vector<double>(static_cast<size_t>(n))};
}

std::vector<double> doubles(const Tensor& t) { return values_of(t.view()).v; }

// y = x W^T (+ b): Eigen's double GEMM for this CPU (any summation order: the a-priori
// bound gamma_n |x| |W|^T holds for every order).
Values matmul(const Values& x, const Values& w, const Values* b) {
    const std::int64_t T = x.shape.at(0), in = x.shape.at(1), out = w.shape.at(0);
    if (w.shape.at(1) != in) throw std::invalid_argument("matmul: weight " + shape_string(w.shape) + " does not take " + shape_string(x.shape));
    Values y = sized({T, out});
    gemm_xwt(x.v.data(), w.v.data(), y.v.data(), T, in, out);
    if (b)
        for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t o = 0; o < out; ++o) y.v[static_cast<size_t>(t * out + o)] += b->v[static_cast<size_t>(o)];
    return y;
}

// ---- norms, with the conventions no registry parameter carries -----------------

struct NormVariant {
    bool eps_outside = false;
    bool cast_before_weight = false;  // x / rms rounded to `dtype` before the weight
    Format dtype = Format::fp32;
};

NormVariant norm_variant(const ModelContract& c, const Conventions& conv) {
    auto get = [&](const char* k) {
        auto it = conv.find(k);
        return it != conv.end() ? it->second : default_conventions().at(k);
    };
    return {get("eps_placement") == "outside", get("norm_cast") == "before_weight", c.dtype};
}

double cast(double v, Format f) { return decode(f, encode(f, v)); }

// One row of rms_norm / layer_norm.  The declared form is the oracle template
// itself; a variant recomputes the scale and the product in the same order.
std::vector<double> norm_row(bool rms, const std::vector<double>& x, const std::vector<double>& w,
                             const std::vector<double>& b, double eps, bool zc, const NormVariant& v) {
    if (!v.eps_outside && !v.cast_before_weight)
        return rms ? oracle::rms_norm<double>(x, w, eps, zc) : oracle::layer_norm<double>(x, w, b, eps);
    const double n = static_cast<double>(x.size());
    double mu = 0, s = 0;
    if (!rms) {
        for (double e : x) mu += e;
        mu /= n;
    }
    for (double e : x) s += (e - mu) * (e - mu);
    const double r = v.eps_outside ? std::sqrt(s / n) + eps : std::sqrt(s / n + eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double wi = rms && zc ? 1 + w[i] : w[i];
        if (v.cast_before_weight) y[i] = wi * cast((x[i] - mu) / r, v.dtype);
        else y[i] = wi * (x[i] - mu) / r;
        if (!rms) y[i] += b[i];
    }
    return y;
}

// Row ops on [rows, n] inputs (weights [n]).
Values eval_rows(const OpCall& call, const NormVariant& v) {
    Values x = values_of(call.in[0].view());
    const std::int64_t n = x.shape.back(), rows = x.numel() / n;
    const std::vector<double> w = call.in.size() > 1 ? doubles(call.in[1]) : std::vector<double>{};
    const std::vector<double> b = call.in.size() > 2 ? doubles(call.in[2]) : std::vector<double>{};
    const double eps = call.params.at("eps");
    for (std::int64_t r = 0; r < rows; ++r) {
        std::vector<double> row(x.v.begin() + r * n, x.v.begin() + (r + 1) * n);
        if (call.op == "l2_norm") row = oracle::l2_norm<double>(row, eps);
        else row = norm_row(call.op == "rms_norm", row, w, b, eps, call.params.get("zero_centered", 0) != 0, v);
        std::copy(row.begin(), row.end(), x.v.begin() + r * n);
    }
    return x;
}

// ---- elementwise -------------------------------------------------------------------

Values eval_elementwise(const OpCall& call) {
    Values y = values_of(call.in[0].view());
    const std::vector<double> up = call.in.size() > 1 ? doubles(call.in[1]) : std::vector<double>{};
    const double b1 = call.params.get("beta1", 4), b2 = call.params.get("beta2", 25);
    const bool tanh_gelu = std::find(call.unexpressed.begin(), call.unexpressed.end(), "gelu=tanh") != call.unexpressed.end();
    for (size_t i = 0; i < y.v.size(); ++i) {
        const double x = y.v[i];
        if (call.op == "sigmoid") y.v[i] = oracle::sigmoid(x);
        else if (call.op == "silu") y.v[i] = oracle::silu(x);
        else if (call.op == "softplus") y.v[i] = oracle::softplus(x);
        else if (call.op == "softcap") y.v[i] = oracle::softcap(x, call.params.at("beta"));
        else if (call.op == "gelu_erf") y.v[i] = oracle::gelu_erf(x);
        else if (call.op == "gelu_tanh") y.v[i] = oracle::gelu_tanh(x);
        else if (call.op == "swiglu") y.v[i] = oracle::swiglu(x, up[i]);
        else if (call.op == "situ_glu") y.v[i] = oracle::situ_glu(x, up[i], b1, b2);
        else if (call.op == "swiglu_clamp") y.v[i] = oracle::swiglu_clamp(x, up[i], call.params.at("limit"));
        else if (call.op == "geglu" && tanh_gelu) y.v[i] = oracle::geglu_tanh(x, up[i]);
        else if (call.op == "geglu") y.v[i] = oracle::geglu(x, up[i]);
        else throw std::logic_error("eval_elementwise: " + call.op);
    }
    return y;
}

// ---- structured ops --------------------------------------------------------------------

Values eval_rope(const OpCall& call) {
    Values x = values_of(call.in[0].view());  // [H, L, D]
    const std::int64_t H = x.shape[0], L = x.shape[1], D = x.shape[2];
    const oracle::RopeConfig cfg = oracle::rope_config("rope", call.params, D);
    const double offset = call.params.at("offset");
    for (std::int64_t l = 0; l < L; ++l) {
        const auto row = oracle::rope_table_row<double>(offset + static_cast<double>(l), cfg);
        for (std::int64_t h = 0; h < H; ++h) {
            auto first = x.v.begin() + (h * L + l) * D;
            const std::vector<double> y = oracle::rope_apply(std::vector<double>(first, first + D), row, cfg);
            std::copy(y.begin(), y.end(), first);
        }
    }
    return x;
}

Values eval_attention(const OpCall& call) {
    const Values q = values_of(call.in[0].view()), k = values_of(call.in[1].view()), v = values_of(call.in[2].view());
    const std::vector<double> mask = call.in.size() > 3 ? doubles(call.in[3]) : std::vector<double>{};
    const std::int64_t H = q.shape[0], Lq = q.shape[1], D = q.shape[2], G = k.shape[0], Lk = k.shape[1], Dv = v.shape[2];
    const bool causal = call.params.at("causal") != 0;
    const auto window = static_cast<std::int64_t>(call.params.get("window", 0));
    const double scale = call.params.get("scale", 0) > 0 ? call.params.get("scale", 0) : 1 / std::sqrt(static_cast<double>(D));
    Values o = sized({H, Lq, Dv});
    for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t g = oracle::kv_head_of(h, H, G);
        const std::vector<double> vh(v.v.begin() + g * Lk * Dv, v.v.begin() + (g + 1) * Lk * Dv);
        for (std::int64_t i = 0; i < Lq; ++i) {
            std::vector<double> s(static_cast<size_t>(Lk));
            for (std::int64_t j = 0; j < Lk; ++j) {
                const bool hidden = !oracle::key_visible(i, j, Lq, Lk, causal, window) ||
                                    (!mask.empty() && std::isinf(mask[static_cast<size_t>(i * Lk + j)]));
                s[static_cast<size_t>(j)] =
                    hidden ? -INFINITY
                           : oracle::capped_logit(&q.v[static_cast<size_t>((h * Lq + i) * D)],
                                                  &k.v[static_cast<size_t>((g * Lk + j) * D)], D, scale,
                                                  call.params.get("softcap", 0));
            }
            const auto st = oracle::attend_direct(s, vh, Dv);
            std::copy(st.o.begin(), st.o.end(), o.v.begin() + (h * Lq + i) * Dv);
        }
    }
    return o;
}

Values eval_delta(const OpCall& call) {
    oracle::DeltaProblem<double> p;
    const Values q = values_of(call.in[0].view());
    p.tokens = q.shape[0], p.heads = q.shape[1], p.d_k = q.shape[2];
    p.d_v = call.in[2].shape()[2];
    p.decay = call.op == "kda" ? oracle::DecayShape::per_channel : oracle::DecayShape::per_head;
    p.q = q.v, p.k = doubles(call.in[1]), p.v = doubles(call.in[2]), p.g = doubles(call.in[3]), p.beta = doubles(call.in[4]);
    if (call.in.size() > 5) p.s0 = doubles(call.in[5]);
    oracle::QkOptions<double> opt;
    opt.scale = 1 / std::sqrt(static_cast<double>(p.d_k));
    p = oracle::prepare_qk(p, opt);
    auto r = call.op == "kda" ? oracle::kda_recurrent(p) : oracle::gdn_recurrent(p);
    return {{p.tokens, p.heads, p.d_v}, std::move(r.y)};
}

// MLA by the op's own evaluator at 53 bits: MPFR rounding every operation
// to double precision is the FP64 tier's arithmetic (the oracle's
// templates are not instantiated on double for this op).
// A registry op's MPFR evaluator at 53 bits (MLA, the residual reads): each
// output correctly rounded to double.
Values eval_structured_53(const OpCall& call) {
    std::vector<TensorView> views;
    for (const Tensor& t : call.in) views.push_back(t.view());
    oracle::PrecisionScope scope(53);
    const oracle::StructuredEval eval = oracle::find_structured(call.op);
    if (!eval) throw std::logic_error("FP64 tier: no evaluator for " + call.op);
    const oracle::OpOutputs out = eval(call.params, views);
    Values o{out.shapes[0], {}};
    for (const auto& v : out.values[0]) o.v.push_back(oracle::to_double(v));
    return o;
}

Values eval_sinkhorn(const OpCall& call) {
    const Values l = values_of(call.in[0].view());
    oracle::Mat<double> m(l.shape[0], l.shape[1]);
    m.a = l.v;
    return {l.shape, oracle::sinkhorn(m, static_cast<int>(call.params.at("iters"))).a};
}

Values eval_op(const ModelContract& c, const OpCall& call, const Conventions& conv) {
    if (call.op == "rms_norm" || call.op == "layer_norm" || call.op == "l2_norm")
        return eval_rows(call, norm_variant(c, conv));
    if (call.op == "rope") return eval_rope(call);
    if (call.op == "attention") return eval_attention(call);
    if (call.op == "gdn" || call.op == "kda") return eval_delta(call);
    if (call.op == "sinkhorn") return eval_sinkhorn(call);
    if (call.op == "mla" || call.op == "block_attn_res" || call.op == "gated_residual") return eval_structured_53(call);
    return eval_elementwise(call);
}

// ---- ends ------------------------------------------------------------------------------------

// Rows of the embedding [V, C] by token id (exact copies); an id that is not
// an integer in [0, V) gives a NaN row (check_run refuses such dumps).
Values embed_rows(const Values& ids, const Values& table) {
    const std::int64_t V = table.shape.at(0), C = table.shape.at(1), T = ids.numel();
    Values y = sized({T, C});
    for (std::int64_t t = 0; t < T; ++t) {
        const double id = ids.v[static_cast<size_t>(t)];
        const bool ok = id >= 0 && id < static_cast<double>(V) && id == std::floor(id);
        for (std::int64_t i = 0; i < C; ++i)
            y.v[static_cast<size_t>(t * C + i)] = ok ? table.v[static_cast<size_t>(static_cast<std::int64_t>(id) * C + i)] : NAN;
    }
    return y;
}

// ---- residual streams ---------------------------------------------------------------------

// Stream i of X: X [n, T, C], or X [T, C] standing for n copies of itself.
const double* stream(const Values& x, std::int64_t i) {
    return x.shape.size() == 3 ? &x.v[static_cast<size_t>(i * x.shape[1] * x.shape[2])] : x.v.data();
}

Values hc_mix(const ModelContract& c, const Values& x, const Values* alpha) {
    const std::int64_t n = c.hc_streams, m = c.tokens * c.width;
    Values y = sized({c.tokens, c.width});
    for (std::int64_t i = 0; i < n; ++i) {
        const double a = alpha ? oracle::sigmoid(alpha->v[static_cast<size_t>(i)]) : 1.0;
        const double* xi = stream(x, i);
        for (std::int64_t e = 0; e < m; ++e) y.v[static_cast<size_t>(e)] += a * xi[e];
    }
    if (!alpha)  // the stream mean
        for (double& e : y.v) e /= static_cast<double>(n);
    return y;
}

// Gated Residual's write: X'_i = X_i + sigmoid(s_i) f.
Values gated_write(const ModelContract& c, const Values& x, const Values& f, const Values& s) {
    const std::int64_t n = c.hc_streams, m = c.tokens * c.width;
    Values y = sized({n, c.tokens, c.width});
    for (std::int64_t i = 0; i < n; ++i) {
        const double gi = oracle::sigmoid(s.v[static_cast<size_t>(i)]);
        const double* xi = stream(x, i);
        for (std::int64_t e = 0; e < m; ++e) y.v[static_cast<size_t>(i * m + e)] = xi[e] + gi * f.v[static_cast<size_t>(e)];
    }
    return y;
}

Values hc_update(const ModelContract& c, const Values& x, const Values& f, const Values& b, const Values& gamma) {
    const std::int64_t n = c.hc_streams, m = c.tokens * c.width;
    Values y = sized({n, c.tokens, c.width});
    for (std::int64_t i = 0; i < n; ++i) {
        double* yi = &y.v[static_cast<size_t>(i * m)];
        for (std::int64_t j = 0; j < n; ++j) {
            const double bij = b.v[static_cast<size_t>(i * n + j)];
            const double* xj = stream(x, j);
            for (std::int64_t e = 0; e < m; ++e) yi[e] += bij * xj[e];
        }
        const double ci = 2 * oracle::sigmoid(gamma.v[static_cast<size_t>(i)]);
        for (std::int64_t e = 0; e < m; ++e) yi[e] += ci * f.v[static_cast<size_t>(e)];
    }
    return y;
}

}  // namespace

Values eval_step(const ModelContract& c, const Step& s, const Lookup& get, const Conventions& all) {
    const Conventions conv = step_conventions(all, s);
    switch (s.kind) {
        case StepKind::matmul:
            return matmul(get(s.inputs[0]), get(matmul_weight(s, conv)), s.weights.size() > 1 ? &get(s.weights[1]) : nullptr);
        case StepKind::mul: {
            Values y = get(s.inputs[0]);
            const Values& b = get(s.inputs[1]);
            for (size_t i = 0; i < y.v.size(); ++i) y.v[i] *= b.v[static_cast<size_t>(mul_index(static_cast<std::int64_t>(i), y.numel(), b.numel()))];
            return y;
        }
        case StepKind::add: {
            Values y = get(s.inputs[0]);
            const Values& b = get(s.inputs[1]);
            for (size_t i = 0; i < y.v.size(); ++i) y.v[i] += c.residual_scale * b.v[i];
            return y;
        }
        case StepKind::hc_mix: return hc_mix(c, get(s.inputs[0]), s.weights.empty() ? nullptr : &get(s.weights[0]));
        case StepKind::hc_update:
            return hc_update(c, get(s.inputs[0]), get(s.inputs[1]), get(s.inputs[2]), get(s.weights[0]));
        case StepKind::embed: return embed_rows(get(s.inputs[0]), get(s.weights[0]));
        case StepKind::router: return eval_router_step(op_call(c, s, get, conv));
        case StepKind::moe: return eval_moe_step(op_call(c, s, get, conv), get(s.inputs[1]));
        case StepKind::latent_out: return eval_latent_out_step(op_call(c, s, get, conv), get(s.inputs[1]));
        case StepKind::short_conv:
            return eval_short_conv({get(s.inputs[0]), s.inputs.size() > 1 ? &get(s.inputs[1]) : nullptr, get(s.weights[0]),
                                    convention_value(conv, "conv_padding") == "same"});
        case StepKind::bounded_decay: return eval_bounded_decay({get(s.inputs[0]), get(s.weights[0]), c.decay_min});
        case StepKind::softplus_decay: return eval_softplus_decay({get(s.inputs[0]), get(s.weights[0]), get(s.weights[1])});
        case StepKind::int8_matmul: return eval_int8_matmul(get(s.inputs[0]), get(s.weights[0]));
        case StepKind::gated_write: return gated_write(c, get(s.inputs[0]), get(s.inputs[1]), get(s.weights[0]));
        case StepKind::softcap:
            if (convention_value(conv, "logit_softcap") == "skipped") return get(s.inputs[0]);
            break;
        default: break;
    }
    const OpCall call = op_call(c, s, get, conv);
    return point_from_op(call, s, eval_op(c, call, conv));
}

namespace {

Lookup lookup(const Named& points, const Named& weights) {
    return [&](const std::string& n) -> const Values& {
        auto it = points.find(n);
        if (it != points.end()) return it->second;
        auto w = weights.find(n);
        if (w == weights.end()) throw std::invalid_argument("model: no point or weight named '" + n + "'");
        return w->second;
    };
}

}  // namespace

Named run_oracle(const ModelContract& c, const Named& weights, const Values& input) {
    Named points{{"input", input}};
    const Lookup get = lookup(points, weights);
    for (const Step& s : build_graph(c)) points[s.point] = eval_step(c, s, get, c.conventions);
    return points;
}

Values rounded_into(Values v, Format f) {
    for (double& e : v.v) e = cast(e, f);
    return v;
}

Named run_oracle_rounded(const ModelContract& c, const Named& weights, const Values& input) {
    Named points{{"input", input}};
    const Lookup get = lookup(points, weights);
    for (const Step& s : build_graph(c)) points[s.point] = rounded_into(eval_step(c, s, get, c.conventions), s.format);
    return points;
}

namespace {

// hidden_states / residual of seed 003 at one consumer: the residual update
// `upd` (a + s b, or mHC's B X + c f) and the step `use` that reads it (a
// norm, or the next stream mix), computed together row by row.  Returns the
// updated residual and the consumer's point.
std::pair<Values, Values> fused_add_norm(const ModelContract& c, const Step& upd, const Step& use, const Lookup& get) {
    const Values &res = get(upd.inputs[0]), &hid = get(upd.inputs[1]);
    const std::int64_t n = c.width, rows = res.numel() / n;
    const std::vector<double>& w = get(use.weights[0]).v;
    const std::vector<double> b = use.weights.size() > 1 ? get(use.weights[1]).v : std::vector<double>{};
    const NormVariant v = norm_variant(c, c.conventions);
    Values sum = sized(res.shape), y = sized(res.shape);
    for (std::int64_t r = 0; r < rows; ++r) {
        std::vector<double> row(static_cast<size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) {
            const size_t e = static_cast<size_t>(r * n + i);
            row[static_cast<size_t>(i)] = sum.v[e] = res.v[e] + c.residual_scale * hid.v[e];
        }
        row = norm_row(c.norm == NormKind::rms_norm, row, w, b, c.eps, c.zero_centered, v);
        std::copy(row.begin(), row.end(), y.v.begin() + r * n);
    }
    return {std::move(sum), std::move(y)};
}

std::pair<Values, Values> fused_update_mix(const ModelContract& c, const Step& upd, const Step& use, const Lookup& get) {
    const Values &x = get(upd.inputs[0]), &f = get(upd.inputs[1]), &b = get(upd.inputs[2]), &gamma = get(upd.weights[0]);
    const std::int64_t n = c.hc_streams, m = c.tokens * c.width;
    std::vector<double> a(static_cast<size_t>(n), 1.0), cc(static_cast<size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
        if (!use.weights.empty()) a[static_cast<size_t>(i)] = oracle::sigmoid(get(use.weights[0]).v[static_cast<size_t>(i)]);
        cc[static_cast<size_t>(i)] = 2 * oracle::sigmoid(gamma.v[static_cast<size_t>(i)]);
    }
    Values streams = sized({n, c.tokens, c.width}), mix = sized({c.tokens, c.width});
    for (std::int64_t e = 0; e < m; ++e) {
        double acc_mix = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            double acc = 0;
            for (std::int64_t j = 0; j < n; ++j) acc += b.v[static_cast<size_t>(i * n + j)] * stream(x, j)[e];
            acc += cc[static_cast<size_t>(i)] * f.v[static_cast<size_t>(e)];
            streams.v[static_cast<size_t>(i * m + e)] = acc;
            acc_mix += a[static_cast<size_t>(i)] * acc;
        }
        mix.v[static_cast<size_t>(e)] = use.weights.empty() ? acc_mix / static_cast<double>(n) : acc_mix;
    }
    return {std::move(streams), std::move(mix)};
}

}  // namespace

// The fused add+norm formulation (seed 003): a residual update (add, or mHC's
// hc_update) is not computed where the graph places it; the branch output
// (hidden) and the residual travel separately to the step that consumes
// their sum -- the next norm (pre-norm: the next sub-layer's norm; post-norm:
// the norm right after the add) or the next stream mix (mHC) -- which forms
// the sum inside its own row loop and returns both (fused_add_norm,
// fused_update_mix).  An update nobody consumes (the stack's last) is
// flushed at the end.  Every element comes from the same operations in the
// same order as in run_oracle, so the two agree bit for bit.
Named run_oracle_fused(const ModelContract& c, const Named& weights, const Values& input) {
    Named points{{"input", input}};
    const Lookup get = lookup(points, weights);
    const Step* pending = nullptr;  // the deferred residual update
    const std::vector<Step> graph = build_graph(c);
    for (const Step& s : graph) {
        if (s.kind == StepKind::add || s.kind == StepKind::hc_update) {
            if (pending) points[pending->point] = eval_step(c, *pending, get, c.conventions);
            pending = &s;
            continue;
        }
        if (pending && !s.inputs.empty() && s.inputs[0] == pending->point &&
            (s.kind == StepKind::norm || s.kind == StepKind::hc_mix)) {
            auto [sum, y] = s.kind == StepKind::norm ? fused_add_norm(c, *pending, s, get) : fused_update_mix(c, *pending, s, get);
            points[pending->point] = std::move(sum);
            points[s.point] = std::move(y);
            pending = nullptr;
            continue;
        }
        if (pending) throw std::logic_error("run_oracle_fused: " + s.point + " comes between " + pending->point + " and its consumer");
        points[s.point] = eval_step(c, s, get, c.conventions);
    }
    if (pending) points[pending->point] = eval_step(c, *pending, get, c.conventions);
    return points;
}

}  // namespace conform::model
