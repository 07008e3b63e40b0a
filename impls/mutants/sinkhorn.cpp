// Sinkhorn mutants (docs/sinkhorn.md "Mutants"): the scalar FP32 kernel
// (cpu::sinkhorn_matrix) with one flaw each, in fp32 so that nothing but the
// flaw separates them from the kernel.
#include <vector>

#include "impls/cpu/sinkhorn.hpp"

namespace conform {
namespace {

void run_flawed(const KernelCall& c, const cpu::SinkhornFlaws& flaws) {
    const TensorView& l = c.in.at(0);
    const std::int64_t n = l.shape[l.rank - 1], nn = n * n;
    const int iters = static_cast<int>(c.params.get("iters", 20.0));
    std::vector<float> m(static_cast<std::size_t>(nn));
    for (std::int64_t k = 0; nn && k < l.numel() / nn; ++k) {
        for (std::int64_t e = 0; e < nn; ++e) m[static_cast<std::size_t>(e)] = static_cast<float>(l.value(k * nn + e));
        cpu::sinkhorn_matrix(m.data(), n, iters, flaws);
        for (std::int64_t e = 0; e < nn; ++e) c.out.at(0).set_bits(k * nn + e, float_bits(m[static_cast<std::size_t>(e)]));
    }
}

void add(Registry& r, const char* bug, const char* bug_class, const char* what, cpu::SinkhornFlaws flaws) {
    r.add(mutant_info("sinkhorn", bug, Format::fp32, Format::fp32, bug_class, what,
                      [flaws](const KernelCall& c) { run_flawed(c, flaws); }));
}

}  // namespace

void register_mutants_sinkhorn(Registry& r) {
    add(r, "no_max_shift", "1 exp-range overflow",
        "exp(L) without subtracting the row max: Inf / Inf = NaN once a logit passes ~88", {.no_max_shift = true});
    add(r, "rows_only", "14 reduction axis/granularity",
        "rows normalized but never the columns: row-stochastic, not doubly stochastic", {.rows_only = true});
    add(r, "one_iteration_fewer", "12 silently ignored parameter",
        "iters - 1 iterations reported as iters (a loop bound off by one)", {.missing_iters = 1});
    add(r, "bf16_sums", "6 low-precision accumulation/storage",
        "line sums rounded to bf16 before the division (8-bit significand)", {.bf16_sums = true});
    add(r, "eps_after_divide", "8 epsilon placement",
        "b = v / sum + 1e-9 (a clamp-style guard added after the normalization)", {.eps_after = 1e-9f});
    // run_flawed never reads the op's eps: with no flaw switched on it is the
    // kernel that accepts the guard and ignores it.
    add(r, "eps_ignored", "12 silently ignored parameter", "the eps guard accepted and ignored: v / sum for v / (sum + eps)",
        {});
}

}  // namespace conform
