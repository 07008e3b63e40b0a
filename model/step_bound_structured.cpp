// The structured steps' budgets (docs/diverge.md, "Structured steps"): the
// op's derived bound on exactly the views the op takes (model/layout.hpp
// op_call), with the FP64 tier's output as the exact values.
//
// The FP64 tier's own bound: the op bounds are first-order forward analyses
// whose every term is a gamma_k(u), an expm1 of a multiple of u, or a
// multiple of the exp/log/tanh error (4u) -- all superlinear in u -- plus
// subnormal terms.  At u = 2^-53 (glibc's exp, log, tanh, sin, cos within
// 4 ulps of double) each term is at most 2^-29 = u64 / u32 times its FP32
// value, so the FP64 tier's bound is 2^-29 times the FP32-arithmetic bound
// with the output stored in FP32 (whose half-ulp term becomes the double's
// own half ulp).  The cpu kernels' model for attention assumes the weakest
// tiling (one rescale per key), which covers the oracle's two-pass softmax;
// the delta rule's bound is evaluated with the oracle's own chunking.
#include "model/step_bound_structured.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/layout.hpp"
#include "oracle/bound.hpp"
#include "oracle/rope.hpp"

namespace conform::model {
namespace {

// The op's exact outputs as the bound functions take them: output 0 in the
// op's layout; the others (attention's lse, the delta rule's final state)
// enter only their own outputs' bounds, which the point does not have, so
// they are zeros of the right size.
std::vector<std::vector<double>> exact_outputs(const OpCall& call, const Values& ref) {
    const OpSpec* op = find_op(call.op);
    if (!op) throw std::invalid_argument("structured bound: unknown op " + call.op);
    std::vector<TensorView> views;
    for (const Tensor& t : call.in) views.push_back(t.view());
    std::vector<std::vector<double>> exact;
    exact.push_back(call.out_heads > 0 ? heads_major(ref, call.out_heads).v : ref.v);
    if (op->out_shapes || op->out_shapes_params) {
        const auto shapes = output_shapes(*op, views, call.params);
        for (std::size_t o = 1; o < shapes.size(); ++o) {
            std::int64_t n = 1;
            for (std::int64_t d : shapes[o]) n *= d;
            exact.emplace_back(static_cast<std::size_t>(n), 0.0);
        }
    }
    return exact;
}

std::vector<double> to_point(const OpCall& call, const Values& ref, std::vector<double> op_layout) {
    if (call.out_heads <= 0) return op_layout;
    Values v = heads_major(ref, call.out_heads);  // shape [H, T, D]
    v.v = std::move(op_layout);
    return tokens_major(v).v;
}

// t's values in format f; each must be representable there (a stored value
// of the model's format), else std::logic_error.
Tensor converted_exactly(const TensorView& t, Format f) {
    Tensor out(f, shape_of(t));
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        out.set_value(i, t.value(i));
        if (!(out.value(i) == t.value(i)) && !std::isnan(t.value(i)))
            throw std::logic_error("structured bound: an input value is not representable in " + std::string(name(f)));
    }
    return out;
}

// rope_arith = dtype, the rotation as Hugging Face's PyTorch code does it in
// the model's format f: y = x cos + rotate_half(x) sin with cos, sin computed
// in FP32 (FP32 inverse frequencies and angles, FP32 cos/sin) and rounded to
// f, each product and the sum rounded to f (in fp32 the default differs by
// its double angles only).  rope_arith = fp32_angles (DeepSeek-V2's complex
// product): the same FP32 angles and cos/sin, kept in FP32 (`table`), the
// rotation in FP32, one rounding into f.  oracle/rope.hpp's table and pair
// bounds with that model: the table error (the FP32 angle's, the FP32
// cos/sin's, half an ulp of the table's format) and gamma_2 of the
// rotation's arithmetic, then half an ulp of f where it is narrower.
// Pass-through dims must be copied (bound 0).
std::vector<double> rope_dtype_bound(const OpCall& call, const std::vector<double>& y, Format f, Format table) {
    const TensorView x = call.in.at(0).view();
    const std::int64_t H = x.shape[0], L = x.shape[1], D = x.shape[2];
    const oracle::RopeConfig cfg = oracle::rope_config("rope", call.params, D);
    const std::int64_t r = cfg.rotary_dim;
    const double b = cfg.base * cfg.ntk_scale;
    oracle::RopeTableModel model;
    model.angle_unit = unit_roundoff(Format::fp32);
    model.trig_abs_error = 2 * unit_roundoff(Format::fp32);
    model.table = model.arith = table;
    model.out = f;
    std::vector<double> bound(static_cast<std::size_t>(x.numel()), 0.0);
    for (std::int64_t l = 0; l < L; ++l) {
        const double m = call.params.get("offset", 0) + static_cast<double>(l);
        for (std::int64_t j = 0; j < r / 2; ++j) {
            // cos, sin (times the attention factor) and the angle as magnitudes.
            const double theta = oracle::rope_inv_freq(j, r, b), angle = oracle::rope_scaled_angle(cfg, m, j, theta);
            const double af = cfg.scaling.attention_factor, cv = af * std::cos(angle), sv = af * std::sin(angle);
            const oracle::TableError e = oracle::rope_entry_error(model, cfg, j, theta, angle, cv, sv);
            const auto [da, db] = oracle::rope_pair_dims(cfg.pairing, j, r);
            for (std::int64_t h = 0; h < H; ++h) {
                const auto ia = static_cast<std::size_t>((h * L + l) * D + da), ib = static_cast<std::size_t>((h * L + l) * D + db);
                const auto [ba, bb] = oracle::rope_pair_bound(model, e, x.value(ia), x.value(ib), cv, sv, y[ia], y[ib]);
                bound[ia] = ba, bound[ib] = bb;
            }
        }
    }
    return bound;
}

}  // namespace

StepBound structured_step_bound(const ModelContract& c, const Step& s, const Lookup& get, const Values& ref,
                                const Conventions& conv, Format out) {
    const OpCall call = op_call(c, s, get, conv);
    const oracle::StructuredBoundFn fn = oracle::find_structured_bound(call.op);
    if (!fn) throw std::invalid_argument("no derived bound for op " + call.op + " (step " + s.point + ")");
    const auto exact = exact_outputs(call, ref);
    const std::vector<Format> fp32(exact.size(), Format::fp32);
    // The bound with the op's inputs in format f (exact: they are stored
    // values of the model's format).  MLA's bound reads its intermediates'
    // storage format from its input's: the kernel stores them in the model's
    // format, the FP64 tier in none (FP32 is the analysis it is 2^-29 of).
    const auto bound_with = [&](Format f) {
        std::vector<Tensor> held;
        std::vector<TensorView> views;
        for (const Tensor& t : call.in) held.push_back(call.op == "mla" ? converted_exactly(t.view(), f) : copy_tensor(t.view()));
        for (const Tensor& t : held) views.push_back(t.view());
        return fn(call.params, views, exact, Format::fp32, fp32).at(0);
    };
    std::vector<double> budget = bound_with(c.dtype);
    std::vector<double> orc = call.op == "mla" ? bound_with(Format::fp32) : budget;
    for (double& b : orc) b *= kFp64TierScale;
    // The FP32-output bound plus one rounding into `out`: covers a kernel of
    // the model's format (one rounding into it) and an FP32 kernel whose
    // result the executor converts (gdn/kda have no fp16 kernel).
    const auto& u = call.unexpressed;
    if (call.op == "rope" && std::find(u.begin(), u.end(), "rope_arith=dtype") != u.end())
        budget = rope_dtype_bound(call, exact[0], c.dtype, c.dtype);  // its last rounding is the output's
    else if (call.op == "rope" && std::find(u.begin(), u.end(), "rope_arith=fp32_angles") != u.end())
        budget = rope_dtype_bound(call, exact[0], c.dtype, Format::fp32);  // FP32 tables and rotation, then the output
    else if (info(out).precision < info(Format::fp32).precision)
        for (std::size_t i = 0; i < budget.size(); ++i) budget[i] += 0.5 * ulp_at(out, std::fabs(exact[0][i]) + budget[i]);
    return {to_point(call, ref, std::move(budget)), to_point(call, ref, std::move(orc))};
}

}  // namespace conform::model
