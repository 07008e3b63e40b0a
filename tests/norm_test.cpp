// Norm family: oracle worked examples and closed forms, the derived bound,
// and the property suite over every registered norm kernel and mutant.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>

#include "kernel_suite.hpp"
#include "property_testing.hpp"
#include "properties/generators.hpp"
#include "oracle/bound.hpp"
#include "oracle/eval.hpp"
#include "oracle/norm.hpp"
#include "rows_testing.hpp"

namespace norm_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;
using conform::testing::KernelSuite;
using conform::testing::MutantSuite;
using oracle::Real;

namespace {

Tensor row(Format f, std::vector<double> v) {
    Tensor t(f, {1, static_cast<std::int64_t>(v.size())});
    for (std::size_t i = 0; i < v.size(); ++i) t.set_value(i, v[i]);
    return t;
}
Tensor vec(Format f, std::vector<double> v) {
    Tensor t(f, {static_cast<std::int64_t>(v.size())});
    for (std::size_t i = 0; i < v.size(); ++i) t.set_value(i, v[i]);
    return t;
}

}  // namespace

TEST(NormOracle, SeedWorkedExampleRmsNormOf3And4) {
    // x = [3, 4], gamma = 1, eps = 0: mean square 12.5, rms 3.5355..., y = [0.8485..., 1.1314...]
    oracle::PrecisionScope p(128);
    auto y = oracle::rms_norm<Real>({Real(3), Real(4)}, {Real(1), Real(1)}, 0.0, false);
    EXPECT_NEAR(oracle::to_double(y[0]), 3 / std::sqrt(12.5), 1e-15);
    EXPECT_NEAR(oracle::to_double(y[1]), 4 / std::sqrt(12.5), 1e-15);
    EXPECT_NEAR(oracle::to_double(y[0]), 0.8485, 5e-5);
    EXPECT_NEAR(oracle::to_double(y[1]), 1.1314, 5e-5);
    // Closed form at full precision: y0^2 = 9 / 12.5 = 0.72 exactly.
    EXPECT_LT(oracle::to_double(oracle::abs(y[0] * y[0] - Real("0.72"))), 1e-36);
}

TEST(NormOracle, ClosedForms) {
    oracle::PrecisionScope p(256);
    // layer_norm of [1, 2, 3]: mu 2, var 2/3, y = (x - 2)/sqrt(2/3) = [-sqrt(1.5), 0, sqrt(1.5)]
    auto y = oracle::layer_norm<Real>({Real(1), Real(2), Real(3)}, {Real(1), Real(1), Real(1)},
                                      {Real(0), Real(0), Real(0)}, 0.0);
    EXPECT_LT(oracle::to_double(oracle::abs(y[2] * y[2] - Real("1.5"))), 1e-70);
    EXPECT_EQ(oracle::to_double(y[1]), 0.0);
    // l2_norm of [3, 4]: [0.6, 0.8] exactly
    auto z = oracle::l2_norm<Real>({Real(3), Real(4)}, 0.0);
    EXPECT_LT(oracle::to_double(oracle::abs(z[0] - Real("0.6"))), 1e-70);
    EXPECT_LT(oracle::to_double(oracle::abs(z[1] - Real("0.8"))), 1e-70);
    // zero-centred weight: (1 + w) with w = 0 is the plain norm
    auto a = oracle::rms_norm<Real>({Real(3), Real(4)}, {Real(0), Real(0)}, 1e-6, true);
    auto b = oracle::rms_norm<Real>({Real(3), Real(4)}, {Real(1), Real(1)}, 1e-6, false);
    EXPECT_EQ(oracle::to_double(a[0] - b[0]), 0.0);
}

TEST(NormOracle, CorrectlyRoundedAgainstDoubleEvaluation) {
    // fp16 rounding of the oracle equals rounding a double evaluation where the
    // double is far from an fp16 midpoint.
    const OpSpec& op = *find_op("rms_norm");
    Tensor x = row(Format::fp16, {0.5, -1.25, 3.0, 7.5, -0.125}), w = vec(Format::fp16, {1, 2, 0.5, -1, 1.5});
    auto r = oracle::evaluate(op, Params({{"eps", 1e-6}}), {x.view(), w.view()}, Format::fp16);
    double ss = 0;
    for (int i = 0; i < 5; ++i) ss += x.value(i) * x.value(i);
    for (int i = 0; i < 5; ++i) {
        double y = w.value(i) * x.value(i) / std::sqrt(ss / 5 + 1e-6);
        EXPECT_NEAR(r.exact[i], y, std::fabs(y) * 1e-15);
        EXPECT_EQ(r.rounded.bits(i), encode(Format::fp16, y));
    }
}

TEST(NormOracle, SpecialValueTable) {
    const OpSpec& op = *find_op("rms_norm");
    Tensor w = vec(Format::fp32, {1, 1, 1});
    auto run = [&](std::vector<double> xs, double eps) {
        Tensor x = row(Format::fp32, xs);
        return oracle::evaluate(op, Params({{"eps", eps}}), {x.view(), w.view()}, Format::fp32).exact;
    };
    auto a = run({1, NAN, 2}, 1e-6);  // a NaN poisons the row
    for (double v : a) EXPECT_TRUE(std::isnan(v));
    auto b = run({1, INFINITY, -2}, 1e-6);  // Inf: Inf/Inf = NaN there, finite/Inf = 0 elsewhere
    EXPECT_EQ(b[0], 0.0);
    EXPECT_TRUE(std::isnan(b[1]));
    EXPECT_TRUE(std::signbit(b[2]) && b[2] == 0.0);
    auto c = run({0, 0, 0}, 0.0);  // 0/0
    for (double v : c) EXPECT_TRUE(std::isnan(v));
}

TEST(NormBound, EpsOutsideSqrtBreaksTheBoundOnlyNearEps) {
    // The bound is tight enough to see eps placement where mean(x^2) ~ eps
    // and loose enough for a correct FP32 kernel everywhere.
    const OpSpec& op = *find_op("rms_norm");
    const double eps = 1e-6;
    Tensor x = row(Format::fp32, {1e-3, -2e-3, 5e-4, 1.5e-3}), w = vec(Format::fp32, {1, 1, 1, 1});
    Params p({{"eps", eps}});
    auto r = oracle::evaluate(op, p, {x.view(), w.view()}, Format::fp16);
    oracle::RowData nr{{}, {1, 1, 1, 1}, {}, r.exact};
    double ms = 0;
    for (int i = 0; i < 4; ++i) nr.x.push_back(x.value(i)), ms += x.value(i) * x.value(i) / 4;
    auto bound = oracle::row_bound(op, p, nr, Format::fp32, Format::fp16);
    for (int i = 0; i < 4; ++i) {
        const double wrong = x.value(i) / (std::sqrt(ms) + eps);
        EXPECT_GT(std::fabs(decode(Format::fp16, encode(Format::fp16, wrong)) - r.exact[i]), bound[i]);
        const double right = x.value(i) / std::sqrt(ms + eps);
        EXPECT_LT(std::fabs(decode(Format::fp16, encode(Format::fp16, right)) - r.exact[i]), bound[i]);
    }
}

namespace {

// A 13-row tensor of `cols` for kernel k: a rescued row (its squares
// overflow fp32; fp16 cannot overflow, so there it is merely large), zeros
// (NaN with eps = 0), a NaN, a constant row, and ordinary rows around them;
// rows 8-11, all ordinary, are a group whose first sums the scale pass of
// rows 4-7 takes ahead (docs/norm.md, "Statistics ahead"), and row 12 a short
// last group.  Each row of the whole tensor's output must have the bits of
// that row run alone.
void expect_rows_stand_alone(const KernelInfo& k, std::int64_t cols) {
    const Format f = k.in;
    constexpr std::int64_t kRows = 13;
    const double big = f == Format::fp16 ? 6e4 : 3e25;
    std::mt19937 gen(static_cast<unsigned>(cols));
    std::uniform_real_distribution<double> d(-4, 4);
    std::vector<Tensor> in{Tensor(f, {kRows, cols})};
    for (std::int64_t i = 0; i < kRows * cols; ++i) {
        const std::int64_t r = i / cols;
        const double v = r == 4 ? 0.0 : r == 7 ? 1.5 : d(gen) * (r == 2 ? big : 1.0);
        in[0].set_value(i, r == 6 && i % cols == cols / 2 ? NAN : v);
    }
    for (std::size_t i = 1; i < find_op(k.op)->inputs.size(); ++i) {  // weight, bias
        in.emplace_back(f, std::vector<std::int64_t>{cols});
        for (std::int64_t j = 0; j < cols; ++j) in.back().set_value(j, 0.5 + d(gen) / 8);
    }
    EXPECT_EQ(conform::testing::rows_unlike_alone(k, in, Params({{"eps", 0.0}})), std::vector<std::int64_t>{})
        << k.name << " " << kRows << "x" << cols << ": rows differing from the same row run alone";
}

}  // namespace

// A row's bits do not depend on its neighbours (docs/norm.md, "Kernels"):
// every norm kernel, simd and scalar, at lengths with every remainder of the
// 32-element steps.
TEST(NormKernel, WholeTensorEqualsRowByRow) {
    for (const std::string op : {"rms_norm", "layer_norm", "l2_norm"})
        for (Format f : {Format::fp32, Format::bf16, Format::fp16})
            for (const char* kind : {"cpu.simd.", "cpu.scalar."})
                for (std::int64_t cols : {5, 37, 512, 1000, 4109})
                    expect_rows_stand_alone(*builtin_registry().find(kind + op + "." + name(f)), cols);
}

namespace {

// `bytes` of memory that end where a PROT_NONE page begins, so that reading
// one byte past them faults.
class GuardedBytes {
public:
    explicit GuardedBytes(std::size_t bytes) {
        const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
        span_ = (bytes + page - 1) / page * page + page;
        base_ = mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base_ == MAP_FAILED) throw std::runtime_error("mmap failed");
        if (mprotect(static_cast<char*>(base_) + span_ - page, page, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
        data_ = static_cast<char*>(base_) + span_ - page - bytes;
    }
    ~GuardedBytes() { munmap(base_, span_); }
    GuardedBytes(const GuardedBytes&) = delete;
    GuardedBytes& operator=(const GuardedBytes&) = delete;
    void* data() const { return data_; }

private:
    void* base_;
    void* data_;
    std::size_t span_;
};

}  // namespace

// The statistics taken ahead read the next group's rows only where that
// group exists (docs/norm.md, "Statistics ahead"): x ends at a guard page,
// at row counts around whole groups, and the kernels must neither fault nor
// give other bits than on an ordinary tensor.
TEST(NormKernel, ReadsNoRowPastTheEnd) {
    constexpr std::int64_t cols = 40;
    for (const std::string op : {"rms_norm", "layer_norm", "l2_norm"})
        for (Format f : {Format::fp32, Format::bf16, Format::fp16})
            for (const char* kind : {"cpu.simd.", "cpu.scalar."})
                for (std::int64_t rows : {5, 8, 9, 12, 13}) {
                    const KernelInfo& k = *builtin_registry().find(kind + op + "." + name(f));
                    std::vector<Tensor> in{Tensor(f, {rows, cols})};
                    for (std::int64_t i = 0; i < rows * cols; ++i) in[0].set_value(i, std::sin(0.7 * i) * 3);
                    for (std::size_t i = 1; i < find_op(op)->inputs.size(); ++i) {
                        in.emplace_back(f, std::vector<std::int64_t>{cols});
                        for (std::int64_t j = 0; j < cols; ++j) in.back().set_value(j, 1 + 0.01 * j);
                    }
                    const std::size_t bytes = static_cast<std::size_t>(rows * cols * info(f).bytes);
                    GuardedBytes guarded(bytes);
                    std::memcpy(guarded.data(), in[0].data(), bytes);
                    Tensor plain(f, {rows, cols}), at_guard(f, {rows, cols});
                    conform::testing::run_rows(k, in[0].view(), in, Params(), plain);
                    conform::testing::run_rows(k, TensorView::contiguous(guarded.data(), f, {rows, cols}), in, Params(),
                                               at_guard);
                    EXPECT_EQ(std::memcmp(plain.data(), at_guard.data(), bytes), 0) << k.name << " " << rows << " rows";
                }
}

namespace {

// Specs the suite's generator draws for a norm kernel (what within_budget
// and the norm properties see).
std::vector<props::CaseSpec> drawn_specs(const KernelInfo& k, int count) {
    const auto gen = props::gen_spec(*find_op(k.op), k.in);
    std::vector<props::CaseSpec> v;
    for (int i = 0; i < count; ++i) v.push_back(gen(rc::Random(1000 + i), 100).value());
    return v;
}

// Kernel k with a flaw applied to its call: `before` may replace inputs (by
// position), `after` edits the outputs.
using Replaced = std::map<std::size_t, Tensor>;
KernelInfo flawed(const KernelInfo& k, const std::string& what, std::function<Replaced(const KernelCall&)> before,
                  std::function<void(const KernelCall&)> after) {
    KernelInfo m = k;
    m.name = "test." + what + "." + k.name;
    m.role = Role::mutant;
    m.fn = [fn = k.fn, before, after](const KernelCall& c) {
        const Replaced replaced = before ? before(c) : Replaced{};
        KernelCall call{c.params, c.in, c.out};
        for (const auto& [i, t] : replaced) call.in[i] = t.view();
        fn(call);
        if (after) after(call);
    };
    return m;
}

// Every drawn case cut to at most 3 rows and finite weights (the cases the
// generator drew before 9 to 33 rows and special weights): how many fail.
int failures_on_short_finite_cases(const KernelInfo& k, const std::vector<props::CaseSpec>& specs) {
    int failed = 0;
    for (props::CaseSpec s : specs) {
        s.rows = std::min(s.rows, 3);
        s.weight_specials = 0;
        const props::Case c = props::build_case(s);
        failed += !props::check_case(k, c.params, c.views()).pass;
    }
    return failed;
}

}  // namespace

// The generator reaches what kernels that group rows by 4 or 8 need (a second
// group and a partial last one), NaN/Inf weights, and rows with a mean far
// above their spread, for every norm op; special weights leave the case's
// values as they are without them.
TEST(NormGenerator, ReachesRowGroupsSpecialWeightsAndLargeMeans) {
    for (const char* name : {"cpu.simd.rms_norm.fp16", "cpu.scalar.layer_norm.fp32", "cpu.simd.l2_norm.bf16"}) {
        const KernelInfo& k = *builtin_registry().find(name);
        int partial_groups = 0, special_weights = 0, large_mean = 0;
        for (const props::CaseSpec& s : drawn_specs(k, 400)) {
            partial_groups += s.rows > 8 && s.rows % 4 != 0;
            large_mean += s.families[0] == props::Family::large_mean;
            if (s.weight_specials == 0 || k.op == "l2_norm") continue;
            ++special_weights;
            props::CaseSpec plain = s;
            plain.weight_specials = 0;
            const props::Case a = props::build_case(s), b = props::build_case(plain);
            int non_finite = 0;
            for (std::size_t t = 1; t < a.inputs.size(); ++t)
                for (std::int64_t i = 0; i < a.inputs[t].numel(); ++i) non_finite += !std::isfinite(a.inputs[t].value(i));
            EXPECT_GE(non_finite, 1) << name;
            EXPECT_LE(non_finite, s.weight_specials * static_cast<int>(a.inputs.size() - 1)) << name;
            for (std::int64_t i = 0; i < a.inputs[0].numel(); ++i) ASSERT_EQ(a.inputs[0].bits(i), b.inputs[0].bits(i));
        }
        EXPECT_GE(partial_groups, 60) << name;
        EXPECT_GE(large_mean, 25) << name;
        if (k.op != "l2_norm") {
            EXPECT_GE(special_weights, 30) << name;
        }
    }
}

// Kernels that process rows in groups of 8 and drop a partial group after a
// full one (class 16: row tails dropped at vector width) pass every case of
// at most 3 rows and fail within_budget on the suite's generator.
TEST(NormGenerator, NineRowsOrMoreKillATailGroupDroppedAfterAFullOne) {
    const KernelInfo& k = *builtin_registry().find("cpu.simd.rms_norm.bf16");
    const KernelInfo m = flawed(k, "tail_group_dropped", nullptr, [](const KernelCall& c) {
        const std::int64_t rows = c.out[0].rows(), n = c.out[0].cols();
        if (rows <= 8) return;
        for (std::int64_t i = rows / 8 * 8 * n; i < rows * n; ++i) c.out[0].set_bits(i, 0);
    });
    EXPECT_EQ(failures_on_short_finite_cases(m, drawn_specs(k, 100)), 0);
    EXPECT_FALSE(conform::testing::run_named_property("within_budget", m).passed);
}

// A kernel that saturates its weights to the format's finite range (a
// saturating conversion of the checkpoint) is exact while weights are
// finite and fails once a column's weight is infinite.
TEST(NormGenerator, InfiniteWeightsKillAKernelThatSaturatesItsWeights) {
    const KernelInfo& k = *builtin_registry().find("cpu.scalar.layer_norm.fp16");
    const KernelInfo m = flawed(k, "weights_saturated",
        [](const KernelCall& c) {
            Replaced in;
            for (std::size_t t = 1; t < c.in.size(); ++t) {
                Tensor w(c.in[t].format, {c.in[t].numel()});
                const double mx = max_finite(c.in[t].format);
                for (std::int64_t i = 0; i < c.in[t].numel(); ++i) w.set_value(i, std::clamp(c.in[t].value(i), -mx, mx));
                in.emplace(t, std::move(w));
            }
            return in;
        },
        nullptr);
    EXPECT_EQ(failures_on_short_finite_cases(m, drawn_specs(k, 100)), 0);
    EXPECT_FALSE(conform::testing::run_named_property("within_budget", m).passed);
}

CONFORM_FAMILY_SUITES(Norm, "norm");

}  // namespace norm_test
