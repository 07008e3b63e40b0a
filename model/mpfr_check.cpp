#include "model/mpfr_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "model/layout.hpp"
#include "model/linear_block.hpp"
#include "oracle/attention.hpp"
#include "oracle/decay.hpp"
#include "oracle/eval.hpp"
#include "oracle/structured.hpp"

namespace conform::model {

double CrossCheck::max() const {
    double m = 0;
    for (const auto& [k, v] : max_rel) m = std::max(m, v);
    return m;
}

std::string CrossCheck::summary() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "max %.2g over %lld elements (", max(), static_cast<long long>(elements));
    std::string s = buf;
    bool first = true;
    for (const auto& [k, v] : max_rel) {
        std::snprintf(buf, sizeof buf, "%s%s %.2g", first ? "" : ", ", k.c_str(), v);
        s += buf;
        first = false;
    }
    return s + ")";
}

namespace {

using oracle::Real;
using oracle::from_double;

// MPFR values of some elements of a point, by flat index.
using Sample = std::vector<std::pair<std::int64_t, Real>>;

struct Checker {
    const ModelContract& c;
    const Lookup& get;
    std::mt19937_64 rng;
    int n;

    std::int64_t pick(std::int64_t bound) { return static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(bound)); }
    Real at(const std::string& name, std::int64_t i) { return from_double(get(name).v[static_cast<std::size_t>(i)]); }

    Sample matmul(const Step& s) {
        const Values &x = get(s.inputs[0]), &w = get(s.weights[0]);
        const std::int64_t in = x.shape[1], out = w.shape[0];
        Sample r;
        for (int k = 0; k < n; ++k) {
            const std::int64_t t = pick(x.shape[0]), o = pick(out);
            Real acc = s.weights.size() > 1 ? at(s.weights[1], o) : Real(0);
            for (std::int64_t i = 0; i < in; ++i) acc += at(s.inputs[0], t * in + i) * at(s.weights[0], o * in + i);
            r.push_back({t * out + o, acc});
        }
        return r;
    }

    // Stream i of X at element e ([T, C] inputs stand for n copies).
    Real stream(const std::string& x, std::int64_t i, std::int64_t e) {
        return at(x, get(x).shape.size() == 3 ? i * c.tokens * c.width + e : e);
    }

    Sample elementwise(const Step& s) {
        const std::int64_t m = c.tokens * c.width, streams = c.hc_streams;
        Sample r;
        for (int k = 0; k < n; ++k) {
            if (s.kind == StepKind::add || s.kind == StepKind::mul) {
                const std::int64_t e = pick(get(s.point).numel());
                const Real a = at(s.inputs[0], e);
                const Real b = at(s.inputs[1], s.kind == StepKind::mul ? mul_index(e, get(s.point).numel(), get(s.inputs[1]).numel()) : e);
                r.push_back({e, s.kind == StepKind::mul ? Real(a * b) : Real(a + from_double(c.residual_scale) * b)});
            } else if (s.kind == StepKind::hc_mix) {
                const std::int64_t e = pick(m);
                Real acc(0);
                for (std::int64_t i = 0; i < streams; ++i)
                    acc += (s.weights.empty() ? Real(1) : oracle::sigmoid(at(s.weights[0], i))) * stream(s.inputs[0], i, e);
                r.push_back({e, s.weights.empty() ? Real(acc / streams) : acc});
            } else if (s.kind == StepKind::gated_write) {
                const std::int64_t i = pick(streams), e = pick(m);
                r.push_back({i * m + e, stream(s.inputs[0], i, e) + oracle::sigmoid(at(s.weights[0], i)) * at(s.inputs[1], e)});
            } else {  // hc_update
                const std::int64_t i = pick(streams), e = pick(m);
                Real acc = 2 * oracle::sigmoid(at(s.weights[0], i)) * at(s.inputs[1], e);
                for (std::int64_t j = 0; j < streams; ++j) acc += at(s.inputs[2], i * streams + j) * stream(s.inputs[0], j, e);
                r.push_back({i * m + e, acc});
            }
        }
        return r;
    }

    // Row, unary and gated registry ops: op-layout indices equal point indices.
    Sample rows(const OpCall& call) {
        const OpSpec& op = *find_op(call.op);
        const TensorView x = call.in[0].view();
        const std::int64_t cols = x.shape[x.rank - 1];
        Sample r;
        for (int k = 0; k < n; ++k) {
            std::vector<std::vector<Real>> in;
            if (op.kind == OpKind::row) {
                const std::int64_t row = pick(x.numel() / cols);
                for (std::size_t t = 0; t < call.in.size(); ++t) {
                    const TensorView v = call.in[t].view();
                    std::vector<Real> vals;
                    for (std::int64_t i = 0; i < cols; ++i) vals.push_back(from_double(v.value(t == 0 ? row * cols + i : i)));
                    in.push_back(std::move(vals));
                }
                const std::vector<Real> y = oracle::eval_row(op, call.params, in);
                for (std::int64_t i = 0; i < cols; ++i) r.push_back({row * cols + i, y[static_cast<std::size_t>(i)]});
            } else {
                const std::int64_t e = pick(x.numel());
                for (const Tensor& t : call.in) in.push_back({from_double(t.value(e))});
                const Real y = oracle::eval_row(op, call.params, in)[0];
                r.push_back({e, call.negate ? Real(-y) : y});
            }
        }
        return r;
    }

    // Head h of a [T, H, ...] tensor as [T, 1, ...].
    static Tensor head_of(const TensorView& t, std::int64_t h) {
        std::vector<std::int64_t> shape = shape_of(t);
        const std::int64_t H = shape[1], inner = t.numel() / (shape[0] * H);
        shape[1] = 1;
        Tensor out(t.format, shape);
        for (std::int64_t i = 0; i < out.numel(); ++i)
            out.set_bits(i, t.bits((i / inner) * H * inner + h * inner + i % inner));
        return out;
    }

    // One head of a structured op; point index of output element (h, l, d).
    Sample structured(const OpCall& call) {
        const oracle::StructuredEval eval = oracle::find_structured(call.op);
        std::vector<Tensor> held;
        std::int64_t h = 0, H = 1;
        if (call.op == "rope" || call.op == "attention") {
            H = call.in[0].shape()[0], h = pick(H);
            held.push_back(copy_tensor(call.in[0].view().slice_first(h, h + 1)));
            if (call.op == "attention") {
                const std::int64_t g = oracle::kv_head_of(h, H, call.in[1].shape()[0]);
                for (int i : {1, 2}) held.push_back(copy_tensor(call.in[i].view().slice_first(g, g + 1)));
                if (call.in.size() > 3) held.push_back(copy_tensor(call.in[3].view()));
            }
        } else if (call.op == "gdn" || call.op == "kda") {
            H = call.in[0].shape()[1], h = pick(H);
            for (std::size_t i = 0; i < 5; ++i) held.push_back(head_of(call.in[i].view(), h));
            if (call.in.size() > 5) held.push_back(copy_tensor(call.in[5].view().slice_first(h, h + 1)));
        } else {
            for (const Tensor& t : call.in) held.push_back(copy_tensor(t.view()));
        }
        std::vector<TensorView> views;
        for (const Tensor& t : held) views.push_back(t.view());
        const oracle::OpOutputs out = eval(call.params, views);
        const auto& shape = out.shapes[0];
        Sample r;
        for (std::size_t i = 0; i < out.values[0].size(); ++i) {
            const auto e = static_cast<std::int64_t>(i);
            std::int64_t point = e;
            if (call.op == "mla") {  // [H, L, D] of every head -> [L, H * D]
                const std::int64_t Hm = shape[0], L = shape[1], D = shape[2], hh = e / (L * D), l = e / D % L, d = e % D;
                point = l * Hm * D + hh * D + d;
            } else if (call.out_heads) {  // [1, L, D] of head h -> [L, H * D]
                const std::int64_t L = shape[1], D = shape[2], l = e / D % L, d = e % D;
                point = l * H * D + h * D + d;
            } else if (call.op == "gdn" || call.op == "kda") {  // [T, 1, dv] -> [T, H * dv]
                const std::int64_t dv = shape[2], t = e / dv, d = e % dv;
                point = t * H * dv + h * dv + d;
            }
            r.push_back({point, out.values[0][i]});
        }
        return r;
    }

    // A [1, n] fp64 tensor of row t of a [T, 2k] router point: its ids (half
    // 0) or weights (half 1).
    static Tensor router_half(const Values& rp, std::int64_t t, std::int64_t k, int half) {
        Tensor h(Format::fp64, {1, k});
        for (std::int64_t j = 0; j < k; ++j) h.set_value(j, rp.v[static_cast<std::size_t>(t * 2 * k + half * k + j)]);
        return h;
    }

    // MoE steps on sampled tokens by the registry oracle, staged with the
    // FP64 tier's router point (its selection taken where the budget admits
    // it, the MPFR weights of that selection): moe_router on the token's row
    // (ids and weights), the layer op (its y row: moe's mlp_out, and
    // latent_moe's, which the FP64 tier computed through its u point).
    Sample moe(const Step& s) {
        const bool router = s.kind == StepKind::router;
        // latent_moe's u is no op's output: its check is latent_out's.
        if (s.kind == StepKind::moe && c.mlp == MlpKind::latent_moe) return {};
        const OpCall call = op_call(c, s, get, c.conventions);
        const std::int64_t K = c.top_k, C = c.width;
        const Values& rp = get(router ? s.point : "layers." + std::to_string(s.layer) + ".router");
        Sample r;
        for (int k = 0; k < n; ++k) {
            const std::int64_t t = pick(c.tokens);
            std::vector<Tensor> held{copy_tensor(call.in[0].view().slice_first(t, t + 1))};
            for (std::size_t i = 1; i < call.in.size(); ++i) held.push_back(copy_tensor(call.in[i].view()));
            if (!router) held.push_back(to_tensor(Values{{1, C}, {get(s.point).v.begin() + t * C, get(s.point).v.begin() + (t + 1) * C}}));
            held.push_back(router_half(rp, t, K, 0));
            held.push_back(router_half(rp, t, K, 1));
            if (router) {
                held.push_back(to_tensor(Values{{1, K}, std::vector<double>(static_cast<std::size_t>(K), 1.0)}));  // kept
                held.push_back(to_tensor(Values{{1}, {0.0}}));  // loss
            }
            std::vector<TensorView> views;
            for (const Tensor& h : held) views.push_back(h.view());
            const oracle::OpOutputs out = oracle::find_structured(call.op)(call.params, views);
            if (router)
                for (std::int64_t j = 0; j < K; ++j) {
                    r.push_back({t * 2 * K + j, out.values[0][static_cast<std::size_t>(j)]});
                    r.push_back({t * 2 * K + K + j, out.values[1][static_cast<std::size_t>(j)]});
                }
            else
                for (std::int64_t i = 0; i < C; ++i) r.push_back({t * C + i, out.values[0][static_cast<std::size_t>(i)]});
        }
        return r;
    }

    // The linear block's model-code steps on sampled elements.
    Sample linear_extra(const Step& s) {
        const Values& x = get(s.inputs[0]);
        const std::int64_t F = x.shape.back(), T = x.numel() / F;
        Sample r;
        for (int k = 0; k < n; ++k) {
            const std::int64_t e = pick(x.numel());
            if (s.kind == StepKind::bounded_decay) {
                const std::int64_t H = get(s.weights[0]).numel();
                const Real y = exp(at(s.weights[0], (e % F) / (F / H))) * at(s.inputs[0], e);
                r.push_back({e, from_double(c.decay_min) * oracle::sigmoid(y)});
                continue;
            }
            if (s.kind == StepKind::softplus_decay) {
                const std::int64_t H = get(s.weights[0]).numel(), h = (e % F) / (F / H);
                r.push_back({e, oracle::softplus_log_decay(Real(at(s.inputs[0], e) + at(s.weights[1], h)), at(s.weights[0], h))});
                continue;
            }
            const std::int64_t K = get(s.weights[0]).shape.at(1);
            const bool same = convention_value(c.conventions, "conv_padding") == "same";
            Real acc(0);
            for (std::int64_t j = 0; j < K; ++j)
                if (const auto tap = conv_tap(T, F, K, e / F, e % F, j, same, s.inputs.size() > 1))
                    acc += at(s.weights[0], (e % F) * K + j) * at(s.inputs[tap->from_cache ? 1 : 0], tap->index);
            r.push_back({e, acc});
        }
        return r;
    }

    Sample step(const Step& s) {
        switch (s.kind) {
            case StepKind::short_conv:
            case StepKind::bounded_decay:
            case StepKind::softplus_decay: return linear_extra(s);
            case StepKind::router:
            case StepKind::moe:
            case StepKind::latent_out: return moe(s);
            case StepKind::embed: return {};  // exact copies: nothing to recompute
            case StepKind::int8_matmul: return {};  // the FP64 tier's flow is exact already (codes, integers, reals)
            case StepKind::matmul: return matmul(s);
            case StepKind::add:
            case StepKind::mul:
            case StepKind::hc_mix:
            case StepKind::hc_update:
            case StepKind::gated_write: return elementwise(s);
            default: break;
        }
        const OpCall call = op_call(c, s, get, c.conventions);
        if (!call.unexpressed.empty()) return {};  // a convention variant: no MPFR form
        return find_op(call.op)->kind == OpKind::structured ? structured(call) : rows(call);
    }
};

}  // namespace

CrossCheck cross_check_mpfr(const ModelContract& c, const Lookup& get, int n_samples, std::uint64_t seed,
                            const std::vector<Step>& steps) {
    oracle::PrecisionScope scope(oracle::kDefaultBits);
    Checker ck{c, get, std::mt19937_64(seed), n_samples};
    CrossCheck out;
    for (const Step& s : steps) {
        const Sample sm = ck.step(s);
        if (sm.empty()) continue;
        const Values& fp = get(s.point);
        Real worst(0), scale(0);
        for (const auto& [i, ref] : sm) {
            worst = std::max(worst, Real(oracle::abs(from_double(fp.v[static_cast<std::size_t>(i)]) - ref)));
            scale = std::max(scale, Real(oracle::abs(ref)));
        }
        const double rel = scale > 0 ? oracle::to_double(worst / scale) : oracle::to_double(worst);
        double& m = out.max_rel[name(s.kind)];
        m = std::max(m, rel);
        out.elements += static_cast<std::int64_t>(sm.size());
    }
    return out;
}

CrossCheck cross_check_mpfr(const ModelContract& c, const Named& weights, const Named& points, int n_samples,
                            std::uint64_t seed, const std::vector<Step>* steps) {
    const Lookup get = [&](const std::string& n) -> const Values& {
        auto it = points.find(n);
        return it != points.end() ? it->second : weights.at(n);
    };
    return cross_check_mpfr(c, get, n_samples, seed, steps ? *steps : build_graph(c));
}

void CrossCheck::add(const CrossCheck& o) {
    for (const auto& [k, v] : o.max_rel) max_rel[k] = std::max(max_rel[k], v);
    elements += o.elements;
}

}  // namespace conform::model
