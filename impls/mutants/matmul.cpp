// Matmul mutants (docs/matmul.md "Mutants"): the scalar FMA chain with one
// flaw each, and the vdpbf16ps path without its subnormal guard.
#include <cmath>

#include "impls/cpu/isa.hpp"
#include "impls/cpu/matmul.hpp"

namespace conform {
namespace {

struct Flaws {
    bool bf16_accumulator = false;  // the running sum rounded to BF16 after every step
    bool odd_k_dropped = false;     // pairs of k only: the last k of an odd K never added
    bool b_transposed = false;      // b read as [N, K]
    bool n_tail_dropped = false;    // columns past the last whole 16-lane vector left 0
    bool daz = false;               // subnormal inputs, products and partial sums flushed to zero
};

double flush(double v, bool daz) { return daz && v != 0 && std::fabs(v) < 0x1p-126 ? std::copysign(0.0, v) : v; }

void flawed_matmul(const KernelCall& c, const Flaws& f) {
    const TensorView &a = c.in.at(0), &b = c.in.at(1), &y = c.out.at(0);
    const std::int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
    const std::int64_t k_end = f.odd_k_dropped ? k / 2 * 2 : k, n_end = f.n_tail_dropped && n > 16 ? n / 16 * 16 : n;
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            float acc = 0;
            for (std::int64_t kk = 0; kk < k_end && j < n_end; ++kk) {
                const double av = flush(a.value(i * k + kk), f.daz);
                const double bv = flush(b.value(f.b_transposed ? j * k + kk : kk * n + j), f.daz);
                acc = static_cast<float>(flush(std::fma(static_cast<float>(av), static_cast<float>(bv), acc), f.daz));
                if (f.bf16_accumulator) acc = static_cast<float>(decode(Format::bf16, encode(Format::bf16, acc)));
            }
            y.set_bits(i * n + j, encode(y.format, acc));
        }
}

void add(Registry& r, Format fmt, const char* bug, const char* bug_class, const char* what, Flaws flaws) {
    r.add(mutant_info("matmul", bug, fmt, Format::fp32, bug_class, what,
                      [flaws](const KernelCall& c) { flawed_matmul(c, flaws); }));
}

}  // namespace

void register_mutants_matmul(Registry& r) {
    add(r, Format::bf16, "bf16_accumulator", "6 low-precision accumulation/storage",
        "the running sum kept in BF16 (rounded after every product is added)", {.bf16_accumulator = true});
    add(r, Format::bf16, "odd_k_dropped", "16 GPU structure (tails)",
        "k taken in pairs (vdpbf16ps): the last k of an odd K is never added", {.odd_k_dropped = true});
    add(r, Format::fp16, "b_transposed", "5 layout transposition", "b [K, N] read as if stored [N, K]",
        {.b_transposed = true});
    add(r, Format::fp32, "n_tail_dropped", "16 GPU structure (tails)",
        "columns past the last whole 16-lane vector are left 0", {.n_tail_dropped = true});
    // The real instruction where the CPU has it, else its arithmetic emulated.
    KernelInfo daz = mutant_info("matmul", "daz", Format::bf16, Format::fp32, "13 rounding/saturation",
                                 "vdpbf16ps without the guard: subnormal inputs, products and partial sums flushed to 0",
                                 [](const KernelCall& c) {
                                     if (cpu::has_avx512_bf16()) cpu::matmul_call(c, cpu::MatmulPath::dpbf16, false);
                                     else flawed_matmul(c, {.daz = true});
                                 });
    r.add(std::move(daz));
}

}  // namespace conform
