// Run-time choice between the AVX-512, AVX2 and portable scalar paths.
// CONFORM_ISA in the environment caps the choice: "avx2" keeps the AVX2 paths
// on an AVX-512 machine, "scalar" forces the scalar path (tests use the
// separately registered scalar kernels instead; the variable is for users).
// Only some kernels have an AVX-512 path.  These give the AVX2 path's bits:
// the 16-bit activation and gated tables (16-lane gathers instead of scalar
// table reads), FP32 swiglu and swiglu_clamp (float-float in 16 lanes), the
// double path in 8 lanes where an FP32 kernel takes it, and the bf16 and
// fp16 norms (16 lanes, where the CPU also has AVX512_BF16; bf16 rounded in
// one instruction).  FP32 sigmoid, silu, gelu_erf, gelu_tanh, softplus, geglu
// and situ_glu (default caps) have their own 16-lane table kernels instead
// (run_lanes16, docs/activation.md and gated.md §4: own proofs, other bits
// within the same 1-ulp budget).  The rest use AVX2 there.
#pragma once

namespace conform::cpu {

bool has_avx2();          // AVX2 + FMA + F16C, and not disabled by CONFORM_ISA
bool has_avx512();        // has_avx2() + AVX-512 F/BW/VL/DQ, not capped by CONFORM_ISA or Avx2Only
bool has_avx512_bf16();   // has_avx512() + AVX512_BF16 (vcvtneps2bf16)
bool has_avx512_vnni();   // has_avx512() + AVX512_VNNI (vpdpbusd on 512 bits)
bool has_avx_vnni();      // has_avx2() + AVX-VNNI (vpdpbusd, VEX, 256 bits)
bool has_amx_int8();      // has_avx512() + AMX-TILE/AMX-INT8, and the OS grants the tile data (Linux)
const char* isa_name();   // "avx512", "avx2" or "scalar"

// While one is alive, has_avx512() answers false, so a test can run the AVX2
// path of a kernel beside its AVX-512 path on the same machine.  Not for
// concurrent use with kernels on other threads.
class Avx2Only {
public:
    Avx2Only();
    ~Avx2Only();
    Avx2Only(const Avx2Only&) = delete;
    Avx2Only& operator=(const Avx2Only&) = delete;
};

}  // namespace conform::cpu
