// The dense products built for avx512 (model/gemm/dense_gemm_isa.inc; flags in CMakeLists.txt).
#define CONFORM_GEMM_NS avx512
#include "model/gemm/dense_gemm_isa.inc"
