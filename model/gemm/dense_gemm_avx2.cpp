// The dense products built for avx2 (model/gemm/dense_gemm_isa.inc; flags in CMakeLists.txt).
#define CONFORM_GEMM_NS avx2
#include "model/gemm/dense_gemm_isa.inc"
