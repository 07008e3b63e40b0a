// Run-time choice between the AVX2 path and the portable scalar path.
// CONFORM_ISA=scalar in the environment forces the scalar path (tests use the
// separately registered scalar kernels instead; the variable is for users).
#pragma once

namespace conform::cpu {

bool has_avx2();          // AVX2 + FMA + F16C, and not disabled by CONFORM_ISA
const char* isa_name();   // "avx2" or "scalar"

}  // namespace conform::cpu
