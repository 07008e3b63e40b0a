// Declared conventions (numerics/conventions.hpp, oracle/conventions.hpp): a
// kernel that follows another library's convention -- NaN for empty rows, eps
// outside the root, x / max(||x||, eps), the tanh GELU in geglu, IEEE special
// values, a top-left causal mask -- passes only when it declares it, a kernel
// that declares one must then really follow it, and convention inference
// names the declaration that explains a failing kernel (or none: a defect).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <algorithm>
#include <vector>
#include <memory>
#include <limits>

#include "impls/registry.hpp"
#include "oracle/activation_bound.hpp"
#include "oracle/conventions.hpp"
#include "properties/exhaustive.hpp"
#include "properties/suite.hpp"
#include "properties/verdict.hpp"

namespace conventions_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Tensor filled(Format f, std::vector<std::int64_t> shape, double base) {
    Tensor t(f, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, base * std::sin(1.0 + static_cast<double>(i)));
    return t;
}

// kernel `name` made "literal": every output of a row whose lse (attention)
// or input (softmax) says it is empty becomes NaN, as softmax(s) @ v gives.
KernelInfo literal(const std::string& name, bool declare) {
    KernelInfo k = *builtin_registry().find(name);
    const KernelFn inner = k.fn;
    const bool attention = k.op == "attention";
    k.fn = [inner, attention](const KernelCall& c) {
        inner(c);
        const TensorView& y = c.out[0];
        for (std::int64_t r = 0; r < y.rows(); ++r) {
            bool empty = true;
            if (attention) {
                empty = std::isinf(c.out[1].value(r));
                if (empty) c.out[1].set_bits(r, encode(c.out[1].format, kNaN));
            } else {
                for (std::int64_t j = 0; j < c.in[0].cols(); ++j) empty = empty && c.in[0].value(r * y.cols() + j) == kNegInf;
            }
            if (empty)
                for (std::int64_t j = 0; j < y.cols(); ++j) y.set_bits(r * y.cols() + j, encode(y.format, kNaN));
        }
    };
    if (declare) k.conventions = {{"masked_row", "nan"}};
    return k;
}

// Causal with Lq = 4 > Lk = 2: queries 0 and 1 sit before every key.
props::CaseResult check_attention(const KernelInfo& k) {
    const Tensor q = filled(k.in, {2, 4, 8}, 0.5), kk = filled(k.in, {1, 2, 8}, 0.25), v = filled(k.in, {1, 2, 4}, 1);
    Params p;
    p.set("causal", 1);
    return props::check_case(k, p, {q.view(), kk.view(), v.view()});
}

props::CaseResult check_softmax(const KernelInfo& k) {
    Tensor x = filled(k.in, {3, 5}, 4);
    for (std::int64_t j = 0; j < 5; ++j) x.set_value(5 + j, kNegInf);  // row 1 is empty
    return props::check_case(k, Params{}, {x.view()});
}

}  // namespace

TEST(Conventions, DeclaredNanMaskedRowsPassOnlyWhenDeclared) {
    for (const char* name : {"cpu.simd.attention.fp32", "cpu.scalar.attention.bf16"}) {
        const auto undeclared = check_attention(literal(name, false));
        EXPECT_FALSE(undeclared.pass) << name;
        EXPECT_NE(undeclared.message.find("o["), std::string::npos) << undeclared.message;
        const auto declared = check_attention(literal(name, true));
        EXPECT_TRUE(declared.pass) << name << ": " << declared.message;
        EXPECT_TRUE(std::isnan(declared.all_ref[1].value(0)));  // the reference itself follows the declaration
        EXPECT_FALSE(std::isnan(declared.all_ref[1].value(2)));  // rows with keys are untouched
    }
    for (const char* name : {"cpu.simd.softmax.fp32", "cpu.scalar.softmax.fp16"}) {
        EXPECT_FALSE(check_softmax(literal(name, false)).pass) << name;
        const auto declared = check_softmax(literal(name, true));
        EXPECT_TRUE(declared.pass) << name << ": " << declared.message;
    }
}

TEST(Conventions, DeclaringNanWhileReturningZeroFails) {
    KernelInfo k = *builtin_registry().find("cpu.simd.attention.fp32");
    k.conventions = {{"masked_row", "nan"}};
    EXPECT_FALSE(check_attention(k).pass);
    k.conventions = {{"masked_row", "zero"}};  // the oracle's own convention, declared explicitly
    EXPECT_TRUE(check_attention(k).pass);
    KernelInfo s = *builtin_registry().find("cpu.simd.softmax.fp32");
    s.conventions = {{"masked_row", "nan"}};
    EXPECT_FALSE(check_softmax(s).pass);
}

TEST(Conventions, UnknownKeysAndValuesAreErrors) {
    EXPECT_NO_THROW(check_conventions({{"masked_row", "nan"}}));
    try {
        check_conventions({{"masked_row", "banana"}});
        FAIL() << "accepted an unknown value";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("expected one of zero, nan"), std::string::npos) << e.what();
    }
    EXPECT_THROW(check_conventions({{"rope_pairing", "x"}}), std::invalid_argument);
    KernelInfo k = *builtin_registry().find("cpu.simd.attention.fp32");
    k.conventions = {{"masked_rows", "nan"}};  // a typo must not be ignored
    EXPECT_THROW(check_attention(k), std::invalid_argument);
}

// ---- formula conventions (numerics/conventions.hpp) ------------------------------

namespace {

// A kernel of op `op` (fp32) computing each output element in double from
// the element's arguments and rounding once: as exact as a kernel can be,
// so only its formula decides the verdict.
KernelInfo elementwise_double(const std::string& op, std::function<double(double, double)> f) {
    KernelInfo k;
    k.name = "test." + op + ".double";
    k.op = op;
    k.fn = [f](const KernelCall& c) {
        for (std::int64_t i = 0; i < c.out[0].numel(); ++i)
            c.out[0].set_bits(i, encode(c.out[0].format, f(c.in[0].value(i), c.in.size() > 1 ? c.in[1].value(i) : 0.0)));
    };
    return k;
}

// l2_norm rows in double: x / max(||x||, eps), or x / (||x|| + eps).
KernelInfo l2_double(bool max_form) {
    KernelInfo k;
    k.name = "test.l2_norm.double";
    k.op = "l2_norm";
    k.fn = [max_form](const KernelCall& c) {
        const TensorView& x = c.in[0];
        const double eps = c.params.get("eps", 1e-6);
        for (std::int64_t r = 0; r < x.rows(); ++r) {
            double s = 0;
            for (std::int64_t j = 0; j < x.cols(); ++j) s += x.value(r * x.cols() + j) * x.value(r * x.cols() + j);
            const double d = max_form ? std::max(std::sqrt(s), eps) : std::sqrt(s) + eps;
            for (std::int64_t j = 0; j < x.cols(); ++j) c.out[0].set_bits(r * x.cols() + j, encode(c.out[0].format, x.value(r * x.cols() + j) / d));
        }
    };
    return k;
}

props::CaseResult check_l2(const KernelInfo& k) {
    Tensor x(Format::fp32, {3, 4});  // small rows: eps decides the result
    for (std::int64_t i = 0; i < x.numel(); ++i) x.set_value(i, 1e-3 * std::sin(1.0 + static_cast<double>(i)));
    Params p;
    p.set("eps", 1e-3);
    return props::check_case(k, p, {x.view()});
}

KernelInfo declaring(KernelInfo k, Conventions c) {
    k.conventions = std::move(c);
    return k;
}

double gelu_tanh_d(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

}  // namespace

TEST(Conventions, L2FormsPassOnlyUnderTheirDeclaration) {
    const KernelInfo max_form = l2_double(true), outside = l2_double(false);
    EXPECT_FALSE(check_l2(max_form).pass);
    EXPECT_TRUE(check_l2(declaring(max_form, {{"l2_form", "max"}})).pass) << check_l2(declaring(max_form, {{"l2_form", "max"}})).message;
    EXPECT_FALSE(check_l2(outside).pass);
    EXPECT_TRUE(check_l2(declaring(outside, {{"eps_placement", "outside"}})).pass);
    EXPECT_FALSE(check_l2(declaring(outside, {{"l2_form", "max"}})).pass);  // each form is its own reference
}

TEST(Conventions, EpsOutsideTheRootIsAConventionForRmsAndLayerNorm) {
    // The project's eps_outside mutant computes w x / (sqrt(mean x^2) + eps).
    const KernelInfo m = *builtin_registry().find("mutant.rms_norm.eps_outside.fp32");
    Tensor x(Format::fp32, {2, 8}), w(Format::fp32, {8});
    for (std::int64_t i = 0; i < x.numel(); ++i) x.set_value(i, 0.05 * std::cos(static_cast<double>(i)));
    for (std::int64_t i = 0; i < w.numel(); ++i) w.set_value(i, 1 + 0.1 * i);
    Params p;
    p.set("eps", 1e-2);
    EXPECT_FALSE(props::check_case(m, p, {x.view(), w.view()}).pass);
    EXPECT_TRUE(props::check_case(declaring(m, {{"eps_placement", "outside"}}), p, {x.view(), w.view()}).pass);
    const KernelInfo good = *builtin_registry().find("cpu.simd.rms_norm.fp32");
    EXPECT_FALSE(props::check_case(declaring(good, {{"eps_placement", "outside"}}), p, {x.view(), w.view()}).pass);
    const KernelInfo ln = *builtin_registry().find("cpu.simd.layer_norm.fp32");
    Tensor b(Format::fp32, {8});
    EXPECT_TRUE(props::check_case(ln, p, {x.view(), w.view(), b.view()}).pass);
    EXPECT_FALSE(props::check_case(declaring(ln, {{"eps_placement", "outside"}}), p, {x.view(), w.view(), b.view()}).pass);
}

TEST(Conventions, GegluTanhFormAndIeeeSpecialValues) {
    const KernelInfo tanh_form = elementwise_double("geglu", [](double g, double u) { return gelu_tanh_d(g) * u; });
    Tensor g(Format::fp32, {1, 64}), u(Format::fp32, {1, 64});
    for (std::int64_t i = 0; i < 64; ++i) g.set_value(i, -4 + 0.125 * i), u.set_value(i, 1.5);
    EXPECT_FALSE(props::check_case(tanh_form, Params{}, {g.view(), u.view()}).pass);
    EXPECT_TRUE(props::check_case(declaring(tanh_form, {{"gelu", "tanh"}}), Params{}, {g.view(), u.view()}).pass);

    // silu(-inf) = -inf * sigmoid(-inf) = -inf * 0 = NaN literally; the limit is -0.
    const KernelInfo literal_silu = elementwise_double("silu", [](double x, double) { return x * (1 / (1 + std::exp(-x))); });
    Tensor x(Format::fp32, {1, 4});
    x.set_value(0, kNegInf), x.set_value(1, 1.0), x.set_value(2, -2.0), x.set_value(3, INFINITY);
    EXPECT_FALSE(props::check_case(literal_silu, Params{}, {x.view()}).pass);
    const auto declared = props::check_case(declaring(literal_silu, {{"special_values", "ieee"}}), Params{}, {x.view()});
    EXPECT_TRUE(declared.pass) << declared.message;
    EXPECT_TRUE(std::isnan(declared.ref.rounded.value(0)));  // the reference follows the declaration
    const KernelInfo good = *builtin_registry().find("cpu.simd.silu.fp32");
    EXPECT_FALSE(props::check_case(declaring(good, {{"special_values", "ieee"}}), Params{}, {x.view()}).pass);
}

namespace {

// A built-in attention kernel given an explicit top-left mask (-inf above
// the diagonal j > i, in its input format) in place of the structural causal one.
KernelInfo top_left_causal(const std::string& builtin) {
    KernelInfo k = *builtin_registry().find(builtin);
    const KernelFn inner = k.fn;
    auto masks = std::make_shared<std::vector<Tensor>>();
    k.fn = [inner, masks, f = k.in](const KernelCall& c) {
        const std::int64_t lq = c.in[0].shape[1], lk = c.in[1].shape[1];
        masks->emplace_back(f, std::vector<std::int64_t>{lq, lk});
        for (std::int64_t i = 0; i < lq; ++i)
            for (std::int64_t j = 0; j < lk; ++j) masks->back().set_value(i * lk + j, j > i && c.params.get("causal", 0) != 0 ? kNegInf : 0.0);
        Params p = c.params;
        p.set("causal", 0);
        KernelCall call{p, {c.in[0], c.in[1], c.in[2], masks->back().view()}, c.out};
        inner(call);
    };
    return k;
}

}  // namespace

TEST(Conventions, TopLeftCausalAlignment) {
    const KernelInfo k = top_left_causal("cpu.scalar.attention.fp32");
    const Tensor q = filled(Format::fp32, {2, 3, 8}, 0.5), kk = filled(Format::fp32, {1, 5, 8}, 0.25), v = filled(Format::fp32, {1, 5, 4}, 1);
    Params p;
    p.set("causal", 1);
    EXPECT_FALSE(props::check_case(k, p, {q.view(), kk.view(), v.view()}).pass);
    const auto declared = props::check_case(declaring(k, {{"causal", "top_left"}}), p, {q.view(), kk.view(), v.view()});
    EXPECT_TRUE(declared.pass) << declared.message;
}

// The probabilistic tier's model reads the weights under the declared
// alignment.  Lq = 1, Lk = 64, key 0 = 11 q (logit about 17.6 above the
// others): bottom-right the query sees all 64 keys, and 63 weights near
// 2e-8, each below one rounding of the sum, add up to more than one
// (absorbed alike: the model fails, the rigorous tier judges); top-left it
// sees key 0 alone.
TEST(Conventions, TopLeftModelReadsTheTopLeftWeights) {
    const KernelInfo k = top_left_causal("cpu.scalar.attention.fp32");
    const Tensor q = filled(Format::fp32, {1, 1, 8}, 1), v = filled(Format::fp32, {1, 64, 4}, 1);
    Tensor kk = filled(Format::fp32, {1, 64, 8}, 0.1);
    for (std::int64_t d = 0; d < 8; ++d) kk.set_value(d, 11 * q.value(d));
    Params p;
    p.set("causal", 1);
    const std::vector<TensorView> in{q.view(), kk.view(), v.view()};
    EXPECT_NE(props::evaluate_case(k, p, in).model_breach, "");
    EXPECT_EQ(props::evaluate_case(declaring(k, {{"causal", "top_left"}}), p, in).model_breach, "");
}

// The bound of a kernel declaring causal = top_left reads the top-left
// output's magnitude.  q = 0 (equal weights), Lq = 2, Lk = 6, v = (1000,
// 1000.5, 0, 0, 0, 0): row 1 sees keys 0, 1 top-left, o = 1000.25, a tie
// between FP16 neighbours; the kernel here rounds it up (faithful, error 1/4:
// half an ulp, within the bound).  Bottom-right the row sees all six keys,
// o = 333.4, whose half ulp is 1/8: a bound built from those values failed it.
TEST(Conventions, TopLeftBoundReadsTheTopLeftOutput) {
    KernelInfo k = declaring(top_left_causal("cpu.scalar.attention.fp16"), {{"causal", "top_left"}});
    k.fn = [inner = k.fn](const KernelCall& c) {
        inner(c);
        if (c.out[0].value(1) == 1000) c.out[0].set_bits(1, encode(Format::fp16, 1000.5));  // row 1: the tie up
    };
    const Tensor q = filled(Format::fp16, {1, 2, 4}, 0), kk = filled(Format::fp16, {1, 6, 4}, 0);
    Tensor v(Format::fp16, {1, 6, 1});
    v.set_value(0, 1000), v.set_value(1, 1000.5);
    Params p;
    p.set("causal", 1);
    const props::CaseResult r = props::check_case(k, p, {q.view(), kk.view(), v.view()});
    EXPECT_TRUE(r.pass) << r.message;
}

TEST(Conventions, KeysMustBelongToTheOpAndCombinationsMustMeanSomething) {
    EXPECT_THROW(check_conventions({{"eps_placement", "outside"}}, "softmax"), std::invalid_argument);
    EXPECT_NO_THROW(check_conventions({{"eps_placement", "outside"}}, "layer_norm"));
    EXPECT_THROW(check_conventions({{"l2_form", "max"}, {"eps_placement", "outside"}}, "l2_norm"), std::invalid_argument);
    // The alternatives inference tries skip the meaningless combination.
    for (const auto& [text, c] : convention_alternatives("l2_norm", {{"l2_form", "max"}}))
        EXPECT_NE(text, "eps_placement=outside");
    EXPECT_EQ(convention_alternatives("silu", {}).size(), 2u);  // special_values, act_arith
    EXPECT_TRUE(convention_alternatives("int8_gemm", {}).empty());
}

// ---- convention inference (properties/suite.cpp) ------------------------------------

namespace {

// Built-in entry `name` judged as a third-party kernel would be (a mutant is
// never re-judged under conventions), at 20 unshrunk cases.
report::KernelReport judged_as_kernel(const std::string& name, bool infer = true) {
    KernelInfo k = *builtin_registry().find(name);
    k.role = Role::kernel;
    props::RunConfig cfg;
    cfg.cases = 20;
    cfg.shrink = false;
    cfg.infer_conventions = infer;
    return props::run_suite(k, cfg);
}

}  // namespace

TEST(ConventionInference, NamesTheConventionAKernelFollows) {
    const report::KernelReport r = judged_as_kernel("mutant.rms_norm.eps_outside.fp32");
    EXPECT_FALSE(r.passed);
    EXPECT_EQ(r.convention_match, "eps_placement=outside");
    ASSERT_EQ(r.conventions_tried.size(), 1u);
    EXPECT_NE(r.conventions_tried[0].find("every property passes"), std::string::npos) << r.conventions_tried[0];
}

TEST(ConventionInference, NamesTheTopLeftAlignmentOfAnAttentionKernel) {
    const report::KernelReport r = judged_as_kernel("mutant.attention.top_left_causal.fp32");
    EXPECT_FALSE(r.passed);
    EXPECT_EQ(r.convention_match, "causal=top_left");
}

TEST(ConventionInference, ADefectIsNotExplainedByAConvention) {
    const report::KernelReport r = judged_as_kernel("mutant.rms_norm.eps_dropped.fp32");
    EXPECT_FALSE(r.passed);
    EXPECT_TRUE(r.convention_match.empty()) << r.convention_match;
    EXPECT_EQ(r.conventions_tried.size(), 1u);
    EXPECT_TRUE(judged_as_kernel("mutant.rms_norm.eps_dropped.fp32", false).conventions_tried.empty());
}

// The derived bounds of the declared forms hold for float kernels of those
// forms over the whole suite (every value family, large-mean rows, special
// values): a two-pass FP32 layer_norm with eps outside the root, and an
// FP32 l2_norm of the max form, each as a library would write it.
namespace {

// Two-pass in float on the row scaled by a power of two (no overflow, no
// rounding in the scaling but underflow), then y = d / (sd + eps), all in
// the scaled units: eps * 2^-e.  Rows with a NaN or an infinity in double.
KernelInfo float_layer_norm_eps_outside() {
    KernelInfo k;
    k.name = "test.layer_norm.eps_outside.fp32";
    k.op = "layer_norm";
    k.conventions = {{"eps_placement", "outside"}};
    k.fn = [](const KernelCall& c) {
        const TensorView& x = c.in[0];
        const double eps = c.params.get("eps", 1e-5);
        const std::int64_t n = x.cols();
        for (std::int64_t r = 0; r < x.rows(); ++r) {
            float m = 0;
            for (std::int64_t j = 0; j < n; ++j) m = std::max(m, std::fabs(static_cast<float>(x.value(r * n + j))));
            int e = 0;
            if (std::isfinite(m) && m > 0) std::frexp(m, &e);
            const float scale = std::ldexp(1.0f, -e);
            std::vector<float> xs(static_cast<std::size_t>(n));
            for (std::int64_t j = 0; j < n; ++j) xs[static_cast<std::size_t>(j)] = static_cast<float>(x.value(r * n + j)) * scale;
            float sum = 0;
            for (float v : xs) sum += v;
            const float mu = sum / static_cast<float>(n);
            float q = 0;
            for (float v : xs) q += (v - mu) * (v - mu);
            const float den = std::sqrt(q / static_cast<float>(n)) + static_cast<float>(std::ldexp(eps, -e));
            for (std::int64_t j = 0; j < n; ++j) {
                const float y = (xs[static_cast<std::size_t>(j)] - mu) / den * static_cast<float>(c.in[1].value(j)) +
                                static_cast<float>(c.in[2].value(j));
                c.out[0].set_bits(r * n + j, encode(c.out[0].format, y));
            }
        }
    };
    return k;
}

KernelInfo float_l2_norm_max_form() {
    KernelInfo k;
    k.name = "test.l2_norm.max.fp32";
    k.op = "l2_norm";
    k.conventions = {{"l2_form", "max"}};
    k.fn = [](const KernelCall& c) {
        const TensorView& x = c.in[0];
        const float eps = static_cast<float>(c.params.get("eps", 1e-6));
        const std::int64_t n = x.cols();
        for (std::int64_t r = 0; r < x.rows(); ++r) {
            double s = 0;  // the norm in double: no overflow for a float row (|x| up to 2^128)
            for (std::int64_t j = 0; j < n; ++j) s += x.value(r * n + j) * x.value(r * n + j);
            const double norm = std::sqrt(s), d = norm < eps ? static_cast<double>(eps) : norm;
            for (std::int64_t j = 0; j < n; ++j)
                c.out[0].set_bits(r * n + j, encode(c.out[0].format, static_cast<float>(x.value(r * n + j) / d)));
        }
    };
    return k;
}

}  // namespace

TEST(Conventions, FloatKernelsOfTheDeclaredFormsPassTheWholeSuite) {
    props::RunConfig cfg;
    cfg.cases = 60;
    for (const KernelInfo& k : {float_layer_norm_eps_outside(), float_l2_norm_max_form()}) {
        const report::KernelReport r = props::run_suite(k, cfg);
        for (const auto& p : r.properties) EXPECT_TRUE(p.passed) << k.name << " / " << p.name << ": " << p.message;
        // Measured 0.43 (layer_norm) and 0.16 (l2, its norm in double): the bounds are used, not vacuously wide.
        EXPECT_GT(r.stats.max_util, 0.05) << k.name;
        KernelInfo undeclared = k;
        undeclared.conventions.clear();
        cfg.infer_conventions = true;
        const report::KernelReport u = props::run_suite(undeclared, cfg);
        EXPECT_FALSE(u.passed) << k.name;
        EXPECT_EQ(u.convention_match, conventions_text(k.conventions)) << k.name;
    }
}

// Underflow in the norms' bounds (docs/norm.md): found by probing the
// derivations -- squares or a mean that underflow, and a max form computed
// through a subnormal fl(eps)^2, err absolutely by what no relative term
// covers once eps is tiny; each row here failed a correct FP32 kernel
// (utilization 4125, 484, 23) before the bounds took those errors in.
namespace {

props::CaseResult l2_case(const KernelInfo& k, std::vector<double> xs, double eps) {
    Tensor x(Format::fp32, {1, static_cast<std::int64_t>(xs.size())});
    for (std::size_t i = 0; i < xs.size(); ++i) x.set_value(static_cast<std::int64_t>(i), xs[i]);
    Params p;
    p.set("eps", eps);
    return props::check_case(k, p, {x.view()});
}

// x / (||x|| + eps) and x * rsqrt(max(sum x^2, eps^2)), every step in float.
KernelInfo plain_l2(bool max_form) {
    KernelInfo k;
    k.name = max_form ? "test.l2_norm.max_via_eps_squared" : "test.l2_norm.outside.float";
    k.op = "l2_norm";
    k.conventions = {{max_form ? "l2_form" : "eps_placement", max_form ? "max" : "outside"}};
    k.fn = [max_form](const KernelCall& c) {
        const TensorView& x = c.in[0];
        const float eps = static_cast<float>(c.params.get("eps", 1e-6));
        float s = 0;
        for (std::int64_t j = 0; j < x.cols(); ++j) s += static_cast<float>(x.value(j)) * static_cast<float>(x.value(j));
        const float inv = max_form ? 1.0f / std::sqrt(std::max(s, eps * eps)) : 1.0f / (std::sqrt(s) + eps);
        for (std::int64_t j = 0; j < x.cols(); ++j) c.out[0].set_bits(j, encode(Format::fp32, static_cast<float>(x.value(j)) * inv));
    };
    return k;
}

}  // namespace

TEST(Conventions, UnderflowIsInTheDeclaredFormsBounds) {
    const double tiny = std::ldexp(1.0, -75);
    const auto outside = l2_case(plain_l2(false), {0.9 * tiny, 0.7 * tiny}, std::ldexp(1.0, -66));
    EXPECT_TRUE(outside.pass) << outside.message;
    const auto max_form = l2_case(plain_l2(true), {5e-23, 2.5e-23}, 1e-21);
    EXPECT_TRUE(max_form.pass) << max_form.message;
    // Not vacuous: a kernel off by far more still fails there.
    KernelInfo off = plain_l2(false);
    const KernelFn inner = off.fn;
    off.fn = [inner](const KernelCall& c) {
        inner(c);
        c.out[0].set_bits(0, encode(Format::fp32, 2 * c.out[0].value(0)));
    };
    EXPECT_FALSE(l2_case(off, {0.9 * tiny, 0.7 * tiny}, std::ldexp(1.0, -66)).pass);
}

TEST(Conventions, ASubnormalMeanIsInTheLayerNormBound) {
    // A narrow row of subnormals: the mean rounds in the subnormal range.
    const double eta = std::ldexp(1.0, -149);
    Tensor x(Format::fp32, {1, 3}), w(Format::fp32, {3}), b(Format::fp32, {3});
    x.set_value(0, eta), x.set_value(1, 2 * eta), x.set_value(2, 2 * eta);
    for (std::int64_t j = 0; j < 3; ++j) w.set_value(j, 1);
    for (double eps : {1e-5, 1e-12}) {
        Params p;
        p.set("eps", eps);
        const auto r = props::check_case(*builtin_registry().find("cpu.scalar.layer_norm.fp32"), p, {x.view(), w.view(), b.view()});
        EXPECT_TRUE(r.pass) << eps << ": " << r.message;
    }
}

// ---- arithmetic classes (act_arith; oracle/activation_bound.hpp) ----------------------

namespace {

// The textbook forms every step in float with the C library's expf, tanhf
// and erff, as PyTorch, ONNX Runtime, JAX and ggml write them; `erf_shift`
// moves erf by a constant to probe the class's edge.  Infinite inputs give
// the limits (the ml convention), or, `literal`, what the float formula gives
// (gelu(-inf) = -inf * 0 = NaN: IEEE's specials).
float textbook(const std::string& op, float x, double erf_shift, bool literal = false) {
    if (std::isinf(x) && !literal) return op == "sigmoid" ? (x > 0 ? 1.0f : 0.0f) : (x > 0 ? x : -0.0f);
    if (op == "sigmoid") return 1.0f / (1.0f + std::exp(-x));
    if (op == "silu" || op == "swiglu") return x / (1.0f + std::exp(-x));
    if (op == "gelu_tanh" || op == "geglu_tanh") {
        const float z = 0.7978845608f * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.0f + std::tanh(z));
    }
    // softplus as JAX's logaddexp(x, 0); as PyTorch's, with its threshold
    // (x itself above it); and log(1 + exp(x)) without log1p (oneDNN 2.6).
    if (op == "softplus") return std::max(x, 0.0f) + std::log1p(std::exp(-std::fabs(x)));
    if (op == "softplus_torch") return x > static_cast<float>(erf_shift) ? x : std::log1p(std::exp(x));
    if (op == "softplus_log") return std::log(1.0f + std::exp(x));
    // softcap at beta = 30 as Gemma 2 writes it (x / c, tanh, times c); with a
    // reciprocal as llama.cpp's ggml_scale(1/c) does; x tanh(x/c) (wrong).
    if (op == "softcap") return 30.0f * std::tanh(x / 30.0f);
    if (op == "softcap_recip") return 30.0f * std::tanh(x * (1.0f / 30.0f));
    if (op == "softcap_wrong") return x * std::tanh(x / 30.0f);
    const float e = static_cast<float>(std::erf(x * 0.70710678f) + erf_shift);
    return 0.5f * x * (1.0f + e);
}

// Kernel of op `op` (geglu with gelu = tanh: "geglu_tanh") storing each float
// result into the output format; a gated op multiplies in float.
// `erf_shift` is softplus_torch's threshold.
KernelInfo textbook_kernel(const std::string& op, Format f, double erf_shift = 0, bool literal = false) {
    KernelInfo k;
    const bool tanh_geglu = op == "geglu_tanh";
    k.op = tanh_geglu                        ? "geglu"
           : op.rfind("softplus", 0) == 0    ? "softplus"
           : op.rfind("softcap", 0) == 0     ? "softcap"
                                             : op;
    k.name = "test." + op + ".textbook." + name(f);
    k.in = k.out = f;
    if (tanh_geglu) k.conventions = {{"gelu", "tanh"}};
    const bool gated = k.op == "swiglu" || k.op == "geglu";
    k.fn = [op, gated, erf_shift, literal](const KernelCall& c) {
        for (std::int64_t i = 0; i < c.out[0].numel(); ++i) {
            const float s = textbook(op, static_cast<float>(c.in[0].value(i)), erf_shift, literal);
            const float y = gated ? s * static_cast<float>(c.in[1].value(i)) : s;
            c.out[0].set_bits(i, encode(c.out[0].format, y));
        }
    };
    return k;
}

// x from -12 to 12 by 1/32 and beyond; up = 1.5 for a gated op.
props::CaseResult check_grid(const KernelInfo& k) {
    const bool gated = k.op == "swiglu" || k.op == "geglu";
    std::vector<double> xs;
    for (int i = -384; i <= 384; ++i) xs.push_back(i / 32.0);
    for (double v : {-100.0, -90.0, -30.0, 30.0, 1e4, -1e4, 1e-30, -1e-30}) xs.push_back(v);
    const auto n = static_cast<std::int64_t>(xs.size());
    Tensor x(k.in, {1, n}), up(k.in, {1, n});
    for (std::int64_t i = 0; i < n; ++i) x.set_value(i, xs[static_cast<std::size_t>(i)]), up.set_value(i, 1.5);
    if (gated) return props::check_case(k, Params{}, {x.view(), up.view()});
    return props::check_case(k, Params{}, {x.view()});
}

std::string arith_of(const std::string& op) {
    if (op == "gelu_erf" || op == "geglu") return "one_plus_erf";
    if (op == "gelu_tanh" || op == "geglu_tanh") return "one_plus_tanh";
    if (op.rfind("softplus", 0) == 0) return "log1p_exp";
    if (op.rfind("softcap", 0) == 0) return "scaled_tanh";
    return "quotient";
}

}  // namespace

TEST(ActArith, TextbookFormsPassUnderTheirClassAndTheErfFormFailsOneUlp) {
    for (const std::string op :
         {"sigmoid", "silu", "swiglu", "gelu_tanh", "gelu_erf", "geglu", "geglu_tanh", "softplus", "softcap", "softcap_recip"})
        for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
            KernelInfo k = textbook_kernel(op, f);
            KernelInfo declared = k;
            declared.conventions["act_arith"] = arith_of(op);
            const props::CaseResult r = check_grid(declared);
            EXPECT_TRUE(r.pass) << declared.name << ": " << r.message;
            EXPECT_GT(r.judged, 0) << declared.name;
            if (f != Format::fp32) continue;
            // 1 + erf cancels for x << 0: hundreds of ulps at x = -3 in FP32.
            if (op == "gelu_erf" || op == "geglu") {
                EXPECT_FALSE(check_grid(k).pass) << k.name;
            }
            // Not vacuous: every result 2^-20 relative off fails (2^-18 for
            // the erf class, whose slack is about 2^-21 |x|).
            KernelInfo off = declared;
            const double factor = 1 + (arith_of(op) == "one_plus_erf" ? 0x1p-18 : 0x1p-20);
            off.fn = [inner = declared.fn, factor](const KernelCall& c) {
                inner(c);
                for (std::int64_t i = 0; i < c.out[0].numel(); ++i)
                    c.out[0].set_bits(i, encode(Format::fp32, c.out[0].value(i) * factor));
            };
            EXPECT_FALSE(check_grid(off).pass) << off.name;
        }
}

TEST(ActArith, SoftplusFormsPassUnderTheirClassAndLogOfOnePlusFails) {
    for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
        KernelInfo jax = textbook_kernel("softplus", f), torch = textbook_kernel("softplus_torch", f, 20);
        jax.conventions = torch.conventions = {{"act_arith", "log1p_exp"}};
        for (const KernelInfo& k : {jax, torch}) {
            const props::CaseResult r = check_grid(k);
            EXPECT_TRUE(r.pass) << k.name << ": " << r.message;
            EXPECT_EQ(r.not_judged, 0) << k.name;  // the class's bound stays below |y| everywhere
        }
        // log(1 + e^x) rounds 1 + e^x: 0 (and worse) for x << 0.  A threshold
        // of 8 returns x where log1p(e^-x) is still 3e-4: beyond FP32's ulps
        // (within FP16's and BF16's, where x is the rounded result).
        KernelInfo log_form = textbook_kernel("softplus_log", f), low = textbook_kernel("softplus_torch", f, 8);
        log_form.conventions = low.conventions = {{"act_arith", "log1p_exp"}};
        EXPECT_FALSE(check_grid(log_form).pass) << log_form.name;
        EXPECT_EQ(check_grid(low).pass, f != Format::fp32) << low.name;
    }
    // Sharp: the bound is a few ulps of y (2^-24 relative ones near
    // softplus(0) = ln 2, which the class holds to its ulps, not to 0).
    const double bound = oracle::softplus_error(0.0, std::log(2.0));
    EXPECT_GT(bound, 0x1p-24);
    EXPECT_LT(bound, 3 * 0x1p-24);
    EXPECT_LT(oracle::softplus_error(1.0, std::log1p(std::exp(1.0))), 5 * 0x1p-23);
    EXPECT_LT(oracle::softplus_error(-100.0, std::exp(-100.0)), 3 * 0x1p-149);
}

TEST(ActArith, SoftcapFormsPassUnderTheirClassAndTheUncappedFormFails) {
    for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
        KernelInfo wrong = textbook_kernel("softcap_wrong", f);
        wrong.conventions = {{"act_arith", "scaled_tanh"}};
        EXPECT_FALSE(check_grid(wrong).pass) << wrong.name;
    }
    // The bound: under 8 ulps of y near 0 (z = x / beta small: tanh ~ z, its
    // 2 ulps at the top of the range and the divide's 2u), and at the cap
    // between 1 and 5 ulps of 30 (2^-19): the 2-ulp tanh of 1, times beta.
    EXPECT_LT(oracle::softcap_error(1.0, 30 * std::tanh(1.0 / 30), 30), 8 * 0x1p-24);
    EXPECT_LT(oracle::softcap_error(300.0, 30 * std::tanh(10.0), 30), 5 * 0x1p-19);
    EXPECT_GT(oracle::softcap_error(300.0, 30 * std::tanh(10.0), 30), 0x1p-19);
}

TEST(ActArith, TheErfClassIsSharp) {
    // An erf 0.875 * 2^-20 off (the float nearest 0.9 * 2^-20 there) passes;
    // 1.1875 * 2^-20 fails: where 1 + erf is small the bound is ½|x| 2^-20 and
    // little else.
    for (const std::string op : {"gelu_erf", "geglu"}) {
        KernelInfo inside = textbook_kernel(op, Format::fp32, 0.9 * 0x1p-20), outside = textbook_kernel(op, Format::fp32, 1.2 * 0x1p-20);
        inside.conventions = outside.conventions = {{"act_arith", "one_plus_erf"}};
        const props::CaseResult in = check_grid(inside), out = check_grid(outside);
        EXPECT_TRUE(in.pass) << op << ": " << in.message;
        EXPECT_FALSE(out.pass) << op;
        EXPECT_NE(out.message.find("exceeds"), std::string::npos) << out.message;
    }
}

TEST(ActArith, ResultsTheClassCannotJudgeAreNotPassed) {
    // Deep in the negative tail ½|x| 2^-20 exceeds |gelu(x)|: the class says
    // nothing there, so a flushed or wrong-signed result is not judged, and a
    // correct one passes by its ulps.
    KernelInfo k = textbook_kernel("gelu_erf", Format::fp32);
    k.conventions = {{"act_arith", "one_plus_erf"}};
    const KernelFn inner = k.fn;
    k.fn = [inner](const KernelCall& c) {
        inner(c);
        c.out[0].set_bits(0, encode(Format::fp32, 1e-9));  // x = -12: gelu = -2.1e-32
    };
    Tensor x(Format::fp32, {1, 2});
    x.set_value(0, -12.0), x.set_value(1, -2.0);
    props::Stats stats;
    const props::CaseResult r = props::check_case(k, Params{}, {x.view()}, &stats);
    EXPECT_TRUE(r.pass) << r.message;
    EXPECT_EQ(r.not_judged, 1);
    EXPECT_EQ(r.judged, 1);
    ASSERT_EQ(stats.not_judged_reasons().size(), 1u);
    EXPECT_NE(stats.not_judged_reasons().begin()->first.find("bound at least"), std::string::npos)
        << stats.not_judged_reasons().begin()->first;
    // Beyond the bound it still fails: the class allows about ±5.7e-6 there.
    k.fn = [inner](const KernelCall& c) {
        inner(c);
        c.out[0].set_bits(0, encode(Format::fp32, 1.0));
    };
    EXPECT_FALSE(props::check_case(k, Params{}, {x.view()}).pass);
    // At a zero input the class's result is exactly ±0: anything else fails.
    x.set_value(0, 0.0);
    EXPECT_FALSE(props::check_case(k, Params{}, {x.view()}).pass);
    k.fn = inner;
    EXPECT_TRUE(props::check_case(k, Params{}, {x.view()}).pass);
}

TEST(ActArith, DeclarationsMustFitTheOp) {
    EXPECT_NO_THROW(check_conventions({{"act_arith", "quotient"}}, "silu"));
    EXPECT_NO_THROW(check_conventions({{"act_arith", "one_plus_erf"}}, "geglu"));
    EXPECT_NO_THROW(check_conventions({{"act_arith", "one_plus_tanh"}, {"gelu", "tanh"}}, "geglu"));
    EXPECT_THROW(check_conventions({{"act_arith", "one_plus_tanh"}}, "geglu"), std::invalid_argument);
    EXPECT_THROW(check_conventions({{"act_arith", "quotient"}}, "gelu_erf"), std::invalid_argument);
    EXPECT_THROW(check_conventions({{"act_arith", "one_plus_erf"}}, "softplus"), std::invalid_argument);
    EXPECT_THROW(check_conventions({{"act_arith", "log1p_exp"}}, "silu"), std::invalid_argument);
    EXPECT_NO_THROW(check_conventions({{"act_arith", "log1p_exp"}}, "softplus"));
    EXPECT_NO_THROW(check_conventions({{"act_arith", "scaled_tanh"}}, "softcap"));
    EXPECT_THROW(check_conventions({{"act_arith", "scaled_tanh"}}, "gelu_tanh"), std::invalid_argument);
    // A kernel whose declarations were never checked (built in code) is held
    // to the same fit: the erf class on a geglu of the tanh GELU is refused.
    KernelInfo mixed = textbook_kernel("geglu_tanh", Format::fp32);
    mixed.conventions["act_arith"] = "one_plus_erf";
    Tensor g(Format::fp32, {1, 2}), up(Format::fp32, {1, 2});
    g.set_value(0, 0.5), g.set_value(1, -3.0), up.set_value(0, 1.5), up.set_value(1, 1.5);
    EXPECT_THROW(props::check_case(mixed, Params{}, {g.view(), up.view()}), std::invalid_argument);
    // The classes read their inputs exactly in FP32: FP64 inputs are refused.
    KernelInfo wide = textbook_kernel("silu", Format::fp64);
    wide.conventions = {{"act_arith", "quotient"}};
    Tensor x(Format::fp64, {1, 2});
    x.set_value(0, 0.1), x.set_value(1, -3.0);
    EXPECT_THROW(props::check_case(wide, Params{}, {x.view()}), std::invalid_argument);
    // An exhaustive sweep judges 1 ulp only: it refuses the declaration.
    KernelInfo k = textbook_kernel("gelu_erf", Format::bf16);
    k.conventions = {{"act_arith", "one_plus_erf"}};
    EXPECT_THROW(props::sweep_unary(k, Params{}), std::invalid_argument);
}

TEST(ActArith, InferenceNamesTheClassOfAnErfFormKernel) {
    KernelInfo k = textbook_kernel("gelu_erf", Format::fp32);
    props::RunConfig cfg;
    cfg.cases = 30;
    cfg.shrink = false;
    cfg.infer_conventions = true;
    const report::KernelReport r = props::run_suite(k, cfg);
    EXPECT_FALSE(r.passed);
    EXPECT_EQ(r.convention_match, "act_arith=one_plus_erf");
    k.conventions = {{"act_arith", "one_plus_erf"}};
    const report::KernelReport declared = props::run_suite(k, cfg);
    for (const auto& p : declared.properties) EXPECT_TRUE(p.passed) << p.name << ": " << p.message;
}

TEST(ActArith, InferenceNamesTheClassAndIeeeSpecialsTogether) {
    // As the libraries build it: the erf form in float, and gelu(-inf) = NaN.
    // No single declaration explains it; the pair does.
    const KernelInfo k = textbook_kernel("gelu_erf", Format::fp32, 0, true);
    props::RunConfig cfg;
    cfg.cases = 30;
    cfg.shrink = false;
    const report::KernelReport r = props::run_suite(k, cfg);
    EXPECT_FALSE(r.passed);
    EXPECT_EQ(r.convention_match, "act_arith=one_plus_erf, special_values=ieee");
    const auto pairs = convention_pairs("silu", {});
    ASSERT_EQ(pairs.size(), 1u);
    EXPECT_EQ(pairs[0].first, "act_arith=quotient, special_values=ieee");
    // geglu: (special_values=ieee, gelu=tanh), (special_values=ieee, act_arith=one_plus_erf), and
    // (gelu=tanh, act_arith=one_plus_tanh), though one_plus_tanh alone does not fit the erf GELU.
    EXPECT_EQ(convention_pairs("geglu", {}).size(), 3u);
    EXPECT_TRUE(convention_pairs("rms_norm", {}).empty());
}

}  // namespace conventions_test
