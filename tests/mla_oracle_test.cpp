// MLA oracle: absorbed == explicit (with and without causal masking, with a
// cache and offsets), relative-position invariance of the decoupled RoPE
// part, prefill == cached decode, d_r = 0 reduces to plain attention on
// K = W_uk c, V = W_uv c, the default scale, shape errors, and a precision
// self-check.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "oracle/attention.hpp"
#include "oracle/mla.hpp"
#include "test_tensors.hpp"

namespace mla_oracle_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using oracle::Real;
using conform::testing::tensor;
using conform::testing::dyadic;

namespace {



struct Dims {
    std::int64_t H = 2, L = 3, Lc = 0, d_model = 4, d_c = 3, d_nope = 2, d_r = 2, d_v = 2;
};

// One random MLA instance as fp64 tensors (exact dyadic values).
struct Instance {
    Dims d;
    std::vector<double> h, w_dkv, w_uk, w_uv, w_q, w_kr, c_cache, kr_cache;
    std::vector<Tensor> tensors() const {
        std::vector<Tensor> t{tensor({d.L, d.d_model}, h),
                              tensor({d.d_c, d.d_model}, w_dkv),
                              tensor({d.H, d.d_nope, d.d_c}, w_uk),
                              tensor({d.H, d.d_v, d.d_c}, w_uv),
                              tensor({d.H, d.d_nope + d.d_r, d.d_model}, w_q),
                              tensor({d.d_r, d.d_model}, w_kr)};
        if (d.Lc > 0) {
            t.push_back(tensor({d.Lc, d.d_c}, c_cache));
            t.push_back(tensor({d.Lc, d.d_r}, kr_cache));
        }
        return t;
    }
};

Instance make(const Dims& d, std::uint64_t seed) {
    std::mt19937_64 g(seed);
    Instance x;
    x.d = d;
    auto n = [](std::int64_t a) { return static_cast<std::size_t>(a); };
    x.h = dyadic(g, n(d.L * d.d_model));
    x.w_dkv = dyadic(g, n(d.d_c * d.d_model));
    x.w_uk = dyadic(g, n(d.H * d.d_nope * d.d_c));
    x.w_uv = dyadic(g, n(d.H * d.d_v * d.d_c));
    x.w_q = dyadic(g, n(d.H * (d.d_nope + d.d_r) * d.d_model));
    x.w_kr = dyadic(g, n(d.d_r * d.d_model));
    x.c_cache = dyadic(g, n(d.Lc * d.d_c));
    x.kr_cache = dyadic(g, n(d.Lc * d.d_r));
    return x;
}

std::vector<TensorView> views(const std::vector<Tensor>& t) {
    std::vector<TensorView> v;
    for (const Tensor& x : t) v.push_back(x.view());
    return v;
}

oracle::OpOutputs run(const Instance& x, std::map<std::string, double> params) {
    const std::vector<Tensor> t = x.tensors();
    return oracle::eval_mla(Params(std::move(params)), views(t));
}

Real max_abs(const std::vector<Real>& v) {
    Real m(0);
    for (const Real& x : v)
        if (!oracle::isinf(x) && oracle::abs(x) > m) m = oracle::abs(x);
    return m;
}

// Agreement to 2^-k relative to the output's magnitude (max |element|, at
// least 1): a cancellation near zero in one element does not fail the test.
void expect_agree(const oracle::OpOutputs& a, const oracle::OpOutputs& b, int k, const std::string& what) {
    ASSERT_EQ(a.shapes, b.shapes) << what;
    for (std::size_t o = 0; o < a.values.size(); ++o) {
        const Real mag = std::max(Real(1), max_abs(b.values[o]));
        const Real tol = mag * pow(Real(2), -k);
        for (std::size_t e = 0; e < a.values[o].size(); ++e) {
            const Real &x = a.values[o][e], &y = b.values[o][e];
            if (oracle::isinf(x) || oracle::isinf(y)) {
                EXPECT_TRUE(x == y) << what << " output " << o << " element " << e;
                continue;
            }
            EXPECT_LE(oracle::abs(x - y), tol) << what << " output " << o << " element " << e << ": "
                                               << oracle::to_double(x) << " vs " << oracle::to_double(y);
        }
    }
}

// Largest |a - b| over output 0 (o), to show that a perturbation matters.
double max_diff(const oracle::OpOutputs& a, const oracle::OpOutputs& b) {
    Real m(0);
    for (std::size_t e = 0; e < a.values[0].size(); ++e) m = std::max(m, oracle::abs(a.values[0][e] - b.values[0][e]));
    return oracle::to_double(m);
}

void expect_shape_error(const std::vector<Tensor>& t, const std::string& input) {
    try {
        oracle::eval_mla(Params(), views(t));
        ADD_FAILURE() << "no error for bad '" << input << "'";
    } catch (const std::invalid_argument& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("mla"), std::string::npos) << msg;
        EXPECT_NE(msg.find("'" + input + "'"), std::string::npos) << msg;
    }
}

}  // namespace

TEST(MlaOracle, AbsorbedEqualsExplicit) {
    oracle::PrecisionScope p(256);
    for (std::int64_t lc : {0, 2})
        for (double causal : {0.0, 1.0})
            for (double offset : {0.0, 5.0, 1000.0}) {
                Dims d;
                d.Lc = lc;
                const Instance x = make(d, 11 + static_cast<std::uint64_t>(lc));
                std::map<std::string, double> prm{{"causal", causal}, {"offset", offset}};
                const oracle::OpOutputs ex = run(x, prm);
                prm["form"] = 1;
                const oracle::OpOutputs ab = run(x, prm);
                const std::string what = "Lc=" + std::to_string(lc) + " causal=" + std::to_string(causal) +
                                         " offset=" + std::to_string(offset);
                expect_agree(ab, ex, 200, what);
                // The forms are genuinely different computations of nonzero values.
                EXPECT_GT(oracle::to_double(max_abs(ex.values[0])), 0.1) << what;
            }
}

TEST(MlaOracle, CausalMaskIsBottomRightOverCacheAndNewTokens) {
    oracle::PrecisionScope p(128);
    Dims d;
    d.Lc = 2;
    const Instance x = make(d, 3);
    const oracle::OpOutputs causal = run(x, {{"causal", 1}}), full = run(x, {{"causal", 0}});
    // The last new token sees every key: its rows agree; earlier ones do not.
    for (std::int64_t h = 0; h < d.H; ++h) {
        const std::size_t last = static_cast<std::size_t>(h * d.L + d.L - 1), first = static_cast<std::size_t>(h * d.L);
        EXPECT_TRUE(causal.values[1][last] == full.values[1][last]) << "head " << h;
        EXPECT_FALSE(causal.values[1][first] == full.values[1][first]) << "head " << h;
    }
}

TEST(MlaOracle, RopeShiftOfAllPositionsLeavesOutputUnchanged) {
    oracle::PrecisionScope p(256);
    Dims d;
    d.Lc = 2;
    const Instance x = make(d, 21);
    for (double form : {0.0, 1.0}) {
        // Raw (unrotated) cache: every key and query moves with the offset.
        const oracle::OpOutputs base = run(x, {{"form", form}, {"offset", 2}, {"cache_rotated", 0}});
        for (double shift : {1.0, 37.0, 4096.0}) {
            const oracle::OpOutputs moved = run(x, {{"form", form}, {"offset", 2 + shift}, {"cache_rotated", 0}});
            expect_agree(moved, base, 200, "form " + std::to_string(form) + " shift " + std::to_string(shift));
        }
        // A pre-rotated cache does not move: shifting only the new tokens changes o.
        const oracle::OpOutputs a = run(x, {{"form", form}, {"offset", 2}, {"cache_rotated", 1}});
        const oracle::OpOutputs b = run(x, {{"form", form}, {"offset", 39}, {"cache_rotated", 1}});
        EXPECT_GT(max_diff(a, b), 1e-6) << "form " << form;
    }
}

TEST(MlaOracle, PrefillEqualsCachedDecode) {
    oracle::PrecisionScope p(256);
    Dims d;
    d.L = 4;
    const Instance x = make(d, 31);
    const std::vector<Tensor> t = x.tensors();
    const oracle::MlaProblem full = oracle::read_mla_problem(views(t));
    for (int form : {0, 1}) {
        const oracle::MlaConfig cfg = oracle::read_mla_config(Params({{"form", form}, {"offset", 3}}), full);
        const oracle::OpOutputs all = oracle::mla_solve(full, cfg);
        // Split after `pre` tokens: the prefix goes into the cache (latent and
        // rotated rope key at their positions), the rest is decoded.
        for (std::int64_t pre : {1, 3}) {
            oracle::MlaProblem head = full, tail = full;
            head.tokens = pre;
            head.h.resize(static_cast<std::size_t>(pre * d.d_model));
            const oracle::MlaCacheEntries e = oracle::mla_cache_entries(head, cfg);
            tail.tokens = d.L - pre;
            tail.h.erase(tail.h.begin(), tail.h.begin() + pre * d.d_model);
            tail.cached = pre;
            tail.c_cache = e.c_kv;
            tail.kr_cache = e.k_r;
            oracle::MlaConfig tcfg = cfg;
            tcfg.offset = cfg.offset + pre;
            const oracle::OpOutputs dec = oracle::mla_solve(tail, tcfg);
            for (std::int64_t h = 0; h < d.H; ++h)
                for (std::int64_t i = 0; i < d.L - pre; ++i) {
                    const std::size_t r_all = static_cast<std::size_t>(h * d.L + pre + i);
                    const std::size_t r_dec = static_cast<std::size_t>(h * (d.L - pre) + i);
                    EXPECT_LE(oracle::abs(all.values[1][r_all] - dec.values[1][r_dec]), pow(Real(2), -200));
                    for (std::int64_t v = 0; v < d.d_v; ++v)
                        EXPECT_LE(oracle::abs(all.values[0][r_all * d.d_v + v] - dec.values[0][r_dec * d.d_v + v]),
                                  pow(Real(2), -200))
                            << "form " << form << " pre " << pre << " head " << h << " row " << i;
                }
        }
    }
}

TEST(MlaOracle, NoRopePartEqualsPlainAttentionOnUpProjectedKv) {
    oracle::PrecisionScope p(256);
    for (std::int64_t lc : {0, 2})
        for (double causal : {0.0, 1.0}) {
            Dims d;
            d.d_r = 0;
            d.d_nope = 3;
            d.Lc = lc;
            const Instance x = make(d, 41 + static_cast<std::uint64_t>(lc));
            const std::int64_t lk = d.Lc + d.L;
            // Latents of all keys (cache first), exact in double for dyadic inputs.
            std::vector<double> c = x.c_cache;
            for (std::int64_t t = 0; t < d.L; ++t)
                for (std::int64_t r = 0; r < d.d_c; ++r) {
                    double s = 0;
                    for (std::int64_t m = 0; m < d.d_model; ++m) s += x.w_dkv[r * d.d_model + m] * x.h[t * d.d_model + m];
                    c.push_back(s);
                }
            std::vector<double> q, k, v;
            for (std::int64_t h = 0; h < d.H; ++h) {
                for (std::int64_t t = 0; t < d.L; ++t)
                    for (std::int64_t r = 0; r < d.d_nope; ++r) {
                        double s = 0;
                        for (std::int64_t m = 0; m < d.d_model; ++m)
                            s += x.w_q[(h * d.d_nope + r) * d.d_model + m] * x.h[t * d.d_model + m];
                        q.push_back(s);
                    }
                for (std::int64_t j = 0; j < lk; ++j) {
                    for (std::int64_t r = 0; r < d.d_nope; ++r) {
                        double s = 0;
                        for (std::int64_t m = 0; m < d.d_c; ++m) s += x.w_uk[(h * d.d_nope + r) * d.d_c + m] * c[j * d.d_c + m];
                        k.push_back(s);
                    }
                    for (std::int64_t r = 0; r < d.d_v; ++r) {
                        double s = 0;
                        for (std::int64_t m = 0; m < d.d_c; ++m) s += x.w_uv[(h * d.d_v + r) * d.d_c + m] * c[j * d.d_c + m];
                        v.push_back(s);
                    }
                }
            }
            const Tensor tq = tensor({d.H, d.L, d.d_nope}, q), tk = tensor({d.H, lk, d.d_nope}, k),
                         tv = tensor({d.H, lk, d.d_v}, v);
            const oracle::OpOutputs att =
                oracle::eval_attention(Params({{"causal", causal}}), {tq.view(), tk.view(), tv.view()});
            // The offset must not matter: with d_r = 0 nothing is rotated.
            for (double form : {0.0, 1.0})
                expect_agree(run(x, {{"causal", causal}, {"form", form}, {"offset", 7}}), att, 200,
                             "Lc=" + std::to_string(lc) + " causal=" + std::to_string(causal) +
                                 " form=" + std::to_string(form));
        }
}

TEST(MlaOracle, DefaultScaleIsOverNopePlusRopeDims) {
    oracle::PrecisionScope p(128);
    Dims d;  // d_nope + d_r = 4: default scale 1/2, exactly
    const Instance x = make(d, 51);
    const oracle::OpOutputs def = run(x, {}), half = run(x, {{"scale", 0.5}}),
                            nope_only = run(x, {{"scale", 1 / std::sqrt(2.0)}});
    expect_agree(def, half, 120, "scale 1/2");
    EXPECT_GT(max_diff(def, nope_only), 1e-6);
}

TEST(MlaOracle, ShapeErrorsNameTheInput) {
    oracle::PrecisionScope p(128);
    Dims d;
    d.Lc = 2;
    const Instance x = make(d, 61);
    const std::vector<Tensor> good = x.tensors();
    EXPECT_NO_THROW(oracle::eval_mla(Params(), views(good)));
    auto with = [&](std::size_t i, Tensor t) {
        std::vector<Tensor> v = good;
        v[i] = std::move(t);
        return v;
    };
    auto zeros = [](std::vector<std::int64_t> s) { return Tensor(Format::fp64, std::move(s)); };
    expect_shape_error(with(0, zeros({d.L, d.d_model, 1})), "h");
    expect_shape_error(with(1, zeros({d.d_c, d.d_model + 1})), "W_dkv");
    expect_shape_error(with(2, zeros({d.H, d.d_nope, d.d_c + 1})), "W_uk");
    expect_shape_error(with(3, zeros({d.H + 1, d.d_v, d.d_c})), "W_uv");
    expect_shape_error(with(3, zeros({d.H, d.d_v, d.d_c - 1})), "W_uv");
    expect_shape_error(with(4, zeros({d.H, d.d_nope, d.d_model})), "W_q");  // missing the rope dims
    expect_shape_error(with(4, zeros({d.H, d.d_nope + d.d_r, d.d_model + 1})), "W_q");
    expect_shape_error(with(5, zeros({3, d.d_model})), "W_kr");  // odd rope dim
    expect_shape_error(with(6, zeros({d.Lc, d.d_c + 1})), "c_kv_cache");
    expect_shape_error(with(7, zeros({d.Lc + 1, d.d_r})), "k_r_cache");
    expect_shape_error(with(7, zeros({d.Lc, d.d_r + 2})), "k_r_cache");
    std::vector<Tensor> seven = good;
    seven.pop_back();
    EXPECT_THROW(oracle::eval_mla(Params(), views(seven)), std::invalid_argument);
    EXPECT_THROW(oracle::eval_mla(Params({{"form", 2}}), views(good)), std::invalid_argument);
    EXPECT_THROW(oracle::eval_mla(Params({{"offset", 1}, {"cache_rotated", 0}}), views(good)), std::invalid_argument);
}

TEST(MlaOracle, PrecisionSelfCheck128Vs256) {
    Dims d;
    d.Lc = 2;
    const Instance x = make(d, 71);
    for (double form : {0.0, 1.0}) {
        oracle::OpOutputs lo, hi;
        {
            oracle::PrecisionScope p(128);
            lo = run(x, {{"form", form}, {"offset", 100000}});
        }
        {
            oracle::PrecisionScope p(256);
            hi = run(x, {{"form", form}, {"offset", 100000}});
            expect_agree(lo, hi, 110, "form " + std::to_string(form));
        }
    }
}

}  // namespace mla_oracle_test
