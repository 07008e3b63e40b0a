// The candidate executor (docs/model.md, "Kernel executor"): every step of
// the graph run by the built-in kernels of the contract's dtype, optionally
// with a mutant at one layer or with conventions other than the contract's.

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "impls/cpu/moe.hpp"
#include "impls/registry.hpp"
#include "model/dense_gemm.hpp"
#include "model/int8_steps.hpp"
#include "model/linear_block.hpp"
#include "model/layout.hpp"
#include "model/moe_steps.hpp"
#include "model/run.hpp"

namespace conform::model {
namespace {


// The values of t as floats (exact: every model format is at most fp32).
std::vector<float> floats(const TensorView& t) {
    const Values v = values_of(t);
    return {v.v.begin(), v.v.end()};
}

// The values of `v` (FP32 results) rounded once into format f.
Tensor stored(const std::vector<float>& v, std::vector<std::int64_t> shape, Format f) {
    Tensor t(f, std::move(shape));
    const TensorView out = t.view();  // dense
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        const std::uint64_t bits = encode(f, static_cast<double>(v[static_cast<std::size_t>(i)]));
        if (info(f).bytes == 2) static_cast<std::uint16_t*>(out.data)[i] = static_cast<std::uint16_t>(bits);
        else static_cast<std::uint32_t*>(out.data)[i] = static_cast<std::uint32_t>(bits);
    }
    return t;
}

// A tensor in format f: exact when f is wider, correctly rounded otherwise.
Tensor converted(const TensorView& t, Format f) {
    if (t.format == f) return copy_tensor(t);
    Tensor out(f, shape_of(t));
    for (std::int64_t i = 0; i < t.numel(); ++i) out.set_value(i, t.value(i));
    return out;
}

// y = x W^T (+ b): inputs widened to float (exact), Eigen's float GEMM for
// this CPU's ISA (FP32 accumulation; model/dense_gemm.hpp), bias added in FP32, one rounding to `out`.
Tensor matmul(const TensorView& x, const TensorView& w, const TensorView* b, Format out) {
    const std::int64_t T = x.shape[0], in = x.shape[1], n = w.shape[0];
    const std::vector<float> xf = floats(x), wf = floats(w);
    std::vector<float> y(static_cast<std::size_t>(T * n));
    gemm_xwt(xf.data(), wf.data(), y.data(), T, in, n);
    if (b) {
        const std::vector<float> bf = floats(*b);
        for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t o = 0; o < n; ++o) y[static_cast<std::size_t>(t * n + o)] += bf[static_cast<std::size_t>(o)];
    }
    return stored(y, {T, n}, out);
}

float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Stream i of X in FP32 ([T, C] stands for n copies of itself).
const float* stream(const std::vector<float>& x, const TensorView& t, std::int64_t i) {
    return t.rank == 3 ? &x[static_cast<std::size_t>(i * t.shape[1] * t.shape[2])] : x.data();
}

// add, mul, hc_mix, hc_update: FP32 arithmetic, one rounding to the point's format.
Tensor residual_step(const ModelContract& c, const Step& s, const TensorLookup& get) {
    std::vector<float> a = floats(get(s.inputs.at(0)).view());
    if (s.kind == StepKind::add || s.kind == StepKind::mul) {
        const std::vector<float> b = floats(get(s.inputs[1]).view());
        const float scale = static_cast<float>(c.residual_scale);
        const auto na = static_cast<std::int64_t>(a.size()), nb = static_cast<std::int64_t>(b.size());
        for (std::size_t i = 0; i < a.size(); ++i)
            a[i] = s.kind == StepKind::mul ? a[i] * b[static_cast<std::size_t>(mul_index(static_cast<std::int64_t>(i), na, nb))]
                                           : a[i] + scale * b[i];
        return stored(a, s.shape, s.format);
    }
    const TensorView x = get(s.inputs[0]).view();
    const std::int64_t n = c.hc_streams, m = c.tokens * c.width;
    std::vector<float> y(static_cast<std::size_t>(s.kind == StepKind::hc_mix ? m : n * m), 0.0f);
    if (s.kind == StepKind::hc_mix) {
        const std::vector<float> alpha = s.weights.empty() ? std::vector<float>{} : floats(get(s.weights[0]).view());
        for (std::int64_t i = 0; i < n; ++i) {
            const float ai = alpha.empty() ? 1.0f : sigmoidf(alpha[static_cast<std::size_t>(i)]);
            const float* xi = stream(a, x, i);
            for (std::int64_t e = 0; e < m; ++e) y[static_cast<std::size_t>(e)] += ai * xi[e];
        }
        if (alpha.empty())
            for (float& e : y) e /= static_cast<float>(n);
        return stored(y, s.shape, s.format);
    }
    if (s.kind == StepKind::gated_write) {  // X'_i = X_i + sigmoid(s_i) f
        const std::vector<float> f = floats(get(s.inputs[1]).view()), gate = floats(get(s.weights[0]).view());
        for (std::int64_t i = 0; i < n; ++i) {
            const float gi = sigmoidf(gate[static_cast<std::size_t>(i)]);
            const float* xi = stream(a, x, i);
            for (std::int64_t e = 0; e < m; ++e) y[static_cast<std::size_t>(i * m + e)] = xi[e] + gi * f[static_cast<std::size_t>(e)];
        }
        return stored(y, s.shape, s.format);
    }
    const std::vector<float> f = floats(get(s.inputs[1]).view()), b = floats(get(s.inputs[2]).view()),
                             gamma = floats(get(s.weights[0]).view());
    for (std::int64_t i = 0; i < n; ++i) {
        float* yi = &y[static_cast<std::size_t>(i * m)];
        for (std::int64_t j = 0; j < n; ++j) {
            const float bij = b[static_cast<std::size_t>(i * n + j)];
            const float* xj = stream(a, x, j);
            for (std::int64_t e = 0; e < m; ++e) yi[e] += bij * xj[e];
        }
        const float ci = 2.0f * sigmoidf(gamma[static_cast<std::size_t>(i)]);
        for (std::int64_t e = 0; e < m; ++e) yi[e] += ci * f[static_cast<std::size_t>(e)];
    }
    return stored(y, s.shape, s.format);
}

// A norm the registry has no kernel for (eps outside the square root, or
// x / rms rounded to the model format before the weight): FP32 sums and
// scale, one rounding of the result (two with the early cast).
Tensor norm_variant(const ModelContract& c, const OpCall& call, bool eps_outside, bool cast_before, Format out) {
    const TensorView x = call.in[0].view();
    const std::int64_t n = x.shape[x.rank - 1], rows = x.numel() / n;
    const std::vector<float> xf = floats(x), w = floats(call.in[1].view());
    const std::vector<float> b = call.in.size() > 2 ? floats(call.in[2].view()) : std::vector<float>{};
    const bool rms = call.op == "rms_norm", zc = call.params.get("zero_centered", 0) != 0;
    const float eps = static_cast<float>(call.params.at("eps"));
    std::vector<float> y(xf.size());
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = &xf[static_cast<std::size_t>(r * n)];
        float mu = 0, s = 0;
        if (!rms) {
            for (std::int64_t i = 0; i < n; ++i) mu += xr[i];
            mu /= static_cast<float>(n);
        }
        for (std::int64_t i = 0; i < n; ++i) s += (xr[i] - mu) * (xr[i] - mu);
        const float d = eps_outside ? std::sqrt(s / static_cast<float>(n)) + eps : std::sqrt(s / static_cast<float>(n) + eps);
        for (std::int64_t i = 0; i < n; ++i) {
            float v = (xr[i] - mu) / d;
            if (cast_before) v = static_cast<float>(decode(c.dtype, encode(c.dtype, v)));
            float yi = (rms && zc ? 1.0f + w[static_cast<std::size_t>(i)] : w[static_cast<std::size_t>(i)]) * v;
            if (!rms) yi += b[static_cast<std::size_t>(i)];
            y[static_cast<std::size_t>(r * n + i)] = yi;
        }
    }
    return stored(y, shape_of(x), out);
}

// The kernel of `op` taking format f (variant `prefer` when there is one), or nullptr.
const KernelInfo* kernel_for(const std::string& op, Format f, const std::string& prefer = "simd") {
    const KernelInfo* best = nullptr;
    for (const KernelInfo* k : builtin_registry().select(op, Role::kernel))
        if (k->in == f && (!best || k->variant == prefer)) best = k;
    return best;
}

// t in format f: itself when it is, else converted (exact or correctly rounded).
Tensor in_format(Tensor t, Format f) { return t.format() == f ? t : converted(t.view(), f); }

// fp32 when the two formats differ (neither holds the other in general).
Format wider(Format a, Format b) { return a == b ? a : Format::fp32; }

// A declared arithmetic the built-in kernels do not have (OpCall::unexpressed).
void refuse_unexpressed(const OpCall& call, const Step& s) {
    if (!call.unexpressed.empty())
        throw std::invalid_argument("run_kernels: no built-in kernel for " + call.op + " with " + call.unexpressed.front() +
                                    " (" + s.point + "); the divergence analysis judges such dumps");
}

struct Executor {
    const ModelContract& c;
    Conventions conv;
    const KernelInfo* mutant = nullptr;
    std::int64_t at = -1;

    Tensor registry_step(const Step& s, const TensorLookup& get) const {
        const OpCall call = op_call(c, s, get, conv);
        // A step stored in FP32 from narrower inputs (Qwen3-Next's silu gate,
        // l2_format fp32) runs the FP32 kernel; so does the delta rule on FP32
        // q, k or decay (exp_softplus), as Hugging Face's chunked delta rule:
        // nothing FP32 is rounded to dtype on the way in.
        const bool fp32_out = s.format == Format::fp32 &&
                              (s.kind == StepKind::silu || s.kind == StepKind::sigmoid || s.kind == StepKind::l2_head);
        const bool delta = s.kind == StepKind::gdn || s.kind == StepKind::kda;
        const bool fp32_in = delta && std::any_of(call.in.begin(), call.in.begin() + 4,
                                                  [](const Tensor& t) { return t.format() == Format::fp32; });
        Format f = fp32_out || fp32_in ? Format::fp32 : wider(call.in[0].format(), c.dtype);
        const Conventions sc = step_conventions(conv, s);
        const bool eps_out = sc.at("eps_placement") == "outside", cast = sc.at("norm_cast") == "before_weight";
        const bool own_norm = (s.kind == StepKind::norm || s.kind == StepKind::head_norm) && (eps_out || cast);
        const bool mutated = mutant && s.layer == at && mutant->op == call.op;
        if (own_norm && !mutated) {
            Tensor y = norm_variant(c, call, eps_out, cast, s.format);
            return point_from_op(call, s, y.view());
        }
        // act_arith = quotient: PyTorch's CPU silu and sigmoid, the FP32
        // quotients x / (1 + exp(-x)), 1 / (1 + exp(-x)) (glibc's expf,
        // within 1 ulp), stored once.
        if ((s.kind == StepKind::silu || s.kind == StepKind::sigmoid) && sc.at("act_arith") == "quotient" && !mutated) {
            std::vector<float> y = floats(call.in.at(0).view());
            const bool silu = s.kind == StepKind::silu;
            for (float& v : y) v = (silu ? v : 1.0f) / (1.0f + std::exp(-v));
            return stored(y, s.shape, s.format);
        }
        // glu_arith = separate (act(gate) stored, then the product rounded)
        // changes only the budget; no built-in kernel computes SwiGLU that way.
        if (s.kind == StepKind::glu && sc.at("glu_arith") == "separate")
            throw std::invalid_argument("run_kernels: no built-in kernel for " + call.op + " with glu_arith=separate (" +
                                        s.point + "); the divergence analysis judges such dumps");
        if (!own_norm) refuse_unexpressed(call, s);
        // A mutant runs in the model's dtype (its inputs rounded to it when
        // the step reads a wider residual).
        const std::string prefer = call.op == "mla" ? c.mla_form : "simd";  // MLA: the contract's form
        const KernelInfo* k = mutated ? mutant : kernel_for(call.op, f, prefer);
        if (!k) k = kernel_for(call.op, f = Format::fp32);  // gdn/kda have no fp16 kernel: exact widening to fp32
        if (!k) throw std::invalid_argument("run_kernels: no built-in kernel for " + call.op);
        if (k->in != f && k != mutant) throw std::logic_error("run_kernels: kernel format mismatch for " + call.op);
        std::vector<Tensor> in;
        std::vector<TensorView> views;
        for (const Tensor& t : call.in) in.push_back(converted(t.view(), k->in));
        for (const Tensor& t : in) views.push_back(t.view());
        const std::vector<Tensor> out = run_kernel(*k, call.params, views);
        Tensor y = s.kind == StepKind::router ? router_point(out.at(0).view(), out.at(1).view())
                                              : point_from_op(call, s, out.at(0).view());
        return in_format(std::move(y), s.format);
    }

    // The MoE steps by the CPU kernels' grouped experts (one GEMM pair per
    // expert on its gathered tokens, intermediates in the model format): the
    // moe step on the router point's selection and FP32 weights (latent_moe:
    // u), latent_out from the stored u.
    Tensor moe_step(const Step& s, const TensorLookup& get) const {
        const OpCall call = op_call(c, s, get, conv);
        refuse_unexpressed(call, s);
        std::vector<Tensor> in;
        std::vector<TensorView> views;
        for (const Tensor& t : call.in) in.push_back(t.numel() == 0 ? copy_tensor(t.view()) : converted(t.view(), c.dtype));
        for (const Tensor& t : in) views.push_back(t.view());
        Tensor y(c.dtype, s.shape);
        const bool latent = c.mlp == MlpKind::latent_moe;
        if (s.kind == StepKind::latent_out) {
            const Tensor none(Format::fp32, {0});
            cpu::moe_latent_out_call(KernelCall{call.params, views, {y.view(), none.view(), none.view()}}, true,
                                     get(s.inputs.at(1)).view());
        } else {
            auto [idx, w] = split_router_point(get(s.inputs.at(1)).view());
            Tensor kept(Format::fp32, idx.shape());
            for (std::int64_t i = 0; i < kept.numel(); ++i) kept.set_value(i, 1.0);
            cpu::moe_experts_call(KernelCall{call.params, views, {y.view(), idx.view(), w.view()}}, latent, true,
                                  cpu::ExpertForm::grouped, kept.view(), {},
                                  latent ? cpu::MoeStage::latent_u : cpu::MoeStage::all);
        }
        return in_format(std::move(y), s.format);
    }

    // The embedding lookup: rows copied bit for bit (ids are valid: check_run, synthetic_model).
    static Tensor embed(const Step& s, const TensorLookup& get) {
        const TensorView ids = get(s.inputs.at(0)).view(), table = get(s.weights.at(0)).view();
        const std::int64_t C = table.shape[1];
        Tensor y(table.format, s.shape);
        for (std::int64_t t = 0; t < ids.numel(); ++t)
            for (std::int64_t i = 0; i < C; ++i)
                y.set_bits(t * C + i, table.bits(static_cast<std::int64_t>(ids.value(t)) * C + i));
        return in_format(std::move(y), s.format);
    }

    Tensor step(const Step& s, const TensorLookup& get) const {
        switch (s.kind) {
            case StepKind::embed: return embed(s, get);
            case StepKind::moe:
            case StepKind::latent_out: return moe_step(s, get);
            case StepKind::matmul: {
                const Tensor* b = s.weights.size() > 1 ? &get(s.weights[1]) : nullptr;
                TensorView bv = b ? b->view() : TensorView{};
                // The logits rounded to the dtype under logits_format = dtype,
                // stored in the point's declared format (exact).
                const Format f = is_logits_product(s) ? logits_product_format(c, conv) : s.format;
                return in_format(matmul(get(s.inputs[0]).view(), get(matmul_weight(s, conv)).view(), b ? &bv : nullptr, f),
                                 s.format);
            }
            case StepKind::add:
            case StepKind::mul:
            case StepKind::hc_mix:
            case StepKind::hc_update:
            case StepKind::gated_write: return residual_step(c, s, get);
            case StepKind::short_conv: {
                const Tensor* cache = s.inputs.size() > 1 ? &get(s.inputs[1]) : nullptr;
                const TensorView cv = cache ? cache->view() : TensorView{};
                return run_short_conv(get(s.inputs[0]).view(), cache ? &cv : nullptr, get(s.weights[0]).view(),
                                      conv.at("conv_padding") == "same", s.format);
            }
            case StepKind::bounded_decay:
                return run_bounded_decay(get(s.inputs[0]).view(), get(s.weights[0]).view(), c.decay_min, s.format);
            case StepKind::softplus_decay:
                return run_softplus_decay(get(s.inputs[0]).view(), get(s.weights[0]).view(), get(s.weights[1]).view(), s.format);
            case StepKind::int8_matmul: {
                const bool mutated = mutant && s.layer == at && mutant->op == "int8_gemm";
                return run_int8_matmul(get(s.inputs[0]).view(), get(s.weights[0]).view(), s.format,
                                       mutated ? mutant : nullptr);
            }
            case StepKind::softcap: {
                if (conv.at("logit_softcap") == "skipped") return in_format(copy_tensor(get(s.inputs[0]).view()), s.format);
                if (conv.at("softcap_arith") != "dtype") return registry_step(s, get);
                // PyTorch's c tanh(x / c) in the model's format: each stage rounded to it.
                const auto r = [&](float v) { return static_cast<float>(decode(c.dtype, encode(c.dtype, v))); };
                const auto cap = static_cast<float>(c.logit_softcap);
                std::vector<float> y = floats(get(s.inputs[0]).view());
                for (float& v : y) v = r(r(std::tanh(r(v / cap))) * cap);
                return stored(y, s.shape, s.format);
            }
            default: return registry_step(s, get);
        }
    }
};

// The mutant kernel and a check that layer `at` has a step of its op.
const KernelInfo* find_mutant(const ModelContract& c, const std::vector<Step>& graph, const CandidateOptions& opt,
                              const Conventions& conv) {
    if (opt.mutant.empty()) return nullptr;
    const KernelInfo* k = builtin_registry().find(opt.mutant);
    if (!k || k->role != Role::mutant)
        throw std::invalid_argument("run_kernels: '" + opt.mutant + "' is not a registered mutant (see conform list)");
    if (k->in != c.dtype && k->op != "int8_gemm")  // INT8 products take codes in every model
        throw std::invalid_argument("run_kernels: " + opt.mutant + " takes " + name(k->in) + ", the model's dtype is " +
                                    name(c.dtype));
    if (opt.at < 0 || opt.at >= c.layers)
        throw std::invalid_argument("run_kernels: --at " + std::to_string(opt.at) + " is outside layers [0, " +
                                    std::to_string(c.layers) + ")");
    if (k->op == "moe" || k->op == "latent_moe")
        throw std::invalid_argument("run_kernels: " + opt.mutant + " is a whole-layer mutant; the model runs an MoE "
                                    "layer as its router step and the experts on the router point (docs/moe.md, \"In "
                                    "the model\"): substitute a moe_router mutant");
    for (const Step& s : graph)
        if (s.layer == opt.at && step_op(c, s, conv) == k->op) return k;
    throw std::invalid_argument("run_kernels: layer " + std::to_string(opt.at) + " has no " + k->op + " step for " +
                                opt.mutant);
}

}  // namespace

namespace {

// The stack on the kernels, each step's point from `get`; `after(i)` once
// step i is stored (progress, streaming release).
void run_steps(const ModelContract& c, const std::vector<Step>& graph, const CandidateOptions& opt, NamedTensors& points,
               const TensorLookup& get, const std::function<void(std::size_t)>& after) {
    ModelContract real = c;  // what the candidate really does
    for (const auto& [k, v] : opt.conventions) real.conventions[k] = v;
    validate(real);
    Executor ex{c, real.conventions, find_mutant(c, graph, opt, real.conventions), opt.at};
    for (std::size_t i = 0; i < graph.size(); ++i) {
        points[graph[i].point] = ex.step(graph[i], get);
        if (opt.emit) opt.emit(graph[i].point, points[graph[i].point]);
        after(i);
        const bool layer_done = i + 1 == graph.size() || graph[i + 1].layer != graph[i].layer;
        if (layer_done && opt.progress) opt.progress(graph[i].layer);
    }
}

}  // namespace

NamedTensors run_kernels(const ModelContract& c, const NamedTensors& weights, const Tensor& input,
                         const CandidateOptions& opt) {
    const std::vector<Step> graph = build_graph(c);
    NamedTensors points{{"input", input}};
    const TensorLookup get = [&](const std::string& n) -> const Tensor& {
        auto it = points.find(n);
        if (it != points.end()) return it->second;
        auto w = weights.find(n);
        if (w == weights.end()) throw std::invalid_argument("run_kernels: no point or weight named '" + n + "'");
        return w->second;
    };
    run_steps(c, graph, opt, points, get, [](std::size_t) {});
    return points;
}

void run_kernels_streamed(const ModelContract& c, const WeightSource& weight, const Tensor& input,
                          const CandidateOptions& opt) {
    const std::vector<Step> graph = build_graph(c);
    const std::map<std::string, std::size_t> last_use = last_uses(graph);
    NamedTensors points{{"input", input}}, held;
    const TensorLookup get = [&](const std::string& n) -> const Tensor& {
        if (auto it = points.find(n); it != points.end()) return it->second;
        if (auto it = held.find(n); it != held.end()) return it->second;
        return held.emplace(n, weight(n)).first->second;  // drawn again if released and read once more
    };
    const auto release = [&](NamedTensors& m, std::size_t i) {
        for (auto it = m.begin(); it != m.end();) {
            const auto last = last_use.find(it->first);
            it = (last == last_use.end() || last->second <= i) ? m.erase(it) : std::next(it);
        }
    };
    run_steps(c, graph, opt, points, get, [&](std::size_t i) {
        release(points, i);
        release(held, i);
    });
}

}  // namespace conform::model
