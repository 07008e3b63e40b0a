// CPU INT8 kernels (family `int8`, docs/int8.md "Kernels"): symmetric
// quantization (op `quantize`) and the INT8 x INT8 GEMM with INT32
// accumulation and dequantization by the outer product of scales (op
// `int8_gemm`), and their mutants.
#pragma once
#include <cstdint>
#include <vector>

#include "impls/registry.hpp"

namespace conform {

void register_cpu_int8(Registry& r);        // impls/cpu/int8_gemm.cpp
void register_cpu_int8_quant(Registry& r);  // impls/cpu/int8_quant.cpp: dequantize, smooth_quant
void register_mutants_int8(Registry& r);  // impls/mutants/int8.cpp

namespace cpu {

// The ways real quantizers go wrong, as switches; all off is the scalar
// quantize kernel.  The mutants turn on one each.
struct QuantizeFlaws {
    enum class Rounding { half_even, half_away, truncate } rounding = Rounding::half_even;
    bool wrap = false;             // int8 wraparound instead of saturation
    bool amax_wrong_axis = false;  // per-token scales from column maxima (and vice versa)
    bool token_is_tensor = false;  // "per-token" scales that are one per-tensor scale
};

// The quantize op on one call (x [rows, cols] -> q, scale), scalar.
void quantize_scalar(const KernelCall& c, const QuantizeFlaws& flaws = {});
// The same by AVX2 (simd, when available; the scalar loop otherwise).
void quantize_call(const KernelCall& c, bool simd);

// And the GEMM's.
struct GemmFlaws {
    bool int16_acc = false;       // accumulation in saturating INT16 lanes
    bool maddubs = false;         // a + 128 as u8 times b as s8, pair sums saturated to INT16 (vpmaddubsw), corrected by -128 colsum(b)
    bool scale_a_tensor = false;  // scale_a[0] for every row (per-token scales read as per-tensor)
};

// acc [M, N] = a [M, K] b [K, N] in INT32, row-major: exact for K < 2^17
// (|acc| <= K 2^14 < 2^31; at K = 2^17 all-(-128) operands reach 2^31).
void int8_matmul_scalar(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                        std::int64_t n, const GemmFlaws& flaws = {});
// The same with AVX2 (sign-extended int16 pairs, vpmaddwd); requires has_avx2().
void int8_matmul_avx2(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                      std::int64_t n);

// The same by vpdpbusd (impls/cpu/int8_vnni.cpp; b shifted to u8, the
// shift taken back by -128 rowsum(a)); requires has_avx512_vnni() or
// has_avx_vnni().  Bit-identical to the scalar loop for K < 2^17.
void int8_matmul_vnni512(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                         std::int64_t n);
void int8_matmul_vnni256(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                         std::int64_t n);
// The same on AMX-INT8 tiles (impls/cpu/int8_amx.cpp; tdpbssd, signed by
// signed): int8_matmul_amx requires has_amx_int8(); the emulated twin runs
// the same tiling with the tile instructions done in C++ (any CPU, tests).
void int8_matmul_amx(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                     std::int64_t n);
void int8_matmul_amx_emulated(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m,
                              std::int64_t k, std::int64_t n);
// The fastest path the CPU has: AMX-INT8, AVX-512 VNNI, AVX-VNNI, AVX2.
void int8_matmul_simd(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                      std::int64_t n);

// b [K, N] packed once for the AVX2 product (weights are packed ahead of
// time): int16 pairs (b[2p][j], b[2p+1][j]) by blocks of 16 columns, N
// padded to 16 with zeros.
struct PackedInt8B {
    std::int64_t k = 0, n = 0, np = 0;
    std::vector<std::int16_t> pairs;
};
PackedInt8B pack_int8_b(const std::int8_t* b, std::int64_t k, std::int64_t n);
void int8_matmul_avx2_packed(const std::int8_t* a, const PackedInt8B& b, std::int32_t* acc, std::int64_t m);

// The int8_gemm call's shapes (int8 a [M, K], b [K, N], K < 2^17, scales
// [1] or per row / column), or std::invalid_argument naming what is wrong;
// the CUDA kernel checks its calls with it too.
void check_gemm(const KernelCall& c, std::int64_t& m, std::int64_t& k, std::int64_t& n);

// The int8_gemm op on one call: the product by int8_matmul_simd (simd)
// or the scalar loop (with any flaws), then y = acc * scale_a[i] * scale_b[j]
// in double (no intermediate overflow), rounded once into y's format.
void int8_gemm_call(const KernelCall& c, bool simd, const GemmFlaws& flaws = {});

// The dequantize op (q, scale -> y = q scale, one rounding), scalar;
// `wrong_axis` is the mutant's broadcast of the scale vector along the other axis.
void dequantize_scalar(const KernelCall& c, bool wrong_axis = false);

// The smooth_quant op (x, w -> xs, ws, s), scalar double arithmetic;
// `inverted` is the mutant's s_j = max|w_j|^(1 - alpha) / max|x_j|^alpha.
void smooth_quant_scalar(const KernelCall& c, bool inverted = false);

}  // namespace cpu
}  // namespace conform
