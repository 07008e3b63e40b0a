// CPU Sinkhorn–Knopp kernels (op `sinkhorn`, docs/sinkhorn.md "Kernels") and
// their mutants: logits [batch, n, n] (or [n, n]) -> b of the same shape,
// FP32 arithmetic, input and output in fp32, fp16 or bf16.
#pragma once
#include <cstdint>
#include <string>

#include "impls/registry.hpp"

namespace conform {

void register_cpu_sinkhorn(Registry& r);      // impls/cpu/sinkhorn.cpp
void register_mutants_sinkhorn(Registry& r);  // impls/mutants/sinkhorn.cpp

namespace cpu {

// The ways a real FP32 Sinkhorn goes wrong, as switches; all off is the
// kernel itself (cpu.scalar.sinkhorn).  The mutants turn on one each.
struct SinkhornFlaws {
    bool no_max_shift = false;  // exp(L) instead of exp(L - row max): overflows past L ~ 88
    bool rows_only = false;     // the column normalization is skipped
    int missing_iters = 0;      // iterations dropped from the requested count
    bool bf16_sums = false;     // line sums rounded to bf16 before dividing
    float eps_after = 0;        // b = v / sum + eps (the seed sample's clamp-style guard)
};

// One n x n matrix in place, row-major: logits in, B out.  The scalar
// reference of every path: exp(L - row max) by expf, then `iters` times the
// row sums left to right and b = v / fl(sum + eps) per row (eps the op's
// guard, 0 by default), then the same per column; a line whose sum plus eps
// is 0 is left as it is; a NaN or +inf logit makes the matrix NaN.
void sinkhorn_matrix(float* m, std::int64_t n, int iters, const SinkhornFlaws& flaws = {}, float eps = 0);

// `count` packed n x n FP32 logit matrices into FP32 B (not rounded further),
// for kernels that mix with B (mhc_residual): the simd kernel's arithmetic
// (eight matrices per register; scalar without AVX2) or the scalar one's.
void sinkhorn_batch(const float* logits, float* b, std::int64_t count, std::int64_t n, int iters, bool simd,
                    float eps = 0);

// The projection's parameters as every kernel reads them (`who` names the
// kernel in the errors): iters an integer in [1, 1e6]; eps finite, >= 0 and,
// when > 0, representable in FP32, since the guard is applied in FP32
// (oracle::sinkhorn_eps refuses the same values).
struct SinkhornParams {
    int iters = 20;
    float eps = 0;
};
SinkhornParams sinkhorn_params(const Params& p, const std::string& who);

// The naive baseline's arithmetic on a sinkhorn call (logits -> b), every
// intermediate rounded to the call's storage format (fp32, fp16 or bf16).
void sinkhorn_naive(const KernelCall& c);

}  // namespace cpu
}  // namespace conform
