// CPU kernels of the matrix product (op `matmul`, docs/matmul.md "Kernels"):
// y [M, N] = a [M, K] b [K, N] with FP32 accumulation, y in FP32 or the
// inputs' 16-bit format.
#pragma once
#include <cstdint>

#include "impls/registry.hpp"

namespace conform {

void register_cpu_matmul(Registry& r);      // impls/cpu/matmul.cpp
void register_mutants_matmul(Registry& r);  // impls/mutants/matmul.cpp

namespace cpu {

// The paths of the fast kernel.  Every path computes each y_ij as the chain
// acc = fma(a_ik, b_kj, acc) from acc = +0 in FP32, k = 0, 1, ..., K-1 --
// for BF16 operands in vdpbf16ps's order 1, 0, 3, 2, ... -- so all give the
// scalar loop's bits, whatever the blocking (partial sums are parked in
// FP32).  dpbf16 (BF16, AVX512_BF16) runs only when no product or partial
// sum can be subnormal (the instruction flushes them) and M > 4;
// matmul_call takes the FMA path otherwise.  fma512 with M <= 4 streams B
// unpacked (decode).
enum class MatmulPath { scalar, fma256, fma512, dpbf16 };

// The best path this CPU has for inputs in format f.
MatmulPath best_matmul_path(Format f);
const char* name(MatmulPath p);

// The op on one call by path p (a, b and y row-major with contiguous rows).
// `guard` false runs dpbf16 even where it flushes (the daz mutant).
void matmul_call(const KernelCall& c, MatmulPath p, bool guard = true);
// y = a b into a preallocated y (its format the output option): the kernel
// as a building block of other kernels (the router's logits, MoE experts,
// FP8 blocks).
void matmul_into(const TensorView& a, const TensorView& b, const TensorView& y, MatmulPath p);

// True when vdpbf16ps cannot meet a subnormal on these BF16 operands: the
// smallest exponents of their nonzero finite entries sum to >= -112, so
// every product and every partial sum is 0 or a multiple of 2^-126.
bool dpbf16_exact_range(const TensorView& a, const TensorView& b);

}  // namespace cpu
}  // namespace conform
