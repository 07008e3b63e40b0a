#include "properties/exhaustive.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "numerics/conventions.hpp"
#include "numerics/round.hpp"
#include "numerics/ulp.hpp"
#include "oracle/eval.hpp"
#include "oracle/gated.hpp"
#include "properties/verdict.hpp"

namespace conform::props {
namespace {

constexpr std::int64_t kPatterns = 65536;

int thread_count(const SweepOptions& o) {
    return o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
}

Tensor all_patterns(Format f, std::int64_t rows = 1) {
    Tensor t(f, {rows, kPatterns});
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < kPatterns; ++i) t.set_bits(r * kPatterns + i, static_cast<std::uint64_t>(i));
    return t;
}

// A sweep judges every input at 1 ulp under the oracle's conventions: a
// kernel that declares another standard is judged by `conform run` instead,
// never silently against the wrong one.
void require_sweepable(const KernelInfo& k) {
    if (k.in != Format::fp16 && k.in != Format::bf16)
        throw std::invalid_argument("exhaustive sweeps cover fp16 and bf16 inputs; kernel '" + k.name + "' takes " +
                                    name(k.in));
    for (const auto& [key, value] : k.conventions)
        if (value != convention({}, key))
            throw std::invalid_argument("exhaustive sweeps judge 1 ulp under the default conventions; kernel '" + k.name +
                                        "' declares " + key + " = " + value + " (judge it with conform run)");
    if (!(profile_for(k) == AccuracyProfile{}))
        throw std::invalid_argument("exhaustive sweeps judge the strict profile; kernel '" + k.name + "' declares " +
                                    k.profile + " (judge it with conform run)");
}

// Folds one comparison into the result.
struct Tally {
    std::uint64_t max_ulp = 0;
    std::int64_t mismatches = 0, inputs = 0;
    std::string worst;
    template <class What>
    void add(bool class_match, std::uint64_t ulps, const What& what) {
        ++inputs;
        if (!class_match) {  // a class mismatch is worse than any ulp count
            if (mismatches++ == 0) worst = what() + " (class mismatch)";
            return;
        }
        if (mismatches == 0 && (ulps > max_ulp || worst.empty())) worst = what();
        max_ulp = std::max(max_ulp, ulps);
    }
    void merge(const Tally& o) {
        if (o.max_ulp > max_ulp || worst.empty() || (mismatches == 0 && o.mismatches)) worst = o.worst;
        max_ulp = std::max(max_ulp, o.max_ulp);
        mismatches += o.mismatches;
        inputs += o.inputs;
    }
};

report::ExhaustiveResult finish(const KernelInfo& k, const Tally& t, double seconds) {
    report::ExhaustiveResult r;
    r.kernel = k.name;
    r.op = k.op;
    r.format = name(k.in);
    r.inputs = t.inputs;
    r.max_ulp = t.max_ulp;
    r.worst_input = t.worst;
    r.class_mismatches = t.mismatches;
    r.budget_ulp = budget_for(k).max_ulp;
    r.passed = t.mismatches == 0 && t.max_ulp <= r.budget_ulp;
    r.seconds = seconds;
    return r;
}

double elapsed(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A factor of a gated hidden: hi + lo within 2^-106 relative for the fast
// path, and the value at kWideBits for pairs the double-double cannot decide.
constexpr unsigned kWideBits = 400;
struct DD {
    double hi = 0, lo = 0;
    bool nan = false;
    oracle::Real wide;
};

DD to_dd(const oracle::Real& v) {
    DD d;
    d.wide = v;
    if (oracle::isnan(v)) {
        d.nan = true;
        return d;
    }
    d.hi = oracle::to_double(v);
    if (std::isfinite(d.hi)) d.lo = oracle::to_double(v - oracle::from_double(d.hi));
    return d;
}

// The factors of each gated op: h = A(gate) * B(up).
std::pair<oracle::Real, oracle::Real> factors(const std::string& op, const Params& p, double g, double u) {
    using oracle::Real;
    const Real G = oracle::from_double(g), U = oracle::from_double(u);
    if (op == "situ_glu")
        return {oracle::situ_gate_factor(G, p.get("beta1", 4)), oracle::situ_up_factor(U, p.get("beta2", 25))};
    if (op == "swiglu") return {oracle::silu(G), U};
    if (op == "geglu") return {oracle::gelu_erf(G), U};
    if (op == "swiglu_clamp") {  // silu(min(g, L)) * clamp(u, -L, L)
        const Real L(p.get("limit", 10));
        const Real uc = oracle::isnan(U) ? U : (U > L ? L : (U < -L ? Real(-L) : U));
        return {oracle::isnan(G) ? G : oracle::silu(G > L ? L : G), uc};
    }
    throw std::invalid_argument("no factorisation for op '" + op + "'");
}

std::vector<DD> factor_table(const std::string& op, const Params& p, Format f, bool gate) {
    std::vector<DD> t(kPatterns);
    oracle::PrecisionScope scope(kWideBits);
    for (std::int64_t i = 0; i < kPatterns; ++i) {
        const double v = decode(f, static_cast<std::uint64_t>(i));
        auto [a, b] = factors(op, p, gate ? v : 1.0, gate ? 1.0 : v);
        t[i] = to_dd(gate ? a : b);
    }
    return t;
}

// a b - RN(a b) (p = RN(a b)), exactly: Dekker's product of Veltkamp
// halves, with every operand and p kept where no step can overflow or lose
// bits to underflow; libm's fma elsewhere.  Without -mfma, std::fma is an
// out-of-line call, which took ~40 % of the 2^32-pair sweep.
inline double product_error(double a, double b, double p) {
    const auto safe = [](double v) {
        const double m = std::fabs(v);
        return m >= 0x1p-900 && m <= 0x1p900;
    };
    if (!(safe(a) && safe(b) && safe(p))) return std::fma(a, b, -p);
    constexpr double kSplit = 0x1p27 + 1;
    const double ca = kSplit * a, ah = ca - (ca - a), al = a - ah;
    const double cb = kSplit * b, bh = cb - (cb - b), bl = b - bh;
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl;
}

// Second level: the exact product of the two wide factors (800 bits hold
// it exactly), accepted when every value within 2^-380 relative of it rounds
// the same (each factor is within ~2^-396 of its true value).  Zero, infinite
// or NaN factors go to the oracle, which owns the limits.
std::optional<std::uint64_t> round_wide(const DD& a, const DD& b, Format out) {
    const mpfr_srcptr x = a.wide.backend().data(), y = b.wide.backend().data();
    if (!mpfr_regular_p(x) || !mpfr_regular_p(y)) return std::nullopt;
    mpfr_t prod, err;
    mpfr_init2(prod, 2 * kWideBits + 32);
    mpfr_init2(err, 64);
    mpfr_mul(prod, x, y, MPFR_RNDN);
    mpfr_abs(err, prod, MPFR_RNDU);
    mpfr_mul_2si(err, err, -380, MPFR_RNDU);
    auto r = round_if_determined(prod, err, out);
    mpfr_clear(prod);
    mpfr_clear(err);
    return r;
}

}  // namespace

report::ExhaustiveResult sweep_unary(const KernelInfo& k, const Params& p, const SweepOptions& opt) {
    require_sweepable(k);
    const auto t0 = std::chrono::steady_clock::now();
    const OpSpec& op = *find_op(k.op);
    if (op.kind != OpKind::unary) throw std::invalid_argument("sweep_unary needs a unary op, got '" + k.op + "'");
    const Tensor x = all_patterns(k.in);  // the oracle runs on four quarter slices in parallel
    const auto y = run_kernel(k, p, {x.view()});
    // The oracle over row slices, in parallel.
    std::vector<Tally> tallies(4);
    std::vector<std::thread> pool;
    std::atomic<int> next{0};
    for (int t = 0; t < thread_count(opt); ++t)
        pool.emplace_back([&] {
            for (int r; (r = next++) < 4;) {
                Tensor slice(k.in, {1, kPatterns / 4});
                for (std::int64_t i = 0; i < kPatterns / 4; ++i) slice.set_bits(i, x.bits(r * kPatterns / 4 + i));
                const auto ref = oracle::evaluate(op, p, {slice.view()}, k.out);
                for (std::int64_t i = 0; i < kPatterns / 4; ++i) {
                    const std::int64_t j = r * kPatterns / 4 + i;
                    const UlpCompare c = compare_bits(k.out, ref.rounded.bits(i), y[0].bits(j));
                    tallies[r].add(c.class_match, c.ulps, [&] {
                        return "x=" + hexfloat(x.value(j)) + " -> got " + hexfloat(y[0].value(j)) + ", want " +
                               hexfloat(ref.rounded.value(i));
                    });
                }
                if (opt.progress) opt.progress((r + 1) / 4.0);
            }
        });
    for (auto& th : pool) th.join();
    Tally all;
    for (const auto& t : tallies) all.merge(t);
    return finish(k, all, elapsed(t0));
}

report::ExhaustiveResult sweep_gated(const KernelInfo& k, const Params& p, const SweepOptions& opt) {
    require_sweepable(k);
    const auto t0 = std::chrono::steady_clock::now();
    const OpSpec& op = *find_op(k.op);
    if (op.kind != OpKind::gated) throw std::invalid_argument("sweep_gated needs a gated op, got '" + k.op + "'");
    const Format f = k.in, out = k.out;
    const std::vector<DD> G = factor_table(k.op, p, f, true), U = factor_table(k.op, p, f, false);
    const Tensor up = all_patterns(f);
    // Class and ordinal of every output pattern: the hot loop compares by lookup.
    std::vector<std::uint8_t> cls(kPatterns);
    std::vector<std::int32_t> ord(kPatterns);
    for (std::int64_t b = 0; b < kPatterns; ++b) {
        cls[b] = static_cast<std::uint8_t>(classify(out, b));
        ord[b] = static_cast<std::int32_t>(ordinal(out, b));
    }
    const std::uint64_t nan_bits = encode(out, NAN);
    std::atomic<std::int64_t> next{0}, done{0};
    std::mutex mu;
    Tally all;
    auto worker = [&] {
        oracle::PrecisionScope scope(kWideBits);  // this thread's MPFR exponent range and precision
        Tally local;
        Tensor gate(f, {1, kPatterns});
        for (std::int64_t g; (g = next++) < kPatterns;) {
            if (opt.cancelled && opt.cancelled()) break;
            // Straight into the 16-bit storage (Tensor::set_bits builds a view per call).
            std::fill_n(static_cast<std::uint16_t*>(gate.data()), kPatterns, static_cast<std::uint16_t>(g));
            const auto h = run_kernel(k, p, {gate.view(), up.view()});
            const std::uint16_t* got = static_cast<const std::uint16_t*>(h[0].data());
            for (std::int64_t u = 0; u < kPatterns; ++u) {
                std::uint64_t ref;
                if (G[g].nan || U[u].nan) {
                    ref = nan_bits;
                } else {
                    const double ph = G[g].hi * U[u].hi;
                    const double pl = product_error(G[g].hi, U[u].hi, ph) + (G[g].hi * U[u].lo + G[g].lo * U[u].hi);
                    auto r = std::isfinite(ph) ? round_dd(out, ph, pl, 0x1p-100) : std::nullopt;
                    if (!r) r = round_wide(G[g], U[u], out);
                    ref = r ? *r
                            : oracle::round_scalar(k.op, p, {decode(f, static_cast<std::uint64_t>(g)),
                                                             decode(f, static_cast<std::uint64_t>(u))}, out);
                }
                const bool same_class = cls[ref] == cls[got[u]];
                const std::uint64_t ulps =
                    same_class && cls[ref] == 0 ? static_cast<std::uint64_t>(std::abs(ord[ref] - ord[got[u]])) : 0;
                local.add(same_class, ulps, [&] {
                    return "gate=" + hexfloat(decode(f, g)) + " up=" + hexfloat(decode(f, u)) + " -> got " +
                           hexfloat(decode(out, got[u])) + ", want " + hexfloat(decode(out, ref));
                });
            }
            const std::int64_t d = ++done;
            if (opt.progress && d % 512 == 0) opt.progress(static_cast<double>(d) / kPatterns);
        }
        std::lock_guard<std::mutex> lock(mu);
        all.merge(local);
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < thread_count(opt); ++t) pool.emplace_back(worker);
    for (auto& th : pool) th.join();
    return finish(k, all, elapsed(t0));
}

}  // namespace conform::props
