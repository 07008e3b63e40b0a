#include "properties/generators.hpp"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>

#include "properties/verdict.hpp"

namespace conform::props {
namespace {

const Family kAllFamilies[] = {Family::normal,     Family::uniform,       Family::heavy_tail, Family::outlier,
                               Family::constant,   Family::near_eps,      Family::near_overflow,
                               Family::bit_patterns, Family::subnormal,   Family::around_cap,
                               Family::saturated,  Family::tiny};

double cap_of(const Params& p, std::size_t input) {
    if (p.values().count("beta")) return p.at("beta");
    if (p.values().count("limit")) return p.at("limit");
    if (p.values().count("beta1")) return input == 0 ? p.at("beta1") : p.at("beta2");
    return 10;
}

// One value of the family, before rounding to the format.
double draw(Family fam, Format f, const Params& p, std::size_t input, int k, std::mt19937_64& rng) {
    std::normal_distribution<double> N;
    std::uniform_real_distribution<double> U(-1, 1);
    const double mx = max_finite(f), scale = std::ldexp(1.0, k);
    switch (fam) {
        case Family::normal: return N(rng) * scale;
        case Family::uniform: return U(rng) * scale;
        case Family::heavy_tail: return std::clamp(std::tan(1.5707 * U(rng)) * scale, -mx, mx);
        case Family::outlier: return N(rng) * scale;  // one element replaced in fill()
        case Family::constant: return scale;           // replaced in fill()
        case Family::near_eps: {
            // mean square within a factor 16 of eps: where eps placement matters
            const double eps = std::max(p.get("eps", 1e-6), 1e-30);
            return N(rng) * std::sqrt(eps) * std::ldexp(1.0, static_cast<int>(rng() % 5) - 2);
        }
        case Family::near_overflow: return (U(rng) < 0 ? -1 : 1) * mx * std::ldexp(1.0, -static_cast<int>(rng() % 5)) * (0.5 + 0.5 * std::fabs(U(rng)));
        case Family::bit_patterns: {
            const int width = info(f).bytes * 8;
            for (;;) {
                double v = decode(f, rng() & ((width == 64 ? 0 : (std::uint64_t{1} << width)) - 1));
                if (std::isfinite(v)) return v;
            }
        }
        case Family::subnormal: {
            const FormatInfo& fi = info(f);
            return U(rng) * std::ldexp(1.0, fi.emin);
        }
        case Family::around_cap: return (U(rng) < 0 ? -1 : 1) * cap_of(p, input) * std::exp2(3 * U(rng));
        case Family::saturated: return (U(rng) < 0 ? -1 : 1) * std::exp2(3 + 12 * std::fabs(U(rng)));
        case Family::tiny: return U(rng) * std::ldexp(1.0, -10 - static_cast<int>(rng() % 10));
        case Family::masked: return N(rng) * scale;  // -inf entries set in fill()
        case Family::large_mean: return N(rng);       // the row's spread; shifted by its mean in fill()
    }
    return 0;
}

}  // namespace

void inject_specials(Tensor& t, int count, std::mt19937_64& rng) {
    const Format f = t.format();
    const double vals[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, max_finite(f), -max_finite(f)};
    for (int s = 0; s < count && t.numel(); ++s)
        t.set_value(static_cast<std::int64_t>(rng() % t.numel()), vals[rng() % 7]);
}

// Attention-style masking of a [rows, n] tensor: each row is fully masked
// (all -inf) with probability 1/3, else each entry is -inf with probability 1/2.
static void mask_rows(Tensor& t, std::int64_t n, std::mt19937_64& rng) {
    for (std::int64_t r = 0; r * n < t.numel(); ++r) {
        const bool all = rng() % 3 == 0;
        for (std::int64_t j = 0; j < n; ++j)
            if (all || rng() % 2 == 0) t.set_value(r * n + j, -INFINITY);
    }
}

// Rows of n values around a mean far from zero: mean = +-(1 + U) 2^(k + 8)
// (1000 and more at k = 2), spread = |mean| / 10^(2 + 4 U), so the ratio
// covers 1e2 .. 1e6 (a 16-bit format resolves the smaller ratios; beyond
// its precision a row is its mean plus a few ulps).  Where the error of the
// mean measured against |x| dwarfs the spread, a one-pass E[x^2] - E[x]^2
// variance loses every digit.
void fill_large_mean_rows(Tensor& t, std::int64_t n, const CaseSpec& spec, std::mt19937_64& rng) {
    std::normal_distribution<double> N;
    std::uniform_real_distribution<double> U(0, 1);
    const double mx = max_finite(t.format());
    for (std::int64_t row = 0; row * n < t.numel(); ++row) {
        const double mean = (rng() % 2 ? 1 : -1) * (1 + U(rng)) * std::ldexp(1.0, spec.scale_exp + 8);
        const double spread = std::fabs(mean) * std::pow(10.0, -2 - 4 * U(rng));
        for (std::int64_t i = row * n; i < std::min(t.numel(), (row + 1) * n); ++i)
            t.set_value(i, std::clamp(mean + spread * N(rng), -mx, mx));
    }
}

void fill_values(Tensor& t, Family fam, const CaseSpec& spec, std::size_t input, std::mt19937_64& rng) {
    const Format f = t.format();
    const double mx = max_finite(f);
    if (fam == Family::large_mean) return fill_large_mean_rows(t, std::max(spec.n, 1), spec, rng);
    const double c = draw(Family::normal, f, spec.params, input, spec.scale_exp, rng);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        double v = fam == Family::constant ? c : draw(fam, f, spec.params, input, spec.scale_exp, rng);
        t.set_value(i, std::clamp(v, -mx, mx));
    }
    if (fam == Family::masked) mask_rows(t, spec.n, rng);
    if (fam == Family::outlier && t.numel()) {
        const double big = std::ldexp(1.0, spec.scale_exp + 5 + static_cast<int>(rng() % 16));
        t.set_value(static_cast<std::int64_t>(rng() % t.numel()), std::min(big, mx) * ((rng() & 1) ? 1 : -1));
    }
}

namespace {

// Weights and biases of the norms: around 1 (or around 0 for zero-centred
// weights and biases).
void fill_affine(Tensor& t, const CaseSpec& spec, std::size_t input, std::mt19937_64& rng) {
    std::normal_distribution<double> N;
    const bool around_zero = input == 2 || spec.params.get("zero_centered", 0) != 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, (around_zero ? 0.0 : 1.0) + 0.25 * N(rng));
}

// NaN, +Inf or -Inf at `count` random columns of a weight or bias (a
// checkpoint with a diverged channel): that column's outputs are NaN or
// infinite in every row, the others unaffected.  A stream of its own, so
// that the values of the case are those it has without them.
void inject_affine_specials(Tensor& t, int count, std::uint64_t seed) {
    std::mt19937_64 rng(seed ^ 0x5bd1e9955bd1e995ull);
    const double vals[] = {NAN, INFINITY, -INFINITY};
    for (int s = 0; s < count && t.numel(); ++s) t.set_value(static_cast<std::int64_t>(rng() % t.numel()), vals[rng() % 3]);
}

}  // namespace

const char* name(Family f) {
    static const char* names[] = {"normal",       "uniform",   "heavy_tail", "outlier", "constant",  "near_eps",
                                  "near_overflow", "bit_patterns", "subnormal", "around_cap", "saturated", "tiny",
                                  "masked",       "large_mean"};
    return names[static_cast<int>(f)];
}

std::vector<TensorView> Case::views() const {
    std::vector<TensorView> v;
    for (const auto& t : inputs) v.push_back(t.view());
    return v;
}

CaseSpec structured_spec(const std::string& op, Format fmt, std::vector<std::int64_t> dims, Params params, Family fam,
                         int scale_exp, std::uint64_t seed, int specials) {
    CaseSpec s;
    s.op = op;
    s.format = fmt;
    s.params = std::move(params);
    s.rows = 1;
    s.n = dims.empty() ? 1 : static_cast<int>(dims.back());
    s.dims = std::move(dims);
    s.families = {fam};
    s.scale_exp = scale_exp;
    s.seed = seed;
    s.specials = specials;
    return s;
}

Case start_case(const CaseSpec& spec) {
    Case c;
    c.op = find_op(spec.op);
    c.params = spec.params;
    return c;
}

const std::vector<Family>& value_families() {
    static const std::vector<Family> v(std::begin(kAllFamilies), std::end(kAllFamilies));
    return v;
}

Case build_case(const CaseSpec& spec0) {
    const CaseSpec spec = in_domain(spec0);
    if (spec.op == "rope") return build_rope_case(spec);
    if (softmax_attention_op(spec.op)) return build_attention_case(spec);
    if (spec.op == "lse_merge") return build_lse_merge_case(spec);
    if (spec.op == "gdn") return build_gdn_case(spec);
    if (spec.op == "kda") return build_kda_case(spec);
    if (spec.op == "sinkhorn") return build_sinkhorn_case(spec);
    if (spec.op == "hc_residual" || spec.op == "mhc_residual") return build_hc_residual_case(spec);
    if (spec.op == "quantize") return build_quantize_case(spec);
    if (spec.op == "int8_gemm") return build_int8_gemm_case(spec);
    if (spec.op == "matmul") return build_matmul_case(spec);
    if (spec.op == "moe_router") return build_moe_router_case(spec);
    if (spec.op == "topk_select") return build_topk_select_case(spec);
    if (spec.op == "lightning_indexer") return build_lightning_indexer_case(spec);
    if (spec.op == "mla") return build_mla_case(spec);
    if (spec.op == "compressed_attention") return build_compressed_attention_case(spec);
    if (spec.op == "dsa_attention") return build_dsa_attention_case(spec);
    if (spec.op == "block_sparse_attention") return build_block_sparse_case(spec);
    if (spec.op == "nsa_attention") return build_nsa_attention_case(spec);
    if (spec.op == "moe" || spec.op == "latent_moe") return build_moe_layer_case(spec);
    if (spec.op == "fp8_quantize") return build_fp8_quantize_case(spec);
    if (spec.op == "fp8_gemm") return build_fp8_gemm_case(spec);
    if (spec.op == "dequantize") return build_dequantize_case(spec);
    if (spec.op == "smooth_quant") return build_smooth_quant_case(spec);
    if (spec.op == "int8_block") return build_int8_block_case(spec);
    if (spec.op == "block_attn_res") return build_block_attn_res_case(spec);
    if (spec.op == "gated_residual") return build_gated_residual_case(spec);
    Case c;
    c.op = find_op(spec.op);
    c.params = spec.params;
    std::mt19937_64 rng(spec.seed);
    for (std::size_t k = 0; k < c.op->inputs.size(); ++k) {
        const bool affine = c.op->kind == OpKind::row && k > 0;
        Tensor t(spec.format, affine ? std::vector<std::int64_t>{spec.n} : std::vector<std::int64_t>{spec.rows, spec.n});
        if (affine) {
            fill_affine(t, spec, k, rng);
            inject_affine_specials(t, spec.weight_specials, spec.seed + k);
        } else
            fill_values(t, spec.families[std::min(k, spec.families.size() - 1)], spec, k, rng);
        if (!affine) inject_specials(t, spec.specials, rng);  // every data input: gate and up alike
        c.inputs.push_back(std::move(t));
    }
    return c;
}

void showValue(const CaseSpec& s0, std::ostream& os) {
    const CaseSpec s = in_domain(s0);  // the case that ran
    os << "CaseSpec{op=" << s.op << ", format=" << name(s.format) << ", rows=" << s.rows << ", n=" << s.n
       << ", families=";
    for (auto f : s.families) os << name(f) << " ";
    os << ", scale=2^" << s.scale_exp << ", seed=" << s.seed << ", specials=" << s.specials;
    if (s.weight_specials) os << ", weight_specials=" << s.weight_specials;
    if (!s.dims.empty()) {
        os << ", dims=";
        for (std::size_t i = 0; i < s.dims.size(); ++i) os << (i ? "x" : "") << s.dims[i];
    }
    os << "}\n";
    Case c = build_case(s);
    os << show_inputs(*c.op, c.params, c.views());
}

rc::Gen<Params> gen_params(const OpSpec& op) {
    const std::string n = op.name;
    if (n == "rms_norm")
        return rc::gen::apply([](double eps, int zc) { return Params({{"eps", eps}, {"zero_centered", double(zc)}}); },
                              rc::gen::element(0.0, 1e-12, 1e-6, 1e-5, 1e-3, 0.5), rc::gen::element(0, 1));
    if (n == "layer_norm")
        return rc::gen::map(rc::gen::element(0.0, 1e-12, 1e-6, 1e-5, 1e-3),
                            [](double eps) { return Params({{"eps", eps}}); });
    if (n == "l2_norm")
        return rc::gen::map(rc::gen::element(0.0, 1e-12, 1e-6, 1e-3), [](double eps) { return Params({{"eps", eps}}); });
    if (n == "softcap")
        return rc::gen::map(rc::gen::element(30.0, 1.0, 4.0, 15.0, 50.0, 0.25, 1000.0),
                            [](double b) { return Params({{"beta", b}}); });
    if (n == "situ_glu")
        return rc::gen::apply([](double b1, double b2) { return Params({{"beta1", b1}, {"beta2", b2}}); },
                              rc::gen::element(4.0, 1.0, 0.5, 16.0, 100.0, 1000.0),
                              rc::gen::element(25.0, 1.0, 10.0, 100.0, 1e4));
    if (n == "swiglu_clamp")
        return rc::gen::map(rc::gen::element(10.0, 1.0, 3.0, 7.0, 100.0),
                            [](double l) { return Params({{"limit", l}}); });
    return rc::gen::just(Params());
}

namespace {

// Rows of a norm tensor: 1 to 3, or (half the cases) 9 to 33, so that kernels
// grouping rows by 4 or 8 reach a second group and a partial last one
// (9 = 8 + 1, 12 = 8 + 4, 17 = 2 x 8 + 1, 31 = 3 x 8 + 7, 33 = 4 x 8 + 1).
rc::Gen<int> norm_rows() { return rc::gen::element(1, 2, 3, 1, 2, 3, 1, 9, 12, 16, 17, 24, 31, 33); }

// Infinite or NaN weights go with rows whose normalized values stay clear of
// zero.  y = w z with w = +-Inf is +-Inf for z != 0 and NaN for z = 0, and
// where the exact z is within the kernel's rounding error of 0 -- x / r
// below FP32's range (bit patterns spanning 2^250, an injected +-max beside
// small values), x - mean cancelling (rows around a large mean) -- a kernel
// whose z rounds to 0 is within its budget and gets NaN where the exact
// value is infinite: the class is not determined there (docs/norm.md,
// "Special weights"), and the verdict compares classes exactly.
bool weight_specials_fit(Family f, bool x_specials) {
    return !x_specials && f != Family::bit_patterns && f != Family::large_mean;
}

// The row length for `rows` rows: n, or the longest listed size that keeps
// rows x n within 2^15 elements (the oracle evaluates every row).
int fit_rows(int rows, int n, const std::vector<int>& sizes) {
    constexpr int kMaxElements = 1 << 15;
    if (static_cast<std::int64_t>(rows) * n <= kMaxElements) return n;
    int fit = sizes.front();
    for (int s : sizes)
        if (static_cast<std::int64_t>(rows) * s <= kMaxElements) fit = std::max(fit, s);
    return fit;
}

}  // namespace

rc::Gen<CaseSpec> gen_spec(const OpSpec& op, Format fmt, GenOptions opt) {
    if (op.name == "rope") return gen_rope_spec(fmt, opt);
    if (softmax_attention_op(op.name)) return gen_attention_spec(fmt, opt, op.name);
    if (op.name == "lse_merge") return gen_lse_merge_spec(fmt, opt);
    if (op.name == "gdn") return gen_gdn_spec(fmt, opt);
    if (op.name == "kda") return gen_kda_spec(fmt, opt);
    if (op.name == "sinkhorn") return gen_sinkhorn_spec(fmt, opt);
    if (op.family == "hc_residual") return gen_hc_residual_spec(op.name, fmt, opt);
    if (op.name == "quantize") return gen_quantize_spec(fmt, opt);
    if (op.name == "int8_gemm") return gen_int8_gemm_spec(fmt, opt);
    if (op.name == "matmul") return gen_matmul_spec(fmt, opt);
    if (op.name == "moe_router") return gen_moe_router_spec(fmt, opt);
    if (op.name == "topk_select") return gen_topk_select_spec(fmt, opt);
    if (op.name == "lightning_indexer") return gen_lightning_indexer_spec(fmt, opt);
    if (op.name == "mla") return gen_mla_spec(fmt, opt);
    if (op.name == "compressed_attention") return gen_compressed_attention_spec(fmt, opt);
    if (op.name == "dsa_attention") return gen_dsa_attention_spec(fmt, opt);
    if (op.name == "block_sparse_attention") return gen_block_sparse_spec(fmt, opt);
    if (op.name == "nsa_attention") return gen_nsa_attention_spec(fmt, opt);
    if (op.name == "moe" || op.name == "latent_moe") return gen_moe_layer_spec(op.name, fmt, opt);
    if (op.name == "fp8_quantize") return gen_fp8_quantize_spec(fmt, opt);
    if (op.name == "fp8_gemm") return gen_fp8_gemm_spec(fmt, opt);
    if (op.name == "dequantize") return gen_dequantize_spec(fmt, opt);
    if (op.name == "smooth_quant") return gen_smooth_quant_spec(fmt, opt);
    if (op.name == "int8_block") return gen_int8_block_spec(fmt, opt);
    if (op.name == "block_attn_res") return gen_block_attn_res_spec(fmt, opt);
    if (op.name == "gated_residual") return gen_gated_residual_spec(fmt, opt);
    const bool rows_op = op.kind == OpKind::row, norm = op.family == "norm";
    std::vector<int> sizes = {1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 65, 100, 128, 129, 256, 1000, 1024, 4096};
    sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](int s) { return s > opt.max_n; }), sizes.end());
    const std::string name = op.name;
    const std::size_t n_inputs = op.kind == OpKind::gated ? 2 : 1;
    std::vector<Family> families(std::begin(kAllFamilies), std::end(kAllFamilies));
    if (op.family == "softmax") families.push_back(Family::masked);
    if (norm) families.insert(families.end(), 2, Family::large_mean);
    return rc::gen::apply(
        [=](Params p, int rows, int n, std::vector<Family> fams, int k, std::uint64_t seed, int specials,
            int weight_specials) {
            CaseSpec s;
            s.op = name;
            s.format = fmt;
            s.params = std::move(p);
            s.rows = rows;
            s.n = norm ? fit_rows(rows, n, sizes) : n;
            s.families = std::move(fams);
            s.scale_exp = k;
            s.seed = seed;
            s.specials = specials;
            s.weight_specials = weight_specials_fit(s.families[0], specials > 0) ? weight_specials : 0;
            return s;
        },
        gen_params(op), norm ? norm_rows() : rc::gen::inRange(1, rows_op ? 4 : 3),
        rc::gen::resize(100, rc::gen::elementOf(sizes)),
        rc::gen::container<std::vector<Family>>(n_inputs, rc::gen::elementOf(families)),
        rc::gen::inRange(fmt == Format::fp16 ? -8 : -20, fmt == Format::fp16 ? 9 : 21),
        rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 4) : rc::gen::just(0),
        norm ? rc::gen::element(0, 0, 0, 0, 0, 0, 1, 3) : rc::gen::just(0));
}

}  // namespace conform::props
