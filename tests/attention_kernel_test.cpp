// CPU attention kernels against the oracle within the derived flash budget
// (oracle/attention_bound.hpp), tile-size invariance, causality (hidden keys
// and values never leak), GQA = MHA with KV replicated, the naive baseline's
// special rows, and the mutants (each must fail at least one case).
//
// Cases are small (the MPFR oracle runs at 128 bits, ~2M mul-adds per format)
// but cover GQA/MQA, Lq < Lk and Lq > Lk with causal masks, sliding windows
// whose first key tiles are hidden, softcap, additive masks with -inf and
// fully masked rows, rows crossing several key tiles, shapes that are not
// multiples of 8 or of the tiles, and logits of +-1e4 after scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cpu/attention.hpp"
#include "oracle/attention.hpp"
#include "oracle/attention_bound.hpp"
#include "oracle/bound.hpp"
#include "properties/verdict.hpp"

namespace attention_kernel_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Format kFormats[] = {Format::fp32, Format::fp16, Format::bf16};

enum class Dist { normal, uniform, heavy, ramp, large };
enum class Mask { none, neg_inf, finite };

struct Case {
    std::string name;
    std::int64_t hq, hkv, lq, lk, d, dv;
    std::map<std::string, double> params;
    Dist dist = Dist::normal;
    Mask mask = Mask::none;
};

// Every case is cheap for the oracle: Hq Lq Lk (D + Dv) <= ~6e5.
const std::vector<Case>& cases() {
    static const std::vector<Case> c = {
        {"mha_square", 2, 2, 37, 37, 16, 16, {}, Dist::normal},
        {"gqa4_causal_lq_lt_lk", 8, 2, 20, 45, 20, 12, {{"causal", 1}}, Dist::normal},
        {"mqa_causal_lq_gt_lk", 4, 1, 45, 20, 13, 9, {{"causal", 1}}, Dist::uniform},
        {"window5_square", 2, 1, 70, 70, 16, 8, {{"window", 5}}, Dist::normal},
        {"window20_lq_lt_lk", 4, 2, 9, 100, 8, 8, {{"window", 20}, {"causal", 1}}, Dist::uniform},
        {"softcap5", 2, 2, 30, 30, 32, 16, {{"softcap", 5}}, Dist::uniform},
        {"mask_neg_inf_rows", 2, 1, 12, 90, 16, 16, {}, Dist::heavy, Mask::neg_inf},
        {"large_logits", 1, 1, 8, 50, 4, 8, {{"scale", 0.25}}, Dist::large},
        {"ramp_causal_300", 1, 1, 3, 300, 32, 16, {{"causal", 1}}, Dist::ramp},
        {"long_row_520", 2, 1, 2, 520, 16, 16, {}, Dist::normal},
        {"heavy_mha", 4, 4, 17, 33, 24, 24, {}, Dist::heavy},
        {"causal_window_softcap_mask", 4, 2, 50, 50, 16, 16, {{"causal", 1}, {"window", 7}, {"softcap", 3}},
         Dist::normal, Mask::finite},
        {"scale03_tile_edge_129", 2, 1, 5, 129, 8, 8, {{"scale", 0.3}}, Dist::normal},
        {"mqa_decode", 8, 1, 1, 200, 32, 32, {{"causal", 1}}, Dist::normal},
        {"mha8_d64", 8, 8, 24, 24, 64, 64, {}, Dist::uniform},
        {"large_logits_causal_masked_rows", 2, 1, 16, 70, 4, 8, {{"causal", 1}, {"scale", 0.25}}, Dist::large,
         Mask::neg_inf},
    };
    return c;
}

// ---- inputs -----------------------------------------------------------------------

double draw(Dist dist, std::mt19937_64& g) {
    switch (dist) {
        case Dist::uniform: return std::uniform_real_distribution<double>(-3, 3)(g);
        case Dist::heavy: return std::clamp(std::student_t_distribution<double>(2)(g), -50.0, 50.0);
        case Dist::large: return std::uniform_real_distribution<double>(-100, 100)(g);
        default: return std::normal_distribution<double>()(g);
    }
}

Tensor filled(Format f, std::vector<std::int64_t> shape, std::mt19937_64& g, Dist dist) {
    Tensor t(f, std::move(shape));
    for (std::int64_t e = 0; e < t.numel(); ++e) t.set_value(e, draw(dist, g));
    return t;
}

// Ramp: q = 1 and k_j = 4 j / Lk (+ noise), so the logits grow with j and the
// running max moves in every key tile (the rescale path is exercised).
void make_ramp(Tensor& q, Tensor& k, std::int64_t lk, std::int64_t d, std::mt19937_64& g) {
    std::normal_distribution<double> noise(0, 0.05);
    for (std::int64_t e = 0; e < q.numel(); ++e) q.set_value(e, 1.0);
    for (std::int64_t e = 0; e < k.numel(); ++e) k.set_value(e, 4.0 * ((e / d) % lk) / static_cast<double>(lk) + noise(g));
}

// -inf with probability 0.3 else N(0, 2); rows 0 and Lq/2 fully -inf; row 1
// with a -inf prefix of 40 keys (a hidden first key tile).
Tensor make_mask(Format f, const Case& c, std::mt19937_64& g) {
    Tensor m(f, {c.lq, c.lk});
    std::uniform_real_distribution<double> u(0, 1);
    std::normal_distribution<double> n(0, c.mask == Mask::finite ? 3 : 2);
    for (std::int64_t i = 0; i < c.lq; ++i)
        for (std::int64_t j = 0; j < c.lk; ++j) {
            double v = n(g);
            if (c.mask == Mask::neg_inf && (u(g) < 0.3 || i == 0 || i == c.lq / 2 || (i == 1 && j < 40))) v = -kInf;
            m.set_value(i * c.lk + j, v);
        }
    return m;
}

// One case in one format: the inputs and the oracle's outputs (rounded to double).
struct Data {
    const Case* c = nullptr;
    Format f = Format::fp32;
    Params params;
    std::vector<Tensor> in;
    oracle::OpOutputs exact;
    std::vector<double> o, lse;
    std::vector<TensorView> views() const {
        std::vector<TensorView> v;
        for (const Tensor& t : in) v.push_back(t.view());
        return v;
    }
};

Data make_data(const Case& c, std::size_t index, Format f) {
    std::mt19937_64 g(1000 + index);
    Data data{&c, f, Params(c.params), {}, {}, {}, {}};
    Tensor q = filled(f, {c.hq, c.lq, c.d}, g, c.dist), k = filled(f, {c.hkv, c.lk, c.d}, g, c.dist);
    if (c.dist == Dist::ramp) make_ramp(q, k, c.lk, c.d, g);
    Tensor v = filled(f, {c.hkv, c.lk, c.dv}, g, c.dist == Dist::large ? Dist::normal : c.dist);
    data.in = {std::move(q), std::move(k), std::move(v)};
    if (c.mask != Mask::none) data.in.push_back(make_mask(f, c, g));
    oracle::PrecisionScope scope(128);
    data.exact = oracle::eval_attention(data.params, data.views());
    for (const auto& x : data.exact.values[0]) data.o.push_back(oracle::to_double(x));
    for (const auto& x : data.exact.values[1]) data.lse.push_back(oracle::to_double(x));
    return data;
}

// Oracle results are computed once per (case, format) and shared by the tests.
const Data& data(std::size_t index, Format f) {
    static std::map<std::pair<std::size_t, Format>, Data> cache;
    auto key = std::make_pair(index, f);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, make_data(cases()[index], index, f)).first;
    return it->second;
}

// ---- running and judging -------------------------------------------------------------

struct Outputs {
    Tensor o, lse;
};

Outputs run(const KernelInfo& k, const Data& d, const Params& params, const std::vector<TensorView>& in) {
    const Case& c = *d.c;
    Outputs r{Tensor(k.out, {c.hq, c.lq, c.dv}), Tensor(Format::fp32, {c.hq, c.lq})};  // lse is fp32
    k.fn(KernelCall{params, in, {r.o.view(), r.lse.view()}});
    return r;
}
Outputs run(const KernelInfo& k, const Data& d) { return run(k, d, d.params, d.views()); }

oracle::FlashErrorModel model(Format f, std::int64_t key_block) {
    oracle::FlashErrorModel m;
    m.out = f;
    m.key_block = key_block;
    return m;
}

struct Verdict {
    double max_util = 0;
    std::string fail;  // empty: every element within its bound, special values in their class
};

// Element e: NaN bound or exact NaN -> the kernel must give NaN; exact +-inf
// -> exactly that; otherwise finite with |err| <= bound.
void judge_element(Verdict& v, const char* what, std::int64_t e, double got, double exact, double bound) {
    bool ok;
    if (std::isnan(bound) || std::isnan(exact)) {
        ok = std::isnan(got);
    } else if (std::isinf(exact)) {
        ok = got == exact;
    } else {
        const double err = std::fabs(got - exact);
        ok = std::isfinite(got) && err <= bound;
        if (std::isfinite(got)) v.max_util = std::max(v.max_util, bound > 0 ? err / bound : (err > 0 ? kInf : 0));
    }
    if (!ok && v.fail.empty()) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s[%lld] = %.9g, exact %.9g, bound %.3g", what, static_cast<long long>(e), got,
                      exact, bound);
        v.fail = buf;
    }
}

Verdict judge(const Data& d, const Outputs& out, const std::vector<double>& bound) {
    Verdict v;
    const std::size_t n_o = d.o.size();
    for (std::size_t e = 0; e < n_o; ++e) judge_element(v, "o", e, out.o.value(e), d.o[e], bound[e]);
    for (std::size_t e = 0; e < d.lse.size(); ++e) judge_element(v, "lse", e, out.lse.value(e), d.lse[e], bound[n_o + e]);
    return v;
}

Verdict check(const KernelInfo& k, const Data& d, std::int64_t key_block, const Params& params) {
    const Outputs out = run(k, d, params, d.views());
    return judge(d, out, oracle::attention_bound(d.params, d.views(), d.exact, model(k.out, key_block)));
}

// The kernels and mutants as a list (the hooks that add the same to a
// Registry, as builtin_registry() does, are checked by RegisterHooks below).
const std::vector<KernelInfo>& all_kernels() {
    static const std::vector<KernelInfo> all = [] {
        std::vector<KernelInfo> v = cpu_attention_kernels();
        for (KernelInfo& k : attention_mutants()) v.push_back(std::move(k));
        return v;
    }();
    return all;
}

const KernelInfo* find_kernel(const std::string& n) {
    for (const KernelInfo& k : all_kernels())
        if (k.name == n) return &k;
    return nullptr;
}

std::vector<const KernelInfo*> select(Role role, const std::string& variant = "") {
    std::vector<const KernelInfo*> r;
    for (const KernelInfo& k : all_kernels())
        if (k.op == "attention" && k.role == role && (variant.empty() || k.variant == variant)) r.push_back(&k);
    return r;
}

std::vector<const KernelInfo*> kernels(const std::string& variant) { return select(Role::kernel, variant); }

bool bits_equal(const Tensor& a, const Tensor& b, std::int64_t from, std::int64_t count) {
    for (std::int64_t e = from; e < from + count; ++e)
        if (a.bits(e) != b.bits(e)) return false;
    return true;
}

}  // namespace

TEST(AttentionKernel, RegistersSimdScalarNaiveAndMutantsPerFormat) {
    for (Format f : kFormats) {
        for (const char* v : {"simd", "scalar", "naive"}) {
            const KernelInfo* k = find_kernel(std::string("cpu.") + v + ".attention." + name(f));
            ASSERT_NE(k, nullptr) << v << " " << name(f);
            EXPECT_EQ(k->role, std::string(v) == "naive" ? Role::baseline : Role::kernel);
        }
    }
    EXPECT_EQ(select(Role::mutant).size(), 27u);
    for (const KernelInfo* k : select(Role::mutant)) EXPECT_FALSE(k->bug_class.empty()) << k->name;
}

// The hooks add every kernel once the op is declared, and refuse loudly before.
TEST(AttentionKernel, RegisterHooks) {
    Registry reg;
    if (!find_op("attention")) {
        EXPECT_THROW(register_cpu_attention(reg), std::logic_error);
        EXPECT_THROW(register_mutants_attention(reg), std::logic_error);
        return;
    }
    register_cpu_attention(reg);
    register_mutants_attention(reg);
    EXPECT_EQ(reg.all().size(), all_kernels().size());
}

// The gate: every cpu.simd and cpu.scalar kernel, every case, utilization <= 1.
TEST(AttentionKernel, KernelsWithinDerivedBound) {
    for (const std::string variant : {"simd", "scalar"}) {
        for (const KernelInfo* k : kernels(variant)) {
            double worst = 0;
            std::string worst_case;
            for (std::size_t i = 0; i < cases().size(); ++i) {
                const Data& d = data(i, k->in);
                const Verdict v = check(*k, d, cpu::kAttnKeyTile, d.params);
                EXPECT_TRUE(v.fail.empty()) << k->name << " case " << d.c->name << ": " << v.fail;
                EXPECT_LE(v.max_util, 1.0) << k->name << " case " << d.c->name;
                if (v.max_util > worst) worst = v.max_util, worst_case = d.c->name;
            }
            std::printf("[ util     ] %-28s max utilization %.3g (%s)\n", k->name.c_str(), worst, worst_case.c_str());
            RecordProperty(k->name + ".max_utilization", std::to_string(worst));
        }
    }
}

// Key tiles of 1, 8, 24 and 1000 (one tile) keys: each within its own budget
// (N_b from its tile), and each within the sum of both budgets of the default tile.
TEST(AttentionKernel, KeyTileSizeInvariance) {
    for (const KernelInfo* k : kernels("simd")) {
        double worst = 0, worst_diff = 0;
        for (std::size_t i = 0; i < cases().size(); ++i) {
            const Data& d = data(i, k->in);
            const Outputs base = run(*k, d);
            const std::vector<double> b0 =
                oracle::attention_bound(d.params, d.views(), d.exact, model(k->out, cpu::kAttnKeyTile));
            for (std::int64_t block : {1, 8, 24, 1000}) {
                Params p = d.params;
                p.set("block", static_cast<double>(block));
                const Outputs out = run(*k, d, p, d.views());
                const std::vector<double> b = oracle::attention_bound(d.params, d.views(), d.exact, model(k->out, block));
                const Verdict v = judge(d, out, b);
                EXPECT_TRUE(v.fail.empty()) << k->name << " block " << block << " case " << d.c->name << ": " << v.fail;
                worst = std::max(worst, v.max_util);
                for (std::int64_t e = 0; e < out.o.numel(); ++e) {
                    const double x = out.o.value(e), y = base.o.value(e);
                    if (std::isnan(x) || std::isnan(y) || x == y) {
                        EXPECT_EQ(std::isnan(x), std::isnan(y)) << k->name << " block " << block << " o[" << e << "]";
                        continue;
                    }
                    EXPECT_LE(std::fabs(x - y), b[e] + b0[e]) << k->name << " block " << block << " o[" << e << "]";
                    worst_diff = std::max(worst_diff, std::fabs(x - y) / (b[e] + b0[e]));
                }
            }
        }
        std::printf("[ tiles    ] %-28s max utilization %.3g, max diff / (2 budgets) %.3g\n", k->name.c_str(), worst,
                    worst_diff);
    }
}

// Keys and values outside row i's visible range (after pos_i; before the
// window) replaced by huge keys and NaN values: row i stays bit-identical.
TEST(AttentionKernel, HiddenKeysAndValuesDoNotLeak) {
    int checked = 0;
    for (const std::string variant : {"simd", "scalar"}) {
        for (const KernelInfo* k : kernels(variant)) {
            for (std::size_t ci = 0; ci < cases().size(); ++ci) {
                const Case& c = cases()[ci];
                const bool causal = c.params.count("causal") || c.params.count("window");
                if (!causal) continue;
                const Data& d = data(ci, k->in);
                const Outputs base = run(*k, d);
                const std::int64_t w = c.params.count("window") ? static_cast<std::int64_t>(c.params.at("window")) : 0;
                for (std::int64_t i : {std::int64_t{0}, c.lq / 2, c.lq - 1}) {
                    const std::int64_t pos = oracle::query_position(i, c.lq, c.lk);
                    std::vector<Tensor> in = d.in;
                    for (std::int64_t h = 0; h < c.hkv; ++h)
                        for (std::int64_t j = 0; j < c.lk; ++j) {
                            if (oracle::key_visible(i, j, c.lq, c.lk, true, w)) continue;
                            for (std::int64_t t = 0; t < c.d; ++t) in[1].set_value((h * c.lk + j) * c.d + t, 60000.0);
                            for (std::int64_t t = 0; t < c.dv; ++t)
                                in[2].set_value((h * c.lk + j) * c.dv + t, std::nan(""));
                        }
                    std::vector<TensorView> views;
                    for (const Tensor& t : in) views.push_back(t.view());
                    const Outputs out = run(*k, d, d.params, views);
                    for (std::int64_t h = 0; h < c.hq; ++h) {
                        const std::int64_t row = h * c.lq + i;
                        EXPECT_TRUE(bits_equal(out.o, base.o, row * c.dv, c.dv))
                            << k->name << " case " << c.name << " head " << h << " row " << i << " (pos " << pos << ")";
                        EXPECT_TRUE(bits_equal(out.lse, base.lse, row, 1)) << k->name << " case " << c.name;
                    }
                    ++checked;
                }
            }
        }
    }
    EXPECT_GT(checked, 0);
}

// An infinite v at a visible key whose weight underflows (a logit 200 below
// the row's maximum): the exact weight is positive, so o is infinite in that
// column -- never 0 * inf = NaN -- in the vector path (the careful
// accumulation of a KV head with an infinity) and the scalar one, with the
// key first (its weight then rescaled to 0 by the later maximum) or later.
TEST(AttentionKernel, AnInfiniteValueCountsWhereItsWeightUnderflows) {
    for (const std::string variant : {"simd", "scalar"})
        for (const KernelInfo* k : kernels(variant))
            for (std::int64_t key : {0, 5}) {
                const std::int64_t lq = 2, lk = 40, d = 16;
                std::vector<Tensor> in = {Tensor(k->in, {1, lq, d}), Tensor(k->in, {1, lk, d}), Tensor(k->in, {1, lk, d}),
                                          Tensor(k->in, {lq, lk})};
                std::mt19937_64 g(3);
                std::normal_distribution<double> n;
                for (std::int64_t i = 0; i < in[1].numel(); ++i) in[1].set_value(i, n(g)), in[2].set_value(i, n(g));
                for (std::int64_t i = 0; i < in[0].numel(); ++i) in[0].set_value(i, 0.0);  // logits = the mask
                for (std::int64_t i = 0; i < in[3].numel(); ++i) in[3].set_value(i, 0.0);
                in[3].set_value(key, -200.0), in[3].set_value(lk + key, -200.0);
                in[2].set_value(key * d + 3, INFINITY);
                std::vector<TensorView> views;
                for (const Tensor& t : in) views.push_back(t.view());
                const props::CaseResult r = props::check_case(*k, Params::defaults(*find_op("attention")), views);
                EXPECT_TRUE(r.pass) << k->name << " key " << key << ": " << r.message;
            }
}

// Zero logits weigh three keys alike; two values at the format's max in
// column 0 make the unnormalized sum exp(s_j - m) v_j overflow FP32 though
// o, 2/3 of max, does not: that column is undefined (not judged), the
// others judged, and every kernel passes whatever it returns there.
TEST(AttentionKernel, AnUnnormalizedSumPastFp32IsNotJudged) {
    for (const std::string variant : {"simd", "scalar"})
        for (const KernelInfo* k : kernels(variant)) {
            const std::int64_t lk = 3, d = 4;
            std::vector<Tensor> in = {Tensor(k->in, {1, 1, d}), Tensor(k->in, {1, lk, d}), Tensor(k->in, {1, lk, d})};
            std::mt19937_64 g(4);
            std::normal_distribution<double> n;
            for (std::int64_t i = 0; i < in[1].numel(); ++i) in[1].set_value(i, n(g)), in[2].set_value(i, n(g));
            for (std::int64_t i = 0; i < d; ++i) in[0].set_value(i, 0.0);
            in[2].set_value(0, max_finite(k->in)), in[2].set_value(d, max_finite(k->in)), in[2].set_value(2 * d, 0.0);
            std::vector<TensorView> views;
            for (const Tensor& t : in) views.push_back(t.view());
            const props::CaseResult r = props::check_case(*k, Params::defaults(*find_op("attention")), views);
            EXPECT_TRUE(r.pass) << k->name << ": " << r.message;
            // FP16's max is far inside FP32's range: all judged there.
            const bool past = k->in != Format::fp16;
            EXPECT_EQ(r.not_judged, past ? 1 : 0) << k->name;
            EXPECT_EQ(r.judged, past ? d : d + 1) << k->name;  // o's other columns and the lse
        }
}

// A logit past FP32's range: q = (1e20, 1/2), key 0 = (-1e20, 1/4), whose
// exact logit -1e40 / sqrt(2) is finite, so its weight is positive and an
// infinite v there makes o = +inf -- but FP32's dot product is -inf, the key
// is hidden and a kernel returns key 1's value.  No FP32 kernel can compute
// that row: it is not judged.  Row 1 (q = (1/4, 1): logit -2.5e19 / sqrt(2),
// within FP32) is, its o +inf as well.
TEST(AttentionKernel, ALogitPastFp32IsNotJudged) {
    for (const std::string variant : {"simd", "scalar"}) {
        const KernelInfo* k = find_kernel("cpu." + variant + ".attention.fp32");
        ASSERT_NE(k, nullptr);
        std::vector<Tensor> in = {Tensor(Format::fp32, {1, 2, 2}), Tensor(Format::fp32, {1, 2, 2}), Tensor(Format::fp32, {1, 2, 1})};
        const double q[] = {1e20, 0.5, 0.25, 1}, kk[] = {-1e20, 0.25, 1, 0.5};
        for (std::int64_t i = 0; i < 4; ++i) in[0].set_value(i, q[i]), in[1].set_value(i, kk[i]);
        in[2].set_value(0, INFINITY), in[2].set_value(1, 3.0);
        std::vector<TensorView> views;
        for (const Tensor& t : in) views.push_back(t.view());
        const props::CaseResult r = props::check_case(*k, Params::defaults(*find_op("attention")), views);
        EXPECT_TRUE(r.pass) << k->name << ": " << r.message;
        EXPECT_EQ(r.not_judged, 2) << k->name;  // row 0's o and lse
        EXPECT_EQ(r.judged, 2) << k->name;      // row 1's
    }
}

// An infinite product beside a finite one past FP32: q = (1e20, -inf),
// key 0 = (1e20, 1/4).  The exact logit is -inf (the key hidden), but an
// FP32 dot product reaches +inf first and then NaN.  Row 0 is not judged;
// row 1 (q = (1/4, 1), no overflow) is.  Seed 2838263984 found it through
// compressed attention's core attention.
TEST(AttentionKernel, AnInfiniteProductBesideAnOverflowIsNotJudged) {
    for (const std::string variant : {"simd", "scalar"}) {
        const KernelInfo* k = find_kernel("cpu." + variant + ".attention.fp32");
        ASSERT_NE(k, nullptr);
        std::vector<Tensor> in = {Tensor(Format::fp32, {1, 2, 2}), Tensor(Format::fp32, {1, 2, 2}), Tensor(Format::fp32, {1, 2, 1})};
        const double q[] = {1e20, -INFINITY, 0.25, 1}, kk[] = {1e20, 0.25, 1, 0.5};
        for (std::int64_t i = 0; i < 4; ++i) in[0].set_value(i, q[i]), in[1].set_value(i, kk[i]);
        in[2].set_value(0, 2.0), in[2].set_value(1, 3.0);
        std::vector<TensorView> views;
        for (const Tensor& t : in) views.push_back(t.view());
        const props::CaseResult r = props::check_case(*k, Params::defaults(*find_op("attention")), views);
        EXPECT_TRUE(r.pass) << k->name << ": " << r.message;
        EXPECT_EQ(r.not_judged, 2) << k->name;
        EXPECT_EQ(r.judged, 2) << k->name;
    }
}

// The same overflow under a running maximum: two values at 0.9 of FP32's
// max under logit 0 in the first key tile, a key of logit 10 in a later
// one.  The kernel's first tile overflows before the larger maximum scales
// it down, though l times the output's magnitude (about 2 e^-10 max) does
// not: every order's peak (the keys up to each logit, scaled to it) counts.
TEST(AttentionKernel, AnAccumulatorPastFp32UnderARunningMaximumIsNotJudged) {
    for (const std::string variant : {"simd", "scalar"}) {
        const KernelInfo* k = find_kernel("cpu." + variant + ".attention.fp32");
        ASSERT_NE(k, nullptr);
        const std::int64_t lk = 200;
        std::vector<Tensor> in = {Tensor(Format::fp32, {1, 1, 1}), Tensor(Format::fp32, {1, lk, 1}), Tensor(Format::fp32, {1, lk, 1})};
        in[0].set_value(0, 1.0);
        for (std::int64_t j = 0; j < lk; ++j) in[1].set_value(j, j < 2 ? 0.0 : j == 150 ? 10.0 : -30.0), in[2].set_value(j, 0.0);
        in[2].set_value(0, 0.9 * max_finite(Format::fp32)), in[2].set_value(1, 0.9 * max_finite(Format::fp32));
        std::vector<TensorView> views;
        for (const Tensor& t : in) views.push_back(t.view());
        const props::CaseResult r = props::check_case(*k, Params::defaults(*find_op("attention")), views);
        EXPECT_TRUE(r.pass) << k->name << ": " << r.message;
        EXPECT_EQ(r.not_judged, 1) << k->name << " o = " << r.outputs[0].value(0);
    }
}

// GQA (and MQA) give bit for bit what MHA gives with KV heads repeat-interleaved.
TEST(AttentionKernel, GqaEqualsMhaWithKvReplicated) {
    for (const KernelInfo* k : kernels("simd")) {
        for (std::size_t ci = 0; ci < cases().size(); ++ci) {
            const Case& c = cases()[ci];
            if (c.hkv == c.hq) continue;
            const Data& d = data(ci, k->in);
            const std::int64_t g = c.hq / c.hkv;
            std::vector<Tensor> in = d.in;
            for (int x : {1, 2}) {
                const std::int64_t cols = x == 1 ? c.d : c.dv, per = c.lk * cols;
                Tensor rep(k->in, {c.hq, c.lk, cols});
                for (std::int64_t h = 0; h < c.hq; ++h)
                    for (std::int64_t e = 0; e < per; ++e) rep.set_bits(h * per + e, d.in[x].bits((h / g) * per + e));
                in[x] = std::move(rep);
            }
            std::vector<TensorView> views;
            for (const Tensor& t : in) views.push_back(t.view());
            const Outputs mha = run(*k, d, d.params, views), gqa = run(*k, d);
            EXPECT_TRUE(bits_equal(mha.o, gqa.o, 0, mha.o.numel())) << k->name << " case " << c.name;
            EXPECT_TRUE(bits_equal(mha.lse, gqa.lse, 0, mha.lse.numel())) << k->name << " case " << c.name;
        }
    }
}

// The naive baseline is reported, not gated: it must still keep the special
// rows (fully masked -> (0, -inf)) and be finite elsewhere.
TEST(AttentionKernel, NaiveBaselineKeepsConventions) {
    for (const KernelInfo* k : select(Role::baseline)) {
        double worst = 0;
        for (std::size_t i = 0; i < cases().size(); ++i) {
            const Data& d = data(i, k->in);
            const Outputs out = run(*k, d);
            for (std::size_t e = 0; e < d.lse.size(); ++e) {
                if (std::isinf(d.lse[e])) {
                    EXPECT_EQ(out.lse.value(e), -kInf) << k->name << " " << d.c->name << " row " << e;
                    for (std::int64_t t = 0; t < d.c->dv; ++t) EXPECT_EQ(out.o.value(e * d.c->dv + t), 0.0);
                } else {
                    EXPECT_TRUE(std::isfinite(out.lse.value(e))) << k->name << " " << d.c->name << " row " << e;
                }
            }
            const Verdict v = judge(d, out, oracle::attention_bound(d.params, d.views(), d.exact, model(k->out, 0)));
            worst = std::max(worst, v.max_util);
        }
        std::printf("[ baseline ] %-28s max utilization %.3g (not gated)\n", k->name.c_str(), worst);
    }
}

// Every mutant fails at least one case (within bound, N_b = Lk: the most
// generous budget, so a kill is the bug, not the model).
TEST(AttentionKernel, EveryMutantIsKilled) {
    const auto mutants = select(Role::mutant);
    ASSERT_EQ(mutants.size(), 27u);
    for (const KernelInfo* k : mutants) {
        std::string killers;
        for (std::size_t i = 0; i < cases().size(); ++i) {
            const Data& d = data(i, k->in);
            if (!check(*k, d, 0, d.params).fail.empty()) killers += (killers.empty() ? "" : ", ") + d.c->name;
        }
        EXPECT_FALSE(killers.empty()) << k->name << " survived every case";
        std::printf("[ mutant   ] %-42s killed by: %s\n", k->name.c_str(), killers.c_str());
    }
}

// ---- logits in the model's format (docs/attention.md, "Logits in a narrower format") ----

namespace {

double in_format(Format f, double x) { return decode(f, encode(f, x)); }
// x rounded to nearest with `bits` significand bits (no range limits): a
// format "twice as inaccurate" as one with bits + 1.
double to_bits(int bits, double x) {
    if (x == 0 || !std::isfinite(x)) return x;
    const int e = std::ilogb(x) - (bits - 1);
    return std::ldexp(std::nearbyint(std::ldexp(x, -e)), e);
}

// PyTorch's eager attention in a narrow format f (transformers'
// eager_attention_forward): the FP32-accumulated q.k rounded to f, times the
// scale, the softcap's divide, tanh and multiply, the mask add, each rounded
// by `logit` (f, or a coarser rounding); softmax in FP32, the weights rounded
// to f, P V accumulated in FP32 and rounded to f; lse in FP32.
template <class Round>
Outputs eager_attention(const Data& d, Format f, Round logit) {
    const Case& c = *d.c;
    const auto r = [&](double x) { return logit(static_cast<float>(x)); };
    const float scale = static_cast<float>(c.params.count("scale") ? c.params.at("scale") : 1 / std::sqrt(double(c.d)));
    const float cap = static_cast<float>(c.params.count("softcap") ? c.params.at("softcap") : 0);
    const bool causal = c.params.count("causal") && c.params.at("causal") != 0;
    const auto window = static_cast<std::int64_t>(c.params.count("window") ? c.params.at("window") : 0);
    Outputs out{Tensor(f, {c.hq, c.lq, c.dv}), Tensor(Format::fp32, {c.hq, c.lq})};
    std::vector<float> s(c.lk);
    for (std::int64_t h = 0; h < c.hq; ++h)
        for (std::int64_t i = 0; i < c.lq; ++i) {
            const std::int64_t g = oracle::kv_head_of(h, c.hq, c.hkv), row = h * c.lq + i;
            float m = -INFINITY;
            for (std::int64_t j = 0; j < c.lk; ++j) {
                const double mk = d.in.size() > 3 ? d.in[3].value(i * c.lk + j) : 0;
                if (!oracle::key_visible(i, j, c.lq, c.lk, causal, window) || mk == -kInf) {
                    s[j] = -INFINITY;
                    continue;
                }
                float dot = 0;
                for (std::int64_t t = 0; t < c.d; ++t)
                    dot += static_cast<float>(d.in[0].value(row * c.d + t)) * static_cast<float>(d.in[1].value((g * c.lk + j) * c.d + t));
                float x = r(r(dot) * scale);
                if (cap > 0) x = r(r(std::tanh(r(x / cap))) * cap);
                s[j] = d.in.size() > 3 ? r(x + static_cast<float>(mk)) : x;
                m = std::max(m, s[j]);
            }
            if (m == -INFINITY) {  // a fully hidden row: o = 0, lse = -inf (the op's default)
                for (std::int64_t t = 0; t < c.dv; ++t) out.o.set_value(row * c.dv + t, 0.0);
                out.lse.set_value(row, -kInf);
                continue;
            }
            float l = 0;
            for (std::int64_t j = 0; j < c.lk; ++j) l += s[j] == -INFINITY ? 0.0f : std::exp(s[j] - m);
            for (std::int64_t t = 0; t < c.dv; ++t) {
                float acc = 0;
                for (std::int64_t j = 0; j < c.lk; ++j)
                    if (s[j] != -INFINITY)
                        acc += static_cast<float>(in_format(f, std::exp(s[j] - m) / l)) *
                               static_cast<float>(d.in[2].value((g * c.lk + j) * c.dv + t));
                out.o.set_value(row * c.dv + t, in_format(f, acc));
            }
            out.lse.set_value(row, m + std::log(l));
        }
    return out;
}

// The bound with the weights rounded to f and, when `narrow_logits`, the logits.
std::vector<double> eager_bound(const Data& d, Format f, bool narrow_logits) {
    oracle::FlashErrorModel m = model(f, 0);
    const double eta = min_subnormal(f) / 2;
    m.p_unit = unit_roundoff(f), m.p_eta = eta;
    if (narrow_logits) m.s_unit = unit_roundoff(f), m.s_eta = eta;
    return oracle::attention_bound(d.params, d.views(), d.exact, m);
}

}  // namespace

// Eager attention in BF16 and FP16 stays within the bound that declares its
// logits' format (every case, special rows included); without that
// declaration some case breaches (the declaration is needed), and logits
// rounded to one bit fewer than the format breach the declared bound (it
// is not vacuous).
TEST(AttentionKernel, EagerLogitsInTheModelFormatWithinTheDeclaredBound) {
    for (Format f : {Format::bf16, Format::fp16}) {
        double worst = 0, undeclared = 0, coarse = 0;
        const int bits = info(f).precision;
        for (std::size_t i = 0; i < cases().size(); ++i) {
            const Data& d = data(i, f);
            const Outputs out = eager_attention(d, f, [&](float x) { return static_cast<float>(in_format(f, x)); });
            const Verdict v = judge(d, out, eager_bound(d, f, true));
            EXPECT_TRUE(v.fail.empty()) << name(f) << " " << d.c->name << ": " << v.fail;
            worst = std::max(worst, v.max_util);
            undeclared = std::max(undeclared, judge(d, out, eager_bound(d, f, false)).max_util);
            const Outputs worse = eager_attention(d, f, [&](float x) { return static_cast<float>(to_bits(bits - 1, x)); });
            coarse = std::max(coarse, judge(d, worse, eager_bound(d, f, true)).max_util);
        }
        std::printf("[ eager    ] %s max utilization %.3g declared, %.3g undeclared, %.3g with a bit fewer\n", name(f),
                    worst, undeclared, coarse);
        EXPECT_GT(undeclared, 1.0) << name(f);
        EXPECT_GT(coarse, 1.0) << name(f);
    }
}

// The op-level declaration attention_arith = input (case files, plug-ins;
// docs/numerics.md "Conventions") holds the verdict's bound to the same
// model, the lse rounded to the input format too: eager attention whose lse
// comes back in BF16/FP16 (as XLA's) passes with it and breaches without.
TEST(AttentionKernel, AttentionArithInputCoversEagerAttentionWithANarrowLse) {
    const oracle::StructuredBoundFn bound = oracle::find_structured_bound("attention");
    ASSERT_NE(bound, nullptr);
    for (Format f : {Format::bf16, Format::fp16}) {
        double worst = 0, undeclared = 0;
        for (std::size_t i = 0; i < cases().size(); ++i) {
            const Data& d = data(i, f);
            Outputs out = eager_attention(d, f, [&](float x) { return static_cast<float>(in_format(f, x)); });
            for (std::int64_t e = 0; e < out.lse.numel(); ++e) out.lse.set_value(e, in_format(f, out.lse.value(e)));
            const auto flat = [&](bool declared) {
                Params p = d.params;
                if (declared) p.set("convention.attention_arith", 1);
                std::vector<std::vector<double>> b = bound(p, d.views(), {d.o, d.lse}, Format::fp32, {f, Format::fp32});
                b[0].insert(b[0].end(), b[1].begin(), b[1].end());
                return b[0];
            };
            const Verdict v = judge(d, out, flat(true));
            EXPECT_TRUE(v.fail.empty()) << name(f) << " " << d.c->name << ": " << v.fail;
            worst = std::max(worst, v.max_util);
            undeclared = std::max(undeclared, judge(d, out, flat(false)).max_util);
        }
        std::printf("[ arith    ] %s max utilization %.3g declared attention_arith=input, %.3g undeclared\n", name(f),
                    worst, undeclared);
        EXPECT_GT(undeclared, 1.0) << name(f);
    }
}

// A stage's subnormal rounding is carried into the logit by what follows it:
// FP16, softcap 50, one key, x = 75 2^-24: x / 50 = 1.5 2^-24 rounds to
// 2^-23 (a tie to even), times 50 gives 100 2^-24 — the lse off by 25 2^-24
// = 1.49e-6, which the bound must cover (it scales the divide's eta by c).
TEST(AttentionKernel, EagerSubnormalStagesAreCarriedByTheCap) {
    Tensor q(Format::fp16, {1, 1, 1}), k(Format::fp16, {1, 1, 1}), v(Format::fp16, {1, 1, 1});
    q.set_value(0, 75 * 0x1p-24), k.set_value(0, 1.0), v.set_value(0, 1.0);
    const Params p({{"scale", 1}, {"softcap", 50}});
    const std::vector<TensorView> in{q.view(), k.view(), v.view()};
    oracle::PrecisionScope scope(128);
    const oracle::OpOutputs exact = oracle::eval_attention(p, in);
    oracle::FlashErrorModel m = model(Format::fp16, 0);
    m.s_unit = m.p_unit = 0x1p-11, m.s_eta = m.p_eta = 0x1p-25;
    const std::vector<double> b = oracle::attention_bound(p, in, exact, m);
    const float x = 75 * 0x1p-24f;
    const double eager = in_format(Format::fp16, in_format(Format::fp16, std::tanh(in_format(Format::fp16, x / 50.0f))) * 50.0f);
    EXPECT_EQ(eager, 100 * 0x1p-24);
    const double err = std::fabs(eager - oracle::to_double(exact.values[1][0]));
    EXPECT_GT(err, 1.4e-6);
    EXPECT_LE(err, b.at(1)) << "lse bound " << b.at(1);
}

// A finite mask of -3e38 (transformers' eager masks use the format's
// lowest value): the masked keys' weights are 0 and so is their share of
// the bound; it stays finite (computed in the log domain), and the built-in
// kernels stay within it.
TEST(AttentionKernel, AHugeFiniteMaskKeepsTheBoundFinite) {
    Tensor q(Format::fp32, {1, 2, 4}), k(Format::fp32, {1, 4, 4}), v(Format::fp32, {1, 4, 4}), mask(Format::fp32, {2, 4});
    std::mt19937_64 g(7);
    for (Tensor* t : {&q, &k, &v})
        for (std::int64_t e = 0; e < t->numel(); ++e) t->set_value(e, draw(Dist::normal, g));
    for (std::int64_t e = 0; e < mask.numel(); ++e) mask.set_value(e, e % 2 ? -3e38 : 0.0);
    const Params p;
    const std::vector<TensorView> in{q.view(), k.view(), v.view(), mask.view()};
    oracle::PrecisionScope scope(128);
    const oracle::OpOutputs exact = oracle::eval_attention(p, in);
    const std::vector<double> b = oracle::attention_bound(p, in, exact, model(Format::fp32, 64));
    for (double x : b) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
    for (const std::string variant : {"simd", "scalar"})
        for (const KernelInfo* kern : kernels(variant)) {
            if (kern->in != Format::fp32) continue;
            Tensor o(Format::fp32, {1, 2, 4}), lse(Format::fp32, {1, 2});
            kern->fn(KernelCall{p, in, {o.view(), lse.view()}});
            for (std::int64_t e = 0; e < o.numel(); ++e)
                EXPECT_LE(std::fabs(o.value(e) - oracle::to_double(exact.values[0][e])), b[e]) << kern->name << " o " << e;
            for (std::int64_t e = 0; e < lse.numel(); ++e)
                EXPECT_LE(std::fabs(lse.value(e) - oracle::to_double(exact.values[1][e])), b[o.numel() + e]) << kern->name;
        }
}

}  // namespace attention_kernel_test
