// Metamorphic properties of softmax (docs/softmax.md).
#include <cmath>

#include "numerics/ulp.hpp"
#include "properties/common.hpp"

namespace conform::props {
namespace {

// x quantized to multiples of q = ulp(2|c|) and clamped to [-|c|, |c|], so
// that x + c is exact in the format (|x + c| <= 2|c|, a multiple of q).
Tensor quantize_for_shift(const Tensor& x, double c) {
    const double q = ulp_at(x.format(), 2 * std::fabs(c));
    Tensor out(x.format(), x.shape());
    for (std::int64_t i = 0; i < x.numel(); ++i) {
        const double v = x.value(i);
        out.set_value(i, std::isfinite(v) ? q * std::nearbyint(std::fmin(std::fmax(v, -std::fabs(c)), std::fabs(c)) / q)
                                          : v);
    }
    return out;
}

// softmax(x + c) = softmax(x) exactly, so the oracle's rounded outputs for x
// and x + c must be the same bits (the oracle checking itself) and the kernel
// must meet its bound on x + c, including c = +-1e4 where a kernel that does
// not subtract the row max overflows (or underflows every term).
Testable shift_invariance(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        GenOptions opt;
        opt.max_n = std::min(cfg.max_n, 1024);
        const Case base = build_case(in_domain(*gen_spec(*find_op(k.op), k.in, opt)));
        const double c = *rc::gen::element(1e4, -1e4, 1000.0, -1000.0, 100.0, 64.0, -0.5);
        const Tensor x = quantize_for_shift(base.inputs[0], c);
        Tensor shifted(x.format(), x.shape());
        for (std::int64_t i = 0; i < x.numel(); ++i) shifted.set_value(i, x.value(i) + c);
        const CaseResult plain = check_case(k, base.params, {x.view()});
        const CaseResult moved = check_case(k, base.params, {shifted.view()});
        std::string where;
        if (!identical(plain.ref.rounded, moved.ref.rounded, &where))
            RC_FAIL("oracle: softmax(x + " + hexfloat(c) + ") differs from softmax(x) at " + where);
        if (!moved.pass) RC_FAIL("softmax(x + " + hexfloat(c) + "): " + moved.message);
        if (!plain.pass) RC_FAIL("softmax(x): " + plain.message);
    };
}

// Masked rows (-inf logits, whole rows of -inf): within budget, and a fully
// masked row is exactly +0 everywhere (never NaN, never a finite sentinel's
// uniform distribution) -- or NaN everywhere for a kernel that declares the
// convention masked_row = nan (oracle/conventions.hpp; oneDNN's softmax).
Testable masked_rows(const KernelInfo& k, const RunConfig& cfg) {
    return [&k, cfg] {
        GenOptions opt;
        opt.max_n = std::min(cfg.max_n, 1024);
        CaseSpec spec = in_domain(*gen_spec(*find_op(k.op), k.in, opt));
        spec.families[0] = Family::masked;
        const Case c = build_case(spec);
        const CaseResult r = check_case(k, c.params, c.views());
        if (!r.pass) RC_FAIL(r.message);
        const TensorView x = c.inputs[0].view(), y = r.outputs[0].view();
        const std::int64_t n = x.cols();
        const auto conv = k.conventions.find("masked_row");
        const bool want_nan = conv != k.conventions.end() && conv->second == "nan";
        for (std::int64_t row = 0; row < x.rows(); ++row) {
            bool all_masked = true;
            for (std::int64_t j = 0; j < n; ++j) all_masked &= x.value(row * n + j) == -INFINITY;
            for (std::int64_t j = 0; all_masked && j < n; ++j)
                if (want_nan ? !std::isnan(y.value(row * n + j)) : y.bits(row * n + j) != 0)
                    RC_FAIL("fully masked row " + std::to_string(row) + ": element " + std::to_string(j) + " is " +
                            hexfloat(y.value(row * n + j)) + (want_nan ? ", want NaN (declared)" : ", want +0"));
        }
    };
}

// merge(S, empty) = S and merge(empty, S) = S bit for bit; merge(empty,
// empty) = (0, -inf) without NaN.
Testable empty_identity(const KernelInfo& k) {
    return [&k] {
        Case c = build_case(in_domain(*gen_lse_merge_spec(k.in, GenOptions{})));
        const bool left = *rc::gen::arbitrary<bool>();
        const std::size_t empty = left ? 1 : 3, kept = left ? 3 : 1;  // lse_a or lse_b
        for (std::int64_t r = 0; r < c.inputs[empty].numel(); ++r) c.inputs[empty].set_value(r, -INFINITY);
        const auto out = run_kernel(k, c.params, c.views());
        const Tensor& o_kept = c.inputs[kept - 1];
        for (std::int64_t r = 0; r < c.inputs[kept].numel(); ++r) {
            const double l = c.inputs[kept].value(r);
            if (std::isnan(l) || l == INFINITY) continue;  // a NaN state stays NaN
            const std::int64_t dv = o_kept.numel() / c.inputs[kept].numel();
            if (l == -INFINITY) {  // both empty
                if (out[1].value(r) != -INFINITY) RC_FAIL("merge of two empty states: lse " + hexfloat(out[1].value(r)));
                for (std::int64_t d = 0; d < dv; ++d)
                    if (out[0].value(r * dv + d) != 0) RC_FAIL("merge of two empty states: o is not 0");
                continue;
            }
            if (out[1].value(r) != l) RC_FAIL("row " + std::to_string(r) + ": merging with the empty state moved lse");
            for (std::int64_t d = 0; d < dv; ++d)
                if (out[0].bits(r * dv + d) != o_kept.bits(r * dv + d))
                    RC_FAIL("row " + std::to_string(r) + ": merging with the empty state changed o[" + std::to_string(d) +
                            "]: " + hexfloat(o_kept.value(r * dv + d)) + " -> " + hexfloat(out[0].value(r * dv + d)));
        }
    };
}

}  // namespace

// dims = {R, Dv}; lse values drawn per row from moderate, large (+-1e4),
// equal and empty (-inf) states; o from the value families.
rc::Gen<CaseSpec> gen_lse_merge_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](int rows, int dv, Family fam, int k, std::uint64_t seed, int specials) {
            return structured_spec("lse_merge", fmt, {rows, dv}, Params(), fam, k, seed, specials);
        },
        rc::gen::inRange(1, 9), rc::gen::element(1, 3, 8, 64, 128), rc::gen::elementOf(value_families()),
        rc::gen::inRange(-8, 9), rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_lse_merge_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t rows = spec.dims[0], dv = spec.dims[1];
    std::normal_distribution<double> N;
    auto lse_row = [&](double other) -> double {
        switch (rng() % 6) {
            case 0: return -INFINITY;                  // the empty state
            case 1: return other;                      // equal lse: lse + log 2
            case 2: return (rng() % 2 ? 1e4 : -1e4) + N(rng);  // where log(e^a + e^b) overflows
            case 3: return other + 40 * N(rng);        // one state dominates
            default: return 3 * N(rng);
        }
    };
    for (int state = 0; state < 2; ++state) {
        Tensor o(spec.format, {rows, dv});
        fill_values(o, spec.families.at(0), spec, 0, rng);
        inject_specials(o, spec.specials, rng);
        Tensor l(spec.format, {rows});
        for (std::int64_t r = 0; r < rows; ++r)
            l.set_value(r, lse_row(state == 0 ? 3 * N(rng) : c.inputs[1].value(r)));
        c.inputs.push_back(std::move(o));
        c.inputs.push_back(std::move(l));
    }
    return c;
}

void add_softmax_properties(std::vector<PropertyDef>& v) {
    v.push_back({"empty_identity", "merging with the empty state (0, -inf) returns the other state bit for bit",
                 [](const OpSpec& op) { return op.name == "lse_merge"; },
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return empty_identity(k); }, 2});
    v.back().needs = {"lse"};
    v.push_back({"shift_invariance",
                 "softmax(x + c) within budget and equal in the oracle to softmax(x), c up to +-1e4 (x + c exact)",
                 [](const OpSpec& op) { return op.name == "softmax"; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return shift_invariance(k, cfg); }, 2});
    v.push_back({"masked_rows",
                 "-inf logits get weight 0 and fully masked rows are all +0, within budget elsewhere",
                 [](const OpSpec& op) { return op.name == "softmax"; },
                 [](const KernelInfo& k, const RunConfig& cfg, Stats*) { return masked_rows(k, cfg); }, 2});
}

}  // namespace conform::props
