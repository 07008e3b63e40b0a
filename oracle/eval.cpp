#include "oracle/eval.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "numerics/round.hpp"
#include "oracle/activation.hpp"
#include "oracle/gated.hpp"
#include "oracle/norm.hpp"
#include "oracle/softmax.hpp"
#include "oracle/structured.hpp"

namespace conform::oracle {
namespace {

Real unary(const std::string& op, const Params& p, const Real& x) {
    if (op == "sigmoid") return sigmoid(x);
    if (op == "silu") return silu(x);
    if (op == "gelu_erf") return gelu_erf(x);
    if (op == "gelu_tanh") return gelu_tanh(x);
    if (op == "softplus") return softplus(x);
    if (op == "softcap") return softcap(x, p.get("beta", 30));
    throw std::invalid_argument("oracle: unknown unary op '" + op + "'");
}

bool eps_outside(const Params& p) { return p.get("convention.eps_placement", 0) != 0; }

Real gated(const std::string& op, const Params& p, const Real& g, const Real& u) {
    if (op == "swiglu") return swiglu(g, u);
    if (op == "geglu") return p.get("convention.gelu", 0) != 0 ? geglu_tanh(g, u) : geglu(g, u);
    if (op == "situ_glu") return situ_glu(g, u, p.get("beta1", 4), p.get("beta2", 25));
    if (op == "swiglu_clamp") return swiglu_clamp(g, u, p.get("limit", 10));
    throw std::invalid_argument("oracle: unknown gated op '" + op + "'");
}

std::vector<Real> row_of(const TensorView& t, std::int64_t r, std::int64_t n, bool broadcast) {
    std::vector<Real> v(n);
    const std::int64_t base = broadcast ? 0 : r * n;
    for (std::int64_t i = 0; i < n; ++i) v[i] = from_double(t.value(base + i));
    return v;
}

// An element still undecided at kMaxBits is an exact midpoint at that
// precision.  A value that is itself never a midpoint then lies just beside
// it on a side its formula fixes: swiglu's and geglu's gate factor act(g)
// for g > 0 is g (1 - delta) with delta below 2^-4096 (g beyond ~2840, or
// e^-g below MPFR's exponent range), so act(g) u lies just toward zero
// from the midpoint g u (swiglu_clamp likewise, with its capped gate).
bool approaches_toward_zero(const OpSpec& op, const Params& p, const std::vector<TensorView>& in, std::int64_t i) {
    if (op.name != "swiglu" && op.name != "geglu" && op.name != "swiglu_clamp") return false;
    double g = in[0].value(i);
    if (op.name == "swiglu_clamp") g = std::min(g, p.get("limit", 10));
    return g > 0 && std::isfinite(g);
}

struct Pending {
    std::vector<std::int64_t> idx;
};

}  // namespace

std::optional<std::uint64_t> ziv_accept(const Real& a, const Real& b, unsigned bits, Format out) {
    const bool special_a = isnan(a) || isinf(a), special_b = isnan(b) || isinf(b);
    if (special_a || special_b) {
        if (special_a == special_b && isnan(a) == isnan(b) && (isnan(a) || a == b))
            return round_to_format(b.backend().data(), out);
        return std::nullopt;
    }
    // err = 2|a - b| + 2^(4 - 2P) |b|: the P-level error bounds the 2P one by a
    // wide margin; the second term covers a == b.
    Real slack = abs(b);  // |b| 2^(4 - 2P), scaled in MPFR: 2^-4092 is no double
    mpfr_mul_2si(slack.backend().data(), slack.backend().data(), 4 - 2 * static_cast<long>(bits), MPFR_RNDU);
    Real err = 2 * abs(a - b) + slack;
    return round_if_determined(b.backend().data(), err.backend().data(), out);
}

void check_shapes(const OpSpec& op, const std::vector<TensorView>& in) {
    if (in.size() != op.inputs.size())
        throw std::invalid_argument(op.name + ": expected " + std::to_string(op.inputs.size()) + " inputs, got " +
                                    std::to_string(in.size()));
    const TensorView& x = in[0];
    for (std::size_t k = 1; k < in.size(); ++k) {
        const bool ok = op.kind == OpKind::row ? (in[k].rank == 1 && in[k].shape[0] == x.cols())
                                                    : (in[k].numel() == x.numel() && in[k].cols() == x.cols());
        if (!ok)
            throw std::invalid_argument(op.name + ": input '" + op.inputs[k] + "' has a shape that does not match '" +
                                        op.inputs[0] + "'");
    }
}

std::vector<Real> eval_row(const OpSpec& op, const Params& p, const std::vector<std::vector<Real>>& in) {
    const auto& x = in[0];
    std::vector<Real> y(x.size());
    switch (op.kind) {
        case OpKind::unary:
            for (std::size_t i = 0; i < x.size(); ++i) y[i] = unary(op.name, p, x[i]);
            return y;
        case OpKind::gated:
            for (std::size_t i = 0; i < x.size(); ++i) y[i] = gated(op.name, p, x[i], in[1][i]);
            return y;
        case OpKind::structured:  // evaluated whole by evaluate_structured, never row by row
            break;
        case OpKind::row:
            if (op.name == "rms_norm")
                return rms_norm(x, in[1], p.get("eps", 1e-6), p.get("zero_centered", 0) != 0, eps_outside(p));
            if (op.name == "layer_norm") return layer_norm(x, in[1], in[2], p.get("eps", 1e-5), eps_outside(p));
            if (op.name == "l2_norm") return l2_norm(x, p.get("eps", 1e-6), eps_outside(p), p.get("convention.l2_form", 0) != 0);
            if (op.name == "softmax") return softmax_row(x).y;
            break;
    }
    throw std::invalid_argument("oracle: unknown op '" + op.name + "'");
}

Result evaluate(const OpSpec& op, const Params& p, const std::vector<TensorView>& inputs, Format out) {
    if (op.kind == OpKind::structured) {  // the first output; evaluate_structured has them all
        StructuredResult s = evaluate_structured(op.name, p, inputs, {out});
        Result r;
        r.rounded = std::move(s.rounded.at(0));
        r.exact = std::move(s.exact.at(0));
        r.max_bits = s.max_bits;
        r.recomputed = s.recomputed;
        return r;
    }
    check_shapes(op, inputs);
    const TensorView& x = inputs[0];
    const std::int64_t n = x.cols(), rows = x.rows();
    Result res;
    std::vector<std::int64_t> shape(x.shape.begin(), x.shape.begin() + x.rank);
    res.rounded = Tensor(out, shape);
    res.exact.assign(x.numel(), 0.0);

    for (std::int64_t r = 0; r < rows; ++r) {
        std::vector<std::int64_t> pending(n);
        for (std::int64_t i = 0; i < n; ++i) pending[i] = i;
        // A row op needs its whole row at each precision; an elementwise op
        // re-evaluates only the elements still pending.
        auto eval_at = [&](unsigned bits) {
            PrecisionScope scope(bits);
            std::vector<std::vector<Real>> in;
            for (std::size_t k = 0; k < inputs.size(); ++k)
                in.push_back(row_of(inputs[k], r, n, op.kind == OpKind::row && k > 0));
            if (op.kind == OpKind::row || static_cast<std::int64_t>(pending.size()) == n) return eval_row(op, p, in);
            std::vector<std::vector<Real>> sub(in.size());
            for (std::size_t k = 0; k < in.size(); ++k)
                for (std::int64_t i : pending) sub[k].push_back(in[k][i]);
            const std::vector<Real> part = eval_row(op, p, sub);
            std::vector<Real> full(n);
            for (std::size_t j = 0; j < pending.size(); ++j) full[pending[j]] = part[j];
            return full;
        };
        // Elementwise ops start at half the default precision: their formulas
        // are cancellation-free (oracle/activation.hpp), so 64 and 128 bits
        // decide nearly every rounding, at a fraction of the cost of 128 and
        // 256 (MPFR's erf and exp grow faster than linearly in the bits).
        unsigned bits = op.kind == OpKind::row ? kDefaultBits : kDefaultBits / 2;
        std::vector<Real> lo = eval_at(bits), hi = eval_at(2 * bits);
        while (true) {
            PrecisionScope scope(4 * bits);
            std::vector<std::int64_t> still;
            for (std::int64_t i : pending) {
                const std::optional<std::uint64_t> bitsout = ziv_accept(lo[i], hi[i], bits, out);
                const Real& b = hi[i];
                if (bitsout) {
                    res.rounded.set_bits(r * n + i, *bitsout);
                    res.exact[r * n + i] = to_double(b);
                } else {
                    still.push_back(i);
                }
            }
            res.max_bits = std::max(res.max_bits, 2 * bits);
            if (still.empty()) break;
            if (2 * bits >= kMaxBits) {
                for (std::int64_t i : still) {
                    Real v = hi[i];
                    if (approaches_toward_zero(op, p, inputs, r * n + i)) {
                        const Real zero(0);
                        mpfr_nexttoward(v.backend().data(), zero.backend().data());
                    }
                    res.rounded.set_bits(r * n + i, round_to_format(v.backend().data(), out));
                    res.exact[r * n + i] = to_double(v);
                }
                break;
            }
            res.recomputed += static_cast<std::int64_t>(still.size());
            pending = std::move(still);
            bits *= 2;
            lo = std::move(hi);
            hi = eval_at(2 * bits);
        }
    }
    return res;
}

Real eval_scalar(const std::string& name, const Params& p, const std::vector<double>& args, unsigned bits) {
    const OpSpec* op = find_op(name);
    if (!op) throw std::invalid_argument("oracle: unknown op '" + name + "'");
    PrecisionScope scope(bits);
    std::vector<std::vector<Real>> in;
    for (double a : args) in.push_back({from_double(a)});
    return eval_row(*op, p, in)[0];
}

std::uint64_t round_scalar(const std::string& name, const Params& p, const std::vector<double>& args, Format out) {
    const OpSpec* op = find_op(name);
    if (!op) throw std::invalid_argument("oracle: unknown op '" + name + "'");
    std::vector<Tensor> ts;
    std::vector<TensorView> vs;
    for (double a : args) {
        ts.emplace_back(Format::fp64, std::vector<std::int64_t>{1});
        ts.back().set_value(0, a);
    }
    for (auto& t : ts) vs.push_back(t.view());
    return evaluate(*op, p, vs, out).rounded.bits(0);
}

}  // namespace conform::oracle
