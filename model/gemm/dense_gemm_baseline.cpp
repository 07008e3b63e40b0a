// The dense products built for baseline (model/gemm/dense_gemm_isa.inc; flags in CMakeLists.txt).
#define CONFORM_GEMM_NS baseline
#include "model/gemm/dense_gemm_isa.inc"
