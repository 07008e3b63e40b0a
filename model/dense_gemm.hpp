// Dense row-major products for the model's FP64 tier and kernel executor:
// Y [T x N] = X [T x K] . W [N x K]^T.  Eigen's GEMM, built three times --
// for the baseline x86-64, AVX2 + FMA and AVX-512 -- and chosen at run time
// by what the CPU has (cpu::has_avx2 / has_avx512, which CONFORM_ISA caps):
// Eigen picks its vector width when it is compiled, and the portable build
// alone runs the FP64 tier of a width-4096 model at SSE2 speed.  Any
// summation order is within the bounds that use these products (gamma_K
// |x| |W|^T holds for every order; an FMA rounds once where a multiply and
// an add round twice).
#pragma once
#include <cstdint>

namespace conform::model {

void gemm_xwt(const double* x, const double* w, double* y, std::int64_t T, std::int64_t K, std::int64_t N);
void gemm_xwt(const float* x, const float* w, float* y, std::int64_t T, std::int64_t K, std::int64_t N);
// |X| |W|^T, the magnitudes a matmul's error bound sums.
void gemm_abs_xwt(const double* x, const double* w, double* y, std::int64_t T, std::int64_t K, std::int64_t N);
const char* gemm_isa();  // "avx512", "avx2" or "baseline": the build gemm_xwt runs
// One build by name, for the tests (call only a build the CPU can run).
void gemm_xwt(const char* isa, const double* x, const double* w, double* y, std::int64_t T, std::int64_t K, std::int64_t N);

}  // namespace conform::model
