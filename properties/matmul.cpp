// Generators and properties of the matrix product (docs/matmul.md, "Properties").
#include <algorithm>
#include <cmath>
#include <numeric>

#include "properties/common.hpp"

namespace conform::props {
namespace {

// The oracle forms every product in MPFR (two evaluations, Ziv): keep a
// case's M N K near 2^18 by halving M, then N.
constexpr std::int64_t kMaxProducts = std::int64_t{1} << 18;

Tensor filled(Format f, std::int64_t rows, std::int64_t cols, Family fam, const CaseSpec& spec, std::size_t input,
              std::mt19937_64& rng) {
    Tensor t(f, {rows, cols});
    fill_values(t, fam, spec, input, rng);
    inject_specials(t, spec.specials, rng);
    return t;
}

// dims = {M, K, N}: M past the kernels' 96-row blocks and 12-row tiles, K
// odd and even (vdpbf16ps takes pairs) and past a 512-product block, N
// around the 16- and 32-lane panels.  One value family per operand, from `families`.
rc::Gen<CaseSpec> gen_matmul(Format fmt, GenOptions opt, const std::vector<Family>& families) {
    return rc::gen::apply(
        [fmt](std::int64_t m, std::int64_t k, std::int64_t n, Family fa, Family fb, int scale, std::uint64_t seed,
              int specials) {
            while (m > 1 && m * n * k > kMaxProducts) m = (m + 1) / 2;
            while (n > 1 && m * n * k > kMaxProducts) n = (n + 1) / 2;
            CaseSpec s = structured_spec("matmul", fmt, {m, k, n}, Params(), fa, scale, seed, specials);
            s.families = {fa, fb};
            return s;
        },
        rc::gen::element<std::int64_t>(1, 2, 3, 5, 12, 13, 25, 97),
        rc::gen::element<std::int64_t>(1, 2, 3, 7, 16, 31, 64, 257, 1024, 1031),
        rc::gen::element<std::int64_t>(1, 3, 16, 17, 31, 32, 33, 65), rc::gen::elementOf(families),
        rc::gen::elementOf(families), rc::gen::inRange(-6, 7), rc::gen::arbitrary<std::uint64_t>(),
        opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

}  // namespace

rc::Gen<CaseSpec> gen_matmul_spec(Format fmt, GenOptions opt) { return gen_matmul(fmt, opt, value_families()); }

Case build_matmul_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const std::int64_t m = spec.dims.at(0), k = spec.dims.at(1), n = spec.dims.at(2);
    c.inputs.push_back(filled(spec.format, m, k, spec.families.at(0), spec, 0, rng));
    c.inputs.push_back(filled(spec.format, k, n, spec.families.size() > 1 ? spec.families[1] : spec.families[0], spec, 1, rng));
    return c;
}

namespace {

// Integers in [-8, 8] with K up to 4095: every product and partial sum is
// an integer below 2^18, exact in FP32 in any order, so y is the exact sum
// rounded once, bit for bit.  Sizes past every tile and block edge; no
// oracle needed, so the shapes can be large.
Testable exact_integers(const KernelInfo& k) {
    return [&k] {
        const std::int64_t m = *rc::gen::element<std::int64_t>(1, 2, 11, 12, 13, 97, 130);
        const std::int64_t kk = *rc::gen::element<std::int64_t>(1, 2, 3, 15, 16, 17, 255, 511, 512, 513, 1025, 4095);
        std::int64_t n = *rc::gen::element<std::int64_t>(1, 2, 15, 16, 17, 31, 32, 33, 64, 65, 100);
        while (n > 1 && m * n * kk > (std::int64_t{1} << 22)) n = (n + 1) / 2;  // the check's own loop
        std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
        Tensor a(k.in, {m, kk}), b(k.in, {kk, n});
        std::vector<std::int64_t> ia(static_cast<std::size_t>(m * kk)), ib(static_cast<std::size_t>(kk * n));
        for (auto [t, v] : {std::pair{&a, &ia}, std::pair{&b, &ib}})
            for (std::int64_t i = 0; i < t->numel(); ++i) {
                (*v)[static_cast<std::size_t>(i)] = static_cast<int>(rng() % 17) - 8;
                t->set_value(i, static_cast<double>((*v)[static_cast<std::size_t>(i)]));
            }
        const auto out = run_kernel(k, Params(), {a.view(), b.view()});
        const Format f = out[0].format();
        for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
                std::int64_t s = 0;
                for (std::int64_t p = 0; p < kk; ++p)
                    s += ia[static_cast<std::size_t>(i * kk + p)] * ib[static_cast<std::size_t>(p * n + j)];
                const std::uint64_t want = encode(f, static_cast<double>(s));
                if (out[0].bits(i * n + j) != want && !(s == 0 && out[0].value(i * n + j) == 0))
                    RC_FAIL("M " + std::to_string(m) + ", K " + std::to_string(kk) + ", N " + std::to_string(n) + ": y[" +
                            std::to_string(i) + "][" + std::to_string(j) + "] = " + hexfloat(out[0].value(i * n + j)) +
                            ", the exact integer sum is " + std::to_string(s));
            }
    };
}

// A permutation of A's rows permutes y's rows, and one of B's columns y's
// columns, bit for bit: each y_ij depends on row i of A and column j of B
// alone, computed the same way wherever it sits in the tiles.
Testable permutation_equivariance(const KernelInfo& k) {
    return [&k] {
        const Case c = build_case(in_domain(*gen_matmul_spec(k.in, GenOptions{})));
        const Tensor &a = c.inputs[0], &b = c.inputs[1];
        const std::int64_t m = a.shape()[0], kk = a.shape()[1], n = b.shape()[1];
        const bool rows = *rc::gen::arbitrary<bool>();
        std::vector<std::int64_t> perm(static_cast<std::size_t>(rows ? m : n));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), std::mt19937_64(*rc::gen::arbitrary<std::uint64_t>()));
        Tensor pa = a, pb = b;
        for (std::size_t p = 0; p < perm.size(); ++p) {
            const auto q = static_cast<std::int64_t>(p), src = perm[p];
            if (rows)
                for (std::int64_t j = 0; j < kk; ++j) pa.set_bits(q * kk + j, a.bits(src * kk + j));
            else
                for (std::int64_t i = 0; i < kk; ++i) pb.set_bits(i * n + q, b.bits(i * n + src));
        }
        const auto y = run_kernel(k, c.params, c.views()), py = run_kernel(k, c.params, {pa.view(), pb.view()});
        Tensor want = py[0];
        for (std::size_t p = 0; p < perm.size(); ++p)
            for (std::int64_t t = 0; t < (rows ? n : m); ++t) {
                const auto q = static_cast<std::int64_t>(p), src = perm[p];
                const std::int64_t from = rows ? src * n + t : t * n + src, to = rows ? q * n + t : t * n + q;
                want.set_bits(to, y[0].bits(from));
            }
        std::string where;
        if (!identical(want, py[0], &where))
            RC_FAIL(std::string(rows ? "rows of a" : "columns of b") + " permuted (M " + std::to_string(m) + ", K " +
                    std::to_string(kk) + ", N " + std::to_string(n) + "): the permuted y differs at " + where);
    };
}

// Every element zero, normal or non-finite in its format.
bool no_subnormal(const Tensor& x) {
    for (std::int64_t i = 0; i < x.numel(); ++i)
        if (is_subnormal(x.format(), x.value(i))) return false;
    return true;
}

// a 2^s (or b 2^s) gives y 2^s exactly wherever y and y 2^s are normal in
// the output format and every input stays exact: with values of ordinary
// magnitude no product or partial sum in FP32 is subnormal either way, and
// round-to-nearest commutes with a power of two.
Testable power_of_two_scaling(const KernelInfo& k) {
    return [&k] {
        static const std::vector<Family> ordinary{Family::normal, Family::uniform, Family::heavy_tail, Family::constant};
        const Case c = build_case(in_domain(*gen_matmul(k.in, GenOptions{}, ordinary)));
        const int s = *rc::gen::element(-8, -3, -1, 1, 2, 8);
        const std::size_t which = *rc::gen::inRange<std::size_t>(0, 2);
        std::vector<Tensor> scaled = c.inputs;
        RC_PRE(scale_exact(c.inputs[which], s, &scaled[which]));
        // Tensor cores (declared mma_k) estimate a block's exponent from the
        // factors' exponent fields, a subnormal's as its format's smallest
        // normal one (docs/attention.md, "Tensor-core accumulation"): the
        // estimate, and the truncation grid with it, moves by s only while
        // no factor of the scaled operand is or becomes subnormal.
        const auto declared = k.declared.find("mma_k");
        if (declared != k.declared.end() && declared->second > 0)
            RC_PRE(no_subnormal(c.inputs[which]) && no_subnormal(scaled[which]));
        const auto y = run_kernel(k, c.params, c.views()), ys = run_kernel(k, c.params, {scaled[0].view(), scaled[1].view()});
        const Format f = y[0].format();
        const double lo = std::ldexp(1.0, info(f).emin), hi = max_finite(f);
        for (std::int64_t i = 0; i < y[0].numel(); ++i) {
            const double v = y[0].value(i), want = std::ldexp(v, s);
            // Strictly above the smallest normal: a result equal to it may come
            // from a value below it, rounded on the subnormals' spacing.
            if (!(std::fabs(v) > lo && std::fabs(v) <= hi && std::fabs(want) > lo && std::fabs(want) <= hi)) continue;
            if (ys[0].value(i) != want)
                RC_FAIL((which ? "b" : "a") + std::string(" scaled by 2^") + std::to_string(s) + ": element " +
                        std::to_string(i) + " = " + hexfloat(ys[0].value(i)) + ", want " + hexfloat(v) + " * 2^" +
                        std::to_string(s) + " = " + hexfloat(want));
        }
    };
}

}  // namespace

void add_matmul_properties(std::vector<PropertyDef>& v) {
    auto matmul = [](const OpSpec& op) { return op.name == "matmul"; };
    v.push_back({"exact_integers", "integer operands whose sums are exact in FP32 (K up to 4095, every tile edge): y is "
                                   "the exact sum rounded once",
                 matmul, [](const KernelInfo& k, const RunConfig&, Stats*) { return exact_integers(k); }, 2});
    v.push_back({"permutation_equivariance", "permuting a's rows or b's columns permutes y's, bit for bit", matmul,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return permutation_equivariance(k); }, 2});
    v.push_back({"power_of_two_scaling", "a or b times 2^s gives y times 2^s exactly where both are normal", matmul,
                 [](const KernelInfo& k, const RunConfig&, Stats*) { return power_of_two_scaling(k); }, 2});
}

}  // namespace conform::props
